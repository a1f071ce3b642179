"""Records out: the `Emitter` that builds an output batch in one buffer."""

import json
from array import array
from itertools import accumulate, chain

from wit_world.imports import types as _types

from ._codec import _WORDS, _as_bytes
from ._errors import WeirError
from ._records import HAS_KEY, HAS_TIMESTAMP


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
