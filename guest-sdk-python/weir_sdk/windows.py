"""Event-time windows for Weir operators: tumbling, sliding (hopping) and session windows, per
record key, with allowed lateness and an incremental aggregate, built on map state and
event-time timers (the operator's own state: nothing runs in the host).

    import weir_sdk
    from weir_sdk import windows

    class PageCounts(weir_sdk.Operator):
        def open(self, ctx):
            self.win = windows.tumbling(
                ctx, "per-page", size_ms=60_000, aggregate=windows.count(),
                allowed_lateness_ms=0, on_fire=self.fire,
            )

        def process(self, record, out):
            self.win.add(record, out)

        def on_timer(self, timer, out):
            if not self.win.on_timer(timer, out):
                ...  # one of the operator's own timers

        def fire(self, key, start, end, result, out):
            out.emit_json(key, {"page": key.decode(), "start": start, "end": end, "count": result})

    Processor = weir_sdk.export(PageCounts)

Import this module at the top of `operator.py` (as above), not inside a method: a component
only holds the modules imported when it was built.

Semantics (those of Flink's event-time windows):

- A window is the interval [start, end) of event time, in milliseconds. `tumbling(size_ms)`:
  the window of a record at `ts` starts at `ts - ts mod size_ms` (floored, also for negative
  timestamps). `sliding(size_ms, slide_ms)`: every window of length `size_ms` whose start is a
  multiple of `slide_ms` and that contains `ts` (`size_ms / slide_ms` windows per record when
  it divides). `session(gap_ms)`: a record opens [ts, ts + gap_ms); the sessions of a key that
  intersect or touch ([a, b) and [b, c)) merge into one, their accumulators merged.
- Windows are per key: `add` puts a record into the windows of `record.key`, and `on_fire`
  receives that key. Records need a key (state is keyed) and a timestamp (`add` raises a
  `WeirError` for a record without one).
- A window fires when the watermark reaches `end - 1`: `on_fire(key, start, end, result,
  out)` is called from `on_timer` with the aggregate of the window's records.
- `allowed_lateness_ms` (default 0) keeps a window's state until the watermark reaches
  `end - 1 + allowed_lateness_ms`. A record that comes after its window fired but within the
  lateness updates the window, which fires again at once with the updated result (from `add`,
  so `out` is the emitter of `process`). A record that is late for all of its windows (the
  watermark is at or past their `end - 1 + allowed_lateness_ms`) is dropped and counted in the
  window set's `dropped_late` (an attribute of the instance, in memory only: not checkpointed,
  and a batch that fails and is processed again counts again).

Aggregates are incremental: a window keeps one accumulator (a JSON value), never its records.
`count()`, `sum(value)`, `min(value)`, `max(value)` and `reduce(fn, value)` take an optional
`value(record)` extractor, by default the record's value parsed as JSON. A `reduce` function
`fn(acc, value) -> acc` must also accept two accumulators, and be associative: it merges
sessions (`fn(earlier_session, later_session)`), and its accumulator is the value itself (the
first value of a window is its accumulator). Results are JSON values: a tuple comes back as a
list.

Cost per record: a tumbling window is one map `put` (plus one or two timer registrations for
the window's first record); a sliding window is that per window of the record. Tumbling and
sliding windows read the entries of all the windows a batch's records (or its fired timers)
reach in one host call (`MapState.get_many`), at their first use in the batch. A session
reads the sessions of the record's key (one `items`), and a session's timer those of its key.

State and timers, for those who read checkpoints or mix their own timers in: a window set
named `name` keeps a map state `window:{name}`, one per key, from the window's start (19
zero-padded decimal digits; below zero, `-` then the digits of 10**19 + start, so that the
map's byte order is the order of starts) to `[accumulator, fired]` (tumbling, sliding) or
`[end, accumulator, fired]` (sessions). Its event-time timers carry the tags
`fire_tag = 0xFFFF0000 | hash15(name) << 1` (at `end - 1`) and `fire_tag | 1` (at
`end - 1 + allowed_lateness_ms`, when the lateness is not 0), where `hash15` folds the 32-bit
FNV-1a hash of the UTF-8 name to 15 bits: keep the operator's own timer tags below
`0xFFFF0000` (`TAG_BASE`) and they are never taken for a window's. `on_timer` returns False
for a timer that is not the window set's; two window sets of one operator whose names hash
alike are refused in `open` (rename one).
"""

