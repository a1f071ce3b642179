//! [`CheckpointStore`]: where a job's checkpoints live in an object store, and the few
//! operations on them.
//!
//! ```text
//! <store prefix>/<job>/checkpoints/chk-00000000000000000007.json   metadata, by the coordinator
//! <store prefix>/<job>/state/<operator>/<subtask>/chk-…07-<run>.inc artifacts, by their owner
//! <store prefix>/<job>/sink/chk-…07.out                           staged output (Kafka sink)
//! <store prefix>/<job>/partitions/<p>/…                           the same, per input partition
//! <store prefix>/<job>/lease/<generation>                         the lease of the run that owns it
//! <store prefix>/<job>/savepoints/<name>/…                        copies of a checkpoint (`savepoint`)
//! ```
//!
//! Each subtask writes under its own prefix and only it deletes there, so that cleanup and
//! orphan sweeps never need a lock. Artifact names carry the run that wrote them, so a run
//! restored from an older checkpoint never overwrites an artifact a retained checkpoint of an
//! earlier run still references.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::metadata::{CheckpointMetadata, METADATA_VERSION, SubtaskHandle};
use super::savepoint;
pub use super::storage::ChainError;
use super::storage::{StorageError, open_store, restore_chain};
use crate::ids::{CheckpointId, SubtaskIndex};
use crate::partition::KeyGroupRange;
use crate::state::KeyedStateBackend;

/// A job's checkpoints in one object store.
#[derive(Clone, Debug)]
pub struct CheckpointStore {
    store: Arc<dyn ObjectStore>,
    /// `<store prefix>/<job>`.
    root: Path,
    /// What goes before a path to name the object as the user knows it ([`Self::locate`]):
    /// `/` for local disk, `s3://bucket/` and the like for the others.
    origin: Arc<str>,
}

impl CheckpointStore {
    /// Reads into `backend` the key groups of `range` that the chain of `handle` holds, in
    /// chain order, a bounded window at a time (`storage::restore_chain`): what a restore,
    /// `weir state` and `weir upgrade --check` read of a subtask.
    pub async fn restore_chain(
        &self,
        backend: &mut KeyedStateBackend,
        handle: &SubtaskHandle,
        range: KeyGroupRange,
    ) -> Result<(), ChainError> {
        let paths: Vec<Path> = handle.chain.iter().map(|a| self.resolve(&a.path)).collect();
        restore_chain(self.object_store().as_ref(), &paths, range, backend).await
    }

    /// The checkpoints of `job` in the store named by `url`.
    pub fn open(url: &str, job: &str) -> Result<Self, StorageError> {
        let (store, prefix) = open_store(url)?;
        Ok(Self::new(store, &prefix, job).named_by(url))
    }

    /// The same store, whose objects [`Self::locate`] names as under `url`, the store's URL.
    #[must_use]
    pub fn named_by(mut self, url: &str) -> Self {
        self.origin = origin_of(url).into();
        self
    }

