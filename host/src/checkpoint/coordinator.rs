//! [`Coordinator`]: triggers checkpoints, collects acknowledgements, completes checkpoints by
//! writing their metadata, applies retention and tells the tasks (DESIGN.md §5).
//!
//! One checkpoint is in flight at a time. A checkpoint fails (is aborted) when a task reports
//! a failure, when its acknowledgements do not all arrive within the timeout (a hung upload,
//! a stuck task). The next one builds on the
//! artifacts the aborted one left, which is why an abort deletes nothing. Late
//! acknowledgements of an aborted checkpoint are ignored.
//!
//! A store that is down fails checkpoint after checkpoint while the tasks go on processing:
//! after each failure the next checkpoint waits twice as long ([`Coordinator::backoff`]), and
//! the job fails only when more than `tolerable_failures` fail in a row. A metadata write
//! that failed or timed out may still land, so it is made again until the store takes it:
//! the checkpoint is neither completed nor aborted until then.
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
use std::time::{Duration, SystemTime};

// Tokio's clock, so that tests can pause it.
use tokio::time::Instant;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tracing::Instrument;

use super::SourcePosition;
use super::checkpoint_store::CheckpointStore;
use super::error::CheckpointError;
use super::history::{CheckpointHistory, Completion};
use super::metadata::{
    CheckpointMetadata, CheckpointTiming, METADATA_VERSION, OperatorHandles, RecordCounts,
    SubtaskHandle,
};
use super::protocol::{Ack, Barrier, BarrierReport, Notification, StagedOutput};
use super::subtask_checkpoints::SnapshotCounters;
use crate::checkpoint::lease::LeaseCheck;
use crate::ids::CheckpointId;

/// How long the coordinator keeps writing metadata whose write failed, while the store does
/// not take it; then the job fails. Each attempt after the first may take
/// [`METADATA_ATTEMPT_TIMEOUT`]; the pause between them doubles from [`METADATA_RETRY_PAUSE`]
/// to [`METADATA_RETRY_MAX_PAUSE`].
const METADATA_DOUBT: Duration = Duration::from_secs(600);
const METADATA_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
const METADATA_RETRY_PAUSE: Duration = Duration::from_millis(50);
const METADATA_RETRY_MAX_PAUSE: Duration = Duration::from_secs(5);

/// The longest pause between checkpoints after failures ([`Coordinator::backoff`]).
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How often the last checkpoint may fail before the job fails.
const LAST_CHECKPOINT_ATTEMPTS: u32 = 10;

/// Counters of a job's checkpoints.
#[derive(Debug, Default)]
pub struct CheckpointCounters {
    /// Checkpoints completed since the run started.
    pub completed: AtomicU64,
    /// Checkpoints aborted (failed, timed out) since the run started.
    pub aborted: AtomicU64,
    /// Duration of the last completed checkpoint, trigger to metadata written.
    pub last_duration_us: AtomicU64,
    /// The id of the last completed checkpoint (0 before the first).
    pub last_completed: AtomicU64,
    /// The last completed checkpoint's longest start delay, alignment and synchronous pause
    /// of any task, in microseconds ([`CheckpointTiming`]).
    pub last_start_delay_us: AtomicU64,
    /// See `last_start_delay_us`.
    pub last_alignment_us: AtomicU64,
    /// See `last_start_delay_us`.
    pub last_sync_pause_us: AtomicU64,
    /// When the last checkpoint completed, Unix time in milliseconds (0 before the first).
    pub last_completed_at_ms: AtomicU64,
    /// The last checkpoints tried, with their outcomes and costs.
    pub history: CheckpointHistory,
}

