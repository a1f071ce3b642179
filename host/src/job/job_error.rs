//! [`JobError`]: why a job failed.
//!
//! Every task of a run that fails ends with one, and so do the tasks that stop because of
//! it; the run reports the first real cause, since [`JobError::Aborted`] only echoes
//! another task's failure.

use super::input_gate::Closed;
use super::router::RouteError;
use crate::checkpoint::CheckpointError;
use crate::connectors::ConnectorError;
use crate::operator::OperatorError;

/// Why a job failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    #[error(transparent)]
    Operator(#[from] OperatorError),
    #[error("source: {0}")]
    Source(ConnectorError),
    #[error("sink: {0}")]
    Sink(ConnectorError),
    #[error("dead letters: {0}")]
    DeadLetters(String),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the job was stopped")]
    Stopped,
    #[error("a task of the job panicked: {0}")]
    Panicked(String),
    #[error("invalid pipeline: {0}")]
    Invalid(String),
    /// This task stopped because another one failed; never reported when the cause is known.
    #[error("the job was aborted because one of its tasks stopped")]
    Aborted,
}

impl From<Closed> for JobError {
    fn from(_: Closed) -> Self {
        JobError::Aborted
    }
}
