//! Savepoints: a completed checkpoint copied out of the job's chain under a name, kept until
//! the user deletes it (DESIGN.md §8.4).
//!
//! ```text
//! <store prefix>/<job>/savepoints/<name>/state/<operator>/<subtask>/chk-….inc   copies
//! <store prefix>/<job>/savepoints/<name>/metadata.json                         written last
//! ```
//!
//! A savepoint shares no object with the chain: its artifacts are copies, under the same
//! paths relative to the savepoint's folder as the originals relative to the job's. So
//! retention, cleanup and orphan sweeps (which work under `state/` and `checkpoints/`) never
//! touch it, `--fresh` keeps it, and the folder copied to another store, or under another
//! job's folder, restores there. A restore of a savepoint reads those copies and owns none of
//! them: its subtasks write their state afresh at their first checkpoint
//! (`RestoreAssignment::detached`).

use std::collections::BTreeSet;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::checkpoint_store::{CheckpointStore, delete_if_present, parse_metadata};
use super::metadata::CheckpointMetadata;
use super::storage::StorageError;

/// The folder of all savepoints, under the job's.
const SAVEPOINTS: &str = "savepoints";
/// The object that completes a savepoint, in its folder.
const METADATA: &str = "metadata.json";
/// Copies and deletes in flight at once: enough to hide a remote store's latency.
const CONCURRENT: usize = 16;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SavepointError {
    #[error("{0:?} cannot name a savepoint: use letters, digits, '.', '_' and '-'")]
    BadName(String),
    #[error(
        "savepoint `{0}` already exists (delete it first with `weir checkpoints delete-savepoint`)"
    )]
    Exists(String),
    #[error("no savepoint `{name}` in {folder}")]
    NoSuch { name: String, folder: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Whether `name` may name a savepoint: one path segment of plain characters.
fn check_name(name: &str) -> Result<(), SavepointError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.starts_with('.') || !name.chars().all(plain) {
        return Err(SavepointError::BadName(name.to_owned()));
    }
    Ok(())
}

fn folder(store: &CheckpointStore, name: &str) -> Path {
    store.folder().clone().join(SAVEPOINTS).join(name)
}

fn store_error(path: &Path) -> impl Fn(object_store::Error) -> StorageError + '_ {
    move |source| StorageError::Store {
        path: path.clone(),
        source,
    }
}

/// Copies `checkpoint` (a completed checkpoint of the job in `store`) into the savepoint
/// `name`; its metadata is written last, so a savepoint that lists is whole. Returns how
/// many artifacts were copied. An artifact that retention deleted meanwhile fails the copy
/// (name a newer checkpoint then).
pub async fn create(
    store: &CheckpointStore,
    checkpoint: &CheckpointMetadata,
    name: &str,
) -> Result<usize, SavepointError> {
    check_name(name)?;
    if names(store).await?.iter().any(|n| n == name) {
        return Err(SavepointError::Exists(name.to_owned()));
    }
    let into = folder(store, name);
    let artifacts: BTreeSet<&str> = checkpoint.artifacts().map(|a| a.path.as_str()).collect();
    let objects = store.object_store();
    // Owned paths: the copies run in futures that a server's tasks may move between threads.
    let copies: Vec<(Path, Path)> = artifacts
        .iter()
        .map(|relative| {
            let to = Path::from_iter(into.parts().chain(Path::from(*relative).parts()));
            (store.resolve(relative), to)
        })
        .collect();
    futures::stream::iter(copies)
        .map(|(from, to)| {
            let objects = objects.clone();
            async move {
                objects
                    .copy(&from, &to)
                    .await
                    .map_err(|source| StorageError::Store { path: from, source })
            }
        })
        .buffer_unordered(CONCURRENT)
        .try_collect::<Vec<()>>()
        .await?;
    let path = into.join(METADATA);
    let json = serde_json::to_vec_pretty(checkpoint).map_err(|e| StorageError::Metadata {
        path: path.clone(),
        message: e.to_string(),
    })?;
    // Created, never overwritten: of two savepoints taken under one name at once, one wins
    // and the other is told (their copies are the same objects of the same checkpoint, or
    // the loser's are left for a `delete-savepoint`).
    match objects
        .put_opts(
            &path,
            PutPayload::from(json),
            PutOptions::from(PutMode::Create),
        )
        .await
    {
        Ok(_) => Ok(artifacts.len()),
        Err(object_store::Error::AlreadyExists { .. }) => {
            Err(SavepointError::Exists(name.to_owned()))
        }
        Err(source) => Err(StorageError::Store { path, source }.into()),
    }
}

