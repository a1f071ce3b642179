// Write Weir stream operators in JavaScript, compiled to components with
// `jco componentize --backend qjs --backend-qjs-disable-async` (QuickJS).
//
// An operator is a subclass of `Operator`: `open(ctx)` reads the configuration and declares
// keyed state, `process(record, out)` turns each input `Record` into any number of output
// records written to `out` (an `Emitter`), and `close(out)` may emit final records at the end
// of input. An operator may implement `processBatch(batch, out)` instead, which gets the whole
// `Batch` as typed arrays, reads and writes the value state of all its keys in one call each
// (`ValueState.getAll`, `setAll`, arrays indexed by `batch.slots`) and emits many records
// (`emitMany`, or `beginKeyOf`/`writeKeyOf` that copy an input record's bytes): the faster
// way. `exportOperator(Class)` makes the object the module exports as `processor`
// (the `weir:operator/processor` interface). Put the operator in `operator.js` and build it
// with `weir build`, which stages this file (the one of the `weir` binary) beside it as
// `weir.js`; `weir new --lang js NAME` starts a project:
//
//     import { Operator, exportOperator } from "./weir.js";
//
//     class Counter extends Operator {
//       open(ctx) { this.count = ctx.valueState("count"); }
//       process(record, out) {
//         const n = (this.count.get() ?? 0) + 1;
//         this.count.set(n);
//         out.emit(record.key, `${record.keyStr()}\t${n}`);
//       }
//     }
//
//     export const processor = exportOperator(Counter);
//
// Like the Rust SDK, this one is built around the cost of the component boundary:
//
// - Records arrive as one flat batch plus one key slot per record; `process` sees them one at
//   a time through a single reused `Record` whose `key` and `value` are `Uint8Array` views of
//   the batch, made when read (each read makes a new view: keep it in a variable; copy it
//   with `.slice()` to keep it beyond the call). `keyStr()`/`valueStr()` decode straight
//   from the batch.
// - A `ValueState` reads the values of *every* key slot of the batch in one `read-values`
//   call, the first time it is read in a batch, and decodes each slot on its first use.
// - All writes of a batch are buffered and reach the host in one `apply` call at the end of
//   the batch (a value state sends one write per key it changed, whatever the number of
//   `set`s). A map or list read first sends the pending writes (read your writes).
// - Output records are appended to one flat, reused byte buffer, and their offsets, flags and
//   timestamps to reused typed arrays.
//
// Where the time goes (QuickJS compiled to WebAssembly, no JIT): the bindings copy a
// `list<u8>` (a `Uint8Array`) across the boundary in one piece, but a plain array element by
// element; the WIT carries every number column as little-endian bytes (`u32s`, `s64s`), which
// the SDK views as a `Uint32Array` without a copy; and making any object (a view, an object literal, a
// string) costs far more than reading or writing a number. So the SDK hands the host typed
// arrays (the `apply` log is one: five u32 words per operation), and keeps the per-record
// path to a few property writes and one call.
//
// State values, map keys, map values and list items are stored as JSON text (UTF-8): a count
// of 5 is stored as the bytes `5`.
//
// `Emitter.emit` takes keys and values as strings (written as UTF-8), `Uint8Array`s (or other
// typed array views) or `ArrayBuffer`s, and throws a `TypeError` at the call for anything
// else; `emitJson` writes any JSON value.
//
// An exception thrown by `open`, `process` or `close` fails the job with its message and its
// `stack` (without this SDK's frames), where QuickJS gives one. From `process`, the host also
// learns which record of the batch was being processed. The writes of the failed batch are
// dropped and so are the records it emitted; the host may roll the batch's state back and
// process it again without the failing record, so an operator keeps nothing of a failed
// batch in its own fields either.
//
// QuickJS has no TextEncoder/TextDecoder: `utf8Encode`/`utf8Decode` below do the work.
// Timestamps (s64) are JS numbers (exact up to 2^53), read from their two 32-bit halves. StarlingMonkey
// (`jco componentize --bundle -d http fetch-event`, no --backend) works too but runs slower.

import * as stateApi from "weir:operator/state@0.5.0";
import * as timeApi from "weir:operator/time@0.5.0";
import * as logApi from "weir:operator/log@0.5.0";
import * as metricsApi from "weir:operator/metrics@0.5.0";

/** The key slot of a record without key (and the slot outside of `process`). */
export const NO_SLOT = 0xffffffff;
/** Bit 0 of a record's flags: it has a key. */
export const HAS_KEY = 1;
/** Bit 1 of a record's flags: it has a timestamp. */
export const HAS_TIMESTAMP = 2;
/** How many entries one `map-entries` call asks for. */
const PAGE = 1024;
/** An error the SDK reports (bad batch, state misuse, a failed host call). */
/** An error the SDK reports, or an operator throws. From `processBatch`, `{ record: i }` tells
 * the host that record `i` of the batch failed: `new WeirError(message, { record: i })`. */
export class WeirError extends Error {
  constructor(message, options) {
    super(message, options);
    this.record = options?.record ?? null;
  }
}

/** The index of the record that failed: the loop's `i`, else the one a `WeirError` names. */
function failedRecord(e, i) {
  if (i >= 0) return i;
  return e instanceof WeirError && Number.isInteger(e.record) ? e.record : null;
}

/** The message of anything thrown, including host errors (which carry a `payload`). */
function message(e) {
  if (e instanceof WeirError) return e.message;
  if (e && typeof e === "object") {
    if (typeof e.payload === "string") return e.payload;
    if (e.message !== undefined) return `${e.name || "Error"}: ${e.message}`;
  }
  return String(e);
}

/** What the host shows of anything thrown: its message, then its stack (QuickJS gives one to
 * errors) without the frames of this file, with files named as in the project (QuickJS
 * writes `/operator.js`). */
function report(e) {
  const text = message(e);
  const stack = e !== null && typeof e === "object" && typeof e.stack === "string" ? e.stack : "";
  const frames = stack
    .split("\n")
    .filter((line) => line.trim() !== "" && !SDK_FRAME.test(line))
    .map((line) => line.replace("(/", "("))
    .join("\n");
  return frames === "" ? text : `${text}\n${frames}`;
}