/// What the coordinator knows of the job.
pub(crate) struct CoordinatorSetup {
    pub job: String,
    pub key_groups: u32,
    /// Name and parallelism of every operator, in order.
    pub operators: Vec<(String, u32)>,
    /// The digest of each operator's component, in the same order, where known.
    pub components: Vec<Option<String>>,
    /// Where metadata goes; `None` when the job does not checkpoint (its last checkpoint
    /// still ends the stream and commits the sink, but nothing is stored).
    pub store: Option<CheckpointStore>,
    /// Time between checkpoints; `None` for only the last one.
    pub interval: Option<Duration>,
    /// How long a checkpoint may take, trigger to metadata written; `None` for no limit.
    pub timeout: Option<Duration>,
    pub retain: usize,
    /// How many checkpoints in a row may fail before the job does.
    pub tolerable_failures: u32,
    /// The first id to use.
    pub next: CheckpointId,
    /// Completed checkpoints found in the store, oldest first.
    pub retained: Vec<CheckpointId>,
    /// Every subtask's snapshot counters: the artifacts they deleted, for the log.
    pub subtasks: Vec<Arc<SnapshotCounters>>,
    /// The leases of the run (its checkpoint folder's, its outputs'), checked before each
    /// checkpoint's metadata is written.
    pub leases: Vec<LeaseCheck>,
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
    /// The first failure reported.
    failure: Option<CheckpointError>,
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

