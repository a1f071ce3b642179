//! The staging folder `<project>/.weir-build/`: the WIT and the SDKs the `weir` binary
//! embeds, written out for the toolchains, and the lock that keeps two builds of a project
//! from sharing it.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::{BuildError, Project};

/// `wit/operator.wit`: the world every build targets.
pub(super) const WIT: &str = include_str!("../../../wit/operator.wit");
/// The Python SDK's files, staged as the package `weir_sdk` (paths in the staging folder).
pub(super) const PYTHON_SDK: &[(&str, &str)] = &[
    (
        "weir_sdk/__init__.py",
        include_str!("../../../guest-sdk-python/weir_sdk/__init__.py"),
    ),
    (
        "weir_sdk/_codec.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_codec.py"),
    ),
    (
        "weir_sdk/_emitter.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_emitter.py"),
    ),
    (
        "weir_sdk/_errors.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_errors.py"),
    ),
    (
        "weir_sdk/_export.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_export.py"),
    ),
    (
        "weir_sdk/_failures.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_failures.py"),
    ),
    (
        "weir_sdk/_guest_log.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_guest_log.py"),
    ),
    (
        "weir_sdk/_logging.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_logging.py"),
    ),
    (
        "weir_sdk/_operator.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_operator.py"),
    ),
    (
        "weir_sdk/_records.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_records.py"),
    ),
    (
        "weir_sdk/_runtime.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_runtime.py"),
    ),
    (
        "weir_sdk/_timer.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_timer.py"),
    ),
    (
        "weir_sdk/_versions.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_versions.py"),
    ),
    // The runner: imports the operator from the files packed into the component.
    (
        "weir_sdk/_bundle.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_bundle.py"),
    ),
    // Imports, at build time, what an operator may import later.
    (
        "weir_sdk/_preload.py",
        include_str!("../../../guest-sdk-python/weir_sdk/_preload.py"),
    ),
    (
        "weir_sdk/windows.py",
        include_str!("../../../guest-sdk-python/weir_sdk/windows.py"),
    ),
];
/// The JavaScript SDK, staged beside the operator's modules (paths in the staging folder's
/// `js/`): the entry `weir.js` operators import, its modules in `weir/`, and the windows
/// library `windows.js`.
pub(super) const JS_SDK: &[(&str, &str)] = &[
    ("weir.js", include_str!("../../../guest-sdk-js/weir.js")),
    (
        "windows.js",
        include_str!("../../../guest-sdk-js/windows.js"),
    ),
    (
        "weir/bytes.js",
        include_str!("../../../guest-sdk-js/weir/bytes.js"),
    ),
    (
        "weir/context.js",
        include_str!("../../../guest-sdk-js/weir/context.js"),
    ),
    (
        "weir/emitter.js",
        include_str!("../../../guest-sdk-js/weir/emitter.js"),
    ),
    (
        "weir/errors.js",
        include_str!("../../../guest-sdk-js/weir/errors.js"),
    ),
    (
        "weir/log.js",
        include_str!("../../../guest-sdk-js/weir/log.js"),
    ),
    (
        "weir/operator.js",
        include_str!("../../../guest-sdk-js/weir/operator.js"),
    ),
    (
        "weir/records.js",
        include_str!("../../../guest-sdk-js/weir/records.js"),
    ),
    (
        "weir/runtime.js",
        include_str!("../../../guest-sdk-js/weir/runtime.js"),
    ),
    (
        "weir/timer.js",
        include_str!("../../../guest-sdk-js/weir/timer.js"),
    ),
];
/// The C SDK, staged as `weir.h`.
pub(super) const C_SDK: &str = include_str!("../../../guest-sdk-c/weir.h");

/// The world of `wit/operator.wit` that operators implement.
pub(super) const WORLD: &str = "operator";

/// The staging folder's name inside a project.
pub(super) const STAGING_DIR: &str = ".weir-build";
const LOCK_FILE: &str = ".lock";

/// A project's staging folder, locked for one build.
#[derive(Debug)]
pub(super) struct Staging {
    dir: PathBuf,
    /// Held for the life of the build: `File::lock` is released when the file closes.
    _lock: File,
}

impl Staging {
    /// Creates the staging folder if needed and takes its lock, waiting for another build of
    /// the same project to finish.
    pub(super) fn lock(project: &Project) -> Result<Self, BuildError> {
        let dir = project.dir().join(STAGING_DIR);
        std::fs::create_dir_all(&dir).map_err(BuildError::io("cannot create", &dir))?;
        let path = dir.join(LOCK_FILE);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(BuildError::io("cannot open", &path))?;
        lock.lock().map_err(BuildError::io("cannot lock", &path))?;
        Ok(Self { dir, _lock: lock })
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes what an earlier build staged (keeping the lock file).
    pub(super) fn clear(&self) -> Result<(), BuildError> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(BuildError::io("cannot read", &self.dir))?;
        for entry in entries {
            let entry = entry.map_err(BuildError::io("cannot read", &self.dir))?;
            if entry.file_name() == LOCK_FILE {
                continue;
            }
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(BuildError::io("cannot remove", &path))?;
        }
        Ok(())
    }

    /// Writes `text` to `relative` inside the staging folder, creating folders; returns the
    /// path.
    pub(super) fn write(&self, relative: &str, text: &str) -> Result<PathBuf, BuildError> {
        let path = self.dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(BuildError::io("cannot create", parent))?;
        }
        std::fs::write(&path, text).map_err(BuildError::io("cannot write", &path))?;
        Ok(path)
    }

    /// Writes the WIT to `wit/operator.wit` and returns the folder.
    pub(super) fn write_wit(&self) -> Result<PathBuf, BuildError> {
        let path = self.write("wit/operator.wit", WIT)?;
        Ok(path.parent().map(Path::to_owned).unwrap_or(path))
    }

    /// Copies `source` to `relative` inside the staging folder, creating folders.
    pub(super) fn copy(&self, source: &Path, relative: &Path) -> Result<PathBuf, BuildError> {
        let path = self.dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(BuildError::io("cannot create", parent))?;
        }
        std::fs::copy(source, &path).map_err(BuildError::io("cannot copy", source))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_of_the_python_sdk_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk-python/weir_sdk");
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .expect("read the SDK")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|name| name.ends_with(".py"))
            .map(|name| format!("weir_sdk/{name}"))
            .collect();
        found.sort();
        let mut embedded: Vec<&str> = PYTHON_SDK.iter().map(|(path, _)| *path).collect();
        embedded.sort();
        assert_eq!(
            embedded, found,
            "PYTHON_SDK must list every module of weir_sdk/"
        );
    }

    #[test]
    fn every_module_of_the_javascript_sdk_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk-js");
        let mut found = Vec::new();
        for folder in ["", "weir/"] {
            for entry in std::fs::read_dir(root.join(folder)).expect("read the SDK") {
                let name = entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned();
                if name.ends_with(".js") {
                    found.push(format!("{folder}{name}"));
                }
            }
        }
        found.sort();
        let mut embedded: Vec<&str> = JS_SDK.iter().map(|(path, _)| *path).collect();
        embedded.sort();
        assert_eq!(
            embedded, found,
            "JS_SDK must list every module of guest-sdk-js/"
        );
    }
}
