//! Finding and running the tools a build needs.
//!
//! Each tool is looked up in order: its environment variable (`WEIR_COMPONENTIZE_PY`,
//! `WEIR_JCO`, `WEIR_CLANG`, `WEIR_CBUILD`), then the toolchains folders
//! `weir toolchain install` fills (`$WEIR_HOME/toolchains`, then `tools/` next to the binary,
//! as [`crate::build::toolchains::search_dirs`] lists them), then `PATH`. A tool that is nowhere is
//! an error that names the `weir toolchain install` that installs it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};

use super::{BuildError, Language};

/// A tool a build runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    Cargo,
    ComponentizePy,
    Jco,
    Clang,
    CBuild,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Self::Cargo => "cargo",
            Self::ComponentizePy => "componentize-py",
            Self::Jco => "jco",
            Self::Clang => "clang-16",
            Self::CBuild => "weir-cbuild",
        }
    }

    /// The environment variable naming the tool's path, if it has one.
    pub fn env_var(self) -> Option<&'static str> {
        match self {
            Self::Cargo => None,
            Self::ComponentizePy => Some("WEIR_COMPONENTIZE_PY"),
            Self::Jco => Some("WEIR_JCO"),
            Self::Clang => Some("WEIR_CLANG"),
            Self::CBuild => Some("WEIR_CBUILD"),
        }
    }

    /// Where `weir toolchain install` puts the tool inside a toolchains folder.
    fn installed(self) -> Option<&'static str> {
        match self {
            Self::Cargo | Self::Clang => None,
            Self::ComponentizePy => Some("python/bin/componentize-py"),
            Self::Jco => Some("js/node_modules/.bin/jco"),
            Self::CBuild => Some("c/bin/weir-cbuild"),
        }
    }

    /// What to do when the tool is missing.
    pub fn hint(self) -> &'static str {
        match self {
            Self::Cargo => {
                "install Rust with rustup (https://rustup.rs), then run `weir toolchain install rust`"
            }
            Self::ComponentizePy => {
                "run `weir toolchain install python`, or set WEIR_COMPONENTIZE_PY to a \
                 componentize-py 0.25.1"
            }
            Self::Jco => "run `weir toolchain install js`, or set WEIR_JCO to a jco 1.35.0",
            Self::Clang => {
                "run `weir toolchain install c`, or set WEIR_CLANG to a clang that targets \
                 wasm32-wasi with wasi-libc"
            }
            Self::CBuild => "run `weir toolchain install c`, or set WEIR_CBUILD to its path",
        }
    }

    /// Finds the tool (see the module docs for the order).
    pub fn find(self) -> Result<FoundTool, BuildError> {
        let exe = std::env::current_exe().ok();
        self.find_with(&|name| std::env::var_os(name), exe.as_deref())
    }

    fn find_with(
        self,
        env: &dyn Fn(&str) -> Option<OsString>,
        exe: Option<&Path>,
    ) -> Result<FoundTool, BuildError> {
        let found = |path: PathBuf| Ok(FoundTool { tool: self, path });
        let path_var = env("PATH").unwrap_or_default();
        if let Some(var) = self.env_var()
            && let Some(value) = env(var).filter(|v| !v.is_empty())
        {
            let named = PathBuf::from(&value);
            let resolved = if named.components().count() > 1 {
                is_executable(&named).then_some(named)
            } else {
                search_path(&path_var, &value)
            };
            return match resolved {
                Some(path) => found(path),
                None => Err(BuildError::ToolMissing {
                    what: format!(
                        "{} not found: {var}={} is not an executable file",
                        self.name(),
                        value.to_string_lossy()
                    ),
                    hint: self.hint().to_owned(),
                }),
            };
        }
        if let Some(relative) = self.installed() {
            for dir in crate::build::toolchains::search_dirs(env, exe) {
                let candidate = dir.join(relative);
                if is_executable(&candidate) {
                    return found(candidate);
                }
            }
        }
        match search_path(&path_var, self.name().as_ref()) {
            Some(path) => found(path),
            None => Err(BuildError::ToolMissing {
                what: format!("{} not found", self.name()),
                hint: self.hint().to_owned(),
            }),
        }
    }
}

