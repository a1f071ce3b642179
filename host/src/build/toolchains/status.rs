//! What is installed: `weir toolchain list`. Each language's tools are found the way
//! `weir build` finds them ([`Tool::find`]), so the list says what a build would run.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::Toolchain;
use crate::build::Tool;

/// One language's toolchain as a build would find it.
#[derive(Clone, Debug)]
pub(crate) struct Status {
    /// Versions of its tools, e.g. `componentize-py 0.25.1`; empty when missing.
    pub versions: Vec<String>,
    /// Where its tools are.
    pub paths: Vec<PathBuf>,
    /// What is missing, if anything, and how to install it.
    pub missing: Option<String>,
}

/// The toolchain of `toolchain` as `weir build` would find it.
pub(crate) fn status(toolchain: Toolchain) -> Status {
    let mut status = Status {
        versions: Vec::new(),
        paths: Vec::new(),
        missing: None,
    };
    let tools: &[Tool] = match toolchain {
        Toolchain::Rust => &[Tool::Cargo],
        Toolchain::Python => &[Tool::ComponentizePy],
        Toolchain::JavaScript => &[Tool::Jco],
        Toolchain::C => &[Tool::Clang, Tool::CBuild],
    };
    let mut missing = Vec::new();
    for tool in tools {
        match tool.find() {
            Ok(found) => {
                if let Some(version) = version(*tool, &found.path) {
                    status.versions.push(version);
                }
                status.paths.push(found.path);
            }
            Err(e) => missing.push(e.to_string()),
        }
    }
    if toolchain == Toolchain::Rust && missing.is_empty() {
        if wasip2_installed() {
            status.versions.push("target wasm32-wasip2".into());
        } else {
            missing.push(
                "the wasm32-wasip2 target is not installed: run `weir toolchain install rust`"
                    .into(),
            );
        }
    }
    if !missing.is_empty() {
        status.missing = Some(missing.join("; "));
    }
    status
}

/// The version a tool reports, on one line.
fn version(tool: Tool, path: &std::path::Path) -> Option<String> {
    let (program, args): (PathBuf, &[&str]) = match tool {
        Tool::Cargo => ("rustc".into(), &["--version"]),
        Tool::CBuild => return Some(format!("weir-cbuild (weir {})", env!("CARGO_PKG_VERSION"))),
        _ => (path.to_owned(), &["--version"]),
    };
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().next()?.trim();
    Some(match tool {
        Tool::Jco => format!("jco {line}"),
        _ => line.to_owned(),
    })
}

/// Whether the Rust toolchain `cargo` runs here has the `wasm32-wasip2` target.
pub(super) fn wasip2_installed() -> bool {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    sysroot.is_ok_and(|o| {
        let root = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        o.status.success()
            && std::path::Path::new(&root)
                .join("lib/rustlib/wasm32-wasip2")
                .is_dir()
    })
}
