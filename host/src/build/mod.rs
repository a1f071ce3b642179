//! `weir build` and `weir new`: operator projects in Rust, Python, JavaScript and C compiled
//! into components and checked against Weir's world.
//!
//! A project is a folder; its language is recognised by one file ([`Project::detect`]):
//! `Cargo.toml` (Rust), `operator.py` (Python), `operator.js` (JavaScript) or `operator.c`
//! (C). [`build`] runs that language's toolchain, then loads the output with the host's
//! [`Engine`] (the same check as when a job starts), and only then moves it to its place, so
//! a component that does not implement the world never lands where a job would use it.
//!
//! The SDKs of the interpreted languages and C, and the WIT, are compiled into the `weir`
//! binary and written to the staging folder `<project>/.weir-build/` at build time: a build
//! always uses the SDK that matches the host that checks it. Rust operators take the
//! `weir-guest` crate as a Cargo dependency: by path to `.weir-build/rust/weir-guest`, where
//! `weir new` and `weir build` stage the binary's copy (`rust_sdk.rs`), or to any other copy.
//!
//! # Layout
//!
//! - `project.rs`: [`Project`] and [`Language`], detection, the sources a language reads
//!   (for the up-to-date check).
//! - `staging.rs`: the embedded SDKs and WIT, the staging folder and its lock.
//! - `toolchain.rs`: finding each tool (environment override, the toolchains folders of
//!   `weir toolchain install`: `$WEIR_HOME/toolchains`, then `tools/` next to the binary,
//!   then `PATH`) and running it.
//! - `rust.rs`, `python.rs`, `javascript.rs`, `c.rs`: one language's build each (Python's:
//!   a runner component made once, the project's modules packed into a copy of it);
//!   `python_check.rs`: a Python project's syntax checked by a local CPython first;
//!   `rust_sdk.rs`: the Rust SDK compiled into the binary, staged for Rust projects.
//! - `skeleton.rs`: `weir new`, a small working operator per language (files in
//!   `skeletons/`).
//! - `staleness.rs`: a job's components older than their project's sources (a warning),
//!   and the hint for a missing one.

mod c;
mod javascript;
mod project;
mod python;
mod python_check;
mod rust;
mod rust_sdk;
mod skeleton;
mod staging;
mod staleness;
pub(crate) mod toolchain;
pub(crate) mod toolchains;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use project::{Language, Project};
pub use python_check::GUEST_PYTHON;
pub use rust_sdk::STAGED_SDK;
pub use skeleton::{NewError, create_skeleton};
pub use staleness::{StaleComponent, missing_component_hint, stale_components};
pub use toolchain::Tool;

use crate::engine::{Engine, LoadError};

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    #[error(
        "{path} is not an operator project: it has none of {}",
        project::MARKERS.join(", ")
    )]
    NoProject { path: PathBuf },
    #[error(
        "{path} has project files of several languages ({}): keep the one of the operator's language",
        found.join(", ")
    )]
    SeveralLanguages {
        path: PathBuf,
        found: Vec<&'static str>,
    },
    #[error("{what}: {hint}")]
    ToolMissing { what: String, hint: String },
    #[error("cannot run {tool} ({path}): {source}; {hint}")]
    Spawn {
        tool: &'static str,
        path: PathBuf,
        hint: String,
        source: std::io::Error,
    },
    #[error("the {language} build failed ({tool}: {status}; its messages are above)")]
    Failed {
        language: Language,
        tool: &'static str,
        status: std::process::ExitStatus,
    },
    #[error("the {language} build produced no component: {reason}")]
    NoComponent { language: Language, reason: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the Python build failed on a syntax error, found by {python}:\n{report}{caveat}")]
    PythonSyntax {
        python: String,
        report: String,
        caveat: String,
    },
    #[error("the Python build failed: operator.py cannot be imported:\n{report}")]
    PythonImport { report: String },
    #[error(transparent)]
    Check(#[from] LoadError),
}

impl BuildError {
    /// Whether the project or the machine is unusable (no project, a missing tool) rather
    /// than the build having failed.
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            Self::NoProject { .. }
                | Self::SeveralLanguages { .. }
                | Self::ToolMissing { .. }
                | Self::Spawn { .. }
                | Self::NoComponent { .. }
        )
    }

    fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_owned();
        move |source| Self::Io { what, path, source }
    }
}

