//! [`JobStart`]: where a run of a job begins ([`StartFrom`]), planned from the checkpoints in
//! its store.
//!
//! Every run that checkpoints knows the completed checkpoints already in the store, restored
//! or not: their artifacts stay until newer checkpoints push them out of retention, orphans
//! beside them are swept, and new checkpoint ids continue after the newest, so a run never
//! overwrites another run's metadata.
//!
//! A run from the beginning ([`StartFrom::New`]) is refused when the store already holds
//! checkpoints of the job: it would start the output afresh while those checkpoints still
//! describe the output an earlier run committed, and anything that later restored one of them
//! (an automatic restart, `--restore latest`) would resume that earlier run into an output
//! that no longer holds its records. The user chooses: continue (`--restore latest`) or start
//! over ([`StartFrom::Fresh`], which deletes them first). An automatic restart
//! ([`StartFrom::Restart`]) restores only what the run it restarts began from or completed.

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

/// How a run begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartFrom {
    /// The beginning of the input. Refused ([`StartError::Existing`]) when the store holds
    /// checkpoints of the job.
    New,
    /// The beginning of the input, after deleting every checkpoint of the job (`--fresh`).
    Fresh,
    /// A checkpoint (`--restore`).
    Restore(RestoreFrom),
    /// An automatic restart of a failed run: the newest checkpoint that run completed, else
    /// the one it began from, else the beginning.
    Restart(RunLineage),
}

/// What an automatic restart may restore: the checkpoints of the run it restarts, never those
/// of an earlier run of the same job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLineage {
    /// The id of the run's first checkpoint: every checkpoint from here on is the run's own.
    pub first: CheckpointId,
    /// The checkpoint the run began from (an id, or a metadata file); `None`: the beginning.
    pub origin: Option<RestoreFrom>,
}

