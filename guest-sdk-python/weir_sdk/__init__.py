"""Write Weir stream operators in Python, compiled to components with componentize-py.

An operator is a subclass of `Operator`: `open(ctx)` reads the configuration and declares
keyed state, `process(record, out)` turns each input `Record` into any number of output
records written to `out` (an `Emitter`), and `close(out)` may emit final records at the end
of input. An operator may implement `process_batch(batch, out)` instead, which gets the whole
`Batch` as columns, reads and writes the value state of all its keys in one call each
(`ValueState.get_all` or `get_by_slot`, `set_all`) and emits many records in one call
(`Emitter.emit_columns`, `emit_many`): the faster way, as in a pandas or Arrow UDF.
`export(cls)` turns the class into the `Processor` class that componentize-py
exports as `weir:operator/processor`; the application module must bind it to the name
`Processor`:

    import weir_sdk

    class Counter(weir_sdk.Operator):
        def open(self, ctx):
            self.count = ctx.value_state("count")

        def process(self, record, out):
            n = (self.count.get() or 0) + 1
            self.count.set(n)
            out.emit(record.key, f"{record.key_str()}\\t{n}")

    Processor = weir_sdk.export(Counter)

Put the operator in `operator.py` and build it with `weir build`, which packs it and the
project's own modules into a runner made of this SDK, the one of the `weir` binary
(`_bundle.py`), and checks that they import; `weir new --lang python NAME` starts a project.

Like the Rust SDK, this one is built around the cost of the component boundary:

- Records arrive as one flat batch (`data`, `key-ends`, `value-ends`, `flags`, `timestamps`)
  plus one key slot per record; `process` sees them one at a time through a single reused
  `Record` (copy `record.key`/`record.value` if you keep them, they are plain `bytes`).
- A `ValueState` reads the values of *every* key slot of the batch in one `read-values`
  call, the first time it is read in a batch: plain integers are all decoded at once, other
  values on their slot's first use.
- All writes of a batch are buffered and reach the host in one `apply` call at the end of
  the batch (a value state sends one write per key it changed, whatever the number of
  `set`s). A map or list read first sends the pending writes (read your writes).
- Output records are collected and joined into one flat batch when the call returns.

Where the time goes (CPython compiled to WebAssembly, no JIT): every element of a WIT list
other than `list<u8>` would cross the boundary as its own Python object, so the WIT carries
every number column as little-endian bytes (`u32s`, `s64s`), one `bytes` each, which this SDK
views as numbers with `memoryview.cast` without a copy. The per-record loops below keep to
list indexing and C-level builtins (`zip`, `map`, `bytes.join`, `itertools.accumulate`,
`array` slices), build nothing per record that the batch does not need, and build the `apply`
log and the output columns once per batch.

State values, map keys, map values and list items are stored as JSON text (compact, UTF-8):
a count of 5 is stored as the bytes `5`. They must be JSON-serializable.

`Emitter.emit` takes keys and values as `bytes`, `bytearray`, `memoryview` or `str` (UTF-8)
and raises a `TypeError` at the call for anything else; `emit_json` writes any JSON value.

An exception raised by `open`, `process` or `close` fails the job with its message and its
traceback, as Python prints it but without this SDK's frames and without source lines
(reading them would call on a file system the component does not have): each frame's file,
line and function. From `process`,
the host also learns which record of the batch was being processed. The writes of the failed
batch are dropped and so are the records it emitted; the host may roll the batch's state back
and process it again without the failing record, so an operator keeps nothing of a failed
batch in its own attributes either.
"""

import importlib
import json
import re
from array import array
from bisect import bisect_right
from itertools import accumulate, chain, compress, count, repeat
from operator import is_not, length_hint

from componentize_py_types import Err
from wit_world.imports import log as _log
from wit_world.imports import metrics as _metrics

from . import _logging
from struct import Struct

from wit_world.imports import state as _state
from wit_world.imports import time as _time
from wit_world.imports import types as _types

__all__ = [
    "Operator",
    "OpenContext",
    "Record",
    "Batch",
    "Emitter",
    "ValueState",
    "MapState",
    "ListState",
    "Timers",
    "Timer",
    "WeirError",
    "export",
    "trace",
    "debug",
    "info",
    "warn",
    "error",
]

#: The key slot of a record without key (and the slot outside of `process`).
NO_SLOT = 0xFFFFFFFF
#: Bit 0 of a record's flags: it has a key.
HAS_KEY = 1
#: Bit 1 of a record's flags: it has a timestamp.
HAS_TIMESTAMP = 2
#: How many entries one `map-entries` call asks for.
_PAGE = 1024


class WeirError(Exception):
    """An error the SDK reports (bad batch, state misuse, a failed host call), or an operator
    raises. From `process_batch`, `record=i` tells the host that record `i` of the batch
    failed (`process` needs no index: the SDK knows which record it was handling)."""

    def __init__(self, message="", record=None):
        super().__init__(message)
        self.record = record


# ---------------------------------------------------------------------------------------------
# Encoding


def _encode(value):
    """The JSON text of `value`, as UTF-8 bytes (integers without going through `json`)."""
    if type(value) is int:
        return str(value).encode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _decode(data):
    # Counters are the common case: plain digits parse without going through `json`.
    if data.isdigit():
        return int(data)
    return json.loads(data)


# ---------------------------------------------------------------------------------------------
# Logging (each call is one crossing to the host: keep it out of per-record loops)


def trace(message):
    _log.log(_log.Level.TRACE, str(message))


def debug(message):
    _log.log(_log.Level.DEBUG, str(message))


def info(message):
    _log.log(_log.Level.INFO, str(message))


def warn(message):
    _log.log(_log.Level.WARN, str(message))


def error(message):
    _log.log(_log.Level.ERROR, str(message))


def _count_dropped_late(records):
    """Counts `records` dropped as too late for event time into the host's per-operator count
    (the run summary, `/metrics`, the console). `weir_sdk.windows` calls it."""
    _metrics.count_dropped_late(records)


# `logging` at every level, into the guest log (guest-sdk-python/weir_sdk/_logging.py).
_logging.install()


