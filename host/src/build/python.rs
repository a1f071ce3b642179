//! Python: a runner component made once by componentize-py, and each build's modules packed
//! into a copy of it.
//!
//! componentize-py takes ten seconds or more for any component (it compiles the CPython
//! interpreter with Cranelift to pre-initialise it, and the component imports the whole
//! standard library then), and nothing of that depends on the operator. So the component is
//! made of two parts:
//!
//! - the **runner**: componentize-py's component of the SDK's runner
//!   (`guest-sdk-python/weir_sdk/_bundle.py`) with the standard library and the SDK imported,
//!   built once per toolchain, WIT and SDK, and kept in the component cache's folder
//!   (`python-runners/<digest>.wasm`);
//! - the **bundle**: `operator.py` and the project's own modules (the `.py` files and
//!   packages beside it), as source, packed at the end of a copy of the runner
//!   (`host/src/engine/bundle.rs`). The runner imports them at `open`, `operator.py` as the
//!   module `weir_operator` (`operator` is a standard library module).
//!
//! A build is then a syntax check by a local CPython (`python_check.rs`), a copy, and a load
//! check: the host compiles the runner's code once (its artifact is cached by the code alone,
//! without the bundle), instantiates the component and calls `close` before `open`, which
//! imports the operator's modules: an exception at import (a missing name, a module that is
//! not there, no `Processor`) fails the build with Python's traceback, as componentize-py's
//! did.
//!
//! The component imports WASI, which the host grants as its sandbox allows (no files, no
//! environment, no sockets), so `print`, clocks and randomness work, and the `bundle` import.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::staging::{PYTHON_SDK, Staging, WIT};
use super::{BuildError, Language, Project, Tool, python_check};
use crate::engine::bundle::{self, BundledFile};
use crate::engine::{Engine, OperatorComponent};
use crate::guest::WasmOperator;

/// The world of `wit/operator.wit` the runner implements: the operator's, with `bundle`.
const RUNNER_WORLD: &str = "bundled-operator";
/// The application module componentize-py makes the runner of.
const RUNNER_MODULE: &str = "weir_runner";
/// Its source: the runner's `Processor`, then the standard library imported.
const RUNNER_SOURCE: &str =
    "\"\"\"The application module of Weir's Python runner: see weir_sdk._bundle.\"\"\"

from weir_sdk._bundle import Processor

