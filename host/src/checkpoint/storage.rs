//! Reading and writing increment artifacts through `object_store`.
//!
//! Every store is one `Arc<dyn ObjectStore>` chosen by URL ([`open_store`]); nothing here
//! knows which backend it talks to. Reads of an artifact are ranged: the footer (a suffix
//! read), the index, and then only the sections of the key groups the reader owns, so a
//! subtask restoring part of a checkpoint reads only its part.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::format::{self, FOOTER_LEN, FormatError, GroupEntry};
use crate::ids::CheckpointId;
use crate::partition::KeyGroupRange;
use crate::state::{GroupIncrement, Increment, KeyedStateBackend, StateError};

/// A storage operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    #[error("invalid store URL {url:?}: {message}")]
    Url { url: String, message: String },
    #[error("{path}: {source}")]
    Store {
        path: Path,
        source: object_store::Error,
    },
    #[error("{path}: {source}")]
    Format { path: Path, source: FormatError },
    #[error("{path}: {message}")]
    Metadata { path: Path, message: String },
}

/// Opens the store named by `url` (`file:///dir`, `memory://`, `s3://bucket/prefix`,
/// `gs://bucket/prefix`, `az://container/prefix`) and returns it with the path prefix the URL
/// names. Backend settings (credentials, endpoints, `allow_http`) come from the environment
/// variables object_store documents for each backend, `AWS_*`, `GOOGLE_*` and `AZURE_*`,
/// lower-cased into its configuration keys: e.g. `AZURE_STORAGE_ACCOUNT_NAME`,
/// `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_ENDPOINT` or `AZURE_STORAGE_USE_EMULATOR`
/// (Azurite, whose address object_store itself reads from `AZURITE_BLOB_STORAGE_URL`);
/// `GOOGLE_SERVICE_ACCOUNT` (a key file, which may name `gcs_base_url` and `disable_oauth`),
/// `GOOGLE_SERVICE_ACCOUNT_KEY` or `GOOGLE_BASE_URL`.
pub fn open_store(url: &str) -> Result<(Arc<dyn ObjectStore>, Path), StorageError> {
    open_store_with(url, [])
}

/// [`open_store`] with backend settings (`aws_endpoint`, `azure_storage_endpoint`,
/// `google_service_account_key`, ...) given here, which take precedence over the
/// environment's.
pub fn open_store_with(
    url: &str,
    settings: impl IntoIterator<Item = (String, String)>,
) -> Result<(Arc<dyn ObjectStore>, Path), StorageError> {
    let bad = |message: String| StorageError::Url {
        url: url.to_owned(),
        message,
    };
    let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    if parsed.scheme() == "file" {
        // object_store's local store wants the folder to exist.
        let dir = parsed
            .to_file_path()
            .map_err(|()| bad("not an absolute local path".into()))?;
        std::fs::create_dir_all(&dir)
            .map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
    }
    let options: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("AWS_") || k.starts_with("GOOGLE_") || k.starts_with("AZURE_")
        })
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .chain(settings)
        .collect();
    // The cloud stores make their HTTP clients here.
    crate::http::install_crypto();
    let (store, prefix) =
        object_store::parse_url_opts(&parsed, options).map_err(|e| bad(e.to_string()))?;
    Ok((Arc::from(store), prefix))
}

/// Writes an increment at `path`; returns the artifact's size in bytes.
pub async fn put_increment(
    store: &dyn ObjectStore,
    path: &Path,
    increment: &Increment,
) -> Result<u64, StorageError> {
    let bytes = format::encode(increment).map_err(|source| StorageError::Format {
        path: path.clone(),
        source,
    })?;
    let size = bytes.len() as u64;
    store
        .put(path, PutPayload::from(bytes))
        .await
        .map_err(|source| StorageError::Store {
            path: path.clone(),
            source,
        })?;
    Ok(size)
}

/// Reads the part of the increment at `path` that belongs to the key groups in `range`,
/// with ranged reads only, whole. A restore reads a chain window by window instead
/// ([`restore_chain`]).
pub async fn read_increment(
    store: &dyn ObjectStore,
    path: &Path,
    range: KeyGroupRange,
) -> Result<Increment, StorageError> {
    let layout = read_layout(store, path, range).await?;
    let groups = read_sections(store, path, &layout.entries).await?;
    Ok(Increment {
        checkpoint: layout.checkpoint,
        groups,
    })
}

