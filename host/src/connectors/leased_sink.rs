//! [`LeasedSink`]: a sink that stages and commits only while its run holds its leases
//! (`crate::checkpoint::lease`), so that a run another one took over stops before it
//! touches the output.

use super::{ConnectorError, Sink, SinkPosition, SinkRestore};
use crate::checkpoint::lease::LeaseCheck;
use crate::ids::CheckpointId;
use crate::record::RecordBatch;

/// Wraps a sink: every stage, commit and recovery first checks the run's leases (no store is
/// read: [`LeaseCheck::check`] is a clock reading), and waits while one has lapsed. Writes go
/// through; they only fill what the next stage makes durable.
pub struct LeasedSink {
    inner: Box<dyn Sink>,
    leases: Vec<LeaseCheck>,
}

impl LeasedSink {
    pub fn new(inner: Box<dyn Sink>, leases: Vec<LeaseCheck>) -> Self {
        Self { inner, leases }
    }

    /// A lapsed lease (the store did not answer its renewal) is waited on, up to its expiry
    /// (`LeaseCheck::wait_while_lapsed`); a lost one fails at once.
    fn check(&self) -> Result<(), ConnectorError> {
        Ok(LeaseCheck::wait_for_all(&self.leases)?)
    }
}

impl Sink for LeasedSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        self.inner.write(batch)
    }

    fn watermark(&mut self, at: i64) {
        self.inner.watermark(at);
    }

    fn idle(&mut self, idle: bool) {
        self.inner.idle(idle);
    }

    fn stage(&mut self, checkpoint: CheckpointId) -> Result<Option<SinkPosition>, ConnectorError> {
        self.check()?;
        self.inner.stage(checkpoint)
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.check()?;
        self.inner.commit(checkpoint)
    }

    fn recover(&mut self, restored: Option<SinkRestore<'_>>) -> Result<(), ConnectorError> {
        self.check()?;
        self.inner.recover(restored)
    }
}