/** A stack line of this file (staged as `weir.js` beside the operator). */
const SDK_FRAME = /[(\s/]weir\.js:\d/;

/** The WIT `failure` of `process` or `close`: what the bindings return when it is thrown.
 * `record` is the index of the record being processed, or null. */
function failure(e, record = null) {
  return { message: report(e), record };
}

/** Calls a host function, turning its error into a WeirError with `what` as context. */
function host(what, f) {
  try {
    return f();
  } catch (e) {
    throw new WeirError(`${what}: ${message(e)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// UTF-8 and a growable byte buffer

/** Appends the UTF-8 encoding of `str` to `buf` (a ByteBuffer). */
function writeUtf8(buf, str) {
  const n = str.length;
  if (buf.len + n * 3 > buf.cap) buf.reserve(n * 3);
  const bytes = buf.bytes;
  let len = buf.len;
  for (let i = 0; i < n; i++) {
    let c = str.charCodeAt(i);
    if (c < 0x80) {
      bytes[len++] = c;
    } else if (c < 0x800) {
      bytes[len++] = 0xc0 | (c >> 6);
      bytes[len++] = 0x80 | (c & 63);
    } else {
      if (c >= 0xd800 && c < 0xdc00 && i + 1 < n) {
        const d = str.charCodeAt(i + 1);
        if (d >= 0xdc00 && d < 0xe000) {
          i++;
          c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
          bytes[len++] = 0xf0 | (c >> 18);
          bytes[len++] = 0x80 | ((c >> 12) & 63);
          bytes[len++] = 0x80 | ((c >> 6) & 63);
          bytes[len++] = 0x80 | (c & 63);
          continue;
        }
      }
      if (c >= 0xd800 && c < 0xe000) c = 0xfffd; // a lone surrogate
      bytes[len++] = 0xe0 | (c >> 12);
      bytes[len++] = 0x80 | ((c >> 6) & 63);
      bytes[len++] = 0x80 | (c & 63);
    }
  }
  buf.len = len;
}

/** The UTF-8 bytes of `str`, as a new Uint8Array. */
/** Counts `records` dropped as too late for event time into the host's per-operator count
 * (the run summary, `/metrics`, the console). The windows library calls it. */
export function countDroppedLate(records) {
  metricsApi.countDroppedLate(records);
}

export function utf8Encode(str) {
  const buf = new ByteBuffer(str.length * 3);
  writeUtf8(buf, str);
  return buf.bytes.slice(0, buf.len);
}

/** Whether `bytes` is valid UTF-8 (cheap for ASCII). */
export function isUtf8(bytes) {
  const n = bytes.length;
  for (let i = 0; i < n; i++) {
    if (bytes[i] >= 0x80) {
      try {
        utf8Decode(bytes, i, n);
        return true;
      } catch (e) {
        return false;
      }
    }
  }
  return true;
}

/** The text of `bytes[start, end)` (UTF-8); throws a WeirError on invalid UTF-8. */
export function utf8Decode(bytes, start = 0, end = bytes.length) {
  let ascii = true;
  for (let i = start; i < end; i++) {
    if (bytes[i] >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii && end - start <= 4096) {
    return String.fromCharCode.apply(null, bytes.subarray(start, end));
  }
  const units = [];
  let out = "";
  for (let i = start; i < end; ) {
    const b = bytes[i];
    let c;
    let extra;
    if (b < 0x80) {
      c = b;
      extra = 0;
    } else if (b >= 0xc2 && b < 0xe0) {
      c = b & 31;
      extra = 1;
    } else if (b >= 0xe0 && b < 0xf0) {
      c = b & 15;
      extra = 2;
    } else if (b >= 0xf0 && b < 0xf5) {
      c = b & 7;
      extra = 3;
    } else {
      throw new WeirError(`invalid UTF-8 at byte ${i - start}`);
    }
    if (extra && i + extra >= end) throw new WeirError("truncated UTF-8");
    for (let k = 1; k <= extra; k++) {
      const next = bytes[i + k];
      if ((next & 0xc0) !== 0x80) throw new WeirError(`invalid UTF-8 at byte ${i + k - start}`);
      c = (c << 6) | (next & 63);
    }
    if (
      (extra === 2 && (c < 0x800 || (c >= 0xd800 && c < 0xe000))) ||
      (extra === 3 && (c < 0x10000 || c > 0x10ffff))
    ) {
      throw new WeirError(`invalid UTF-8 at byte ${i - start}`);
    }
    i += extra + 1;
    if (c >= 0x10000) {
      c -= 0x10000;
      units.push(0xd800 + (c >> 10), 0xdc00 + (c & 1023));
    } else {
      units.push(c);
    }
    if (units.length >= 4096) {
      out += String.fromCharCode.apply(null, units);
      units.length = 0;
    }
  }
  return out + String.fromCharCode.apply(null, units);
}

/** Bytes appended to a Uint8Array that grows by doubling; `bytes.subarray(0, len)` is the
 * content. Reused from batch to batch. Its capacity is kept in `cap`: in QuickJS a typed
 * array's `length` is a getter on its prototype, several times dearer than a property. */
class ByteBuffer {
  constructor(capacity = 4096) {
    this.cap = Math.max(capacity, 16);
    this.bytes = new Uint8Array(this.cap);
    this.len = 0;
  }

  /** Makes room for `extra` more bytes. */
  reserve(extra) {
    const need = this.len + extra;
    if (need > this.cap) {
      let size = this.cap * 2;
      while (size < need) size *= 2;
      const bigger = new Uint8Array(size);
      bigger.set(this.bytes.subarray(0, this.len));
      this.bytes = bigger;
      this.cap = size;
    }
  }

  /** Appends a string (as UTF-8), a Uint8Array or an array of bytes. */
  write(value) {
    if (typeof value === "string") {
      writeUtf8(this, value);
    } else {
      writeBytes(this, value);
    }
  }

  view() {
    return this.bytes.subarray(0, this.len);
  }
}

/** The bytes of a key or value that is neither a string nor a typed array of bytes: another
 * typed array view (its bytes) or an ArrayBuffer. Anything else is a TypeError naming `call`
 * and its argument `arg`. Only the slow branch of the emitter calls this, so the common
 * cases (strings, `Uint8Array`s) pay no type checks. */
function bytesOf(value, call, arg) {
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  throw new TypeError(wrongType(call, arg, value));
}

function wrongType(call, arg, value) {
  const type =
    value === null
      ? "null"
      : Array.isArray(value)
        ? "Array"
        : typeof value === "object"
          ? (value.constructor && value.constructor.name) || "object"
          : typeof value;
  const accepted = "a string (UTF-8), a Uint8Array (or another typed array view) or an ArrayBuffer";
  if (arg === "key") {
    return `${call}: a key is ${accepted}, or null for a record without key, not ${type}; convert it first, e.g. String(key)`;
  }
  return `${call}: a ${arg} is ${accepted}, not ${type}; use emitJson(key, value) to emit other values as JSON`;
}

/** Appends a Uint8Array (or an array of bytes) to `buf`. */
function writeBytes(buf, bytes) {
  const n = bytes.length;
  const len = buf.len;
  if (len + n > buf.cap) buf.reserve(n);
  buf.bytes.set(bytes, len);
  buf.len = len + n;
}

// ---------------------------------------------------------------------------------------------
// Encoding of state

/** Appends the JSON text of `value`: integers without going through `JSON.stringify`. */
function encodeInto(buf, value) {
  if (typeof value === "number" && value >= 0 && value <= Number.MAX_SAFE_INTEGER && value % 1 === 0) {
    writeUint(buf, value);
  } else {
    writeUtf8(buf, JSON.stringify(value));
  }
}

/** The digits of 0 to 99, two by two: `DIGIT_PAIRS[2 * n]`, `DIGIT_PAIRS[2 * n + 1]`. */
const DIGIT_PAIRS = new Uint8Array(200);
for (let i = 0; i < 100; i++) {
  DIGIT_PAIRS[2 * i] = 48 + ((i / 10) | 0);
  DIGIT_PAIRS[2 * i + 1] = 48 + (i % 10);
}

/** Writes the decimal digits of `value` (an integer, 0 <= value < 2^31) at `bytes[at ..]`,
 * which has room for them; returns where they end. int32 arithmetic, two digits at a time:
 * every operation counts in an interpreter. */
function putUint32(bytes, at, value) {
  const digits =
    value < 10 ? 1 : value < 100 ? 2 : value < 1000 ? 3 : value < 10000 ? 4 : value < 100000 ? 5
      : value < 1000000 ? 6 : value < 10000000 ? 7 : value < 100000000 ? 8 : value < 1000000000 ? 9 : 10;
  const end = at + digits;
  at = end;
  while (value >= 100) {
    const q = (value / 100) | 0;
    const r = 2 * (value - q * 100);
    bytes[--at] = DIGIT_PAIRS[r + 1];
    bytes[--at] = DIGIT_PAIRS[r];
    value = q;
  }
  if (value >= 10) {
    bytes[--at] = DIGIT_PAIRS[2 * value + 1];
    bytes[--at] = DIGIT_PAIRS[2 * value];
  } else {
    bytes[--at] = 48 + value;
  }
  return end;
}

/** Appends the decimal digits of a non-negative safe integer (its JSON text). */
function writeUint(buf, n) {
  if (buf.len + 16 > buf.cap) buf.reserve(16);
  if (n <= 0x7fffffff) {
    buf.len = putUint32(buf.bytes, buf.len, n);
    return;
  }
  const bytes = buf.bytes;
  let len = buf.len;
  let digits = 1;
  for (let m = n; m >= 10; m = Math.floor(m / 10)) digits++;
  len += digits;
  buf.len = len;
  while (n >= 10) {
    const q = Math.floor(n / 10);
    bytes[--len] = 48 + (n - q * 10);
    n = q;
  }
  bytes[--len] = 48 + n;
}

function encode(value) {
  const buf = new ByteBuffer(64);
  encodeInto(buf, value);
  return buf.view();
}

function decode(bytes, start = 0, end = bytes.length) {
  // Counters are the common case: plain digits parse without a string.
  if (end > start && end - start <= 15) {
    let n = 0;
    let i = start;
    for (; i < end; i++) {
      const d = bytes[i] - 48;
      if (d < 0 || d > 9) break;
      n = n * 10 + d;
    }
    if (i === end) return n;
  }
  return JSON.parse(utf8Decode(bytes, start, end));
}

// ---------------------------------------------------------------------------------------------
// Logging (each call is one crossing to the host: keep it out of per-record loops)

export const log = {
  trace: (m) => logApi.log("trace", String(m)),
  debug: (m) => logApi.log("debug", String(m)),
  info: (m) => logApi.log("info", String(m)),
  warn: (m) => logApi.log("warn", String(m)),
  error: (m) => logApi.log("error", String(m)),
};

/** One console argument as text: strings as they are, errors with their stack, other values
 * as JSON where they have a JSON form. */
function consoleText(value) {
  if (typeof value === "string") return value;
  if (value instanceof Error) return value.stack ? `${value}\n${value.stack}` : String(value);
  if (typeof value === "object" && value !== null) {
    try {
      return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? String(v) : v));
    } catch {
      return String(value);
    }
  }
  return String(value);
}

/** A console method that writes one guest log line at `level`. */
function consoleMethod(level) {
  return (...args) => logApi.log(level, args.map(consoleText).join(" "));
}

// QuickJS has no `console`: the SDK gives it one that writes to the guest log, at the level
// each method names (`log` at info), so that operators log as anywhere else.
if (typeof globalThis.console === "undefined") {
  globalThis.console = {
    log: consoleMethod("info"),
    info: consoleMethod("info"),
    warn: consoleMethod("warn"),
    error: consoleMethod("error"),
    debug: consoleMethod("debug"),
    trace: consoleMethod("trace"),
  };
}

// ---------------------------------------------------------------------------------------------
// Records

const EMPTY = new Uint8Array(0);

/** The WIT `u32s` column `bytes` (little-endian u32s) as a `Uint32Array`: a view of the same
 * memory (WebAssembly is little-endian) when aligned, else a copy. */
function u32s(bytes, what) {
  if (bytes.length % 4 !== 0) {
    throw new WeirError(`malformed ${what}: ${bytes.length} bytes, not a whole number of u32s`);
  }
  if (bytes.byteOffset % 4 === 0) return new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length >>> 2);
  return new Uint32Array(bytes.slice().buffer);
}

/** The WIT `s64s` column `bytes` as a `Uint32Array` of 32-bit halves (low, high), read by
 * `s64At`: JS numbers from two halves cost less than BigInts. */
function s64Halves(bytes, what) {
  if (bytes.length % 8 !== 0) {
    throw new WeirError(`malformed ${what}: ${bytes.length} bytes, not a whole number of s64s`);
  }
  return u32s(bytes, what);
}

/** Item `i` of an `s64s` column viewed by `s64Halves`, as a number (exact up to 2^53). */
function s64At(halves, i) {
  return (halves[2 * i + 1] | 0) * 4294967296 + halves[2 * i];
}

/** The bytes of the first `n` items of the typed array `typed`, as the WIT columns take them. */
function columnBytes(typed, n) {
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
 *   a timestamp). */
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

/** Where an operator writes its output records: appended to one flat batch, returned to the
 * host when the call ends, in emit order. Keys and values are strings (written as UTF-8),
 * Uint8Arrays (or other typed array views) or ArrayBuffers; anything else is a TypeError at
 * the call (`emitJson` writes other values as JSON).
 *
 * These methods run for every record, and in QuickJS a function call costs several property
 * reads, which cost several reads of a local or closure variable: so the state lives in the
 * constructor's variables, the methods are closures over them, and the common cases (bytes,
 * short ASCII strings, small integers) are written out inline rather than called. */
export class Emitter {
  constructor() {
    // The records' bytes, back to back: `bytes[0 .. len]`, `cap` = `bytes.length`.
    let cap = 1 << 16;
    let bytes = new Uint8Array(cap);
    let len = 0;
    // Per record, the columns of the WIT batch: typed arrays, which the bindings copy in one
    // piece. Timestamps are zero where a record has none.
    let rows = 1024;
    let n = 0;
    let keyEnds = new Uint32Array(rows);
    let valueEnds = new Uint32Array(rows);
    let flags = new Uint8Array(rows);
    let timestamps = new BigInt64Array(rows);
    let withTimestamps = false;
    // Whether the record `begin` started has a key.
    let hasKey = false;
    // For the shared encoders (`writeUtf8`, `writeUint`): a ByteBuffer over the same bytes.
    const shared = new ByteBuffer(16);

    function grow() {
      const bigger = (array) => {
        const copy = new array.constructor(rows * 2);
        copy.set(array);
        return copy;
      };
      keyEnds = bigger(keyEnds);
      valueEnds = bigger(valueEnds);
      flags = bigger(flags);
      timestamps = bigger(timestamps);
      rows *= 2;
    }

    function reserve(extra) {
      let size = cap * 2;
      while (size < len + extra) size *= 2;
      const bigger = new Uint8Array(size);
      bigger.set(bytes.subarray(0, len));
      bytes = bigger;
      cap = size;
    }

    /** Appends `value` with a shared encoder. */
    function encodeWith(encoder, value) {
      shared.bytes = bytes;
      shared.cap = cap;
      shared.len = len;
      encoder(shared, value);
      bytes = shared.bytes;
      cap = shared.cap;
      len = shared.len;
    }

    /** Appends a value: a string (as UTF-8) or bytes. */
    function write(value) {
      if (typeof value !== "string") {
        // A typed array of bytes is the common case; anything else is converted or refused.
        if (value?.BYTES_PER_ELEMENT !== 1) value = bytesOf(value, "emit", "value");
        const count = value.length;
        if (len + count > cap) reserve(count);
        bytes.set(value, len);
        len += count;
        return;
      }
      const count = value.length;
      if (count <= 16 && len + 16 <= cap) {
        // Short ASCII strings (separators, small words) byte by byte.
        let i = 0;
        for (; i < count; i++) {
          const c = value.charCodeAt(i);
          if (c >= 0x80) break;
          bytes[len + i] = c;
        }
        if (i === count) {
          len += count;
          return;
        }
      }
      encodeWith(writeUtf8, value);
    }

    /** Ends the record whose value was just written, with a timestamp. */
    function finishWithTimestamp(f, timestamp) {
      valueEnds[n] = len;
      timestamps[n] = BigInt(Math.trunc(Number(timestamp)));
      withTimestamps = true;
      flags[n++] = f | HAS_TIMESTAMP;
    }

    /** Emits a record; a `key` of null makes a record without key. */
    this.emit = (key, value, timestamp) => {
      if (n === rows) grow();
      let f = 0;
      if (key !== null && key !== undefined) {
        if (typeof key === "string") {
          write(key);
        } else {
          if (key.BYTES_PER_ELEMENT !== 1) key = bytesOf(key, "emit", "key");
          const count = key.length;
          if (len + count > cap) reserve(count);
          bytes.set(key, len);
          len += count;
        }
        f = HAS_KEY;
      }
      keyEnds[n] = len;
      write(value);
      if (timestamp === null || timestamp === undefined) {
        valueEnds[n] = len;
        flags[n++] = f;
      } else {
        finishWithTimestamp(f, timestamp);
      }
    };

    /** Appends `data[start, end)` (a batch's bytes) without making a view of them. */
    function copy(data, start, end) {
      const count = end - start;
      if (len + count > cap) reserve(count);
      if (count <= 16) {
        for (let i = 0; i < count; i++) bytes[len + i] = data[start + i];
      } else {
        bytes.set(data.subarray(start, end), len);
      }
      len += count;
    }

    /** `begin` with the key of record `i` of the `Batch` `batch` (none if it has none),
     * copied from the batch: `processBatch`'s way to emit under the input's keys. */
    this.beginKeyOf = (batch, i) => {
      if (n === rows) grow();
      hasKey = (batch.flags[i] & HAS_KEY) !== 0;
      if (hasKey) copy(batch.data, i === 0 ? 0 : batch.valueEnds[i - 1], batch.keyEnds[i]);
      keyEnds[n] = len;
    };

    /** Appends the key of record `i` of `batch` to the value being built. */
    this.writeKeyOf = (batch, i) => {
      if (batch.flags[i] & HAS_KEY) copy(batch.data, i === 0 ? 0 : batch.valueEnds[i - 1], batch.keyEnds[i]);
    };

    /** Appends the value of record `i` of `batch` to the value being built. */
    this.writeValueOf = (batch, i) => copy(batch.data, batch.keyEnds[i], batch.valueEnds[i]);

    /** Starts a record whose value is then appended with `write` (strings, bytes) and
     * `writeUint`, and finished with `end`: builds the value in place, without an
     * intermediate string (like the Rust SDK's `emit_with`). */
    this.begin = (key) => {
      if (n === rows) grow();
      if (key === null || key === undefined) {
        hasKey = false;
      } else {
        hasKey = true;
        if (typeof key === "string") {
          write(key);
        } else {
          if (key.BYTES_PER_ELEMENT !== 1) key = bytesOf(key, "begin", "key");
          const count = key.length;
          if (len + count > cap) reserve(count);
          bytes.set(key, len);
          len += count;
        }
      }
      keyEnds[n] = len;
    };

    /** Appends a string (as UTF-8) or bytes to the value of the record begun with `begin`. */
    this.write = (value) => {
      if (typeof value !== "string") {
        if (value?.BYTES_PER_ELEMENT !== 1) value = bytesOf(value, "write", "value");
        const count = value.length;
        if (len + count > cap) reserve(count);
        bytes.set(value, len);
        len += count;
        return;
      }
      if (value.length === 1 && len < cap) {
        // A separator: one character, most often ASCII.
        const c = value.charCodeAt(0);
        if (c < 0x80) {
          bytes[len++] = c;
          return;
        }
      }
      write(value);
    };

    /** Appends the decimal digits of a non-negative integer to the value being built. */
    this.writeUint = (value) => {
      if (value >= 0 && value <= 0x7fffffff && value % 1 === 0 && len + 10 <= cap) {
        len = putUint32(bytes, len, value);
      } else {
        encodeWith(writeUint, value);
      }
    };

    /** Finishes the record begun with `begin`. */
    this.end = (timestamp) => {
      const f = hasKey ? HAS_KEY : 0;
      if (timestamp === null || timestamp === undefined) {
        valueEnds[n] = len;
        flags[n++] = f;
      } else {
        finishWithTimestamp(f, timestamp);
      }
    };

    /** Emits a record whose value is `value` as JSON. */
    this.emitJson = (key, value, timestamp) => this.emit(key, JSON.stringify(value), timestamp);

    /** Emits one record per item of the parallel arrays `keys` and `values` (and
     * `timestamps`, if given), items being what `emit` takes. */
    this.emitMany = (keys, values, timestamps) => {
      const count = keys.length;
      if (values.length !== count || (timestamps != null && timestamps.length !== count)) {
        throw new RangeError(
          `emitMany: ${count} keys, ${values.length} values${timestamps == null ? "" : `, ${timestamps.length} timestamps`}; give one of each per record`,
        );
      }
      const emit = this.emit;
      for (let i = 0; i < count; i++) emit(keys[i], values[i], timestamps == null ? null : timestamps[i]);
    };

    Object.defineProperty(this, "length", { get: () => n });

    /** Drops what was emitted. */
    this._reset = () => {
      if (withTimestamps) {
        timestamps.fill(0n, 0, n);
        withTimestamps = false;
      }
      len = 0;
      n = 0;
    };

    /** The WIT batch. Its columns are views of the reused buffers: the host copies them when
     * the call returns, before they are written again. */
    this._take = () => {
      if (len > 0xffffffff) {
        this._reset();
        throw new WeirError("the records emitted in one call exceed 4 GiB; emit less per batch");
      }
      let stamps = timestamps.subarray(0, n);
      if (withTimestamps) {
        // Rare: a copy, so that the reused column is all zeros again.
        stamps = stamps.slice();
        timestamps.fill(0n, 0, n);
        withTimestamps = false;
      }
      const batch = {
        data: bytes.subarray(0, len),
        keyEnds: columnBytes(keyEnds, n),
        valueEnds: columnBytes(valueEnds, n),
        flags: flags.subarray(0, n),
        timestamps: columnBytes(stamps, n),
      };
      len = 0;
      n = 0;
      return batch;
    };
  }
}

// ---------------------------------------------------------------------------------------------
// The per-batch machinery: current key slot, write log, value caches

/** The key slot of the record being processed. */
let currentSlot = NO_SLOT;

/** 0, 1, 2, ...: `read-values` asks for the values of the first `n` slots with a view of it. */
let slotNumbers = new Uint32Array(0);

// The first word of an `apply` operation: the ordinal of its WIT `op-kind`.
const VALUE_SET = 0;
const VALUE_REMOVE = 1;
const MAP_PUT = 2;
const MAP_REMOVE = 3;
const MAP_CLEAR = 4;
const LIST_APPEND = 5;
const LIST_CLEAR = 6;
const TIMER_REGISTER = 7;
const TIMER_DELETE = 8;

/** The operations of an `apply` log, as the WIT lays them out: five u32 words each (kind,
 * state, slot, key end, value end), little-endian like WebAssembly's memory. */
class OpLog {
  constructor() {
    this.words = new Uint32Array(5 * 256);
    this.len = 0;
  }

  /** Makes room for `extra` more operations. */
  reserve(extra) {
    const need = 5 * (this.len + extra);
    if (need > this.words.length) {
      let size = 2 * this.words.length;
      while (size < need) size *= 2;
      const bigger = new Uint32Array(size);
      bigger.set(this.words.subarray(0, 5 * this.len));
      this.words = bigger;
    }
  }

  push(kind, state, slot, keyEnd, valueEnd) {
    if (5 * this.len + 5 > this.words.length) this.reserve(1);
    const words = this.words;
    const at = 5 * this.len++;
    words[at] = kind;
    words[at + 1] = state;
    words[at + 2] = slot;
    words[at + 3] = keyEnd;
    words[at + 4] = valueEnd;
  }

  /** The log as the bytes `apply` takes. */
  view() {
    return new Uint8Array(this.words.buffer, 0, 20 * this.len);
  }
}

class Runtime {
  constructor() {
    this.inBatch = false;
    this.inOpen = false;
    this.slotCount = 0;
    /** The `Batch` of a `processBatch` call, else null. */
    this.columns = null;
    this.ops = new OpLog();
    this.data = new ByteBuffer(1 << 14);
    /** Value states read or written in the current batch. */
    this.touched = [];
    /** The watermark, read from the host at most once per batch (UNREAD until then). */
    this.watermark = undefined;
  }

  begin(slotCount, watermark = UNREAD, columns = null) {
    this.watermark = watermark;
    this.slotCount = slotCount;
    this.columns = columns;
    if (slotNumbers.length < slotCount) {
      slotNumbers = new Uint32Array(Math.max(slotCount, 2 * slotNumbers.length));
      for (let i = 0; i < slotNumbers.length; i++) slotNumbers[i] = i;
    }
    this.inBatch = true;
  }

  /** Appends one write; `key` and `value` are state values to encode, or undefined. */
  log(kind, state, slot, key, value) {
    const data = this.data;
    if (key !== undefined) encodeInto(data, key);
    const keyEnd = data.len;
    if (value !== undefined) encodeInto(data, value);
    this.ops.push(kind, state, slot, keyEnd, data.len);
  }

  /** Sends the pending writes in one `apply` (before a map or list read, and at the end of
   * the batch). */
  flush() {
    if (this.ops.len === 0) return;
    const ops = this.ops.view();
    const data = this.data.view();
    // The views share the buffers, which stay the SDK's: the call copies them.
    try {
      host("applying state writes", () => stateApi.apply(ops, data));
    } finally {
      this.ops.len = 0;
      this.data.len = 0;
    }
  }

  /** The end of a batch: the dirty value slots join the log, the log goes out. */
  finish() {
    const touched = this.touched;
    this.touched = [];
    for (let i = 0; i < touched.length; i++) touched[i]._flushInto(this.ops, this.data);
    this.flush();
    this.end();
  }

  abort() {
    for (const valueState of this.touched) valueState._reset();
    this.touched = [];
    this.ops.len = 0;
    this.data.len = 0;
    this.end();
  }

  end() {
    this.inBatch = false;
    this.columns = null;
    currentSlot = NO_SLOT;
  }

  noSlot(name) {
    if (this.columns !== null) {
      return new WeirError(
        `state \`${name}\`: in processBatch, read and write value state for all keys at once with getAll and setAll; map and list state and timers need process`,
      );
    }
    return new WeirError(
      this.inBatch
        ? `state \`${name}\`: state access needs a keyed record; key the stream with key_by before this operator (this record has no key)`
        : `state \`${name}\`: state can only be read or written while processing a record, not in open or close`,
    );
  }

  slotFor(name) {
    const slot = currentSlot;
    if (slot === NO_SLOT) throw this.noSlot(name);
    return slot;
  }
}

