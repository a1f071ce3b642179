// Event-time windows for Weir operators: tumbling, sliding (hopping) and session windows, per
// record key, with allowed lateness and an incremental aggregate, built on map state and
// event-time timers (the operator's own state: nothing runs in the host).
//
//     import { Operator, exportOperator } from "./weir.js";
//     import * as windows from "./windows.js";
//
//     class PageCounts extends Operator {
//       open(ctx) {
//         this.win = windows.tumbling(ctx, "per-page", {
//           sizeMs: 60_000,
//           aggregate: windows.count(),
//           allowedLatenessMs: 0,
//           onFire: (key, start, end, result, out) =>
//             out.emitJson(key, { page: windows.keyText(key), start, end, count: result }),
//         });
//       }
//       process(record, out) { this.win.add(record, out); }
//       onTimer(timer, out) {
//         if (!this.win.onTimer(timer, out)) { /* one of the operator's own timers */ }
//       }
//     }
//
//     export const processor = exportOperator(PageCounts);
//
// `tumbling(ctx, name, { sizeMs, aggregate, onFire, allowedLatenessMs = 0 })`,
// `sliding(ctx, name, { sizeMs, slideMs, aggregate, onFire, allowedLatenessMs = 0 })` and
// `session(ctx, name, { gapMs, aggregate, onFire, allowedLatenessMs = 0 })` make a window set
// in `open`; `name` names its state and timers (unique per operator). Aggregates: `count()`,
// `sum(value)`, `min(value)`, `max(value)`, `reduce(fn, value)`.
//
// Semantics (those of Flink's event-time windows):
//
// - A window is the interval [start, end) of event time, in milliseconds. Tumbling: the
//   window of a record at `ts` starts at `ts - (ts mod sizeMs)` (floored, also for negative
//   timestamps). Sliding: every window of length `sizeMs` whose start is a multiple of
//   `slideMs` and that contains `ts`. Session: a record opens [ts, ts + gapMs); the sessions
//   of a key that intersect or touch ([a, b) and [b, c)) merge into one, their accumulators
//   merged.
// - Windows are per key: `add` puts a record into the windows of `record.key`, and `onFire`
//   receives that key (a Uint8Array valid during the call: copy it with `.slice()` to keep
//   it). Records need a key (state is keyed) and a timestamp (`add` throws a `WeirError` for
//   a record without one).
// - A window fires when the watermark reaches `end - 1`: `onFire(key, start, end, result,
//   out)` is called from `onTimer` with the aggregate of the window's records.
// - `allowedLatenessMs` (default 0) keeps a window's state until the watermark reaches
//   `end - 1 + allowedLatenessMs`. A record that comes after its window fired but within the
//   lateness updates the window, which fires again at once with the updated result (from
//   `add`, so `out` is the emitter of `process`). A record that is late for all of its
//   windows (the watermark is at or past their `end - 1 + allowedLatenessMs`) is dropped and
//   counted in the window set's `droppedLate` (a property of the instance, in memory only: not
//   checkpointed, and a batch that fails and is processed again counts again).
//
// Aggregates are incremental: a window keeps one accumulator (a JSON value), never its
// records. `sum`, `min`, `max` and `reduce` take an optional `value(record)` extractor, by
// default the record's value parsed as JSON (`record.valueJson()`). A `reduce` function
// `fn(acc, value) -> acc` must also accept two accumulators, and be associative: it merges
// sessions (`fn(earlierSession, laterSession)`), and its accumulator is the value itself (the
// first value of a window is its accumulator).
//
// Cost per record: a tumbling window is one map `put` (plus one or two timer registrations for
// the window's first record); a sliding window is that per window of the record. Tumbling and
// sliding windows read the entries of all the windows a batch's records (or its fired timers)
// reach in one host call (`MapState.getMany`), at their first use in the batch. A session
// reads the sessions of the record's key (one `entries`), and a session's timer those of its
// key.
//
// State and timers, for those who read checkpoints or mix their own timers in: the same as
// the Python SDK's `weir_sdk.windows`. A window set named `name` keeps a map state
// `window:${name}`, one per key, from the window's start (19 zero-padded decimal digits;
// below zero, `-` then the digits of 10^19 + start, so that the map's byte order is the order
// of starts) to `[accumulator, fired]` (tumbling, sliding) or `[end, accumulator, fired]`
// (sessions). Its event-time timers carry the tags `fireTag = 0xFFFF0000 | hash15(name) << 1`
// (at `end - 1`) and `fireTag | 1` (at `end - 1 + allowedLatenessMs`, when the lateness is not
// 0), where `hash15` folds the 32-bit FNV-1a hash of the UTF-8 name to 15 bits: keep the
// operator's own timer tags below `0xFFFF0000` (`TAG_BASE`) and they are never taken for a
// window's. `onTimer` returns false for a timer that is not the window set's; two window sets
// of one operator whose names hash alike are refused in `open` (rename one).
//
// From `./weir.js` this module uses `WeirError`, `utf8Encode` and `utf8Decode`; from the
// context, `ctx.mapState(name)` and `ctx.timers()` (`registerEventTime`, `deleteEventTime`,
// `watermark`); from records `key`, `timestamp` and `valueJson()`; from timers `key`,
// `timestamp`, `tag` and `domain`.

