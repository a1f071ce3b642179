// Unit tests of `windows.js`, with plain Node and no component:
//
//     node guest-sdk-js/tests/windows.test.mjs
//
// exits non-zero on a failure. `weir.js` imports the component's bindings
// (`weir:operator/...`), which exist only inside a component: a module loader hook (Node's
// `module.register`) gives `windows.js` a stub `./weir.js` with the few exports it uses
// (`WeirError`, `utf8Encode`, `utf8Decode`, `countDroppedLate`; `batchRows`, `keySlot` and
// `s64At` as outside a batch, so the windows read each entry as they need it), and loads
// `windows.js` as an ES module. The SDK
// pieces windows use are faked: a context whose map states keep JSON text per key and honour a
// current key, a timer registry in which the test moves the watermark and which calls
// `onTimer` for the due timers in (timestamp, key, tag) order, and an emitter that keeps what
// is emitted. Each randomized test runs seeded, out-of-order events through an operator and
// compares every step's output with what a brute-force model of the semantics (written from
// the definitions, not from the library's incremental bookkeeping) expects.

import { register } from "node:module";
import assert from "node:assert/strict";

const STUB = `
export class WeirError extends Error {}
export let droppedLateCounted = 0;
export function countDroppedLate(records) { droppedLateCounted += records; }
export function utf8Encode(text) { return new TextEncoder().encode(text); }
// Outside a batch of the real runtime: the windows read each entry as they need it.
export function batchRows() { return [0, null]; }
export function keySlot() { return 0; }
export function s64At(halves, i) { return (halves[2 * i + 1] | 0) * 4294967296 + halves[2 * i]; }
export function utf8Decode(bytes, start = 0, end = bytes.length) {
  return new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(start, end));
}
`;
const LOADER = `
const STUB = ${JSON.stringify(STUB)};
export async function resolve(specifier, context, next) {
  if (specifier === "weir-stub:weir.js" ||
      (specifier === "./weir.js" && context.parentURL?.endsWith("/guest-sdk-js/windows.js"))) {
    return { url: "weir-stub:weir.js", shortCircuit: true };
  }
  return next(specifier, context);
}
export async function load(url, context, next) {
  if (url === "weir-stub:weir.js") return { format: "module", source: STUB, shortCircuit: true };
  if (url.endsWith("/guest-sdk-js/windows.js")) return next(url, { ...context, format: "module" });
  return next(url, context);
}
`;
register(`data:text/javascript,${encodeURIComponent(LOADER)}`);
const windows = await import(new URL("../windows.js", import.meta.url).href);
const stub = await import("weir-stub:weir.js");
const { WeirError } = stub;

// ---------------------------------------------------------------------------------------------
// Helpers

/** A seeded generator of floats in [0, 1) (mulberry32). */
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    random: next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    choice: (items) => items[Math.floor(next() * items.length)],
  };
}

const hex = (bytes) => Buffer.from(bytes).toString("hex");
const unhex = (text) => new Uint8Array(Buffer.from(text, "hex"));
const byBytes = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b));
const byJson = (a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : JSON.stringify(a) > JSON.stringify(b) ? 1 : 0);
const floorDiv = (a, b) => Math.floor(a / b);

// ---------------------------------------------------------------------------------------------
// Fakes of the SDK (keys are hex strings inside the fakes)

class FakeRecord {
  constructor(key, value, timestamp) {
    this._key = key;
    this._value = value;
    this.timestamp = timestamp;
  }
  get key() {
    return this._key === null ? null : unhex(this._key);
  }
  keyStr() {
    return this._key === null ? null : Buffer.from(this._key, "hex").toString("utf8");
  }
  valueJson() {
    return JSON.parse(this._value);
  }
}

class FakeTimer {
  constructor(key, timestamp, tag, domain) {
    this.key = unhex(key);
    this.timestamp = timestamp;
    this.tag = tag;
    this.domain = domain;
  }
  keyStr() {
    return Buffer.from(this.key).toString("utf8");
  }
}

class FakeEmitter {
  constructor() {
    this.records = [];
  }
  emitJson(key, value, timestamp) {
    this.records.push([hex(key), JSON.parse(JSON.stringify(value))]);
  }
}

