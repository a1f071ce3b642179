//! Loading operator components and checking them against Weir's world.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::Component;

use super::cache::FileIdentity;
use super::{ComponentCache, Engine, bundle};
use crate::bindings::{OperatorPre, PACKAGE, PROCESSOR_EXPORT, WEIR_IMPORTS, WORLD};
use crate::guest::GuestState;

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("cannot read component {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a WebAssembly component ({what}); build operators with `cargo build --target wasm32-wasip2` or another component toolchain"
    )]
    NotAComponent { path: PathBuf, what: &'static str },
    #[error("{path} is not a valid WebAssembly component: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("{path} does not implement the world {WORLD}: {}", problems.join("; "))]
    WrongWorld {
        path: PathBuf,
        problems: Vec<String>,
    },
}

impl LoadError {
    /// The same error about the component at `path` (a build checks a temporary file before
    /// it moves it to the path the user named).
    pub fn with_path(self, path: &Path) -> Self {
        let path = path.to_owned();
        match self {
            Self::Read { source, .. } => Self::Read { path, source },
            Self::NotAComponent { what, .. } => Self::NotAComponent { path, what },
            Self::Invalid { reason, .. } => Self::Invalid { path, reason },
            Self::WrongWorld { problems, .. } => Self::WrongWorld { path, problems },
        }
    }
}

/// A loaded, type-checked component, ready to instantiate once per subtask.
#[derive(Clone)]
pub struct OperatorComponent {
    pre: OperatorPre<GuestState>,
    path: PathBuf,
    /// The files packed at its end (`bundle.rs`), which its `bundle` import returns; empty
    /// for a component without them.
    bundle: Arc<[u8]>,
}

impl std::fmt::Debug for OperatorComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorComponent")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl OperatorComponent {
    pub fn pre(&self) -> &OperatorPre<GuestState> {
        &self.pre
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The packed files, in the encoding of the `bundle` import.
    pub fn bundle(&self) -> &Arc<[u8]> {
        &self.bundle
    }
}

pub(super) fn load(engine: &Engine, path: &Path) -> Result<OperatorComponent, LoadError> {
    let started = Instant::now();
    // A component file loaded before and not written since: its artifact, unread and unhashed.
    let remembered = engine.cache().and_then(|cache| {
        let key = cache.remembered_key(engine.wasmtime(), path)?;
        cache.get(engine.wasmtime(), &key)
    });
    let read_error = |source| LoadError::Read {
        path: path.to_owned(),
        source,
    };
    let (component, bundle, cached) = match remembered {
        Some(component) => (component, bundle::read(path).map_err(read_error)?, true),
        None => {
            let identity = FileIdentity::of(path);
            let bytes = std::fs::read(path).map_err(read_error)?;
            check_header(path, &bytes)?;
            // The code alone is compiled and cached: components that differ only in their
            // packed files share one artifact.
            let (code, bundle) = bundle::split(&bytes);
            let (component, cached) = compile_or_reuse(engine, path, code, identity.as_ref())?;
            (component, bundle.to_vec(), cached)
        }
    };
    check_world(engine, path, &component)?;
    let instance_pre =
        engine
            .linker()
            .instantiate_pre(&component)
            .map_err(|e| LoadError::WrongWorld {
                path: path.to_owned(),
                problems: vec![format!("{e:#}")],
            })?;
    let pre = OperatorPre::new(instance_pre).map_err(|e| LoadError::WrongWorld {
        path: path.to_owned(),
        problems: vec![format!("{e:#}")],
    })?;
    tracing::debug!(path = %path.display(), cached, elapsed_ms = started.elapsed().as_secs_f64() * 1e3, "component loaded");
    Ok(OperatorComponent {
        pre,
        path: path.to_owned(),
        bundle: bundle.into(),
    })
}

/// Distinguishes "not Wasm at all" and "a core module" from a component before compiling, so
/// the message says what the file is.
fn check_header(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    let not = |what| {
        Err(LoadError::NotAComponent {
            path: path.to_owned(),
            what,
        })
    };
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return not("it does not start with the WebAssembly magic bytes");
    }
    match bytes[4..8] {
        [0x0d, 0x00, 0x01, 0x00] => Ok(()),
        [0x01, 0x00, 0x00, 0x00] => not("it is a core WebAssembly module, not a component"),
        _ => not("unknown WebAssembly version or layer"),
    }
}