/// The executable `name` in the folders of `path_var` (a `PATH`), if any.
pub(crate) fn search_path(path_var: &std::ffi::OsStr, name: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// A tool and where it was found.
#[derive(Clone, Debug)]
pub struct FoundTool {
    pub tool: Tool,
    pub path: PathBuf,
}

impl FoundTool {
    /// A command running the tool. Backtraces of tools written in Rust are off: a failed
    /// build shows the compiler's message, not the tool's stack.
    pub(super) fn command(&self) -> Command {
        let mut command = Command::new(&self.path);
        command
            .env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0")
            .stdin(Stdio::null());
        command
    }

    /// Runs `command` with its standard error passing through; its standard output (which
    /// is not `weir build`'s own) is shown on standard error if the tool fails. A non-zero
    /// exit is the build of `language` failing.
    pub(super) fn run(&self, language: Language, command: &mut Command) -> Result<(), BuildError> {
        tracing::debug!(command = ?command, "running");
        let output = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| self.spawn_error(e))?;
        let shown = String::from_utf8_lossy(&output.stdout);
        let shown = shown.trim_end();
        if !output.status.success() && !shown.is_empty() {
            eprintln!("{shown}");
        }
        self.check(language, output.status)
    }

    /// Runs `command` and returns its output, captured; a non-zero exit is not an error here.
    pub(super) fn output(&self, command: &mut Command) -> Result<Output, BuildError> {
        tracing::debug!(command = ?command, "running");
        command.output().map_err(|e| self.spawn_error(e))
    }

    pub(super) fn check(&self, language: Language, status: ExitStatus) -> Result<(), BuildError> {
        if status.success() {
            Ok(())
        } else {
            Err(BuildError::Failed {
                language,
                tool: self.tool.name(),
                status,
            })
        }
    }

    pub(super) fn spawn_error(&self, source: std::io::Error) -> BuildError {
        BuildError::Spawn {
            tool: self.tool.name(),
            path: self.path.clone(),
            hint: self.tool.hint().to_owned(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executable(path: &Path) {
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("create dir");
        std::fs::write(path, "#!/bin/sh\n").expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }

    fn env_of(vars: Vec<(&'static str, OsString)>) -> impl Fn(&str) -> Option<OsString> {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn the_environment_variable_comes_first_and_must_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tool = dir.path().join("my-componentize-py");
        executable(&tool);
        let env = env_of(vec![("WEIR_COMPONENTIZE_PY", tool.clone().into())]);
        let found = Tool::ComponentizePy.find_with(&env, None).expect("found");
        assert_eq!(found.path, tool);

        let env = env_of(vec![(
            "WEIR_COMPONENTIZE_PY",
            "/nonexistent/componentize-py".into(),
        )]);
        let err = Tool::ComponentizePy
            .find_with(&env, None)
            .expect_err("missing");
        let message = err.to_string();
        assert!(
            message.contains("WEIR_COMPONENTIZE_PY=/nonexistent/componentize-py"),
            "{message}"
        );
        assert!(
            message.contains("run `weir toolchain install python`"),
            "{message}"
        );
        assert!(err.is_input_error());
    }

    #[test]
    fn weir_home_comes_before_the_folder_next_to_the_binary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let in_home = home.join("toolchains/python/bin/componentize-py");
        let next_to = dir.path().join("target/tools/python/bin/componentize-py");
        executable(&next_to);
        let exe = dir.path().join("target/debug/weir");
        let env = env_of(vec![("WEIR_HOME", home.clone().into())]);
        let find = || {
            Tool::ComponentizePy
                .find_with(&env, Some(&exe))
                .expect("found")
        };
        assert_eq!(find().path, next_to);
        executable(&in_home);
        assert_eq!(find().path, in_home);
    }

    #[test]
    fn the_setup_layout_is_found_from_the_binary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("target");
        let jco = target.join("tools/js/node_modules/.bin/jco");
        executable(&jco);
        let env = env_of(vec![]);
        for exe in ["debug/weir", "release/weir", "release/deps/multi_job-0123"] {
            let found = Tool::Jco
                .find_with(&env, Some(&target.join(exe)))
                .unwrap_or_else(|e| panic!("{exe}: {e}"));
            assert_eq!(found.path, jco, "{exe}");
        }
    }

    #[test]
    fn then_path_then_a_hint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clang = dir.path().join("bin/clang-16");
        executable(&clang);
        let env = env_of(vec![("PATH", dir.path().join("bin").into())]);
        assert_eq!(
            Tool::Clang.find_with(&env, None).expect("found").path,
            clang
        );
        let err = Tool::Jco.find_with(&env, None).expect_err("missing");
        assert!(
            err.to_string()
                .starts_with("jco not found: run `weir toolchain install js`"),
            "{err}"
        );
    }
}