const rt = new Runtime();

// Markers in a value cache: not read yet, and no value.
const UNREAD = Symbol("unread");
const ABSENT = Symbol("absent");

/** The state value `items[start, end)`: plain integers (counters) decoded here, without the
 * text and the JSON parser `decode` needs for anything else. */
function decodeValue(items, start, end) {
  let n = 0;
  let i = start;
  if (end - start <= 15) {
    for (; i < end; i++) {
      const d = items[i] - 48;
      if (d < 0 || d > 9) break;
      n = n * 10 + d;
    }
  }
  return i === end && end > start ? n : decode(items, start, end);
}

function declare(name, kind) {
  if (!rt.inOpen) throw new WeirError(`state \`${name}\` must be declared in open`);
  return host(`declaring ${kind} state \`${name}\``, () => stateApi.declare(name, kind));
}

/** One JSON value per key. `get` returns undefined (or `dflt`) where the key has none. The
 * first read in a batch fetches the values of every key of the batch in one host call; writes
 * stay in the SDK until the end of the batch. */
export class ValueState {
  constructor(name) {
    this.name = name;
    this._id = declare(name, "value");
    this._reset();
  }

  // Per batch, from the first use of the state in the batch: `_cache` holds each slot's value
  // (or UNREAD, ABSENT), `_dirty` the slots written, in order, and `_isDirty` marks them;
  // `_items` is the reply of `read-values` once fetched. Outside of that, `_cache` is null.
  _reset() {
    this._dflt = undefined;
    this._cache = null;
    this._dirty = null;
    this._isDirty = null;
    this._items = null;
    this._ends = null;
    this._present = null;
  }

