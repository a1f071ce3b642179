"""Unit tests of `weir_sdk.windows`, with plain CPython and no component.

    python3 -m unittest discover -s guest-sdk-python/tests

`weir_sdk/__init__.py` imports the component's bindings (`wit_world`), which exist only
inside a component: the tests put a stub `weir_sdk` package in `sys.modules` (the real
folder as its path, a `WeirError` of its own) so that `weir_sdk.windows` imports alone. The
SDK pieces windows use are faked: a context whose map states keep JSON text per key and honour
a current key, a timer registry in which the test moves the watermark and which calls
`on_timer` for the due timers in (timestamp, key, tag) order, and an emitter that keeps what
is emitted. Each randomized test runs seeded, out-of-order events through an operator and
compares every step's output with what a brute-force model of the semantics (written from the
definitions, not from the library's incremental bookkeeping) expects.
"""

import functools
import json
import random
import sys
import types
import unittest
from pathlib import Path

_SDK = Path(__file__).resolve().parent.parent / "weir_sdk"


def _import_windows():
    if "weir_sdk" not in sys.modules:
        package = types.ModuleType("weir_sdk")
        package.__path__ = [str(_SDK)]

        class WeirError(Exception):
            pass

        package.WeirError = WeirError
        package.dropped_late_counted = 0

        def count_dropped_late(records):
            package.dropped_late_counted += records

        package._count_dropped_late = count_dropped_late
        # Outside a batch of the real runtime: the windows read each entry as they need it.
        package._batch_rows = lambda: (0, None)
        package._key_slot = lambda: 0
        sys.modules["weir_sdk"] = package
    import weir_sdk.windows

    return weir_sdk.windows, sys.modules["weir_sdk"].WeirError


windows, WeirError = _import_windows()


# ---------------------------------------------------------------------------------------------
# Fakes of the SDK


class FakeRecord:
    def __init__(self, key, value, timestamp):
        self.key = key
        self.value = value
        self.timestamp = timestamp

    def key_str(self):
        return None if self.key is None else self.key.decode()

    def value_json(self):
        return json.loads(self.value)


class FakeTimer:
    def __init__(self, key, timestamp, tag, domain):
        self.key = key
        self.timestamp = timestamp
        self.tag = tag
        self.domain = domain

    def key_str(self):
        return self.key.decode()


class FakeEmitter:
    def __init__(self):
        self.records = []

    def emit_json(self, key, value, timestamp=None):
        self.records.append((key, json.loads(json.dumps(value))))


class FakeRuntime:
    """The host side: keyed maps, timers, the current key, the watermark."""

    def __init__(self):
        self.key = None
        self.maps = {}  # state name -> key -> {encoded map key: encoded value}
        self.timers = set()  # (key, domain, timestamp, tag)
        self.watermark = None
        self.now = 0

    def current_key(self, what):
        if self.key is None:
            raise AssertionError(f"{what} used without a current key")
        return self.key

    def map_of(self, name):
        return self.maps[name].setdefault(self.current_key(f"map state `{name}`"), {})


class FakeMapState:
    def __init__(self, rt, name):
        self.rt = rt
        self.name = name
        rt.maps.setdefault(name, {})

    def get(self, key, default=None):
        found = self.rt.map_of(self.name).get(json.dumps(key, separators=(",", ":")))
        return default if found is None else json.loads(found)

    def __contains__(self, key):
        return json.dumps(key, separators=(",", ":")) in self.rt.map_of(self.name)

    def __len__(self):
        return len(self.rt.map_of(self.name))

    def put(self, key, value):
        self.rt.map_of(self.name)[json.dumps(key, separators=(",", ":"))] = json.dumps(value, separators=(",", ":"))

    def remove(self, key):
        self.rt.map_of(self.name).pop(json.dumps(key, separators=(",", ":")), None)

    def clear(self):
        self.rt.map_of(self.name).clear()

    def items(self):
        entries = self.rt.map_of(self.name)
        return [(json.loads(k), json.loads(entries[k])) for k in sorted(entries, key=str.encode)]

    def keys(self):
        return [k for k, _ in self.items()]