impl From<Option<RestoreFrom>> for StartFrom {
    /// `--restore` given or not.
    fn from(restore: Option<RestoreFrom>) -> Self {
        restore.map_or(StartFrom::New, StartFrom::Restore)
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
    #[error(
        "the store already holds {} of job `{job}` (newest: {}{}), and a run from the \
         beginning would start its output afresh while they describe what an earlier run \
         committed. Continue from the newest with `--restore latest`, or start over with \
         `--fresh`, which deletes them (a file sink then starts an empty output)",
        plural(*count, "checkpoint"),
        newest.id,
        if newest.finished { ", taken when the job had finished" } else { "" }
    )]
    Existing {
        job: String,
        count: usize,
        newest: Arc<CheckpointMetadata>,
    },
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
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

    /// Plans a run of `job` from the checkpoints in `store`. [`StartFrom::Fresh`] deletes
    /// the job's checkpoints first.
    pub async fn plan(
        store: &CheckpointStore,
        job: &str,
        from: &StartFrom,
    ) -> Result<Self, StartError> {
        if *from == StartFrom::Fresh {
            let deleted = store.delete_all().await?;
            if deleted > 0 {
                tracing::info!(
                    job,
                    objects = deleted,
                    "deleted the job's checkpoints (--fresh)"
                );
            }
        }
        let mut retained = Vec::new();
        for id in store.completed().await? {
            retained.push(Arc::new(store.read_metadata(id).await?));
        }
        let restore = match from {
            StartFrom::New => {
                if let Some(newest) = retained.last() {
                    return Err(StartError::Existing {
                        job: job.to_owned(),
                        count: retained.len(),
                        newest: newest.clone(),
                    });
                }
                None
            }
            StartFrom::Fresh => None,
            StartFrom::Restore(restore) => Some(restore.clone()),
            StartFrom::Restart(lineage) => {
                match retained.iter().rev().find(|m| m.id >= lineage.first) {
                    Some(own) => Some(RestoreFrom::Id(own.id)),
                    None => lineage.origin.clone(),
                }
            }
        };
        let restored = match restore {
            None => None,
            Some(RestoreFrom::Latest) => retained.last().cloned(),
            Some(RestoreFrom::Id(id)) => Some(
                retained
                    .iter()
                    .find(|m| m.id == id)
                    .cloned()
                    .ok_or(StartError::NoSuchCheckpoint(id))?,
            ),
            Some(RestoreFrom::Metadata(path)) => {
                let bytes = std::fs::read(&path).map_err(|source| StartError::Read {
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

    /// What an automatic restart of this run may restore.
    pub fn lineage(&self, from: &StartFrom) -> RunLineage {
        let origin = match from {
            // A restart of a restart restarts the same run.
            StartFrom::Restart(lineage) => return lineage.clone(),
            // Its metadata is a file, not one of the store's checkpoints.
            StartFrom::Restore(RestoreFrom::Metadata(path)) if self.restored.is_some() => {
                Some(RestoreFrom::Metadata(path.clone()))
            }
            _ => self.restored.as_ref().map(|m| RestoreFrom::Id(m.id)),
        };
        RunLineage {
            first: self.next_checkpoint,
            origin,
        }
    }

    /// What the subtasks are told.
    pub fn assignment(&self) -> RestoreAssignment {
        RestoreAssignment {
            restored: self.restored.clone(),
            retained: self.retained.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::METADATA_VERSION;

    fn metadata(id: u64) -> CheckpointMetadata {
        CheckpointMetadata {
            version: METADATA_VERSION,
            job: "job".into(),
            id: CheckpointId(id),
            completed_at_ms: 0,
            finished: false,
            key_groups: 128,
            source: serde_json::Value::Null,
            sink: None,
            dead_letters: Default::default(),
            source_max_timestamp: None,
            operators: Vec::new(),
            timing: None,
            counts: None,
        }
    }

    /// A store holding completed checkpoints `ids` of job `job`, and one artifact.
    async fn store_with(ids: &[u64]) -> CheckpointStore {
        let store = CheckpointStore::open("memory:///", "job").expect("memory store");
        for &id in ids {
            store.write_metadata(&metadata(id)).await.expect("write");
        }
        let artifact =
            store.artifact_path("count", crate::ids::SubtaskIndex(0), CheckpointId(1), "r");
        object_store::ObjectStoreExt::put(
            store.object_store().as_ref(),
            &artifact,
            vec![1u8].into(),
        )
        .await
        .expect("put artifact");
        store
    }

    async fn restored(store: &CheckpointStore, from: &StartFrom) -> Option<u64> {
        let start = JobStart::plan(store, "job", from).await.expect("plan");
        start.restored.map(|m| m.id.0)
    }

    #[tokio::test]
    async fn a_new_run_is_refused_beside_checkpoints_of_the_job() {
        let store = store_with(&[3, 4]).await;
        let err = JobStart::plan(&store, "job", &StartFrom::New)
            .await
            .expect_err("refused");
        assert!(
            matches!(err, StartError::Existing { count: 2, .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("newest: 4"), "{text}");
        assert!(
            text.contains("--restore latest") && text.contains("--fresh"),
            "{text}"
        );

        let empty = store_with(&[]).await;
        let start = JobStart::plan(&empty, "job", &StartFrom::New)
            .await
            .expect("plan");
        assert!(start.restored.is_none());
        assert_eq!(start.next_checkpoint, CheckpointId(1));
    }

    #[tokio::test]
    async fn fresh_deletes_every_object_of_the_job_first() {
        let store = store_with(&[3, 4]).await;
        let start = JobStart::plan(&store, "job", &StartFrom::Fresh)
            .await
            .expect("plan");
        assert!(start.restored.is_none() && start.retained.is_empty());
        assert_eq!(start.next_checkpoint, CheckpointId(1));
        assert!(store.list_all().await.expect("list").is_empty());
    }

    #[tokio::test]
    async fn a_restart_restores_its_own_run_or_where_it_began_never_an_earlier_run() {
        let store = store_with(&[1, 2, 3]).await;
        // A run restored from 2 (so its own checkpoints start at 4) failed before its first.
        let start = JobStart::plan(
            &store,
            "job",
            &StartFrom::Restore(RestoreFrom::Id(CheckpointId(2))),
        )
        .await
        .expect("plan");
        let from = StartFrom::Restart(
            start.lineage(&StartFrom::Restore(RestoreFrom::Id(CheckpointId(2)))),
        );
        assert_eq!(
            restored(&store, &from).await,
            Some(2),
            "not 3, of the earlier run"
        );
        // Once it completed 4 and 5, the newest of them.
        store.write_metadata(&metadata(4)).await.expect("write");
        store.write_metadata(&metadata(5)).await.expect("write");
        assert_eq!(restored(&store, &from).await, Some(5));
        // A restart of that restart resumes the same run.
        let again = JobStart::plan(&store, "job", &from).await.expect("plan");
        assert_eq!(StartFrom::Restart(again.lineage(&from)), from);

        // A run from the beginning (after --fresh) restarts from the beginning.
        let fresh = store_with(&[]).await;
        let start = JobStart::plan(&fresh, "job", &StartFrom::Fresh)
            .await
            .expect("plan");
        let from = StartFrom::Restart(start.lineage(&StartFrom::Fresh));
        fresh.write_metadata(&metadata(0)).await.expect("write");
        assert_eq!(
            restored(&fresh, &from).await,
            None,
            "checkpoint 0 is not the run's"
        );
    }
}
