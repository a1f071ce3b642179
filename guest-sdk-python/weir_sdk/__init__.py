"""Write Weir stream operators in Python, compiled to components with componentize-py.

An operator is a subclass of `Operator`: `open(ctx)` reads the configuration and declares
keyed state, `process(record, out)` turns each input `Record` into any number of output
records written to `out` (an `Emitter`), and `close(out)` may emit final records at the end
of input. `export(cls)` turns the class into the `Processor` class that componentize-py
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

Put the operator in `operator.py` and build it with `weir build` (which stages this SDK, the
one of the `weir` binary, beside it, and checks the component against the world
`weir:operator/operator@0.1.0`); `weir new --lang python NAME` starts a project.

Like the Rust SDK, this one is built around the cost of the component boundary:

- Records arrive as one flat batch (`data`, `key-ends`, `value-ends`, `flags`, `timestamps`)
  plus one key slot per record; `process` sees them one at a time through a single reused
  `Record` (copy `record.key`/`record.value` if you keep them, they are plain `bytes`).
- A `ValueState` reads the values of *every* key slot of the batch in one `read-values`
  call, the first time it is read in a batch, and decodes each slot on its first use.
- All writes of a batch are buffered and reach the host in one `apply` call at the end of
  the batch. A map or list read first sends the pending writes (read your writes).
- Output records are appended to one flat batch.

State values, map keys, map values and list items are stored as JSON text (compact, UTF-8):
a count of 5 is stored as the bytes `5`. They must be JSON-serializable.

An exception raised by `open`, `process` or `close` fails the job with its message; the
writes of the failed batch are dropped and so are the records it emitted.
"""

import json

from componentize_py_types import Err
from wit_world.imports import log as _log
from wit_world.imports import state as _state
from wit_world.imports import types as _types