class FakeTimers:
    def __init__(self, rt):
        self.rt = rt

    def _check(self, ts, tag):
        assert type(ts) is int, ts
        assert type(tag) is int and 0 <= tag <= 0xFFFFFFFF, tag

    def register_event_time(self, ts, tag=0):
        self._check(ts, tag)
        self.rt.timers.add((self.rt.current_key("timers"), "event", ts, tag))

    def delete_event_time(self, ts, tag=0):
        self._check(ts, tag)
        self.rt.timers.discard((self.rt.current_key("timers"), "event", ts, tag))

    def register_processing_time(self, ts, tag=0):
        self._check(ts, tag)
        self.rt.timers.add((self.rt.current_key("timers"), "processing", ts, tag))

    def delete_processing_time(self, ts, tag=0):
        self._check(ts, tag)
        self.rt.timers.discard((self.rt.current_key("timers"), "processing", ts, tag))

    def watermark(self):
        return self.rt.watermark

    def processing_time(self):
        return self.rt.now


class FakeContext:
    def __init__(self, rt):
        self.rt = rt
        self.config = {}

    def map_state(self, name):
        return FakeMapState(self.rt, name)

    def timers(self):
        return FakeTimers(self.rt)


class Driver:
    """Runs an operator against the fakes: `process` one record, `advance` the watermark (and
    fire the due event-time timers, including those registered while firing)."""

    def __init__(self, operator):
        self.rt = FakeRuntime()
        self.op = operator
        self.rt.key = None
        operator.open(FakeContext(self.rt))

    def process(self, key, value, ts):
        out = FakeEmitter()
        self.rt.key = key
        try:
            self.op.process(FakeRecord(key, json.dumps(value).encode(), ts), out)
        finally:
            self.rt.key = None
        return out.records

    def advance(self, watermark):
        rt = self.rt
        assert rt.watermark is None or watermark >= rt.watermark
        rt.watermark = watermark
        out = FakeEmitter()
        while True:
            due = [t for t in rt.timers if t[1] == "event" and t[2] <= watermark]
            if not due:
                break
            key, domain, ts, tag = min(due, key=lambda t: (t[2], t[0], t[3]))
            rt.timers.discard((key, domain, ts, tag))
            rt.key = key
            try:
                self.op.on_timer(FakeTimer(key, ts, tag, domain), out)
            finally:
                rt.key = None
        return out.records


# ---------------------------------------------------------------------------------------------
# The operator under test: several window sets and timers of its own


USER_TAG = 7


class Operator:
    def __init__(self, specs):
        # specs: name -> (factory name, kwargs)
        self.specs = specs
        self.user_timers_fired = []

    def open(self, ctx):
        self.sets = []
        for name, (kind, kwargs) in self.specs.items():
            factory = getattr(windows, kind)
            self.sets.append(factory(ctx, name, on_fire=functools.partial(self.fire, name), **kwargs))
        self.timers = ctx.timers()

    def process(self, record, out):
        for w in self.sets:
            w.add(record, out)
        if record.value_json() % 5 == 0:
            self.timers.register_event_time(record.timestamp, USER_TAG)

    def on_timer(self, timer, out):
        handled = [w.on_timer(timer, out) for w in self.sets]
        assert sum(handled) <= 1, handled
        if not any(handled):
            assert timer.tag == USER_TAG, hex(timer.tag)
            self.user_timers_fired.append((timer.key, timer.timestamp))

    def fire(self, name, key, start, end, result, out):
        out.emit_json(key, [name, start, end, result])


# ---------------------------------------------------------------------------------------------
# Brute-force models


