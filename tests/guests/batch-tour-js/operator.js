// The batch API of the JavaScript SDK, for tests/sdk_state.rs: the same logic as
// ../batch-tour-python/operator.py (see its docstring), with `emitMany` of parallel arrays,
// `getAll` and `setAll` (arrays indexed by `batch.slots`).

import { Operator, WeirError, exportOperator, utf8Decode } from "./weir.js";

class Tour extends Operator {
  open(ctx) {
    this.split = ctx.config.role === "split";
    if (!this.split) this.sum = ctx.valueState("sum");
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
    misuse(this.sum);
    const sums = this.sum.getAll(0);
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
      const number = Number(batch.valueStr(i));
      if (number !== 0) sums[slot] = before + number;
      lines.push(`${word}|${before}|${sums[slot]}`);
    }
    this.sum.setAll(sums);
    out.emitMany(keys, lines);
  }
}

/** The per-record state calls and arrays of the wrong length are refused, saying why. */
function misuse(state) {
  const cases = [
    [() => state.get(), "in processBatch, read and write value state"],
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
