//! `/metrics`: every job's counters in the Prometheus text format (version 0.0.4).
//!
//! Per subtask (labels `job_id`, `job`, `operator`, `subtask`): records and bytes in and out,
//! batch latency, state size, entries per snapshot ("dirty keys"), uploaded and deleted
//! artifacts, and the last barrier's start delay, alignment and synchronous pause. Per job:
//! source and sink records, checkpoints completed and failed, and the last completed
//! checkpoint's duration and longest start delay, alignment and pause of any task. Event
//! time per subtask: its watermark and the watermark's lag behind the wall clock (for
//! subtasks that have one), late records, timers pending and fired; per job, lines the source
//! dropped for want of a timestamp. Per place
//! that can meet bad records (labels `operator`, the source being `(source)`, and `policy`):
//! the records it skipped or dead-lettered.
//!
//! A Kafka job runs a pipeline per partition of its topic that the host owns: each one's
//! series carry a `partition` label besides `job_id` and `job` (sum them by `job_id` for the
//! job), and `weir_kafka_partition_lag` gives each owned partition's messages not yet read.
//!
//! Record counters count the whole job: a run that restores a checkpoint continues from the
//! counts the checkpoint recorded, so when a job restarts within a running host they step
//! back to those counts (Prometheus reads that as a counter reset).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Registry;
use crate::group::StagePlace;
use crate::job::watermarks::END_OF_TIME;
use crate::job::{JobMetrics, SubtaskMetrics};

/// A per-subtask counter or gauge: its name, type, help, and where to read it.
type SubtaskFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&SubtaskMetrics) -> &AtomicU64,
);

const SUBTASK_FAMILIES: [SubtaskFamily; 14] = [
    (
        "weir_records_in_total",
        "counter",
        "Records an operator subtask received.",
        |s| &s.records_in,
    ),
    (
        "weir_records_out_total",
        "counter",
        "Records an operator subtask emitted.",
        |s| &s.records_out,
    ),
    (
        "weir_bytes_in_total",
        "counter",
        "Key and value bytes an operator subtask received.",
        |s| &s.bytes_in,
    ),
    (
        "weir_bytes_out_total",
        "counter",
        "Key and value bytes an operator subtask emitted.",
        |s| &s.bytes_out,
    ),
    (
        "weir_state_bytes",
        "gauge",
        "Bytes of keyed state (keys and values) a subtask held at its last snapshot.",
        |s| &s.snapshots.state_bytes,
    ),
    (
        "weir_checkpoint_dirty_keys",
        "gauge",
        "Entries a subtask's last snapshot wrote: changed keys plus entries re-written to bound the chain.",
        |s| &s.snapshots.last_entries,
    ),
    (
        "weir_checkpoint_dirty_keys_total",
        "counter",
        "Entries a subtask's snapshots wrote.",
        |s| &s.snapshots.entries_total,
    ),
    (
        "weir_checkpoint_uploaded_bytes_total",
        "counter",
        "Bytes of snapshot artifacts a subtask uploaded.",
        |s| &s.snapshots.uploaded_bytes,
    ),
    (
        "weir_checkpoint_cleanup_deletes_total",
        "counter",
        "Snapshot artifacts a subtask deleted (cleanup and orphan sweeps).",
        |s| &s.snapshots.deleted_artifacts,
    ),
    (
        "weir_late_records_total",
        "counter",
        "Records that reached an operator subtask with a timestamp at or before its watermark.",
        |s| &s.late_records,
    ),
    (
        "weir_dropped_late_records_total",
        "counter",
        "Records an operator subtask dropped as too late for event time (its windows count them).",
        |s| &s.dropped_late,
    ),
    (
        "weir_timers_pending",
        "gauge",
        "Timers pending in an operator subtask's state, event and processing time.",
        |s| &s.timers_pending,
    ),
    (
        "weir_timers_fired_total",
        "counter",
        "Timers an operator subtask fired.",
        |s| &s.timers_fired,
    ),
    (
        "weir_backpressured_microseconds_total",
        "counter",
        "Time an operator subtask spent blocked on sending downstream: its backpressure.",
        |s| &s.backpressured_us,
    ),
];