/// The names of the job's savepoints (those whose metadata was written), sorted.
pub async fn names(store: &CheckpointStore) -> Result<Vec<String>, StorageError> {
    let prefix = store.folder().clone().join(SAVEPOINTS);
    let listing = store
        .object_store()
        .list_with_delimiter(Some(&prefix))
        .await
        .map_err(store_error(&prefix))?;
    let mut names = Vec::new();
    for folder in &listing.common_prefixes {
        let Some(name) = folder.filename() else {
            continue;
        };
        let metadata = folder.clone().join(METADATA);
        match store.object_store().head(&metadata).await {
            Ok(_) => names.push(name.to_owned()),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(source) => {
                return Err(StorageError::Store {
                    path: metadata,
                    source,
                });
            }
        }
    }
    names.sort();
    Ok(names)
}

/// The savepoint `name` as a checkpoint to restore: its artifacts named relative to the
/// job's folder (under the savepoint's), as a restore reads them.
pub async fn read(
    store: &CheckpointStore,
    name: &str,
) -> Result<CheckpointMetadata, SavepointError> {
    check_name(name)?;
    let path = folder(store, name).join(METADATA);
    let bytes = match store.object_store().get(&path).await {
        Ok(result) => result.bytes().await.map_err(store_error(&path))?,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(SavepointError::NoSuch {
                name: name.to_owned(),
                folder: store.locate(&store.folder().clone().join(SAVEPOINTS)),
            });
        }
        Err(source) => return Err(StorageError::Store { path, source }.into()),
    };
    let mut metadata = parse_metadata(&bytes, &store.locate(&path))?;
    for operator in &mut metadata.operators {
        for subtask in &mut operator.subtasks {
            for artifact in &mut subtask.chain {
                artifact.path = format!("{SAVEPOINTS}/{name}/{}", artifact.path);
            }
        }
    }
    Ok(metadata)
}

/// Deletes the savepoint `name`, its metadata first (a deletion cut short leaves copies no
/// savepoint lists, which a second deletion removes). Returns how many objects went.
pub async fn delete(store: &CheckpointStore, name: &str) -> Result<usize, SavepointError> {
    check_name(name)?;
    let into = folder(store, name);
    let objects: Vec<Path> = store
        .object_store()
        .list(Some(&into))
        .map_ok(|o| o.location)
        .try_collect()
        .await
        .map_err(store_error(&into))?;
    if objects.is_empty() {
        return Err(SavepointError::NoSuch {
            name: name.to_owned(),
            folder: store.locate(&store.folder().clone().join(SAVEPOINTS)),
        });
    }
    let metadata = into.join(METADATA);
    delete_if_present(store.object_store().as_ref(), &metadata).await?;
    let rest: Vec<&Path> = objects.iter().filter(|p| **p != metadata).collect();
    futures::stream::iter(rest)
        .map(|path| delete_if_present(store.object_store().as_ref(), path))
        .buffer_unordered(CONCURRENT)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(objects.len())
}

/// Whether `path` (relative to the job's folder) is a savepoint's object.
pub fn is_savepoint_object(store: &CheckpointStore, path: &Path) -> bool {
    path.prefix_match(store.folder())
        .and_then(|mut parts| parts.next())
        .is_some_and(|first| first.as_ref() == SAVEPOINTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_savepoint_name_is_one_plain_segment() {
        for good in ["before-upgrade", "v1.2", "a_b"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "a/b", "..", ".hidden", "sp 1", "x\\y"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
