//! The checkpoint interval with a slow operator, and what bounding the data in flight costs.
//!
//! A word count over text (`examples/wordcount` tokenizer in Rust, then the Python word
//! counter of `examples/languages/python-counter` built with `weir build`, parallelism 2,
//! then a file sink) with `interval_ms = 100`, on enough input for dozens of checkpoints; run
//! with the in-flight data bounded by the consumers' pace (the default) and with the old
//! settings (eight full batches per channel, `InFlight::Batches`), in rounds that alternate
//! the two so that a slow phase of a shared machine hits both. Every checkpoint is kept and
//! read back: the median and p90 of the time between consecutive completed checkpoints (over
//! all rounds), and the largest start delay and alignment of any task, come from the
//! metadata; records/s is the counter's input over the run's time (median of the rounds).
//! The same with the Rust counter shows what a fast pipeline pays.
//!
//! `cargo bench -p weir-host --bench checkpoint_interval [-- LINES]`

mod host_allocator;

#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Instant;

use weir_host::checkpoint::metadata::CheckpointTiming;
use weir_host::checkpoint::{CheckpointMetadata, CheckpointStore};
use weir_host::engine::{ComponentCache, Engine, EngineOptions};
use weir_host::job::{InFlight, JobSpec, RunOptions, run_job};

/// Words per line of the input.
const WORDS: usize = 5;
/// Distinct words.
const VOCABULARY: usize = 10_000;

/// Runs of each variant, alternating.
const ROUNDS: usize = 3;

/// What one run measured.
struct Run {
    records_per_sec: f64,
    /// Milliseconds between consecutive completed checkpoints.
    intervals: Vec<f64>,
    start_delay_max_ms: f64,
    alignment_max_ms: f64,
}

fn write_input(path: &Path, lines: usize) {
    let mut text = String::with_capacity(lines * WORDS * 7);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..lines {
        for w in 0..WORDS {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if w > 0 {
                text.push(' ');
            }
            text.push_str(&format!("w{}", x % VOCABULARY as u64));
        }
        text.push('\n');
    }
    std::fs::write(path, text).expect("write the input");
}

fn job_file(dir: &Path, counter: &Path) -> JobSpec {
    let path = support::write_job(
        dir,
        &format!(
            r#"
            [job]
            name = "interval"
            [source]
            kind = "text-lines"
            path = "in.txt"
            [[operators]]
            name = "tokenize"
            component = {tokenizer}
            [[operators]]
            name = "count"
            component = {counter}
            parallelism = 2
            key_by = "key"
            [sink]
            kind = "file"
            path = "out.txt"
            [checkpoints]
            interval_ms = 100
            retain = 100000
            "#,
            tokenizer = support::toml_path(&support::component("weir-example-tokenizer")),
            counter = support::toml_path(counter),
        ),
    );
    JobSpec::load(&path).expect("job file")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank]
}

/// Runs the word count over `input` with `counter` and `in_flight`; reads every checkpoint.
fn measure(
    runtime: &tokio::runtime::Runtime,
    engine: &Engine,
    input: &Path,
    counter: &Path,
    in_flight: InFlight,
) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(input, dir.path().join("in.txt")).expect("copy the input");
    let spec = job_file(dir.path(), counter);
    let options = RunOptions {
        in_flight,
        ..RunOptions::default()
    };
    let started = Instant::now();
    let summary = runtime
        .block_on(run_job(&spec, engine, None, options))
        .unwrap_or_else(|e| panic!("benchmark job failed: {e}"));
    let secs = started.elapsed().as_secs_f64();
    let checkpoints = spec.checkpoints.as_ref().expect("checkpoints");
    let store = CheckpointStore::open(&checkpoints.store, &spec.name).expect("store");
    let all: Vec<CheckpointMetadata> = runtime.block_on(async {
        let mut all = Vec::new();
        for id in store.completed().await.expect("list") {
            all.push(store.read_metadata(id).await.expect("metadata"));
        }
        all
    });
    // The last checkpoint is taken when the input ends, not at the interval.
    let periodic: Vec<&CheckpointMetadata> = all.iter().filter(|m| !m.finished).collect();
    let intervals = periodic
        .windows(2)
        .map(|w| w[1].completed_at_ms.saturating_sub(w[0].completed_at_ms) as f64)
        .collect();
    let most = |f: fn(&CheckpointTiming) -> u64| {
        let us = periodic
            .iter()
            .filter_map(|m| m.timing.as_ref())
            .map(f)
            .max();
        us.unwrap_or(0) as f64 / 1e3
    };
    Run {
        records_per_sec: summary.operators[1].records_in as f64 / secs,
        intervals,
        start_delay_max_ms: most(|t| t.start_delay_us),
        alignment_max_ms: most(|t| t.alignment_us),
    }
}

