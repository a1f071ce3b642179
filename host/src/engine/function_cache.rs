//! [`FunctionCache`]: Cranelift's incremental compilation cache, kept on disk between
//! `weir build`s.
//!
//! A rebuilt component whose bytes changed misses the component cache (`cache.rs`) and is
//! compiled again. For a Python or JavaScript operator nearly all of it is the interpreter,
//! which did not change: only its memory snapshot did. Cranelift can reuse the machine code
//! of every function whose body is the same as one it compiled before, given a key-value
//! store of those results (wasmtime's `CacheStore`). This is that store: a pack file per
//! kind of project (`functions/<name>.pack`), read whole when `weir build` starts and
//! written back after it with the entries this build used or made, so that its size stays
//! that of one component's code. A rebuilt Python operator then compiles in about a fifth of
//! the time.
//!
//! The pack is a cache: a missing, stale or damaged one costs a full compile and nothing
//! else (Cranelift checks each entry against the function it is for, and a short or garbled
//! file is read as empty). Two builds at once each write a whole pack by rename; the last
//! one wins.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The first bytes of a pack: its format, and the wasmtime that wrote it (Cranelift's keys
/// and artifacts are only good within one version).
fn header() -> Vec<u8> {
    format!(
        "weir-function-cache-v1 wasmtime {}\n",
        super::cache::wasmtime_version()
    )
    .into_bytes()
}

/// The incremental compilation cache of one kind of project.
#[derive(Debug)]
pub struct FunctionCache {
    path: PathBuf,
    /// What the pack held when it was read; read concurrently by compile threads.
    loaded: HashMap<Vec<u8>, Vec<u8>>,
    /// Keys of `loaded` that this build used, to keep them in the next pack.
    used: Mutex<HashSet<Vec<u8>>>,
    /// What this build compiled anew.
    inserted: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
}

impl FunctionCache {
    /// The cache `name` (a language, say) in `dir`, read from its pack if there is one.
    pub fn open(dir: &Path, name: &str) -> Self {
        let path = dir.join("functions").join(format!("{name}.pack"));
        let loaded = std::fs::read(&path)
            .ok()
            .and_then(|bytes| parse(&bytes))
            .unwrap_or_default();
        Self {
            path,
            loaded,
            used: Mutex::default(),
            inserted: Mutex::default(),
        }
    }

    /// Writes the pack: the entries this build used or made. Best effort: a cache that
    /// cannot be written costs the next build its speed, not its result.
    pub fn save(&self) {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let inserted = self.inserted.lock().unwrap_or_else(|e| e.into_inner());
        // Nothing compiled (the output was up to date, or the component cache had it): the
        // pack stays as it is.
        let compiled = !inserted.is_empty() || !used.is_empty();
        if !compiled || (inserted.is_empty() && used.len() == self.loaded.len()) {
            return;
        }
        let entries = used
            .iter()
            .filter_map(|key| self.loaded.get_key_value(key))
            .chain(inserted.iter());
        if let Err(e) = write_pack(&self.path, entries) {
            tracing::debug!(path = %self.path.display(), "cannot write the function cache: {e}");
        }
    }

    /// Entries read from the pack.
    pub fn len(&self) -> usize {
        self.loaded.len()
    }

    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty()
    }
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        if let Some(value) = self.loaded.get(key) {
            self.used
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.to_vec());
            return Some(Cow::Borrowed(value));
        }
        let inserted = self.inserted.lock().unwrap_or_else(|e| e.into_inner());
        inserted.get(key).map(|value| Cow::Owned(value.clone()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        self.inserted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_vec(), value);
        true
    }
}

/// A pack's entries: after the header, `(key length, key, value length, value)` with
/// lengths as little-endian u32. `None` for a pack of another format or version, or cut
/// short.
fn parse(bytes: &[u8]) -> Option<HashMap<Vec<u8>, Vec<u8>>> {
    let mut rest = bytes.strip_prefix(header().as_slice())?;
    let take = |rest: &mut &[u8]| -> Option<Vec<u8>> {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let item = tail.get(..len)?.to_vec();
        *rest = &tail[len..];
        Some(item)
    };
    let mut entries = HashMap::new();
    while !rest.is_empty() {
        let key = take(&mut rest)?;
        let value = take(&mut rest)?;
        entries.insert(key, value);
    }
    Some(entries)
}

fn write_pack<'a>(
    path: &Path,
    entries: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let (temporary, file) = super::cache::tempfile_in(dir)?;
    let written = (|| {
        let mut out = std::io::BufWriter::new(file);
        out.write_all(&header())?;
        for (key, value) in entries {
            for item in [key, value] {
                let len = u32::try_from(item.len()).map_err(std::io::Error::other)?;
                out.write_all(&len.to_le_bytes())?;
                out.write_all(item)?;
            }
        }
        out.flush()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        // Best effort: the error is what the caller reports.
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use wasmtime::CacheStore as _;

    use super::*;

    #[test]
    fn a_pack_keeps_what_a_build_used_or_made_and_drops_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = FunctionCache::open(dir.path(), "python");
        assert!(first.is_empty());
        assert!(first.insert(b"a", b"code of a".to_vec()));
        assert!(first.insert(b"b", b"code of b".to_vec()));
        assert_eq!(first.get(b"a").as_deref(), Some(&b"code of a"[..]));
        first.save();

        // The next build uses `a` and makes `c`: `b` goes.
        let second = FunctionCache::open(dir.path(), "python");
        assert_eq!(second.len(), 2);
        assert_eq!(second.get(b"a").as_deref(), Some(&b"code of a"[..]));
        second.insert(b"c", b"code of c".to_vec());
        second.save();
        let third = FunctionCache::open(dir.path(), "python");
        assert_eq!(third.len(), 2);
        assert!(third.get(b"b").is_none());
        assert_eq!(third.get(b"c").as_deref(), Some(&b"code of c"[..]));
        // A build that compiled nothing leaves the pack as it is.
        FunctionCache::open(dir.path(), "python").save();
        assert_eq!(FunctionCache::open(dir.path(), "python").len(), 2);
        // Other names are other packs.
        assert!(FunctionCache::open(dir.path(), "javascript").is_empty());
    }

    #[test]
    fn a_damaged_or_foreign_pack_reads_as_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FunctionCache::open(dir.path(), "python");
        cache.insert(b"key", vec![7; 100]);
        cache.save();
        let path = dir.path().join("functions/python.pack");
        let bytes = std::fs::read(&path).expect("pack");
        std::fs::write(&path, &bytes[..bytes.len() - 1]).expect("cut");
        assert!(FunctionCache::open(dir.path(), "python").is_empty());
        std::fs::write(&path, b"weir-function-cache-v0 wasmtime 1.0.0\n").expect("old");
        assert!(FunctionCache::open(dir.path(), "python").is_empty());
    }
}
