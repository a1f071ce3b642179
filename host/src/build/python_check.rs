//! A Python project's syntax, checked by a local CPython before componentize-py runs.
//!
//! componentize-py takes about ten seconds before it reports a syntax error (it snapshots a
//! whole interpreter first); a local `python3` compiles the operator's files in a fraction of
//! a second. So `weir build` compiles them locally first and stops at the first error, in
//! Python's own words (file, line, the line with a caret, the message).
//!
//! Which Python: `$WEIR_PYTHON` if set (`off` skips the check), else, of the `python3.N` on
//! the `PATH`, pyenv's and `python3`, the oldest as new as the component's [`GUEST_PYTHON`],
//! else the newest.
//! A Python older than the component's may refuse syntax the component's accepts (3.14's
//! t-strings, say): its verdict then counts only when it is no older than
//! [`OLDEST_TRUSTED`], and the error says which Python judged and how to skip the check. No
//! Python found, or one older than that: no check, and componentize-py judges as before.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::BuildError;
use super::toolchain::search_path;

/// The CPython inside the components componentize-py makes (its pinned version,
/// `toolchains::COMPONENTIZE_PY`); tests/sandbox.rs checks it against a built component.
pub const GUEST_PYTHON: (u32, u32) = (3, 14);

/// The oldest local Python whose syntax errors stop a build: the grammar has barely grown
/// since (t-strings and unparenthesised `except A, B` in 3.14).
const OLDEST_TRUSTED: (u32, u32) = (3, 12);

/// Compiles each file with Python's own compiler; prints the first error as Python shows it
/// and exits 1, or prints nothing and exits 0. The files come as arguments.
const CHECK: &str = r#"
import sys, traceback
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        source = f.read()
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
        sys.exit(1)
"#;

/// A local Python and its version.
#[derive(Clone)]
struct LocalPython {
    path: PathBuf,
    version: (u32, u32),
}

/// Checks `files` (paths relative to `dir`, where the check runs so that errors name them as
/// the user knows them); an error carries Python's report.
pub(super) fn check_syntax(dir: &Path, files: &[PathBuf]) -> Result<(), BuildError> {
    let Some(python) = find_python(&|name| std::env::var_os(name))? else {
        return Ok(());
    };
    if python.version < OLDEST_TRUSTED || files.is_empty() {
        return Ok(());
    }
    let output = Command::new(&python.path)
        .args(["-I", "-c", CHECK])
        .args(files)
        .current_dir(dir)
        .output();
    let Ok(output) = output else {
        // A Python that cannot run leaves the judgement to componentize-py.
        return Ok(());
    };
    if output.status.success() {
        return Ok(());
    }
    let report = String::from_utf8_lossy(&output.stderr)
        .trim_end()
        .to_owned();
    let (major, minor) = python.version;
    let caveat = if python.version < GUEST_PYTHON {
        format!(
            "\n(Python {major}.{minor} is older than the component's {0}.{1}: if the line is \
             valid in {0}.{1}, set WEIR_PYTHON to a Python {0}.{1}, or to `off`)",
            GUEST_PYTHON.0, GUEST_PYTHON.1
        )
    } else {
        String::new()
    };
    Err(BuildError::PythonSyntax {
        python: format!("Python {major}.{minor} ({})", python.path.display()),
        report,
        caveat,
    })
}

