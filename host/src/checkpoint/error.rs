//! [`CheckpointError`]: what failed on the checkpoint path, with the checkpoint, the object
//! and why, so that callers decide by kind and not by reading messages.
//!
//! The kind that matters most is [`CheckpointError::Damaged`]: a checkpoint whose metadata,
//! artifacts or chains cannot be read as written. Damage is deterministic (every restore of
//! that checkpoint fails the same way), so a restore falls back past it to an older retained
//! checkpoint and the restart policy never retries it (DESIGN.md §8). A store that fails to
//! answer is [`CheckpointError::Store`]: perhaps transient, retried.

use std::sync::Arc;

use object_store::path::Path;

use super::format::FormatError;
use super::storage::StorageError;
use crate::ids::CheckpointId;

/// A failure on the checkpoint path.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The checkpoint cannot be restored, now or ever: its metadata does not parse, an
    /// artifact it references is missing, a checksum does not match, or a chain does not
    /// decode.
    #[error("checkpoint {checkpoint} is damaged: {object}: {reason}")]
    Damaged {
        checkpoint: CheckpointId,
        /// The damaged object, as the store names it (`/dir/job/...`, `s3://bucket/...`).
        object: String,
        reason: String,
    },
    /// The store did not do what was asked (unreachable, refused, timed out).
    #[error("checkpoint {checkpoint}: {object}: {source}")]
    Store {
        checkpoint: CheckpointId,
        object: String,
        source: Arc<object_store::Error>,
    },
    /// The checkpoint is whole but does not fit the job: another job's, or another number
    /// of key groups.
    #[error("checkpoint {checkpoint} {reason}")]
    Incompatible {
        checkpoint: CheckpointId,
        reason: String,
    },
    /// A task could not take its part of a checkpoint: a subtask its snapshot or upload, the
    /// sink its staging.
    #[error("checkpoint {checkpoint} failed in {task}: {source}")]
    Task {
        checkpoint: CheckpointId,
        /// `operator `count` subtask 1`, `the sink`.
        task: String,
        source: Box<CheckpointError>,
    },
    /// Not every task acknowledged within `[checkpoints] timeout_ms`.
    #[error("checkpoint {checkpoint} timed out after {after_ms} ms waiting for {waiting}")]
    Timeout {
        checkpoint: CheckpointId,
        after_ms: u64,
        waiting: String,
    },
    /// The metadata that completes the checkpoint could not be written, however long it was
    /// tried; an attempt may still land, so the job fails rather than guess.
    #[error(
        "checkpoint {checkpoint}: cannot write its metadata (an attempt may still land): {reason}"
    )]
    Metadata {
        checkpoint: CheckpointId,
        reason: String,
    },
    /// More checkpoints failed in a row than `[checkpoints] tolerable_failures` allows.
    #[error(
        "{failures} checkpoints failed in a row (tolerable_failures = {tolerable}); the last: {last}"
    )]
    TooManyFailures {
        failures: u32,
        tolerable: u32,
        last: Box<CheckpointError>,
    },
    /// The run may not commit: another run took over its lease (it must stop), or the lease
    /// was not renewed lately (this checkpoint fails; the next may pass).
    #[error("checkpoint {checkpoint}: {source}")]
    Lease {
        checkpoint: CheckpointId,
        source: Arc<crate::checkpoint::lease::LeaseError>,
    },
    /// An artifact could not be encoded or uploaded (its encoding failed, or the store did
    /// not take it in time).
    #[error("checkpoint {checkpoint}: cannot upload {object}: {reason}")]
    Upload {
        checkpoint: CheckpointId,
        object: String,
        reason: String,
    },
    /// The sink could not stage its output for the checkpoint.
    #[error("cannot stage its output: {reason}")]
    Staging { reason: String },
    /// A subtask restoring could not delete the artifacts of checkpoints that never
    /// completed.
    #[error("cannot sweep orphans of operator `{operator}` subtask {subtask}: {reason}")]
    OrphanSweep {
        operator: String,
        subtask: u32,
        reason: String,
    },
    /// The store's URL does not name a store.
    #[error("{url}: {message}")]
    Url { url: String, message: String },
    /// The coordinator lost the tasks it coordinates: they all stopped, or the source did.
    #[error("{what} stopped")]
    Stopped { what: &'static str },
}

impl CheckpointError {
    /// Sorts a storage failure on `checkpoint` into damage or a store failure; `locate`
    /// names the object as the user knows it.
    pub fn from_storage(
        checkpoint: CheckpointId,
        error: StorageError,
        locate: impl Fn(&Path) -> String,
    ) -> Self {
        match error {
            StorageError::Store {
                path,
                source: object_store::Error::NotFound { .. },
            } => Self::Damaged {
                checkpoint,
                object: locate(&path),
                reason: "the object is missing".into(),
            },
            StorageError::Store { path, source } => Self::Store {
                checkpoint,
                object: locate(&path),
                source: Arc::new(source),
            },
            StorageError::Format {
                path,
                source: source @ FormatError::Encode(_),
            } => Self::Upload {
                checkpoint,
                object: locate(&path),
                reason: source.to_string(),
            },
            StorageError::Format { path, source } => Self::Damaged {
                checkpoint,
                object: locate(&path),
                reason: source.to_string(),
            },
            StorageError::Metadata { path, message } => Self::Damaged {
                checkpoint,
                object: locate(&path),
                reason: message,
            },
            StorageError::Url { url, message } => Self::Url { url, message },
        }
    }

    /// A chain that read whole but does not apply to the state (a decode error of the
    /// backend): damage of the artifact at `object`.
    pub fn undecodable(checkpoint: CheckpointId, object: String, reason: impl ToString) -> Self {
        Self::Damaged {
            checkpoint,
            object,
            reason: reason.to_string(),
        }
    }

    /// The checkpoint this error is about, if it is about one.
    pub fn checkpoint(&self) -> Option<CheckpointId> {
        match self {
            Self::Damaged { checkpoint, .. }
            | Self::Store { checkpoint, .. }
            | Self::Incompatible { checkpoint, .. }
            | Self::Task { checkpoint, .. }
            | Self::Timeout { checkpoint, .. }
            | Self::Metadata { checkpoint, .. }
            | Self::Lease { checkpoint, .. }
            | Self::Upload { checkpoint, .. } => Some(*checkpoint),
            Self::TooManyFailures { last, .. } => last.checkpoint(),
            Self::Staging { .. }
            | Self::OrphanSweep { .. }
            | Self::Url { .. }
            | Self::Stopped { .. } => None,
        }
    }

    /// The same failure will happen again: retrying cannot help.
    pub fn is_deterministic(&self) -> bool {
        match self {
            Self::Damaged { .. } | Self::Incompatible { .. } => true,
            // Another run holds the job now: a restart would compete with it.
            Self::Lease { source, .. } => source.is_other_run(),
            _ => false,
        }
    }
}
