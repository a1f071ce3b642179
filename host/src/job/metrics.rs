//! Counters of a running job, and the summary printed at its end.
//!
//! The record counters count the whole job, not one run of it: every checkpoint records them
//! as its barrier passed each task, and a run that restores the checkpoint starts from those
//! counts ([`JobMetrics::start_from`]), exactly as its state does. Records processed after the
//! checkpoint and processed again after the restore are counted once.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use super::bad_records::BadRecordCounters;
use super::latency_histogram::LatencyHistogram;
use crate::checkpoint::CheckpointMetadata;
use crate::checkpoint::coordinator::CheckpointCounters;
use crate::checkpoint::metadata::{BarrierTiming, TaskCounts};
use crate::checkpoint::subtask_checkpoints::SnapshotCounters;
use crate::record::RecordBatch;

/// The counters of one operator: one [`SubtaskMetrics`] per subtask.
#[derive(Debug)]
pub struct OperatorMetrics {
    pub name: String,
    pub subtasks: Vec<Arc<SubtaskMetrics>>,
    /// Records of this operator set aside: failed on (`on_error`) or not keyable by its
    /// `key_by` (`on_bad_record`).
    pub bad_records: Arc<BadRecordCounters>,
}

/// What one subtask did: updated by its task (records, batches) and by its checkpoints
/// (snapshots, uploads, deletes); read by `/metrics` while it runs.
#[derive(Debug, Default)]
pub struct SubtaskMetrics {
    /// Records the operator received, and sent on.
    pub records_in: AtomicU64,
    /// See `records_in`.
    pub records_out: AtomicU64,
    /// Key and value bytes of the records in and out.
    pub bytes_in: AtomicU64,
    /// See `bytes_in`.
    pub bytes_out: AtomicU64,
    /// How long each `process` call took, host work around the guest included.
    pub batch_latency: LatencyHistogram,
    /// Snapshots, uploads and deletes of the subtask's checkpoints.
    pub snapshots: Arc<SnapshotCounters>,
    /// The last barrier's start delay and alignment at the subtask, in microseconds.
    pub barrier_start_delay_us: AtomicU64,
    /// See `barrier_start_delay_us`.
    pub barrier_alignment_us: AtomicU64,
    /// The subtask's watermark.
    watermark: WatermarkGauge,
    /// Records that came with a timestamp at or before the subtask's watermark: behind it,
    /// though not necessarily dropped (windows keep those within their allowed lateness).
    pub late_records: AtomicU64,
    /// Records the operator dropped as too late (its windows count them through the guest's
    /// `metrics` import).
    pub dropped_late: AtomicU64,
    /// Timers pending in the subtask's state (both clocks), and fired so far.
    pub timers_pending: AtomicU64,
    /// See `timers_pending`.
    pub timers_fired: AtomicU64,
    /// Time the subtask spent blocked on sending downstream, in microseconds: its share of
    /// each second is its backpressure.
    pub backpressured_us: Arc<AtomicU64>,
}

impl SubtaskMetrics {
    pub fn count_in(&self, batch: &RecordBatch) {
        self.records_in
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.bytes_in
            .fetch_add(batch.data_len() as u64, Ordering::Relaxed);
    }

    pub fn count_out(&self, batch: &RecordBatch) {
        self.records_out
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.bytes_out
            .fetch_add(batch.data_len() as u64, Ordering::Relaxed);
    }

    /// The record counters now, for a checkpoint.
    pub fn counts(&self) -> TaskCounts {
        TaskCounts {
            records_in: self.records_in.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
        }
    }

    fn set_counts(&self, counts: TaskCounts) {
        self.records_in.store(counts.records_in, Ordering::Relaxed);
        self.records_out
            .store(counts.records_out, Ordering::Relaxed);
        self.bytes_in.store(counts.bytes_in, Ordering::Relaxed);
        self.bytes_out.store(counts.bytes_out, Ordering::Relaxed);
    }

