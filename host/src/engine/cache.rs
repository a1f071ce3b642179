//! The on-disk cache of precompiled components.
//!
//! Compiling a component costs from milliseconds (small Rust operators) to seconds (a Python
//! interpreter inside); loading a precompiled artifact by mmap costs about a millisecond. The
//! cache key is a SHA-256 over the component's bytes, wasmtime's version and the engine's
//! compatibility hash (target, tunables, features), so a changed component or engine setting
//! never loads a stale artifact.
//!
//! Hashing is the one cost of a cached start that grows with the component (a Python
//! component is 35 MB: about 15 ms of SHA-256). So the cache also remembers, under `files/`,
//! the key of each component file it hashed, by the file's identity: its path, device, inode,
//! size, and modification and change times. A file that was not written since is known by
//! its identity without being read. A write changes the change time, which no one can set
//! back; the memo trusts it as build tools trust modification times: a file rewritten at the
//! same path, inode and size within one tick of the kernel's file clock (a few milliseconds)
//! after its previous write would keep its identity.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

/// A directory of precompiled components, named by cache key.
#[derive(Clone, Debug)]
pub struct ComponentCache {
    dir: PathBuf,
}

impl ComponentCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The default location: `$WEIR_CACHE_DIR`, else `$XDG_CACHE_HOME/weir/components`, else
    /// `~/.cache/weir/components`; `None` if none of them can be determined.
    pub fn default_location() -> Option<Self> {
        if let Some(dir) = std::env::var_os("WEIR_CACHE_DIR") {
            return Some(Self::new(dir));
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
        Some(Self::new(base.join("weir").join("components")))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cache key of `bytes` compiled by `engine`.
    pub fn key(engine: &wasmtime::Engine, bytes: &[u8]) -> String {
        let mut hasher = DigestHasher(Sha256::new());
        hasher.0.update(b"weir-component-cache-v1\0");
        hasher.0.update(wasmtime_version().as_bytes());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        hasher.0.update(bytes);
        hasher
            .0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cwasm"))
    }

    /// The key of the component file at `path` as remembered from an earlier load, if the
    /// file was not written since and its artifact is still here.
    pub fn remembered_key(&self, engine: &wasmtime::Engine, path: &Path) -> Option<String> {
        let identity = FileIdentity::of(path)?;
        let key = std::fs::read_to_string(self.memo_path(engine, &identity)).ok()?;
        let key = key.trim();
        (key.len() == 64
            && key.bytes().all(|b| b.is_ascii_hexdigit())
            && self.path_of(key).exists())
        .then(|| key.to_owned())
    }

    /// Remembers `key` as the key of the file at `path` as `identity` saw it (taken before the
    /// file was read, so that a write while reading leaves the memo with an identity that no
    /// longer matches). Failures only cost a hash later.
    pub fn remember_key(&self, engine: &wasmtime::Engine, identity: &FileIdentity, key: &str) {
        let memo = self.memo_path(engine, identity);
        let result = (|| -> std::io::Result<()> {
            let dir = memo.parent().unwrap_or(&self.dir);
            std::fs::create_dir_all(dir)?;
            let mut tmp = tempfile_in(dir)?;
            tmp.1.write_all(key.as_bytes())?;
            std::fs::rename(&tmp.0, &memo)
        })();
        if let Err(e) = result {
            tracing::debug!(memo = %memo.display(), "cannot remember a component's key: {e}");
        }
    }

    fn memo_path(&self, engine: &wasmtime::Engine, identity: &FileIdentity) -> PathBuf {
        let mut hasher = DigestHasher(Sha256::new());
        hasher.0.update(b"weir-component-file-v1\0");
        hasher.0.update(wasmtime_version().as_bytes());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        identity.hash(&mut hasher);
        let name: String = hasher
            .0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.dir.join("files").join(name)
    }

    /// The cached component for `key`, if present and loadable. A corrupt or incompatible
    /// artifact is reported, removed and treated as a miss.
    pub fn get(&self, engine: &wasmtime::Engine, key: &str) -> Option<Component> {
        let path = self.path_of(key);
        if !path.exists() {
            return None;
        }
        // SAFETY: `deserialize_file` trusts the file to be an artifact that wasmtime itself
        // produced. Only `put` writes into this directory, under a key that covers the exact
        // component bytes and engine configuration, via an atomic rename, so a file here is
        // either absent or complete. The cache directory must not be writable by untrusted
        // users; that is documented for operators of `weir serve`.
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize_file(engine, &path) };
        match loaded {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), "discarding unusable cached component: {e:#}");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores a compiled component. Failures only cost a recompilation later, so they are
    /// logged, not returned.
    pub fn put(&self, key: &str, component: &Component) {
        let result = (|| -> anyhow::Result<()> {
            let bytes = component.serialize()?;
            std::fs::create_dir_all(&self.dir)?;
            let mut tmp = tempfile_in(&self.dir)?;
            tmp.1.write_all(&bytes)?;
            tmp.1.sync_all()?;
            std::fs::rename(&tmp.0, self.path_of(key))?;
            Ok(())
        })();
        if let Err(e) = result {
            tracing::warn!(dir = %self.dir.display(), "cannot cache a compiled component: {e:#}");
        }
    }
}

/// What identifies a file's contents without reading them, for [`ComponentCache`]'s memo:
/// its absolute path and the metadata any write changes.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct FileIdentity {
    path: PathBuf,
    metadata: [i64; 7],
}

impl FileIdentity {
    /// The identity of the file at `path` now; `None` where it cannot be told (not Unix, no
    /// metadata), which only means hashing the file.
    pub fn of(path: &Path) -> Option<Self> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let path = std::path::absolute(path).ok()?;
            let m = std::fs::metadata(&path).ok()?;
            let signed = |n: u64| i64::try_from(n).ok();
            Some(Self {
                metadata: [
                    signed(m.dev())?,
                    signed(m.ino())?,
                    signed(m.size())?,
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec(),
                ],
                path,
            })
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            None
        }
    }
}

/// A uniquely named temporary file in `dir` (renamed into place by the caller).
pub(super) fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let name = format!(
        ".tmp-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let path = dir.join(name);
    let file = std::fs::File::create(&path)?;
    Ok((path, file))
}

pub(super) fn wasmtime_version() -> &'static str {
    // wasmtime's version is part of the key, so an upgrade never loads an old artifact
    // (the compatibility hash also covers it; this is belt and braces).
    "wasmtime-48"
}

/// Feeds `Hash` implementations into a SHA-256.
struct DigestHasher(Sha256);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        // Only `write` is used; the digest is read from the inner hasher.
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