/// Prints the figures of `runs` (the rounds of one variant); returns the median records/s.
fn report(prefix: &str, runs: &[Run]) -> f64 {
    let mut intervals: Vec<f64> = runs.iter().flat_map(|r| r.intervals.clone()).collect();
    intervals.sort_by(f64::total_cmp);
    let most = |f: fn(&Run) -> f64| runs.iter().map(f).fold(0.0, f64::max);
    let mut rates: Vec<f64> = runs.iter().map(|r| r.records_per_sec).collect();
    rates.sort_by(f64::total_cmp);
    let rate = rates[rates.len() / 2];
    let (median, p90) = (percentile(&intervals, 0.5), percentile(&intervals, 0.9));
    println!("bench: {prefix}_interval_median_ms = {median:.0} ms");
    println!("bench: {prefix}_interval_p90_ms = {p90:.0} ms");
    println!(
        "bench: {prefix}_start_delay_max_ms = {:.0} ms",
        most(|r| r.start_delay_max_ms)
    );
    println!(
        "bench: {prefix}_alignment_max_ms = {:.1} ms",
        most(|r| r.alignment_max_ms)
    );
    println!("bench: {prefix}_records_per_sec = {rate:.0} records/s");
    println!(
        "bench: {prefix}_checkpoints = {} checkpoints",
        intervals.len() + runs.len()
    );
    rate
}

fn main() {
    weir_host::disable_huge_pages();
    let lines: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(150_000);
    let python =
        support::built_operator(&support::repo().join("examples/languages/python-counter"));
    let rust = support::component("weir-example-counter");
    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(support::cache_dir())),
    })
    .expect("engine");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let inputs = tempfile::tempdir().expect("tempdir");
    let slow_input = inputs.path().join("slow.txt");
    let fast_input = inputs.path().join("fast.txt");
    write_input(&slow_input, lines);
    write_input(&fast_input, lines * 8);
    eprintln!(
        "word count, {lines} lines of {WORDS} words over {VOCABULARY} words (x8 for Rust), \
         interval 100 ms, counter parallelism 2"
    );
    // Warm-up: compile or load the components, page the code in.
    measure(&runtime, &engine, &slow_input, &python, InFlight::default());

    for (name, counter, input) in [
        ("python", &python, &slow_input),
        ("rust", &rust, &fast_input),
    ] {
        let (mut bounded, mut batches) = (Vec::new(), Vec::new());
        for round in 1..=ROUNDS {
            let b = measure(&runtime, &engine, input, counter, InFlight::default());
            let u = measure(&runtime, &engine, input, counter, InFlight::Batches);
            eprintln!(
                "round {round}: {name} {:.0} records/s bounded, {:.0} with full batches",
                b.records_per_sec, u.records_per_sec
            );
            bounded.push(b);
            batches.push(u);
        }
        let rate = report(name, &bounded);
        let old = report(&format!("{name}_unbounded"), &batches);
        println!("bench: {name}_throughput_ratio = {:.3} ratio", rate / old);
    }
}
