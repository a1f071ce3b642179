// The per-batch machinery: the key slot of the record being handled, the write log sent in
// one `apply` per batch, the state classes and timers that act on the key slot, and the
// loops over a batch's records and fired timers that set it.
//
// These share one module on purpose: the key slot is a module variable, set by the loops and
// read by every state call, the cheapest access QuickJS has (a property of a shared object
// would cost a lookup per record).

import * as stateApi from "weir:operator/state@0.6.0";
import * as timeApi from "weir:operator/time@0.6.0";
import { ByteBuffer, decode, encode, encodeInto, putUint32 } from "./bytes.js";
import { WeirError, failedRecord, failure, host } from "./errors.js";
import { Batch, HAS_KEY, HAS_TIMESTAMP, NO_SLOT, Record, columnBytes, s64At, s64Halves, u32s } from "./records.js";
import { Timer } from "./timer.js";

/** How many entries one `map-entries` call asks for. */
const PAGE = 1024;

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
    /** Counts the batches (records or timers), so a library's per-batch cache can tell
     * whether it is the current batch's. */
    this.generation = 0;
    /** The current batch's rows, for the libraries that read ahead (`batchRows`). */
    this.rows = null;
  }

  begin(slotCount, watermark = UNREAD, columns = null) {
    this.generation++;
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
    this.rows = null;
    currentSlot = NO_SLOT;
  }

  noSlot(name) {
    if (this.columns !== null) {
      return new WeirError(
        `state \`${name}\`: in processBatch, read and write value state for all keys at once with getAll and setAll; for the calls that act on one key (map and list state, timers, value get and set), first choose the key with batch.focus(slot)`,
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

export const rt = new Runtime();

/** For the libraries that read a whole batch's state ahead (`windows.js`): the batch's number
 * and its rows, `{ timers: false, slots, timestamps, flags }` or `{ timers: true, slots,
 * timestamps, tags, clock }` (`slots`, `flags` and `tags` typed arrays; `timestamps` the
 * halves `s64At` reads), or null outside a batch. */
export function batchRows() {
  return [rt.generation, rt.rows];
}

/** The key slot state calls act on now (`NO_SLOT` where there is none). */
export function keySlot() {
  return currentSlot;
}

/** `slots` (numbers of `batch.slots`) as the WIT's `u32s`, for a `getMany`. */
function slotColumn(slots) {
  const words = Uint32Array.from(slots);
  return columnBytes(words, words.length);
}

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
  // The SDK writes JSON text (`bytes.js`); the host stores it as CBOR, the one encoding every
  // language reads.
  return host(`declaring ${kind} state \`${name}\``, () => stateApi.declare(name, kind, "json"));
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
    if (value === UNREAD && this._items === null) {
      // The first read of the batch: `_fetch` may decode slots as it reads them (a
      // `VersionedValueState`'s do).
      this._fetch();
      value = cache[slot];
    }
    if (value === UNREAD) {
      // The first read of the slot in the batch.
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

/** The version of a stored value, and the value: `{"$version": N, "$value": V}` for a value of
 * version N > 1, anything else a value of version 1. */
function splitVersion(stored) {
  if (
    stored !== null &&
    typeof stored === "object" &&
    !Array.isArray(stored) &&
    Object.keys(stored).length === 2 &&
    "$version" in stored &&
    "$value" in stored
  ) {
    return [stored.$version, stored.$value];
  }
  return [1, stored];
}

/** `value`, stored at `version`, migrated to the version `state` declares (its `name`,
 * `version` and `_migrate`). */
function migrated(state, version, value) {
  if (!Number.isInteger(version) || version > state.version) {
    throw new WeirError(
      `state \`${state.name}\`: the stored value is of version ${version}, newer than this ` +
        `operator's version ${state.version} of the state: it was written by a later version ` +
        "of the operator; run that version, or restore a checkpoint taken before it",
    );
  }
  if (typeof state._migrate !== "function") {
    throw new WeirError(
      `state \`${state.name}\`: the stored value is of version ${version} and the state, of ` +
        `version ${state.version}, declares no migration`,
    );
  }
  return state._migrate(version, value);
}

function checkVersion(name, version) {
  if (!Number.isInteger(version) || version < 1) {
    throw new WeirError(`state \`${name}\`: a version is an integer from 1 up, not ${version}`);
  }
}

/** A `ValueState` whose values carry a version (`ctx.valueState(name, { version, migrate })`).
 *
 * A value of version 1 is stored as its plain JSON, as every value state stored it before
 * versions existed; a later version's as `{"$version": N, "$value": V}`. The batch's values
 * are decoded as they are fetched: one of the declared version as is, an older one through
 * `migrate(storedVersion, oldValue)`, once, and written back in the new version with the
 * batch's writes; a newer one (written by a later version of the operator) is an error. A
 * field added with a default needs no new version: `{ ...defaults, ...value }`. */
export class VersionedValueState extends ValueState {
  constructor(name, version, migrate) {
    checkVersion(name, version);
    super(name);
    this.version = version;
    this._migrate = migrate;
  }

  /** Fetches and decodes every slot not written yet, migrating older values. */
  _fetch() {
    super._fetch();
    const cache = this._cache;
    const ends = this._ends;
    const present = this._present;
    for (let slot = 0; slot < cache.length; slot++) {
      if (cache[slot] !== UNREAD) continue;
      if (present[slot] === 0) {
        cache[slot] = ABSENT;
        continue;
      }
      let [version, value] = splitVersion(decodeValue(this._items, slot ? ends[slot - 1] : 0, ends[slot]));
      if (version !== this.version) {
        value = this._migrated(version, value);
        // Written back in this version with the batch's writes, once.
        this._isDirty[slot] = 1;
        this._dirty.push(slot);
      }
      cache[slot] = value;
    }
  }

  _migrated(version, value) {
    return migrated(this, version, value);
  }

  _flushInto(ops, buf) {
    if (this.version > 1) {
      const cache = this._cache;
      for (const slot of this._dirty) {
        const value = cache[slot];
        if (value !== ABSENT) cache[slot] = { $version: this.version, $value: value };
      }
    }
    super._flushInto(ops, buf);
  }
}

/** A map from JSON keys to JSON values per key, ordered by the bytes of the keys' CBOR (integers
 * in numeric order, strings by length then bytes).
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

  /** The values under `keys[i]` in the map of the key of `slots[i]` (`dflt` where there is
   * none), as an array, in one host call: the map reads of a whole batch in `processBatch`
   * (`slots` from `batch.slots`). Like `get`, it first sends the batch's pending writes. */
  getMany(slots, keys, dflt = undefined) {
    const n = slots.length;
    if (keys.length !== n) {
      throw new WeirError(
        `map state \`${this.name}\`: getMany takes one key per slot, not ${keys.length} keys for ${n} slots`,
      );
    }
    rt.flush();
    const encoded = new ByteBuffer(16 * n);
    const ends = new Uint32Array(n);
    for (let i = 0; i < n; i++) {
      encodeInto(encoded, keys[i]);
      ends[i] = encoded.len;
    }
    const found = host(`map state \`${this.name}\`: reading`, () =>
      stateApi.mapGetMany(this._id, slotColumn(slots), {
        data: encoded.view(),
        ends: columnBytes(ends, n),
      }),
    );
    const { items, present } = found;
    const itemEnds = u32s(items.ends, "reply from the host");
    if (itemEnds.length !== n || present.length !== n) {
      throw new WeirError(`map state \`${this.name}\`: malformed reply from the host`);
    }
    const values = new Array(n);
    let start = 0;
    for (let i = 0; i < n; i++) {
      values[i] = present[i] ? decode(items.data, start, itemEnds[i]) : dflt;
      start = itemEnds[i];
    }
    return values;
  }

  put(key, value) {
    rt.log(MAP_PUT, this._id, rt.slotFor(this.name), key, value);
  }

  _putAt(slot, key, value) {
    rt.log(MAP_PUT, this._id, slot, key, value);
  }

  remove(key) {
    rt.log(MAP_REMOVE, this._id, rt.slotFor(this.name), key, undefined);
  }

  clear() {
    rt.log(MAP_CLEAR, this._id, rt.slotFor(this.name), undefined, undefined);
  }

  /** Every [key, value], in the order of the keys' CBOR. */
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

/** A `MapState` whose values carry a version (`ctx.mapState(name, { version, migrate })`), as
 * `VersionedValueState`'s do: a value of an older version is migrated as it is read (`get`,
 * `entries`) and put back in this version with the batch's writes. Keys have no version. */
export class VersionedMapState extends MapState {
  constructor(name, version, migrate) {
    checkVersion(name, version);
    super(name);
    this.version = version;
    this._migrate = migrate;
  }

  _read(key, stored) {
    let [version, value] = splitVersion(stored);
    if (version !== this.version) {
      value = migrated(this, version, value);
      this.put(key, value);
    }
    return value;
  }

  get(key, dflt = undefined) {
    const found = super.get(key, ABSENT);
    return found === ABSENT ? dflt : this._read(key, found);
  }

  getMany(slots, keys, dflt = undefined) {
    const found = super.getMany(slots, keys, ABSENT);
    for (let i = 0; i < found.length; i++) {
      if (found[i] === ABSENT) {
        found[i] = dflt;
        continue;
      }
      let [version, value] = splitVersion(found[i]);
      if (version !== this.version) {
        value = migrated(this, version, value);
        super._putAt(slots[i], keys[i], this.version > 1 ? { $version: this.version, $value: value } : value);
      }
      found[i] = value;
    }
    return found;
  }

  put(key, value) {
    super.put(key, this.version > 1 ? { $version: this.version, $value: value } : value);
  }

  entries() {
    return super.entries().map(([key, value]) => [key, this._read(key, value)]);
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

  /** The lists of the keys of `slots` (from `batch.slots`), each oldest first, as an array of
   * arrays, in one host call: the list reads of a whole batch in `processBatch`. Like `get`,
   * it first sends the batch's pending writes. */
  getMany(slots) {
    rt.flush();
    const n = slots.length;
    const lists = host(`list state \`${this.name}\`: reading`, () =>
      stateApi.listReadMany(this._id, slotColumn(slots)),
    );
    const counts = u32s(lists.counts, "reply from the host");
    const ends = u32s(lists.items.ends, "reply from the host");
    if (counts.length !== n) throw new WeirError(`list state \`${this.name}\`: malformed reply from the host`);
    const out = new Array(n);
    let item = 0;
    let start = 0;
    for (let i = 0; i < n; i++) {
      const list = new Array(counts[i]);
      for (let j = 0; j < counts[i]; j++, item++) {
        if (item >= ends.length) throw new WeirError(`list state \`${this.name}\`: malformed reply from the host`);
        list[j] = decode(lists.items.data, start, ends[item]);
        start = ends[item];
      }
      out[i] = list;
    }
    return out;
  }

  _rewriteAt(slot, items) {
    rt.log(LIST_CLEAR, this._id, slot, undefined, undefined);
    for (const item of items) rt.log(LIST_APPEND, this._id, slot, undefined, item);
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

/** `batch.focus(slot)`: the calls that act on one key (map and list state, timers, a value
 * state's `get` and `set`) act on the key of `slot` until the next `focus`. Defined here, as
 * the key slot is this module's variable. */
Batch.prototype.focus = function focus(slot) {
  if (this !== rt.columns) {
    throw new WeirError("batch.focus works on the batch of the processBatch call being run");
  }
  if (!Number.isInteger(slot) || slot < 0 || slot >= rt.slotCount) {
    throw new WeirError(
      `batch.focus(${String(slot)}): a slot is a number of batch.slots, from 0 to ${rt.slotCount - 1} in this batch`,
    );
  }
  currentSlot = slot;
};

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

/** Runs `operator` over one WIT batch: `processBatch` once (when `batchApi`), or `process` for
 * each record with its key slot set; returns what it emitted. On a failure the batch's writes
 * and output are dropped, and the WIT `failure` naming the record is thrown. */
export function runBatch(operator, batchApi, out, batch, keySlots) {
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
    const rows = { timers: false, slots: keySlots, timestamps, flags };
    if (batchApi) {
      const columns = new Batch(data, keyEnds, valueEnds, flags, timestamps, keySlots, slots);
      rt.begin(slots, UNREAD, columns);
      rt.rows = rows;
      operator.processBatch(columns, out);
      rt.finish();
      return out._take();
    }
    rt.begin(slots);
    rt.rows = rows;
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
}

/** Runs `operator.onTimer` for each timer of the WIT `fired-timers`, with its key slot set;
 * returns what it emitted. A failure is handled as in `runBatch`. */
export function runTimers(operator, out, timers) {
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
    rt.rows = { timers: true, slots: keySlots, timestamps, tags, clock };
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
}

/** A `ListState` whose items carry a version (`ctx.listState(name, { version, migrate })`): a
 * `get` that finds items of an older version migrates them and writes the whole list back in
 * this version (a list is only ever cleared and appended to). */
export class VersionedListState extends ListState {
  constructor(name, version, migrate) {
    checkVersion(name, version);
    super(name);
    this.version = version;
    this._migrate = migrate;
  }

  push(item) {
    super.push(this.version > 1 ? { $version: this.version, $value: item } : item);
  }

  get() {
    let migratedAny = false;
    const items = super.get().map((stored) => {
      let [version, item] = splitVersion(stored);
      if (version !== this.version) {
        item = migrated(this, version, item);
        migratedAny = true;
      }
      return item;
    });
    if (migratedAny) {
      this.clear();
      for (const item of items) this.push(item);
    }
    return items;
  }

  getMany(slots) {
    const wrap = (item) => (this.version > 1 ? { $version: this.version, $value: item } : item);
    return super.getMany(slots).map((stored, i) => {
      let migratedAny = false;
      const items = stored.map((s) => {
        let [version, item] = splitVersion(s);
        if (version !== this.version) {
          item = migrated(this, version, item);
          migratedAny = true;
        }
        return item;
      });
      if (migratedAny) this._rewriteAt(slots[i], items.map(wrap));
      return items;
    });
  }
}