class AlignedModel:
    """Tumbling (slide == size) and sliding windows, from the definitions."""

    def __init__(self, name, size, slide, lateness, result):
        self.name, self.size, self.slide, self.lateness, self.result = name, size, slide, lateness, result
        self.windows = {}  # (key, start) -> values, while the window has state
        self.dropped = 0
        self.watermark = None

    def windows_of(self, ts):
        lo = (ts - self.size) // self.slide - 1
        hi = ts // self.slide + 1
        starts = [k * self.slide for k in range(lo, hi + 1)]
        return [s for s in starts if s <= ts < s + self.size]

    def record(self, key, ts, value):
        wm, out, accepted = self.watermark, [], False
        starts = self.windows_of(ts)
        for start in starts:
            end = start + self.size
            if wm is not None and wm >= end - 1 + self.lateness:
                continue
            accepted = True
            values = self.windows.setdefault((key, start), [])
            values.append(value)
            if wm is not None and wm >= end - 1:
                out.append((key, [self.name, start, end, self.result(values)]))
        if starts and not accepted:
            self.dropped += 1
        return out

    def advance(self, watermark):
        fired = []
        for (key, start), values in self.windows.items():
            last = start + self.size - 1
            if (self.watermark is None or self.watermark < last) and last <= watermark:
                fired.append(((last, key), (key, [self.name, start, start + self.size, self.result(values)])))
        for key, start in list(self.windows):
            if start + self.size - 1 + self.lateness <= watermark:
                del self.windows[(key, start)]
        self.watermark = watermark
        return [e for _, e in sorted(fired)]

    def live(self):
        """(key, start, end) of every window that has state."""
        return [(key, start, start + self.size) for key, start in self.windows]


class SessionModel:
    """Session windows, from the definitions: the sessions of a key are the groups of its live
    records whose windows [ts, ts + gap) chain by intersecting or touching."""

    def __init__(self, name, gap, lateness, result):
        self.name, self.gap, self.lateness, self.result = name, gap, lateness, result
        self.records = {}  # key -> [(ts, value)] of the sessions that have state
        self.dropped = 0
        self.watermark = None

    def sessions(self, records):
        groups = []
        for ts, value in sorted(records, key=lambda r: r[0]):
            if groups and ts <= groups[-1][1]:
                groups[-1][1] = max(groups[-1][1], ts + self.gap)
                groups[-1][2].append((ts, value))
            else:
                groups.append([ts, ts + self.gap, [(ts, value)]])
        return groups

    def record(self, key, ts, value):
        wm = self.watermark
        live = self.records.get(key, [])
        for start, end, members in self.sessions(live + [(ts, value)]):
            if start <= ts < end:
                break
        if wm is not None and wm >= end - 1 + self.lateness:
            self.dropped += 1
            return []
        self.records.setdefault(key, []).append((ts, value))
        if wm is not None and wm >= end - 1:
            return [(key, [self.name, start, end, self.result([v for _, v in members])])]
        return []

    def advance(self, watermark):
        fired = []
        for key, live in self.records.items():
            kept = []
            for start, end, members in self.sessions(live):
                if (self.watermark is None or self.watermark < end - 1) and end - 1 <= watermark:
                    result = self.result([v for _, v in members])
                    fired.append(((end - 1, key), (key, [self.name, start, end, result])))
                if end - 1 + self.lateness > watermark:
                    kept += members
            self.records[key] = kept
        self.watermark = watermark
        return [e for _, e in sorted(fired)]

    def live(self):
        """(key, start, end) of every session that has state."""
        return [(key, start, end) for key, r in self.records.items() for start, end, _ in self.sessions(r)]


# ---------------------------------------------------------------------------------------------
# Scenarios


def union(a, b):
    return sorted(set(a) | set(b))


# Aggregates, each as (library aggregate, brute-force result of the window's record values).
AGGREGATES = {
    "count": (lambda: windows.count(), len),
    "sum": (lambda: windows.sum(), sum),
    "min": (lambda: windows.min(), min),
    "max-mod": (lambda: windows.max(lambda r: r.value_json() % 7), lambda vs: max(v % 7 for v in vs)),
    "reduce-union": (
        lambda: windows.reduce(union, value=lambda r: [r.value_json() % 10]),
        lambda vs: sorted({v % 10 for v in vs}),
    ),
}


def events(seed, n=400):
    """Records (key, value, ts) out of order around a clock that starts below zero, some very
    late, with watermark advances in between."""
    rng = random.Random(seed)
    clock = rng.randint(-6000, -2000)
    seen = None
    watermark = None
    out = []
    for _ in range(n):
        clock += rng.randint(0, 40)
        ts = clock - rng.randint(0, 150)
        if rng.random() < 0.08:
            ts -= rng.randint(100, 1500)  # late, maybe beyond the lateness
        key = rng.choice([b"a", b"b", b"c", b"d\xc3\xa9"])
        out.append(("record", key, rng.randint(-50, 50), ts))
        seen = ts if seen is None else max(seen, ts)
        if rng.random() < 0.15:
            candidate = seen - rng.randint(0, 200)
            if watermark is None or candidate > watermark:
                watermark = candidate
                out.append(("watermark", watermark))
    out.append(("watermark", 2**62))
    return out