import { WeirError, batchRows, countDroppedLate, keySlot, s64At, utf8Decode, utf8Encode } from "./weir.js";

/** The first timer tag reserved for windows; the operator's own timers keep below it. */
export const TAG_BASE = 0xffff0000;

// ---------------------------------------------------------------------------------------------
// Aggregates

/** How a window folds its records: `value(record)` extracts a record's value once per record
 * (whatever the number of its windows), and `combine(acc, value)` folds it into the window's
 * accumulator, the first value being the first accumulator. `combine` also merges two
 * accumulators (sessions), so it must accept them and be associative. Make one with `count`,
 * `sum`, `min`, `max` or `reduce`. */
export class Aggregate {
  constructor(name, value, combine) {
    if (typeof value !== "function") {
      throw new TypeError(`${name}: value is a function value(record), not ${typeof value}`);
    }
    if (typeof combine !== "function") {
      throw new TypeError(`${name}: the reduce function is a function fn(acc, value), not ${typeof combine}`);
    }
    this.name = name;
    this.value = value;
    this.combine = combine;
  }
}

const jsonValue = (record) => record.valueJson();
const one = () => 1;
const add2 = (a, b) => a + b;
const min2 = (a, b) => (b < a ? b : a);
const max2 = (a, b) => (b > a ? b : a);

/** The number of records of the window. */
export function count() {
  return new Aggregate("count", one, add2);
}

/** The sum of `value(record)` (default: the record's value as JSON) over the window. */
export function sum(value = jsonValue) {
  return new Aggregate("sum", value ?? jsonValue, add2);
}

/** The least `value(record)` (default: the record's value as JSON) of the window. */
export function min(value = jsonValue) {
  return new Aggregate("min", value ?? jsonValue, min2);
}

/** The greatest `value(record)` (default: the record's value as JSON) of the window. */
export function max(value = jsonValue) {
  return new Aggregate("max", value ?? jsonValue, max2);
}

/** `fn(acc, value) -> acc` folded over `value(record)` (default: the record's value as JSON),
 * the window's first value being its first accumulator. `fn` must also merge two accumulators
 * (sessions call `fn(earlier, later)`) and be associative. */
export function reduce(fn, value = jsonValue) {
  return new Aggregate("reduce", value ?? jsonValue, fn);
}

// ---------------------------------------------------------------------------------------------
// Window keys and tags

/** The map key of the window starting at `start`: text whose byte order is the numeric order
 * of starts (19 zero-padded digits; below zero, `-` and the digits of 10^19 + start, written
 * as the nines' complement of -start - 1 so that it is exact for any safe integer). */
