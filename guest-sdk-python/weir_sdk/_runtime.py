"""The per-batch machinery: the key slot of the record being handled, the write log sent in one
`apply` per batch, the state classes and timers that act on the key slot, and the loops over a
batch's records and fired timers that set it.

These share one module on purpose: the key slot is a module global, set by the loops' `for`
targets and read by every state call, the cheapest way CPython has (an attribute of a shared
object would cost a lookup per record)."""

from array import array
from bisect import bisect_right
from itertools import accumulate, compress, count, repeat
from operator import is_not, length_hint
from struct import Struct

from componentize_py_types import Err
from wit_world.imports import state as _state, time as _time, types as _types

from ._codec import _WORDS, _decode, _encode
from ._errors import WeirError
from ._records import HAS_KEY, HAS_TIMESTAMP, NO_SLOT, Batch, Record, _blobs, _columns, _s64s, _u32s
from ._timer import Timer


# The per-batch machinery: current key slot, write log, value caches

#: The key slot of the record being processed (a module global: the cheapest lookup there is).
_slot = NO_SLOT


#: How many entries one `map-entries` call asks for.
_PAGE = 1024

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
        # Counts the batches (records or timers), so a library's per-batch cache can tell
        # whether it is the current batch's.
        self.generation = 0
        # The current batch's rows, for the libraries that read ahead (`_batch_rows`).
        self.rows = None

    def begin(self, slot_count, watermark=None, batch=None):
        if self.slot_count != slot_count:
            self.slot_count = slot_count
            self.all_slots = array(_WORDS, range(slot_count)).tobytes()
        self.in_batch = True
        self.generation += 1
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
        self.rows = None
        _slot = NO_SLOT

    def no_slot(self, name):
        if self.batch is not None:
            return WeirError(
                f"state `{name}`: in process_batch, read and write value state for all keys at "
                "once with get_all (or get_by_slot) and set_all; for the calls that act on one "
                "key (map and list state, timers, value get and set), first choose the key with "
                "batch.focus(slot)"
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


def _batch_rows():
    """For the libraries that read a whole batch's state ahead (`weir_sdk.windows`): the
    batch's number and its rows, `("records", slots, timestamps, flags)` or `("timers", slots,
    timestamps, tags, domain)` (sequences, item `i` for record or timer `i`), or None outside
    a batch."""
    return _rt.generation, _rt.rows


def _key_slot():
    """The key slot state calls act on now (`NO_SLOT` where there is none)."""
    return _slot


def _slot_column(state, slots):
    """`slots` (ints of `batch.slots`) as the WIT's `u32s`, for a `get_many` of `state`."""
    try:
        return array(_WORDS, slots).tobytes()
    except (OverflowError, TypeError):
        raise WeirError(f"{state}: get_many's slots are ints from batch.slots") from None


# Markers in a value cache: not read yet, and no value.
_UNREAD = object()
_ABSENT = object()

_rt = _Runtime()


def _declare(name, kind):
    if not _rt.in_open:
        raise WeirError(f"state `{name}` must be declared in open")
    try:
        # The SDK writes JSON text (`_codec`); the host stores it as CBOR, the one encoding
        # every language reads.
        return _state.declare(name, kind, _state.Encoding.JSON)
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
        items = self._fetch_items()
        data, ends, present = items
        n = _rt.slot_count
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

    def _fetch_items(self):
        """Reads the encoded values of every slot of the batch: `(data, ends, present)`."""
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
    """A map from JSON keys to JSON values per key, ordered by the bytes of the keys' CBOR
    (integers in numeric order, strings by length then bytes).

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

    def get_many(self, slots, keys, default=None):
        """The values under `keys[i]` in the map of the key of `slots[i]` (`default` where
        there is none), as a list, in one host call: the map reads of a whole batch in
        `process_batch` (`slots` from `batch.slots`). Like `get`, it first sends the batch's
        pending writes, so it sees them."""
        if len(slots) != len(keys):
            raise WeirError(
                f"map state `{self.name}`: get_many takes one key per slot, not {len(keys)} "
                f"keys for {len(slots)} slots"
            )
        _rt.flush()
        slot_bytes = _slot_column(f"map state `{self.name}`", slots)
        encoded = [_encode(key) for key in keys]
        ends = array(_WORDS, accumulate(map(len, encoded))).tobytes()
        try:
            found = _state.map_get_many(self._id, slot_bytes, _types.Blobs(b"".join(encoded), ends))
        except Err as e:
            raise WeirError(f"map state `{self.name}`: reading: {e.value}") from None
        return [
            _decode(item) if present else default
            for item, present in zip(_blobs(found.items), found.present)
        ]

    def put(self, key, value):
        _rt.log(_MAP_PUT, self._id, _current_slot(self.name), _encode(key), _encode(value))

    def _put_at(self, slot, key, value):
        _rt.log(_MAP_PUT, self._id, slot, _encode(key), _encode(value))

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
        """Every (key, value), in the order of the keys' CBOR."""
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

    def get_many(self, slots):
        """The lists of the keys of `slots` (from `batch.slots`), each oldest first, as a list
        of lists, in one host call: the list reads of a whole batch in `process_batch`. Like
        `get`, it first sends the batch's pending writes, so it sees them."""
        _rt.flush()
        slot_bytes = _slot_column(f"list state `{self.name}`", slots)
        try:
            lists = _state.list_read_many(self._id, slot_bytes)
        except Err as e:
            raise WeirError(f"list state `{self.name}`: reading: {e.value}") from None
        items = list(map(_decode, _blobs(lists.items)))
        counts = _u32s(lists.counts, "reply from the host")
        if len(counts) != len(slots) or sum(counts) != len(items):
            raise WeirError(f"list state `{self.name}`: malformed reply from the host")
        ends = list(accumulate(counts))
        return [items[end - n : end] for n, end in zip(counts, ends)]

    def _rewrite_at(self, slot, items):
        """Replaces the list of `slot`'s key with `items` (encoded as they are)."""
        _rt.log(_LIST_CLEAR, self._id, slot, None, None)
        for item in items:
            _rt.log(_LIST_APPEND, self._id, slot, None, _encode(item))


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


def _run(process, out, batch, key_slots):
    """Calls `process(record, out)` for every record of `batch`."""
    global _slot
    _Batch.slots = None
    columns = _columns(batch, key_slots)
    data, key_ends, value_ends = columns.data, columns.key_ends, columns.value_ends
    flags, timestamps, key_slots = columns.flags, columns.timestamps, columns.slots
    n = len(flags)
    _rt.begin(_slot_count(key_slots, n))
    _rt.rows = ("records", key_slots, timestamps, flags)
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


def _focus(batch, slot):
    """`Batch.focus(slot)`: the calls that act on one key (map and list state, timers, a value
    state's `get` and `set`) act on the key of `slot` until the next `focus`. Defined here, as
    the key slot is this module's global."""
    global _slot
    if batch is not _rt.batch:
        raise WeirError("batch.focus works on the batch of the process_batch call being run")
    if type(slot) is not int or not 0 <= slot < _rt.slot_count:
        raise WeirError(
            f"batch.focus({slot!r}): a slot is an int of batch.slots, from 0 to "
            f"{_rt.slot_count - 1} in this batch"
        )
    _slot = slot


Batch.focus = _focus


def _run_columns(process_batch, out, batch, key_slots):
    """Calls `process_batch(batch, out)` with the whole batch as a `Batch`."""
    _Batch.slots = None
    columns = _columns(batch, key_slots)
    _rt.begin(_slot_count(columns.slots, len(columns)), batch=columns)
    _rt.rows = ("records", columns.slots, columns.timestamps, columns.flags)
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
    slot_list = key_slots.tolist()
    _rt.rows = ("timers", slot_list, timestamps, tags, domain)
    slots = _Batch.slots = iter(slot_list)
    _Batch.records = n
    keys = _blobs(timers.keys)
    for key, timestamp, tag, _slot in zip(keys, timestamps, tags, slots):
        on_timer(Timer(key, timestamp, tag, domain), out)
    _Batch.slots = None