/// Options for [`build`].
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Where the component goes; default `<project>/operator.wasm`.
    pub out: Option<PathBuf>,
    /// Build even when the output is newer than the sources.
    pub force: bool,
}

impl BuildOptions {
    /// The output path for `project`, absolute.
    pub fn out_path(&self, project: &Project) -> Result<PathBuf, BuildError> {
        match &self.out {
            Some(out) => std::path::absolute(out).map_err(BuildError::io("cannot resolve", out)),
            None => Ok(project.dir().join("operator.wasm")),
        }
    }
}

/// What [`build`] did.
#[derive(Debug)]
pub struct Built {
    pub language: Language,
    /// The component.
    pub out: PathBuf,
    /// The output was newer than the project's sources and the `weir` binary: nothing ran.
    pub up_to_date: bool,
    pub bytes: u64,
    pub seconds: f64,
}

/// Builds `project` into a component, checks it against Weir's world with `engine`, and
/// writes it to the output path. The toolchain's own messages go to standard error.
pub fn build(
    project: &Project,
    options: &BuildOptions,
    engine: &Engine,
) -> Result<Built, BuildError> {
    let started = Instant::now();
    let out = options.out_path(project)?;
    let built = |up_to_date| -> Result<Built, BuildError> {
        let bytes = std::fs::metadata(&out)
            .map_err(BuildError::io("cannot read", &out))?
            .len();
        Ok(Built {
            language: project.language(),
            out: out.clone(),
            up_to_date,
            bytes,
            seconds: started.elapsed().as_secs_f64(),
        })
    };
    let up_to_date = || !options.force && project.is_up_to_date(&out);
    if up_to_date() {
        return built(true);
    }
    // One build of a project at a time: a second one waits, then finds the output fresh.
    let staging = staging::Staging::lock(project)?;
    if up_to_date() {
        return built(true);
    }
    // A Rust project's staged SDK stays: Cargo would rebuild it if its files were rewritten.
    if project.language() != Language::Rust {
        staging.clear()?;
    }
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(BuildError::io("cannot create", dir))?;
    }
    let partial = partial_path(&out);
    let result = build_checked(project, &staging, &partial, engine).map_err(|e| match e {
        BuildError::Check(e) => BuildError::Check(e.with_path(&out)),
        other => other,
    });
    if result.is_err() {
        // Best effort: a missing partial output is the common case here.
        let _ = std::fs::remove_file(&partial);
    }
    result?;
    std::fs::rename(&partial, &out).map_err(BuildError::io("cannot write", &out))?;
    built(false)
}

/// Runs the language's build into `partial`, then checks the component against the world.
fn build_checked(
    project: &Project,
    staging: &staging::Staging,
    partial: &Path,
    engine: &Engine,
) -> Result<(), BuildError> {
    tracing::debug!(project = %project.dir().display(), language = %project.language(), "building");
    match project.language() {
        Language::Rust => rust::build(project, partial)?,
        Language::Python => python::build(project, staging, partial, engine)?,
        Language::JavaScript => javascript::build(project, staging, partial)?,
        Language::C => c::build(project, staging, partial)?,
    }
    let component = engine.load(partial)?;
    if project.language() == Language::Python {
        python::check_loads(engine, &component)?;
    }
    Ok(())
}

/// The temporary name of the output while it is built and checked: in the same folder, so
/// that moving it into place is a rename.
fn partial_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "operator.wasm".to_owned());
    out.with_file_name(format!(".{name}.weir-partial"))
}
