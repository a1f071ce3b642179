//! Event-time windows: the Rust SDK's windows library in Wasm against the same logic native,
//! timer firing, checkpoint bytes and the memory of pending timers, in one run.
//!
//! - Throughput: generator (10 M records over 100 K keys, a synthetic clock of 100 000 events
//!   per second with 5 % of the records up to 2 s late) -> key-by -> tumbling count windows
//!   (parallelism 1) -> discard, with watermarks 2 s behind, for two window sizes: one minute
//!   (few fires: `windows_*`) and one second (a window per key and second, so about as many
//!   fires as records at 100 K keys: `windows_1s_*`). Once the operator is the example
//!   component (`examples/windows/pages`, the SDK's `Windows::tumbling` with `Count`), once the
//!   same logic compiled into the host over the same runtime and state backend, following the
//!   SDK's algorithm (a map entry per window under its CBOR-encoded start, read and written
//!   per record, a timer per window). Medians of interleaved runs (five for one-minute
//!   windows, three for one-second ones).
//! - Timers fired per second: 1 M windows, one per key, registered through the component, then
//!   fired by one watermark at the end of time: the host taking them from state in batches
//!   and the component handling them (emitting each window), timed alone.
//! - Checkpoint bytes per dirty key: the encoded increment after those 1 M keys each got a
//!   window and its timer, over the keys.
//! - Memory: bytes a pending timer costs (state and the index that fires it), against a map
//!   entry, one per key for both, counted by the allocator.
//!
//! `cargo bench -p weir-host --bench windows [-- RECORDS KEYS [SIZES]]`: SIZES `60000,1000`
//! by default (window sizes in milliseconds; a profile of one case takes one).

mod counting;
mod keyed;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed::median;
use weir_host::checkpoint::{JobStart, format};
use weir_host::connectors::GeneratorSource;
use weir_host::connectors::generator::GeneratorClock;
use weir_host::engine::{ComponentCache, Engine, EngineOptions};
use weir_host::guest::WasmOperatorFactory;
use weir_host::job::watermarks::WatermarkPolicy;
use weir_host::job::{Pipeline, RunOptions, run};
use weir_host::operator::{
    FailureKind, GuestLimits, OperatorError, OperatorFactory, OperatorInstance, SubtaskContext,
};
use weir_host::partition::{KeyGroups, hash_key};
use weir_host::record::{RecordBatch, RecordRef};
use weir_host::state::{
    FiredTimer, KeyRef, KeyedStateBackend, StateId, StateKind, TimeDomain, Timer,
};

/// The library's fire tag for the window set `per-page`: `0xFFFF_0000 | hash15(name) << 1`.
const FIRE_TAG: u32 = 0xFFFF_0000 | (5661 << 1);