  /** Checks that a record with a key is being processed, and makes the batch's cache. */
  _begin() {
    if (currentSlot === NO_SLOT || !rt.inBatch) throw rt.noSlot(this.name);
    this._cacheOfBatch();
  }

  /** The cache of the current batch, made on the state's first use in the batch. */
  _cacheOfBatch() {
    if (this._cache === null) {
      const n = rt.slotCount;
      this._cache = new Array(n).fill(UNREAD);
      this._dirty = [];
      this._isDirty = new Uint8Array(n);
      rt.touched.push(this);
    }
  }

  /** In `processBatch`: the values of every key of the batch, in an array indexed by slot
   * (`batch.slots[i]` is record `i`'s), `dflt` where a key has none; read in one host call. */
  getAll(dflt = undefined) {
    this._beginAll("getAll");
    const cache = this._cache;
    const items = this._items;
    const ends = this._ends;
    const present = this._present;
    const n = cache.length;
    const values = new Array(n);
    let start = 0;
    for (let slot = 0; slot < n; slot++) {
      const end = ends[slot];
      let value = cache[slot];
      if (value === UNREAD) {
        value = present[slot] === 0 ? ABSENT : decodeValue(items, start, end);
        cache[slot] = value;
      }
      values[slot] = value === ABSENT ? dflt : value;
      start = end;
    }
    this._dflt = dflt;
    return values;
  }

