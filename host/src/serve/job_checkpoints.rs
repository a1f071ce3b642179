//! [`JobCheckpoints`]: one job's completed checkpoints as people and scripts look at them,
//! whichever way they are reached: the host's API (`GET /v1/jobs/{id}/checkpoints`) and
//! `weir checkpoints list|show` over a store both answer with these summaries and details,
//! so the output is the same. Everything here reads; nothing writes or deletes.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::str::FromStr;

use futures::TryStreamExt;

use super::protocol::{CheckpointDetail, CheckpointSummary, SavepointInfo};
use crate::checkpoint::savepoint::{self, SavepointError};
use crate::checkpoint::storage::StorageError;
use crate::checkpoint::{CheckpointMetadata, CheckpointStore};
use crate::ids::CheckpointId;

/// Which checkpoint to show: `latest` or an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Latest,
    Id(CheckpointId),
}

impl FromStr for Which {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "latest" {
            return Ok(Self::Latest);
        }
        s.parse()
            .map(|id| Self::Id(CheckpointId(id)))
            .map_err(|_| format!("{s:?} is not a checkpoint: use a checkpoint id or `latest`"))
    }
}

impl fmt::Display for Which {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Latest => f.write_str("latest"),
            Self::Id(id) => write!(f, "{}", id.0),
        }
    }
}

