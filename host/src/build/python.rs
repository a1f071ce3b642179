//! Python: componentize-py, with the SDK (`weir_sdk`) staged beside the operator.
//!
//! The operator's module cannot be imported as `operator`: that is a standard library module,
//! loaded before any application code. So `operator.py` is staged as `weir_operator.py` and
//! componentized under that name, and the project folder follows the staging folder on the
//! module path (for the operator's own modules). componentize-py's messages are rewritten to
//! name `operator.py` again, and lose the Python stack of componentize-py itself.

use std::path::Path;

use super::staging::{PYTHON_SDK, Staging, WORLD};
use super::{BuildError, Language, Project, Tool};

/// The name `operator.py` is componentized under.
const MODULE: &str = "weir_operator";

pub(super) fn build(project: &Project, staging: &Staging, out: &Path) -> Result<(), BuildError> {
    let tool = Tool::ComponentizePy.find()?;
    let wit = staging.write_wit()?;
    staging.write("weir_sdk/__init__.py", PYTHON_SDK)?;
    staging.copy(&project.marker(), Path::new(&format!("{MODULE}.py")))?;
    let mut command = tool.command();
    command
        .arg("-d")
        .arg(&wit)
        .args(["-w", WORLD, "componentize", MODULE, "-p"])
        .arg(staging.dir())
        .arg("-p")
        .arg(project.dir())
        // The component imports only Weir's interfaces: the host links WASI anyway, but
        // nothing here needs it.
        .arg("--stub-wasi")
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