import builtins
import operator as _op

from . import WeirError, _batch_rows, _count_dropped_late, _key_slot

__all__ = [
    "TAG_BASE",
    "Aggregate",
    "Windows",
    "count",
    "sum",
    "min",
    "max",
    "reduce",
    "tumbling",
    "sliding",
    "session",
    "window_key",
]

#: The first timer tag reserved for windows; the operator's own timers keep below it.
TAG_BASE = 0xFFFF0000

#: `MapState.get`'s default for a window without state.
_MISSING = object()
#: A window the read-ahead does not know.
_UNKNOWN = object()


# ---------------------------------------------------------------------------------------------
# Aggregates


class Aggregate:
    """How a window folds its records: `value(record)` extracts a record's value once per
    record (whatever the number of its windows), and `combine(acc, value)` folds it into the
    window's accumulator, the first value being the first accumulator. `combine` also merges
    two accumulators (sessions), so it must accept them and be associative. Make one with
    `count`, `sum`, `min`, `max` or `reduce`."""

    __slots__ = ("name", "value", "combine")

    def __init__(self, name, value, combine):
        if not callable(value):
            raise TypeError(f"{name}: value is a function value(record), not {type(value).__name__}")
        if not callable(combine):
            raise TypeError(f"{name}: the reduce function is a function fn(acc, value), not {type(combine).__name__}")
        self.name = name
        self.value = value
        self.combine = combine

    def __repr__(self):
        return f"Aggregate({self.name})"


def _json_value(record):
    return record.value_json()


def _one(record):
    return 1


def _min2(a, b):
    return b if b < a else a


def _max2(a, b):
    return b if b > a else a


def count():
    """The number of records of the window."""
    return Aggregate("count", _one, _op.add)


def sum(value=None):
    """The sum of `value(record)` (default: the record's value as JSON) over the window."""
    return Aggregate("sum", value or _json_value, _op.add)


def min(value=None):
    """The least `value(record)` (default: the record's value as JSON) of the window."""
    return Aggregate("min", value or _json_value, _min2)


def max(value=None):
    """The greatest `value(record)` (default: the record's value as JSON) of the window."""
    return Aggregate("max", value or _json_value, _max2)


def reduce(fn, value=None):
    """`fn(acc, value) -> acc` folded over `value(record)` (default: the record's value as
    JSON), the window's first value being its first accumulator. `fn` must also merge two
    accumulators (sessions call `fn(earlier, later)`) and be associative."""
    return Aggregate("reduce", value or _json_value, fn)


# ---------------------------------------------------------------------------------------------
# Window sets


def window_key(start):
    """The map key of the window starting at `start`: text whose byte order is the numeric
    order of starts (19 zero-padded digits; below zero, `-` and the digits of 10**19 + start),
    for starts in (-10**19, 10**19)."""
    if start >= 0:
        return "%019d" % start
    return "-%019d" % (10**19 + start)


def _name_hash15(name):
    """The 32-bit FNV-1a hash of the UTF-8 `name`, folded to 15 bits."""
    h = 0x811C9DC5
    for b in name.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return (h ^ (h >> 15) ^ (h >> 30)) & 0x7FFF


def _positive(what, value):
    if type(value) is not int or value <= 0:
        raise ValueError(f"{what} is a positive int (milliseconds), not {value!r}")
    return value