# ---------------------------------------------------------------------------------------------
# Records


class Record:
    """One input record: `key` (`bytes`, or None for a record without key), `value` (`bytes`)
    and `timestamp` (milliseconds since the Unix epoch, or None).

    The SDK reuses one `Record` for every record of a batch: keep its fields, not the record.
    `value` is cut from the batch when it is read (an operator that never reads it does not
    pay for it): read it once and keep it in a variable if you use it more than once.
    """

    __slots__ = ("key", "timestamp", "_data", "_start", "_end")

    def __init__(self, key=None, value=b"", timestamp=None):
        self.key = key
        self.timestamp = timestamp
        self._data = value if type(value) is bytes else _as_bytes(value, "Record")
        self._start = 0
        self._end = len(self._data)

    @property
    def value(self):
        return self._data[self._start : self._end]

    def key_str(self):
        """The key as text (UTF-8), or None for a record without key."""
        key = self.key
        return None if key is None else key.decode()

    def value_str(self):
        """The value as text (UTF-8)."""
        return self._data[self._start : self._end].decode()

    def value_json(self):
        """The value parsed as JSON."""
        return json.loads(self._data[self._start : self._end])

    def __repr__(self):
        return f"Record(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp!r})"


def _u32s(column, what):
    """The WIT `u32s` `column` (little-endian u32s in bytes) as a memoryview of ints: no copy
    (WebAssembly is little-endian, and "I" is 4 bytes there)."""
    try:
        return memoryview(column).cast("I")
    except TypeError:
        raise WeirError(f"malformed {what}: {len(column)} bytes, not a whole number of u32s") from None


def _s64s(column, what):
    """The WIT `s64s` `column` (little-endian i64s in bytes) as a memoryview of ints."""
    try:
        return memoryview(column).cast("q")
    except TypeError:
        raise WeirError(f"malformed {what}: {len(column)} bytes, not a whole number of s64s") from None


class Batch:
    """The records of a batch as columns, given to `Operator.process_batch`; like an Arrow
    binary column, keys and values are one buffer with offsets.

    - `len(batch)`: the number of records.
    - `keys()`, `values()`: lists of `bytes`, one per record (a record without key has the key
      None); `records()`: the records as `Record`s.
    - `slots`: a list with, per record, the index of its key among the batch's distinct keys,
      in order of first appearance (the order of `ValueState.get_all`); records with equal
      keys share one.
    - The raw columns, views of the batch without a copy: `data` (`bytes`: key 0, value 0,
      key 1, ...), `key_ends` and `value_ends` (memoryviews of ints: record `i`'s key is
      `data[value_ends[i - 1]:key_ends[i]]`, from 0 for the first, and its value
      `data[key_ends[i]:value_ends[i]]`), `flags` (`bytes`: bit 0 set if the record has a key,
      bit 1 if it has a timestamp) and `timestamps` (memoryview of ints, milliseconds since
      the Unix epoch, 0 where a record has none).

    Valid during the `process_batch` call: copy what you keep (`bytes` slices are copies).
    """

    __slots__ = ("data", "key_ends", "value_ends", "flags", "timestamps", "slots", "_keys", "_ends")

    def __init__(self, data, key_ends, value_ends, flags, timestamps, slots):
        self.data = data
        self.key_ends = key_ends
        self.value_ends = value_ends
        self.flags = flags
        self.timestamps = timestamps
        self.slots = slots
        self._keys = None
        self._ends = None

    def _lists(self):
        """The key ends and the value ends as lists: slicing with list items in a
        comprehension runs faster than anything over the memoryviews."""
        ends = self._ends
        if ends is None:
            ends = self._ends = (self.key_ends.tolist(), self.value_ends.tolist())
        return ends

    def __len__(self):
        return len(self.flags)

    def keys(self):
        """Every record's key (`bytes`, None for a record without key); one list per batch,
        made on the first call."""
        keys = self._keys
        if keys is None:
            data, flags = self.data, self.flags
            key_ends, value_ends = self._lists()
            starts = [0]
            starts += value_ends
            keys = [data[start:end] for start, end in zip(starts, key_ends)]
            if flags.count(HAS_KEY) + flags.count(HAS_KEY | HAS_TIMESTAMP) != len(flags):
                for i, f in enumerate(flags):
                    if not f & HAS_KEY:
                        keys[i] = None
            self._keys = keys
        return keys

    def values(self):
        """Every record's value, as `bytes`."""
        data = self.data
        return [data[start:end] for start, end in zip(*self._lists())]

    def records(self):
        """The records one by one, as `Record`s (each a new object)."""
        flags, timestamps = self.flags, self.timestamps
        for i, (key, value) in enumerate(zip(self.keys(), self.values())):
            yield Record(key, value, timestamps[i] if flags[i] & HAS_TIMESTAMP else None)

    def __repr__(self):
        return f"<Batch of {len(self)} records>"


def _as_bytes(value, call="emit", arg="value"):
    """`str` as UTF-8; `bytes` as it is; any other bytes-like object (`bytearray`,
    `memoryview`) copied into `bytes`. Anything else is a TypeError naming `call` and its
    argument `arg`: the slow branch of `emit`, so the type checks cost nothing to bytes and
    str."""
    if type(value) is str:
        return value.encode()
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(_wrong_type(call, arg, value)) from None
    return bytes(view)


def _wrong_type(call, arg, value):
    accepted = "bytes, bytearray, memoryview or str (UTF-8)"
    if arg == "key":
        return (
            f"{call}: a key is {accepted}, or None for a record without key, "
            f"not {type(value).__name__}; convert it first, e.g. str(key)"
        )
    hint = "; use emit_json(key, value) to emit other values as JSON" if call == "emit" else ""
    return f"{call}: a {arg} is {accepted}, not {type(value).__name__}{hint}"