__all__ = [
    "Operator",
    "OpenContext",
    "Record",
    "Emitter",
    "ValueState",
    "MapState",
    "ListState",
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
    """An error the SDK reports (bad batch, state misuse, a failed host call)."""


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


def _as_bytes(value):
    """`bytes`/`bytearray`/`memoryview` as they are, `str` as UTF-8."""
    if isinstance(value, str):
        return value.encode()
    return value


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


# ---------------------------------------------------------------------------------------------
# Records


class Record:
    """One input record: `key` (`bytes`, or None for a record without key), `value` (`bytes`)
    and `timestamp` (milliseconds since the Unix epoch, or None).

    The SDK reuses one `Record` for every record of a batch: keep its fields, not the record.
    """

    __slots__ = ("key", "value", "timestamp")

    def __init__(self, key=None, value=b"", timestamp=None):
        self.key = key
        self.value = value
        self.timestamp = timestamp

    def key_str(self):
        """The key as text (UTF-8), or None for a record without key."""
        key = self.key
        return None if key is None else key.decode()

    def value_str(self):
        """The value as text (UTF-8)."""
        return self.value.decode()

    def value_json(self):
        """The value parsed as JSON."""
        return json.loads(self.value)

    def __repr__(self):
        return f"Record(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp!r})"


class Emitter:
    """Where an operator writes its output records: appended to one flat batch, returned to
    the host when the call ends, in emit order. Keys and values are `bytes` or `str`
    (encoded as UTF-8)."""

    __slots__ = ("_data", "_key_ends", "_value_ends", "_flags", "_timestamps")

    def __init__(self):
        self._data = bytearray()
        self._key_ends = []
        self._value_ends = []
        self._flags = bytearray()
        self._timestamps = []

    def emit(self, key, value, timestamp=None):
        """Emits a record; `key` None makes a record without key."""
        data = self._data
        flags = 0
        if key is not None:
            data += key.encode() if type(key) is str else key
            flags = HAS_KEY
        self._key_ends.append(len(data))
        data += value.encode() if type(value) is str else value
        self._value_ends.append(len(data))
        if timestamp is None:
            self._timestamps.append(0)
        else:
            flags |= HAS_TIMESTAMP
            self._timestamps.append(timestamp)
        self._flags.append(flags)

    def emit_json(self, key, value, timestamp=None):
        """Emits a record whose value is `value` as (compact) JSON."""
        self.emit(key, json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(), timestamp)

    def __len__(self):
        return len(self._value_ends)

    def _take(self):
        if len(self._data) > 0xFFFFFFFF:
            self._discard()
            raise WeirError("the records emitted in one call exceed 4 GiB; emit less per batch")
        batch = _types.Batch(
            bytes(self._data), self._key_ends, self._value_ends, bytes(self._flags), self._timestamps
        )
        self.__init__()
        return batch

    def _discard(self):
        self.__init__()


# ---------------------------------------------------------------------------------------------
# The per-batch machinery: current key slot, write log, value caches


class _Runtime:
    """The one runtime of this component instance (a component instance is single-threaded)."""

    def __init__(self):
        self.slot = NO_SLOT
        self.in_batch = False
        self.in_open = False
        self.generation = 0
        self.slot_count = 0
        self.all_slots = []
        self.ops = []
        self.data = bytearray()
        # Value states read or written in the current batch.
        self.touched = []

    def begin(self, slot_count):
        self.generation += 1
        self.slot_count = slot_count
        if len(self.all_slots) != slot_count:
            self.all_slots = list(range(slot_count))
        self.in_batch = True

    def log(self, kind, state, slot, key, value):
        """Appends one write; `key` and `value` are encoded bytes or None."""
        data = self.data
        if key is not None:
            data += key
        key_end = len(data)
        if value is not None:
            data += value
        self.ops.append(_state.Op(kind, state, slot, key_end, len(data)))

    def flush(self):
        """Sends the pending writes in one `apply` (before a map or list read, and at the end
        of the batch)."""
        if not self.ops:
            return
        ops, data = self.ops, bytes(self.data)
        self.ops = []
        self.data = bytearray()
        try:
            _state.apply(ops, data)
        except Err as e:
            raise WeirError(f"applying state writes: {e.value}") from None

    def finish(self):
        """The end of a batch: the dirty value slots join the log, the log goes out."""
        for value_state in self.touched:
            value_state._flush_into(self)
        self.touched = []
        self.flush()
        self.end()

    def abort(self):
        for value_state in self.touched:
            value_state._reset()
        self.touched = []
        self.ops = []
        self.data = bytearray()
        self.end()

    def end(self):
        self.in_batch = False
        self.slot = NO_SLOT

    def no_slot(self, name):
        if self.in_batch:
            return WeirError(
                f"state `{name}`: state access needs a keyed record; key the stream with key_by "
                "before this operator (this record has no key)"
            )
        return WeirError(
            f"state `{name}`: state can only be read or written while processing a record, "
            "not in open or close"
        )


_rt = _Runtime()

# Markers in a value cache: not read yet, and no value.
_UNREAD = object()
_ABSENT = object()


def _declare(name, kind):
    if not _rt.in_open:
        raise WeirError(f"state `{name}` must be declared in open")
    try:
        return _state.declare(name, kind)
    except Err as e:
        raise WeirError(f"declaring state `{name}`: {e.value}") from None


class ValueState:
    """One JSON value per key. `get` returns None (or `default`) where the key has none.

    The first read in a batch fetches the values of every key of the batch in one host call;
    writes stay in the SDK until the end of the batch."""

    __slots__ = ("name", "_id", "_gen", "_cache", "_dirty", "_items", "_ends", "_present")

    def __init__(self, name):
        self.name = name
        self._id = _declare(name, _state.StateKind.VALUE)
        self._gen = -1
        self._cache = None
        self._dirty = None
        self._items = None

    def _slot(self):
        rt = _rt
        slot = rt.slot
        if slot == NO_SLOT:
            raise rt.no_slot(self.name)
        if self._gen != rt.generation:
            self._begin(rt)
        return slot

    def _begin(self, rt):
        self._gen = rt.generation
        self._cache = [_UNREAD] * rt.slot_count
        self._dirty = set()
        self._items = None
        rt.touched.append(self)

    def _fetch(self):
        try:
            values = _state.read_values(self._id, _rt.all_slots)
        except Err as e:
            raise WeirError(f"state `{self.name}`: reading values: {e.value}") from None
        if len(values.present) != len(_rt.all_slots) or len(values.items.ends) != len(values.present):
            raise WeirError(f"state `{self.name}`: malformed reply from the host")
        self._items = values.items.data
        self._ends = values.items.ends
        self._present = values.present

    def get(self, default=None):
        slot = self._slot()
        value = self._cache[slot]
        if value is _UNREAD:
            if self._items is None:
                self._fetch()
            if self._present[slot]:
                start = self._ends[slot - 1] if slot else 0
                value = _decode(self._items[start : self._ends[slot]])
            else:
                value = _ABSENT
            self._cache[slot] = value
        return default if value is _ABSENT else value

    def set(self, value):
        slot = self._slot()
        self._cache[slot] = value
        self._dirty.add(slot)

    def remove(self):
        slot = self._slot()
        self._cache[slot] = _ABSENT
        self._dirty.add(slot)

    def _flush_into(self, rt):
        if self._dirty:
            # `rt.log` inlined: this loop runs once per written key.
            cache, state, ops, data = self._cache, self._id, rt.ops, rt.data
            op, value_set, value_remove = _state.Op, _state.OpKind.VALUE_SET, _state.OpKind.VALUE_REMOVE
            for slot in self._dirty:
                value = cache[slot]
                start = len(data)
                if value is _ABSENT:
                    ops.append(op(value_remove, state, slot, start, start))
                else:
                    data += str(value).encode() if type(value) is int else _encode(value)
                    ops.append(op(value_set, state, slot, start, len(data)))
        self._reset()

    def _reset(self):
        self._gen = -1
        self._cache = None
        self._dirty = None
        self._items = None


class MapState:
    """A map from JSON keys to JSON values per key, ordered by the bytes of the encoded keys.

    Writes are buffered with the batch's other writes; a read first sends them, then calls
    the host (one crossing per read, per 1024 entries for `items`/`keys`)."""

    __slots__ = ("name", "_id")

    def __init__(self, name):
        self.name = name
        self._id = _declare(name, _state.StateKind.MAP)

    def _slot(self):
        slot = _rt.slot
        if slot == NO_SLOT:
            raise _rt.no_slot(self.name)
        return slot

    def get(self, key, default=None):
        slot = self._slot()
        _rt.flush()
        try:
            found = _state.map_get(self._id, slot, _encode(key))
        except Err as e:
            raise WeirError(f"map state `{self.name}`: reading: {e.value}") from None
        return default if found is None else _decode(found)

    def __contains__(self, key):
        slot = self._slot()
        _rt.flush()
        try:
            return _state.map_get(self._id, slot, _encode(key)) is not None
        except Err as e:
            raise WeirError(f"map state `{self.name}`: reading: {e.value}") from None

    def put(self, key, value):
        _rt.log(_state.OpKind.MAP_PUT, self._id, self._slot(), _encode(key), _encode(value))

    def remove(self, key):
        _rt.log(_state.OpKind.MAP_REMOVE, self._id, self._slot(), _encode(key), None)

    def clear(self):
        _rt.log(_state.OpKind.MAP_CLEAR, self._id, self._slot(), None, None)

    def _pages(self):
        slot = self._slot()
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

    def _slot(self):
        slot = _rt.slot
        if slot == NO_SLOT:
            raise _rt.no_slot(self.name)
        return slot

    def append(self, item):
        _rt.log(_state.OpKind.LIST_APPEND, self._id, self._slot(), None, _encode(item))

    def clear(self):
        _rt.log(_state.OpKind.LIST_CLEAR, self._id, self._slot(), None, None)

    def get(self):
        """Every item, oldest first."""
        slot = self._slot()
        _rt.flush()
        try:
            blobs = _state.list_read(self._id, slot)
        except Err as e:
            raise WeirError(f"list state `{self.name}`: reading: {e.value}") from None
        return [_decode(item) for item in _blobs(blobs)]


def _blobs(blobs):
    """The byte strings of a WIT `blobs`."""
    data, out, start = blobs.data, [], 0
    for end in blobs.ends:
        out.append(data[start:end])
        start = end
    return out


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


class Operator:
    """Base class of operators. The SDK creates one instance per subtask (without arguments),
    then calls `open` once, `process` for every record, `close` at the end of input."""

    def open(self, ctx):
        pass

    def process(self, record, out):
        raise NotImplementedError("an operator must implement process(record, out)")

    def close(self, out):
        pass


def _message(e):
    if isinstance(e, Err):
        return str(e.value)
    if isinstance(e, WeirError):
        return str(e)
    return f"{type(e).__name__}: {e}"


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
            operator = Processor.operator
            if operator is None:
                raise Err("the operator is not open: process called before open or after close")
            out = Processor.out
            rt = _rt
            try:
                data, key_ends, value_ends = batch.data, batch.key_ends, batch.value_ends
                flags, timestamps = batch.flags, batch.timestamps
                n = len(value_ends)
                if not (len(key_ends) == len(flags) == len(timestamps) == n):
                    raise WeirError("malformed batch: columns of different lengths")
                rt.begin(_slot_count(key_slots, n))
                process = operator.process
                record = Record()
                start = 0
                for i in range(n):
                    key_end = key_ends[i]
                    value_end = value_ends[i]
                    f = flags[i]
                    record.key = data[start:key_end] if f & HAS_KEY else None
                    record.value = data[key_end:value_end]
                    record.timestamp = timestamps[i] if f & HAS_TIMESTAMP else None
                    rt.slot = key_slots[i]
                    process(record, out)
                    start = value_end
                rt.finish()
                return out._take()
            except Exception as e:
                rt.abort()
                out._discard()
                raise Err(_message(e)) from None

        def close(self):
            operator = Processor.operator
            if operator is None:
                raise Err("the operator is not open: close called before open or after close")
            Processor.operator = None
            out = Processor.out
            try:
                operator.close(out)
                return out._take()
            except Exception as e:
                out._discard()
                raise Err(_message(e)) from None

    Processor.__name__ = Processor.__qualname__ = "Processor"
    return Processor