class Windows:
    """A window set: the windows of one assigner (tumbling, sliding or session) with one
    aggregate and one `on_fire`, keyed by the record key. Make it in `open` with `tumbling`,
    `sliding` or `session`; then call `add(record, out)` from `process` and
    `on_timer(timer, out)` from the operator's `on_timer`.

    Attributes: `name`, `aggregate`, `allowed_lateness_ms`, `fire_tag` (the tag of its timers
    at `end - 1`), `cleanup_tag` (`fire_tag | 1`, the tag of its timers at
    `end - 1 + allowed_lateness_ms`), `dropped_late` (records
    dropped as too late, by this instance)."""

    def __init__(self, ctx, name, aggregate, on_fire, allowed_lateness_ms):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a window set's name is a non-empty str, not {name!r}")
        if not isinstance(aggregate, Aggregate):
            raise TypeError(
                f"window set `{name}`: aggregate is one of windows.count(), sum(), min(), max(), "
                f"reduce(fn), not {type(aggregate).__name__}"
            )
        if not callable(on_fire):
            raise TypeError(f"window set `{name}`: on_fire is a function on_fire(key, start, end, result, out)")
        if type(allowed_lateness_ms) is not int or allowed_lateness_ms < 0:
            raise ValueError(
                f"window set `{name}`: allowed_lateness_ms is an int >= 0 (milliseconds), "
                f"not {allowed_lateness_ms!r}"
            )
        self.name = name
        self.aggregate = aggregate
        self.allowed_lateness_ms = allowed_lateness_ms
        self.fire_tag = TAG_BASE | (_name_hash15(name) << 1)
        self.dropped_late = 0
        self.cleanup_tag = self.fire_tag | 1
        self._on_fire = on_fire
        self._value = aggregate.value
        self._combine = aggregate.combine
        # Window sets of this operator instance: names and tags must not collide.
        taken = getattr(ctx, "_weir_window_sets", None)
        if taken is None:
            taken = {}
            ctx._weir_window_sets = taken
        if name in taken.values():
            raise WeirError(f"window set `{name}` is declared twice; give each window set its own name")
        other = taken.get(self.fire_tag)
        if other is not None:
            raise WeirError(
                f"window sets `{other}` and `{name}` would share timer tags (their names hash "
                f"alike); rename one of them"
            )
        taken[self.fire_tag] = name
        self._state = ctx.map_state(f"window:{name}")
        self._timers = ctx.timers()

    def __repr__(self):
        return f"<{type(self).__name__} window set `{self.name}`>"

    def _timestamp(self, record):
        ts = record.timestamp
        if ts is None:
            raise WeirError(
                f"window set `{self.name}`: a record without timestamp has no event-time "
                "window; give the records timestamps at the source, or drop them before add()"
            )
        return ts

    def add(self, record, out):
        """Puts `record` into its windows (of its key); a window that already fired, within
        the allowed lateness, fires again at once into `out`. Returns True if the record went
        into a window, False if not: dropped as too late for all of its windows (and counted in
        `dropped_late`), or, for sliding windows whose slide exceeds their size, between
        windows. Raises a `WeirError` for a record without timestamp."""
        raise NotImplementedError

    def on_timer(self, timer, out):
        """Handles `timer` if it is one of this window set's (firing or dropping a window of
        `timer.key`) and returns True; returns False for any other timer."""
        tag = timer.tag
        if (tag | 1) != self.cleanup_tag or timer.domain != "event":
            return False
        if tag == self.fire_tag:
            self._fire_timer(timer.key, timer.timestamp, out)
        else:
            self._cleanup_timer(timer.timestamp)
        return True

    # The timers of window [start, end): `fire_tag` at end - 1 fires it (and drops it when the
    # lateness is 0); `fire_tag | 1` at end - 1 + lateness drops it.

    def _register(self, end, fire):
        timers = self._timers
        if fire:
            timers.register_event_time(end - 1, self.fire_tag)
        if self.allowed_lateness_ms:
            timers.register_event_time(end - 1 + self.allowed_lateness_ms, self.cleanup_tag)

    def _delete(self, end):
        timers = self._timers
        timers.delete_event_time(end - 1, self.fire_tag)
        if self.allowed_lateness_ms:
            timers.delete_event_time(end - 1 + self.allowed_lateness_ms, self.cleanup_tag)