class Emitter:
    """Where an operator writes its output records, in emit order; they become one flat
    batch, returned to the host when the call ends. Keys and values are `bytes` or `str`
    (encoded as UTF-8); `bytearray` and `memoryview` are copied; anything else is a
    `TypeError` at the call (`emit_json` writes other values as JSON)."""

    # `_parts`: key 0, value 0, key 1, value 1, ... as bytes (a record without key has an
    # empty one); `_special`: (index, flags, timestamp) of the records that have no key or
    # have a timestamp, the others being keyed and without timestamp.
    __slots__ = ("_parts", "_special")

    def __init__(self):
        self._parts = []
        self._special = []

    def emit(self, key, value, timestamp=None):
        """Emits a record; `key` None makes a record without key. `key` and `value` are
        `bytes`, `bytearray`, `memoryview` or `str`; see `emit_json` for other values."""
        if type(value) is not bytes:
            value = value.encode() if type(value) is str else _as_bytes(value)
        if type(key) is bytes and timestamp is None:
            parts = self._parts
            parts.append(key)
            parts.append(value)
        else:
            self._emit(key, value, timestamp)

    def _emit(self, key, value, timestamp):
        parts = self._parts
        flags = 0
        if key is None:
            key = b""
        else:
            if type(key) is not bytes:
                key = _as_bytes(key, "emit", "key")
            flags = HAS_KEY
        if timestamp is None:
            timestamp = 0
        else:
            if not isinstance(timestamp, int):
                raise TypeError(f"a timestamp is an int (milliseconds), not {type(timestamp).__name__}")
            flags |= HAS_TIMESTAMP
        if flags != HAS_KEY:
            self._special.append((len(parts) >> 1, flags, timestamp))
        parts.append(key)
        parts.append(value)

    def emit_json(self, key, value, timestamp=None):
        """Emits a record whose value is `value` as (compact) JSON."""
        self.emit(key, json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(), timestamp)

    def emit_columns(self, keys, values, timestamps=None):
        """Emits one record per item of the parallel sequences `keys` and `values` (and
        `timestamps`, if given): the fast way to emit many. Items are what `emit` takes; when
        every key and value is `bytes` (or every value `str`) and there are no timestamps,
        the records are appended in C, with no Python code per record."""
        if type(keys) is not list:
            keys = list(keys)
        if type(values) is not list:
            values = list(values)
        if len(keys) != len(values) or (timestamps is not None and len(timestamps) != len(keys)):
            raise ValueError(
                f"emit_columns: {len(keys)} keys, {len(values)} values"
                + ("" if timestamps is None else f", {len(timestamps)} timestamps")
                + "; give one of each per record"
            )
        if timestamps is None and set(map(type, keys)) <= {bytes}:
            value_types = set(map(type, values))
            if value_types == {str}:
                values = list(map(str.encode, values))
                value_types = {bytes}
            if value_types <= {bytes}:
                # Interleaved by slice assignment: pointer copies, in C.
                parts = [None] * (2 * len(keys))
                parts[0::2] = keys
                parts[1::2] = values
                if self._parts:
                    self._parts += parts
                else:
                    self._parts = parts
                return
        emit = self.emit
        if timestamps is None:
            for key, value in zip(keys, values):
                emit(key, value)
        else:
            for key, value, timestamp in zip(keys, values, timestamps):
                emit(key, value, timestamp)

    def emit_many(self, records):
        """Emits every record of `records`, an iterable of `(key, value)` or
        `(key, value, timestamp)` tuples, as `emit` would each."""
        if type(records) is not list:
            records = list(records)
        if set(map(len, records)) <= {2} and set(map(type, chain.from_iterable(records))) <= {bytes}:
            self._parts += chain.from_iterable(records)
            return
        emit = self.emit
        for record in records:
            emit(*record)

    def __len__(self):
        return len(self._parts) >> 1

    def _take(self):
        parts = self._parts
        n = len(parts) >> 1
        data = b"".join(parts)
        if len(data) > 0xFFFFFFFF:
            self._discard()
            raise WeirError("the records emitted in one call exceed 4 GiB; emit less per batch")
        ends = array(_WORDS, accumulate(map(len, parts)))
        special = self._special
        if special:
            flags = bytearray(b"\x01") * n
            timestamps = array("q", bytes(8 * n))
            for i, f, timestamp in special:
                flags[i] = f
                timestamps[i] = timestamp
            flags, timestamps = bytes(flags), timestamps.tobytes()
        else:
            flags, timestamps = b"\x01" * n, bytes(8 * n)
        batch = _types.Batch(data, ends[0::2].tobytes(), ends[1::2].tobytes(), flags, timestamps)
        self._discard()
        return batch

    def _discard(self):
        self._parts = []
        self._special = []


# ---------------------------------------------------------------------------------------------
# The per-batch machinery: current key slot, write log, value caches

#: The key slot of the record being processed (a module global: the cheapest lookup there is).
_slot = NO_SLOT

#: An `apply` log is five u32 words per operation (kind, state, slot, key end, value end),
#: little-endian: an `array` of C `unsigned int`s on little-endian wasm32, sent as its bytes.
_WORDS = "I"
assert array(_WORDS).itemsize == 4

#: The first word of an operation: the ordinal of its WIT `op-kind`.
_VALUE_SET = _state.OpKind.VALUE_SET.value
_VALUE_REMOVE = _state.OpKind.VALUE_REMOVE.value
_MAP_PUT = _state.OpKind.MAP_PUT.value
_MAP_REMOVE = _state.OpKind.MAP_REMOVE.value
_MAP_CLEAR = _state.OpKind.MAP_CLEAR.value
_LIST_APPEND = _state.OpKind.LIST_APPEND.value
_LIST_CLEAR = _state.OpKind.LIST_CLEAR.value
_TIMER_REGISTER = _state.OpKind.TIMER_REGISTER.value
_TIMER_DELETE = _state.OpKind.TIMER_DELETE.value
#: A timer in an `apply` log: its timestamp (s64) then its tag (u32), little-endian.
_TIMER = Struct("<qI")


#: `bisect_right(_DIGITS, n)` is the number of decimal digits of `n`, for 0 <= n < _DIGITS_BELOW.
_DIGITS = [0] + [10**i for i in range(1, 19)]
_DIGITS_BELOW = 10**19


