//! `weir new`: a small working operator per language, with a job that runs it.
//!
//! Every skeleton counts the records of each key in a value state and emits `key<TAB>count`
//! (like the example word counters), and comes with `job.toml` over `input.jsonl`, so
//! `weir build && weir run job.toml` works straight away. Rust projects also get this
//! repository's `Cargo.lock` and `rust-toolchain.toml`, and the Rust SDK staged in
//! `.weir-build/` (see [`super::rust_sdk`]). The files are in `skeletons/`; `{{name}}` stands
//! for the project's name.

use std::path::{Path, PathBuf};

use super::Language;

/// Why `weir new` could not create a project.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NewError {
    #[error("{path} already exists: choose a new folder")]
    Exists { path: PathBuf },
    #[error(
        "{name:?} is not a usable operator name: start with a letter, then letters, digits, `-` or `_`"
    )]
    BadName { name: String },
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot stage the Rust SDK: {0}")]
    Stage(String),
}

impl NewError {
    /// Whether the arguments were unusable (rather than the disk failing).
    pub fn is_input_error(&self) -> bool {
        matches!(self, Self::Exists { .. } | Self::BadName { .. })
    }
}

const GITIGNORE: &str = include_str!("skeletons/common/gitignore");
const JOB: &str = include_str!("skeletons/common/job.toml");
const INPUT: &str = include_str!("skeletons/common/input.jsonl");
const RUST_MANIFEST: &str = include_str!("skeletons/rust/Cargo.toml");
const RUST_LIB: &str = include_str!("skeletons/rust/src/lib.rs");
/// The lock file of this repository: a new Rust project starts with the versions Weir was
/// built and tested with (Cargo drops the entries it does not need), and builds without
/// asking the registry.
const RUST_LOCK: &str = include_str!("../../../Cargo.lock");
/// The toolchain this repository pins, which the Rust SDK is built and tested with.
const RUST_TOOLCHAIN: &str = include_str!("../../../rust-toolchain.toml");
const PYTHON: &str = include_str!("skeletons/python/operator.py");
const JS: &str = include_str!("skeletons/js/operator.js");
const C: &str = include_str!("skeletons/c/operator.c");

/// Creates the folder `dir` with a skeleton operator in `language`, named after the folder;
/// returns the files written, relative to `dir`. An existing `dir` is refused.
pub fn create_skeleton(dir: &Path, language: Language) -> Result<Vec<PathBuf>, NewError> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if dir.symlink_metadata().is_ok() {
        return Err(NewError::Exists {
            path: dir.to_owned(),
        });
    }
    let usable = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !usable {
        return Err(NewError::BadName { name });
    }
    let mut files: Vec<(&str, String)> = vec![
        (".gitignore", GITIGNORE.to_owned()),
        ("job.toml", JOB.to_owned()),
        ("input.jsonl", INPUT.to_owned()),
    ];
    match language {
        Language::Rust => {
            files.push(("Cargo.toml", RUST_MANIFEST.to_owned()));
            files.push(("src/lib.rs", RUST_LIB.to_owned()));
            files.push(("Cargo.lock", RUST_LOCK.to_owned()));
            files.push(("rust-toolchain.toml", RUST_TOOLCHAIN.to_owned()));
        }
        Language::Python => files.push(("operator.py", PYTHON.to_owned())),
        Language::JavaScript => files.push(("operator.js", JS.to_owned())),
        Language::C => files.push(("operator.c", C.to_owned())),
    }
    let mut written = Vec::new();
    for (relative, text) in files {
        let path = dir.join(relative);
        let io = |source| NewError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&path, text.replace("{{name}}", &name)).map_err(io)?;
        written.push(PathBuf::from(relative));
    }
    if language == Language::Rust {
        // So that Cargo (and an editor's rust-analyzer) finds the SDK before any `weir build`.
        super::rust_sdk::stage(dir).map_err(|e| NewError::Stage(e.to_string()))?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_project_of_each_language_named_after_its_folder() {
        let root = tempfile::tempdir().expect("tempdir");
        for language in Language::ALL {
            let dir = root.path().join(format!("op-{language}").to_lowercase());
            let files = create_skeleton(&dir, language).expect("created");
            assert!(files.iter().any(|f| f == Path::new(".gitignore")));
            let project = super::super::Project::detect(&dir).expect("a project");
            assert_eq!(project.language(), language);
            let entry = std::fs::read_to_string(project.marker()).expect("read");
            assert!(!entry.contains("{{"), "{entry}");
            let job = std::fs::read_to_string(dir.join("job.toml")).expect("read");
            assert!(
                job.contains(&format!(
                    "name = \"op-{}\"",
                    language.to_string().to_lowercase()
                )),
                "{job}"
            );
        }
        let manifest =
            std::fs::read_to_string(root.path().join("op-rust/Cargo.toml")).expect("read");
        let manifest: toml::Value = toml::from_str(&manifest).expect("valid TOML");
        assert_eq!(manifest["package"]["name"].as_str(), Some("op-rust"));
        assert!(super::super::rust_sdk::uses_staged_sdk(
            &root.path().join("op-rust/Cargo.toml")
        ));
        assert!(
            root.path()
                .join("op-rust/.weir-build/rust/weir-guest/src/lib.rs")
                .is_file(),
            "the SDK is staged"
        );
    }

    #[test]
    fn refuses_an_existing_folder_and_a_bad_name() {
        let root = tempfile::tempdir().expect("tempdir");
        let err = create_skeleton(root.path(), Language::Python).expect_err("exists");
        assert!(matches!(err, NewError::Exists { .. }), "{err}");
        let err =
            create_skeleton(&root.path().join("9lives"), Language::Python).expect_err("bad name");
        assert!(matches!(err, NewError::BadName { .. }), "{err}");
        assert!(err.is_input_error());
    }
}