export function windowKey(start) {
  if (start >= 0) return String(start).padStart(19, "0");
  const digits = String(-start - 1).padStart(19, "0");
  let text = "-";
  // "0" + "9" is 105: each digit d becomes 9 - d.
  for (let i = 0; i < 19; i++) text += String.fromCharCode(105 - digits.charCodeAt(i));
  return text;
}

/** The start a `windowKey` encodes. */
export function windowStart(key) {
  if (key.charCodeAt(0) !== 45) return Number(key);
  let digits = "";
  for (let i = 1; i < key.length; i++) digits += String.fromCharCode(105 - key.charCodeAt(i));
  return -Number(digits) - 1;
}

/** A key (Uint8Array) as text (UTF-8), as `record.keyStr()` does: for `onFire`, whose key is
 * a record's or a timer's. */
export function keyText(key) {
  return key === null ? null : utf8Decode(key);
}

/** The 32-bit FNV-1a hash of the UTF-8 `name`, folded to 15 bits. */
function nameHash15(name) {
  let h = 0x811c9dc5;
  for (const b of utf8Encode(name)) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return (h ^ (h >>> 15) ^ (h >>> 30)) & 0x7fff;
}

/** The window sets of each operator instance's context: tag -> name. */
const windowSets = new WeakMap();

function positive(what, value) {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new RangeError(`${what} is a positive integer (milliseconds), not ${String(value)}`);
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// Window sets

/** A window set: the windows of one assigner (tumbling, sliding or session) with one
 * aggregate and one `onFire`, keyed by the record key. Make it in `open` with `tumbling`,
 * `sliding` or `session`; then call `add(record, out)` from `process` and
 * `onTimer(timer, out)` from the operator's `onTimer`.
 *
 * Properties: `name`, `aggregate`, `allowedLatenessMs`, `fireTag` (the tag of its timers at
 * `end - 1`; `cleanupTag`, `fireTag | 1`, is the tag of its timers at
 * `end - 1 + allowedLatenessMs`), `droppedLate` (records dropped as too late, by this
 * instance). */
export class Windows {
  constructor(ctx, name, { aggregate, onFire, allowedLatenessMs = 0 } = {}) {
    if (typeof name !== "string" || name === "") {
      throw new TypeError(`a window set's name is a non-empty string, not ${String(name)}`);
    }
    if (!(aggregate instanceof Aggregate)) {
      throw new TypeError(
        `window set \`${name}\`: aggregate is one of windows.count(), sum(), min(), max(), reduce(fn), not ${String(aggregate)}`,
      );
    }
    if (typeof onFire !== "function") {
      throw new TypeError(`window set \`${name}\`: onFire is a function onFire(key, start, end, result, out)`);
    }
    if (!Number.isSafeInteger(allowedLatenessMs) || allowedLatenessMs < 0) {
      throw new RangeError(
        `window set \`${name}\`: allowedLatenessMs is an integer >= 0 (milliseconds), not ${String(allowedLatenessMs)}`,
      );
    }
    this.name = name;
    this.aggregate = aggregate;
    this.allowedLatenessMs = allowedLatenessMs;
    this.fireTag = (TAG_BASE | (nameHash15(name) << 1)) >>> 0;
    this.cleanupTag = (this.fireTag | 1) >>> 0;
    this.droppedLate = 0;
    this._onFire = onFire;
    this._value = aggregate.value;
    this._combine = aggregate.combine;
    // Window sets of this operator instance: names and tags must not collide.
    let taken = windowSets.get(ctx);
    if (taken === undefined) {
      taken = new Map();
      windowSets.set(ctx, taken);
    }
    for (const other of taken.values()) {
      if (other === name) {
        throw new WeirError(`window set \`${name}\` is declared twice; give each window set its own name`);
      }
    }
    const other = taken.get(this.fireTag);
    if (other !== undefined) {
      throw new WeirError(
        `window sets \`${other}\` and \`${name}\` would share timer tags (their names hash alike); rename one of them`,
      );
    }
    taken.set(this.fireTag, name);
    this._state = ctx.mapState(`window:${name}`);
    this._timers = ctx.timers();
  }

  _timestamp(record) {
    const ts = record.timestamp;
    if (ts === null || ts === undefined) {
      throw new WeirError(
        `window set \`${this.name}\`: a record without timestamp has no event-time window; give the records timestamps at the source, or drop them before add()`,
      );
    }
    return ts;
  }

  /** Puts `record` into its windows (of its key); a window that already fired, within the
   * allowed lateness, fires again at once into `out`. Returns true if the record went into a
   * window, false if not: dropped as too late for all of its windows (and counted in
   * `droppedLate`), or, for sliding windows whose slide exceeds their size, between windows.
   * Throws a `WeirError` for a record without timestamp. */
  add(record, out) {
    throw new WeirError("Windows.add is implemented by the window sets tumbling, sliding and session make");
  }

  /** Handles `timer` if it is one of this window set's (firing or dropping a window of
   * `timer.key`) and returns true; returns false for any other timer. */
  onTimer(timer, out) {
    const tag = timer.tag;
    if ((tag !== this.fireTag && tag !== this.cleanupTag) || timer.domain !== "event") return false;
    if (tag === this.fireTag) this._fireTimer(timer.key, timer.timestamp, out);
    else this._cleanupTimer(timer.timestamp);
    return true;
  }

  // The timers of window [start, end): `fireTag` at end - 1 fires it (and drops it when the
  // lateness is 0); `cleanupTag` at end - 1 + lateness drops it.

  _register(end, fire) {
    if (fire) this._timers.registerEventTime(end - 1, this.fireTag);
    if (this.allowedLatenessMs) this._timers.registerEventTime(end - 1 + this.allowedLatenessMs, this.cleanupTag);
  }

  _delete(end) {
    this._timers.deleteEventTime(end - 1, this.fireTag);
    if (this.allowedLatenessMs) this._timers.deleteEventTime(end - 1 + this.allowedLatenessMs, this.cleanupTag);
  }
}

/** Tumbling (slide === size) and sliding windows: fixed length, aligned starts. */
class AlignedWindows extends Windows {
  constructor(ctx, name, sizeMs, slideMs, options) {
    super(ctx, name, options);
    this.sizeMs = sizeMs;
    this.slideMs = slideMs;
    // The read-ahead: Map from `slot start` to the entry (or null: none) of the windows the
    // batch's records (or fired timers) reach, read in one `getMany` at the set's first use in
    // the batch (`_generation`), and kept up to date with the set's own writes (the map state
    // is the set's alone), so a record reads its windows without a host call. Each read would
    // otherwise also send the writes queued before it: two calls a record.
    this._ahead = null;
    this._generation = -1;
  }

  /** The read-ahead of the current batch (null outside a batch). */
  _readAhead() {
    const [generation, rows] = batchRows();
    if (generation === this._generation) return this._ahead;
    this._generation = generation;
    this._ahead = null;
    if (rows === null) return null;
    const size = this.sizeMs;
    const slide = this.slideMs;
    const lateness = this.allowedLatenessMs;
    const slots = [];
    const starts = [];
    const seen = new Set();
    const want = (slot, start) => {
      const at = `${slot} ${start}`;
      if (!seen.has(at)) {
        seen.add(at);
        slots.push(slot);
        starts.push(start);
      }
    };
    if (!rows.timers) {
      const watermark = this._timers.watermark() ?? null;
      for (let i = 0; i < rows.slots.length; i++) {
        if (rows.flags[i] !== 3) continue; // a record needs a key and a timestamp (flags 1 | 2)
        const ts = s64At(rows.timestamps, i);
        const rem = ts % slide;
        for (let start = rem < 0 ? ts - rem - slide : ts - rem; start > ts - size; start -= slide) {
          if (watermark === null || watermark < start + size - 1 + lateness) want(rows.slots[i], start);
        }
      }
    } else if (rows.clock === "event") {
      for (let i = 0; i < rows.slots.length; i++) {
        if (rows.tags[i] === this.fireTag) want(rows.slots[i], s64At(rows.timestamps, i) + 1 - size);
      }
    }
    const ahead = new Map();
    if (slots.length > 0) {
      const found = this._state.getMany(slots, starts.map(windowKey), null);
      for (let i = 0; i < slots.length; i++) ahead.set(`${slots[i]} ${starts[i]}`, found[i]);
    }
    this._ahead = ahead;
    return ahead;
  }

  /** The current key's window at `start` (undefined if none), and its place in the
   * read-ahead (null when there is none). */
  _entry(start) {
    const ahead = this._readAhead();
    if (ahead !== null) {
      const at = `${keySlot()} ${start}`;
      const entry = ahead.get(at);
      if (entry !== undefined) return [entry === null ? undefined : entry, at];
      return [this._state.get(windowKey(start)), at];
    }
    return [this._state.get(windowKey(start)), null];
  }

  _put(start, entry, at) {
    this._state.put(windowKey(start), entry);
    if (at !== null) this._ahead.set(at, entry);
  }

  add(record, out) {
    const ts = this._timestamp(record);
    const size = this.sizeMs;
    const slide = this.slideMs;
    const lateness = this.allowedLatenessMs;
    const watermark = this._timers.watermark() ?? null;
    // The last window of the record starts at the last multiple of the slide <= ts (% keeps
    // the sign of ts: floored by hand); the earlier ones a slide apart.
    const rem = ts % slide;
    let start = rem < 0 ? ts - rem - slide : ts - rem;
    let accepted = false;
    let late = false;
    let value;
    let key;
    for (; start > ts - size; start -= slide) {
      const end = start + size;
      if (watermark !== null && watermark >= end - 1 + lateness) {
        late = true;
        continue;
      }
      if (!accepted) {
        accepted = true;
        value = this._value(record);
        key = record.key;
      }
      this._add(key, start, end, value, watermark, out);
    }
    // Too late for all of its windows; or, between sliding windows (slideMs > sizeMs), in
    // none: not late, not counted.
    if (!accepted && late) {
      this.droppedLate++;
      countDroppedLate(1);
    }
    return accepted;
  }

  _add(key, start, end, value, watermark, out) {
    const [entry, at] = this._entry(start);
    if (entry === undefined) {
      if (watermark === null || watermark < end - 1) {
        this._put(start, [value, 0], at);
        this._register(end, true);
      } else {
        // A new window, already due but within the lateness: it fires now.
        this._put(start, [value, 1], at);
        this._register(end, false);
        this._onFire(key, start, end, value, out);
      }
    } else {
      const acc = this._combine(entry[0], value);
      const fired = entry[1];
      this._put(start, [acc, fired], at);
      if (fired) this._onFire(key, start, end, acc, out);
    }
  }

  _fireTimer(key, timestamp, out) {
    const end = timestamp + 1;
    const start = end - this.sizeMs;
    const [entry, at] = this._entry(start);
    if (entry === undefined || entry[1]) return;
    const acc = entry[0];
    if (this.allowedLatenessMs) {
      this._put(start, [acc, 1], at);
    } else {
      this._state.remove(windowKey(start));
      if (at !== null) this._ahead.set(at, null);
    }
    this._onFire(key, start, end, acc, out);
  }

  _cleanupTimer(timestamp) {
    const start = timestamp + 1 - this.allowedLatenessMs - this.sizeMs;
    this._state.remove(windowKey(start));
    if (this._readAhead() !== null) this._ahead.set(`${keySlot()} ${start}`, null);
  }
}

/** Session windows: [ts, ts + gap) per record, merged while they intersect or touch. */
class SessionWindows extends Windows {
  constructor(ctx, name, gapMs, options) {
    super(ctx, name, options);
    this.gapMs = gapMs;
  }

  add(record, out) {
    const ts = this._timestamp(record);
    const state = this._state;
    const lateness = this.allowedLatenessMs;
    const watermark = this._timers.watermark() ?? null;
    let start = ts;
    let end = ts + this.gapMs;
    // The sessions the new one merges with (sessions of a key are disjoint and apart, in the
    // order of their starts): [start, mapKey, [end, acc, fired]].
    const merged = [];
    for (const [mapKey, entry] of state.entries()) {
      if (entry[0] < start) continue;
      const sStart = windowStart(mapKey);
      if (sStart > end) break;
      merged.push([sStart, mapKey, entry]);
    }
    if (merged.length > 0) {
      start = Math.min(start, merged[0][0]);
      end = Math.max(end, merged[merged.length - 1][2][0]);
    }
    if (watermark !== null && watermark >= end - 1 + lateness) {
      this.droppedLate++;
      countDroppedLate(1);
      return false;
    }
    const value = this._value(record);
    const combine = this._combine;
    if (merged.length === 1 && merged[0][0] === start && merged[0][2][0] === end) {
      // Within one session: it grows by the value, and fires again if it fired.
      const [, mapKey, [, old, fired]] = merged[0];
      const acc = combine(old, value);
      state.put(mapKey, [end, acc, fired]);
      if (fired) this._onFire(record.key, start, end, acc, out);
      return true;
    }
    let acc;
    let first = true;
    let pending = false; // a fire timer at end - 1 that has not fired
    for (const [sStart, mapKey, [sEnd, sAcc, sFired]] of merged) {
      acc = first ? sAcc : combine(acc, sAcc);
      first = false;
      if (sStart !== start) state.remove(mapKey);
      if (sEnd !== end) this._delete(sEnd);
      else if (!sFired) pending = true;
    }
    acc = first ? value : combine(acc, value);
    const fireNow = watermark !== null && watermark >= end - 1 && !pending;
    state.put(windowKey(start), [end, acc, fireNow ? 1 : 0]);
    this._register(end, !fireNow);
    if (fireNow) this._onFire(record.key, start, end, acc, out);
    return true;
  }

  _fireTimer(key, timestamp, out) {
    const end = timestamp + 1;
    const state = this._state;
    for (const [mapKey, entry] of state.entries()) {
      if (entry[0] !== end) continue;
      if (entry[2]) return;
      const acc = entry[1];
      if (this.allowedLatenessMs) state.put(mapKey, [end, acc, 1]);
      else state.remove(mapKey);
      this._onFire(key, windowStart(mapKey), end, acc, out);
      return;
    }
  }

  _cleanupTimer(timestamp) {
    const end = timestamp + 1 - this.allowedLatenessMs;
    const state = this._state;
    for (const [mapKey, entry] of state.entries()) {
      if (entry[0] === end) {
        state.remove(mapKey);
        return;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The window sets

/** Tumbling windows of `sizeMs` ms: [k * sizeMs, (k + 1) * sizeMs). Call in `open`; `name`
 * names its state and timers (unique per operator). `onFire(key, start, end, result, out)` is
 * called when a window fires. */
export function tumbling(ctx, name, { sizeMs, aggregate, onFire, allowedLatenessMs = 0 } = {}) {
  positive("sizeMs", sizeMs);
  return new AlignedWindows(ctx, name, sizeMs, sizeMs, { aggregate, onFire, allowedLatenessMs });
}

/** Sliding (hopping) windows of `sizeMs` ms starting every `slideMs` ms: a record is in every
 * window [k * slideMs, k * slideMs + sizeMs) that contains its timestamp. Call in `open`; see
 * `tumbling`. */
export function sliding(ctx, name, { sizeMs, slideMs, aggregate, onFire, allowedLatenessMs = 0 } = {}) {
  positive("sizeMs", sizeMs);
  positive("slideMs", slideMs);
  return new AlignedWindows(ctx, name, sizeMs, slideMs, { aggregate, onFire, allowedLatenessMs });
}

/** Session windows: a record at `ts` opens [ts, ts + gapMs), and the sessions of a key that
 * intersect or touch merge. A session fires when the watermark reaches its end - 1, `gapMs`
 * after its last record. Call in `open`; see `tumbling`. */
export function session(ctx, name, { gapMs, aggregate, onFire, allowedLatenessMs = 0 } = {}) {
  positive("gapMs", gapMs);
  return new SessionWindows(ctx, name, gapMs, { aggregate, onFire, allowedLatenessMs });
}
