//! [`Coordinator`]: triggers checkpoints, collects acknowledgements, completes checkpoints by
//! writing their metadata, applies retention and tells the tasks (DESIGN.md §5).
//!
//! One checkpoint is in flight at a time. A checkpoint fails (is aborted) when a task reports
//! a failure, when its acknowledgements do not all arrive within the timeout (a hung upload,
//! a stuck task), or when its metadata cannot be written; the next one is triggered at the
//! next tick, and builds on the artifacts the aborted one left, which is why an abort deletes
//! nothing. Late acknowledgements of an aborted checkpoint are ignored. A metadata write that
//! outlives the timeout fails the job instead: the write may still land, so the checkpoint can
//! be neither completed nor aborted.
//!
//! When the source ends, the coordinator takes a last checkpoint whose barrier also ends the
//! stream. The job is over when that checkpoint completes: sinks commit the final output only
//! then, so a crash at any instant leaves either the last checkpoint, whose restore only
//! commits, or an earlier one, whose restore replays. If the last checkpoint fails, it is
//! taken again without a barrier ([`Notification::Retake`]): every task is idle by then.
//!
//! Every acknowledgement carries the task's [`BarrierReport`]; the metadata records the
//! checkpoint's timing (start delays, alignments, pauses, duration) and the job's record
//! counts as the barrier passed each task, and the counters hold the last completed
//! checkpoint's figures for `/metrics`.
//!
//! The coordinator deletes only its own objects (the metadata of checkpoints that fall out of
//! retention), before it tells the tasks the new earliest retained checkpoint; the tasks
//! delete their artifacts.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::checkpoint_store::CheckpointStore;
use super::metadata::{
    CheckpointMetadata, CheckpointTiming, METADATA_VERSION, OperatorHandles, RecordCounts,
    SubtaskHandle,
};
use super::protocol::{Ack, Barrier, BarrierReport, Notification, StagedOutput};
use crate::connectors::SourcePosition;
use crate::ids::CheckpointId;

/// Why a checkpoint's metadata is not known to be stored.
enum MetadataFailure {
    /// The write failed and the object is not there: the checkpoint can be aborted.
    Absent(String),
    /// The write failed and the store cannot say whether the object is there.
    Unknown(String),
}

/// How often the coordinator asks whether metadata whose write failed exists.
const METADATA_CHECKS: u32 = 3;

/// How often the last checkpoint may fail before the job fails.
const LAST_CHECKPOINT_ATTEMPTS: u32 = 10;

/// Counters of a job's checkpoints.
#[derive(Debug, Default)]
pub struct CheckpointCounters {
    pub completed: AtomicU64,
    pub aborted: AtomicU64,
    /// Duration of the last completed checkpoint, trigger to metadata written.
    pub last_duration_us: AtomicU64,
    /// The id of the last completed checkpoint (0 before the first).
    pub last_completed: AtomicU64,
    /// The last completed checkpoint's longest start delay, alignment and synchronous pause
    /// of any task, in microseconds ([`CheckpointTiming`]).
    pub last_start_delay_us: AtomicU64,
    pub last_alignment_us: AtomicU64,
    pub last_sync_pause_us: AtomicU64,
}

/// What the coordinator knows of the job.
pub struct CoordinatorSetup {
    pub job: String,
    pub key_groups: u32,
    /// Name and parallelism of every operator, in order.
    pub operators: Vec<(String, u32)>,
    /// Where metadata goes; `None` when the job does not checkpoint (its last checkpoint
    /// still ends the stream and commits the sink, but nothing is stored).
    pub store: Option<CheckpointStore>,
    /// Time between checkpoints; `None` for only the last one.
    pub interval: Option<Duration>,
    /// How long a checkpoint may take, trigger to metadata written; `None` for no limit.
    pub timeout: Option<Duration>,
    pub retain: usize,
    /// The first id to use.
    pub next: CheckpointId,
    /// Completed checkpoints found in the store, oldest first.
    pub retained: Vec<CheckpointId>,
}

/// The checkpoint in flight.
struct InFlight {
    id: CheckpointId,
    last: bool,
    started: Instant,
    source: Option<SourcePosition>,
    /// Records the source had read when it sent the barrier.
    source_records: u64,
    /// The latest event time the source had read.
    source_max_timestamp: Option<i64>,
    handles: Vec<Vec<Option<SubtaskHandle>>>,
    /// Per operator, per subtask: what its acknowledgement reported.
    reports: Vec<Vec<BarrierReport>>,
    sink_acknowledged: bool,
    output: StagedOutput,
    sink_report: BarrierReport,
    outstanding: usize,
    failure: Option<String>,
}