/// What a reader needs of an increment before its sections: its checkpoint, and where the
/// sections of the key groups it asked for lie.
#[derive(Debug)]
pub struct IncrementLayout {
    pub checkpoint: CheckpointId,
    /// The sections of the groups asked for, in key-group order (which is file order).
    entries: Vec<GroupEntry>,
}

impl IncrementLayout {
    /// The sections in consecutive runs of at most `max_bytes` each (a longer section makes
    /// a run of its own); one empty run if there are none, so that every increment is seen.
    fn windows(&self, max_bytes: u64) -> Vec<&[GroupEntry]> {
        let mut windows = Vec::new();
        let mut start = 0;
        let mut bytes = 0u64;
        for (i, entry) in self.entries.iter().enumerate() {
            if i > start && bytes.saturating_add(entry.len) > max_bytes {
                windows.push(&self.entries[start..i]);
                start = i;
                bytes = 0;
            }
            bytes = bytes.saturating_add(entry.len);
        }
        windows.push(&self.entries[start..]);
        windows
    }
}

/// Reads the footer and the index of the increment at `path` (and checks its header): where
/// the sections of the key groups in `range` are.
pub async fn read_layout(
    store: &dyn ObjectStore,
    path: &Path,
    range: KeyGroupRange,
) -> Result<IncrementLayout, StorageError> {
    let store_err = |source| StorageError::Store {
        path: path.clone(),
        source,
    };
    let format_err = |source| StorageError::Format {
        path: path.clone(),
        source,
    };
    let tail = read_tail(store, path, FOOTER_LEN as u64)
        .await
        .map_err(store_err)?;
    let footer = format::read_footer(&tail).map_err(format_err)?;
    // The footer's numbers are as read: their sum may overflow.
    let index_end = footer
        .index_offset
        .checked_add(u64::from(footer.index_len))
        .ok_or_else(|| format_err(FormatError::Truncated("index out of bounds")))?;
    let index_range = footer.index_offset..index_end;
    let index_bytes = store
        .get_range(path, index_range)
        .await
        .map_err(store_err)?;
    let index = format::decode_index(&index_bytes, &footer).map_err(format_err)?;
    let entries: Vec<GroupEntry> = index.groups_in(range).cloned().collect();
    let header = store.get_range(path, 0..10).await.map_err(store_err)?;
    format::check_header(&header).map_err(format_err)?;
    Ok(IncrementLayout {
        checkpoint: index.checkpoint,
        entries,
    })
}

