//! JavaScript: `jco componentize` with the QuickJS backend.
//!
//! The project's modules are staged in `.weir-build/js/` together with the SDK (`weir.js`,
//! which operators import as `./weir.js`, its modules in `weir/`, and `windows.js`); jco's
//! module root (`--cwd`) is that folder.
//! `--backend-qjs-disable-async`: the host does not enable wasmtime's component-model-async,
//! and an async build fails to load ("`task.cancel` requires the component model async
//! feature").

use std::path::Path;

use super::staging::{JS_SDK, Staging, WORLD};
use super::{BuildError, Language, Project, Tool};

pub(super) fn build(project: &Project, staging: &Staging, out: &Path) -> Result<(), BuildError> {
    let tool = Tool::Jco.find()?;
    let wit = staging.write_wit()?;
    let sources = project
        .sources()
        .map_err(BuildError::io("cannot read", project.dir()))?;
    for source in &sources {
        let relative = source.strip_prefix(project.dir()).unwrap_or(source);
        staging.copy(source, &Path::new("js").join(relative))?;
    }
    // After the project's files: a `weir.js` of the project (kept for an editor, say) gives
    // way to the SDK of this host.
    for (path, text) in JS_SDK {
        staging.write(&format!("js/{path}"), text)?;
    }
    let root = staging.dir().join("js");
    let root = root.as_path();
    let mut command = tool.command();
    command
        .arg("componentize")
        .arg(root.join("operator.js"))
        .arg("--cwd")
        .arg(root)
        .arg("--wit")
        .arg(&wit)
        .args(["--world-name", WORLD])
        .args(["--backend", "qjs", "--backend-qjs-disable-async"])
        .arg("-o")
        .arg(out)
        .current_dir(project.dir());
    tool.run(Language::JavaScript, &mut command)
}