class _AlignedWindows(Windows):
    """Tumbling (slide == size) and sliding windows: fixed length, aligned starts."""

    def __init__(self, ctx, name, size_ms, slide_ms, aggregate, on_fire, allowed_lateness_ms):
        super().__init__(ctx, name, aggregate, on_fire, allowed_lateness_ms)
        self.size_ms = size_ms
        self.slide_ms = slide_ms
        # The read-ahead: {(key slot, start): entry or _MISSING} of the windows the batch's
        # records (or fired timers) reach, read in one `get_many` at the set's first use in
        # the batch (`_generation`), and kept up to date with the set's own writes (the map
        # state is the set's alone), so a record reads its windows without a host call. Each
        # read would otherwise also send the writes queued before it: two calls a record.
        self._ahead = None
        self._generation = None

    def _read_ahead(self):
        """The read-ahead of the current batch (None outside a batch)."""
        generation, rows = _batch_rows()
        if generation == self._generation:
            return self._ahead
        self._generation = generation
        self._ahead = None
        if rows is None:
            return None
        size, slide, lateness = self.size_ms, self.slide_ms, self.allowed_lateness_ms
        at = {}
        if rows[0] == "records":
            _, slots, timestamps, flags = rows
            watermark = self._timers.watermark()
            for slot, ts, f in zip(slots, timestamps, flags):
                if f != 3:  # a record needs a key and a timestamp (flags 1 | 2)
                    continue
                start = ts - ts % slide
                while start > ts - size:
                    if watermark is None or watermark < start + size - 1 + lateness:
                        at[slot, start] = None
                    start -= slide
        elif rows[4] == "event":
            _, slots, timestamps, tags, _ = rows
            fire_tag = self.fire_tag
            for slot, ts, tag in zip(slots, timestamps, tags):
                if tag == fire_tag:
                    at[slot, ts + 1 - size] = None
        windows = list(at)
        if not windows:
            self._ahead = {}
            return self._ahead
        found = self._state.get_many(
            [w[0] for w in windows], [window_key(w[1]) for w in windows], _MISSING
        )
        self._ahead = dict(zip(windows, found))
        return self._ahead

    def add(self, record, out):
        ts = self._timestamp(record)
        size = self.size_ms
        lateness = self.allowed_lateness_ms
        watermark = self._timers.watermark()
        # The last window of the record starts at the last multiple of the slide <= ts (Python's
        # % floors: right for negative timestamps too); the earlier ones a slide apart.
        start = ts - ts % self.slide_ms
        value = _MISSING
        late = False
        while start > ts - size:
            end = start + size
            if watermark is not None and watermark >= end - 1 + lateness:
                late = True
            else:
                if value is _MISSING:
                    value = self._value(record)
                self._add(record.key, start, end, value, watermark, out)
            start -= self.slide_ms
        if value is _MISSING:
            # Too late for all of its windows; or, between sliding windows (slide > size), in
            # none: not late, not counted.
            if late:
                self.dropped_late += 1
                _count_dropped_late(1)
            return False
        return True

    def _entry(self, start):
        """The current key's window at `start` (`_MISSING` if none), with where the read-ahead
        keeps it: (entry, read-ahead or None, its place there)."""
        ahead = self._read_ahead()
        if ahead is not None:
            at = (_key_slot(), start)
            entry = ahead.get(at, _UNKNOWN)
            if entry is not _UNKNOWN:
                return entry, ahead, at
        else:
            at = None
        return self._state.get(window_key(start), _MISSING), ahead, at

    def _put(self, start, entry, ahead, at):
        self._state.put(window_key(start), entry)
        if ahead is not None:
            ahead[at] = entry

    def _add(self, key, start, end, value, watermark, out):
        entry, ahead, at = self._entry(start)
        if entry is _MISSING:
            if watermark is None or watermark < end - 1:
                self._put(start, [value, 0], ahead, at)
                self._register(end, True)
            else:
                # A new window, already due but within the lateness: it fires now.
                self._put(start, [value, 1], ahead, at)
                self._register(end, False)
                self._on_fire(key, start, end, value, out)
        else:
            acc = self._combine(entry[0], value)
            fired = entry[1]
            self._put(start, [acc, fired], ahead, at)
            if fired:
                self._on_fire(key, start, end, acc, out)

    def _fire_timer(self, key, timestamp, out):
        end = timestamp + 1
        start = end - self.size_ms
        entry, ahead, at = self._entry(start)
        if entry is _MISSING or entry[1]:
            return
        acc = entry[0]
        if self.allowed_lateness_ms:
            self._put(start, [acc, 1], ahead, at)
        else:
            self._state.remove(window_key(start))
            if ahead is not None:
                ahead[at] = _MISSING
        self._on_fire(key, start, end, acc, out)

    def _cleanup_timer(self, timestamp):
        start = timestamp + 1 - self.allowed_lateness_ms - self.size_ms
        self._state.remove(window_key(start))
        ahead = self._read_ahead()
        if ahead is not None:
            ahead[_key_slot(), start] = _MISSING


