//! C: bindings from the WIT (`weir-cbuild bindgen`, what `wit-bindgen c` does), clang for
//! wasm32-wasi with wasi-libc, then the core module encoded as a component with the WASI
//! preview1 reactor adapter (`weir-cbuild component`).
//!
//! Every `.c` file at the top of the project is compiled, with the project folder, the
//! staging folder (`weir.h`) and the bindings (`operator.h`) on the include path. clang runs
//! in the project folder with relative file names, so its messages name `operator.c`.

use std::path::{Path, PathBuf};

use super::staging::{C_SDK, Staging, WORLD};
use super::{BuildError, Language, Project, Tool};

pub(super) fn build(project: &Project, staging: &Staging, out: &Path) -> Result<(), BuildError> {
    let cbuild = Tool::CBuild.find()?;
    let clang = Tool::Clang.find()?;
    let wit = staging.write_wit()?;
    staging.write("weir.h", C_SDK)?;
    let bindings = staging.dir().join("bindings");
    let mut command = cbuild.command();
    command
        .arg("bindgen")
        .arg(&wit)
        .arg(&bindings)
        .arg(WORLD)
        .current_dir(project.dir());
    cbuild.run(Language::C, &mut command)?;

    let core = staging.dir().join("operator.core.wasm");
    let mut command = clang.command();
    command
        .args([
            "--target=wasm32-wasi",
            "-mexec-model=reactor",
            "-O2",
            "-Wall",
            "-Wextra",
            // Drops wasi-libc's DWARF (146 KB -> 40 KB); keeps the component-type custom
            // section the encoder needs.
            "-Wl,--strip-debug",
        ])
        .arg(include(project.dir()))
        .arg(include(staging.dir()))
        .arg(include(&bindings))
        .arg("-o")
        .arg(&core)
        .args(top_level_c_files(project)?)
        .arg(bindings.join("operator.c"))
        .arg(bindings.join("operator_component_type.o"))
        .current_dir(project.dir());
    clang.run(Language::C, &mut command)?;

    let mut command = cbuild.command();
    command
        .arg("component")
        .arg(&core)
        .arg(out)
        .current_dir(project.dir());
    cbuild.run(Language::C, &mut command)
}

fn include(dir: &Path) -> std::ffi::OsString {
    let mut arg = std::ffi::OsString::from("-I");
    arg.push(dir);
    arg
}

/// The `.c` files at the top of the project, relative to it, in name order.
fn top_level_c_files(project: &Project) -> Result<Vec<PathBuf>, BuildError> {
    let read = BuildError::io("cannot read", project.dir());
    let mut files = Vec::new();
    for entry in std::fs::read_dir(project.dir()).map_err(read)? {
        let entry = entry.map_err(BuildError::io("cannot read", project.dir()))?;
        let path = PathBuf::from(entry.file_name());
        if path.extension().is_some_and(|e| e == "c") && entry.path().is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}
