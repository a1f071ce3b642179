//! An operator project: a folder and its language, recognised by one file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::BuildError;

/// The languages `weir build` compiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Python,
    #[value(name = "js")]
    JavaScript,
    C,
}

impl Language {
    pub const ALL: [Language; 4] = [Self::Rust, Self::Python, Self::JavaScript, Self::C];

    /// The file that makes a folder a project of this language.
    pub fn marker(self) -> &'static str {
        match self {
            Self::Rust => "Cargo.toml",
            Self::Python => "operator.py",
            Self::JavaScript => "operator.js",
            Self::C => "operator.c",
        }
    }

    /// The extensions of the files the build reads, besides `Cargo.toml` for Rust.
    fn source_extensions(self) -> &'static [&'static str] {
        match self {
            Self::Rust => &["rs"],
            Self::Python => &["py"],
            Self::JavaScript => &["js", "mjs"],
            Self::C => &["c", "h"],
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rust => "Rust",
            Self::Python => "Python",
            Self::JavaScript => "JavaScript",
            Self::C => "C",
        })
    }
}

/// The files that mark a project, in the order of [`Language::ALL`].
pub(super) const MARKERS: [&str; 4] = ["Cargo.toml", "operator.py", "operator.js", "operator.c"];

/// Folders that hold outputs, caches or dependencies, never a project's own sources.
const SKIPPED_DIRS: [&str; 4] = ["target", "node_modules", "__pycache__", ".weir-build"];

/// An operator project: a folder (absolute) and its language.
#[derive(Clone, Debug)]
pub struct Project {
    dir: PathBuf,
    language: Language,
}

impl Project {
    /// The project in `path` (a folder, or one of its files): the language whose marker file
    /// it holds. None, or several, is an error.
    pub fn detect(path: &Path) -> Result<Self, BuildError> {
        let path = std::path::absolute(path).map_err(BuildError::io("cannot resolve", path))?;
        let dir = if path.is_file() {
            path.parent().map(Path::to_owned).unwrap_or(path)
        } else {
            path
        };
        if !dir.is_dir() {
            return Err(BuildError::Io {
                what: "cannot open the project folder",
                path: dir,
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        let found: Vec<Language> = Language::ALL
            .into_iter()
            .filter(|l| dir.join(l.marker()).is_file())
            .collect();
        match found.as_slice() {
            [] => Err(BuildError::NoProject { path: dir }),
            [language] => Ok(Self {
                dir,
                language: *language,
            }),
            several => Err(BuildError::SeveralLanguages {
                path: dir,
                found: several.iter().map(|l| l.marker()).collect(),
            }),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn language(&self) -> Language {
        self.language
    }

    /// The path of the project's marker file (its entry point, or `Cargo.toml`).
    pub fn marker(&self) -> PathBuf {
        self.dir.join(self.language.marker())
    }

    /// The project's source files: those with the language's extensions (and `Cargo.toml`),
    /// in every folder except hidden ones and `target/`, `node_modules/`, `__pycache__/`.
    pub fn sources(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        self.collect_sources(&self.dir, &mut files)?;
        files.sort();
        Ok(files)
    }

    fn collect_sources(&self, dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                if !SKIPPED_DIRS.contains(&name.as_ref()) {
                    self.collect_sources(&path, files)?;
                }
            } else if name == self.language.marker()
                || path
                    .extension()
                    .is_some_and(|ext| self.language.source_extensions().iter().any(|e| ext == *e))
            {
                files.push(path);
            }
        }
        Ok(())
    }

    /// The most recently modified of the project's sources, with its time; `None` for a
    /// project without sources.
    pub fn newest_source(&self) -> std::io::Result<Option<(PathBuf, SystemTime)>> {
        Ok(self
            .sources()?
            .into_iter()
            .filter_map(|s| modified(&s).map(|m| (s, m)))
            .max_by_key(|(_, m)| *m))
    }

    /// Whether `out` is newer than every source of the project and than the running `weir`
    /// binary (whose SDKs it embeds). Rust projects are never up to date here: Cargo knows
    /// their dependencies, and finds out for itself in a fraction of a second.
    pub fn is_up_to_date(&self, out: &Path) -> bool {
        if self.language == Language::Rust {
            return false;
        }
        let Some(built) = modified(out) else {
            return false;
        };
        let exe_older = std::env::current_exe()
            .ok()
            .and_then(|exe| modified(&exe))
            .is_some_and(|exe| exe < built);
        exe_older
            && self.sources().is_ok_and(|sources| {
                sources
                    .iter()
                    .all(|s| s == out || modified(s).is_some_and(|m| m < built))
            })
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create dir");
        }
        std::fs::write(path, "").expect("write");
    }

    #[test]
    fn detects_the_language_by_its_marker_file() {
        for language in Language::ALL {
            let dir = tempfile::tempdir().expect("tempdir");
            touch(&dir.path().join(language.marker()));
            let project = Project::detect(dir.path()).expect("detected");
            assert_eq!(project.language(), language);
            let by_file = Project::detect(&dir.path().join(language.marker())).expect("detected");
            assert_eq!(by_file.dir(), dir.path());
        }
    }

    #[test]
    fn no_marker_or_several_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        touch(&dir.path().join("counter.py"));
        let err = Project::detect(dir.path()).expect_err("no project");
        assert!(err.to_string().contains("operator.py"), "{err}");
        assert!(err.is_input_error());
        touch(&dir.path().join("operator.py"));
        touch(&dir.path().join("operator.js"));
        let err = Project::detect(dir.path()).expect_err("two languages");
        assert!(
            err.to_string().contains("operator.py, operator.js"),
            "{err}"
        );
    }

    #[test]
    fn sources_skip_outputs_and_dependencies() {
        let dir = tempfile::tempdir().expect("tempdir");
        for file in [
            "operator.js",
            "lib/util.mjs",
            "notes.txt",
            "node_modules/x/index.js",
            ".weir-build/operator.js",
            "target/x.js",
        ] {
            touch(&dir.path().join(file));
        }
        let project = Project::detect(dir.path()).expect("detected");
        let sources = project.sources().expect("sources");
        let names: Vec<_> = sources
            .iter()
            .map(|p| p.strip_prefix(dir.path()).expect("inside").to_owned())
            .collect();
        assert_eq!(
            names,
            [Path::new("lib/util.mjs"), Path::new("operator.js")],
            "{names:?}"
        );
    }

    #[test]
    fn up_to_date_only_when_the_output_is_newer_than_the_sources() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = dir.path().join("operator.py");
        let out = dir.path().join("operator.wasm");
        let now = SystemTime::now();
        let set = |path: &Path, seconds: i64| {
            let time = if seconds < 0 {
                now - std::time::Duration::from_secs(seconds.unsigned_abs())
            } else {
                now + std::time::Duration::from_secs(seconds.unsigned_abs())
            };
            let file = std::fs::File::options()
                .write(true)
                .open(path)
                .expect("open");
            file.set_modified(time).expect("set mtime");
        };
        touch(&source);
        set(&source, -10);
        let project = Project::detect(dir.path()).expect("detected");
        assert!(!project.is_up_to_date(&out), "no output yet");
        touch(&out);
        assert!(project.is_up_to_date(&out));
        set(&source, 10);
        assert!(!project.is_up_to_date(&out), "the source changed");
    }
}