/// A per-job counter or gauge.
type JobFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&JobMetrics) -> f64,
);

const JOB_FAMILIES: [JobFamily; 8] = [
    (
        "weir_source_records_total",
        "counter",
        "Records a job's source read.",
        |m| m.source_records.load(Ordering::Relaxed) as f64,
    ),
    (
        "weir_sink_records_total",
        "counter",
        "Records a job's sink wrote.",
        |m| m.sink_records.load(Ordering::Relaxed) as f64,
    ),
    (
        "weir_checkpoints_completed_total",
        "counter",
        "Checkpoints a job completed.",
        |m| m.checkpoints.completed.load(Ordering::Relaxed) as f64,
    ),
    (
        "weir_checkpoints_failed_total",
        "counter",
        "Checkpoints a job aborted.",
        |m| m.checkpoints.aborted.load(Ordering::Relaxed) as f64,
    ),
    (
        "weir_checkpoint_duration_seconds",
        "gauge",
        "Duration of a job's last completed checkpoint.",
        |m| m.checkpoints.last_duration_us.load(Ordering::Relaxed) as f64 / 1e6,
    ),
    (
        "weir_checkpoint_start_delay_seconds",
        "gauge",
        "Longest start delay of any task in a job's last completed checkpoint: trigger to the barrier's first arrival, the time it waited in queues.",
        |m| m.checkpoints.last_start_delay_us.load(Ordering::Relaxed) as f64 / 1e6,
    ),
    (
        "weir_checkpoint_alignment_seconds",
        "gauge",
        "Longest barrier alignment of any task in a job's last completed checkpoint: first barrier to last at a task with several inputs.",
        |m| m.checkpoints.last_alignment_us.load(Ordering::Relaxed) as f64 / 1e6,
    ),
    (
        "weir_checkpoint_sync_pause_seconds",
        "gauge",
        "Longest synchronous pause of any task in a job's last completed checkpoint.",
        |m| m.checkpoints.last_sync_pause_us.load(Ordering::Relaxed) as f64 / 1e6,
    ),
];

/// A per-subtask duration kept in microseconds, shown in seconds.
type SubtaskTime = (
    &'static str,
    &'static str,
    fn(&SubtaskMetrics) -> &AtomicU64,
);

const SUBTASK_TIMES: [SubtaskTime; 3] = [
    (
        "weir_barrier_start_delay_seconds",
        "Trigger to the last barrier's first arrival at an operator subtask.",
        |s| &s.barrier_start_delay_us,
    ),
    (
        "weir_barrier_alignment_seconds",
        "First to last arrival of the last barrier at an operator subtask with several inputs.",
        |s| &s.barrier_alignment_us,
    ),
    (
        "weir_barrier_sync_pause_seconds",
        "How long an operator subtask's last snapshot paused it.",
        |s| &s.snapshots.last_sync_pause_us,
    ),
];

/// A watermark in seconds, the end of input as `+Inf`.
fn watermark_seconds(w: i64) -> String {
    if w == END_OF_TIME {
        "+Inf".into()
    } else {
        (w as f64 / 1e3).to_string()
    }
}

/// The counters of one pipeline of a job: the job's only one, or one partition's of a Kafka
/// job.
pub struct PipelineCounters {
    pub job_id: String,
    pub job: String,
    /// A Kafka job's partition.
    pub partition: Option<KafkaPipeline>,
    pub metrics: Arc<JobMetrics>,
}

/// Which partition of a Kafka job a pipeline reads.
pub struct KafkaPipeline {
    pub stage: Arc<StagePlace>,
    pub partition: i32,
    /// Its messages not yet read.
    pub lag: i64,
}

impl PipelineCounters {
    /// `job_id="…",job="…"`; `,partition="…"` for a partition's pipeline, and for one of a
    /// later stage of a job that re-keys, `,stage="…",topic="…"` (its repartition topic).
    fn labels(&self) -> String {
        let mut labels = format!(
            "job_id=\"{}\",job=\"{}\"",
            escape(&self.job_id),
            escape(&self.job)
        );
        if let Some(kafka) = &self.partition {
            if kafka.stage.index > 0 {
                let _ = write!(
                    labels,
                    ",stage=\"{}\",topic=\"{}\"",
                    kafka.stage.index,
                    escape(&kafka.stage.topic)
                );
            }
            let _ = write!(labels, ",partition=\"{}\"", kafka.partition);
        }
        labels
    }
}