  /** In `processBatch`: sets the value of every key of the batch to the item of `values` (an
   * array indexed by slot, as `getAll` gives) at its slot. Items equal (`===`) to what
   * `getAll` returned are unchanged and not written; an `undefined` item leaves its key as
   * it is. Sent with the batch's other writes. */
  setAll(values) {
    this._beginAll("setAll");
    const cache = this._cache;
    const n = cache.length;
    if (values.length !== n) {
      throw new WeirError(
        `state \`${this.name}\`: setAll takes one value per key of the batch (${n}), not ${values.length}`,
      );
    }
    const dflt = this._dflt;
    const isDirty = this._isDirty;
    for (let slot = 0; slot < n; slot++) {
      const value = values[slot];
      if (value === undefined) continue;
      const was = cache[slot];
      if (value === was || (was === ABSENT && value === dflt)) continue;
      cache[slot] = value;
      if (isDirty[slot] === 0) {
        isDirty[slot] = 1;
        this._dirty.push(slot);
      }
    }
  }

  /** The cache of the batch, in `processBatch`. */
  _beginAll(call) {
    if (!rt.inBatch || rt.columns === null) {
      throw new WeirError(
        `state \`${this.name}\`: ${call} works in processBatch; in process, use get and set`,
      );
    }
    this._cacheOfBatch();
    if (this._items === null) this._fetch();
  }