/// The Python to check with (see the module docs), if there is one; an error when
/// `$WEIR_PYTHON` names one that does not run.
fn find_python(env: &dyn Fn(&str) -> Option<OsString>) -> Result<Option<LocalPython>, BuildError> {
    let path_var = env("PATH").unwrap_or_default();
    let found = |path: PathBuf| version_of(&path).map(|version| LocalPython { path, version });
    match env("WEIR_PYTHON").filter(|v| !v.is_empty()) {
        Some(value) if value == "off" => Ok(None),
        Some(value) => {
            let named = PathBuf::from(&value);
            let path = if named.components().count() > 1 {
                Some(named)
            } else {
                search_path(&path_var, &value)
            };
            match path.and_then(found) {
                Some(python) => Ok(Some(python)),
                None => Err(BuildError::ToolMissing {
                    what: format!(
                        "WEIR_PYTHON={} is not a Python that runs",
                        value.to_string_lossy()
                    ),
                    hint: "set it to a python3, or to `off` to build without the local syntax \
                           check"
                        .to_owned(),
                }),
            }
        }
        None => {
            let pythons: Vec<LocalPython> = candidates(env, &path_var)
                .into_iter()
                .filter_map(found)
                .collect();
            // The oldest as new as the component's, else the newest.
            let best = pythons
                .iter()
                .filter(|p| p.version >= GUEST_PYTHON)
                .min_by_key(|p| p.version)
                .or_else(|| pythons.iter().max_by_key(|p| p.version));
            Ok(best.cloned())
        }
    }
}

/// Where Pythons may be: `python3.N` on the `PATH` for every version from [`OLDEST_TRUSTED`]
/// on, pyenv's versions (`$PYENV_ROOT`, else `~/.pyenv`; its shims run only the one it has
/// selected), and `python3`.
fn candidates(env: &dyn Fn(&str) -> Option<OsString>, path_var: &OsStr) -> Vec<PathBuf> {
    let minors = OLDEST_TRUSTED.1..GUEST_PYTHON.1 + 6;
    // pyenv's shims are skipped: its versions are read below, and each shim costs a start of
    // pyenv to say which one it stands for (or that none is selected).
    let not_a_shim = |path: &PathBuf| {
        path.parent()
            .and_then(Path::file_name)
            .is_none_or(|dir| dir != "shims")
    };
    let mut found: Vec<PathBuf> = minors
        .clone()
        .filter_map(|minor| search_path(path_var, OsStr::new(&format!("python3.{minor}"))))
        .filter(not_a_shim)
        .collect();
    let pyenv = env("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|home| Path::new(&home).join(".pyenv")));
    if let Some(versions) = pyenv.map(|root| root.join("versions"))
        && let Ok(entries) = std::fs::read_dir(versions)
    {
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let minor = name
                .strip_prefix("3.")
                .and_then(|rest| rest.split('.').next())
                .and_then(|m| m.parse::<u32>().ok());
            if let Some(minor) = minor.filter(|m| minors.contains(m)) {
                let python = entry.path().join(format!("bin/python3.{minor}"));
                if python.is_file() {
                    found.push(python);
                }
            }
        }
    }
    found.extend(search_path(path_var, OsStr::new("python3")).filter(not_a_shim));
    found
}

/// `python --version`, as (major, minor).
fn version_of(python: &Path) -> Option<(u32, u32)> {
    let output = Command::new(python).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    parse_version(&text)
}

/// `Python 3.13.0` → (3, 13).
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let number = text.trim().strip_prefix("Python ")?;
    let mut parts = number.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_python_s_own_words() {
        assert_eq!(parse_version("Python 3.13.0\n"), Some((3, 13)));
        assert_eq!(parse_version("Python 3.14.0rc1"), Some((3, 14)));
        assert_eq!(parse_version("bash: python: not found"), None);
    }

    #[test]
    fn weir_python_off_skips_the_check_and_a_missing_one_is_an_error() {
        let off = |name: &str| (name == "WEIR_PYTHON").then(|| OsString::from("off"));
        assert!(find_python(&off).expect("off").is_none());
        let nowhere = |name: &str| match name {
            "WEIR_PYTHON" => Some(OsString::from("/nonexistent/python3")),
            _ => None,
        };
        let err = find_python(&nowhere).err().expect("an error").to_string();
        assert!(err.contains("WEIR_PYTHON=/nonexistent/python3"), "{err}");
        // Nothing set and nothing on the PATH: no check, no error.
        assert!(find_python(&|_| None).expect("no Python").is_none());
    }
}
