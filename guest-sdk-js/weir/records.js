// Records in: one `Record`, a whole `Batch` as columns, and the WIT's number columns read as
// typed arrays.

import { utf8Decode } from "./bytes.js";
import { WeirError } from "./errors.js";

/** The key slot of a record without key (and the slot outside of `process`). */
export const NO_SLOT = 0xffffffff;
/** Bit 0 of a record's flags: it has a key. */
export const HAS_KEY = 1;
/** Bit 1 of a record's flags: it has a timestamp. */
export const HAS_TIMESTAMP = 2;

// Records

const EMPTY = new Uint8Array(0);

/** The WIT `u32s` column `bytes` (little-endian u32s) as a `Uint32Array`: a view of the same
 * memory (WebAssembly is little-endian) when aligned, else a copy. */
export function u32s(bytes, what) {
  if (bytes.length % 4 !== 0) {
    throw new WeirError(`malformed ${what}: ${bytes.length} bytes, not a whole number of u32s`);
  }
  if (bytes.byteOffset % 4 === 0) return new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length >>> 2);
  return new Uint32Array(bytes.slice().buffer);
}

/** The WIT `s64s` column `bytes` as a `Uint32Array` of 32-bit halves (low, high), read by
 * `s64At`: JS numbers from two halves cost less than BigInts. */
export function s64Halves(bytes, what) {
  if (bytes.length % 8 !== 0) {
    throw new WeirError(`malformed ${what}: ${bytes.length} bytes, not a whole number of s64s`);
  }
  return u32s(bytes, what);
}

/** Item `i` of an `s64s` column viewed by `s64Halves`, as a number (exact up to 2^53). */
export function s64At(halves, i) {
  return (halves[2 * i + 1] | 0) * 4294967296 + halves[2 * i];
}

/** The bytes of the first `n` items of the typed array `typed`, as the WIT columns take them. */
export function columnBytes(typed, n) {
  return new Uint8Array(typed.buffer, typed.byteOffset, n * typed.BYTES_PER_ELEMENT);
}

/** One input record: `key` (Uint8Array, or null for a record without key), `value`
 * (Uint8Array) and `timestamp` (ms since the Unix epoch, or null). `key` and `value` are views
 * of the batch, made when read and valid during the `process` call. */
export class Record {
  constructor(key = null, value = EMPTY, timestamp = null) {
    // The batch's bytes and this record's offsets in them: the SDK sets these for each record.
    const keyLen = key === null ? 0 : key.length;
    this._data = new Uint8Array(keyLen + value.length);
    if (key !== null) this._data.set(key, 0);
    this._data.set(value, keyLen);
    this._start = 0;
    this._keyEnd = keyLen;
    this._valueEnd = keyLen + value.length;
    this._hasKey = key !== null;
    this.timestamp = timestamp;
    this._buffer = this._data.buffer;
    this._offset = this._data.byteOffset;
  }

  // `new Uint8Array(buffer, ...)` rather than `subarray`: the same view, made faster by QuickJS.
  get key() {
    if (!this._hasKey) return null;
    return new Uint8Array(this._buffer, this._offset + this._start, this._keyEnd - this._start);
  }

  get value() {
    return new Uint8Array(this._buffer, this._offset + this._keyEnd, this._valueEnd - this._keyEnd);
  }

  /** The key as text (UTF-8), or null for a record without key. */
  keyStr() {
    return this._hasKey ? utf8Decode(this._data, this._start, this._keyEnd) : null;
  }

  /** The value as text (UTF-8). */
  valueStr() {
    return utf8Decode(this._data, this._keyEnd, this._valueEnd);
  }

  /** The value parsed as JSON. */
  valueJson() {
    return JSON.parse(utf8Decode(this._data, this._keyEnd, this._valueEnd));
  }
}

/** The records of a batch as columns, given to `Operator.processBatch`: typed arrays over the
 * batch's memory, no copies. Valid during the call: copy (`.slice()`) what you keep.
 *
 * - `length`: the number of records; `key(i)`, `value(i)` (Uint8Array views; a record without
 *   key has the key null), `keyStr(i)`, `valueStr(i)`, `timestamp(i)` (ms or null); `keys()`
 *   and `values()`: arrays of the views.
 * - `slots` (Uint32Array): per record, the index of its key among the batch's distinct keys,
 *   numbered in order of first appearance: the index into `ValueState.getAll`'s array.
 *   `slotCount` is the number of distinct keys.
 * - The raw columns: `data` (Uint8Array: key 0, value 0, key 1, ...), `keyEnds` and
 *   `valueEnds` (Uint32Array: record `i`'s key is `data[keyStart(i) .. keyEnds[i]]` with
 *   `keyStart(i)` = `valueEnds[i - 1]`, 0 for the first, and its value `data[keyEnds[i] ..
 *   valueEnds[i]]`), `flags` (Uint8Array: bit 0 set if the record has a key, bit 1 if it has
 *   a timestamp).
 * - `focus(slot)`: the calls that act on one key (map and list state, timers, a value state's
 *   `get` and `set`) act on the key of `slot` (`slots[i]` for record `i`) until the next
 *   `focus`. `MapState.getMany(slots, keys)` and `ListState.getMany(slots)` read many keys'
 *   maps and lists in one host call. */
export class Batch {
  constructor(data, keyEnds, valueEnds, flags, timestampHalves, slots, slotCount) {
    this.data = data;
    this.keyEnds = keyEnds;
    this.valueEnds = valueEnds;
    this.flags = flags;
    this.slots = slots;
    this.slotCount = slotCount;
    this.length = flags.length;
    this._halves = timestampHalves;
    this._buffer = data.buffer;
    this._offset = data.byteOffset;
  }

  keyStart(i) {
    return i === 0 ? 0 : this.valueEnds[i - 1];
  }

  key(i) {
    if ((this.flags[i] & HAS_KEY) === 0) return null;
    const start = i === 0 ? 0 : this.valueEnds[i - 1];
    return new Uint8Array(this._buffer, this._offset + start, this.keyEnds[i] - start);
  }

  value(i) {
    const start = this.keyEnds[i];
    return new Uint8Array(this._buffer, this._offset + start, this.valueEnds[i] - start);
  }

  keyStr(i) {
    if ((this.flags[i] & HAS_KEY) === 0) return null;
    return utf8Decode(this.data, i === 0 ? 0 : this.valueEnds[i - 1], this.keyEnds[i]);
  }

  valueStr(i) {
    return utf8Decode(this.data, this.keyEnds[i], this.valueEnds[i]);
  }

  timestamp(i) {
    return this.flags[i] & HAS_TIMESTAMP ? s64At(this._halves, i) : null;
  }

  keys() {
    const keys = new Array(this.length);
    for (let i = 0; i < keys.length; i++) keys[i] = this.key(i);
    return keys;
  }

  values() {
    const values = new Array(this.length);
    for (let i = 0; i < values.length; i++) values[i] = this.value(i);
    return values;
  }
}
