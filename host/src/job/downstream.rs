//! [`Downstream`]: where one task (the source, or an operator subtask) sends what it produces:
//! its records, routed to the next stage's subtasks; the records the routing cannot key, by
//! the next stage's `on_bad_record`; its dead letters; and the barriers, after all of them.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::bad_records::{BadRecordPolicy, DeadLetter, DeadLetters};
use super::in_flight::Output;
use super::router::{Router, Unroutable};
use super::runtime::JobError;
use super::watermarks::WatermarkMessage;
use crate::checkpoint::protocol::Barrier;
use crate::connectors::SourceOrigin;
use crate::record::RecordBatch;

/// One task's way on.
pub(super) struct Downstream {
    router: Router,
    /// One channel per subtask of the next stage (or the sink).
    targets: Vec<Output>,
    /// The next stage's `on_bad_record`, for records its `key_by` cannot key.
    unroutable: BadRecordPolicy,
    /// The next stage's name, for its dead letters.
    next: String,
    /// Names the origin of records that come from the source.
    origin: SourceOrigin,
    pub(super) letters: DeadLetters,
    /// Reused between batches.
    rejected: Vec<Unroutable>,
}

impl Downstream {
    /// `router` is made to set records aside when `unroutable` does not fail the job.
    pub(super) fn new(
        router: Router,
        targets: Vec<Output>,
        unroutable: BadRecordPolicy,
        next: String,
        origin: SourceOrigin,
        letters: DeadLetters,
    ) -> Self {
        let router = router.naming_origins(origin.clone());
        let router = if unroutable.fails() {
            router
        } else {
            router.setting_bad_records_aside()
        };
        Self {
            router,
            targets,
            unroutable,
            next,
            origin,
            letters,
            rejected: Vec::new(),
        }
    }

    /// Adds the time this task spends blocked on sending to `blocked_us`.
    pub(super) fn counting_blocked_time(mut self, blocked_us: &Arc<AtomicU64>) -> Self {
        self.targets = self
            .targets
            .into_iter()
            .map(|t| t.counting_blocked_time(blocked_us.clone()))
            .collect();
        self
    }

    /// The most records the next stage wants in one batch now, over all its subtasks
    /// (`job::in_flight`): a task reads or produces no more at a time.
    pub(super) fn batch_size(&self) -> usize {
        self.targets.iter().map(Output::batch_size).sum()
    }

    /// Routes `batch` and sends what is ready, and the dead letters so far.
    pub(super) fn send(&mut self, batch: RecordBatch) -> Result<(), JobError> {
        self.router.route(batch)?;
        self.router.drain_rejected(&mut self.rejected);
        for record in self.rejected.drain(..) {
            let origin = record.origin.map(|o| self.origin.describe(o));
            let error = record.error.to_string();
            let letter = DeadLetter {
                operator: Some(&self.next),
                subtask: None,
                error: &error,
                origin: origin.as_deref(),
                key: record.key.as_deref(),
                value: &record.value,
                timestamp: record.timestamp,
            };
            self.unroutable.set_aside(&letter, &mut self.letters);
        }
        for (target, batch) in self.router.drain() {
            self.targets[target].send(batch)?;
        }
        self.letters.flush()
    }

    /// Sends `watermark` to every subtask of the next stage, after the records before it.
    pub(super) fn watermark(&mut self, watermark: WatermarkMessage) -> Result<(), JobError> {
        for target in &self.targets {
            target.send_watermark(watermark)?;
        }
        Ok(())
    }

    /// Sends `barrier` after everything before it, downstream and to the dead letters.
    pub(super) fn barrier(&mut self, barrier: Barrier) -> Result<(), JobError> {
        for target in &self.targets {
            target.send_barrier(barrier)?;
        }
        self.letters.barrier(barrier)?;
        if barrier.last {
            // Nothing follows the last barrier.
            self.targets.clear();
        }
        Ok(())
    }
}
