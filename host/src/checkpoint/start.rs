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
use super::error::CheckpointError;
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
    /// A savepoint of the job's store (`savepoint:<name>`), which may come from another job
    /// or store.
    Savepoint(String),
}

impl std::str::FromStr for RestoreFrom {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(if s == "latest" {
            Self::Latest
        } else if let Some(name) = s.strip_prefix("savepoint:") {
            Self::Savepoint(name.to_owned())
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
    #[error(transparent)]
    Savepoint(#[from] super::savepoint::SavepointError),
    #[error("checkpoint {id} belongs to job `{found}`, not `{expected}`")]
    OtherJob {
        id: CheckpointId,
        found: String,
        expected: String,
    },
    /// The checkpoint asked for by id is damaged (no fallback: the user chose it).
    #[error("{0}")]
    Damaged(CheckpointError),
    /// Every checkpoint a restore could use is damaged.
    #[error(
        "no retained checkpoint of job `{job}` is whole, so none can be restored:{}",
        damage_list(damaged)
    )]
    NoneWhole {
        job: String,
        damaged: Vec<CheckpointError>,
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
    /// The checkpoint holds state of operators the job no longer has (by uid), and the run
    /// was not told to drop it.
    #[error(
        "checkpoint {checkpoint} holds state of {} that job `{job}` has no operator for \
         (state goes by an operator's uid, or its name when it has none): give the operator \
         that takes its place that uid (`uid = \"{}\"` in its [[operators]] entry), or drop \
         the state with {}",
        dropped_list(dropped),
        dropped[0].0,
        dropped.iter().map(|(uid, _)| format!("--allow-dropped-state {uid}")).collect::<Vec<_>>().join(" ")
    )]
    DroppedState {
        job: String,
        checkpoint: CheckpointId,
        /// By uid, with the bytes of its live state.
        dropped: Vec<(String, u64)>,
    },
}

fn dropped_list(dropped: &[(String, u64)]) -> String {
    let each: Vec<String> = dropped
        .iter()
        .map(|(uid, bytes)| format!("operator `{uid}` ({bytes} bytes)"))
        .collect();
    each.join(", ")
}

