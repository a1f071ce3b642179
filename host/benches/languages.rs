//! The same word-counting operator in Rust, Python, JavaScript and C, in one run: keyed-count
//! throughput (the shared pipeline of `keyed/`: generator over 10 000 keys -> counter ->
//! discard) with each one's ratio to the Rust guest, start times, and where a Python or
//! JavaScript operator's time goes per record.
//!
//! - The counters: `examples/wordcount/counter` (Rust, the `guest` profile) and
//!   `examples/languages/{python,js,c}-counter`, built with `weir build` (componentize-py,
//!   jco's QuickJS backend, clang with wasi-libc). Each keeps a per-key count in a value
//!   state and emits `word<TAB>count`.
//! - Start: loading the component (compiling it, or reading the precompiled artifact from the
//!   component cache) plus instantiating it and calling `open`, as a subtask starts. Cold:
//!   an empty cache; cached: the artifact the cold start left.
//! - The breakdown: `benches/languages/{python,js}-modes`, one operator per language whose
//!   config picks a layer: the bare binding returning nothing (`empty`) or the batch it got
//!   (`echo`), the SDK passing records through one at a time (`sdk_record`) or as a batch
//!   (`sdk_batch`), and the per-record word counter (`count_record`); the example counter is
//!   `count`. Each as microseconds per record, the whole pipeline included (the Rust
//!   counter's figure bounds what the pipeline itself costs).
//!
//! Python and JavaScript run fewer records than Rust and C (records/s is what is compared).
//!
//! `cargo bench -p weir-host --bench languages`

mod host_allocator;

mod keyed;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use keyed::{measure, measure_with, median};
use weir_host::engine::{ComponentCache, Engine, EngineOptions};
use weir_host::guest::{WasmOperator, WasmOperatorFactory};
use weir_host::operator::SubtaskContext;
use weir_host::partition::KeyGroups;

const KEYS: u64 = 10_000;
const ROUNDS: usize = 5;
const CACHED_STARTS: usize = 5;
/// The layers of `benches/languages/*-modes`, as their config names them.
const MODES: [&str; 5] = ["empty", "echo", "sdk-record", "sdk-batch", "count-record"];
/// Records per breakdown run.
const MODE_RECORDS: u64 = 300_000;

struct Language {
    name: &'static str,
    component: PathBuf,
    records: u64,
}

/// Milliseconds to load `component` with an engine caching into `cache` and open one
/// subtask of it.
fn start_ms(component: &Path, cache: &Path) -> f64 {
    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(cache)),
    })
    .expect("engine");
    let ctx = SubtaskContext::new("languages", "count", 0, 1, KeyGroups::default());
    let started = Instant::now();
    let loaded = engine.load(component).expect("load");
    let operator = WasmOperator::open(&engine, &loaded, &ctx).expect("open");
    let ms = started.elapsed().as_secs_f64() * 1e3;
    drop(operator);
    ms
}

fn main() {
    weir_host::disable_huge_pages();
    let examples = support::repo().join("examples/languages");
    let languages = [
        Language {
            name: "rust",
            component: support::component("weir-example-counter"),
            records: 2_000_000,
        },
        Language {
            name: "python",
            component: support::built_operator(&examples.join("python-counter")),
            records: 400_000,
        },
        Language {
            name: "js",
            component: support::built_operator(&examples.join("js-counter")),
            records: 400_000,
        },
        Language {
            name: "c",
            component: support::built_operator(&examples.join("c-counter")),
            records: 2_000_000,
        },
    ];
    let benches = support::repo().join("host/benches/languages");
    let modes = [
        (
            "python",
            support::built_operator(&benches.join("python-modes")),
        ),
        ("js", support::built_operator(&benches.join("js-modes"))),
    ];

    let mut cached_max: f64 = 0.0;
    for language in &languages {
        let cache = tempfile::tempdir().expect("tempdir");
        let cold = start_ms(&language.component, cache.path());
        let cached = median(
            (0..CACHED_STARTS)
                .map(|_| start_ms(&language.component, cache.path()))
                .collect(),
        );
        cached_max = cached_max.max(cached);
        let bytes = std::fs::metadata(&language.component).map_or(0, |m| m.len());
        println!("bench: {}_component_bytes = {bytes} bytes", language.name);
        println!("bench: {}_cold_start_ms = {cold:.1} ms", language.name);
        println!("bench: {}_cached_start_ms = {cached:.2} ms", language.name);
    }

    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(support::cache_dir())),
    })
    .expect("engine");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let factory = |component: &Path| {
        let loaded = engine.load(component).expect("load");
        Arc::new(WasmOperatorFactory::new(engine.clone(), loaded))
    };
    let factories: Vec<_> = languages.iter().map(|l| factory(&l.component)).collect();
    // Warm-up, then rounds interleaved so that a slow phase of the machine hits every
    // language; medians.
    let mut rates = vec![Vec::new(); languages.len()];
    for (l, factory) in languages.iter().zip(&factories) {
        measure(&runtime, factory.clone(), l.records / 10, KEYS);
    }
    for round in 1..=ROUNDS {
        for (i, (l, factory)) in languages.iter().zip(&factories).enumerate() {
            let rate = measure(&runtime, factory.clone(), l.records, KEYS);
            eprintln!("round {round}: {} {rate:.0} records/s", l.name);
            rates[i].push(rate);
        }
    }
    let rates: Vec<f64> = rates.into_iter().map(median).collect();
    for (l, rate) in languages.iter().zip(&rates) {
        println!("bench: {}_records_per_sec = {rate:.0} records/s", l.name);
    }
    for (l, rate) in languages.iter().zip(&rates).skip(1) {
        println!(
            "bench: {}_rust_ratio = {:.3} ratio",
            l.name,
            rate / rates[0]
        );
    }
    println!("bench: cached_start_ms_max = {cached_max:.2} ms");

    // The breakdown, per language: each layer's median over the rounds.
    for ((name, component), (language, rate)) in
        modes.iter().zip(languages.iter().zip(&rates).skip(1))
    {
        assert_eq!(*name, language.name);
        let factory = factory(component);
        for mode in MODES {
            let config = format!(r#"{{"mode": "{mode}"}}"#);
            let rate = median(
                (0..ROUNDS)
                    .map(|_| {
                        let emitted = if mode == "empty" { 0 } else { MODE_RECORDS };
                        measure_with(
                            &runtime,
                            factory.clone(),
                            MODE_RECORDS,
                            KEYS,
                            &config,
                            emitted,
                        )
                    })
                    .collect(),
            );
            let mode = mode.replace('-', "_");
            println!("bench: {name}_{mode}_us_per_record = {:.3} us", 1e6 / rate);
        }
        println!("bench: {name}_count_us_per_record = {:.3} us", 1e6 / rate);
    }
    println!("bench: rust_count_us_per_record = {:.3} us", 1e6 / rates[0]);
}