class _Runtime:
    """The one runtime of this component instance (a component instance is single-threaded)."""

    def __init__(self):
        self.in_batch = False
        self.in_open = False
        self.slot_count = 0
        # `read-values`' argument for every slot of the batch: u32s 0, 1, 2, ... as bytes.
        self.all_slots = b""
        # In `process_batch`: the `Batch`, its distinct keys by slot and {key: slot}, each made
        # when first needed.
        self.batch = None
        self.distinct = None
        self.slot_of = None
        self.ops = array(_WORDS)
        self.data = bytearray()
        # Value states read or written in the current batch.
        self.touched = []
        # The watermark, read from the host at most once per batch.
        self.watermark = _UNREAD

    def begin(self, slot_count, watermark=None, batch=None):
        if self.slot_count != slot_count:
            self.slot_count = slot_count
            self.all_slots = array(_WORDS, range(slot_count)).tobytes()
        self.in_batch = True
        self.batch = batch
        self.distinct = None
        self.slot_of = None
        self.watermark = _UNREAD if watermark is None else watermark

    def batch_keys(self, name):
        """In `process_batch`: the batch's distinct keys, by slot."""
        distinct = self.distinct
        if distinct is None:
            batch = self.batch
            if batch is None or not self.in_batch:
                raise WeirError(
                    f"state `{name}`: get_all, get_by_slot and set_all work in process_batch; "
                    "in process, use get and set"
                )
            # {slot: key} keeps the slots in order of first appearance, which is their order
            # (the host numbers them so), and hashes small ints rather than the keys.
            by_slot = dict(zip(batch.slots, batch.keys()))
            by_slot.pop(NO_SLOT, None)
            distinct = self.distinct = list(by_slot.values())
        return distinct

    def batch_slots(self, name):
        """In `process_batch`: {key: slot} for the batch's keys."""
        slot_of = self.slot_of
        if slot_of is None:
            slot_of = self.slot_of = dict(zip(self.batch_keys(name), count()))
        return slot_of

    def log(self, kind, state, slot, key, value):
        """Appends one write; `key` and `value` are encoded bytes or None."""
        data = self.data
        if key is not None:
            data += key
        key_end = len(data)
        if value is not None:
            data += value
        self.ops.extend((kind, state, slot, key_end, len(data)))

    def flush(self):
        """Sends the pending writes in one `apply` (before a map or list read, and at the end
        of the batch)."""
        if not self.ops:
            return
        ops, data = self.ops.tobytes(), bytes(self.data)
        self.ops = array(_WORDS)
        self.data = bytearray()
        try:
            _state.apply(ops, data)
        except Err as e:
            raise WeirError(f"applying state writes: {e.value}") from None

    def finish(self):
        """The end of a batch: the dirty value slots join the log, the log goes out."""
        touched = self.touched
        self.touched = []
        for value_state in touched:
            value_state._flush_into(self.ops, self.data)
        self.flush()
        self.end()

    def abort(self):
        for value_state in self.touched:
            value_state._reset()
        self.touched = []
        self.ops = array(_WORDS)
        self.data = bytearray()
        self.end()

    def end(self):
        global _slot
        self.in_batch = False
        self.batch = None
        self.distinct = None
        self.slot_of = None
        _slot = NO_SLOT

    def no_slot(self, name):
        if self.batch is not None:
            return WeirError(
                f"state `{name}`: in process_batch, read and write value state for all keys at "
                "once with get_all (or get_by_slot) and set_all; map and list state and timers "
                "need process"
            )
        if self.in_batch:
            return WeirError(
                f"state `{name}`: state access needs a keyed record; key the stream with key_by "
                "before this operator (this record has no key)"
            )
        return WeirError(
            f"state `{name}`: state can only be read or written while processing a record, "
            "not in open or close"
        )


# Markers in a value cache: not read yet, and no value.
_UNREAD = object()
_ABSENT = object()

_rt = _Runtime()


def _declare(name, kind):
    if not _rt.in_open:
        raise WeirError(f"state `{name}` must be declared in open")
    try:
        return _state.declare(name, kind)
    except Err as e:
        raise WeirError(f"declaring state `{name}`: {e.value}") from None


def _current_slot(name):
    slot = _slot
    if slot == NO_SLOT:
        raise _rt.no_slot(name)
    return slot


