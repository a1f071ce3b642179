// The batch API of the JavaScript SDK, for tests/sdk_state.rs: the same logic as
// ../batch-tour-python/operator.py (see its docstring), with `emitMany` of parallel arrays,
// `getAll` and `setAll` (arrays indexed by `batch.slots`), `batch.focus` and `getMany`.

import { Operator, WeirError, exportOperator, utf8Decode } from "./weir.js";

/** When each key's timer is due: past every record, so it fires at the end of input. */
const END = 1e12;
const TAG = 7;

class Tour extends Operator {
  open(ctx) {
    this.split = ctx.config.role === "split";
    if (!this.split) {
      this.sum = ctx.valueState("sum");
      this.seen = ctx.mapState("seen");
      this.history = ctx.listState("history");
      this.timers = ctx.timers();
    }
  }

  processBatch(batch, out) {
    check(batch);
    if (this.split) {
      const keys = [];
      const values = [];
      for (let i = 0; i < batch.length; i++) {
        const [key, value] = batch.valueStr(i).split(" ");
        keys.push(key);
        values.push(value);
      }
      out.emitMany(keys, values);
      return;
    }
    misuse(this, batch);
    const sums = this.sum.getAll(0);
    const numbers = [];
    for (let i = 0; i < batch.length; i++) numbers.push(Number(batch.valueStr(i)));
    const prior = this.seen.getMany(batch.slots, numbers, 0);
    const lengths = this.history.getMany([...Array(batch.slotCount).keys()]).map((items) => items.length);
    const counts = new Map();
    const firstOf = new Map();
    const keys = batch.keys();
    const lines = [];
    for (let i = 0; i < batch.length; i++) {
      const slot = batch.slots[i];
      const word = batch.keyStr(i);
      // Slots number the keys in order of first appearance.
      if (!firstOf.has(word)) firstOf.set(word, firstOf.size);
      if (firstOf.get(word) !== slot) throw new WeirError(`key ${word} has slot ${slot}`);
      const before = sums[slot];
      const number = numbers[i];
      if (number !== 0) sums[slot] = before + number;
      const pair = `${slot} ${number}`;
      const seen = counts.has(pair) ? counts.get(pair) : prior[i];
      counts.set(pair, seen + 1);
      batch.focus(slot);
      this.history.push(number);
      lengths[slot]++;
      this.timers.registerEventTime(END, TAG);
      let history = "-";
      if (number === 0) {
        history = lengths[slot];
        if (this.history.get().length !== history) throw new WeirError(`get and getMany differ for ${word}'s list`);
        // The map's writes go out after the loop: `get` still reads what was stored.
        if (this.seen.get(number, 0) !== prior[i]) throw new WeirError(`get and getMany differ for ${word}`);
      }
      lines.push(`${word}|${before}|${sums[slot]}|${seen}|${history}`);
    }
    for (const [pair, seen] of counts) {
      const [slot, number] = pair.split(" ").map(Number);
      batch.focus(slot);
      this.seen.put(number, seen);
    }
    this.sum.setAll(sums);
    out.emitMany(keys, lines);
  }

  onTimer(timer, out) {
    if (timer.tag !== TAG || timer.timestamp !== END || timer.domain !== "event") {
      throw new WeirError(`unexpected timer ${timer.tag} at ${timer.timestamp}`);
    }
    const key = timer.keyStr();
    out.emit(key, `${key}|end|${this.sum.get(0)}`);
  }
}

/** Per-key calls before `focus`, slots and arrays not of this batch are refused, saying why. */
function misuse(tour, batch) {
  const state = tour.sum;
  const cases = [
    [() => state.get(), "first choose the key with batch.focus(slot)"],
    [() => tour.seen.put(1, 1), "first choose the key with batch.focus(slot)"],
    [() => tour.timers.registerEventTime(END, TAG), "batch.focus(slot)"],
    [() => batch.focus(10000), "a slot is a number of batch.slots"],
    [() => tour.seen.getMany([0], []), "one key per slot"],
    [() => tour.seen.getMany([10000], [1]), "key slot 10000 does not exist"],
    [() => state.setAll(new Array(10000).fill(0)), "one value per key of the batch"],
  ];
  for (const [call, needs] of cases) {
    let message = null;
    try {
      call();
    } catch (e) {
      message = String(e.message);
    }
    if (message === null || !message.includes(needs)) {
      throw new WeirError(`expected an error with ${JSON.stringify(needs)}, got ${message}`);
    }
  }
}

/** The views agree with the raw columns. */
function check(batch) {
  let start = 0;
  for (let i = 0; i < batch.length; i++) {
    const keyEnd = batch.keyEnds[i];
    const valueEnd = batch.valueEnds[i];
    const flags = batch.flags[i];
    const key = flags & 1 ? utf8Decode(batch.data, start, keyEnd) : null;
    const value = utf8Decode(batch.data, keyEnd, valueEnd);
    const keyView = batch.key(i);
    if (batch.keyStr(i) !== key || (keyView === null ? null : utf8Decode(keyView)) !== key || batch.valueStr(i) !== value) {
      throw new WeirError(`record ${i}: views differ from the columns`);
    }
    if ((batch.timestamp(i) === null) !== ((flags & 2) === 0)) {
      throw new WeirError(`record ${i}: flags ${flags}, timestamp ${batch.timestamp(i)}`);
    }
    start = valueEnd;
  }
  if (batch.keys().length !== batch.length || batch.values().length !== batch.length) {
    throw new WeirError("keys() or values() has the wrong length");
  }
}

export const processor = exportOperator(Tour);
