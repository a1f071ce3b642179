//! Python: componentize-py, with the SDK (`weir_sdk`) staged beside the operator.
//!
//! The operator's module cannot be imported as `operator`: that is a standard library module,
//! loaded before any application code. So `operator.py` is staged as `weir_operator.py` and
//! componentized under that name, and the project folder follows the staging folder on the
//! module path (for the operator's own modules). componentize-py's messages are rewritten to
//! name `operator.py` again, and lose the Python stack of componentize-py itself.
//!
//! The component imports WASI, which the host grants as its sandbox allows (no files, no
//! environment, no sockets), so `print`, clocks and randomness work. A component holds only
//! the modules imported while it was built (componentize-py keeps the interpreter's memory of
//! that moment, and the sandbox has no files to import from later): the staged module ends by
//! importing the standard library and the project's own modules
//! (`guest-sdk-python/weir_sdk/_preload.py`), so that an operator may import them anywhere.

use std::path::{Path, PathBuf};

use super::staging::{PYTHON_SDK, Staging, WORLD};
use super::{BuildError, Language, Project, Tool, python_check};

/// The name `operator.py` is componentized under.
const MODULE: &str = "weir_operator";

pub(super) fn build(project: &Project, staging: &Staging, out: &Path) -> Result<(), BuildError> {
    let tool = Tool::ComponentizePy.find()?;
    let modules = project_modules(project.dir())?;
    python_check::check_syntax(project.dir(), &source_files(project.dir(), &modules)?)?;
    let wit = staging.write_wit()?;
    for (path, text) in PYTHON_SDK {
        staging.write(path, text)?;
    }
    let marker = project.marker();
    let source =
        std::fs::read_to_string(&marker).map_err(BuildError::io("cannot read", &marker))?;
    staging.write(&format!("{MODULE}.py"), &with_preload(&source, &modules))?;
    let mut command = tool.command();
    command
        .arg("-d")
        .arg(&wit)
        .args(["-w", WORLD, "componentize", MODULE, "-p"])
        .arg(staging.dir())
        .arg("-p")
        .arg(project.dir())
        .arg("-o")
        .arg(out)
        .current_dir(project.dir());
    let output = tool.output(&mut command)?;
    if !output.status.success() {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprint!("{}", tidy(&text, project.dir()));
    }
    tool.check(Language::Python, output.status)
}

/// `operator.py` with the call that imports, at build time, the standard library and the
/// modules `project`, appended after its last line (its line numbers stay those of the file).
fn with_preload(source: &str, project: &[String]) -> String {
    let names: Vec<String> = project.iter().map(|name| format!("{name:?}")).collect();
    let newline = if source.ends_with('\n') { "" } else { "\n" };
    format!(
        "{source}{newline}\n__import__(\"weir_sdk._preload\", fromlist=[\"run\"]).run([{}])\n",
        names.join(", ")
    )
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

/// componentize-py's failure output as a user wants it: without the traceback of the
/// `componentize-py` script around the error, and with the paths it gives the module path
/// (`/0/` is the staging folder, `/1/` the project) turned back into the project's files.
fn tidy(text: &str, project: &Path) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    if lines
        .first()
        .is_some_and(|l| l.starts_with("Traceback (most recent call last):"))
        && let Some(at) = lines.iter().position(|l| l.starts_with("AssertionError: "))
    {
        lines.drain(..at);
        lines[0] = &lines[0]["AssertionError: ".len()..];
    }
    let project = project.display().to_string();
    let text = lines.join("\n") + "\n";
    text.replace(
        &format!("\"/0/{MODULE}.py\""),
        &format!("\"{project}/operator.py\""),
    )
    .replace("\"/1/", &format!("\"{project}/"))
    .replace(&format!("{MODULE}.py"), "operator.py")
    .replace(&format!("module '{MODULE}'"), "module 'operator'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preload_follows_the_operators_last_line_and_names_its_modules() {
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
        std::fs::create_dir(dir.path().join("data")).expect("mkdir");
        let modules = project_modules(dir.path()).expect("modules");
        assert_eq!(modules, ["helpers", "shapes"]);
        let staged = with_preload("import weir_sdk\nx = 1", &modules);
        assert_eq!(
            staged,
            "import weir_sdk\nx = 1\n\n__import__(\"weir_sdk._preload\", fromlist=[\"run\"])\
             .run([\"helpers\", \"shapes\"])\n"
        );
    }

    #[test]
    fn tidy_keeps_the_error_and_names_operator_py() {
        let raw = "Traceback (most recent call last):
  File \"/x/bin/componentize-py\", line 8, in <module>
    sys.exit(script())
             ^^^^^^^^
AssertionError:   File \"/0/weir_operator.py\", line 32
    def f(:
          ^
SyntaxError: invalid syntax


Caused by:
    SyntaxError: invalid syntax (weir_operator.py, line 32)
";
        let tidy = tidy(raw, Path::new("/p/op"));
        assert!(!tidy.contains("Traceback"), "{tidy}");
        assert!(!tidy.contains("weir_operator"), "{tidy}");
        assert!(
            tidy.starts_with("  File \"/p/op/operator.py\", line 32\n"),
            "{tidy}"
        );
        assert!(
            tidy.contains("SyntaxError: invalid syntax (operator.py, line 32)"),
            "{tidy}"
        );
    }
}