    pub fn set_watermark(&self, watermark: Option<i64>) {
        self.watermark
            .0
            .store(watermark.unwrap_or(i64::MIN), Ordering::Relaxed);
    }

    /// The subtask's watermark, if it has one.
    pub fn watermark(&self) -> Option<i64> {
        Some(self.watermark.0.load(Ordering::Relaxed)).filter(|w| *w != i64::MIN)
    }

    pub fn count_late(&self, records: usize) {
        if records > 0 {
            self.late_records
                .fetch_add(records as u64, Ordering::Relaxed);
        }
    }

    pub fn count_dropped_late(&self, records: u64) {
        if records > 0 {
            self.dropped_late.fetch_add(records, Ordering::Relaxed);
        }
    }

    pub fn count_fired(&self, timers: usize) {
        self.timers_fired
            .fetch_add(timers as u64, Ordering::Relaxed);
    }

    /// Sets the pending timers: (event time, processing time), if they could be counted.
    pub fn set_timers_pending(&self, pending: Option<(usize, usize)>) {
        if let Some((event, processing)) = pending {
            self.timers_pending
                .store((event + processing) as u64, Ordering::Relaxed);
        }
    }

    /// A barrier passed the subtask at this cost.
    pub fn barrier_passed(&self, timing: BarrierTiming) {
        self.barrier_start_delay_us
            .store(timing.start_delay_us, Ordering::Relaxed);
        self.barrier_alignment_us
            .store(timing.alignment_us, Ordering::Relaxed);
    }
}

/// A watermark in milliseconds since the Unix epoch, `i64::MIN` before the first.
#[derive(Debug)]
struct WatermarkGauge(AtomicI64);

impl Default for WatermarkGauge {
    fn default() -> Self {
        Self(AtomicI64::new(i64::MIN))
    }
}

/// Counters shared by the tasks of one job; read by the progress display and the summary.
#[derive(Debug)]
pub struct JobMetrics {
    pub checkpoints: Arc<CheckpointCounters>,
    /// Records the source read, and the sink wrote.
    pub source_records: AtomicU64,
    /// Lines the source could not read, set aside (`[source] on_bad_record`).
    pub source_bad_records: Arc<BadRecordCounters>,
    /// See `source_records`.
    pub sink_records: AtomicU64,
    /// Lines the source dropped for want of a usable timestamp.
    pub source_skipped_timestamps: AtomicU64,
    /// The records the source had read when the run started (the restored checkpoint's
    /// count): the run's own rate leaves them out.
    pub source_records_restored: AtomicU64,
    /// Time the source spent blocked on sending downstream, in microseconds.
    pub source_backpressured_us: Arc<AtomicU64>,
    /// The last watermark the source sent.
    source_watermark: WatermarkGauge,
    pub operators: Vec<OperatorMetrics>,
}