def per_set(records, name):
    return [r for r in records if r[1][0] == name]


class WindowsAgainstBruteForce(unittest.TestCase):
    def run_scenario(self, seed, specs):
        """specs: name -> (kind, params, aggregate name)."""
        lib_specs, models = {}, {}
        for name, (kind, params, agg) in specs.items():
            make, result = AGGREGATES[agg]
            lateness = params.get("allowed_lateness_ms", 0)
            lib_specs[name] = (kind, dict(params, aggregate=make()))
            if kind == "tumbling":
                models[name] = AlignedModel(name, params["size_ms"], params["size_ms"], lateness, result)
            elif kind == "sliding":
                models[name] = AlignedModel(name, params["size_ms"], params["slide_ms"], lateness, result)
            else:
                models[name] = SessionModel(name, params["gap_ms"], lateness, result)
        op = Operator(lib_specs)
        counted_before = sys.modules["weir_sdk"].dropped_late_counted
        driver = Driver(op)
        user_timers = set()  # registered, not fired yet: (key, ts)
        user_timers_fired = []
        emitted = 0
        refires = {name: 0 for name in models}  # emitted by add(), within the lateness
        for step, event in enumerate(events(seed)):
            where = f"seed {seed}, step {step}: {event}"
            if event[0] == "record":
                _, key, value, ts = event
                got = driver.process(key, value, ts)
                expected = [e for m in models.values() for e in m.record(key, ts, value)]
                self.assertEqual(sorted(got, key=repr), sorted(expected, key=repr), where)
                for name in models:
                    refires[name] += len(per_set(got, name))
                if value % 5 == 0:
                    user_timers.add((key, ts))
            else:
                _, watermark = event
                got = driver.advance(watermark)
                for timer in [t for t in user_timers if t[1] <= watermark]:
                    user_timers.discard(timer)
                    user_timers_fired.append(timer)
                for name, model in models.items():
                    self.assertEqual(per_set(got, name), model.advance(watermark), f"{where}, set {name}")
                self.assertEqual(len(got), sum(len(per_set(got, n)) for n in models), where)
            # Window state is dropped exactly when the model drops it, and the timers pending
            # are those of the live windows: at end - 1 until the window fired, and at
            # end - 1 + lateness when there is a lateness (no stale timer is left behind).
            for w in op.sets:
                model = models[w.name]
                live = {k: len(v) for k, v in driver.rt.maps[f"window:{w.name}"].items() if v}
                expected_live = {}
                expected_timers = set()
                for key, start, end in model.live():
                    expected_live[key] = expected_live.get(key, 0) + 1
                    if model.watermark is None or model.watermark < end - 1:
                        expected_timers.add((key, "event", end - 1, w.fire_tag))
                    if model.lateness:
                        expected_timers.add((key, "event", end - 1 + model.lateness, w.fire_tag | 1))
                self.assertEqual(live, expected_live, f"{where}, set {w.name}")
                timers = {t for t in driver.rt.timers if t[3] in (w.fire_tag, w.fire_tag | 1)}
                self.assertEqual(timers, expected_timers, f"{where}, set {w.name}")
            emitted += len(got)
        for w in op.sets:
            self.assertEqual(w.dropped_late, models[w.name].dropped, w.name)
        # Each drop also went to the host's counter, once.
        self.assertEqual(
            sys.modules["weir_sdk"].dropped_late_counted - counted_before,
            sum(m.dropped for m in models.values()),
        )
        # The end of time: nothing is left, neither state nor timers; every user timer reached
        # the operator, once per registration before it fired.
        self.assertEqual(driver.rt.timers, set())
        for name in models:
            self.assertFalse(any(driver.rt.maps[f"window:{name}"].values()), name)
        self.assertEqual(sorted(op.user_timers_fired), sorted(user_timers_fired))
        self.assertGreater(emitted, 20)
        return op, models, refires

    def test_tumbling(self):
        for seed in range(6):
            op, models, refires = self.run_scenario(
                seed,
                {
                    "count": ("tumbling", {"size_ms": 100}, "count"),
                    "sum-late": ("tumbling", {"size_ms": 250, "allowed_lateness_ms": 300}, "sum"),
                },
            )
            self.assertGreater(models["count"].dropped, 0)
            self.assertLess(models["sum-late"].dropped, models["count"].dropped)
            self.assertEqual(refires["count"], 0)
            self.assertGreater(refires["sum-late"], 0)

    def test_sliding(self):
        for seed in range(6):
            op, models, refires = self.run_scenario(
                seed,
                {
                    "min": ("sliding", {"size_ms": 300, "slide_ms": 100}, "min"),
                    "max-late": ("sliding", {"size_ms": 250, "slide_ms": 100, "allowed_lateness_ms": 170}, "max-mod"),
                    "gaps": ("sliding", {"size_ms": 50, "slide_ms": 120, "allowed_lateness_ms": 40}, "count"),
                },
            )
            self.assertGreater(models["min"].dropped, 0)
            self.assertGreater(refires["max-late"], 0)

    def test_sessions(self):
        for seed in range(6):
            op, models, refires = self.run_scenario(
                seed + 100,
                {
                    "s": ("session", {"gap_ms": 60}, "reduce-union"),
                    "s-late": ("session", {"gap_ms": 45, "allowed_lateness_ms": 200}, "sum"),
                    "t": ("tumbling", {"size_ms": 120, "allowed_lateness_ms": 120}, "count"),
                },
            )
            self.assertGreater(models["s"].dropped, 0)
            self.assertGreater(refires["s-late"], 0)
            self.assertEqual([w.dropped_late for w in op.sets], [m.dropped for m in models.values()])

    def test_lateness_refires(self):
        """A hand-checked sequence: fire, refires within the lateness, cleanup, drop."""
        op = Operator({"t": ("tumbling", {"size_ms": 10, "aggregate": windows.count(), "allowed_lateness_ms": 5})})
        d = Driver(op)
        self.assertEqual(d.process(b"k", 1, 3), [])
        self.assertEqual(d.process(b"k", 1, 12), [])
        self.assertEqual(d.advance(9), [(b"k", ["t", 0, 10, 1])])
        self.assertEqual(d.process(b"k", 1, 5), [(b"k", ["t", 0, 10, 2])])  # refire
        self.assertEqual(d.advance(13), [])
        self.assertEqual(d.process(b"k", 1, 0), [(b"k", ["t", 0, 10, 3])])  # 13 < 9 + 5
        self.assertEqual(d.advance(14), [])  # cleanup of [0, 10)
        self.assertEqual(d.process(b"k", 1, 1), [])  # too late: dropped
        self.assertEqual(op.sets[0].dropped_late, 1)
        self.assertEqual(d.advance(19), [(b"k", ["t", 10, 20, 1])])