/// Renders the metrics of every job of `registry`.
pub(crate) fn render(registry: &Registry) -> String {
    render_jobs(&registry.metrics())
}

fn render_jobs(pipelines: &[PipelineCounters]) -> String {
    let mut out = String::new();
    let jobs: Vec<(String, &JobMetrics)> = pipelines
        .iter()
        .map(|p| (p.labels(), &*p.metrics))
        .collect();
    let subtasks = subtask_labels(&jobs);
    job_families(&mut out, &jobs);
    subtask_families(&mut out, &subtasks);
    watermarks(&mut out, &subtasks);
    records_set_aside(&mut out, &jobs);
    batch_latency(&mut out, &subtasks);
    partition_lag(&mut out, pipelines, &jobs);
    out
}

/// The families of [`JOB_FAMILIES`], one sample per job.
fn job_families(out: &mut String, jobs: &[(String, &JobMetrics)]) {
    for (name, kind, help, read) in JOB_FAMILIES {
        header(out, name, kind, help);
        for (labels, m) in jobs {
            let _ = writeln!(out, "{name}{{{labels}}} {}", read(m));
        }
    }
}

/// Each subtask's labels, formatted once for all its families.
fn subtask_labels<'a>(jobs: &[(String, &'a JobMetrics)]) -> Vec<(String, &'a SubtaskMetrics)> {
    jobs.iter()
        .flat_map(|(job_labels, m)| {
            m.operators.iter().flat_map(move |op| {
                op.subtasks.iter().enumerate().map(move |(i, s)| {
                    let labels = format!(
                        "{job_labels},operator=\"{}\",subtask=\"{i}\"",
                        escape(&op.name)
                    );
                    (labels, s.as_ref())
                })
            })
        })
        .collect()
}

/// The families of [`SUBTASK_FAMILIES`] and [`SUBTASK_TIMES`], one sample per subtask.
fn subtask_families(out: &mut String, subtasks: &[(String, &SubtaskMetrics)]) {
    for (name, kind, help, read) in SUBTASK_FAMILIES {
        header(out, name, kind, help);
        for (labels, s) in subtasks {
            let _ = writeln!(
                out,
                "{name}{{{labels}}} {}",
                read(s).load(Ordering::Relaxed)
            );
        }
    }
    for (name, help, read) in SUBTASK_TIMES {
        header(out, name, "gauge", help);
        for (labels, s) in subtasks {
            let seconds = read(s).load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(out, "{name}{{{labels}}} {seconds}");
        }
    }
}

/// Event time: present only for subtasks that have a watermark.
fn watermarks(out: &mut String, subtasks: &[(String, &SubtaskMetrics)]) {
    let now_ms = crate::clock::now_ms();
    let name = "weir_watermark_seconds";
    header(
        out,
        name,
        "gauge",
        "An operator subtask's watermark, in seconds since the Unix epoch (+Inf at the end of input).",
    );
    for (labels, s) in subtasks {
        if let Some(w) = s.watermark() {
            let _ = writeln!(out, "{name}{{{labels}}} {}", watermark_seconds(w));
        }
    }
    let name = "weir_watermark_lag_seconds";
    header(
        out,
        name,
        "gauge",
        "Processing time less an operator subtask's watermark: how far event time trails the wall clock.",
    );
    for (labels, s) in subtasks {
        if let Some(w) = s.watermark().filter(|w| *w != END_OF_TIME) {
            let _ = writeln!(out, "{name}{{{labels}}} {}", (now_ms - w) as f64 / 1e3);
        }
    }
}