    /// The checkpoints of `job` under `prefix` of `store` (a wrapped store, in tests).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &Path, job: &str) -> Self {
        Self {
            store,
            root: prefix.clone().join(job),
            origin: "".into(),
        }
    }

    /// The checkpoints of one input partition of a job that runs a pipeline per partition
    /// (a Kafka source, `crate::group`): `<job>/partitions/<partition>`, a job folder of its
    /// own, so each partition's checkpoints, state and cleanup are its owner's alone.
    pub fn partition(&self, partition: i32) -> Self {
        Self {
            store: self.store.clone(),
            root: self
                .root
                .clone()
                .join("partitions")
                .join(partition.to_string()),
            origin: self.origin.clone(),
        }
    }

    /// The folder where one output of the job stages what it writes until its checkpoint
    /// completes (the Kafka sink's exactly-once mode): `sink` for the job's sink,
    /// `dead-letters/<topic>` for a dead-letter topic. Only that output's sink writes and
    /// deletes there.
    pub fn staging_folder(&self, output: &str) -> Path {
        output
            .split('/')
            .fold(self.root.clone(), |path, part| path.join(part))
    }

    /// Who writes an output now: the token of the last run that claimed it (the Kafka
    /// sink's fencing).
    pub fn owner_path(&self, output: &str) -> Path {
        self.staging_folder(output).join("owner")
    }

    /// An output's staged part for `checkpoint`.
    pub fn staging_path(&self, output: &str, checkpoint: CheckpointId) -> Path {
        self.staging_folder(output)
            .join(format!("chk-{:020}.out", checkpoint.0))
    }

    /// The job's folder, `<store prefix>/<job>` (a partition's, for a partition's pipeline).
    pub fn folder(&self) -> &Path {
        &self.root
    }

    /// Whether `path` is a lease's (`<job>/lease/…`, `<job>/partitions/<p>/lease/…`): the
    /// lease guards the folder and is no checkpoint object.
    fn is_lease(&self, path: &Path) -> bool {
        let Some(parts) = path.prefix_match(&self.root) else {
            return false;
        };
        let parts: Vec<_> = parts.collect();
        match parts.as_slice() {
            [first, _] => first.as_ref() == "lease",
            [partitions, _, lease, _] => {
                partitions.as_ref() == "partitions" && lease.as_ref() == "lease"
            }
            _ => false,
        }
    }

    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The full path of an artifact named relative to the job's folder.
    pub fn resolve(&self, relative: &str) -> Path {
        Path::from_iter(self.root.parts().chain(Path::from(relative).parts()))
    }

    /// The object at `path` as the user knows it: `/dir/job/...` for a local store (whose
    /// paths have no leading `/`), `s3://bucket/job/...` for a remote one.
    pub fn locate(&self, path: &Path) -> String {
        format!("{}{path}", self.origin)
    }

    /// The path relative to the job's folder, as recorded in metadata.
    pub fn relative(&self, path: &Path) -> String {
        path.prefix_match(&self.root)
            .map(|parts| Path::from_iter(parts).to_string())
            .unwrap_or_else(|| path.to_string())
    }

    /// The folder a subtask writes its artifacts to and sweeps.
    pub fn subtask_prefix(&self, operator: &str, subtask: SubtaskIndex) -> Path {
        self.root
            .clone()
            .join("state")
            .join(operator)
            .join(subtask.0.to_string())
    }

    /// The artifact of `checkpoint` written by a subtask in run `run`.
    pub fn artifact_path(
        &self,
        operator: &str,
        subtask: SubtaskIndex,
        checkpoint: CheckpointId,
        run: &str,
    ) -> Path {
        self.subtask_prefix(operator, subtask)
            .join(format!("chk-{:020}-{run}.inc", checkpoint.0))
    }

    fn metadata_folder(&self) -> Path {
        self.root.clone().join("checkpoints")
    }

    pub fn metadata_path(&self, id: CheckpointId) -> Path {
        self.metadata_folder()
            .join(format!("chk-{:020}.json", id.0))
    }

    /// Writes a checkpoint's metadata, which completes it.
    pub async fn write_metadata(&self, metadata: &CheckpointMetadata) -> Result<(), StorageError> {
        let path = self.metadata_path(metadata.id);
        let json = serde_json::to_vec_pretty(metadata).map_err(|e| StorageError::Metadata {
            path: path.clone(),
            message: e.to_string(),
        })?;
        self.store
            .put(&path, PutPayload::from(json))
            .await
            .map_err(|source| StorageError::Store { path, source })?;
        Ok(())
    }

    /// Whether a checkpoint's metadata exists: after a failed write, whose reply may have been
    /// lost while the object was written.
    pub async fn metadata_exists(&self, id: CheckpointId) -> Result<bool, StorageError> {
        let path = self.metadata_path(id);
        match self.store.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(StorageError::Store { path, source }),
        }
    }

    /// Removes a checkpoint's metadata (retention); a missing object is fine.
    pub async fn delete_metadata(&self, id: CheckpointId) -> Result<(), StorageError> {
        delete_if_present(self.store.as_ref(), &self.metadata_path(id)).await
    }

    /// The ids of the completed checkpoints, ascending.
    pub async fn completed(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let mut ids: Vec<CheckpointId> = self
            .list(&self.metadata_folder())
            .await?
            .iter()
            .filter_map(|path| {
                let name = path.filename()?;
                let digits = name.strip_prefix("chk-")?.strip_suffix(".json")?;
                digits.parse().ok().map(CheckpointId)
            })
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The metadata of a completed checkpoint.
    pub async fn read_metadata(
        &self,
        id: CheckpointId,
    ) -> Result<CheckpointMetadata, StorageError> {
        let path = self.metadata_path(id);
        let store_err = |source| StorageError::Store {
            path: path.clone(),
            source,
        };
        let result = self.store.get(&path).await.map_err(store_err)?;
        let bytes = result.bytes().await.map_err(store_err)?;
        let metadata = parse_metadata(&bytes, path.as_ref())?;
        // The file's name is what lists it (and orders it, and numbers the checkpoints after
        // it): one holding another checkpoint was moved or is damaged.
        if metadata.id != id {
            return Err(StorageError::Metadata {
                path,
                message: format!("it holds checkpoint {}, not {id}", metadata.id),
            });
        }
        Ok(metadata)
    }

    /// Every object under a subtask's prefix.
    pub async fn list_subtask(
        &self,
        operator: &str,
        subtask: SubtaskIndex,
    ) -> Result<Vec<Path>, StorageError> {
        self.list(&self.subtask_prefix(operator, subtask)).await
    }

    /// The subtask folders under `state/<operator>/`, by number: every subtask that ever
    /// wrote there, in any run.
    pub async fn subtask_folders(&self, operator: &str) -> Result<Vec<u32>, StorageError> {
        self.numbered_folders(self.root.clone().join("state").join(operator))
            .await
    }

    /// The input partitions of a job that runs a pipeline per partition that have a folder
    /// under `partitions/` ([`CheckpointStore::partition`]), in number order.
    pub async fn partition_folders(&self) -> Result<Vec<i32>, StorageError> {
        let mut partitions: Vec<i32> = self
            .numbered_folders(self.root.clone().join("partitions"))
            .await?;
        partitions.sort_unstable();
        Ok(partitions)
    }

    /// The folders directly under `prefix` whose names are numbers.
    async fn numbered_folders<N: std::str::FromStr>(
        &self,
        prefix: Path,
    ) -> Result<Vec<N>, StorageError> {
        let listing = self
            .store
            .list_with_delimiter(Some(&prefix))
            .await
            .map_err(|source| StorageError::Store {
                path: prefix.clone(),
                source,
            })?;
        Ok(listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename()?.parse().ok())
            .collect())
    }

    /// Deletes every object of the job, metadata first: a crash part way leaves fewer
    /// complete checkpoints and orphaned artifacts (which the next run sweeps), never a
    /// checkpoint whose artifacts are gone. The lease of the run that asks stays, and so do
    /// the savepoints. Returns how many objects were deleted.
    pub async fn delete_all(&self) -> Result<usize, StorageError> {
        /// Deletes in flight at once: enough to hide a remote store's latency.
        const CONCURRENT_DELETES: usize = 16;
        let metadata = self.list(&self.metadata_folder()).await?;
        let artifacts: Vec<Path> = self
            .list(&self.root)
            .await?
            .into_iter()
            .filter(|path| {
                !metadata.contains(path)
                    && !self.is_lease(path)
                    && !savepoint::is_savepoint_object(self, path)
            })
            .collect();
        let mut deleted = 0;
        for batch in [metadata, artifacts] {
            deleted += batch.len();
            futures::stream::iter(batch)
                .map(|path| async move { delete_if_present(self.store.as_ref(), &path).await })
                .buffer_unordered(CONCURRENT_DELETES)
                .try_collect::<Vec<()>>()
                .await?;
        }
        Ok(deleted)
    }

    /// Every checkpoint object of the job (its leases and savepoints aside), for inspection
    /// and tests.
    pub async fn list_all(&self) -> Result<Vec<Path>, StorageError> {
        let mut all = self.list(&self.root).await?;
        all.retain(|path| !self.is_lease(path) && !savepoint::is_savepoint_object(self, path));
        Ok(all)
    }

    async fn list(&self, prefix: &Path) -> Result<Vec<Path>, StorageError> {
        let objects: Vec<_> =
            self.store
                .list(Some(prefix))
                .try_collect()
                .await
                .map_err(|source| StorageError::Store {
                    path: prefix.clone(),
                    source,
                })?;
        Ok(objects.into_iter().map(|o| o.location).collect())
    }
}