/// A checkpoint that cannot be shown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    #[error("job `{job}` has no completed checkpoint yet")]
    NoCheckpoints { job: String },
    #[error(
        "checkpoint {id} of job `{job}` does not exist; completed checkpoints: {}",
        list(completed)
    )]
    NoSuchCheckpoint {
        job: String,
        id: CheckpointId,
        completed: Vec<CheckpointId>,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Why a savepoint could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error(transparent)]
    Inspect(#[from] InspectError),
    #[error(transparent)]
    Savepoint(#[from] SavepointError),
}

fn list(ids: &[CheckpointId]) -> String {
    let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
    ids.join(", ")
}

/// The checkpoints of one job in one store.
#[derive(Clone, Debug)]
pub struct JobCheckpoints {
    job: String,
    store: CheckpointStore,
}

impl JobCheckpoints {
    /// The checkpoints of `job` in `store` (opened for that job).
    pub fn new(job: impl Into<String>, store: CheckpointStore) -> Self {
        Self {
            job: job.into(),
            store,
        }
    }

    pub fn job(&self) -> &str {
        &self.job
    }

    /// Every completed checkpoint, ascending by id. One whose metadata cannot be read is
    /// listed as damaged, so that the others can still be seen; a store that cannot be
    /// read fails.
    pub async fn summaries(&self) -> Result<Vec<CheckpointSummary>, StorageError> {
        let mut rows = Vec::new();
        for id in self.store.completed().await? {
            match self.store.read_metadata(id).await {
                Ok(m) => rows.push(summary(&m)),
                Err(e @ StorageError::Metadata { .. }) => {
                    rows.push(damaged_row(&self.job, id.0, &e));
                }
                // Listed a moment ago: deleted since, by the running job's cleanup of the
                // checkpoints it no longer retains.
                Err(StorageError::Store {
                    source: object_store::Error::NotFound { .. },
                    ..
                }) => continue,
                Err(e) => return Err(e),
            }
        }
        for name in savepoint::names(&self.store).await? {
            let mut row = match savepoint::read(&self.store, &name).await {
                Ok(m) => summary(&m),
                Err(SavepointError::Storage(e @ StorageError::Metadata { .. })) => {
                    damaged_row(&self.job, 0, &e)
                }
                Err(SavepointError::Storage(e)) => return Err(e),
                // Listed a moment ago: deleted since.
                Err(_) => continue,
            };
            // A savepoint may come from another job: listed under the one it is in.
            row.job = self.job.clone();
            row.savepoint = Some(name);
            rows.push(row);
        }
        Ok(rows)
    }

    /// One completed checkpoint, with the artifacts the store holds.
    pub async fn detail(&self, which: Which) -> Result<CheckpointDetail, InspectError> {
        let id = self.chosen(which).await?;
        let metadata = self.store.read_metadata(id).await?;
        let stored = self.stored(&metadata).await?;
        Ok(CheckpointDetail { metadata, stored })
    }

    /// Copies a completed checkpoint into the savepoint `name`.
    pub async fn save_as(&self, which: Which, name: &str) -> Result<SavepointInfo, SaveError> {
        let id = self.chosen(which).await?;
        let metadata = self
            .store
            .read_metadata(id)
            .await
            .map_err(InspectError::from)?;
        let artifacts = savepoint::create(&self.store, &metadata, name).await?;
        Ok(SavepointInfo {
            job: self.job.clone(),
            name: name.to_owned(),
            checkpoint: id.0,
            artifacts,
        })
    }

    /// The id of the completed checkpoint `which` names.
    async fn chosen(&self, which: Which) -> Result<CheckpointId, InspectError> {
        let completed = self.store.completed().await?;
        Ok(match which {
            Which::Latest => *completed
                .last()
                .ok_or_else(|| InspectError::NoCheckpoints {
                    job: self.job.clone(),
                })?,
            Which::Id(id) if completed.contains(&id) => id,
            Which::Id(id) => {
                return Err(if completed.is_empty() {
                    InspectError::NoCheckpoints {
                        job: self.job.clone(),
                    }
                } else {
                    InspectError::NoSuchCheckpoint {
                        job: self.job.clone(),
                        id,
                        completed,
                    }
                });
            }
        })
    }

    /// The size of every artifact `metadata` references that the store holds, by the path
    /// the metadata gives: a restore needs all of them.
    async fn stored(
        &self,
        metadata: &CheckpointMetadata,
    ) -> Result<BTreeMap<String, u64>, StorageError> {
        let referenced: HashSet<&str> = metadata.artifacts().map(|a| a.path.as_str()).collect();
        let state = self.store.resolve("state");
        let objects: Vec<_> = self
            .store
            .object_store()
            .list(Some(&state))
            .try_collect()
            .await
            .map_err(|source| StorageError::Store {
                path: state.clone(),
                source,
            })?;
        Ok(objects
            .into_iter()
            .map(|o| (self.store.relative(&o.location), o.size))
            .filter(|(path, _)| referenced.contains(path.as_str()))
            .collect())
    }
}

/// The row of a checkpoint of `job` whose metadata cannot be read: only why.
fn damaged_row(job: &str, id: u64, why: &StorageError) -> CheckpointSummary {
    CheckpointSummary {
        job: job.to_owned(),
        id,
        completed_at_ms: 0,
        completed_at: String::new(),
        finished: false,
        subtasks: 0,
        artifacts: 0,
        bytes: 0,
        damaged: Some(why.to_string()),
        savepoint: None,
    }
}

/// The summary of a completed checkpoint.
pub fn summary(m: &CheckpointMetadata) -> CheckpointSummary {
    let (artifacts, bytes) = distinct_artifacts(m);
    CheckpointSummary {
        job: m.job.clone(),
        id: m.id.0,
        completed_at_ms: m.completed_at_ms,
        completed_at: crate::clock::utc(m.completed_at_ms),
        finished: m.finished,
        subtasks: m.operators.iter().map(|o| o.subtasks.len()).sum(),
        artifacts,
        bytes,
        damaged: None,
        savepoint: None,
    }
}

/// The artifacts a checkpoint references, each once, and their bytes: after a rescale
/// several subtasks' chains share an artifact, and counting it twice would overstate what
/// the store holds.
pub fn distinct_artifacts(metadata: &CheckpointMetadata) -> (usize, u64) {
    let mut seen = HashSet::new();
    let mut bytes: u64 = 0;
    for artifact in metadata.artifacts() {
        if seen.insert(&artifact.path) {
            // Saturating: the sizes are as read from the metadata.
            bytes = bytes.saturating_add(artifact.bytes);
        }
    }
    (seen.len(), bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_is_latest_or_an_id() {
        assert_eq!("latest".parse(), Ok(Which::Latest));
        assert_eq!("42".parse(), Ok(Which::Id(CheckpointId(42))));
        let err = "newest".parse::<Which>().expect_err("not a checkpoint");
        assert!(err.contains("`latest`"), "{err}");
        assert_eq!(Which::Latest.to_string(), "latest");
        assert_eq!(Which::Id(CheckpointId(7)).to_string(), "7");
    }
}
