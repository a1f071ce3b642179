"""Records in: one `Record`, a whole `Batch` as columns, and the WIT's number columns and blobs
read as views."""

import json

from ._codec import _as_bytes
from ._errors import WeirError


#: The key slot of a record without key (and the slot outside of `process`).
NO_SLOT = 0xFFFFFFFF
#: Bit 0 of a record's flags: it has a key.
HAS_KEY = 1
#: Bit 1 of a record's flags: it has a timestamp.
HAS_TIMESTAMP = 2


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

    - `focus(slot)`: the calls that act on one key (map and list state, timers, a value
      state's `get` and `set`) act on the key of `slot` (`batch.slots[i]` for record `i`)
      until the next `focus`. `MapState.get_many(slots, keys)` and `ListState.get_many(slots)`
      read many keys' maps and lists in one host call.

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


def _blobs(blobs):
    """The byte strings of a WIT `blobs`."""
    data, ends = blobs.data, _u32s(blobs.ends, "reply from the host")
    starts = [0]
    starts += ends
    return list(map(data.__getitem__, map(slice, starts, ends)))