    /// The artifacts this checkpoint wrote (not those its chains took over from earlier
    /// ones), and their bytes.
    fn written(&self) -> (usize, u64) {
        self.handles
            .iter()
            .flatten()
            .flatten()
            .flat_map(|h| &h.chain)
            .filter(|a| a.checkpoint == self.id)
            .fold((0, 0), |(n, bytes), a| (n + 1, bytes + a.bytes))
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

/// Retention: of the completed checkpoints `retained` (oldest first, the newest last), the
/// newest `retain` stay; returns them and those that leave, oldest first. The newest always
/// stays, whatever `retain` says.
pub(crate) fn retention(
    retained: &[CheckpointId],
    retain: usize,
) -> (&[CheckpointId], &[CheckpointId]) {
    let keep = retain.max(1).min(retained.len());
    let (leave, stay) = retained.split_at(retained.len() - keep);
    (stay, leave)
}

enum Outcome {
    Completed {
        last: bool,
    },
    Aborted,
    /// The last checkpoint failed: wait for this retake instead.
    Retake(Box<InFlight>),
    Failed(CheckpointError),
}

pub(crate) struct Coordinator {
    setup: CoordinatorSetup,
    retained: VecDeque<CheckpointId>,
    /// Barriers to the source, which puts each in line with its records.
    triggers: std::sync::mpsc::Sender<Barrier>,
    /// Every task's acknowledgements; ends when the last task has stopped.
    acks: UnboundedReceiver<Ack>,
    /// Completions, aborts and retakes, one channel per task (source, subtasks, sink).
    notify: Vec<UnboundedSender<Notification>>,
    counters: Arc<CheckpointCounters>,
    /// The source's latest position and records read, for a retaken last checkpoint.
    position: SourcePosition,
    source_records: u64,
    source_max_timestamp: Option<i64>,
    source_ended: bool,
    last_attempts: u32,
    /// Checkpoints failed since the last one completed.
    failures_in_a_row: u32,
    /// The artifacts the subtasks had deleted when the last checkpoint completed.
    deleted_before: u64,
    /// After a failure, no checkpoint is triggered by the interval before this.
    not_before: Option<Instant>,
    /// Requests for a checkpoint now, besides the interval's.
    requests: Arc<tokio::sync::Notify>,
}

impl Coordinator {
    pub(crate) fn new(
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
            failures_in_a_row: 0,
            deleted_before: 0,
            not_before: None,
            requests,
        }
    }

    /// Runs until the last checkpoint completes; an error fails the job.
    pub(crate) async fn run(mut self) -> Result<(), CheckpointError> {
        let mut ticker = self.setup.interval.map(|period| {
            let mut t = tokio::time::interval_at(Instant::now() + period, period);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        let mut in_flight: Option<InFlight> = None;
        loop {
            let deadline = self.deadline(in_flight.as_ref());
            let timed_out = async move {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
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
                    if self.not_before.is_none_or(|at| Instant::now() >= at) {
                        in_flight = Some(self.trigger(false)?);
                    }
                }
                // A request stays pending while a checkpoint is in flight.
                () = self.requests.notified(), if idle => {
                    in_flight = Some(self.trigger(false)?);
                }
                () = timed_out => {
                    if let Some(pending) = in_flight.as_mut() {
                        let waiting = pending.waiting_for(&self.setup.operators);
                        let after_ms = self.setup.timeout.unwrap_or_default().as_millis() as u64;
                        pending.failure.get_or_insert(CheckpointError::Timeout {
                            checkpoint: pending.id,
                            after_ms,
                            waiting,
                        });
                        pending.outstanding = 0;
                    }
                }
                ack = self.acks.recv() => {
                    let Some(ack) = ack else {
                        return Err(CheckpointError::Stopped {
                            what: "every task of the job",
                        });
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
    fn trigger(&mut self, last: bool) -> Result<InFlight, CheckpointError> {
        let pending = self.new_checkpoint(last, true);
        self.counters.history.triggered(pending.id, unix_ms());
        tracing::debug!(job = %self.setup.job, checkpoint = pending.id.0, last, "checkpoint triggered");
        self.triggers
            .send(Barrier::new(pending.id, last))
            .map_err(|_| CheckpointError::Stopped { what: "the source" })?;
        Ok(pending)
    }

    /// How long to wait after `failures` checkpoints failed in a row before the interval may
    /// trigger another: the interval, doubled for each failure after the first, at most
    /// [`MAX_BACKOFF`]; so a store that is down is not asked again and again.
    pub(crate) fn backoff(interval: Duration, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        interval
            .saturating_mul(1 << doublings)
            .min(MAX_BACKOFF.max(interval))
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
                        pending.failure.get_or_insert(CheckpointError::Task {
                            checkpoint,
                            task: format!("operator `{name}` subtask {subtask}"),
                            source: Box::new(e),
                        });
                    }
                }
            }
            Ack::Sink { result, report, .. } => {
                pending.sink_acknowledged = true;
                pending.sink_report = report;
                match result {
                    Ok(output) => pending.output = output,
                    Err(e) => {
                        pending.failure.get_or_insert(CheckpointError::Task {
                            checkpoint,
                            task: "the sink".into(),
                            source: Box::new(CheckpointError::Staging { reason: e }),
                        });
                    }
                }
            }
            Ack::SourceEnded => {}
        }
    }

    /// Completes or aborts a fully acknowledged checkpoint.
    async fn finish(&mut self, done: InFlight) -> Outcome {
        let span = tracing::info_span!("complete", job = %self.setup.job, checkpoint = done.id.0);
        self.finish_in(done).instrument(span).await
    }

    async fn finish_in(&mut self, done: InFlight) -> Outcome {
        // Made once: the store gets it, and the history reads its chains.
        let metadata = self.metadata(&done);
        let failure = match done.failure.clone() {
            Some(f) => Some(f),
            None => match self.store_while_leased(&metadata, &done).await {
                Ok(failure) => failure,
                Err(f) => {
                    let duration = done.started.elapsed().as_micros() as u64;
                    self.counters
                        .history
                        .failed(done.id, duration, f.to_string());
                    return Outcome::Failed(f);
                }
            },
        };
        match failure {
            Some(failure) => self.abort(&done, failure),
            None => self.complete(&done, &metadata).await,
        }
    }

    /// Writes the metadata of a checkpoint every task acknowledged, if the run's leases
    /// allow it. `Ok(Some)`: this checkpoint fails, the next may pass (a lease not renewed
    /// lately). `Err`: the job stops before it commits anything more (another run took the
    /// job over, or the metadata write is in doubt, so neither completing nor aborting is
    /// safe).
    async fn store_while_leased(
        &mut self,
        metadata: &CheckpointMetadata,
        done: &InFlight,
    ) -> Result<Option<CheckpointError>, CheckpointError> {
        match self.check_leases(done.id) {
            Err(f) if !f.is_deterministic() => Ok(Some(f)),
            Err(f) => Err(f),
            Ok(()) => self.store_metadata(metadata, done).await.map(|()| None),
        }
    }

    /// Aborts a checkpoint that failed: the tasks drop what they staged for it. Past the
    /// tolerable failures in a row the job fails; the last checkpoint is taken again.
    fn abort(&mut self, done: &InFlight, failure: CheckpointError) -> Outcome {
        let id = done.id;
        self.counters.history.failed(
            id,
            done.started.elapsed().as_micros() as u64,
            failure.to_string(),
        );
        self.counters.aborted.fetch_add(1, Ordering::Relaxed);
        self.broadcast(Notification::Abort(id));
        self.failures_in_a_row += 1;
        if !done.last {
            if self.failures_in_a_row > self.setup.tolerable_failures {
                return Outcome::Failed(CheckpointError::TooManyFailures {
                    failures: self.failures_in_a_row,
                    tolerable: self.setup.tolerable_failures,
                    last: Box::new(failure),
                });
            }
            let pause = self
                .setup
                .interval
                .map(|interval| Self::backoff(interval, self.failures_in_a_row));
            self.not_before = pause.map(|p| Instant::now() + p);
            tracing::warn!(
                job = %self.setup.job,
                checkpoint = id.0,
                failures_in_a_row = self.failures_in_a_row,
                tolerable = self.setup.tolerable_failures,
                next_in_ms = pause.map(|p| p.as_millis() as u64),
                "{failure}"
            );
            return Outcome::Aborted;
        }
        tracing::warn!(job = %self.setup.job, checkpoint = id.0, "{failure}");
        self.last_attempts += 1;
        if self.last_attempts >= LAST_CHECKPOINT_ATTEMPTS {
            // The job fails; a restart replays from the latest checkpoint.
            return Outcome::Failed(CheckpointError::TooManyFailures {
                failures: self.last_attempts,
                tolerable: LAST_CHECKPOINT_ATTEMPTS - 1,
                last: Box::new(failure),
            });
        }
        let retake = self.new_checkpoint(true, false);
        self.counters.history.triggered(retake.id, unix_ms());
        self.broadcast(Notification::Retake(retake.id));
        Outcome::Retake(Box::new(retake))
    }

    /// Completes a checkpoint whose metadata is stored: drops the oldest beyond retention,
    /// counts and records it, and tells every task, which then commit and clean up.
    async fn complete(&mut self, done: &InFlight, metadata: &CheckpointMetadata) -> Outcome {
        let id = done.id;
        self.failures_in_a_row = 0;
        self.not_before = None;
        self.retained.push_back(id);
        let dropped = retention(self.retained.make_contiguous(), self.setup.retain)
            .1
            .to_vec();
        for oldest in dropped {
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
        let (artifacts, bytes) = done.written();
        let entries: u64 = done.reports.iter().flatten().map(|r| r.entries).sum();
        // Deletes run after completions: those since the last one, mostly its releases.
        let deleted: u64 = self
            .setup
            .subtasks
            .iter()
            .map(|c| c.deleted_artifacts.load(Ordering::Relaxed))
            .sum();
        let deleted_since =
            deleted.saturating_sub(std::mem::replace(&mut self.deleted_before, deleted));

        counters
            .last_completed_at_ms
            .store(unix_ms(), Ordering::Relaxed);
        counters.history.completed(
            id,
            metadata,
            Completion {
                duration_us: timing.duration_us,
                sync_pause_us: timing.sync_pause_us,
                start_delay_us: timing.start_delay_us,
                alignment_us: timing.alignment_us,
                entries_written: entries,
                artifacts_written: artifacts as u64,
                bytes_written: bytes,
                artifacts_deleted: deleted_since,
            },
        );
        tracing::info!(
            job = %self.setup.job,
            checkpoint = id.0,
            duration_ms = timing.duration_us / 1000,
            sync_pause_us = timing.sync_pause_us,
            start_delay_us = timing.start_delay_us,
            alignment_us = timing.alignment_us,
            entries_written = entries,
            artifacts_written = artifacts,
            bytes_written = bytes,
            earliest_retained = earliest_retained.0,
            artifacts_deleted_since_the_last = deleted_since,
            "checkpoint complete"
        );
        self.broadcast(Notification::Complete {
            completed: id,
            earliest_retained,
        });
        Outcome::Completed { last: done.last }
    }

    /// Whether this run may still commit: every lease it holds (its checkpoint folder's,
    /// its outputs') allows it.
    fn check_leases(&self, checkpoint: CheckpointId) -> Result<(), CheckpointError> {
        LeaseCheck::check_all(&self.setup.leases).map_err(|e| CheckpointError::Lease {
            checkpoint,
            source: Arc::new(e),
        })
    }

    /// Writes `done`'s metadata, within what is left of its time. A write that fails or times
    /// out may still land (a reply lost, a request the store takes up later), so the
    /// checkpoint can be neither aborted (its artifacts would be deleted under metadata that
    /// appears later) nor completed. The write is idempotent: it is made again, with a pause
    /// that doubles, until the store takes it or [`METADATA_DOUBT`] has passed (then the job
    /// fails). Meanwhile the tasks go on processing.
    async fn store_metadata(
        &self,
        metadata: &CheckpointMetadata,
        done: &InFlight,
    ) -> Result<(), CheckpointError> {
        let Some(store) = &self.setup.store else {
            return Ok(());
        };
        let give_up = Instant::now() + METADATA_DOUBT;
        let mut deadline = self.deadline(Some(done));
        let mut pause = METADATA_RETRY_PAUSE;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let write = store.write_metadata(metadata);
            let written = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, write).await,
                None => Ok(write.await),
            };
            let reason = match written {
                Ok(Ok(())) => {
                    if attempts > 1 {
                        tracing::info!(job = %self.setup.job, checkpoint = done.id.0, attempts, "the metadata is written");
                    }
                    return Ok(());
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!(
                    "the write did not finish within {} ms",
                    self.setup
                        .timeout
                        .unwrap_or(METADATA_ATTEMPT_TIMEOUT)
                        .as_millis()
                ),
            };
            if Instant::now() + pause >= give_up {
                return Err(CheckpointError::Metadata {
                    checkpoint: done.id,
                    reason,
                });
            }
            if attempts == 1 {
                tracing::warn!(
                    job = %self.setup.job,
                    checkpoint = done.id.0,
                    %reason,
                    "cannot write the checkpoint's metadata, which may still land: writing it again until the store takes it"
                );
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(METADATA_RETRY_MAX_PAUSE);
            deadline = Some(Instant::now() + METADATA_ATTEMPT_TIMEOUT);
        }
    }

    /// The metadata that completes `done`.
    fn metadata(&self, done: &InFlight) -> CheckpointMetadata {
        let operators = self
            .setup
            .operators
            .iter()
            .zip(&done.handles)
            .enumerate()
            .map(|(i, ((name, parallelism), handles))| OperatorHandles {
                name: name.clone(),
                parallelism: *parallelism,
                component: self.setup.components.get(i).cloned().flatten(),
                // A component links against the host's WIT package; a pipeline built in
                // code has none.
                wit: self
                    .setup
                    .components
                    .get(i)
                    .and_then(|c| c.as_ref())
                    .map(|_| crate::bindings::PACKAGE.to_owned()),
                state_encoding: Some(crate::checkpoint::metadata::STATE_ENCODING_CBOR.to_owned()),
                subtasks: handles.iter().flatten().cloned().collect(),
            })
            .collect();
        CheckpointMetadata {
            version: METADATA_VERSION,
            job: self.setup.job.clone(),
            id: done.id,
            completed_at_ms: unix_ms(),
            finished: done.last,
            key_groups: self.setup.key_groups,
            source: done.source.clone().unwrap_or(SourcePosition::Null),
            sink: done.output.sink.clone(),
            dead_letters: done.output.dead_letters.clone(),
            operators,
            source_max_timestamp: done.source_max_timestamp,
            timing: Some(done.timing()),
            counts: Some(done.counts()),
        }
    }

    fn broadcast(&self, notification: Notification) {
        for task in &self.notify {
            // A task that already finished needs no more news.
            let _ = task.send(notification);
        }
    }
}

/// Now, in milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[u64]) -> Vec<CheckpointId> {
        ids.iter().copied().map(CheckpointId).collect()
    }

    #[test]
    fn retention_keeps_the_newest_and_lets_the_oldest_go() {
        let retained = ids(&[3, 4, 5, 6]);
        assert_eq!(
            retention(&retained, 2),
            (&ids(&[5, 6])[..], &ids(&[3, 4])[..])
        );
        assert_eq!(retention(&retained, 9), (&retained[..], &[][..]));
        // The newest always stays.
        assert_eq!(
            retention(&retained, 0),
            (&ids(&[6])[..], &ids(&[3, 4, 5])[..])
        );
        assert_eq!(retention(&[], 2), (&[][..], &[][..]));
    }

    #[test]
    fn the_pause_after_failures_doubles_up_to_a_minute() {
        let second = Duration::from_secs(1);
        let pauses: Vec<u64> = (1..=9)
            .map(|f| Coordinator::backoff(second, f).as_secs())
            .collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(Coordinator::backoff(second, u32::MAX), MAX_BACKOFF);
        // An interval longer than the cap is never shortened.
        let hour = Duration::from_secs(3600);
        assert_eq!(Coordinator::backoff(hour, 3), hour);
    }

    /// A job of one operator whose subtask never acknowledges: every checkpoint times out.
    /// With paused time, the test runs in no time and sees exactly when each was triggered.
    #[tokio::test(start_paused = true)]
    async fn checkpoints_that_time_out_back_off_and_fail_the_job_past_the_tolerable_count() {
        let (triggers, barriers) = std::sync::mpsc::channel();
        let (ack_tx, acks) = tokio::sync::mpsc::unbounded_channel();
        let (notify_tx, mut notified) = tokio::sync::mpsc::unbounded_channel();
        let setup = CoordinatorSetup {
            job: "job".into(),
            key_groups: 8,
            operators: vec![("count".into(), 1)],
            components: vec![None],
            store: None,
            interval: Some(Duration::from_millis(100)),
            timeout: Some(Duration::from_secs(1)),
            tolerable_failures: 2,
            retain: 1,
            next: CheckpointId(1),
            retained: Vec::new(),
            subtasks: Vec::new(),
            leases: Vec::new(),
        };
        let counters = Arc::new(CheckpointCounters::default());
        let coordinator = Coordinator::new(
            setup,
            triggers,
            acks,
            vec![notify_tx],
            counters.clone(),
            Arc::default(),
        );
        let start = Instant::now();
        let run = tokio::spawn(coordinator.run());
        // The source answers every barrier at once; the subtask and the sink never do.
        let mut triggered = Vec::new();
        while !run.is_finished() {
            while let Ok(barrier) = barriers.try_recv() {
                triggered.push((barrier.checkpoint.0, start.elapsed().as_millis()));
                ack_tx
                    .send(Ack::Source {
                        checkpoint: barrier.checkpoint,
                        position: SourcePosition::Null,
                        records: 0,
                        max_timestamp: None,
                    })
                    .expect("coordinator listens");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let error = run.await.expect("join").expect_err("the job fails");
        let CheckpointError::TooManyFailures {
            failures: 3,
            tolerable: 2,
            last,
        } = &error
        else {
            panic!("{error}");
        };
        assert!(
            matches!(
                **last,
                CheckpointError::Timeout {
                    checkpoint: CheckpointId(3),
                    after_ms: 1000,
                    ..
                }
            ),
            "{last}"
        );
        assert!(
            error
                .to_string()
                .contains("waiting for operator `count` subtask 0, the sink"),
            "{error}"
        );
        // Triggered at the first tick; then, after each failure, once the pause is over: the
        // interval after the first, twice that after the second.
        let times = triggered;
        assert_eq!(times.len(), 3, "{times:?}");
        // (Seen within a millisecond: the loop above polls every millisecond.)
        assert_eq!(times[0].0, 1);
        assert!((100..=101).contains(&times[0].1), "{times:?}");
        let after_first = times[1].1 - (times[0].1 + 1000);
        let after_second = times[2].1 - (times[1].1 + 1000);
        assert!((100..200).contains(&after_first), "{times:?}");
        assert!((200..300).contains(&after_second), "{times:?}");
        assert_eq!(counters.aborted.load(Ordering::Relaxed), 3);
        let mut aborts = Vec::new();
        while let Ok(n) = notified.try_recv() {
            aborts.push(n);
        }
        assert_eq!(
            aborts,
            (1..=3)
                .map(|i| Notification::Abort(CheckpointId(i)))
                .collect::<Vec<_>>()
        );
    }
}
