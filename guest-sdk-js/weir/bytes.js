// Bytes: UTF-8 without TextEncoder (QuickJS has none), a growable byte buffer, and state
// values as JSON text.

import { WeirError } from "./errors.js";

// UTF-8 and a growable byte buffer

/** Appends the UTF-8 encoding of `str` to `buf` (a ByteBuffer). */
export function writeUtf8(buf, str) {
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
export class ByteBuffer {
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
export function bytesOf(value, call, arg) {
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
export function encodeInto(buf, value) {
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
export function putUint32(bytes, at, value) {
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
export function writeUint(buf, n) {
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

export function encode(value) {
  const buf = new ByteBuffer(64);
  encodeInto(buf, value);
  return buf.view();
}

export function decode(bytes, start = 0, end = bytes.length) {
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
  const text = utf8Decode(bytes, start, end);
  return text.includes('"$bytes"') ? JSON.parse(text, reviveBytes) : JSON.parse(text);
}

// Bytes in state. JSON has no bytes: they cross to the host as `{"$bytes": "<base64>"}`, which
// it stores as a CBOR byte string (`host/src/state/encoding.rs`), so that bytes a Rust operator
// stored read here as a Uint8Array, and a Uint8Array stored here reads there as bytes.

/** `JSON.parse`'s reviver, used only for text that holds `"$bytes"`. */
function reviveBytes(_key, value) {
  if (value !== null && typeof value === "object" && typeof value.$bytes === "string") {
    let keys = 0;
    for (const _ in value) keys++;
    if (keys === 1) return base64Decode(value.$bytes);
  }
  return value;
}

// `JSON.stringify` asks every object for `toJSON`, so this costs nothing to other values; a
// Uint8Array had no useful JSON form before (`{"0": 1, "1": 2}`).
Object.defineProperty(Uint8Array.prototype, "toJSON", {
  value: function () {
    return { $bytes: base64Encode(this) };
  },
  configurable: true,
  writable: true,
});

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE64_VALUES = new Int16Array(128).fill(-1);
for (let i = 0; i < 64; i++) BASE64_VALUES[BASE64.charCodeAt(i)] = i;

/** `bytes` in base64 (RFC 4648, with padding). */
export function base64Encode(bytes) {
  let out = "";
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    out += BASE64[n >> 18] + BASE64[(n >> 12) & 63] + BASE64[(n >> 6) & 63] + BASE64[n & 63];
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i] << 16;
    out += BASE64[n >> 18] + BASE64[(n >> 12) & 63] + "==";
  } else if (rest === 2) {
    const n = (bytes[i] << 16) | (bytes[i + 1] << 8);
    out += BASE64[n >> 18] + BASE64[(n >> 12) & 63] + BASE64[(n >> 6) & 63] + "=";
  }
  return out;
}

/** The bytes of base64 `text` (padding optional); throws a WeirError on other characters. */
export function base64Decode(text) {
  const end = text.replace(/=+$/, "").length;
  const out = new Uint8Array((end * 3) >> 2);
  let bits = 0;
  let n = 0;
  let at = 0;
  for (let i = 0; i < end; i++) {
    const c = text.charCodeAt(i);
    const v = c < 128 ? BASE64_VALUES[c] : -1;
    if (v < 0) throw new WeirError(`"$bytes" holds a character that is not base64: ${text[i]}`);
    n = (n << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[at++] = (n >> bits) & 255;
    }
  }
  return out;
}
