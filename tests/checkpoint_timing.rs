//! Where a checkpoint's time goes, and the checkpoint interval kept with a slow operator.
//!
//! - Every checkpoint records its barrier's start delay and alignment per task, the tasks'
//!   synchronous pauses and its duration; `weir checkpoints show` prints them. The figures
//!   are checked for plausibility, not speed: each within the duration, delays growing along
//!   the barrier's path, and the counts recorded beside them consistent.
//! - In front of a slow operator, the records in flight are bounded by its pace, so the
//!   barrier waits behind a fraction of the interval instead of hundreds of milliseconds of
//!   queued records.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use support::{stderr, tokenize_then, weir};
use weir_host::checkpoint::metadata::{BarrierTiming, CheckpointTiming};
use weir_host::checkpoint::{ChainPolicy, CheckpointMetadata, CheckpointStore, JobStart};
use weir_host::connectors::{DiscardSink, GeneratorSource};
use weir_host::job::spec::RecordPolicy;
use weir_host::job::{Checkpointing, InFlight, KeyBy, Pipeline, RunOptions, Stage, run};
use weir_host::operator::{
    GuestLimits, OperatorError, OperatorFactory, OperatorInstance, SubtaskContext,
};
use weir_host::partition::KeyGroups;
use weir_host::record::RecordBatch;
use weir_host::state::KeyedStateBackend;

/// Every completed checkpoint in `store`, oldest first.
fn checkpoints(store: &CheckpointStore) -> Vec<CheckpointMetadata> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut all = Vec::new();
        for id in store.completed().await.expect("list") {
            all.push(store.read_metadata(id).await.expect("metadata"));
        }
        all
    })
}

