// Records out: the `Emitter` that builds an output batch in one buffer.

import { ByteBuffer, bytesOf, putUint32, writeUint, writeUtf8 } from "./bytes.js";
import { WeirError } from "./errors.js";
import { HAS_KEY, HAS_TIMESTAMP, columnBytes } from "./records.js";

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