class ValueState:
    """One JSON value per key. `get` returns None (or `default`) where the key has none.

    The first read in a batch fetches the values of every key of the batch in one host call;
    writes stay in the SDK until the end of the batch. In `process_batch`, `get_all` (a dict)
    or `get_by_slot` (a list) and `set_all` read and write the values of all the batch's keys
    at once."""

    # Per batch, from the first use of the state in the batch: `_cache` holds each slot's value
    # (or _UNREAD, _ABSENT), `_dirty` the slots written (a dict used as an ordered set);
    # `_items` the reply of `read-values` once fetched. Outside of that, `_cache` is None:
    # `get` and `set` index it and fall to `_begin` on the TypeError (or on the IndexError of
    # NO_SLOT), which keeps checks out of their common path.
    __slots__ = ("name", "_id", "_cache", "_dirty", "_items", "_given", "_decoded")

    def __init__(self, name):
        self.name = name
        self._id = _declare(name, _state.StateKind.VALUE)
        self._reset()

    def _reset(self):
        self._cache = None
        self._dirty = None
        self._items = None
        self._given = None
        # Whether `_fetch` decoded every slot (counters), leaving none _UNREAD.
        self._decoded = False

    def _begin(self):
        """The cache of the current batch, made on the state's first use in the batch."""
        slot = _slot
        if slot == NO_SLOT or not _rt.in_batch:
            raise _rt.no_slot(self.name) from None  # not the lookup that led here
        return self._cache_of_batch()

    def _cache_of_batch(self):
        cache = self._cache
        if cache is None:
            cache = self._cache = [_UNREAD] * _rt.slot_count
            self._dirty = {}
            _rt.touched.append(self)
        return cache

    def get_all(self, default=None):
        """In `process_batch`: a dict of every key of the batch (`bytes`, in order of first
        appearance) to its value, `default` where it has none. Fetched in one host call."""
        return dict(zip(_rt.batch_keys(self.name), self.get_by_slot(default)))

    def get_by_slot(self, default=None):
        """In `process_batch`: the values of every key of the batch as a list indexed by slot
        (`batch.slots[i]` is record `i`'s), `default` where a key has none: `get_all` without
        hashing the keys, the fastest way. Fetched in one host call."""
        if _rt.batch is None or not _rt.in_batch:
            raise WeirError(
                f"state `{self.name}`: get_all, get_by_slot and set_all work in process_batch; "
                "in process, use get and set"
            )
        self._cache_of_batch()
        if self._items is None:
            self._fetch()
        if not self._decoded:
            read = self._read
            for slot, value in enumerate(self._cache):
                if value is _UNREAD:
                    read(slot)
            self._decoded = True
        values = self._cache
        if 0 in self._items[2]:
            # Some key has no value (fewer than all: the common case checked in C).
            values = [default if value is _ABSENT else value for value in values]
        self._given = values
        return values[:]

    def set_all(self, values):
        """In `process_batch`: sets the value of every key of `values`, a dict of keys of the
        batch (as `get_all` gives them) or a list by slot (as `get_by_slot` gives); sent with
        the batch's other writes. A value that is the very object `get_all` or `get_by_slot`
        returned for its key is unchanged and not written."""
        _rt.batch_keys(self.name)  # in process_batch, or an error saying where it works
        given = self._given
        if type(values) is list:
            if len(values) != _rt.slot_count:
                raise WeirError(
                    f"state `{self.name}`: set_all takes one value per key of the batch "
                    f"({_rt.slot_count}), not {len(values)}"
                )
            self._cache_of_batch()
            if given is None:
                given = self._cache
            self._dirty.update(dict.fromkeys(compress(count(), map(is_not, values, given))))
            self._cache = values[:]
            return
        if given is not None and len(values) == len(given) and list(values) == _rt.batch_keys(self.name):
            # The dict `get_all` gave, with its keys as they were: its values are by slot.
            new = list(values.values())
            self._dirty.update(dict.fromkeys(compress(count(), map(is_not, new, given))))
            self._cache = new
            return
        slot_of = _rt.batch_slots(self.name)
        try:
            slots = list(map(slot_of.__getitem__, values))
        except KeyError as e:
            raise WeirError(
                f"state `{self.name}`: set_all: {e.args[0]!r} is not a key of this batch"
            ) from None
        new = list(values.values())
        if given is not None:
            changed = list(map(is_not, new, map(given.__getitem__, slots)))
            slots = list(compress(slots, changed))
            new = list(compress(new, changed))
        cache = self._cache_of_batch()
        for slot, value in zip(slots, new):
            cache[slot] = value
        self._dirty.update(dict.fromkeys(slots))

    def get(self, default=None):
        try:
            value = self._cache[_slot]
        except (TypeError, IndexError):
            value = self._begin()[_slot]
        if value is _UNREAD:
            value = self._read(_slot)
        return default if value is _ABSENT else value

    def set(self, value):
        try:
            self._cache[_slot] = value
        except (TypeError, IndexError):
            self._begin()[_slot] = value
        self._dirty[_slot] = None

    def remove(self):
        self.set(_ABSENT)

    def _read(self, slot):
        """The value of `slot`, not read yet in this batch."""
        items = self._items
        if items is None:
            items = self._fetch()
            value = self._cache[slot]
            if value is not _UNREAD:
                return value
        data, ends, present = items
        if present[slot]:
            value = _decode(data[ends[slot - 1] if slot else 0 : ends[slot]])
        else:
            value = _ABSENT
        self._cache[slot] = value
        return value

    def _fetch(self):
        """Reads the values of every slot of the batch; decodes them all at once when they are
        plain integers (counters), else leaves them to `_read`."""
        try:
            values = _state.read_values(self._id, _rt.all_slots)
        except Err as e:
            raise WeirError(f"state `{self.name}`: reading values: {e.value}") from None
        data, present = values.items.data, values.present
        ends = _u32s(values.items.ends, "reply from the host")
        n = _rt.slot_count
        if len(present) != n or len(ends) != n:
            raise WeirError(f"state `{self.name}`: malformed reply from the host")
        items = self._items = (data, ends, present)
        if n and (data.isdigit() or not data):
            ends = ends.tolist()
            starts = [0]
            starts += ends
            try:
                # Only digits: every present value is a non-negative integer (an empty one is
                # malformed JSON, which int() refuses too and `_read` reports).
                if 0 not in present:
                    decoded = [int(data[start:end]) for start, end in zip(starts, ends)]
                else:
                    numbers = iter(
                        list(map(int, map(data.__getitem__, map(slice, compress(starts, present), compress(ends, present)))))
                    )
                    decoded = [next(numbers) if p else _ABSENT for p in present]
            except ValueError:
                return items
            cache = self._cache
            for slot in self._dirty:
                decoded[slot] = cache[slot]
            self._cache = decoded
            self._decoded = True
        return items

    def _flush_into(self, ops, data):
        """Appends one write per dirty slot to the batch's log (`ops`, `data`).

        The words are written a column at a time (extended-slice assignment of arrays, in C):
        the kinds (all `value-set`, 0, for counters), state, slots, and the value ranges,
        whose ends are the running sum of the value lengths."""
        dirty = self._dirty
        if dirty:
            cache = self._cache
            slots = list(dirty)
            values = list(map(cache.__getitem__, slots))
            n = len(slots)
            start = len(data)
            words = array(_WORDS, bytes(20 * n))
            words[1::5] = array(_WORDS, repeat(self._id, n))
            words[2::5] = array(_WORDS, slots)
            if set(map(type, values)) == {int} and min(values) >= 0 and max(values) < _DIGITS_BELOW:
                # Counters: the texts of all values in one string, their lengths without texts.
                data += ("%d" * n % tuple(values)).encode()
                ends = array(_WORDS, accumulate(map(bisect_right, repeat(_DIGITS), values), initial=start))
            else:
                kinds = array(_WORDS)
                ends = array(_WORDS, (start,))
                for value in values:
                    if value is _ABSENT:
                        kinds.append(_VALUE_REMOVE)
                    else:
                        kinds.append(_VALUE_SET)
                        data += _encode(value)
                    ends.append(len(data))
                words[0::5] = kinds
            words[3::5] = ends[:-1]
            words[4::5] = ends[1:]
            ops += words
        self._reset()