class _SessionWindows(Windows):
    """Session windows: [ts, ts + gap) per record, merged while they intersect or touch."""

    def __init__(self, ctx, name, gap_ms, aggregate, on_fire, allowed_lateness_ms):
        super().__init__(ctx, name, aggregate, on_fire, allowed_lateness_ms)
        self.gap_ms = gap_ms

    def add(self, record, out):
        ts = self._timestamp(record)
        state = self._state
        lateness = self.allowed_lateness_ms
        watermark = self._timers.watermark()
        start, end = ts, ts + self.gap_ms
        # The sessions the new one merges with (sessions of a key are disjoint and apart, in
        # the order of their starts).
        merged = []
        for map_key, entry in state.items():
            if entry[0] < start:
                continue
            s_start = _start_of(map_key)
            if s_start > end:
                break
            merged.append((s_start, map_key, entry))
        if merged:
            start = builtins.min(start, merged[0][0])
            end = builtins.max(end, merged[-1][2][0])
        if watermark is not None and watermark >= end - 1 + lateness:
            self.dropped_late += 1
            _count_dropped_late(1)
            return False
        value = self._value(record)
        combine = self._combine
        if len(merged) == 1 and merged[0][0] == start and merged[0][2][0] == end:
            # Within one session: it grows by the value, and fires again if it fired.
            _, map_key, (_, acc, fired) = merged[0]
            acc = combine(acc, value)
            state.put(map_key, [end, acc, fired])
            if fired:
                self._on_fire(record.key, start, end, acc, out)
            return True
        acc = _MISSING
        pending = False  # a fire timer at end - 1 that has not fired
        for s_start, map_key, (s_end, s_acc, s_fired) in merged:
            acc = s_acc if acc is _MISSING else combine(acc, s_acc)
            if s_start != start:
                state.remove(map_key)
            if s_end != end:
                self._delete(s_end)
            elif not s_fired:
                pending = True
        acc = value if acc is _MISSING else combine(acc, value)
        fire_now = watermark is not None and watermark >= end - 1 and not pending
        state.put(window_key(start), [end, acc, 1 if fire_now else 0])
        self._register(end, not fire_now)
        if fire_now:
            self._on_fire(record.key, start, end, acc, out)
        return True

    def _fire_timer(self, key, timestamp, out):
        end = timestamp + 1
        state = self._state
        for map_key, entry in state.items():
            if entry[0] == end:
                if entry[2]:
                    return
                start = _start_of(map_key)
                acc = entry[1]
                if self.allowed_lateness_ms:
                    state.put(map_key, [end, acc, 1])
                else:
                    state.remove(map_key)
                self._on_fire(key, start, end, acc, out)
                return

    def _cleanup_timer(self, timestamp):
        end = timestamp + 1 - self.allowed_lateness_ms
        state = self._state
        for map_key, entry in state.items():
            if entry[0] == end:
                state.remove(map_key)
                return


def _start_of(map_key):
    """The start a `window_key` encodes."""
    if map_key[0] == "-":
        return int(map_key[1:]) - 10**19
    return int(map_key)


# ---------------------------------------------------------------------------------------------
# The window sets


def tumbling(ctx, name, size_ms, *, aggregate, on_fire, allowed_lateness_ms=0):
    """Tumbling windows of `size_ms` ms: [k * size_ms, (k + 1) * size_ms). Call in `open`;
    `name` names its state and timers (unique per operator). `on_fire(key, start, end,
    result, out)` is called when a window fires."""
    return _AlignedWindows(
        ctx, name, _positive("size_ms", size_ms), size_ms, aggregate, on_fire, allowed_lateness_ms
    )


def sliding(ctx, name, size_ms, slide_ms, *, aggregate, on_fire, allowed_lateness_ms=0):
    """Sliding (hopping) windows of `size_ms` ms starting every `slide_ms` ms: a record is in
    every window [k * slide_ms, k * slide_ms + size_ms) that contains its timestamp. Call in
    `open`; see `tumbling`."""
    _positive("size_ms", size_ms)
    _positive("slide_ms", slide_ms)
    return _AlignedWindows(ctx, name, size_ms, slide_ms, aggregate, on_fire, allowed_lateness_ms)


def session(ctx, name, gap_ms, *, aggregate, on_fire, allowed_lateness_ms=0):
    """Session windows: a record at `ts` opens [ts, ts + gap_ms), and the sessions of a key
    that intersect or touch merge. A session fires when the watermark reaches its end - 1,
    `gap_ms` after its last record. Call in `open`; see `tumbling`."""
    return _SessionWindows(ctx, name, _positive("gap_ms", gap_ms), aggregate, on_fire, allowed_lateness_ms)