impl InFlight {
    /// Where the checkpoint's time went, as of now.
    fn timing(&self) -> CheckpointTiming {
        let operators = self
            .reports
            .iter()
            .map(|subtasks| subtasks.iter().map(|r| r.timing).collect())
            .collect();
        CheckpointTiming::new(
            self.started.elapsed().as_micros() as u64,
            operators,
            self.sink_report.timing,
        )
    }

    /// The job's counts as the barrier passed each task.
    fn counts(&self) -> RecordCounts {
        RecordCounts {
            source_records: self.source_records,
            sink_records: self.sink_report.counts.records_in,
            operators: self
                .reports
                .iter()
                .map(|subtasks| subtasks.iter().map(|r| r.counts).collect())
                .collect(),
        }
    }

    /// Who has not acknowledged yet, for the message of a timed-out checkpoint.
    fn waiting_for(&self, operators: &[(String, u32)]) -> String {
        let mut waiting: Vec<String> = Vec::new();
        if self.source.is_none() {
            waiting.push("the source".into());
        }
        for ((name, _), handles) in operators.iter().zip(&self.handles) {
            for (subtask, handle) in handles.iter().enumerate() {
                if handle.is_none() {
                    waiting.push(format!("operator `{name}` subtask {subtask}"));
                }
            }
        }
        if !self.sink_acknowledged {
            waiting.push("the sink".into());
        }
        const SHOWN: usize = 4;
        if waiting.len() > SHOWN {
            let more = waiting.len() - SHOWN;
            waiting.truncate(SHOWN);
            waiting.push(format!("{more} more"));
        }
        waiting.join(", ")
    }
}

enum Outcome {
    Completed {
        last: bool,
    },
    Aborted,
    /// The last checkpoint failed: wait for this retake instead.
    Retake(Box<InFlight>),
    Failed(String),
}

pub struct Coordinator {
    setup: CoordinatorSetup,
    retained: VecDeque<CheckpointId>,
    triggers: std::sync::mpsc::Sender<Barrier>,
    acks: UnboundedReceiver<Ack>,
    notify: Vec<UnboundedSender<Notification>>,
    counters: Arc<CheckpointCounters>,
    /// The source's latest position and records read, for a retaken last checkpoint.
    position: SourcePosition,
    source_records: u64,
    source_max_timestamp: Option<i64>,
    source_ended: bool,
    last_attempts: u32,
    /// Requests for a checkpoint now, besides the interval's.
    requests: Arc<tokio::sync::Notify>,
}

impl Coordinator {
    pub fn new(
        setup: CoordinatorSetup,
        triggers: std::sync::mpsc::Sender<Barrier>,
        acks: UnboundedReceiver<Ack>,
        notify: Vec<UnboundedSender<Notification>>,
        counters: Arc<CheckpointCounters>,
        requests: Arc<tokio::sync::Notify>,
    ) -> Self {
        Self {
            retained: setup.retained.iter().copied().collect(),
            setup,
            triggers,
            acks,
            notify,
            counters,
            position: SourcePosition::Null,
            source_records: 0,
            source_max_timestamp: None,
            source_ended: false,
            last_attempts: 0,
            requests,
        }
    }