class MapState:
    """A map from JSON keys to JSON values per key, ordered by the bytes of the encoded keys.

    Writes are buffered with the batch's other writes; a read first sends them, then calls
    the host (one crossing per read, per 1024 entries for `items`/`keys`)."""

    __slots__ = ("name", "_id")

    def __init__(self, name):
        self.name = name
        self._id = _declare(name, _state.StateKind.MAP)

    def get(self, key, default=None):
        slot = _current_slot(self.name)
        _rt.flush()
        try:
            found = _state.map_get(self._id, slot, _encode(key))
        except Err as e:
            raise WeirError(f"map state `{self.name}`: reading: {e.value}") from None
        return default if found is None else _decode(found)

    def __contains__(self, key):
        slot = _current_slot(self.name)
        _rt.flush()
        try:
            return _state.map_get(self._id, slot, _encode(key)) is not None
        except Err as e:
            raise WeirError(f"map state `{self.name}`: reading: {e.value}") from None

    def __len__(self):
        """The number of entries: one host call (the host counts them as they are written),
        whatever the size of the map."""
        slot = _current_slot(self.name)
        _rt.flush()
        try:
            return _state.map_size(self._id, slot)
        except Err as e:
            raise WeirError(f"map state `{self.name}`: reading its size: {e.value}") from None

    def __bool__(self):
        # A state object is a handle, true wherever it is used (`if self.seen:` in `open`
        # needs no record); `len(state)` says whether the record's map is empty.
        return True

    def put(self, key, value):
        _rt.log(_MAP_PUT, self._id, _current_slot(self.name), _encode(key), _encode(value))

    def remove(self, key):
        _rt.log(_MAP_REMOVE, self._id, _current_slot(self.name), _encode(key), None)

    def clear(self):
        _rt.log(_MAP_CLEAR, self._id, _current_slot(self.name), None, None)

    def _pages(self):
        slot = _current_slot(self.name)
        _rt.flush()
        after = None
        while True:
            try:
                page = _state.map_entries(self._id, slot, after, _PAGE)
            except Err as e:
                raise WeirError(f"map state `{self.name}`: reading entries: {e.value}") from None
            keys = _blobs(page.keys)
            values = _blobs(page.values)
            yield from zip(keys, values)
            if len(keys) < _PAGE:
                return
            after = keys[-1]

    def items(self):
        """Every (key, value), in the order of the encoded keys."""
        return [(_decode(k), _decode(v)) for k, v in self._pages()]

    def keys(self):
        return [_decode(k) for k, _ in self._pages()]


class ListState:
    """A list of JSON items per key, appended to."""

    __slots__ = ("name", "_id")

    def __init__(self, name):
        self.name = name
        self._id = _declare(name, _state.StateKind.LIST)

    def append(self, item):
        _rt.log(_LIST_APPEND, self._id, _current_slot(self.name), None, _encode(item))

    def clear(self):
        _rt.log(_LIST_CLEAR, self._id, _current_slot(self.name), None, None)

    def get(self):
        """Every item, oldest first."""
        slot = _current_slot(self.name)
        _rt.flush()
        try:
            blobs = _state.list_read(self._id, slot)
        except Err as e:
            raise WeirError(f"list state `{self.name}`: reading: {e.value}") from None
        return [_decode(item) for item in _blobs(blobs)]


class Timers:
    """Timers of the current key: `ctx.timers()` in `open`.

    In `process` they act on the record's key, in `on_timer` on the timer's. An event-time
    timer at `ts` (milliseconds) fires once the watermark reaches `ts`; a processing-time
    timer once the host's clock does (those that came due while the job was down fire right
    after it restores). One timer exists per (key, clock, timestamp, tag): registering it again
    changes nothing, and a fired timer is gone. Tags (0 to 2**32 - 1) tell an operator's
    timers apart; `weir_sdk.windows` uses those from `0xFFFF0000` up. Registrations travel
    with the batch's other state writes, in one host call. Timers are keyed state: they are
    checkpointed with the key, and move with it when the job is rescaled."""

    __slots__ = ()

    def register_event_time(self, ts, tag=0):
        _timer(_TIMER_REGISTER, 0, ts, tag)

    def delete_event_time(self, ts, tag=0):
        _timer(_TIMER_DELETE, 0, ts, tag)

    def register_processing_time(self, ts, tag=0):
        _timer(_TIMER_REGISTER, 1, ts, tag)

    def delete_processing_time(self, ts, tag=0):
        _timer(_TIMER_DELETE, 1, ts, tag)

    def watermark(self):
        """The subtask's watermark (milliseconds since the Unix epoch): records at or before
        it are late. None before the first watermark."""
        w = _rt.watermark
        if w is _UNREAD:
            w = _rt.watermark = _time.watermark()
        return w

    def processing_time(self):
        """The host's clock, in milliseconds since the Unix epoch."""
        return _time.processing_time()


def _timer(kind, domain, ts, tag):
    if type(ts) is not int or type(tag) is not int:
        raise TypeError(
            f"a timer's timestamp and tag are ints (milliseconds, tag), not {type(ts).__name__} "
            f"and {type(tag).__name__}"
        )
    try:
        packed = _TIMER.pack(ts, tag)
    except Exception:
        raise ValueError(
            f"a timer's timestamp is a signed 64-bit number and its tag 0 to 2**32 - 1: {ts}, {tag}"
        ) from None
    _rt.log(kind, domain, _current_slot("timers"), None, packed)


