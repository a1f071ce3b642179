//! [`SubtaskTask`]: the task that runs one operator subtask.
//!
//! It instantiates the operator, restores its state (then lets the sink roll back, through
//! the restore latch), and processes what its input gate gives it: batches, watermarks (which
//! fire event-time timers), barriers (which snapshot its state) and the coordinator's
//! notifications. Processing-time timers fire when due. A record the operator fails on fails
//! the job or is set aside, as `on_error` says (DESIGN.md §10). The last checkpoint's barrier
//! closes the operator; the task ends when that checkpoint completes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::bad_records::{BadRecordPolicy, DeadLetter, describe_record};
use super::downstream::Downstream;
use super::input_gate::{Event, InputGate};
use super::job_error::JobError;
use super::metrics::{JobMetrics, SubtaskMetrics};
use super::pipeline::Stage;
use super::restore_latch::Restoring;
use super::watermarks::{WatermarkChange, WatermarkMessage};
use crate::checkpoint::protocol::{Ack, Barrier, BarrierReport, Notification};
use crate::checkpoint::subtask_checkpoints::{RestoreAssignment, SubtaskCheckpoints};
use crate::clock;
use crate::connectors::SourceOrigin;
use crate::ids::CheckpointId;
use crate::operator::{FailureKind, OperatorInstance, SubtaskContext};
use crate::record::RecordBatch;
use crate::state::{PIN_STEP, TimeDomain};

/// Most timers handed to an operator in one call.
const TIMERS_PER_CALL: usize = 1024;

/// One operator subtask: its instance, its inputs and its routing to the next stage.
pub(super) struct SubtaskTask {
    pub(super) stage: Stage,
    pub(super) stage_index: usize,
    pub(super) ctx: SubtaskContext,
    pub(super) gate: InputGate,
    pub(super) downstream: Downstream,
    /// What happens to a record the operator fails on.
    pub(super) on_error: BadRecordPolicy,
    /// Names the origin of records that come from the source.
    pub(super) origin: SourceOrigin,
    /// `None` when the job does not checkpoint.
    pub(super) checkpoints: Option<SubtaskCheckpoints>,
    pub(super) assignment: RestoreAssignment,
    /// Given back once the state is restored, which lets the sink roll back its output.
    pub(super) restoring: Restoring,
    /// Acknowledgements to the coordinator (through the checkpoints, or directly without them).
    pub(super) acks: UnboundedSender<Ack>,
    pub(super) metrics: Arc<JobMetrics>,
}

impl SubtaskTask {
    pub(super) fn run(mut self) -> Result<(), JobError> {
        let (mut operator, counters) = self.open()?;
        // The last checkpoint, once its barrier has closed the operator.
        let mut last: Option<CheckpointId> = None;
        loop {
            // Processing-time timers due now fire first (after a restore: those that came
            // due while the job was down); the next one bounds the wait for input.
            let deadline = if last.is_none() {
                self.fire_processing_timers(operator.as_mut(), &counters)?
            } else {
                None
            };
            counters.set_timers_pending(operator.state_mut().timers_pending().ok());
            // A snapshot being pinned goes on between events, and without waiting for any.
            let pinning = self.checkpoints.as_ref().is_some_and(|c| c.is_pinning());
            let deadline = if pinning {
                Some(Instant::now())
            } else {
                deadline
            };
            match self.gate.recv_until(deadline)? {
                // Only the sink reads dead letters.
                Event::Deadline | Event::DeadLetters { .. } => {}
                Event::Watermark(change) => {
                    self.on_watermark(operator.as_mut(), change, &counters)?;
                }
                Event::Batch(batch) => self.on_batch(operator.as_mut(), batch, &counters)?,
                Event::Barrier(barrier) => {
                    if barrier.last {
                        last = Some(barrier.checkpoint);
                    }
                    self.on_barrier(operator.as_mut(), barrier, &counters)?;
                }
                Event::Notification(notification) => {
                    if self.on_notification(operator.as_mut(), notification, last, &counters)? {
                        break;
                    }
                }
            }
            if let Some(checkpoints) = &mut self.checkpoints {
                checkpoints.pin(operator.state_mut(), PIN_STEP);
            }
        }
        self.finish(operator.as_ref());
        Ok(())
    }