/// The scheme and bucket of a store URL (`s3://bucket/`), or `/` for local disk, whose
/// object paths are absolute paths without their leading `/`.
fn origin_of(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) if u.scheme() == "file" => "/".into(),
        Ok(u) => format!("{}://{}/", u.scheme(), u.host_str().unwrap_or_default()),
        Err(_) => String::new(),
    }
}

/// Parses metadata read from `origin` (a path, for messages).
pub fn parse_metadata(bytes: &[u8], origin: &str) -> Result<CheckpointMetadata, StorageError> {
    let bad = |message: String| StorageError::Metadata {
        path: Path::from(origin),
        message,
    };
    let metadata: CheckpointMetadata =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("not checkpoint metadata: {e}")))?;
    if metadata.version != METADATA_VERSION {
        return Err(bad(format!(
            "metadata version {} is not supported (this Weir reads version {METADATA_VERSION})",
            metadata.version
        )));
    }
    metadata
        .check()
        .map_err(|e| bad(format!("inconsistent checkpoint metadata: {e}")))?;
    Ok(metadata)
}

/// Deletes `path`; an object already gone counts as deleted, so deletes can be retried.
pub async fn delete_if_present(store: &dyn ObjectStore, path: &Path) -> Result<(), StorageError> {
    match store.delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(source) => Err(StorageError::Store {
            path: path.clone(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::{MetadataInconsistency, OperatorHandles, SubtaskHandle};
    use crate::partition::MAX_KEY_GROUPS;

    fn metadata(id: u64) -> CheckpointMetadata {
        CheckpointMetadata {
            operators: vec![OperatorHandles {
                name: "count".into(),
                parallelism: 1,
                component: None,
                wit: None,
                state_encoding: Some(crate::checkpoint::metadata::STATE_ENCODING_CBOR.into()),
                subtasks: vec![SubtaskHandle {
                    key_groups: (0, 128),
                    ..SubtaskHandle::default()
                }],
            }],
            ..CheckpointMetadata::bare("job", id)
        }
    }

    #[test]
    fn metadata_whose_key_groups_do_not_add_up_is_refused() {
        let parse = |m: &CheckpointMetadata| {
            parse_metadata(&serde_json::to_vec(m).expect("json"), "chk.json")
        };
        assert!(parse(&metadata(1)).is_ok());
        // A subtask's tables are sized by its range: these would have cost gigabytes, or a
        // panic (a range ending before it starts).
        for (key_groups, range) in [
            (128, (0, u32::MAX)),
            (128, (5, 4)),
            (0, (0, 0)),
            (u32::MAX, (0, 1)),
        ] {
            let mut m = metadata(1);
            m.key_groups = key_groups;
            m.operators[0].subtasks[0].key_groups = range;
            let err = parse(&m).expect_err("refused").to_string();
            assert!(err.contains("inconsistent checkpoint metadata"), "{err}");
            let expected = if (1..=MAX_KEY_GROUPS).contains(&key_groups) {
                MetadataInconsistency::SubtaskRange {
                    operator: "count".into(),
                    subtask: 0,
                    range,
                    key_groups,
                }
            } else {
                MetadataInconsistency::KeyGroups { key_groups }
            };
            assert_eq!(m.check(), Err(expected.clone()));
            assert!(err.contains(&expected.to_string()), "{err}");
        }
    }

    #[tokio::test]
    async fn metadata_under_another_checkpoints_name_is_damaged() {
        let store = CheckpointStore::open("memory:///", "job").expect("memory store");
        store.write_metadata(&metadata(3)).await.expect("write");
        let json = serde_json::to_vec(&metadata(3)).expect("json");
        store
            .object_store()
            .put(&store.metadata_path(CheckpointId(9)), json.into())
            .await
            .expect("put");
        assert!(store.read_metadata(CheckpointId(3)).await.is_ok());
        let err = store
            .read_metadata(CheckpointId(9))
            .await
            .expect_err("moved")
            .to_string();
        assert!(err.contains("holds checkpoint 3, not 9"), "{err}");
    }
}