/// Lines a source skipped for their timestamps, and bad records set aside by policy.
fn records_set_aside(out: &mut String, jobs: &[(String, &JobMetrics)]) {
    let name = "weir_source_skipped_timestamps_total";
    header(
        out,
        name,
        "counter",
        "Lines a source dropped for want of a usable timestamp (on_bad_timestamp = \"skip\").",
    );
    for (labels, m) in jobs {
        let _ = writeln!(
            out,
            "{name}{{{labels}}} {}",
            m.source_skipped_timestamps.load(Ordering::Relaxed)
        );
    }
    let name = "weir_records_set_aside_total";
    header(
        out,
        name,
        "counter",
        "Bad records set aside by their policy: lines the source could not read, records a \
         key_by could not key or an operator failed on.",
    );
    for (labels, m) in jobs {
        let places = std::iter::once(("(source)", &m.source_bad_records)).chain(
            m.operators
                .iter()
                .map(|o| (o.name.as_str(), &o.bad_records)),
        );
        for (place, counters) in places {
            for (policy, counter) in [
                ("skip", &counters.skipped),
                ("dead_letter", &counters.dead_lettered),
            ] {
                let _ = writeln!(
                    out,
                    "{name}{{{labels},operator=\"{}\",policy=\"{policy}\"}} {}",
                    escape(place),
                    counter.load(Ordering::Relaxed)
                );
            }
        }
    }
}

/// Each subtask's time per batch, as a histogram.
fn batch_latency(out: &mut String, subtasks: &[(String, &SubtaskMetrics)]) {
    let name = "weir_batch_latency_seconds";
    header(
        out,
        name,
        "histogram",
        "Time an operator subtask took per batch, host work around the guest included.",
    );
    for (labels, s) in subtasks {
        let h = s.batch_latency.snapshot();
        for (bound, count) in &h.cumulative {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum_seconds);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
    }
}