    /// Instantiates the operator and restores its state, then lets the sink roll back;
    /// returns the operator and the subtask's counters.
    fn open(&mut self) -> Result<(Box<dyn OperatorInstance>, Arc<SubtaskMetrics>), JobError> {
        let mut operator = self.stage.factory.instantiate(&self.ctx)?;
        if !self.on_error.fails() {
            operator.keep_undo_log();
        }
        if let Some(checkpoints) = &mut self.checkpoints {
            checkpoints
                .start(operator.state_mut(), &self.assignment)
                .map_err(JobError::Checkpoint)?;
        }
        self.restoring.restored();
        let counters =
            self.metrics.operators[self.stage_index].subtasks[self.ctx.subtask.0 as usize].clone();
        operator.set_watermark(self.gate.watermark());
        counters.set_watermark(self.gate.watermark());
        Ok((operator, counters))
    }

    /// A watermark that advanced fires event-time timers and goes on; idleness goes on.
    fn on_watermark(
        &mut self,
        operator: &mut dyn OperatorInstance,
        change: WatermarkChange,
        counters: &SubtaskMetrics,
    ) -> Result<(), JobError> {
        match change {
            WatermarkChange::Advanced(watermark) => {
                operator.set_watermark(Some(watermark));
                counters.set_watermark(Some(watermark));
                self.fire_timers(operator, TimeDomain::EventTime, watermark, counters)?;
                self.downstream.watermark(WatermarkMessage::At(watermark))?;
            }
            WatermarkChange::Idle => self.downstream.watermark(WatermarkMessage::Idle)?,
            WatermarkChange::Active => {
                if let Some(watermark) = self.gate.watermark() {
                    self.downstream.watermark(WatermarkMessage::At(watermark))?;
                }
            }
        }
        Ok(())
    }

    /// A batch through the operator, its output downstream, counted.
    fn on_batch(
        &mut self,
        operator: &mut dyn OperatorInstance,
        batch: RecordBatch,
        counters: &SubtaskMetrics,
    ) -> Result<(), JobError> {
        if let Some(watermark) = self.gate.watermark() {
            counters.count_late(batch.count_at_or_before(watermark));
        }
        counters.count_in(&batch);
        let started = Instant::now();
        let out = self.process(operator, batch)?;
        counters.batch_latency.observe(started.elapsed());
        counters.count_dropped_late(operator.take_dropped_late());
        counters.count_out(&out);
        self.downstream.send(out)
    }

    /// A barrier: the last one closes the operator first; then the state is snapshotted and
    /// the barrier goes on.
    fn on_barrier(
        &mut self,
        operator: &mut dyn OperatorInstance,
        barrier: Barrier,
        counters: &SubtaskMetrics,
    ) -> Result<(), JobError> {
        if barrier.last {
            let out = operator.close()?;
            counters.count_out(&out);
            self.downstream.send(out)?;
        }
        let timing = self.gate.barrier_timing();
        counters.barrier_passed(timing);
        let report = BarrierReport {
            timing,
            counts: counters.counts(),
            watermark: self.gate.watermark(),
            ..BarrierReport::default()
        };
        self.snapshot(operator, barrier.checkpoint, report)?;
        self.downstream.barrier(barrier)
    }

    /// The coordinator's word on a checkpoint; returns whether the task is done (the
    /// `last` checkpoint completed).
    fn on_notification(
        &mut self,
        operator: &mut dyn OperatorInstance,
        notification: Notification,
        last: Option<CheckpointId>,
        counters: &SubtaskMetrics,
    ) -> Result<bool, JobError> {
        match notification {
            Notification::Complete {
                completed,
                earliest_retained,
            } => {
                if let Some(checkpoints) = &mut self.checkpoints {
                    checkpoints.complete(completed, earliest_retained);
                }
                return Ok(last.is_some_and(|l| completed >= l));
            }
            Notification::Retake(checkpoint) => {
                let report = BarrierReport {
                    counts: counters.counts(),
                    watermark: self.gate.watermark(),
                    ..BarrierReport::default()
                };
                self.snapshot(operator, checkpoint, report)?;
            }
            Notification::Abort(checkpoint) => {
                if let Some(checkpoints) = &mut self.checkpoints {
                    checkpoints.abort(checkpoint);
                }
            }
        }
        Ok(false)
    }

    /// The checkpoints' last cleanup, once the task is done.
    fn finish(&mut self, operator: &dyn OperatorInstance) {
        if let Some(checkpoints) = &mut self.checkpoints {
            checkpoints.finish();
        }
        let stats = operator.state().stats();
        tracing::debug!(
            operator = %self.ctx.operator,
            subtask = self.ctx.subtask.0,
            state_entries = stats.entries,
            "subtask finished"
        );
    }