/// The component of `bytes` from the cache, or compiled (and cached); the cache remembers
/// the key of the file `identity` names either way.
fn compile_or_reuse(
    engine: &Engine,
    path: &Path,
    bytes: &[u8],
    identity: Option<&FileIdentity>,
) -> Result<(Component, bool), LoadError> {
    let key = engine
        .cache()
        .map(|_| ComponentCache::key(engine.wasmtime(), bytes));
    let remember = |cache: &ComponentCache, key: &str| {
        if let Some(identity) = identity {
            cache.remember_key(engine.wasmtime(), identity, key);
        }
    };
    if let (Some(cache), Some(key)) = (engine.cache(), &key)
        && let Some(component) = cache.get(engine.wasmtime(), key)
    {
        remember(cache, key);
        return Ok((component, true));
    }
    let component = Component::new(engine.wasmtime(), bytes).map_err(|e| LoadError::Invalid {
        path: path.to_owned(),
        reason: format!("{e:#}"),
    })?;
    if let (Some(cache), Some(key)) = (engine.cache(), &key) {
        cache.put(key, &component);
        remember(cache, key);
    }
    Ok((component, false))
}

/// Names what is missing or foreign, before the linker's type check gives a terser message.
fn check_world(engine: &Engine, path: &Path, component: &Component) -> Result<(), LoadError> {
    let ty = component.component_type();
    let wasmtime = engine.wasmtime();
    let mut problems = Vec::new();
    let exports = ty.exports(wasmtime).map(|(name, _)| name);
    // The likely cause first: then what exactly does not match.
    if let Some(hint) = version_hint(exports.chain(ty.imports(wasmtime).map(|(name, _)| name))) {
        problems.push(hint);
    }
    if ty.get_export(wasmtime, PROCESSOR_EXPORT).is_none() {
        let exports: Vec<_> = ty
            .exports(wasmtime)
            .map(|(name, _)| name.to_owned())
            .collect();
        problems.push(format!(
            "it does not export `{PROCESSOR_EXPORT}` (it exports: {})",
            if exports.is_empty() {
                "nothing".to_owned()
            } else {
                exports.join(", ")
            }
        ));
    }
    for (name, _) in ty.imports(wasmtime) {
        if WEIR_IMPORTS.contains(&name) || name.starts_with("wasi:") {
            continue;
        }
        let why = if name.starts_with("weir:") {
            "which this Weir version does not provide"
        } else {
            "which Weir does not provide to operators"
        };
        problems.push(format!("it imports `{name}`, {why}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(LoadError::WrongWorld {
            path: path.to_owned(),
            problems,
        })
    }
}

/// Says so when the component names Weir's interfaces at another version than this host's:
/// it was built with another Weir's SDK or WIT.
fn version_hint<'a>(names: impl Iterator<Item = &'a str>) -> Option<String> {
    let (_, ours) = PACKAGE.split_once('@')?;
    let mut theirs: Vec<&str> = names
        .filter_map(|name| name.strip_prefix("weir:operator/")?.split_once('@'))
        .map(|(_, version)| version)
        .filter(|version| *version != ours)
        .collect();
    theirs.sort_unstable();
    theirs.dedup();
    (!theirs.is_empty()).then(|| {
        format!(
            "it was built against weir:operator@{}, and this Weir implements {PACKAGE}: \
             rebuild it with this Weir (`weir build`), or with its SDK and `wit/`",
            theirs.join(", @")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_version_a_component_was_built_against() {
        let old = [
            "weir:operator/processor@0.2.0",
            "weir:operator/state@0.2.0",
            "wasi:cli/stdout@0.2.0",
        ];
        let hint = version_hint(old.into_iter()).expect("a hint");
        assert!(
            hint.starts_with(
                "it was built against weir:operator@0.2.0, and this Weir implements weir:operator@0.6.0: rebuild it"
            ),
            "{hint}"
        );
        let current = [PROCESSOR_EXPORT, WEIR_IMPORTS[1], "wasi:cli/stdout@0.2.0"];
        assert_eq!(version_hint(current.into_iter()), None);
    }

    #[test]
    fn header_check_names_what_the_file_is() {
        let p = Path::new("x.wasm");
        let msg = |b: &[u8]| check_header(p, b).expect_err("refused").to_string();
        assert!(msg(b"hello world").contains("magic bytes"));
        assert!(msg(b"\0asm\x01\0\0\0").contains("core WebAssembly module"));
        assert!(check_header(p, b"\0asm\x0d\0\x01\0").is_ok());
    }
}
