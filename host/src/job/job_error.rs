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
    /// A dead-letter output (a file or a topic) failed.
    #[error("dead letters to {output}: {source}")]
    DeadLetters {
        /// The output as the job file names it: a path, or `kafka:<topic>`.
        output: String,
        source: Box<ConnectorError>,
    },
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the job was stopped")]
    Stopped,
    /// A task panicked: a bug in the host, not in the job.
    #[error("{task} panicked: {message}")]
    Panicked {
        /// `the source`, `operator `count` subtask 1`, `the sink`, `the coordinator`.
        task: String,
        message: String,
    },
    /// This task stopped because another one failed; never reported when the cause is known.
    #[error("the job was aborted because one of its tasks stopped")]
    Aborted,
}

impl From<Closed> for JobError {
    fn from(_: Closed) -> Self {
        JobError::Aborted
    }
}