fn damage_list(damaged: &[CheckpointError]) -> String {
    damaged.iter().map(|d| format!("\n  - {d}")).collect()
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// A checkpoint the user chose outside the store's chain (a metadata file, a savepoint):
/// only an earlier attempt's finding of damage applies, the store's own checkpoint of that id
/// being another object, and there is no fallback.
fn chosen(
    metadata: CheckpointMetadata,
    damaged: &[CheckpointError],
) -> Result<Option<Arc<CheckpointMetadata>>, StartError> {
    if let Some(e) = damaged.iter().find(|d| d.checkpoint() == Some(metadata.id)) {
        return Err(StartError::Damaged(e.clone()));
    }
    Ok(Some(Arc::new(metadata)))
}

fn none_whole(job: &str, damage: &[(CheckpointId, &CheckpointError)]) -> StartError {
    let mut damaged: Vec<CheckpointError> = damage.iter().map(|(_, e)| (*e).clone()).collect();
    damaged.sort_by_key(|e| std::cmp::Reverse(e.checkpoint()));
    damaged.dedup_by_key(|e| e.checkpoint());
    StartError::NoneWhole {
        job: job.to_owned(),
        damaged,
    }
}

/// What a job's store holds when a run is planned.
struct Found {
    /// The completed checkpoints whose metadata reads, oldest first.
    retained: Vec<Arc<CheckpointMetadata>>,
    /// The completed checkpoints whose metadata does not.
    unreadable: Vec<CheckpointError>,
    /// Every checkpoint known damaged, by id: an earlier attempt's findings, then the
    /// unreadable metadata.
    damage: Vec<(CheckpointId, CheckpointError)>,
}

impl Found {
    async fn read(
        store: &CheckpointStore,
        damaged: &[CheckpointError],
    ) -> Result<Self, StartError> {
        let mut retained = Vec::new();
        let mut unreadable = Vec::new();
        for id in store.completed().await? {
            match store.read_metadata(id).await {
                Ok(metadata) => retained.push(Arc::new(metadata)),
                Err(e @ StorageError::Metadata { .. }) => {
                    unreadable.push(CheckpointError::from_storage(id, e, |p| store.locate(p)));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let damage = damaged
            .iter()
            .chain(&unreadable)
            .filter_map(|e| Some((e.checkpoint()?, e.clone())))
            .collect();
        Ok(Self {
            retained,
            unreadable,
            damage,
        })
    }

    fn damage_of(&self, id: CheckpointId) -> Option<&CheckpointError> {
        self.damage.iter().find(|(d, _)| *d == id).map(|(_, e)| e)
    }

    fn none_whole(&self, job: &str) -> StartError {
        let damage: Vec<(CheckpointId, &CheckpointError)> =
            self.damage.iter().map(|(id, e)| (*id, e)).collect();
        none_whole(job, &damage)
    }

    /// Which checkpoint `from` asks for, if any: a restart takes its own lineage's newest
    /// that is not known damaged, or else what its run started from.
    fn choice(&self, job: &str, from: &StartFrom) -> Result<Option<RestoreFrom>, StartError> {
        Ok(match from {
            StartFrom::New => {
                if let Some(newest) = self.retained.last() {
                    return Err(StartError::Existing {
                        job: job.to_owned(),
                        count: self.retained.len(),
                        newest: newest.clone(),
                    });
                }
                None
            }
            StartFrom::Fresh => None,
            StartFrom::Restore(restore) => Some(restore.clone()),
            StartFrom::Restart(lineage) => {
                match self
                    .retained
                    .iter()
                    .rev()
                    .find(|m| m.id >= lineage.first && self.damage_of(m.id).is_none())
                {
                    Some(own) => Some(RestoreFrom::Id(own.id)),
                    None => lineage.origin.clone(),
                }
            }
        })
    }

    /// The metadata of the checkpoint `restore` names, if it may be restored; `None` for
    /// `latest` of a job without checkpoints. A savepoint is read from `store`.
    async fn resolve(
        &self,
        store: &CheckpointStore,
        job: &str,
        restore: RestoreFrom,
        falls_back: bool,
        damaged: &[CheckpointError],
    ) -> Result<Option<Arc<CheckpointMetadata>>, StartError> {
        match restore {
            RestoreFrom::Latest => {
                let whole = self
                    .retained
                    .iter()
                    .rev()
                    .find(|m| self.damage_of(m.id).is_none());
                if whole.is_none() && !self.damage.is_empty() {
                    return Err(self.none_whole(job));
                }
                Ok(whole.cloned())
            }
            RestoreFrom::Id(id) => {
                if let Some(e) = self.damage_of(id) {
                    return Err(if falls_back {
                        self.none_whole(job)
                    } else {
                        StartError::Damaged(e.clone())
                    });
                }
                let metadata = self.retained.iter().find(|m| m.id == id);
                Ok(Some(
                    metadata.cloned().ok_or(StartError::NoSuchCheckpoint(id))?,
                ))
            }
            RestoreFrom::Metadata(path) => {
                let bytes = std::fs::read(&path).map_err(|source| StartError::Read {
                    path: path.clone(),
                    source,
                })?;
                let metadata = parse_metadata(&bytes, &path.display().to_string())?;
                chosen(metadata, damaged)
            }
            RestoreFrom::Savepoint(name) => {
                chosen(super::savepoint::read(store, &name).await?, damaged)
            }
        }
    }

    /// The damaged checkpoints newer than `restored` (a restore that fell back), newest
    /// first.
    fn passed_over(&self, restored: Option<CheckpointId>) -> Vec<CheckpointError> {
        let mut passed_over: Vec<CheckpointError> = self
            .damage
            .iter()
            .filter(|(id, _)| restored.is_some_and(|r| *id > r))
            .map(|(_, e)| e.clone())
            .collect();
        passed_over.sort_by_key(|e| std::cmp::Reverse(e.checkpoint()));
        passed_over
    }

    /// The id of the run's first checkpoint: after every one the store holds or restored.
    fn next_id(
        &self,
        store: &CheckpointStore,
        restored: Option<CheckpointId>,
    ) -> Result<CheckpointId, StartError> {
        let newest = self
            .retained
            .iter()
            .map(|m| m.id)
            .chain(
                self.unreadable
                    .iter()
                    .filter_map(CheckpointError::checkpoint),
            )
            .chain(restored)
            .max()
            .unwrap_or(CheckpointId(0));
        // The ids are as read from the store: the largest there is leaves none to continue.
        let next =
            newest
                .0
                .checked_add(1)
                .map(CheckpointId)
                .ok_or_else(|| StorageError::Metadata {
                    path: store.metadata_path(newest),
                    message: "its checkpoint id is the largest there is: no checkpoint can follow"
                        .into(),
                })?;
        Ok(next)
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
    /// Checkpoints newer than the restored one that a restore could not use (metadata that
    /// does not parse, or damage found by an earlier attempt), newest first: a restore of
    /// `latest` fell back past them.
    pub passed_over: Vec<CheckpointError>,
    /// The savepoint restored, by name, if the restored checkpoint is one.
    pub savepoint: Option<String>,
}

impl JobStart {
    /// A run of a job that does not checkpoint.
    pub fn fresh() -> Self {
        Self {
            restored: None,
            retained: Vec::new(),
            next_checkpoint: CheckpointId(1),
            passed_over: Vec::new(),
            savepoint: None,
        }
    }

    /// Plans a run of `job` from the checkpoints in `store`. [`StartFrom::Fresh`] deletes
    /// the job's checkpoints first.
    ///
    /// `damaged` are checkpoints an earlier attempt found damaged. A restore of `latest`, and
    /// an automatic restart, fall back past them and past checkpoints whose metadata does
    /// not parse, to the newest that may be whole (DESIGN.md §8); a restore of a given id
    /// fails on them.
    pub async fn plan(
        store: &CheckpointStore,
        job: &str,
        from: &StartFrom,
        damaged: &[CheckpointError],
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
        let found = Found::read(store, damaged).await?;
        // Whether the run falls back past damage rather than failing on it.
        let falls_back = matches!(
            from,
            StartFrom::Restore(RestoreFrom::Latest) | StartFrom::Restart(_)
        );
        let choice = found.choice(job, from)?;
        let savepoint = match &choice {
            Some(RestoreFrom::Savepoint(name)) => Some(name.clone()),
            _ => None,
        };
        let restored = match choice {
            None => None,
            Some(restore) => {
                found
                    .resolve(store, job, restore, falls_back, damaged)
                    .await?
            }
        };
        // A savepoint may come from another job.
        if let Some(m) = &restored
            && m.job != job
            && savepoint.is_none()
        {
            return Err(StartError::OtherJob {
                id: m.id,
                found: m.job.clone(),
                expected: job.to_owned(),
            });
        }
        let restored_id = restored.as_ref().map(|m| m.id);
        Ok(Self {
            next_checkpoint: found.next_id(store, restored_id)?,
            passed_over: found.passed_over(restored_id.filter(|_| falls_back)),
            retained: found.retained,
            restored,
            savepoint,
        })
    }

    /// Refuses a restore that would drop state: operators of the restored checkpoint that hold
    /// state, that none of `uids` (the job's operators') takes over, and that `allowed`
    /// (`--allow-dropped-state`) does not name. Operators the checkpoint lacks start empty.
    pub fn check_state_kept(
        &self,
        job: &str,
        uids: &[&str],
        allowed: &[String],
    ) -> Result<(), StartError> {
        // A finished job's restore only commits its last output: no state is read.
        let Some(restored) = self.restored.as_ref().filter(|m| !m.finished) else {
            return Ok(());
        };
        let mut dropped = Vec::new();
        for (uid, bytes) in restored.state_without_place(uids) {
            if allowed.iter().any(|a| a == uid) {
                tracing::warn!(
                    job,
                    checkpoint = restored.id.0,
                    operator = %uid,
                    bytes,
                    "dropping the state of an operator the job no longer has (--allow-dropped-state)"
                );
            } else {
                dropped.push((uid.to_owned(), bytes));
            }
        }
        if dropped.is_empty() {
            Ok(())
        } else {
            Err(StartError::DroppedState {
                job: job.to_owned(),
                checkpoint: restored.id,
                dropped,
            })
        }
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
            _ if self.savepoint.is_some() => self.savepoint.clone().map(RestoreFrom::Savepoint),
            _ => self.restored.as_ref().map(|m| RestoreFrom::Id(m.id)),
        };
        RunLineage {
            first: self.next_checkpoint,
            origin,
        }
    }

    /// What the subtasks of a job of operators `uids` are told; `allow_dropped_state` says
    /// what of the restored state they may drop.
    pub fn assignment(&self, uids: &[&str], allow_dropped_state: &[String]) -> RestoreAssignment {
        RestoreAssignment {
            restored: self.restored.clone(),
            retained: self.retained.clone(),
            adopted: adopted(&self.retained, uids),
            detached: self.savepoint.is_some(),
            allow_dropped_state: allow_dropped_state.to_vec(),
        }
    }
}

/// The operators of `retained` checkpoints that are not among `uids`, each once.
pub(crate) fn adopted(retained: &[Arc<CheckpointMetadata>], uids: &[&str]) -> Vec<String> {
    let mut adopted: Vec<String> = retained
        .iter()
        .flat_map(|m| &m.operators)
        .map(|o| o.name.clone())
        .filter(|name| !uids.contains(&name.as_str()))
        .collect();
    adopted.sort_unstable();
    adopted.dedup();
    adopted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(id: u64) -> CheckpointMetadata {
        CheckpointMetadata::bare("job", id)
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
        let start = JobStart::plan(store, "job", from, &[]).await.expect("plan");
        start.restored.map(|m| m.id.0)
    }

    #[tokio::test]
    async fn a_new_run_is_refused_beside_checkpoints_of_the_job() {
        let store = store_with(&[3, 4]).await;
        let err = JobStart::plan(&store, "job", &StartFrom::New, &[])
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
        let start = JobStart::plan(&empty, "job", &StartFrom::New, &[])
            .await
            .expect("plan");
        assert!(start.restored.is_none());
        assert_eq!(start.next_checkpoint, CheckpointId(1));
    }

    #[tokio::test]
    async fn fresh_deletes_every_object_of_the_job_first() {
        let store = store_with(&[3, 4]).await;
        let start = JobStart::plan(&store, "job", &StartFrom::Fresh, &[])
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
            &[],
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
        let again = JobStart::plan(&store, "job", &from, &[])
            .await
            .expect("plan");
        assert_eq!(StartFrom::Restart(again.lineage(&from)), from);

        // A run from the beginning (after --fresh) restarts from the beginning.
        let fresh = store_with(&[]).await;
        let start = JobStart::plan(&fresh, "job", &StartFrom::Fresh, &[])
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

    fn damage(id: u64) -> CheckpointError {
        CheckpointError::Damaged {
            checkpoint: CheckpointId(id),
            object: format!("/store/job/state/count/0/chk-{id}.inc"),
            reason: "checksum mismatch".into(),
        }
    }

    #[tokio::test]
    async fn latest_falls_back_past_damage_and_torn_metadata_and_fails_when_none_is_whole() {
        let store = store_with(&[1, 2, 3, 4]).await;
        let torn = store.metadata_path(CheckpointId(4));
        object_store::ObjectStoreExt::put(
            store.object_store().as_ref(),
            &torn,
            b"{".to_vec().into(),
        )
        .await
        .expect("tear");
        let latest = StartFrom::Restore(RestoreFrom::Latest);
        let start = JobStart::plan(&store, "job", &latest, &[damage(3)])
            .await
            .expect("plan");
        assert_eq!(start.restored.as_ref().map(|m| m.id), Some(CheckpointId(2)));
        let passed: Vec<_> = start.passed_over.iter().map(|e| e.checkpoint()).collect();
        assert_eq!(passed, [Some(CheckpointId(4)), Some(CheckpointId(3))]);
        // New ids continue past the torn one, whose object stays.
        assert_eq!(start.next_checkpoint, CheckpointId(5));

        let err = JobStart::plan(&store, "job", &latest, &[damage(3), damage(2), damage(1)])
            .await
            .expect_err("none whole");
        let StartError::NoneWhole { damaged, .. } = &err else {
            panic!("{err}");
        };
        let ids: Vec<_> = damaged
            .iter()
            .filter_map(CheckpointError::checkpoint)
            .collect();
        assert_eq!(ids, [4, 3, 2, 1].map(CheckpointId));

        // Asked for by id: no fallback, and no warning about newer ones.
        let by_id = StartFrom::Restore(RestoreFrom::Id(CheckpointId(3)));
        let err = JobStart::plan(&store, "job", &by_id, &[damage(3)])
            .await
            .expect_err("damaged");
        assert!(matches!(err, StartError::Damaged(_)), "{err}");
        let by_id = StartFrom::Restore(RestoreFrom::Id(CheckpointId(2)));
        let start = JobStart::plan(&store, "job", &by_id, &[])
            .await
            .expect("plan");
        assert!(start.passed_over.is_empty());
    }

    #[tokio::test]
    async fn a_checkpoint_with_the_largest_id_is_an_error_not_an_overflow() {
        let store = store_with(&[2, u64::MAX]).await;
        let latest = StartFrom::Restore(RestoreFrom::Latest);
        let err = JobStart::plan(&store, "job", &latest, &[])
            .await
            .expect_err("no id left");
        assert!(err.to_string().contains("largest there is"), "{err}");
    }

    #[tokio::test]
    async fn a_restart_falls_back_only_within_its_own_run() {
        let store = store_with(&[1, 2, 3, 4]).await;
        // A run restored from 2 completed 3 and 4; 4 and 3 are damaged: back to 2.
        let lineage = RunLineage {
            first: CheckpointId(3),
            origin: Some(RestoreFrom::Id(CheckpointId(2))),
        };
        let from = StartFrom::Restart(lineage);
        let start = JobStart::plan(&store, "job", &from, &[damage(4), damage(3)])
            .await
            .expect("plan");
        assert_eq!(start.restored.as_ref().map(|m| m.id), Some(CheckpointId(2)));
        // Where it began is damaged too: not 1, of an earlier run.
        let err = JobStart::plan(&store, "job", &from, &[damage(4), damage(3), damage(2)])
            .await
            .expect_err("none whole");
        assert!(matches!(err, StartError::NoneWhole { .. }), "{err}");
    }
}