/// The example's configuration for windows of `size_ms`, with no lateness.
fn config(size_ms: i64) -> String {
    format!(r#"{{"size_ms":{size_ms},"allowed_lateness_ms":0}}"#)
}

/// One open window as the SDK's map entry holds it, under its start: `[end, count, fired]`.
type Entry = (i64, u64, bool);

/// Tumbling count windows compiled into the host: the SDK's `Windows::tumbling` with `Count`
/// and the example's output, as the SDK does it (a map entry per window, read per record).
struct NativeWindows {
    state: KeyedStateBackend,
    windows: StateId,
    size_ms: i64,
    ctx: SubtaskContext,
    watermark: Option<i64>,
    map_key: Vec<u8>,
    encoded: Vec<u8>,
    scratch: Vec<u8>,
}

impl NativeWindows {
    fn fail(&self, message: impl ToString) -> OperatorError {
        self.ctx.error(FailureKind::Returned, message.to_string())
    }

    /// The window of `key` starting at `start`, if open (its encoded start left in `map_key`).
    fn get(&mut self, key: KeyRef<'_>, start: i64) -> Result<Option<Entry>, OperatorError> {
        self.map_key.clear();
        ciborium::into_writer(&start, &mut self.map_key).map_err(|e| self.fail(e))?;
        let value = self
            .state
            .map_get(self.windows, key, &self.map_key)
            .map_err(|e| self.fail(e))?;
        value
            .map(|bytes| ciborium::de::from_reader_with_buffer(bytes, &mut self.scratch))
            .transpose()
            .map_err(|e| self.fail(e))
    }
}

/// What the example emits for a window.
fn emit(out: &mut RecordBatch, key: &[u8], start: i64, end: i64, clicks: u64) {
    let page = serde_json::to_string(std::str::from_utf8(key).unwrap_or("")).unwrap_or_default();
    let line = format!(r#"{{"page":{page},"start":{start},"end":{end},"clicks":{clicks}}}"#);
    out.push(RecordRef::keyed(key, line.as_bytes()));
}

impl OperatorInstance for NativeWindows {
    fn process(&mut self, batch: &mut RecordBatch) -> Result<RecordBatch, OperatorError> {
        let wm = self.watermark;
        // As the host does for a Wasm operator's batch (`KeyedStateBackend::warm`).
        let keys: Vec<KeyRef<'_>> = batch
            .iter()
            .filter_map(|r| r.key)
            .map(|k| KeyRef::new(k, hash_key(k)))
            .collect();
        self.state.warm(keys.iter().copied());
        for record in batch.iter() {
            let key = record.key.ok_or_else(|| self.fail("no key"))?;
            let ts = record.timestamp.ok_or_else(|| self.fail("no timestamp"))?;
            let start = ts - ts.rem_euclid(self.size_ms);
            let end = start + self.size_ms;
            if wm.is_some_and(|w| end - 1 <= w) {
                continue; // late, lateness 0
            }
            let key = KeyRef::new(key, hash_key(key));
            let entry = match self.get(key, start)? {
                Some((end, count, fired)) => (end, count + 1, fired),
                None => {
                    let timer = Timer {
                        domain: TimeDomain::EventTime,
                        at: end - 1,
                        tag: FIRE_TAG,
                    };
                    self.state
                        .timer_register(key, timer)
                        .map_err(|e| self.fail(e))?;
                    (end, 1, false)
                }
            };
            self.encoded.clear();
            ciborium::into_writer(&entry, &mut self.encoded).map_err(|e| self.fail(e))?;
            self.state
                .map_put(self.windows, key, &self.map_key, &self.encoded)
                .map_err(|e| self.fail(e))?;
        }
        // With no lateness, a window never fires from a record: only its timer fires it.
        Ok(RecordBatch::new())
    }

    fn set_watermark(&mut self, watermark: Option<i64>) {
        self.watermark = watermark;
    }

    fn on_timers(
        &mut self,
        _domain: TimeDomain,
        timers: &[FiredTimer],
    ) -> Result<RecordBatch, OperatorError> {
        let mut out = RecordBatch::new();
        let keys = timers.iter().map(|t| KeyRef::new(&t.key, hash_key(&t.key)));
        self.state.warm(keys);
        for timer in timers {
            let key = KeyRef::new(&timer.key, hash_key(&timer.key));
            let start = timer.at + 1 - self.size_ms;
            if let Some((end, clicks, _)) = self.get(key, start)? {
                emit(&mut out, &timer.key, start, end, clicks);
                self.state
                    .map_remove(self.windows, key, &self.map_key)
                    .map_err(|e| self.fail(e))?;
            }
        }
        Ok(out)
    }

    fn close(&mut self) -> Result<RecordBatch, OperatorError> {
        Ok(RecordBatch::new())
    }

    fn state(&self) -> &KeyedStateBackend {
        &self.state
    }

    fn state_mut(&mut self) -> &mut KeyedStateBackend {
        &mut self.state
    }
}

struct NativeWindowsFactory {
    size_ms: i64,
}

impl OperatorFactory for NativeWindowsFactory {
    fn instantiate(
        &self,
        ctx: &SubtaskContext,
    ) -> Result<Box<dyn OperatorInstance>, OperatorError> {
        let mut state = KeyedStateBackend::new(ctx.key_groups, ctx.range);
        let windows = state
            .declare("window:per-page", StateKind::Map)
            .map_err(|e| ctx.error(FailureKind::Open, e.to_string()))?;
        state.seal_declarations();
        Ok(Box::new(NativeWindows {
            state,
            windows,
            size_ms: self.size_ms,
            ctx: ctx.clone(),
            watermark: None,
            map_key: Vec::new(),
            encoded: Vec::new(),
            scratch: vec![0; 4096],
        }))
    }
}

fn clock() -> GeneratorClock {
    GeneratorClock {
        start_ms: 1_700_000_000_000,
        events_per_second: 100_000,
        disorder: 0.05,
        max_delay_ms: 2_000,
    }
}

fn pipeline(factory: Arc<dyn OperatorFactory>, records: u64, keys: u64, size_ms: i64) -> Pipeline {
    keyed::one_stage(
        "pages",
        GeneratorSource::new(records, keys).with_clock(clock()),
        factory,
        &config(size_ms),
        Some(WatermarkPolicy {
            max_out_of_order: Duration::from_millis(2_000),
            idle: None,
            // The fixed places only: every run of the benchmark does the same work.
            interval: None,
        }),
    )
}

/// Records per second of one run, and the windows it emitted.
fn measure(
    runtime: &tokio::runtime::Runtime,
    factory: Arc<dyn OperatorFactory>,
    records: u64,
    keys: u64,
    size_ms: i64,
) -> (f64, u64) {
    let started = Instant::now();
    let summary = runtime
        .block_on(run(
            pipeline(factory, records, keys, size_ms),
            JobStart::fresh(),
            RunOptions::default(),
        ))
        .unwrap_or_else(|e| panic!("benchmark job failed: {e}"));
    (
        records as f64 / started.elapsed().as_secs_f64(),
        summary.sink_records,
    )
}

/// Batches of one record per key `k0 .. k{keys}`, each at the start of the first window.
fn one_window_per_key(keys: u64) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    let mut batch = RecordBatch::new();
    for k in 0..keys {
        let key = format!("k{k}");
        batch.push(RecordRef {
            timestamp: Some(1_700_000_040_000),
            ..RecordRef::keyed(key.as_bytes(), b"")
        });
        if batch.len() == 1024 {
            batches.push(std::mem::take(&mut batch));
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

/// Registers a window (and its timer) per key through `factory`'s operator, encodes the
/// increment that holds them, then fires them all: returns (timers fired per second,
/// increment bytes per key).
fn fire_all(factory: &dyn OperatorFactory, keys: u64) -> (f64, f64) {
    let ctx = SubtaskContext {
        config_json: config(60_000),
        limits: GuestLimits {
            memory_bytes: 2 << 30,
            ..GuestLimits::default()
        },
        ..SubtaskContext::new("windows", "pages", 0, 1, KeyGroups::default())
    };
    let mut op = factory.instantiate(&ctx).expect("instantiate");
    for mut batch in one_window_per_key(keys) {
        op.process(&mut batch).expect("process");
    }
    let increment = op.state_mut().snapshot();
    let bytes = format::encode(&increment).expect("encode").len();
    let pending = op.state_mut().timers_pending().expect("pending").0;
    assert_eq!(pending as u64, keys, "a timer per key");
    op.set_watermark(Some(i64::MAX));
    let started = Instant::now();
    let mut fired = 0;
    let mut emitted = 0;
    loop {
        let due = op
            .state_mut()
            .take_due_timers(TimeDomain::EventTime, i64::MAX, 1024)
            .expect("due");
        if due.is_empty() {
            break;
        }
        fired += due.len();
        emitted += op
            .on_timers(TimeDomain::EventTime, &due)
            .expect("fire")
            .len();
    }
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(
        (fired as u64, emitted as u64),
        (keys, keys),
        "each window fired once"
    );
    (fired as f64 / secs, bytes as f64 / keys as f64)
}

/// Bytes held per item after `add` put `n` of them into a fresh backend (`per_key` to a key)
/// and a snapshot took the dirty lists.
fn weigh(
    n: u64,
    per_key: u64,
    add: impl Fn(&mut KeyedStateBackend, StateId, KeyRef<'_>, u64),
) -> f64 {
    let groups = KeyGroups::default();
    let keys: Vec<String> = (0..n).map(|k| format!("k{}", k / per_key)).collect();
    let before = counting::live();
    let mut backend =
        KeyedStateBackend::new(groups, groups.range_of(weir_host::ids::SubtaskIndex(0), 1));
    let map = backend.declare("m", StateKind::Map).expect("declare");
    for (i, key) in keys.iter().enumerate() {
        add(
            &mut backend,
            map,
            KeyRef::new(key.as_bytes(), hash_key(key.as_bytes())),
            i as u64,
        );
    }
    drop(backend.snapshot());
    let held = counting::live() - before;
    drop(backend);
    held as f64 / n as f64
}

fn main() {
    weir_host::disable_huge_pages();
    // Cargo passes `--bench`; the rest are ours.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let number = |i: usize, default: u64| {
        args.get(i).map_or(default, |a| {
            a.parse().expect("RECORDS and KEYS are whole numbers")
        })
    };
    let (records, keys) = (number(0, 10_000_000), number(1, 100_000));
    let sizes: Vec<i64> = match args.get(2) {
        Some(sizes) => sizes
            .split(',')
            .map(|s| {
                s.parse()
                    .expect("SIZES: window sizes in ms, comma-separated")
            })
            .collect(),
        None => vec![60_000, 1_000],
    };
    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(support::cache_dir())),
    })
    .expect("engine");
    let component = engine
        .load(&support::component("weir-example-page-counts"))
        .expect("page-counts component");
    let wasm: Arc<dyn OperatorFactory> =
        Arc::new(WasmOperatorFactory::new(engine.clone(), component));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let mut rates = Vec::new();
    for size_ms in sizes {
        let native: Arc<dyn OperatorFactory> = Arc::new(NativeWindowsFactory { size_ms });
        eprintln!(
            "tumbling {size_ms} ms count windows: {records} records over {keys} keys, 100 000 \
             events/s of event time, 5% up to 2 s late, watermarks 2 s behind, batch 1024, \
             parallelism 1"
        );
        measure(&runtime, wasm.clone(), records / 10, keys, size_ms);
        measure(&runtime, native.clone(), records / 10, keys, size_ms);
        let (mut wasm_rates, mut native_rates) = (Vec::new(), Vec::new());
        let rounds = if size_ms >= 60_000 { 5 } else { 3 };
        for round in 1..=rounds {
            let (w, w_windows) = measure(&runtime, wasm.clone(), records, keys, size_ms);
            let (n, n_windows) = measure(&runtime, native.clone(), records, keys, size_ms);
            assert_eq!(w_windows, n_windows, "both emit the same windows");
            eprintln!(
                "round {round}: wasm {w:.0} records/s, native {n:.0} records/s, ratio {:.3}, \
                 {w_windows} windows",
                w / n
            );
            wasm_rates.push(w);
            native_rates.push(n);
        }
        rates.push((size_ms, median(wasm_rates), median(native_rates)));
    }
    let native = NativeWindowsFactory { size_ms: 60_000 };

    let fired_keys = 1_000_000;
    let (fired_rate, bytes_per_key) = fire_all(wasm.as_ref(), fired_keys);
    let (native_fired_rate, _) = fire_all(&native, fired_keys);
    eprintln!(
        "{fired_keys} windows, one per key: fired at {fired_rate:.0}/s in Wasm, {native_fired_rate:.0}/s native"
    );

    let n = 200_000;
    let timer = |b: &mut KeyedStateBackend, _: StateId, key: KeyRef<'_>, i: u64| {
        let timer = Timer {
            domain: TimeDomain::EventTime,
            at: i as i64,
            tag: 0,
        };
        b.timer_register(key, timer).expect("register");
    };
    let entry = |b: &mut KeyedStateBackend, map: StateId, key: KeyRef<'_>, i: u64| {
        b.map_put(map, key, &i.to_be_bytes(), &i.to_le_bytes())
            .expect("put");
    };
    let (per_timer, per_entry) = (weigh(n, 1, timer), weigh(n, 1, entry));
    let (per_timer_10, per_entry_10) = (weigh(n, 10, timer), weigh(n, 10, entry));
    eprintln!(
        "{n} pending timers or map entries (8-byte map key and value), one per key or ten per key"
    );

    for (size_ms, wasm_rate, native_rate) in rates {
        let name = match size_ms {
            60_000 => "windows".to_owned(),
            ms if ms % 1000 == 0 => format!("windows_{}s", ms / 1000),
            ms => format!("windows_{ms}ms"),
        };
        // The one-minute case keeps the names it always had.
        let wasm_name = match size_ms {
            60_000 => "windows_wasm".to_owned(),
            _ => name.clone(),
        };
        println!("bench: {wasm_name}_records_per_sec = {wasm_rate:.0} records/s");
        println!("bench: {name}_native_records_per_sec = {native_rate:.0} records/s");
        println!(
            "bench: {name}_wasm_native_ratio = {:.3} ratio",
            wasm_rate / native_rate
        );
    }
    println!("bench: timers_fired_per_sec = {fired_rate:.0} timers/s");
    println!("bench: timers_fired_per_sec_native = {native_fired_rate:.0} timers/s");
    println!("bench: checkpoint_bytes_per_dirty_key = {bytes_per_key:.1} bytes");
    println!("bench: bytes_per_pending_timer = {per_timer:.1} bytes");
    println!("bench: bytes_per_map_entry = {per_entry:.1} bytes");
    println!(
        "bench: pending_timer_map_entry_ratio = {:.3} ratio",
        per_timer / per_entry
    );
    println!("bench: bytes_per_pending_timer_10_per_key = {per_timer_10:.1} bytes");
    println!("bench: bytes_per_map_entry_10_per_key = {per_entry_10:.1} bytes");
}