class FakeRuntime {
  constructor() {
    this.key = null;
    this.maps = new Map(); // state name -> key -> Map(encoded map key -> encoded value)
    this.timers = new Map(); // "key|domain|ts|tag" -> [key, domain, ts, tag]
    this.watermark = null;
  }
  currentKey(what) {
    if (this.key === null) throw new Error(`${what} used without a current key`);
    return this.key;
  }
  mapOf(name) {
    const maps = this.maps.get(name);
    const key = this.currentKey(`map state \`${name}\``);
    if (!maps.has(key)) maps.set(key, new Map());
    return maps.get(key);
  }
  liveCounts(name) {
    const out = {};
    for (const [key, map] of this.maps.get(name)) if (map.size > 0) out[key] = map.size;
    return out;
  }
}

class FakeMapState {
  constructor(rt, name) {
    this.rt = rt;
    this.name = name;
    rt.maps.set(name, new Map());
  }
  get(key, dflt = undefined) {
    const found = this.rt.mapOf(this.name).get(JSON.stringify(key));
    return found === undefined ? dflt : JSON.parse(found);
  }
  has(key) {
    return this.rt.mapOf(this.name).has(JSON.stringify(key));
  }
  get size() {
    return this.rt.mapOf(this.name).size;
  }
  put(key, value) {
    this.rt.mapOf(this.name).set(JSON.stringify(key), JSON.stringify(value));
  }
  remove(key) {
    this.rt.mapOf(this.name).delete(JSON.stringify(key));
  }
  clear() {
    this.rt.mapOf(this.name).clear();
  }
  entries() {
    const map = this.rt.mapOf(this.name);
    return [...map.keys()].sort(byBytes).map((k) => [JSON.parse(k), JSON.parse(map.get(k))]);
  }
  keys() {
    return this.entries().map(([k]) => k);
  }
}

class FakeTimers {
  constructor(rt) {
    this.rt = rt;
  }
  _id(domain, ts, tag) {
    assert.ok(Number.isSafeInteger(ts), `timestamp ${ts}`);
    assert.ok(Number.isInteger(tag) && tag >= 0 && tag <= 0xffffffff, `tag ${tag}`);
    const key = this.rt.currentKey("timers");
    return [`${key}|${domain}|${ts}|${tag}`, [key, domain, ts, tag]];
  }
  registerEventTime(ts, tag = 0) {
    const [id, timer] = this._id("event", ts, tag);
    this.rt.timers.set(id, timer);
  }
  deleteEventTime(ts, tag = 0) {
    this.rt.timers.delete(this._id("event", ts, tag)[0]);
  }
  registerProcessingTime(ts, tag = 0) {
    const [id, timer] = this._id("processing", ts, tag);
    this.rt.timers.set(id, timer);
  }
  deleteProcessingTime(ts, tag = 0) {
    this.rt.timers.delete(this._id("processing", ts, tag)[0]);
  }
  watermark() {
    return this.rt.watermark;
  }
  processingTime() {
    return 0;
  }
}

class FakeContext {
  constructor(rt) {
    this.rt = rt;
    this.config = {};
  }
  mapState(name) {
    return new FakeMapState(this.rt, name);
  }
  timers() {
    return new FakeTimers(this.rt);
  }
}

/** Runs an operator against the fakes: `process` one record, `advance` the watermark (and
 * fire the due event-time timers, including those registered while firing). */
class Driver {
  constructor(operator) {
    this.rt = new FakeRuntime();
    this.op = operator;
    operator.open(new FakeContext(this.rt));
  }
  process(key, value, ts) {
    const out = new FakeEmitter();
    this.rt.key = key;
    try {
      this.op.process(new FakeRecord(key, JSON.stringify(value), ts), out);
    } finally {
      this.rt.key = null;
    }
    return out.records;
  }
  advance(watermark) {
    const rt = this.rt;
    assert.ok(rt.watermark === null || watermark >= rt.watermark);
    rt.watermark = watermark;
    const out = new FakeEmitter();
    for (;;) {
      let best = null;
      for (const [id, t] of rt.timers) {
        if (t[1] !== "event" || t[2] > watermark) continue;
        if (best === null || t[2] < best[1][2] || (t[2] === best[1][2] && (t[0] < best[1][0] || (t[0] === best[1][0] && t[3] < best[1][3])))) {
          best = [id, t];
        }
      }
      if (best === null) break;
      const [id, [key, domain, ts, tag]] = best;
      rt.timers.delete(id);
      rt.key = key;
      try {
        this.op.onTimer(new FakeTimer(key, ts, tag, domain), out);
      } finally {
        rt.key = null;
      }
    }
    return out.records;
  }
}