/// A Kafka job's input partition lag, per pipeline on this host.
fn partition_lag(out: &mut String, pipelines: &[PipelineCounters], jobs: &[(String, &JobMetrics)]) {
    let name = "weir_kafka_partition_lag";
    header(
        out,
        name,
        "gauge",
        "Messages of a Kafka job's input partition that its pipeline on this host has not read yet.",
    );
    for (pipeline, (labels, _)) in pipelines.iter().zip(jobs) {
        if let Some(kafka) = &pipeline.partition {
            let _ = writeln!(out, "{name}{{{labels}}} {}", kafka.lag);
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn renders_every_family_with_labels_and_a_cumulative_histogram() {
        let m = Arc::new(JobMetrics::new([("count", 2)]));
        let s = &m.operators[0].subtasks[1];
        s.records_in.store(7, Ordering::Relaxed);
        s.snapshots.deleted_artifacts.store(3, Ordering::Relaxed);
        s.batch_latency.observe(Duration::from_micros(80));
        s.batch_latency.observe(Duration::from_millis(20));
        m.checkpoints
            .last_duration_us
            .store(1_500, Ordering::Relaxed);
        m.operators[0]
            .bad_records
            .skipped
            .store(4, Ordering::Relaxed);
        m.source_bad_records
            .dead_lettered
            .store(2, Ordering::Relaxed);
        m.checkpoints
            .last_start_delay_us
            .store(250_000, Ordering::Relaxed);
        s.barrier_alignment_us.store(1_200, Ordering::Relaxed);
        // Event time: subtask 1 has a watermark a minute behind the clock, subtask 0 none.
        let minute_ago = crate::clock::now_ms() - 60_000;
        s.set_watermark(Some(minute_ago));
        s.count_late(5);
        s.count_dropped_late(2);
        s.set_timers_pending(Some((3, 1)));
        s.count_fired(9);
        m.source_skipped_timestamps.store(6, Ordering::Relaxed);
        // A Kafka job's partition 3, 42 messages behind, and the same partition of the
        // repartition topic its second stage reads, 5 behind.
        let partition = Arc::new(JobMetrics::new([("count", 1)]));
        partition.source_records.store(11, Ordering::Relaxed);
        let stage = |index: usize, topic: &str| {
            Arc::new(StagePlace {
                index,
                topic: topic.into(),
                first_operator: index,
                last: index == 1,
            })
        };
        let text = render_jobs(&[
            PipelineCounters {
                job_id: "job-1".into(),
                job: "a \"b\"".into(),
                partition: None,
                metrics: m,
            },
            PipelineCounters {
                job_id: "job-2".into(),
                job: "k".into(),
                partition: Some(KafkaPipeline {
                    stage: stage(0, "in"),
                    partition: 3,
                    lag: 42,
                }),
                metrics: partition,
            },
            PipelineCounters {
                job_id: "job-2".into(),
                job: "k".into(),
                partition: Some(KafkaPipeline {
                    stage: stage(1, "weir.k.sum.repartition"),
                    partition: 3,
                    lag: 5,
                }),
                metrics: Arc::new(JobMetrics::new([("sum", 1)])),
            },
        ]);
        let labels = r#"job_id="job-1",job="a \"b\"",operator="count",subtask="1""#;
        for line in [
            format!("weir_records_in_total{{{labels}}} 7"),
            format!("weir_checkpoint_cleanup_deletes_total{{{labels}}} 3"),
            format!("weir_batch_latency_seconds_bucket{{{labels},le=\"0.0001\"}} 1"),
            format!("weir_batch_latency_seconds_bucket{{{labels},le=\"0.025\"}} 2"),
            format!("weir_batch_latency_seconds_bucket{{{labels},le=\"+Inf\"}} 2"),
            format!("weir_batch_latency_seconds_count{{{labels}}} 2"),
            r#"weir_checkpoint_duration_seconds{job_id="job-1",job="a \"b\""} 0.0015"#.to_owned(),
            r#"weir_checkpoint_start_delay_seconds{job_id="job-1",job="a \"b\""} 0.25"#.to_owned(),
            r#"weir_checkpoint_alignment_seconds{job_id="job-1",job="a \"b\""} 0"#.to_owned(),
            format!("weir_barrier_alignment_seconds{{{labels}}} 0.0012"),
            format!("weir_barrier_start_delay_seconds{{{labels}}} 0"),
            "# TYPE weir_batch_latency_seconds histogram".to_owned(),
            r#"weir_records_set_aside_total{job_id="job-1",job="a \"b\"",operator="count",policy="skip"} 4"#.to_owned(),
            r#"weir_records_set_aside_total{job_id="job-1",job="a \"b\"",operator="(source)",policy="dead_letter"} 2"#.to_owned(),
            format!("weir_late_records_total{{{labels}}} 5"),
            format!("weir_dropped_late_records_total{{{labels}}} 2"),
            format!("weir_timers_pending{{{labels}}} 4"),
            format!("weir_timers_fired_total{{{labels}}} 9"),
            format!("weir_watermark_seconds{{{labels}}} {}", minute_ago as f64 / 1e3),
            r#"weir_source_skipped_timestamps_total{job_id="job-1",job="a \"b\""} 6"#.to_owned(),
            r#"weir_source_records_total{job_id="job-2",job="k",partition="3"} 11"#.to_owned(),
            r#"weir_records_in_total{job_id="job-2",job="k",partition="3",operator="count",subtask="0"} 0"#.to_owned(),
            r#"weir_kafka_partition_lag{job_id="job-2",job="k",partition="3"} 42"#.to_owned(),
            r#"weir_kafka_partition_lag{job_id="job-2",job="k",stage="1",topic="weir.k.sum.repartition",partition="3"} 5"#.to_owned(),
            r#"weir_records_in_total{job_id="job-2",job="k",stage="1",topic="weir.k.sum.repartition",partition="3",operator="sum",subtask="0"} 0"#.to_owned(),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in\n{text}"
            );
        }
        // The lag is the wall clock less the watermark: a minute, give or take the test's time.
        let lag: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("weir_watermark_lag_seconds{{{labels}}} ")))
            .expect("a lag line")
            .parse()
            .expect("a number");
        assert!((60.0..70.0).contains(&lag), "{lag}");
        assert!(
            !text.contains(r#"weir_watermark_seconds{job_id="job-1",job="a \"b\"",operator="count",subtask="0"}"#),
            "a subtask without a watermark has no watermark line"
        );
        assert!(
            !text.contains("weir_kafka_partition_lag{job_id=\"job-1\""),
            "a job that reads no Kafka has no lag line"
        );
        // Every sample line belongs to a family announced before it.
        let mut announced = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                announced.insert(rest.split(' ').next().unwrap_or_default().to_owned());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap_or_default();
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| announced.contains(*f)))
                    .unwrap_or(name);
                assert!(announced.contains(family), "{line}");
            }
        }
    }
}