  get(dflt = undefined) {
    const slot = currentSlot;
    let cache = this._cache;
    // A null cache (first use in the batch) and NO_SLOT both fail the bounds check.
    if (cache === null || slot >= cache.length) {
      this._begin();
      cache = this._cache;
    }
    let value = cache[slot];
    if (value === UNREAD) {
      // The first read of the slot in the batch.
      if (this._items === null) this._fetch();
      if (this._present[slot]) {
        const ends = this._ends;
        value = decodeValue(this._items, slot ? ends[slot - 1] : 0, ends[slot]);
      } else {
        value = ABSENT;
      }
      cache[slot] = value;
    }
    return value === ABSENT ? dflt : value;
  }

  set(value) {
    if (value === undefined) throw new WeirError(`state \`${this.name}\`: cannot store undefined`);
    const slot = currentSlot;
    let cache = this._cache;
    if (cache === null || slot >= cache.length) {
      this._begin();
      cache = this._cache;
    }
    cache[slot] = value;
    const isDirty = this._isDirty;
    if (isDirty[slot] === 0) {
      isDirty[slot] = 1;
      this._dirty.push(slot);
    }
  }

  remove() {
    // The cache marks a removed value ABSENT; `_flushInto` sends it as a `value-remove`.
    this.set(ABSENT);
  }

  _fetch() {
    const n = rt.slotCount;
    const values = host(`state \`${this.name}\`: reading values`, () =>
      stateApi.readValues(this._id, columnBytes(slotNumbers, n)),
    );
    const ends = u32s(values.items.ends, "reply from the host");
    if (values.present.length !== n || ends.length !== n) {
      throw new WeirError(`state \`${this.name}\`: malformed reply from the host`);
    }
    this._items = values.items.data;
    this._ends = ends;
    this._present = values.present;
  }

  /** Appends one write per dirty slot to the batch's log (`ops`, `buf`). */
  _flushInto(ops, buf) {
    const cache = this._cache;
    const dirty = this._dirty;
    const state = this._id;
    // Room for the common case, plain integers (up to 10 digits each), so that they are
    // written inline; anything else goes through `encodeInto`, which makes its own room.
    const count = dirty.length;
    if (buf.len + 10 * count > buf.cap) buf.reserve(10 * count);
    ops.reserve(count);
    const words = ops.words;
    let at = 5 * ops.len;
    let bytes = buf.bytes;
    let len = buf.len;
    for (let i = 0; i < count; i++) {
      const slot = dirty[i];
      let value = cache[slot];
      words[at + 1] = state;
      words[at + 2] = slot;
      words[at + 3] = len;
      if (value === ABSENT) {
        words[at] = VALUE_REMOVE;
      } else if (typeof value === "number" && value >= 0 && value <= 0x7fffffff && value % 1 === 0) {
        words[at] = VALUE_SET;
        len = putUint32(bytes, len, value);
      } else {
        words[at] = VALUE_SET;
        buf.len = len;
        encodeInto(buf, value);
        bytes = buf.bytes;
        len = buf.len;
        // Room again for the integers still to come.
        if (len + 10 * (count - i) > buf.cap) {
          buf.reserve(10 * (count - i));
          bytes = buf.bytes;
        }
      }
      words[at + 4] = len;
      at += 5;
    }
    ops.len += count;
    buf.len = len;
    this._reset();
  }
}

/** A map from JSON keys to JSON values per key, ordered by the bytes of the encoded keys.
 * Writes are buffered with the batch's other writes; a read first sends them, then calls the
 * host (one crossing per read, per 1024 entries for `entries`/`keys`). */