impl JobMetrics {
    pub fn new<'a>(operators: impl IntoIterator<Item = (&'a str, u32)>) -> Self {
        Self {
            checkpoints: Arc::default(),
            source_records: AtomicU64::new(0),
            source_bad_records: Arc::default(),
            sink_records: AtomicU64::new(0),
            source_skipped_timestamps: AtomicU64::new(0),
            source_records_restored: AtomicU64::new(0),
            source_backpressured_us: Arc::default(),
            source_watermark: WatermarkGauge::default(),
            operators: operators
                .into_iter()
                .map(|(name, parallelism)| OperatorMetrics {
                    name: name.to_owned(),
                    subtasks: (0..parallelism).map(|_| Arc::default()).collect(),
                    bad_records: Arc::default(),
                })
                .collect(),
        }
    }

    pub fn set_source_watermark(&self, watermark: i64) {
        self.source_watermark.0.store(watermark, Ordering::Relaxed);
    }

    /// The last watermark the source sent, if it sent one.
    pub fn source_watermark(&self) -> Option<i64> {
        Some(self.source_watermark.0.load(Ordering::Relaxed)).filter(|w| *w != i64::MIN)
    }

    /// Sets the record counters to where `restored` left them, or to zero for a run from the
    /// beginning. An operator restored with another parallelism cannot tell which subtask
    /// counted what: its first subtask starts from the operator's totals. `uids` are the
    /// operators' (in order), by which the checkpoint knows them; a new one counts from zero.
    pub fn start_from(&self, restored: Option<&CheckpointMetadata>, uids: &[&str]) {
        let counts = restored.and_then(|m| m.counts.as_ref().map(|c| (m, c)));
        if let Some(m) = restored
            && counts.is_none()
        {
            tracing::info!(
                checkpoint = m.id.0,
                "the checkpoint predates record counts: counting from zero"
            );
        }
        let source = counts.map_or(0, |(_, c)| c.source_records);
        self.source_records.store(source, Ordering::Relaxed);
        self.source_records_restored
            .store(source, Ordering::Relaxed);
        self.sink_records
            .store(counts.map_or(0, |(_, c)| c.sink_records), Ordering::Relaxed);
        for (operator, uid) in self.operators.iter().zip(uids) {
            let saved: &[TaskCounts] = counts
                .and_then(|(m, c)| {
                    let index = m.operators.iter().position(|o| o.name == *uid)?;
                    c.operators.get(index).map(Vec::as_slice)
                })
                .unwrap_or_default();
            let restored: Vec<TaskCounts> = if saved.len() == operator.subtasks.len() {
                saved.to_vec()
            } else {
                let mut total = TaskCounts::default();
                for c in saved {
                    total.records_in += c.records_in;
                    total.records_out += c.records_out;
                    total.bytes_in += c.bytes_in;
                    total.bytes_out += c.bytes_out;
                }
                let mut spread = vec![TaskCounts::default(); operator.subtasks.len()];
                if let Some(first) = spread.first_mut() {
                    *first = total;
                }
                spread
            };
            for (subtask, counts) in operator.subtasks.iter().zip(restored) {
                subtask.set_counts(counts);
            }
        }
    }

    pub fn summary(&self, job: &str, elapsed: Duration) -> RunSummary {
        let sum = |subtasks: &[Arc<SubtaskMetrics>], counter: fn(&SubtaskMetrics) -> &AtomicU64| {
            subtasks
                .iter()
                .map(|s| counter(s).load(Ordering::Relaxed))
                .sum()
        };
        let set_aside = |counters: &BadRecordCounters| SetAside {
            skipped: counters.skipped.load(Ordering::Relaxed),
            dead_lettered: counters.dead_lettered.load(Ordering::Relaxed),
        };
        RunSummary {
            job: job.to_owned(),
            elapsed,
            source_records: self.source_records.load(Ordering::Relaxed),
            source_set_aside: set_aside(&self.source_bad_records),
            source_skipped_timestamps: self.source_skipped_timestamps.load(Ordering::Relaxed),
            source_records_restored: self.source_records_restored.load(Ordering::Relaxed),
            sink_records: self.sink_records.load(Ordering::Relaxed),
            checkpoints_completed: self.checkpoints.completed.load(Ordering::Relaxed),
            checkpoints_aborted: self.checkpoints.aborted.load(Ordering::Relaxed),
            restarts: 0,
            operators: self
                .operators
                .iter()
                .map(|o| OperatorSummary {
                    name: o.name.clone(),
                    parallelism: o.subtasks.len() as u32,
                    records_in: sum(&o.subtasks, |s| &s.records_in),
                    records_out: sum(&o.subtasks, |s| &s.records_out),
                    set_aside: set_aside(&o.bad_records),
                    late_records: sum(&o.subtasks, |s| &s.late_records),
                    dropped_late: sum(&o.subtasks, |s| &s.dropped_late),
                    timers_fired: sum(&o.subtasks, |s| &s.timers_fired),
                })
                .collect(),
        }
    }
}