// ---------------------------------------------------------------------------------------------
// The operator under test: several window sets and timers of its own

const USER_TAG = 7;

class TestOperator {
  constructor(specs) {
    this.specs = specs; // name -> [factory name, options]
    this.userTimersFired = [];
  }
  open(ctx) {
    this.sets = Object.entries(this.specs).map(([name, [kind, options]]) =>
      windows[kind](ctx, name, { ...options, onFire: (key, start, end, result, out) => out.emitJson(key, [name, start, end, result]) }),
    );
    this.timers = ctx.timers();
  }
  process(record, out) {
    for (const w of this.sets) w.add(record, out);
    if (record.valueJson() % 5 === 0) this.timers.registerEventTime(record.timestamp, USER_TAG);
  }
  onTimer(timer, out) {
    const handled = this.sets.map((w) => w.onTimer(timer, out));
    assert.ok(handled.filter(Boolean).length <= 1, String(handled));
    if (!handled.some(Boolean)) {
      assert.equal(timer.tag, USER_TAG, `tag ${timer.tag.toString(16)}`);
      this.userTimersFired.push(`${hex(timer.key)}|${timer.timestamp}`);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Brute-force models

/** Tumbling (slide === size) and sliding windows, from the definitions. */
class AlignedModel {
  constructor(name, size, slide, lateness, result) {
    Object.assign(this, { name, size, slide, lateness, result });
    this.windows = new Map(); // "key|start" -> values, while the window has state
    this.dropped = 0;
    this.watermark = null;
  }
  windowsOf(ts) {
    const starts = [];
    for (let k = floorDiv(ts - this.size, this.slide) - 1; k <= floorDiv(ts, this.slide) + 1; k++) {
      const s = k * this.slide;
      if (s <= ts && ts < s + this.size) starts.push(s);
    }
    return starts;
  }
  record(key, ts, value) {
    const wm = this.watermark;
    const out = [];
    let accepted = false;
    const starts = this.windowsOf(ts);
    for (const start of starts) {
      const end = start + this.size;
      if (wm !== null && wm >= end - 1 + this.lateness) continue;
      accepted = true;
      const id = `${key}|${start}`;
      if (!this.windows.has(id)) this.windows.set(id, []);
      const values = this.windows.get(id);
      values.push(value);
      if (wm !== null && wm >= end - 1) out.push([key, [this.name, start, end, this.result(values)]]);
    }
    if (starts.length > 0 && !accepted) this.dropped++;
    return out;
  }
  advance(watermark) {
    const fired = [];
    for (const [id, values] of this.windows) {
      const [key, s] = id.split("|");
      const start = Number(s);
      const last = start + this.size - 1;
      if ((this.watermark === null || this.watermark < last) && last <= watermark) {
        fired.push([[last, key], [key, [this.name, start, start + this.size, this.result(values)]]]);
      }
    }
    for (const id of [...this.windows.keys()]) {
      if (Number(id.split("|")[1]) + this.size - 1 + this.lateness <= watermark) this.windows.delete(id);
    }
    this.watermark = watermark;
    return fired.sort((a, b) => a[0][0] - b[0][0] || (a[0][1] < b[0][1] ? -1 : 1)).map((e) => e[1]);
  }
  /** [key, start, end] of every window that has state. */
  live() {
    return [...this.windows.keys()].map((id) => {
      const [key, s] = id.split("|");
      return [key, Number(s), Number(s) + this.size];
    });
  }
}

/** Session windows, from the definitions: the sessions of a key are the groups of its live
 * records whose windows [ts, ts + gap) chain by intersecting or touching. */
class SessionModel {
  constructor(name, gap, lateness, result) {
    Object.assign(this, { name, gap, lateness, result });
    this.records = new Map(); // key -> [[ts, value]] of the sessions that have state
    this.dropped = 0;
    this.watermark = null;
  }
  sessions(records) {
    const groups = [];
    for (const [ts, value] of [...records].sort((a, b) => a[0] - b[0])) {
      const last = groups[groups.length - 1];
      if (last && ts <= last.end) {
        last.end = Math.max(last.end, ts + this.gap);
        last.members.push([ts, value]);
      } else {
        groups.push({ start: ts, end: ts + this.gap, members: [[ts, value]] });
      }
    }
    return groups;
  }
  record(key, ts, value) {
    const wm = this.watermark;
    const live = this.records.get(key) ?? [];
    const session = this.sessions([...live, [ts, value]]).find((g) => g.start <= ts && ts < g.end);
    if (wm !== null && wm >= session.end - 1 + this.lateness) {
      this.dropped++;
      return [];
    }
    this.records.set(key, [...live, [ts, value]]);
    if (wm !== null && wm >= session.end - 1) {
      return [[key, [this.name, session.start, session.end, this.result(session.members.map((m) => m[1]))]]];
    }
    return [];
  }
  advance(watermark) {
    const fired = [];
    for (const [key, live] of this.records) {
      const kept = [];
      for (const g of this.sessions(live)) {
        if ((this.watermark === null || this.watermark < g.end - 1) && g.end - 1 <= watermark) {
          fired.push([[g.end - 1, key], [key, [this.name, g.start, g.end, this.result(g.members.map((m) => m[1]))]]]);
        }
        if (g.end - 1 + this.lateness > watermark) kept.push(...g.members);
      }
      this.records.set(key, kept);
    }
    this.watermark = watermark;
    return fired.sort((a, b) => a[0][0] - b[0][0] || (a[0][1] < b[0][1] ? -1 : 1)).map((e) => e[1]);
  }
  live() {
    const out = [];
    for (const [key, records] of this.records) for (const g of this.sessions(records)) out.push([key, g.start, g.end]);
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// Scenarios

const union = (a, b) => [...new Set([...a, ...b])].sort((x, y) => x - y);
const mod = (v, m) => ((v % m) + m) % m;

/** Aggregates, each as [library aggregate, brute-force result of the window's record values]. */
const AGGREGATES = {
  count: [() => windows.count(), (vs) => vs.length],
  sum: [() => windows.sum(), (vs) => vs.reduce((a, b) => a + b, 0)],
  min: [() => windows.min(), (vs) => Math.min(...vs)],
  "max-mod": [() => windows.max((r) => mod(r.valueJson(), 7)), (vs) => Math.max(...vs.map((v) => mod(v, 7)))],
  "reduce-union": [
    () => windows.reduce(union, (r) => [mod(r.valueJson(), 10)]),
    (vs) => [...new Set(vs.map((v) => mod(v, 10)))].sort((x, y) => x - y),
  ],
};

const KEYS = ["a", "b", "c", "dé"].map((k) => hex(new TextEncoder().encode(k)));

/** Records [key, value, ts] out of order around a clock that starts below zero, some very
 * late, with watermark advances in between. */
function events(seed, n = 400) {
  const r = rng(seed);
  let clock = r.int(-6000, -2000);
  let seen = null;
  let watermark = null;
  const out = [];
  for (let i = 0; i < n; i++) {
    clock += r.int(0, 40);
    let ts = clock - r.int(0, 150);
    if (r.random() < 0.08) ts -= r.int(100, 1500); // late, maybe beyond the lateness
    out.push(["record", r.choice(KEYS), r.int(-50, 50), ts]);
    seen = seen === null ? ts : Math.max(seen, ts);
    if (r.random() < 0.15) {
      const candidate = seen - r.int(0, 200);
      if (watermark === null || candidate > watermark) {
        watermark = candidate;
        out.push(["watermark", watermark]);
      }
    }
  }
  out.push(["watermark", 2 ** 52]);
  return out;
}

const perSet = (records, name) => records.filter((r) => r[1][0] === name);

function runScenario(seed, specs) {
  const libSpecs = {};
  const models = {};
  for (const [name, [kind, params, agg]] of Object.entries(specs)) {
    const [make, result] = AGGREGATES[agg];
    const lateness = params.allowedLatenessMs ?? 0;
    libSpecs[name] = [kind, { ...params, aggregate: make() }];
    if (kind === "tumbling") models[name] = new AlignedModel(name, params.sizeMs, params.sizeMs, lateness, result);
    else if (kind === "sliding") models[name] = new AlignedModel(name, params.sizeMs, params.slideMs, lateness, result);
    else models[name] = new SessionModel(name, params.gapMs, lateness, result);
  }
  const op = new TestOperator(libSpecs);
  const countedBefore = stub.droppedLateCounted;
  const driver = new Driver(op);
  const userTimers = new Set(); // registered, not fired yet: "key|ts"
  const userTimersFired = [];
  const refires = Object.fromEntries(Object.keys(models).map((n) => [n, 0]));
  let emitted = 0;
  events(seed).forEach((event, step) => {
    const where = `seed ${seed}, step ${step}: ${JSON.stringify(event)}`;
    let got;
    if (event[0] === "record") {
      const [, key, value, ts] = event;
      got = driver.process(key, value, ts);
      const expected = Object.values(models).flatMap((m) => m.record(key, ts, value));
      assert.deepEqual([...got].sort(byJson), expected.sort(byJson), where);
      for (const name in models) refires[name] += perSet(got, name).length;
      if (value % 5 === 0) userTimers.add(`${key}|${ts}`);
    } else {
      const watermark = event[1];
      got = driver.advance(watermark);
      for (const id of [...userTimers]) {
        if (Number(id.split("|")[1]) <= watermark) {
          userTimers.delete(id);
          userTimersFired.push(id);
        }
      }
      for (const [name, model] of Object.entries(models)) {
        assert.deepEqual(perSet(got, name), model.advance(watermark), `${where}, set ${name}`);
      }
    }
    emitted += got.length;
    // Window state is dropped exactly when the model drops it, and the timers pending are
    // those of the live windows: at end - 1 until the window fired, and at end - 1 + lateness
    // when there is a lateness (no stale timer is left behind).
    for (const w of op.sets) {
      const model = models[w.name];
      const expectedLive = {};
      const expectedTimers = [];
      for (const [key, , end] of model.live()) {
        expectedLive[key] = (expectedLive[key] ?? 0) + 1;
        if (model.watermark === null || model.watermark < end - 1) expectedTimers.push([key, "event", end - 1, w.fireTag]);
        if (model.lateness) expectedTimers.push([key, "event", end - 1 + model.lateness, w.cleanupTag]);
      }
      assert.deepEqual(driver.rt.liveCounts(`window:${w.name}`), expectedLive, `${where}, set ${w.name}`);
      const timers = [...driver.rt.timers.values()].filter((t) => t[3] === w.fireTag || t[3] === w.cleanupTag);
      assert.deepEqual(timers.sort(byJson), expectedTimers.sort(byJson), `${where}, set ${w.name} timers`);
    }
  });
  for (const w of op.sets) assert.equal(w.droppedLate, models[w.name].dropped, w.name);
  // Each drop also went to the host's counter, once.
  assert.equal(
    stub.droppedLateCounted - countedBefore,
    Object.values(models).reduce((sum, m) => sum + m.dropped, 0),
  );
  // The end of time: nothing is left, neither state nor timers; every user timer reached the
  // operator, once per registration before it fired.
  assert.equal(driver.rt.timers.size, 0);
  for (const name in models) assert.deepEqual(driver.rt.liveCounts(`window:${name}`), {}, name);
  assert.deepEqual([...op.userTimersFired].sort(), userTimersFired.sort());
  assert.ok(emitted > 20, `only ${emitted} records emitted`);
  return { op, models, refires };
}

// ---------------------------------------------------------------------------------------------
// Tests

const tests = [];
const test = (name, fn) => tests.push([name, fn]);

test("tumbling against brute force", () => {
  for (let seed = 0; seed < 6; seed++) {
    const { models, refires } = runScenario(seed, {
      count: ["tumbling", { sizeMs: 100 }, "count"],
      "sum-late": ["tumbling", { sizeMs: 250, allowedLatenessMs: 300 }, "sum"],
    });
    assert.ok(models.count.dropped > 0);
    assert.ok(models["sum-late"].dropped < models.count.dropped);
    assert.equal(refires.count, 0);
    assert.ok(refires["sum-late"] > 0);
  }
});

test("sliding against brute force", () => {
  for (let seed = 0; seed < 6; seed++) {
    const { models, refires } = runScenario(seed, {
      min: ["sliding", { sizeMs: 300, slideMs: 100 }, "min"],
      "max-late": ["sliding", { sizeMs: 250, slideMs: 100, allowedLatenessMs: 170 }, "max-mod"],
      gaps: ["sliding", { sizeMs: 50, slideMs: 120, allowedLatenessMs: 40 }, "count"],
    });
    assert.ok(models.min.dropped > 0);
    assert.ok(refires["max-late"] > 0);
  }
});

test("sessions against brute force", () => {
  for (let seed = 0; seed < 6; seed++) {
    const { models, refires } = runScenario(seed + 100, {
      s: ["session", { gapMs: 60 }, "reduce-union"],
      "s-late": ["session", { gapMs: 45, allowedLatenessMs: 200 }, "sum"],
      t: ["tumbling", { sizeMs: 120, allowedLatenessMs: 120 }, "count"],
    });
    assert.ok(models.s.dropped > 0);
    assert.ok(refires["s-late"] > 0);
  }
});

const K = hex(new TextEncoder().encode("k"));

test("lateness: fire, refires, cleanup, drop (hand-checked)", () => {
  const op = new TestOperator({ t: ["tumbling", { sizeMs: 10, aggregate: windows.count(), allowedLatenessMs: 5 }] });
  const d = new Driver(op);
  assert.deepEqual(d.process(K, 1, 3), []);
  assert.deepEqual(d.process(K, 1, 12), []);
  assert.deepEqual(d.advance(9), [[K, ["t", 0, 10, 1]]]);
  assert.deepEqual(d.process(K, 1, 5), [[K, ["t", 0, 10, 2]]]); // refire
  assert.deepEqual(d.advance(13), []);
  assert.deepEqual(d.process(K, 1, 0), [[K, ["t", 0, 10, 3]]]); // 13 < 9 + 5
  assert.deepEqual(d.advance(14), []); // cleanup of [0, 10)
  assert.deepEqual(d.process(K, 1, 1), []); // too late: dropped
  assert.equal(op.sets[0].droppedLate, 1);
  assert.deepEqual(d.advance(19), [[K, ["t", 10, 20, 1]]]);
});

test("window keys sort by start", () => {
  const r = rng(1);
  const starts = [0, -1, 1, -(2 ** 53) + 1, 2 ** 53 - 1, -10, 10];
  for (let i = 0; i < 500; i++) starts.push(r.int(-(2 ** 40), 2 ** 40) * r.int(1, 4000));
  const encoded = [...starts].sort((a, b) => byBytes(JSON.stringify(windows.windowKey(a)), JSON.stringify(windows.windowKey(b))));
  assert.deepEqual(encoded, [...starts].sort((a, b) => a - b));
  for (const s of starts) assert.equal(windows.windowStart(windows.windowKey(s)), s);
  assert.equal(windows.windowKey(60000), "0000000000000060000");
  assert.equal(windows.windowKey(-1), "-9999999999999999999");
  assert.equal(windows.windowKey(-10), "-9999999999999999990");
});

test("negative tumbling starts", () => {
  const d = new Driver(new TestOperator({ t: ["tumbling", { sizeMs: 10, aggregate: windows.count() }] }));
  d.process(K, 1, -1);
  d.process(K, 1, -10);
  d.process(K, 1, -11);
  assert.deepEqual(d.advance(-1), [[K, ["t", -20, -10, 1]], [K, ["t", -10, 0, 2]]]);
});

test("between sliding windows (slide > size): in none, not late, not counted", () => {
  const rt = new FakeRuntime();
  const w = windows.sliding(new FakeContext(rt), "w", { sizeMs: 5, slideMs: 10, aggregate: windows.count(), onFire: () => {} });
  rt.key = K;
  assert.equal(w.add(new FakeRecord(K, "1", 7), new FakeEmitter()), false);
  assert.equal(w.add(new FakeRecord(K, "1", 13), new FakeEmitter()), true);
  rt.watermark = 100;
  assert.equal(w.add(new FakeRecord(K, "1", 7), new FakeEmitter()), false);
  assert.equal(w.add(new FakeRecord(K, "1", 13), new FakeEmitter()), false);
  assert.equal(w.droppedLate, 1);
});

test("sessions merge when they touch", () => {
  const d = new Driver(new TestOperator({ s: ["session", { gapMs: 10, aggregate: windows.sum((r) => r.valueJson()) }] }));
  d.process(K, 1, 0); // [0, 10)
  d.process(K, 2, 25); // [25, 35)
  d.process(K, 4, 10); // [10, 20) touches [0, 10): [0, 20)
  assert.deepEqual(d.rt.liveCounts("window:s"), { [K]: 2 });
  d.process(K, 8, 15); // [15, 25) joins both: [0, 35)
  assert.deepEqual(d.rt.liveCounts("window:s"), { [K]: 1 });
  assert.deepEqual(d.advance(33), []);
  assert.deepEqual(d.advance(34), [[K, ["s", 0, 35, 15]]]);
  assert.equal(d.rt.timers.size, 0);
});

test("a record without timestamp is an error", () => {
  const d = new Driver(new TestOperator({ t: ["tumbling", { sizeMs: 10, aggregate: windows.count() }] }));
  assert.throws(() => d.process(K, 1, null), (e) => e instanceof WeirError && /window set `t`: a record without timestamp/.test(e.message));
});

test("tags, foreign timers, names", () => {
  const rt = new FakeRuntime();
  const ctx = new FakeContext(rt);
  const onFire = () => {};
  const a = windows.tumbling(ctx, "a", { sizeMs: 10, aggregate: windows.count(), onFire });
  const b = windows.session(ctx, "b", { gapMs: 10, aggregate: windows.count(), onFire, allowedLatenessMs: 5 });
  assert.notEqual(a.fireTag, b.fireTag);
  for (const w of [a, b]) {
    assert.equal((w.fireTag & 0xffff0001) >>> 0, windows.TAG_BASE);
    assert.equal(w.cleanupTag, w.fireTag + 1);
  }
  const out = new FakeEmitter();
  rt.key = K;
  assert.equal(a.onTimer(new FakeTimer(K, 9, 0, "event"), out), false);
  assert.equal(a.onTimer(new FakeTimer(K, 9, b.fireTag, "event"), out), false);
  assert.equal(a.onTimer(new FakeTimer(K, 9, a.fireTag, "processing"), out), false);
  assert.equal(a.onTimer(new FakeTimer(K, 9, a.fireTag, "event"), out), true);
  assert.equal(b.onTimer(new FakeTimer(K, 9, b.cleanupTag, "event"), out), true);
  assert.throws(() => windows.tumbling(ctx, "a", { sizeMs: 10, aggregate: windows.count(), onFire }), /declared twice/);
  assert.equal(windows.keyText(new TextEncoder().encode("dé")), "dé");
});

/** `fire_tag` of the window sets "per-page" and "é" in the Python SDK's `weir_sdk.windows`. */
const PYTHON_TAGS = [4294913082, 4294945780];

test("tags match the Python SDK's", () => {
  const ctx = new FakeContext(new FakeRuntime());
  const w = windows.tumbling(ctx, "per-page", { sizeMs: 10, aggregate: windows.count(), onFire: () => {} });
  const v = windows.tumbling(ctx, "é", { sizeMs: 10, aggregate: windows.count(), onFire: () => {} });
  assert.deepEqual([w.fireTag, v.fireTag], PYTHON_TAGS);
});

test("argument errors", () => {
  const ctx = new FakeContext(new FakeRuntime());
  const onFire = () => {};
  assert.throws(() => windows.tumbling(ctx, "x", { sizeMs: 0, aggregate: windows.count(), onFire }), RangeError);
  assert.throws(() => windows.sliding(ctx, "x", { sizeMs: 10, slideMs: -1, aggregate: windows.count(), onFire }), RangeError);
  assert.throws(() => windows.tumbling(ctx, "x", { sizeMs: 10, aggregate: windows.count(), onFire, allowedLatenessMs: -1 }), RangeError);
  assert.throws(() => windows.tumbling(ctx, "x", { sizeMs: 10, aggregate: "count", onFire }), TypeError);
  assert.throws(() => windows.tumbling(ctx, "x", { sizeMs: 10, aggregate: windows.count() }), TypeError);
});

let failed = 0;
for (const [name, fn] of tests) {
  try {
    fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n${e.stack ?? e}`);
  }
}
console.log(`${tests.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