export class MapState {
  constructor(name) {
    this.name = name;
    this._id = declare(name, "map");
  }

  get(key, dflt = undefined) {
    const slot = rt.slotFor(this.name);
    rt.flush();
    const found = host(`map state \`${this.name}\`: reading`, () =>
      stateApi.mapGet(this._id, slot, encode(key)),
    );
    return found === null || found === undefined ? dflt : decode(found);
  }

  has(key) {
    return this.get(key, ABSENT) !== ABSENT;
  }

  /** The number of entries: one host call (the host counts them as they are written),
   * whatever the size of the map. */
  get size() {
    const slot = rt.slotFor(this.name);
    rt.flush();
    return host(`map state \`${this.name}\`: reading its size`, () => stateApi.mapSize(this._id, slot));
  }

  put(key, value) {
    rt.log(MAP_PUT, this._id, rt.slotFor(this.name), key, value);
  }

  remove(key) {
    rt.log(MAP_REMOVE, this._id, rt.slotFor(this.name), key, undefined);
  }

  clear() {
    rt.log(MAP_CLEAR, this._id, rt.slotFor(this.name), undefined, undefined);
  }

  /** Every [key, value], in the order of the encoded keys. */
  entries() {
    const out = [];
    this._pages((keys, k0, k1, values, v0, v1) => out.push([decode(keys, k0, k1), decode(values, v0, v1)]));
    return out;
  }

  keys() {
    const out = [];
    this._pages((keys, k0, k1) => out.push(decode(keys, k0, k1)));
    return out;
  }

  _pages(item) {
    const slot = rt.slotFor(this.name);
    rt.flush();
    let after = null;
    for (;;) {
      const page = host(`map state \`${this.name}\`: reading entries`, () =>
        stateApi.mapEntries(this._id, slot, after, PAGE),
      );
      const { keys, values } = page;
      const keyEnds = u32s(keys.ends, "reply from the host");
      const valueEnds = u32s(values.ends, "reply from the host");
      let k0 = 0;
      let v0 = 0;
      for (let i = 0; i < keyEnds.length; i++) {
        item(keys.data, k0, keyEnds[i], values.data, v0, valueEnds[i]);
        k0 = keyEnds[i];
        v0 = valueEnds[i];
      }
      if (keyEnds.length < PAGE) return;
      after = keys.data.slice(keyEnds.length > 1 ? keyEnds[keyEnds.length - 2] : 0, k0);
    }
  }
}

/** A list of JSON items per key, appended to. */
export class ListState {
  constructor(name) {
    this.name = name;
    this._id = declare(name, "list");
  }

  push(item) {
    rt.log(LIST_APPEND, this._id, rt.slotFor(this.name), undefined, item);
  }

  clear() {
    rt.log(LIST_CLEAR, this._id, rt.slotFor(this.name), undefined, undefined);
  }