/// What one operator did in a run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OperatorSummary {
    pub name: String,
    pub parallelism: u32,
    pub records_in: u64,
    pub records_out: u64,
    pub set_aside: SetAside,
    /// Records that came at or before the operator's watermark, in this run.
    pub late_records: u64,
    /// Of those, the records the operator dropped as too late, in this run.
    pub dropped_late: u64,
    /// Timers the operator fired, in this run.
    pub timers_fired: u64,
}

/// Bad records a place set aside in a run, by policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SetAside {
    pub skipped: u64,
    pub dead_lettered: u64,
}

impl SetAside {
    fn is_empty(self) -> bool {
        self.skipped == 0 && self.dead_lettered == 0
    }
}

/// What a run did, printed at its end.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunSummary {
    pub job: String,
    pub elapsed: Duration,
    /// Records the source read in the whole job, runs before a restore included.
    pub source_records: u64,
    /// Lines the source could not read, set aside.
    pub source_set_aside: SetAside,
    /// Lines the source dropped for want of a usable timestamp, in this run.
    pub source_skipped_timestamps: u64,
    /// Of those, the records read before the checkpoint this run restored.
    pub source_records_restored: u64,
    pub sink_records: u64,
    /// Checkpoints completed in this run, the last one included.
    pub checkpoints_completed: u64,
    pub checkpoints_aborted: u64,
    /// Times the job was restarted from a checkpoint after a failure.
    pub restarts: u32,
    pub operators: Vec<OperatorSummary>,
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        writeln!(f, "job `{}` finished in {secs:.2} s", self.job)?;
        let width = self
            .operators
            .iter()
            .map(|o| o.name.len())
            .max()
            .unwrap_or(0)
            .max(8);
        writeln!(
            f,
            "  {:<width$}  {:>11}  {:>12}  {:>12}",
            "operator", "parallelism", "records in", "records out"
        )?;
        writeln!(
            f,
            "  {:<width$}  {:>11}  {:>12}  {:>12}",
            "(source)", "", "", self.source_records
        )?;
        for o in &self.operators {
            writeln!(
                f,
                "  {:<width$}  {:>11}  {:>12}  {:>12}",
                o.name, o.parallelism, o.records_in, o.records_out
            )?;
        }
        writeln!(
            f,
            "  {:<width$}  {:>11}  {:>12}  {:>12}",
            "(sink)", "", self.sink_records, ""
        )?;
        if self.checkpoints_aborted > 0 || self.checkpoints_completed > 1 {
            writeln!(
                f,
                "  checkpoints: {} completed, {} failed",
                self.checkpoints_completed, self.checkpoints_aborted
            )?;
        }
        let places = std::iter::once(("the source", self.source_set_aside)).chain(
            self.operators
                .iter()
                .map(|o| (o.name.as_str(), o.set_aside)),
        );
        for (place, set_aside) in places.filter(|(_, s)| !s.is_empty()) {
            writeln!(
                f,
                "  bad records at {place}: {} skipped, {} dead-lettered",
                set_aside.skipped, set_aside.dead_lettered
            )?;
        }
        if self.source_skipped_timestamps > 0 {
            writeln!(
                f,
                "  the source skipped {} lines without a usable timestamp",
                self.source_skipped_timestamps
            )?;
        }
        for o in &self.operators {
            if o.late_records > 0 || o.timers_fired > 0 || o.dropped_late > 0 {
                writeln!(
                    f,
                    "  event time at {} (this run): {} records behind the watermark, {} of them \
                     dropped as too late; {} timers fired",
                    o.name, o.late_records, o.dropped_late, o.timers_fired
                )?;
            }
        }
        if self.restarts > 0 {
            writeln!(f, "  restarted {} times from a checkpoint", self.restarts)?;
        }
        if self.source_records_restored > 0 {
            writeln!(
                f,
                "  counts include the {} source records read before the restored checkpoint",
                self.source_records_restored
            )?;
        }
        if secs > 0.0 {
            let read = self.source_records - self.source_records_restored.min(self.source_records);
            write!(f, "  {:.0} source records/s", read as f64 / secs)?;
        }
        Ok(())
    }
}
