//! Record counts are part of every checkpoint: a run that restores one (after a stop, a crash,
//! with another parallelism, or of a job that had finished) counts the whole job, exactly as
//! a run that was never interrupted. The served case, a host restarted
//! mid-job, is in `serve.rs`.

use crate::support;

use std::time::Duration;

use support::{cache_dir, stderr, tokenize_then, weir};
use weir_host::checkpoint::{CheckpointStore, RestoreFrom};
use weir_host::engine::{ComponentCache, Engine, EngineOptions};
use weir_host::job::{JobSpec, RunOptions, RunSummary, run_job};

const LINES: usize = 60_000;

/// A word count over `LINES` lines of three words in `dir`, checkpointing every 5 ms.
fn job(dir: &std::path::Path) -> JobSpec {
    let mut input = String::new();
    for i in 0..LINES {
        input.push_str(&format!("w{} w{} w{}\n", i % 500, i % 77, i % 3));
    }
    std::fs::write(dir.join("in.txt"), input).expect("input");
    let path = tokenize_then(
        dir,
        "name = \"counted\"\nbatch_size = 32",
        "count",
        "weir-example-counter",
        "parallelism = 2",
        "[checkpoints]\ninterval_ms = 5\nrestart_attempts = 0",
    );
    // At least 2 s a run: still running when the test stops it after two checkpoints.
    support::pace_source(&path, 30_000);
    JobSpec::load(&path).expect("job file")
}

fn engine() -> Engine {
    Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(cache_dir())),
    })
    .expect("engine")
}

/// What a summary says of the records: source, every operator's in and out, sink.
fn totals(summary: &RunSummary) -> Vec<u64> {
    let mut totals = vec![summary.source_records];
    for o in &summary.operators {
        totals.extend([o.records_in, o.records_out]);
    }
    totals.push(summary.sink_records);
    totals
}

/// Runs `spec` from `from`, and stops it once it completed two checkpoints of its own.
async fn run_then_stop(spec: &JobSpec, engine: &Engine, from: Option<RestoreFrom>) {
    let checkpoints = spec.checkpoints.as_ref().expect("checkpoints");
    let store = CheckpointStore::open(&checkpoints.store, &spec.name).expect("store");
    let before = store.completed().await.expect("list").last().copied();
    let options = RunOptions::default();
    let stop = options.stop.clone();
    let watcher = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let ids = store.completed().await.unwrap_or_default();
            if ids.iter().filter(|&&id| Some(id) > before).count() >= 2 {
                stop.stop();
                return;
            }
        }
    });
    let result = run_job(spec, engine, from, options).await;
    watcher.abort();
    let error = result.expect_err("the job was stopped before its end");
    assert!(error.to_string().contains("stopped"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restored_runs_count_the_whole_job_as_an_uninterrupted_run_does() {
    let engine = engine();
    let whole = tempfile::tempdir().expect("tempdir");
    let uninterrupted = run_job(&job(whole.path()), &engine, None, RunOptions::default())
        .await
        .expect("the uninterrupted run");
    let expected = totals(&uninterrupted);
    assert_eq!(expected[0], LINES as u64, "{uninterrupted}");

    // Stopped twice, restored with another parallelism in between, then run to the end.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut spec = job(dir.path());
    run_then_stop(&spec, &engine, None).await;
    spec.set_parallelism(Some("count"), 3).expect("parallelism");
    run_then_stop(&spec, &engine, Some(RestoreFrom::Latest)).await;
    spec.set_parallelism(Some("count"), 2).expect("parallelism");
    let last = run_job(
        &spec,
        &engine,
        Some(RestoreFrom::Latest),
        RunOptions::default(),
    )
    .await
    .expect("the last run");
    assert_eq!(totals(&last), expected, "{last}");
    assert!(
        last.source_records_restored > 0 && last.source_records_restored < LINES as u64,
        "{last}"
    );
    assert!(
        last.to_string()
            .contains("read before the restored checkpoint"),
        "{last}"
    );

    // `weir run --restore latest` of the finished job only commits, and says what the whole
    // job did.
    let job = dir.path().join("job.toml");
    let out = weir(&["run", job.to_str().expect("utf-8"), "--restore", "latest"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = stderr(&out);
    let row = |name: &str| -> Vec<u64> {
        let line = summary
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no row {name} in\n{summary}"));
        line.split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    assert_eq!(row("(source)"), [expected[0]], "{summary}");
    // operator rows: parallelism, records in, records out.
    assert_eq!(row("count ")[1..], expected[3..5], "{summary}");
    assert_eq!(row("(sink)"), [expected[5]], "{summary}");
}