  /** Every item, oldest first. */
  get() {
    const slot = rt.slotFor(this.name);
    rt.flush();
    const blobs = host(`list state \`${this.name}\`: reading`, () => stateApi.listRead(this._id, slot));
    const out = [];
    let start = 0;
    for (const end of u32s(blobs.ends, "reply from the host")) {
      out.push(decode(blobs.data, start, end));
      start = end;
    }
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// The operator and its export

/** Given to `Operator.open`: where the instance runs, its configuration (`config`, the job
 * file's `config` table as an object) and the place to declare state. */
export class OpenContext {
  constructor(context) {
    this.operatorName = context.operatorName;
    this.subtask = context.subtask;
    this.parallelism = context.parallelism;
    this.configJson = context.config;
    const text = context.config.trim();
    try {
      this.config = text ? JSON.parse(text) : {};
    } catch (e) {
      throw new WeirError(`invalid config for operator \`${this.operatorName}\`: ${message(e)}`);
    }
  }

  valueState(name) {
    return new ValueState(name);
  }

  mapState(name) {
    return new MapState(name);
  }

  listState(name) {
    return new ListState(name);
  }

  timers() {
    return new Timers();
  }
}

/** A timer's 12 bytes in an `apply` log: its timestamp (s64), then its tag (u32). */
const timerBytes = new DataView(new ArrayBuffer(12));

function timerWrite(kind, domain, ts, tag) {
  if (!Number.isSafeInteger(ts) || !Number.isInteger(tag) || tag < 0 || tag > 0xffffffff) {
    throw new TypeError(
      `a timer's timestamp is an integer number of milliseconds and its tag an integer from 0 to 2**32 - 1, not ${ts} and ${tag}`,
    );
  }
  const slot = rt.slotFor("timers");
  timerBytes.setBigInt64(0, BigInt(ts), true);
  timerBytes.setUint32(8, tag, true);
  const data = rt.data;
  const keyEnd = data.len;
  data.write(new Uint8Array(timerBytes.buffer));
  rt.ops.push(kind, domain, slot, keyEnd, data.len);
}

/** Timers of the current key: `ctx.timers()` in `open`. In `process` they act on the
 * record's key, in `onTimer` on the timer's. An event-time timer at `ts` (milliseconds) fires
 * once the watermark reaches `ts`; a processing-time timer once the host's clock does (those
 * that came due while the job was down fire right after it restores). One timer exists per
 * (key, clock, timestamp, tag): registering it again changes nothing, and a fired timer is
 * gone. Tags (0 to 2**32 - 1) tell an operator's timers apart; `windows.js` uses those from
 * 0xFFFF0000 up. Timers are keyed state: checkpointed with the key, moved with it on rescale. */
export class Timers {
  registerEventTime(ts, tag = 0) {
    timerWrite(TIMER_REGISTER, 0, ts, tag);
  }

  deleteEventTime(ts, tag = 0) {
    timerWrite(TIMER_DELETE, 0, ts, tag);
  }

  registerProcessingTime(ts, tag = 0) {
    timerWrite(TIMER_REGISTER, 1, ts, tag);
  }

  deleteProcessingTime(ts, tag = 0) {
    timerWrite(TIMER_DELETE, 1, ts, tag);
  }

  /** The subtask's watermark (milliseconds since the Unix epoch): records at or before it are
   * late. null before the first watermark. */
  watermark() {
    if (rt.watermark === UNREAD) {
      const w = timeApi.watermark();
      rt.watermark = w === undefined || w === null ? null : Number(w);
    }
    return rt.watermark;
  }

  /** The host's clock, in milliseconds since the Unix epoch. */
  processingTime() {
    return Number(timeApi.processingTime());
  }
}

/** A timer that fired, given to `Operator.onTimer`: `key` (a Uint8Array), `timestamp`
 * (milliseconds), `tag` and `domain` ("event" or "processing"). */
export class Timer {
  constructor(key, timestamp, tag = 0, domain = "event") {
    this.key = key;
    this.timestamp = timestamp;
    this.tag = tag;
    this.domain = domain;
  }

  /** The key as text (UTF-8). */
  keyStr() {
    return utf8Decode(this.key);
  }
}

/** Base class of operators. The SDK creates one instance per subtask (without arguments),
 * then calls `open` once, `process` for every record, `onTimer` for every timer that fires,
 * `close` at the end of input. */
export class Operator {
  open(ctx) {}

  process(record, out) {
    throw new WeirError("an operator must implement process(record, out) or processBatch(batch, out)");
  }

  // `processBatch(batch, out)`, if an operator defines it, is called once per batch instead of
  // `process` once per record: `batch` is a `Batch` (columns), the value state of all its keys
  // is read and written with `ValueState.getAll` and `setAll`, and `out.emitMany` emits many
  // records in one call. Map and list state and timers need a record's key: use `process`.

  /** Handles a `Timer` that fired; state acts on `timer.key` here. */
  onTimer(timer, out) {
    throw new WeirError(
      `a timer fired (tag ${timer.tag}, at ${timer.timestamp}) but the operator does not implement onTimer(timer, out)`,
    );
  }

  close(out) {}
}

/** Whether every record's flags are `flag`. */
function allFlagged(flags, n, flag) {
  for (let i = 0; i < n; i++) if (flags[i] !== flag) return false;
  return true;
}

function slotCount(keySlots, records) {
  if (keySlots.length !== records) {
    throw new WeirError(`malformed batch: ${keySlots.length} key slots for ${records} records`);
  }
  let top = -1;
  for (let i = 0; i < records; i++) {
    const slot = keySlots[i];
    if (slot !== NO_SLOT && slot > top) top = slot;
  }
  if (top >= records) throw new WeirError(`malformed batch: key slot ${top} in a batch of ${records} records`);
  return top + 1;
}

/** The `processor` export driving instances of `OperatorClass`:
 * `export const processor = exportOperator(MyOperator);`. Errors are thrown as what the WIT
 * `result` holds (a string from `open`, a `failure` from `process` and `close`), which the
 * bindings return as its error. */
export function exportOperator(OperatorClass) {
  let operator = null;
  // Whether the operator defines `processBatch`.
  let batchApi = false;
  const out = new Emitter();
  return {
    open(ctx) {
      if (operator !== null) throw "open called on an operator instance that is already open";
      rt.inOpen = true;
      try {
        const instance = new OperatorClass();
        instance.open(new OpenContext(ctx));
        operator = instance;
        batchApi = typeof instance.processBatch === "function";
      } catch (e) {
        throw report(e);
      } finally {
        rt.inOpen = false;
      }
    },

    process(batch, keySlots) {
      if (operator === null) {
        throw failure("the operator is not open: process called before open or after close");
      }
      // The index of the record being processed, for a failure to name it; -1 outside the
      // loops over records. The loops count with it, so it costs nothing more.
      let i = -1;
      try {
        const { data, flags } = batch;
        const keyEnds = u32s(batch.keyEnds, "batch");
        const valueEnds = u32s(batch.valueEnds, "batch");
        const timestamps = s64Halves(batch.timestamps, "batch");
        keySlots = u32s(keySlots, "key slots");
        const n = flags.length;
        if (keyEnds.length !== n || valueEnds.length !== n || timestamps.length !== 2 * n) {
          throw new WeirError("malformed batch: columns of different lengths");
        }
        const slots = slotCount(keySlots, n);
        if (batchApi) {
          const columns = new Batch(data, keyEnds, valueEnds, flags, timestamps, keySlots, slots);
          rt.begin(slots, UNREAD, columns);
          operator.processBatch(columns, out);
          rt.finish();
          return out._take();
        }
        rt.begin(slots);
        const record = new Record();
        record._data = data;
        record._buffer = data.buffer;
        record._offset = data.byteOffset;
        let start = 0;
        if (allFlagged(flags, n, HAS_KEY)) {
          // Every record keyed, none with a timestamp: the common case, with the least per
          // record.
          record._hasKey = true;
          for (i = 0; i < n; i++) {
            const keyEnd = keyEnds[i];
            record._start = start;
            record._keyEnd = keyEnd;
            record._valueEnd = start = valueEnds[i];
            currentSlot = keySlots[i];
            operator.process(record, out);
          }
        } else if (allFlagged(flags, n, HAS_KEY | HAS_TIMESTAMP)) {
          // Every record keyed and timestamped (sources stamp their event time).
          record._hasKey = true;
          for (i = 0; i < n; i++) {
            const keyEnd = keyEnds[i];
            record._start = start;
            record._keyEnd = keyEnd;
            record._valueEnd = start = valueEnds[i];
            record.timestamp = s64At(timestamps, i);
            currentSlot = keySlots[i];
            operator.process(record, out);
          }
        } else {
          for (i = 0; i < n; i++) {
            const keyEnd = keyEnds[i];
            const f = flags[i];
            record._hasKey = (f & HAS_KEY) !== 0;
            record._start = start;
            record._keyEnd = keyEnd;
            record._valueEnd = start = valueEnds[i];
            record.timestamp = f & HAS_TIMESTAMP ? s64At(timestamps, i) : null;
            currentSlot = keySlots[i];
            operator.process(record, out);
          }
        }
        i = -1;
        rt.finish();
        return out._take();
      } catch (e) {
        rt.abort();
        out._reset();
        throw failure(e, failedRecord(e, i));
      }
    },

    onTimers(timers) {
      if (operator === null) {
        throw failure("the operator is not open: onTimers called before open or after close");
      }
      let i = -1;
      try {
        const { domain, keys, watermark } = timers;
        const keySlots = u32s(timers.keySlots, "timers");
        const keyEnds = u32s(keys.ends, "timers");
        const timestamps = s64Halves(timers.timestamps, "timers");
        const tags = u32s(timers.tags, "timers");
        const n = keySlots.length;
        if (keyEnds.length !== n || timestamps.length !== 2 * n || tags.length !== n) {
          throw new WeirError("malformed timers: lists of different lengths");
        }
        const w = watermark === undefined || watermark === null ? null : Number(watermark);
        rt.begin(slotCount(keySlots, n), w);
        const clock = domain === "event-time" ? "event" : "processing";
        let start = 0;
        for (i = 0; i < n; i++) {
          const end = keyEnds[i];
          const timer = new Timer(keys.data.slice(start, end), s64At(timestamps, i), tags[i], clock);
          start = end;
          currentSlot = keySlots[i];
          operator.onTimer(timer, out);
        }
        i = -1;
        rt.finish();
        return out._take();
      } catch (e) {
        rt.abort();
        out._reset();
        throw failure(e, failedRecord(e, i));
      }
    },

    close() {
      if (operator === null) {
        throw failure("the operator is not open: close called before open or after close");
      }
      const closing = operator;
      operator = null;
      try {
        closing.close(out);
        return out._take();
      } catch (e) {
        out._reset();
        throw failure(e);
      }
    },
  };
}
