//! [`SourceTask`]: the task that reads the job's source.
//!
//! It reads batches no larger than the next stage wants, sets aside the lines the source
//! could not read (`[source] on_bad_record`), generates the watermarks (`job::watermarks`),
//! and injects a barrier into its output when the coordinator triggers a checkpoint,
//! acknowledging the source's position at that barrier. When a checkpoint completes it tells
//! the source which position is now safe ([`Source::checkpoint_completed`]). At the end of
//! its input it sends the end of event time, then waits for the last checkpoint's barrier.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::TryRecvError;

use tokio::sync::mpsc::{self, UnboundedSender};

use super::bad_records::{BadRecordPolicy, DeadLetter};
use super::downstream::Downstream;
use super::job_error::JobError;
use super::metrics::JobMetrics;
use super::run_options::StopSignal;
use super::watermarks::{END_OF_TIME, WatermarkGenerator, WatermarkMessage};
use crate::checkpoint::protocol::{Ack, Barrier, Notification};
use crate::connectors::{Rejected, Source, SourceOrigin};
use crate::ids::CheckpointId;

/// The source: reads, routes, sets bad lines aside, and injects barriers when the
/// coordinator asks.
pub(super) struct SourceTask {
    pub(super) source: Box<dyn Source>,
    /// `[source] on_bad_record`.
    pub(super) bad_lines: BadRecordPolicy,
    pub(super) origin: SourceOrigin,
    /// Reused between batches.
    pub(super) rejected: Vec<Rejected>,
    pub(super) downstream: Downstream,
    pub(super) batch_size: usize,
    /// Barriers from the coordinator, injected between batches.
    pub(super) triggers: std::sync::mpsc::Receiver<Barrier>,
    /// The coordinator's news, for [`Source::checkpoint_completed`].
    pub(super) notifications: mpsc::UnboundedReceiver<Notification>,
    /// The positions of checkpoints acknowledged and not yet complete or aborted.
    pub(super) acked: std::collections::VecDeque<(CheckpointId, crate::connectors::SourcePosition)>,
    /// This run's retained checkpoints' positions, for [`Source::input_released`].
    pub(super) retained: super::retained_positions::RetainedPositions,
    /// Acknowledgements to the coordinator: the source's position per barrier.
    pub(super) acks: UnboundedSender<Ack>,
    pub(super) metrics: Arc<JobMetrics>,
    pub(super) stop: StopSignal,
    pub(super) watermarks: WatermarkGenerator,
    /// The last watermark sent that the input carried (`Source::watermark`).
    pub(super) carried: Option<i64>,
}

impl SourceTask {
    pub(super) fn run(mut self) -> Result<(), JobError> {
        loop {
            if self.stop.is_raised() {
                return Err(JobError::Stopped);
            }
            loop {
                match self.triggers.try_recv() {
                    Ok(barrier) => self.barrier(barrier)?,
                    Err(TryRecvError::Empty) => break,
                    // The coordinator lives until the last barrier: gone before it, the run
                    // failed elsewhere (a task, the coordinator itself). Reading on would
                    // never notice where the input is idle (a Kafka partition without new
                    // records sends nothing downstream), and the run would never end.
                    Err(TryRecvError::Disconnected) => return Err(JobError::Aborted),
                }
            }
            self.take_notifications();
            // No more than the next stage wants: a batch read is in flight too. And no further
            // than the next place a watermark goes (`job::watermarks`).
            let read = self.metrics.source_records.load(Ordering::Relaxed);
            let to_mark = self.batch_size - (read % self.batch_size as u64) as usize;
            let wanted = self.downstream.batch_size();
            let size = wanted.clamp(1, to_mark);
            let mut batch = crate::record::RecordBatch::with_capacity(size, size * 32);
            let more = self
                .source
                .read_batch(size, &mut batch)
                .map_err(JobError::Source)?;
            self.metrics
                .source_records
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            self.metrics
                .source_skipped_timestamps
                .store(self.source.skipped_for_timestamp(), Ordering::Relaxed);
            self.set_aside_bad_lines();
            let read = self.metrics.source_records.load(Ordering::Relaxed);
            let at_mark = read.is_multiple_of(self.batch_size as u64);
            let generated = self.watermarks.observe(&batch, at_mark);
            let watermark = match self.source.watermark() {
                Some(carried) => self.carried_watermark(carried),
                None => generated,
            };
            if !batch.is_empty() {
                self.downstream.send(batch)?;
            }
            if let Some(watermark) = watermark {
                self.send_watermark(watermark)?;
            }
            if !more {
                break;
            }
        }
        // The end of the input: every pending event-time timer fires before the last barrier.
        self.send_watermark(WatermarkMessage::At(END_OF_TIME))?;
        self.acks
            .send(Ack::SourceEnded)
            .map_err(|_| JobError::Aborted)?;
        loop {
            let barrier = self.triggers.recv().map_err(|_| JobError::Aborted)?;
            self.barrier(barrier)?;
            if barrier.last {
                return Ok(());
            }
        }
    }

    /// The watermark the input carries, if it moved since the last one sent.
    fn carried_watermark(&mut self, carried: i64) -> Option<WatermarkMessage> {
        if self.carried.is_some_and(|sent| sent >= carried) {
            return None;
        }
        self.carried = Some(carried);
        Some(WatermarkMessage::At(carried))
    }

    /// Sends `watermark` down every edge, and shows it in the job's metrics.
    fn send_watermark(&mut self, watermark: WatermarkMessage) -> Result<(), JobError> {
        if let WatermarkMessage::At(at) = watermark {
            self.metrics.set_source_watermark(at);
        }
        self.downstream.watermark(watermark)
    }

    /// The lines the source set aside (it does only when `on_bad_record` lets it).
    fn set_aside_bad_lines(&mut self) {
        self.source.drain_rejected(&mut self.rejected);
        for line in self.rejected.drain(..) {
            let origin = self.origin.describe(line.origin);
            let letter = DeadLetter {
                operator: None,
                subtask: None,
                error: &line.reason,
                origin: Some(&origin),
                key: None,
                value: &line.raw,
                timestamp: None,
            };
            self.bad_lines
                .set_aside(&letter, &mut self.downstream.letters);
        }
    }

    /// Tells the source which of its positions are now in completed checkpoints.
    fn take_notifications(&mut self) {
        while let Ok(notification) = self.notifications.try_recv() {
            match notification {
                Notification::Complete {
                    completed,
                    earliest_retained,
                } => {
                    let mut newest = None;
                    while self.acked.front().is_some_and(|(id, _)| *id <= completed) {
                        newest = self.acked.pop_front();
                    }
                    if let Some((_, position)) = &newest {
                        self.source.checkpoint_completed(position);
                    }
                    if let Some(released) = self.retained.completed(newest, earliest_retained) {
                        self.source.input_released(released);
                    }
                }
                Notification::Abort(id) => self.acked.retain(|(acked, _)| *acked != id),
                Notification::Retake(_) => {}
            }
        }
    }

    fn barrier(&mut self, barrier: Barrier) -> Result<(), JobError> {
        let position = self.source.position();
        self.acked.push_back((barrier.checkpoint, position.clone()));
        self.acks
            .send(Ack::Source {
                checkpoint: barrier.checkpoint,
                position,
                records: self.metrics.source_records.load(Ordering::Relaxed),
                max_timestamp: self.watermarks.max_timestamp(),
            })
            .map_err(|_| JobError::Aborted)?;
        self.downstream.barrier(barrier)
    }
}