class Timer:
    """A timer that fired, given to `Operator.on_timer`: `key` (`bytes`), `timestamp`
    (milliseconds), `tag` and `domain` (`"event"` or `"processing"`)."""

    __slots__ = ("key", "timestamp", "tag", "domain")

    def __init__(self, key, timestamp, tag=0, domain="event"):
        self.key = key
        self.timestamp = timestamp
        self.tag = tag
        self.domain = domain

    def key_str(self):
        """The key as text (UTF-8)."""
        return self.key.decode()

    def __repr__(self):
        return (
            f"Timer(key={self.key!r}, timestamp={self.timestamp!r}, tag={self.tag!r}, "
            f"domain={self.domain!r})"
        )


def _blobs(blobs):
    """The byte strings of a WIT `blobs`."""
    data, ends = blobs.data, _u32s(blobs.ends, "reply from the host")
    starts = [0]
    starts += ends
    return list(map(data.__getitem__, map(slice, starts, ends)))


# ---------------------------------------------------------------------------------------------
# The operator and its export


class OpenContext:
    """Given to `Operator.open`: where the instance runs, its configuration (`config`, the
    job file's `config` table as a dict) and the place to declare state."""

    def __init__(self, context):
        self.operator_name = context.operator_name
        self.subtask = context.subtask
        self.parallelism = context.parallelism
        self.config_json = context.config
        text = context.config.strip()
        try:
            self.config = json.loads(text) if text else {}
        except ValueError as e:
            raise WeirError(f"invalid config for operator `{self.operator_name}`: {e}") from None

    def value_state(self, name):
        return ValueState(name)

    def map_state(self, name):
        return MapState(name)

    def list_state(self, name):
        return ListState(name)

    def timers(self):
        return Timers()


class Operator:
    """Base class of operators. The SDK creates one instance per subtask (without arguments),
    then calls `open` once, `process` for every record, `close` at the end of input."""

    def open(self, ctx):
        pass

    def process(self, record, out):
        raise NotImplementedError("an operator must implement process(record, out) or process_batch(batch, out)")

    #: `process_batch(batch, out)`, if an operator defines it, is called once per batch
    #: instead of `process` once per record: `batch` is a `Batch` (columns), the value state
    #: of all its keys is read and written with `ValueState.get_all` and `set_all`, and
    #: `out.emit_columns` or `out.emit_many` emit many records at once. Map and list state and
    #: timers need a record's key: use `process` for them.
    process_batch = None

    def on_timer(self, timer, out):
        """Handles a `Timer` that fired; state acts on `timer.key` here."""
        raise WeirError(
            f"a timer fired (tag {timer.tag}, at {timer.timestamp}) but the operator does not "
            "implement on_timer(timer, out)"
        )

    def close(self, out):
        pass


def _message(e):
    """What the host shows of an exception: `Type: message` (an SDK or host error: its
    message), then its traceback."""
    if isinstance(e, Err):
        return str(e.value)
    first = str(e) if isinstance(e, WeirError) else _exception_line(e)
    lines = []
    _traceback_lines(e, lines, {id(e)}, last=False)
    return "\n".join([first, *lines]) if lines else first


#: Files whose frames are left out of tracebacks: this module, the runner that imports the
#: operator (`_bundle.py`), the finder of last resort (`_preload.py`), and the import
#: machinery between the runner and the operator.
_HIDDEN_FILES = frozenset(
    (
        __file__,
        __file__.replace("__init__.py", "_bundle.py"),
        __file__.replace("__init__.py", "_preload.py"),
        importlib.__file__,
        "<frozen importlib._bootstrap>",
        "<frozen importlib._bootstrap_external>",
    )
)
#: The folders componentize-py puts the staged modules and the project's under (`/0/`, `/1/`).
_MOUNT = re.compile(r"^/\d+/")


def _exception_line(e):
    """`Type: message`, as the last line of a Python traceback (qualified outside builtins)."""
    kind = type(e)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__", "weir_operator"):
        name = f"{kind.__module__}.{name}"
    text = str(e)
    return f"{name}: {text}" if text else name


def _source_name(path):
    """A frame's file as the project names it. The runner compiles the packed files under
    their names in the project (`_bundle.py`); a module componentized as the application
    (`weir_operator.py`, under a mount of componentize-py) is named `operator.py` too."""
    path = _MOUNT.sub("", path)
    if path == "weir_operator.py":
        return "operator.py"
    return path


def _traceback_lines(e, lines, seen, last=True):
    """Appends the traceback of `e` as Python prints it, with the exceptions it was raised from
    or while handling first, and without this SDK's frames or source lines: reading source
    files would call on a file system the component does not have. `last`: end with the
    exception's own line."""
    cause, context = e.__cause__, e.__context__
    if cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        _traceback_lines(cause, lines, seen)
        lines += ["", "The above exception was the direct cause of the following exception:", ""]
    elif context is not None and not e.__suppress_context__ and id(context) not in seen:
        seen.add(id(context))
        _traceback_lines(context, lines, seen)
        lines += ["", "During handling of the above exception, another exception occurred:", ""]
    frames = []
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename not in _HIDDEN_FILES:
            line = "?" if tb.tb_lineno is None else tb.tb_lineno
            name = getattr(code, "co_qualname", code.co_name)
            frames.append(f'  File "{_source_name(code.co_filename)}", line {line}, in {name}')
        tb = tb.tb_next
    if frames:
        lines.append("Traceback (most recent call last):")
        lines += frames
    if last:
        lines.append(_exception_line(e))


def _failure(e, record=None):
    """The WIT `failure` of an exception raised while processing record `record`."""
    return Err(_types.Failure(_message(e), record))


def _slot_count(key_slots, records):
    if len(key_slots) != records:
        raise WeirError(f"malformed batch: {len(key_slots)} key slots for {records} records")
    if not key_slots:
        return 0
    top = max(key_slots)
    if top == NO_SLOT:
        top = max((s for s in key_slots if s != NO_SLOT), default=-1)
    if top >= records:
        raise WeirError(f"malformed batch: key slot {top} in a batch of {records} records")
    return top + 1


class _Batch:
    """Where `_run` is in the batch, for a failure to name its record: the iterator over the
    key slots, which the loop advances once per record (nothing is counted per record)."""

    slots = None
    records = 0

    @classmethod
    def record(cls):
        """The index of the record being processed, or None outside the loop over records."""
        slots = cls.slots
        if slots is None:
            return None
        return cls.records - 1 - length_hint(slots)


