//! [`JobStart`]: where a run of a job begins, planned from the checkpoints in its store.
//!
//! Every run that checkpoints knows the completed checkpoints already in the store, restored
//! or not: their artifacts stay until newer checkpoints push them out of retention, orphans
//! beside them are swept, and new checkpoint ids continue after the newest, so a run never
//! overwrites another run's metadata.

use std::path::PathBuf;
use std::sync::Arc;

use super::checkpoint_store::{CheckpointStore, parse_metadata};
use super::metadata::CheckpointMetadata;
use super::storage::StorageError;
use super::subtask_checkpoints::RestoreAssignment;
use crate::ids::CheckpointId;

/// Which checkpoint `--restore` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The newest completed checkpoint; a job with none starts from the beginning.
    Latest,
    Id(CheckpointId),
    /// A metadata file on local disk (its artifacts are read from the job's store).
    Metadata(PathBuf),
}

impl std::str::FromStr for RestoreFrom {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(if s == "latest" {
            Self::Latest
        } else if let Ok(id) = s.parse() {
            Self::Id(CheckpointId(id))
        } else {
            Self::Metadata(PathBuf::from(s))
        })
    }
}

/// Why a run cannot start from the checkpoint asked for.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("checkpoint {0} does not exist (or is no longer retained)")]
    NoSuchCheckpoint(CheckpointId),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("checkpoint {id} belongs to job `{found}`, not `{expected}`")]
    OtherJob {
        id: CheckpointId,
        found: String,
        expected: String,
    },
}

/// Where a run begins.
#[derive(Clone, Debug)]
pub struct JobStart {
    /// The checkpoint to restore, if any.
    pub restored: Option<Arc<CheckpointMetadata>>,
    /// Completed checkpoints in the store, oldest first.
    pub retained: Vec<Arc<CheckpointMetadata>>,
    /// The id of the run's first checkpoint.
    pub next_checkpoint: CheckpointId,
}

impl JobStart {
    /// A run of a job that does not checkpoint.
    pub fn fresh() -> Self {
        Self {
            restored: None,
            retained: Vec::new(),
            next_checkpoint: CheckpointId(1),
        }
    }

    /// Plans a run of `job` from the checkpoints in `store`.
    pub async fn plan(
        store: &CheckpointStore,
        job: &str,
        restore: Option<&RestoreFrom>,
    ) -> Result<Self, StartError> {
        let mut retained = Vec::new();
        for id in store.completed().await? {
            retained.push(Arc::new(store.read_metadata(id).await?));
        }
        let restored = match restore {
            None => None,
            Some(RestoreFrom::Latest) => retained.last().cloned(),
            Some(RestoreFrom::Id(id)) => Some(
                retained
                    .iter()
                    .find(|m| m.id == *id)
                    .cloned()
                    .ok_or(StartError::NoSuchCheckpoint(*id))?,
            ),
            Some(RestoreFrom::Metadata(path)) => {
                let bytes = std::fs::read(path).map_err(|source| StartError::Read {
                    path: path.clone(),
                    source,
                })?;
                Some(Arc::new(parse_metadata(
                    &bytes,
                    &path.display().to_string(),
                )?))
            }
        };
        if let Some(m) = &restored
            && m.job != job
        {
            return Err(StartError::OtherJob {
                id: m.id,
                found: m.job.clone(),
                expected: job.to_owned(),
            });
        }
        let newest = retained
            .iter()
            .map(|m| m.id)
            .chain(restored.as_ref().map(|m| m.id))
            .max()
            .unwrap_or(CheckpointId(0));
        Ok(Self {
            restored,
            retained,
            next_checkpoint: CheckpointId(newest.0 + 1),
        })
    }

    /// What the subtasks are told.
    pub fn assignment(&self) -> RestoreAssignment {
        RestoreAssignment {
            restored: self.restored.clone(),
            retained: self.retained.clone(),
        }
    }
}