class WindowsBasics(unittest.TestCase):
    def test_window_keys_sort_by_start(self):
        rng = random.Random(1)
        starts = [rng.randint(-(10**18), 10**18) for _ in range(500)] + [0, -1, 1, -(2**63), 2**63 - 1]
        encoded = sorted(starts, key=lambda s: json.dumps(windows.window_key(s)).encode())
        self.assertEqual(encoded, sorted(starts))
        for s in starts:
            self.assertEqual(windows._start_of(windows.window_key(s)), s)
        self.assertEqual(windows.window_key(60000), "0000000000000060000")
        self.assertEqual(windows.window_key(-1), "-9999999999999999999")

    def test_negative_tumbling_start(self):
        op = Operator({"t": ("tumbling", {"size_ms": 10, "aggregate": windows.count()})})
        d = Driver(op)
        d.process(b"k", 1, -1)
        d.process(b"k", 1, -10)
        d.process(b"k", 1, -11)
        self.assertEqual(d.advance(-1), [(b"k", ["t", -20, -10, 1]), (b"k", ["t", -10, 0, 2])])

    def test_between_sliding_windows(self):
        """With slide > size, a record between windows is in none: not late, not counted."""
        rt = FakeRuntime()
        w = windows.sliding(FakeContext(rt), "w", 5, 10, aggregate=windows.count(), on_fire=lambda *a: None)
        rt.key = b"k"
        self.assertFalse(w.add(FakeRecord(b"k", b"1", 7), FakeEmitter()))
        self.assertTrue(w.add(FakeRecord(b"k", b"1", 13), FakeEmitter()))
        rt.watermark = 100
        self.assertFalse(w.add(FakeRecord(b"k", b"1", 7), FakeEmitter()))
        self.assertFalse(w.add(FakeRecord(b"k", b"1", 13), FakeEmitter()))
        self.assertEqual(w.dropped_late, 1)

    def test_sessions_merge_and_touch(self):
        op = Operator({"s": ("session", {"gap_ms": 10, "aggregate": windows.sum(lambda r: r.value_json())})})
        d = Driver(op)
        d.process(b"k", 1, 0)  # [0, 10)
        d.process(b"k", 2, 25)  # [25, 35)
        d.process(b"k", 4, 10)  # [10, 20) touches [0, 10): [0, 20)
        self.assertEqual(len(d.rt.maps["window:s"][b"k"]), 2)
        d.process(b"k", 8, 15)  # [15, 25) joins both: [0, 35)
        self.assertEqual(len(d.rt.maps["window:s"][b"k"]), 1)
        self.assertEqual(d.advance(33), [])
        self.assertEqual(d.advance(34), [(b"k", ["s", 0, 35, 15])])
        self.assertEqual(d.rt.timers, set())

    def test_record_without_timestamp(self):
        op = Operator({"t": ("tumbling", {"size_ms": 10, "aggregate": windows.count()})})
        d = Driver(op)
        with self.assertRaisesRegex(WeirError, "window set `t`: a record without timestamp"):
            d.process(b"k", 1, None)

    def test_tags_and_foreign_timers(self):
        rt = FakeRuntime()
        ctx = FakeContext(rt)
        fire = lambda *args: None
        a = windows.tumbling(ctx, "a", 10, aggregate=windows.count(), on_fire=fire)
        b = windows.session(ctx, "b", 10, aggregate=windows.count(), on_fire=fire, allowed_lateness_ms=5)
        self.assertNotEqual(a.fire_tag, b.fire_tag)
        for w in (a, b):
            self.assertEqual(w.fire_tag & 0xFFFF0001, windows.TAG_BASE)
        out = FakeEmitter()
        rt.key = b"k"
        self.assertFalse(a.on_timer(FakeTimer(b"k", 9, 0, "event"), out))
        self.assertFalse(a.on_timer(FakeTimer(b"k", 9, b.fire_tag, "event"), out))
        self.assertFalse(a.on_timer(FakeTimer(b"k", 9, a.fire_tag, "processing"), out))
        self.assertTrue(a.on_timer(FakeTimer(b"k", 9, a.fire_tag, "event"), out))
        self.assertTrue(b.on_timer(FakeTimer(b"k", 9, b.fire_tag | 1, "event"), out))
        with self.assertRaisesRegex(WeirError, "declared twice"):
            windows.tumbling(ctx, "a", 10, aggregate=windows.count(), on_fire=fire)

    def test_argument_errors(self):
        ctx = FakeContext(FakeRuntime())
        fire = lambda *args: None
        with self.assertRaises(ValueError):
            windows.tumbling(ctx, "x", 0, aggregate=windows.count(), on_fire=fire)
        with self.assertRaises(ValueError):
            windows.sliding(ctx, "x", 10, -1, aggregate=windows.count(), on_fire=fire)
        with self.assertRaises(ValueError):
            windows.tumbling(ctx, "x", 10, aggregate=windows.count(), on_fire=fire, allowed_lateness_ms=-1)
        with self.assertRaises(TypeError):
            windows.tumbling(ctx, "x", 10, aggregate="count", on_fire=fire)
        with self.assertRaises(TypeError):
            windows.tumbling(ctx, "x", 10, aggregate=windows.count(), on_fire=None)


if __name__ == "__main__":
    unittest.main()