def _columns(batch, key_slots):
    """The columns of the WIT `batch` and its `key_slots`, as views, their lengths checked."""
    key_ends = _u32s(batch.key_ends, "batch")
    value_ends = _u32s(batch.value_ends, "batch")
    timestamps = _s64s(batch.timestamps, "batch")
    slots = _u32s(key_slots, "key slots").tolist()
    flags = batch.flags
    n = len(flags)
    if not (len(key_ends) == len(value_ends) == len(timestamps) == n):
        raise WeirError("malformed batch: columns of different lengths")
    return Batch(batch.data, key_ends, value_ends, flags, timestamps, slots)


def _run(process, out, batch, key_slots):
    """Calls `process(record, out)` for every record of `batch`."""
    global _slot
    _Batch.slots = None
    columns = _columns(batch, key_slots)
    data, key_ends, value_ends = columns.data, columns.key_ends, columns.value_ends
    flags, timestamps, key_slots = columns.flags, columns.timestamps, columns.slots
    n = len(flags)
    _rt.begin(_slot_count(key_slots, n))
    record = Record()
    record._data = data
    start = 0
    # Last in each `zip`: when `process` raises, the iterator has given exactly the slots of
    # the records up to the current one (a list's iterator tells how many are left).
    slots = _Batch.slots = iter(key_slots)
    _Batch.records = n
    if flags.count(HAS_KEY) == n:
        # Every record keyed, none with a timestamp: the common case, with the least per record.
        for key_end, value_end, _slot in zip(key_ends, value_ends, slots):
            record.key = data[start:key_end]
            record._start = key_end
            record._end = start = value_end
            process(record, out)
    elif flags.count(HAS_KEY | HAS_TIMESTAMP) == n:
        # Every record keyed and timestamped (sources stamp records with their event time).
        for key_end, value_end, timestamp, _slot in zip(key_ends, value_ends, timestamps, slots):
            record.key = data[start:key_end]
            record._start = key_end
            record._end = start = value_end
            record.timestamp = timestamp
            process(record, out)
    else:
        for key_end, value_end, f, timestamp, _slot in zip(key_ends, value_ends, flags, timestamps, slots):
            record.key = data[start:key_end] if f & HAS_KEY else None
            record._start = key_end
            record._end = value_end
            record.timestamp = timestamp if f & HAS_TIMESTAMP else None
            process(record, out)
            start = value_end
    _Batch.slots = None


def _run_columns(process_batch, out, batch, key_slots):
    """Calls `process_batch(batch, out)` with the whole batch as a `Batch`."""
    _Batch.slots = None
    columns = _columns(batch, key_slots)
    _rt.begin(_slot_count(columns.slots, len(columns)), batch=columns)
    process_batch(columns, out)


def _run_timers(on_timer, out, timers):
    """Calls `on_timer(timer, out)` for every timer of the WIT `fired-timers`."""
    global _slot
    key_slots = _u32s(timers.key_slots, "timers")
    timestamps = _s64s(timers.timestamps, "timers")
    tags = _u32s(timers.tags, "timers")
    n = len(key_slots)
    _Batch.slots = None
    if not (len(timers.keys.ends) == 4 * n and len(timestamps) == len(tags) == n):
        raise WeirError("malformed timers: lists of different lengths")
    _rt.begin(_slot_count(key_slots, n), timers.watermark)
    domain = "event" if timers.domain == _types.TimeDomain.EVENT_TIME else "processing"
    slots = _Batch.slots = iter(key_slots.tolist())
    _Batch.records = n
    keys = _blobs(timers.keys)
    for key, timestamp, tag, _slot in zip(keys, timestamps, tags, slots):
        on_timer(Timer(key, timestamp, tag, domain), out)
    _Batch.slots = None


def export(operator_class):
    """The `Processor` class componentize-py exports, driving instances of `operator_class`.
    Bind it in the application module: `Processor = weir_sdk.export(MyOperator)`."""

    # componentize-py may make a new `Processor` for every call: the instance's operator and
    # emitter live in the class, one per component instance.
    class Processor:
        operator = None
        out = Emitter()

        def open(self, ctx):
            if Processor.operator is not None:
                raise Err("open called on an operator instance that is already open")
            _rt.in_open = True
            try:
                operator = operator_class()
                operator.open(OpenContext(ctx))
            except Exception as e:
                raise Err(_message(e)) from None
            finally:
                _rt.in_open = False
            Processor.operator = operator

        def process(self, batch, key_slots):
            operator = Processor._open_operator("process")
            process_batch = operator.process_batch
            if process_batch is not None:
                return Processor._run_batch(_run_columns, process_batch, batch, key_slots)
            return Processor._run_batch(_run, operator.process, batch, key_slots)

        def on_timers(self, timers):
            operator = Processor._open_operator("on_timers")
            return Processor._run_batch(_run_timers, operator.on_timer, timers)

        @staticmethod
        def _open_operator(call):
            operator = Processor.operator
            if operator is None:
                raise _failure(WeirError(f"the operator is not open: {call} called before open or after close"))
            return operator

        @staticmethod
        def _run_batch(run, handler, *args):
            """Runs `handler` over a batch (of records or timers) with `run`, and returns what
            it emitted; on an exception, nothing of the call is kept: its state writes and
            output are dropped, and the failure names the record being handled."""
            out = Processor.out
            try:
                run(handler, out, *args)
                _rt.finish()
                return out._take()
            except Exception as e:
                record = _Batch.record()
                if record is None and isinstance(e, WeirError) and type(e.record) is int:
                    record = e.record
                _Batch.slots = None
                _rt.abort()
                out._discard()
                raise _failure(e, record) from None

        def close(self):
            operator = Processor._open_operator("close")
            Processor.operator = None
            out = Processor.out
            try:
                operator.close(out)
                return out._take()
            except Exception as e:
                out._discard()
                raise _failure(e) from None

    Processor.__name__ = Processor.__qualname__ = "Processor"
    return Processor