#[test]
fn every_checkpoint_records_where_its_time_went_and_show_prints_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut input = String::new();
    for i in 0..20_000 {
        input.push_str(&format!("w{} w{} w{}\n", i % 300, i % 71, i % 13));
    }
    std::fs::write(dir.path().join("in.txt"), &input).expect("input");
    let url = url::Url::from_directory_path(dir.path().join("store")).expect("url");
    let job = tokenize_then(
        dir.path(),
        "name = \"timed\"\nbatch_size = 64",
        "count",
        "weir-example-counter",
        "parallelism = 2",
        &format!("[checkpoints]\nstore = \"{url}\"\ninterval_ms = 10\nretain = 1000"),
    );
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let store = CheckpointStore::open(url.as_str(), "timed").expect("store");
    let all = checkpoints(&store);
    assert!(all.len() >= 3, "only {} checkpoints", all.len());
    for m in &all {
        let t = m
            .timing
            .as_ref()
            .unwrap_or_else(|| panic!("no timing in {m:?}"));
        check_timing(m.id.0, t);
        // The counts beside them: every record before a barrier reached the next task
        // before it, so each task counted in what the one before counted out.
        let c = m.counts.as_ref().expect("counts");
        let tokenize = c.operators[0][0];
        let count: (u64, u64) = c.operators[1]
            .iter()
            .fold((0, 0), |(i, o), s| (i + s.records_in, o + s.records_out));
        assert_eq!(tokenize.records_in, c.source_records, "{c:?}");
        assert_eq!(count.0, tokenize.records_out, "{c:?}");
        assert_eq!(c.sink_records, count.1, "{c:?}");
    }
    let last = all.last().expect("a checkpoint");
    assert!(last.finished);
    let counts = last.counts.as_ref().expect("counts");
    assert_eq!(counts.source_records, 20_000);
    assert_eq!(counts.sink_records, 60_000);

    // `show` prints the timing; `--json` holds it per task.
    let id = last.id.0.to_string();
    let job = job.to_str().expect("utf-8");
    let shown = weir(&["checkpoints", "show", &id, "--store", job]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let text = String::from_utf8_lossy(&shown.stdout);
    for line in ["duration", "start delay", "alignment", "sync pause"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(line) && l.contains(" ms")),
            "no {line} line in\n{text}"
        );
    }
    let json = weir(&["checkpoints", "show", &id, "--store", job, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(
        json["timing"]["operators"][1].as_array().map(Vec::len),
        Some(2),
        "{json}"
    );
    assert!(json["timing"]["sink"]["start_delay_us"].is_u64(), "{json}");
}

/// Each figure lies within the duration, the maxima are the tasks' maxima, and the barrier
/// reaches a task only after the task before it.
fn check_timing(id: u64, t: &CheckpointTiming) {
    assert_eq!(t.operators.len(), 2, "checkpoint {id}: {t:?}");
    assert_eq!(t.operators[1].len(), 2, "checkpoint {id}: {t:?}");
    let tasks: Vec<&BarrierTiming> = t.operators.iter().flatten().chain([&t.sink]).collect();
    for task in &tasks {
        assert!(
            task.start_delay_us + task.alignment_us + task.sync_pause_us <= t.duration_us,
            "checkpoint {id}: a task's share exceeds the duration: {t:?}"
        );
    }
    let most = |f: fn(&BarrierTiming) -> u64| tasks.iter().map(|t| f(t)).max().unwrap_or(0);
    assert_eq!(t.start_delay_us, most(|x| x.start_delay_us), "{t:?}");
    assert_eq!(t.alignment_us, most(|x| x.alignment_us), "{t:?}");
    assert_eq!(t.sync_pause_us, most(|x| x.sync_pause_us), "{t:?}");
    let tokenizer = t.operators[0][0].start_delay_us;
    for counter in &t.operators[1] {
        assert!(
            counter.start_delay_us >= tokenizer,
            "checkpoint {id}: the barrier reached a counter before the tokenizer: {t:?}"
        );
    }
    let first_counter = t.operators[1].iter().map(|x| x.start_delay_us).min();
    assert!(
        Some(t.sink.start_delay_us) >= first_counter,
        "checkpoint {id}: the barrier reached the sink before any counter: {t:?}"
    );
}

/// Forwards each record `copies` times: a tokenizer's fan-out, at no cost.
struct FanOut {
    state: KeyedStateBackend,
    copies: usize,
}

/// Sleeps `per_record` for each record and emits nothing: a slow operator whose pace does not
/// depend on how busy the machine's cores are.
struct Slow {
    state: KeyedStateBackend,
    per_record: Duration,
}

impl OperatorInstance for FanOut {
    fn process(&mut self, batch: &mut RecordBatch) -> Result<RecordBatch, OperatorError> {
        let mut out = RecordBatch::with_capacity(batch.len() * self.copies, 0);
        for record in batch.iter() {
            for _ in 0..self.copies {
                out.push(record);
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

impl OperatorInstance for Slow {
    fn process(&mut self, batch: &mut RecordBatch) -> Result<RecordBatch, OperatorError> {
        std::thread::sleep(self.per_record * batch.len() as u32);
        Ok(RecordBatch::new())
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

/// Makes [`FanOut`] (`per_record` zero) or [`Slow`] operators.
struct Native {
    copies: usize,
    per_record: Duration,
}

impl OperatorFactory for Native {
    fn instantiate(
        &self,
        ctx: &SubtaskContext,
    ) -> Result<Box<dyn OperatorInstance>, OperatorError> {
        let state = KeyedStateBackend::new(ctx.key_groups, ctx.range);
        Ok(if self.per_record.is_zero() {
            Box::new(FanOut {
                state,
                copies: self.copies,
            })
        } else {
            Box::new(Slow {
                state,
                per_record: self.per_record,
            })
        })
    }
}

fn stage(name: &str, factory: Native, key_by: Option<KeyBy>) -> Stage {
    Stage {
        name: name.into(),
        uid: name.into(),
        component: None,
        factory: Arc::new(factory),
        parallelism: 1,
        key_by,
        config_json: "{}".into(),
        limits: GuestLimits::default(),
        on_error: RecordPolicy::Fail,
        on_bad_record: RecordPolicy::Fail,
    }
}

#[test]
fn in_front_of_a_slow_operator_the_barrier_waits_behind_a_fraction_of_the_interval() {
    // A fast fan-out (one record in, five out) in front of an operator at 20 µs per record
    // (50 000 records/s): with queues of eight batches of 1024, the barrier would wait
    // behind 8 × 1024 × 5 records in the fan-out's queue alone, 800 ms of the slow
    // operator's work, and as much again in its own.
    let interval = Duration::from_millis(100);
    let dir = tempfile::tempdir().expect("tempdir");
    let url = url::Url::from_directory_path(dir.path()).expect("url");
    let store = CheckpointStore::open(url.as_str(), "slow").expect("store");
    let pipeline = Pipeline {
        name: "slow".into(),
        key_groups: KeyGroups::default(),
        batch_size: 1024,
        source: Box::new(GeneratorSource::new(24_000, 1_000)),
        source_on_bad_record: RecordPolicy::Fail,
        stages: vec![
            stage(
                "fan-out",
                Native {
                    copies: 5,
                    per_record: Duration::ZERO,
                },
                None,
            ),
            stage(
                "slow",
                Native {
                    copies: 0,
                    per_record: Duration::from_micros(20),
                },
                Some(KeyBy::RecordKey),
            ),
        ],
        sink: Box::new(DiscardSink),
        dead_letters: Vec::new(),
        watermarks: None,
        leases: Vec::new(),
        checkpointing: Some(Checkpointing {
            store: store.clone(),
            interval,
            timeout: Duration::from_secs(60),
            tolerable_failures: 0,
            retain: 1000,
            chains: ChainPolicy::default(),
        }),
    };
    let options = RunOptions {
        in_flight: InFlight::CheckpointInterval,
        ..RunOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let summary = runtime
        .block_on(run(pipeline, JobStart::fresh(), options))
        .expect("the job runs");
    assert_eq!(summary.operators[1].records_in, 120_000);

    // 2.4 s of the slow operator's work: twenty checkpoints or so at the interval. Leave
    // out the last, taken at the end of the input.
    let all = checkpoints(&store);
    let periodic: Vec<&CheckpointMetadata> = all.iter().filter(|m| !m.finished).collect();
    assert!(
        periodic.len() >= 12,
        "only {} checkpoints in 2.4 s: the interval is not kept",
        periodic.len()
    );
    let mut intervals: Vec<u64> = periodic
        .windows(2)
        .map(|w| w[1].completed_at_ms - w[0].completed_at_ms)
        .collect();
    intervals.sort_unstable();
    // The bounds leave room for a loaded machine (the slow operator's sleeps overrun, the
    // threads wait for a core) and still tell a bounded queue from an unbounded one, behind
    // which the barrier waits 800 ms or more.
    let p90 = intervals[intervals.len() * 9 / 10];
    assert!(
        p90 <= 4 * interval.as_millis() as u64,
        "p90 of the time between checkpoints {p90} ms with a {} ms interval; all: {intervals:?}",
        interval.as_millis()
    );
    let mut delays: Vec<u64> = periodic
        .iter()
        .map(|m| m.timing.as_ref().expect("timing").start_delay_us / 1000)
        .collect();
    delays.sort_unstable();
    let median = delays[delays.len() / 2];
    assert!(
        median <= 2 * interval.as_millis() as u64,
        "median start delay {median} ms with a {} ms interval; all: {delays:?}",
        interval.as_millis()
    );
}