/// Reads the sections `entries` (consecutive, in file order) of the artifact at `path` and
/// decodes them.
async fn read_sections(
    store: &dyn ObjectStore,
    path: &Path,
    entries: &[GroupEntry],
) -> Result<Vec<GroupIncrement>, StorageError> {
    let format_err = |source| StorageError::Format {
        path: path.clone(),
        source,
    };
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return Ok(Vec::new());
    };
    // Sections lie in key-group order, so a run of groups is one run of bytes: read exactly
    // that (not coalesced with the header, which could pull in other groups' sections).
    let start = first.offset;
    let end = last
        .offset
        .checked_add(last.len)
        .ok_or_else(|| format_err(FormatError::Truncated("index out of bounds")))?;
    let run = store
        .get_range(path, start..end)
        .await
        .map_err(|source| StorageError::Store {
            path: path.clone(),
            source,
        })?;
    let section = |e: &GroupEntry| {
        let from = usize::try_from(e.offset.checked_sub(start)?).ok()?;
        let to = from.checked_add(usize::try_from(e.len).ok()?)?;
        (to <= run.len()).then(|| run.slice(from..to))
    };
    let sections = entries
        .iter()
        .map(|e| {
            section(e)
                .ok_or_else(|| format_err(FormatError::Truncated("index entries out of order")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    decode_groups(entries.to_vec(), sections)
        .await
        .map_err(format_err)
}

/// Reads the last `len` bytes of the object at `path`: one suffix read where the store serves
/// them. Azure Blob Storage has no suffix reads, and object_store refuses them with
/// `NotSupported` before sending anything; such a store gets a `head` for the size and a
/// bounded read instead.
async fn read_tail(store: &dyn ObjectStore, path: &Path, len: u64) -> object_store::Result<Bytes> {
    let suffix = GetOptions {
        range: Some(GetRange::Suffix(len)),
        ..GetOptions::default()
    };
    match store.get_opts(path, suffix).await {
        Ok(result) => result.bytes().await,
        Err(object_store::Error::NotSupported { .. }) => {
            let size = store.head(path).await?.size;
            store.get_range(path, size.saturating_sub(len)..size).await
        }
        Err(e) => Err(e),
    }
}

/// Restores into `backend` the key groups in `range` of the chain `paths` (oldest first).
///
/// The chain's indexes are read first, several at a time; then its sections, a window of at
/// most [`WINDOW_BYTES`] of one artifact at a time, each decoded on every core while the
/// window before it is applied (by key group, on every core too). So a restore holds the
/// state plus a few windows, never a whole artifact or chain, and a long chain's reads
/// overlap its decoding.
pub async fn restore_chain(
    store: &dyn ObjectStore,
    paths: &[Path],
    range: KeyGroupRange,
    backend: &mut KeyedStateBackend,
) -> Result<(), ChainError> {
    restore_chain_in_windows(store, paths, range, backend, WINDOW_BYTES).await
}

/// [`restore_chain`] with windows of at most `window_bytes` (tests use tiny ones).
async fn restore_chain_in_windows(
    store: &dyn ObjectStore,
    paths: &[Path],
    range: KeyGroupRange,
    backend: &mut KeyedStateBackend,
    window_bytes: u64,
) -> Result<(), ChainError> {
    let layouts: Vec<IncrementLayout> = futures::stream::iter(paths)
        .map(|path| read_layout(store, path, range))
        .buffered(CHAIN_READS)
        .try_collect()
        .await?;
    let windows = layouts
        .iter()
        .zip(paths)
        .enumerate()
        .flat_map(|(i, (layout, path))| {
            layout
                .windows(window_bytes)
                .into_iter()
                .map(move |entries| (i, path, entries))
        });
    let mut decoded = futures::stream::iter(windows)
        .map(|(i, path, entries)| async move {
            read_sections(store, path, entries)
                .await
                .map(|groups| (i, groups))
        })
        .buffered(WINDOWS_AHEAD);
    let apply_err = |i: usize, error| ChainError::Apply {
        path: paths.get(i).cloned().unwrap_or_default(),
        error,
    };
    let mut restoring = backend.restoring().map_err(|error| apply_err(0, error))?;
    while let Some((i, groups)) = decoded.try_next().await? {
        restoring
            .apply(layouts[i].checkpoint, groups)
            .map_err(|error| apply_err(i, error))?;
    }
    Ok(())
}

/// Why a chain did not restore ([`restore_chain`]).
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error(transparent)]
    Read(#[from] StorageError),
    #[error("cannot apply {path}: {error}")]
    Apply { path: Path, error: StateError },
}

/// Artifacts of a chain whose indexes are read at once.
const CHAIN_READS: usize = 4;

/// The most bytes of sections a restore reads and decodes as one window: large enough that
/// a window's groups keep every core busy and a remote store's requests stay few, small
/// enough that a few windows in flight are little beside the state they restore.
pub const WINDOW_BYTES: u64 = 8 << 20;

/// Windows read and decoded ahead of the one being applied.
const WINDOWS_AHEAD: usize = 2;

/// Decodes key-group sections on the blocking pool, split over the machine's cores: a
/// restore is bound by decoding, and sections are independent.
async fn decode_groups(
    entries: Vec<GroupEntry>,
    sections: Vec<Bytes>,
) -> Result<Vec<GroupIncrement>, FormatError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_task = entries.len().div_ceil(cores).max(1);
    let tasks: Vec<_> = entries
        .chunks(per_task)
        .zip(sections.chunks(per_task))
        .map(|(entries, sections)| {
            let (entries, sections) = (entries.to_vec(), sections.to_vec());
            tokio::task::spawn_blocking(move || {
                entries
                    .iter()
                    .zip(&sections)
                    .map(|(entry, bytes)| format::decode_group(bytes, entry))
                    .collect::<Result<Vec<_>, _>>()
            })
        })
        .collect();
    let mut groups = Vec::with_capacity(entries.len());
    for task in tasks {
        let decoded = task.await.map_err(|e| FormatError::Decode {
            what: "key-group sections".into(),
            message: format!("decoding panicked: {e}"),
        })??;
        groups.extend(decoded);
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubtaskIndex;
    use crate::partition::{KeyGroups, hash_key};
    use crate::state::{KeyRef, KeyedStateBackend, StateKind};

    fn increment() -> Increment {
        let groups = KeyGroups::new(32);
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let v = b.declare("v", StateKind::Value).expect("declare");
        for i in 0..500u32 {
            let key = format!("k{i}");
            b.value_set(
                v,
                KeyRef::new(key.as_bytes(), hash_key(key.as_bytes())),
                &[1; 100],
            )
            .expect("set");
        }
        b.snapshot()
    }

    async fn round_trip(url: &str) {
        let (store, prefix) = open_store(url).expect("open");
        let path = prefix.clone().join("chk-1").join("increment");
        let inc = increment();
        let size = put_increment(store.as_ref(), &path, &inc)
            .await
            .expect("put");
        assert!(size > 500 * 100);
        let all = KeyGroupRange { start: 0, end: 32 };
        assert_eq!(
            read_increment(store.as_ref(), &path, all)
                .await
                .expect("read"),
            inc
        );
        let part = KeyGroupRange { start: 8, end: 16 };
        let read = read_increment(store.as_ref(), &path, part)
            .await
            .expect("read part");
        assert!(!read.groups.is_empty() && read.groups.iter().all(|g| part.contains(g.group)));
    }

    /// A chain of three increments over value, map and list states, with removals and
    /// clears, written to `store`: the backend that wrote it and the artifacts' paths.
    async fn chain(store: &dyn ObjectStore) -> (KeyedStateBackend, Vec<Path>) {
        let groups = KeyGroups::new(32);
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let v = b.declare("v", StateKind::Value).expect("declare");
        let m = b.declare("m", StateKind::Map).expect("declare");
        let l = b.declare("l", StateKind::List).expect("declare");
        let mut paths = Vec::new();
        for round in 0..3u32 {
            // Enough keys for a batch to be applied on more than one core.
            for i in 0..12_000u32 {
                let key = format!("k{i}");
                let key = KeyRef::new(key.as_bytes(), hash_key(key.as_bytes()));
                match (i + round) % 5 {
                    0 => b.value_remove(v, key).expect("remove"),
                    1 => b.map_clear(m, key).expect("clear"),
                    _ => b.value_set(v, key, &[round as u8; 40]).expect("set"),
                }
                if i % 3 == 0 {
                    b.map_put(m, key, &round.to_le_bytes(), &[7; 30])
                        .expect("put");
                    b.list_append(l, key, &[round as u8]).expect("append");
                }
            }
            let path = Path::from(format!("chain/{round}.inc"));
            put_increment(store, &path, &b.snapshot())
                .await
                .expect("put");
            paths.push(path);
        }
        (b, paths)
    }

    #[tokio::test]
    async fn a_chain_restored_in_windows_of_any_size_equals_the_state_that_wrote_it() {
        let (store, _) = open_store("memory:///").expect("open");
        let (written, paths) = chain(store.as_ref()).await;
        let groups = KeyGroups::new(32);
        for (range, window) in [
            (groups.range_of(SubtaskIndex(0), 1), WINDOW_BYTES),
            (groups.range_of(SubtaskIndex(0), 1), 1),
            (groups.range_of(SubtaskIndex(0), 1), 50_000),
            (groups.range_of(SubtaskIndex(1), 3), 1),
        ] {
            let mut restored = KeyedStateBackend::new(groups, range);
            restore_chain_in_windows(store.as_ref(), &paths, range, &mut restored, window)
                .await
                .expect("restore");
            let mut expected = written.entries();
            expected.retain(|e| range.contains(e.group));
            assert_eq!(
                restored.entries(),
                expected,
                "range {range}, window {window}"
            );
            assert!(!expected.is_empty());
            assert_eq!(
                restored.chain_checkpoints().collect::<Vec<_>>(),
                written.chain_checkpoints().collect::<Vec<_>>(),
                "every increment is in the chain, even one with nothing in range"
            );
            // The one-batch path agrees.
            let mut whole = KeyedStateBackend::new(groups, range);
            for path in &paths {
                whole
                    .restore(
                        &read_increment(store.as_ref(), path, range)
                            .await
                            .expect("read"),
                    )
                    .expect("restore");
            }
            assert_eq!(whole.entries(), expected);
            assert_eq!(whole.live_bytes(), restored.live_bytes());
            assert_eq!(whole.aged_keys(), restored.aged_keys());
        }
    }

    #[tokio::test]
    async fn round_trips_through_memory_and_local_disk() {
        round_trip("memory:///").await;
        let dir = tempfile::tempdir().expect("tempdir");
        round_trip(&format!("file://{}/store", dir.path().display())).await;
    }

    #[tokio::test]
    async fn a_footer_whose_index_ends_past_u64_is_an_error() {
        let (store, _) = open_store("memory:///").expect("open");
        let path = Path::from("increment");
        let mut bytes = format::encode(&increment()).expect("encode");
        let footer = bytes.len() - FOOTER_LEN;
        bytes[footer..footer + 8].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        store.put(&path, bytes.into()).await.expect("put");
        let all = KeyGroupRange { start: 0, end: 32 };
        let err = read_increment(store.as_ref(), &path, all)
            .await
            .expect_err("refused");
        assert!(err.to_string().contains("index out of bounds"), "{err}");
    }

    #[test]
    fn bad_urls_are_clear_errors() {
        let err = open_store("not a url").expect_err("refused").to_string();
        assert!(err.contains("invalid store URL"), "{err}");
        let err = open_store("ftp://x/y").expect_err("refused").to_string();
        assert!(err.contains("ftp://x/y"), "{err}");
    }

    #[tokio::test]
    async fn a_partial_restore_reads_only_its_key_groups_bytes() {
        use std::sync::atomic::Ordering;

        use crate::checkpoint::instrumented_store::{Faults, InstrumentedStore};

        let (inner, _) = open_store("memory:///").expect("open");
        let store = InstrumentedStore::new(inner, Faults::default());
        let stats = store.stats();
        let path = Path::from("increment");
        let inc = increment();
        let size = put_increment(&store, &path, &inc).await.expect("put");
        let quarter = KeyGroupRange { start: 0, end: 8 };
        let read = read_increment(&store, &path, quarter).await.expect("read");
        let own: u64 = format::encode(&Increment {
            checkpoint: inc.checkpoint,
            groups: read.groups.clone(),
        })
        .expect("encode")
        .len() as u64;
        let bytes_read = stats.bytes_read.load(Ordering::Relaxed);
        // Its sections, plus header, index and footer: about a quarter, never the whole.
        assert!(bytes_read < size / 2, "read {bytes_read} of {size} bytes");
        assert!(bytes_read >= own - 64, "read {bytes_read}, own part {own}");
    }

    /// An in-memory store that refuses suffix reads as object_store's Azure client does:
    /// `NotSupported`, before anything is sent.
    #[derive(Debug)]
    struct NoSuffixReads(object_store::memory::InMemory);

    impl std::fmt::Display for NoSuffixReads {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "NoSuffixReads")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for NoSuffixReads {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.0.put_opts(location, payload, opts).await
        }

        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }

        async fn get_opts(
            &self,
            location: &Path,
            options: GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            if let Some(GetRange::Suffix(_)) = options.range {
                return Err(object_store::Error::NotSupported {
                    source: "this store has no suffix reads".into(),
                });
            }
            self.0.get_opts(location, options).await
        }

        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            self.0.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.0.list(prefix)
        }

        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.0.list_with_delimiter(prefix).await
        }

        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.0.copy_opts(from, to, options).await
        }
    }

    #[tokio::test]
    async fn a_store_without_suffix_reads_still_reads_increments() {
        let store = NoSuffixReads(object_store::memory::InMemory::new());
        let path = Path::from("increment");
        let inc = increment();
        put_increment(&store, &path, &inc).await.expect("put");
        let all = KeyGroupRange { start: 0, end: 32 };
        let read = read_increment(&store, &path, all).await.expect("read");
        assert_eq!(read, inc);
        let part = KeyGroupRange { start: 8, end: 16 };
        let read = read_increment(&store, &path, part)
            .await
            .expect("read part");
        assert!(!read.groups.is_empty() && read.groups.iter().all(|g| part.contains(g.group)));
        // A missing artifact is still `NotFound`, from the `head`.
        let missing = read_increment(&store, &Path::from("missing"), all).await;
        assert!(
            matches!(
                missing,
                Err(StorageError::Store {
                    source: object_store::Error::NotFound { .. },
                    ..
                })
            ),
            "{missing:?}"
        );
    }

    #[tokio::test]
    async fn injected_faults_surface_as_store_errors() {
        use crate::checkpoint::instrumented_store::{Faults, InstrumentedStore};

        let (inner, _) = open_store("memory:///").expect("open");
        let faults = Faults {
            error_rate: 1.0,
            ..Faults::default()
        };
        let store = InstrumentedStore::new(inner, faults);
        let err = put_increment(&store, &Path::from("x"), &increment())
            .await
            .expect_err("fault");
        assert!(err.to_string().contains("injected fault in put"), "{err}");
        assert_eq!(
            store
                .stats()
                .injected_errors
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }
}