    /// Fires the timers of `domain` due at `upto`, batch after batch, until none is due: a
    /// timer the operator registers while handling one and that is due already fires in
    /// the same call.
    fn fire_timers(
        &mut self,
        operator: &mut dyn OperatorInstance,
        domain: TimeDomain,
        upto: i64,
        counters: &SubtaskMetrics,
    ) -> Result<(), JobError> {
        loop {
            let due = operator
                .state_mut()
                .take_due_timers(domain, upto, TIMERS_PER_CALL)
                .map_err(|e| self.ctx.error(FailureKind::Timers, e.to_string()))?;
            if due.is_empty() {
                return Ok(());
            }
            counters.count_fired(due.len());
            let started = Instant::now();
            let out = operator.on_timers(domain, &due)?;
            counters.batch_latency.observe(started.elapsed());
            counters.count_dropped_late(operator.take_dropped_late());
            counters.count_out(&out);
            self.downstream.send(out)?;
        }
    }

    /// Fires the processing-time timers due now; returns when the next one is due.
    fn fire_processing_timers(
        &mut self,
        operator: &mut dyn OperatorInstance,
        counters: &SubtaskMetrics,
    ) -> Result<Option<Instant>, JobError> {
        let ctx = self.ctx.clone();
        let next = |operator: &mut dyn OperatorInstance| {
            operator
                .state_mut()
                .next_timer(TimeDomain::ProcessingTime)
                .map_err(|e| ctx.error(FailureKind::Timers, e.to_string()))
        };
        let Some(at) = next(operator)? else {
            return Ok(None);
        };
        let now = clock::now_ms();
        if at <= now {
            self.fire_timers(operator, TimeDomain::ProcessingTime, now, counters)?;
        }
        Ok(next(operator)?.map(|at| {
            let wait = at.saturating_sub(clock::now_ms()).max(0) as u64;
            Instant::now() + Duration::from_millis(wait)
        }))
    }

    /// Processes `batch`. A record the operator fails on fails the job, named, unless
    /// `on_error` sets it aside: then the failed call's state writes are taken back and the
    /// batch is processed again without it (DESIGN.md §10).
    fn process(
        &mut self,
        operator: &mut dyn OperatorInstance,
        mut batch: RecordBatch,
    ) -> Result<RecordBatch, JobError> {
        loop {
            let mut error = match operator.process(&mut batch) {
                Ok(out) => return Ok(out),
                Err(error) => error,
            };
            let index = error
                .record
                .map(|i| i as usize)
                .filter(|&i| i < batch.len() && error.kind == FailureKind::Returned);
            let Some(index) = index else {
                return Err(error.into());
            };
            let record = batch.get(index);
            let origin = batch.origin(index).map(|o| self.origin.describe(o));
            if self.on_error.fails() {
                error.on = Some(describe_record(record, origin.as_deref()));
                return Err(error.into());
            }
            operator
                .roll_back()
                .map_err(|e| self.ctx.error(FailureKind::Returned, e))?;
            let letter = DeadLetter {
                operator: Some(&self.ctx.operator.0),
                subtask: Some(self.ctx.subtask.0),
                error: &error.message,
                origin: origin.as_deref(),
                key: record.key,
                value: record.value,
                timestamp: record.timestamp,
            };
            self.on_error
                .set_aside(&letter, &mut self.downstream.letters);
            tracing::debug!(
                operator = %self.ctx.operator,
                subtask = self.ctx.subtask.0,
                record = %describe_record(record, origin.as_deref()),
                error = %error.message,
                "the operator failed on a record; set aside (on_error)"
            );
            batch = batch.without(index);
        }
    }

    fn snapshot(
        &mut self,
        operator: &mut dyn OperatorInstance,
        checkpoint: CheckpointId,
        report: BarrierReport,
    ) -> Result<(), JobError> {
        match &mut self.checkpoints {
            Some(checkpoints) => checkpoints.snapshot(operator.state_mut(), checkpoint, report),
            None => {
                let range = self.ctx.range;
                self.acks
                    .send(Ack::Subtask {
                        checkpoint,
                        operator: self.stage_index,
                        subtask: self.ctx.subtask.0,
                        result: Ok(crate::checkpoint::metadata::SubtaskHandle {
                            subtask: self.ctx.subtask.0,
                            key_groups: (range.start, range.end),
                            chain: Vec::new(),
                            live_bytes: 0,
                            watermark: report.watermark,
                            timers: 0,
                            states: Vec::new(),
                        }),
                        report,
                    })
                    .map_err(|_| JobError::Aborted)?;
            }
        }
        Ok(())
    }
}