__import__(\"weir_sdk._preload\", fromlist=[\"run\"]).run([])
";
/// How the runner says the operator's modules failed to import (`_bundle.py`'s `LOAD_FAILED`).
const LOAD_FAILED: &str = "operator.py cannot be loaded: ";
/// The folder of runners, in the component cache's folder.
const RUNNERS_DIR: &str = "python-runners";

pub(super) fn build(
    project: &Project,
    staging: &Staging,
    out: &Path,
    engine: &Engine,
) -> Result<(), BuildError> {
    let modules = project_modules(project.dir())?;
    let sources = source_files(project.dir(), &modules)?;
    python_check::check_syntax(project.dir(), &sources)?;
    let tool = Tool::ComponentizePy.find()?;
    let runner = runner(&tool, staging, engine)?;
    let mut files = Vec::with_capacity(sources.len());
    for relative in &sources {
        let path = project.dir().join(relative);
        let contents = std::fs::read(&path).map_err(BuildError::io("cannot read", &path))?;
        let name = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        files.push(BundledFile { name, contents });
    }
    let code = std::fs::read(&runner).map_err(BuildError::io("cannot read", &runner))?;
    let component = bundle::append(&code, &files).map_err(|e| BuildError::NoComponent {
        language: Language::Python,
        reason: e.to_string(),
    })?;
    std::fs::write(out, component).map_err(BuildError::io("cannot write", out))
}

/// Imports the operator's modules in an instance of the built `component` (see the module's
/// documentation): Python's exception, if one is raised, fails the build.
pub(super) fn check_loads(
    engine: &Engine,
    component: &OperatorComponent,
) -> Result<(), BuildError> {
    let failure =
        WasmOperator::close_unopened(engine, component).map_err(|e| BuildError::NoComponent {
            language: Language::Python,
            reason: format!("its runner trapped importing operator.py: {e:#}"),
        })?;
    match failure {
        Some(message) if message.starts_with(LOAD_FAILED) => Err(BuildError::PythonImport {
            report: message[LOAD_FAILED.len()..].to_owned(),
        }),
        _ => Ok(()),
    }
}

/// The runner for `tool` and this binary's WIT and SDK: from the cache, or made now with
/// componentize-py (and cached, where there is a cache).
fn runner(
    tool: &super::toolchain::FoundTool,
    staging: &Staging,
    engine: &Engine,
) -> Result<PathBuf, BuildError> {
    let digest = runner_digest(&tool.path);
    let dir = match engine.cache() {
        Some(cache) => cache.dir().join(RUNNERS_DIR),
        None => staging.dir().join(RUNNERS_DIR),
    };
    let path = dir.join(format!("{digest}.wasm"));
    if path.is_file() {
        return Ok(path);
    }
    tracing::info!(runner = %path.display(), "making the Python runner (once per toolchain and SDK)");
    std::fs::create_dir_all(&dir).map_err(BuildError::io("cannot create", &dir))?;
    let wit = staging.write_wit()?;
    for (file, text) in PYTHON_SDK {
        staging.write(file, text)?;
    }
    staging.write(&format!("{RUNNER_MODULE}.py"), RUNNER_SOURCE)?;
    // Written beside its final name, then renamed: builds running at once each make one, and
    // the last rename wins with a whole file.
    let partial = dir.join(format!(".{digest}.{}.partial", std::process::id()));
    let mut command = tool.command();
    command
        .arg("-d")
        .arg(&wit)
        .args(["-w", RUNNER_WORLD, "componentize", RUNNER_MODULE, "-p"])
        .arg(staging.dir())
        .arg("-o")
        .arg(&partial)
        .current_dir(staging.dir());
    let output = tool.output(&mut command)?;
    if !output.status.success() {
        let _ = std::fs::remove_file(&partial);
        eprint!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    tool.check(Language::Python, output.status)?;
    std::fs::rename(&partial, &path).map_err(BuildError::io("cannot write", &path))?;
    Ok(path)
}

/// What a runner is made of: the toolchain (its path, size and time, which a reinstall
/// changes), the WIT, the SDK and the runner module.
fn runner_digest(tool: &Path) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"weir-python-runner-v1\0");
    hasher.update(tool.as_os_str().as_encoded_bytes());
    if let Ok(meta) = std::fs::metadata(tool) {
        hasher.update(meta.len().to_le_bytes());
        if let Ok(modified) = meta.modified()
            && let Ok(since) = modified.duration_since(std::time::UNIX_EPOCH)
        {
            hasher.update(since.as_nanos().to_le_bytes());
        }
    }
    for text in [WIT, RUNNER_SOURCE]
        .into_iter()
        .chain(PYTHON_SDK.iter().flat_map(|(path, text)| [*path, *text]))
    {
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The operator's own modules: the Python modules and packages at the top of the project
/// folder, except `operator.py` itself and what is not part of an operator (tests, setup
/// scripts, hidden and build folders).
fn project_modules(dir: &Path) -> Result<Vec<String>, BuildError> {
    let entries = std::fs::read_dir(dir).map_err(BuildError::io("cannot read", dir))?;
    let mut modules = Vec::new();
    for entry in entries {
        let entry = entry.map_err(BuildError::io("cannot read", dir))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let module = if path.is_dir() && path.join("__init__.py").is_file() {
            name
        } else if let Some(stem) = name.strip_suffix(".py")
            && path.is_file()
        {
            stem.to_owned()
        } else {
            continue;
        };
        let identifier = module
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && module.chars().all(|c| c.is_alphanumeric() || c == '_');
        let not_an_operators = matches!(
            module.as_str(),
            "operator" | "setup" | "conftest" | "test" | "tests" | "weir_sdk"
        ) || module.starts_with("test_")
            || module.ends_with("_test");
        if identifier && !not_an_operators {
            modules.push(module);
        }
    }
    modules.sort();
    Ok(modules)
}

/// The Python files of the operator, relative to the project folder: `operator.py`, and
/// those of `modules` (a module's file, or every file of a package).
fn source_files(dir: &Path, modules: &[String]) -> Result<Vec<PathBuf>, BuildError> {
    fn package_files(
        dir: &Path,
        relative: &Path,
        files: &mut Vec<PathBuf>,
    ) -> Result<(), BuildError> {
        let path = dir.join(relative);
        let mut entries: Vec<_> = std::fs::read_dir(&path)
            .map_err(BuildError::io("cannot read", &path))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name();
            let child = relative.join(&name);
            if entry.path().is_dir() {
                if name != "__pycache__" && !name.to_string_lossy().starts_with('.') {
                    package_files(dir, &child, files)?;
                }
            } else if name.to_string_lossy().ends_with(".py") {
                files.push(child);
            }
        }
        Ok(())
    }
    let mut files = vec![PathBuf::from("operator.py")];
    for module in modules {
        if dir.join(module).is_dir() {
            package_files(dir, Path::new(module), &mut files)?;
        } else {
            files.push(PathBuf::from(format!("{module}.py")));
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_holds_operator_py_and_the_modules_and_packages_beside_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        for file in [
            "operator.py",
            "helpers.py",
            "test_helpers.py",
            "setup.py",
            "notes.txt",
        ] {
            std::fs::write(dir.path().join(file), "").expect("write");
        }
        for package in ["shapes", "tests", ".venv"] {
            std::fs::create_dir(dir.path().join(package)).expect("mkdir");
            std::fs::write(dir.path().join(package).join("__init__.py"), "").expect("write");
        }
        std::fs::create_dir(dir.path().join("shapes/round")).expect("mkdir");
        std::fs::write(dir.path().join("shapes/round/circle.py"), "").expect("write");
        std::fs::create_dir(dir.path().join("data")).expect("mkdir");
        let modules = project_modules(dir.path()).expect("modules");
        assert_eq!(modules, ["helpers", "shapes"]);
        let files = source_files(dir.path(), &modules).expect("files");
        assert_eq!(
            files,
            [
                "operator.py",
                "helpers.py",
                "shapes/__init__.py",
                "shapes/round/circle.py"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn the_runner_names_the_world_and_the_failure_prefix_of_the_sdk() {
        let sdk = include_str!("../../../guest-sdk-python/weir_sdk/_bundle.py");
        assert!(
            sdk.contains(&format!("LOAD_FAILED = {LOAD_FAILED:?}")),
            "_bundle.py's LOAD_FAILED is {LOAD_FAILED:?}"
        );
        assert!(WIT.contains(&format!("world {RUNNER_WORLD} {{")));
        assert!(
            PYTHON_SDK
                .iter()
                .any(|(path, _)| *path == "weir_sdk/_bundle.py")
        );
    }
}