    /// Runs until the last checkpoint completes; an error fails the job.
    pub async fn run(mut self) -> Result<(), String> {
        let mut ticker = self.setup.interval.map(|period| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        let mut in_flight: Option<InFlight> = None;
        loop {
            let deadline = self.deadline(in_flight.as_ref());
            let timed_out = async move {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let tick = async {
                match ticker.as_mut() {
                    Some(t) => {
                        t.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            let idle = in_flight.is_none() && !self.source_ended;
            tokio::select! {
                () = tick, if idle => {
                    in_flight = Some(self.trigger(false)?);
                }
                // A request stays pending while a checkpoint is in flight.
                () = self.requests.notified(), if idle => {
                    in_flight = Some(self.trigger(false)?);
                }
                () = timed_out => {
                    if let Some(pending) = in_flight.as_mut() {
                        let waiting = pending.waiting_for(&self.setup.operators);
                        let after = self.setup.timeout.unwrap_or_default().as_millis();
                        pending.failure.get_or_insert_with(|| {
                            format!("timed out after {after} ms waiting for {waiting}")
                        });
                        pending.outstanding = 0;
                    }
                }
                ack = self.acks.recv() => {
                    let Some(ack) = ack else {
                        return Err("every task of the job stopped".into());
                    };
                    if let Ack::SourceEnded = ack {
                        self.source_ended = true;
                        if in_flight.is_none() {
                            in_flight = Some(self.trigger(true)?);
                        }
                    } else if let Some(pending) = in_flight.as_mut() {
                        self.record(pending, ack);
                    }
                }
            }
            if in_flight.as_ref().is_some_and(|p| p.outstanding == 0) {
                let Some(done) = in_flight.take() else {
                    continue;
                };
                match self.finish(done).await {
                    Outcome::Completed { last: true } => return Ok(()),
                    Outcome::Completed { last: false } | Outcome::Aborted => {}
                    Outcome::Retake(retake) => in_flight = Some(*retake),
                    Outcome::Failed(e) => return Err(e),
                }
                if in_flight.is_none() && self.source_ended {
                    in_flight = Some(self.trigger(true)?);
                }
            }
        }
    }

    /// When `pending` times out, if it can.
    fn deadline(&self, pending: Option<&InFlight>) -> Option<Instant> {
        Some(pending?.started + self.setup.timeout?)
    }

    fn new_checkpoint(&mut self, last: bool, with_source: bool) -> InFlight {
        let id = self.setup.next;
        self.setup.next = CheckpointId(id.0 + 1);
        let handles: Vec<Vec<Option<SubtaskHandle>>> = self
            .setup
            .operators
            .iter()
            .map(|(_, p)| vec![None; *p as usize])
            .collect();
        let subtasks: usize = handles.iter().map(Vec::len).sum();
        let reports = handles
            .iter()
            .map(|h| vec![BarrierReport::default(); h.len()])
            .collect();
        InFlight {
            id,
            last,
            started: Instant::now(),
            source: (!with_source).then(|| self.position.clone()),
            source_records: self.source_records,
            source_max_timestamp: self.source_max_timestamp,
            handles,
            reports,
            sink_acknowledged: false,
            output: StagedOutput::default(),
            sink_report: BarrierReport::default(),
            // Every subtask, the sink, and the source unless retaken.
            outstanding: subtasks + 1 + usize::from(with_source),
            failure: None,
        }
    }

    /// Asks the source for a checkpoint.
    fn trigger(&mut self, last: bool) -> Result<InFlight, String> {
        let pending = self.new_checkpoint(last, true);
        tracing::debug!(checkpoint = pending.id.0, last, "triggering checkpoint");
        self.triggers
            .send(Barrier::new(pending.id, last))
            .map_err(|_| "the source stopped".to_owned())?;
        Ok(pending)
    }

    fn record(&mut self, pending: &mut InFlight, ack: Ack) {
        let checkpoint = match &ack {
            Ack::Source { checkpoint, .. }
            | Ack::Subtask { checkpoint, .. }
            | Ack::Sink { checkpoint, .. } => *checkpoint,
            Ack::SourceEnded => return,
        };
        if checkpoint != pending.id {
            // A late answer to a checkpoint that was aborted already.
            return;
        }
        pending.outstanding -= 1;
        match ack {
            Ack::Source {
                position,
                records,
                max_timestamp,
                ..
            } => {
                self.position = position.clone();
                self.source_records = records;
                self.source_max_timestamp = max_timestamp;
                pending.source = Some(position);
                pending.source_records = records;
                pending.source_max_timestamp = max_timestamp;
            }
            Ack::Subtask {
                operator,
                subtask,
                result,
                report,
                ..
            } => {
                pending.reports[operator][subtask as usize] = report;
                match result {
                    Ok(handle) => pending.handles[operator][subtask as usize] = Some(handle),
                    Err(e) => {
                        let name = &self.setup.operators[operator].0;
                        pending.failure = Some(format!("operator `{name}` subtask {subtask}: {e}"));
                    }
                }
            }
            Ack::Sink { result, report, .. } => {
                pending.sink_acknowledged = true;
                pending.sink_report = report;
                match result {
                    Ok(output) => pending.output = output,
                    Err(e) => pending.failure = Some(format!("sink: {e}")),
                }
            }
            Ack::SourceEnded => {}
        }
    }

    /// Completes or aborts a fully acknowledged checkpoint.
    async fn finish(&mut self, done: InFlight) -> Outcome {
        let id = done.id;
        let failure = match done.failure.clone() {
            Some(f) => Some(f),
            None => match self.store_metadata(&done).await {
                Ok(()) => None,
                Err(MetadataFailure::Absent(f)) => Some(f),
                // Neither completing nor aborting is safe: the job stops and restarts from
                // what the store holds.
                Err(MetadataFailure::Unknown(f)) => return Outcome::Failed(f),
            },
        };
        if let Some(failure) = failure {
            tracing::warn!(checkpoint = id.0, %failure, "checkpoint failed");
            self.counters.aborted.fetch_add(1, Ordering::Relaxed);
            self.broadcast(Notification::Abort(id));
            if !done.last {
                return Outcome::Aborted;
            }
            self.last_attempts += 1;
            if self.last_attempts >= LAST_CHECKPOINT_ATTEMPTS {
                // The job fails; a restart replays from the latest checkpoint.
                return Outcome::Failed(format!(
                    "the last checkpoint failed {LAST_CHECKPOINT_ATTEMPTS} times, last: {failure}"
                ));
            }
            let retake = self.new_checkpoint(true, false);
            self.broadcast(Notification::Retake(retake.id));
            return Outcome::Retake(Box::new(retake));
        }
        self.retained.push_back(id);
        while self.retained.len() > self.setup.retain {
            let oldest = self.retained[0];
            if let Some(store) = &self.setup.store
                && let Err(e) = store.delete_metadata(oldest).await
            {
                // Keep it retained (its artifacts stay) and try again next time.
                tracing::warn!(checkpoint = oldest.0, error = %e, "cannot delete old metadata");
                break;
            }
            self.retained.pop_front();
        }
        let earliest_retained = self.retained.front().copied().unwrap_or(id);
        let timing = done.timing();
        let counters = &self.counters;
        counters.completed.fetch_add(1, Ordering::Relaxed);
        counters.last_completed.store(id.0, Ordering::Relaxed);
        counters
            .last_duration_us
            .store(done.started.elapsed().as_micros() as u64, Ordering::Relaxed);
        counters
            .last_start_delay_us
            .store(timing.start_delay_us, Ordering::Relaxed);
        counters
            .last_alignment_us
            .store(timing.alignment_us, Ordering::Relaxed);
        counters
            .last_sync_pause_us
            .store(timing.sync_pause_us, Ordering::Relaxed);
        tracing::debug!(
            checkpoint = id.0,
            start_delay_us = timing.start_delay_us,
            alignment_us = timing.alignment_us,
            sync_pause_us = timing.sync_pause_us,
            "checkpoint complete"
        );
        self.broadcast(Notification::Complete {
            completed: id,
            earliest_retained,
        });
        Outcome::Completed { last: done.last }
    }

    /// Writes `done`'s metadata, within what is left of its time.
    async fn store_metadata(&self, done: &InFlight) -> Result<(), MetadataFailure> {
        let Some(deadline) = self.deadline(Some(done)) else {
            return self.write_metadata(done).await;
        };
        tokio::time::timeout_at(deadline.into(), self.write_metadata(done))
            .await
            .unwrap_or_else(|_| {
                Err(MetadataFailure::Unknown(format!(
                    "writing the metadata timed out (the checkpoint timeout is {} ms); the write may still land",
                    self.setup.timeout.unwrap_or_default().as_millis()
                )))
            })
    }

    async fn write_metadata(&self, done: &InFlight) -> Result<(), MetadataFailure> {
        let Some(store) = &self.setup.store else {
            return Ok(());
        };
        let operators = self
            .setup
            .operators
            .iter()
            .zip(&done.handles)
            .map(|((name, parallelism), handles)| OperatorHandles {
                name: name.clone(),
                parallelism: *parallelism,
                subtasks: handles.iter().flatten().cloned().collect(),
            })
            .collect();
        let metadata = CheckpointMetadata {
            version: METADATA_VERSION,
            job: self.setup.job.clone(),
            id: done.id,
            completed_at_ms: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            finished: done.last,
            key_groups: self.setup.key_groups,
            source: done.source.clone().unwrap_or(SourcePosition::Null),
            sink: done.output.sink.clone(),
            dead_letters: done.output.dead_letters.clone(),
            operators,
            source_max_timestamp: done.source_max_timestamp,
            timing: Some(done.timing()),
            counts: Some(done.counts()),
        };
        let Err(e) = store.write_metadata(&metadata).await else {
            return Ok(());
        };
        // The write may have succeeded with its reply lost: then the checkpoint is complete,
        // and aborting it would let cleanup free artifacts its metadata references.
        for _ in 0..METADATA_CHECKS {
            match store.metadata_exists(done.id).await {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    return Err(MetadataFailure::Absent(format!(
                        "cannot write the metadata: {e}"
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        Err(MetadataFailure::Unknown(format!(
            "cannot write the metadata, nor tell whether it was written: {e}"
        )))
    }

    fn broadcast(&self, notification: Notification) {
        for task in &self.notify {
            // A task that already finished needs no more news.
            let _ = task.send(notification);
        }
    }
}
