//! Rust: `cargo build --release --target wasm32-wasip2` in the project, which produces a
//! component directly; the component is the `.wasm` of the project's `cdylib` (or, failing
//! that, of its binary) among Cargo's `compiler-artifact` messages.
//!
//! Cargo renders its diagnostics to standard error as usual; its standard output carries the
//! JSON messages read here.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{BuildError, Language, Project, Tool, rust_sdk};

pub(super) fn build(project: &Project, out: &Path) -> Result<(), BuildError> {
    let cargo = Tool::Cargo.find()?;
    let manifest = project.marker();
    if rust_sdk::uses_staged_sdk(&manifest) {
        rust_sdk::stage(project.dir())?;
    }
    let mut command = cargo.command();
    command
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .arg("--message-format=json-render-diagnostics")
        .arg("--manifest-path")
        .arg(&manifest)
        .current_dir(project.dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    tracing::debug!(command = ?command, "running");
    let mut child = command.spawn().map_err(|e| cargo.spawn_error(e))?;
    let mut artifacts = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.map_err(BuildError::io("cannot read the output of", &cargo.path))?;
            if let Some(artifact) = Artifact::parse(&line) {
                artifacts.push(artifact);
            }
        }
    }
    let status = child.wait().map_err(|e| cargo.spawn_error(e))?;
    cargo.check(Language::Rust, status)?;
    let wasm = pick(&artifacts, &manifest)?;
    std::fs::copy(&wasm, out).map_err(BuildError::io("cannot copy", &wasm))?;
    Ok(())
}

/// A `.wasm` file Cargo produced.
#[derive(Debug, PartialEq)]
struct Artifact {
    manifest: PathBuf,
    /// `cdylib` (a library component) or `bin` (a command component).
    kind: &'static str,
    wasm: PathBuf,
}

impl Artifact {
    /// The `.wasm` of a `compiler-artifact` message, if it has one.
    fn parse(line: &str) -> Option<Self> {
        let message: serde_json::Value = serde_json::from_str(line).ok()?;
        if message["reason"] != "compiler-artifact" {
            return None;
        }
        let manifest = PathBuf::from(message["manifest_path"].as_str()?);
        let kinds = message["target"]["kind"].as_array()?;
        let is = |kind: &str| kinds.iter().any(|k| k == kind);
        let wasm = |path: &serde_json::Value| {
            path.as_str()
                .filter(|p| p.ends_with(".wasm"))
                .map(PathBuf::from)
        };
        if is("cdylib") {
            let filenames = message["filenames"].as_array()?;
            let wasm = filenames.iter().find_map(wasm)?;
            Some(Self {
                manifest,
                kind: "cdylib",
                wasm,
            })
        } else if is("bin") {
            Some(Self {
                manifest,
                kind: "bin",
                wasm: wasm(&message["executable"])?,
            })
        } else {
            None
        }
    }
}

/// The project's component: its package's `cdylib`, else its binary; a workspace's one
/// `cdylib` when the manifest is a workspace's.
fn pick(artifacts: &[Artifact], manifest: &Path) -> Result<PathBuf, BuildError> {
    let own = |kind| {
        artifacts
            .iter()
            .find(|a| a.manifest == manifest && a.kind == kind)
    };
    if let Some(artifact) = own("cdylib").or_else(|| own("bin")) {
        return Ok(artifact.wasm.clone());
    }
    let dir = manifest.parent().unwrap_or(manifest);
    let members: Vec<&Artifact> = artifacts
        .iter()
        .filter(|a| a.kind == "cdylib" && a.manifest.starts_with(dir))
        .collect();
    match members.as_slice() {
        [one] => Ok(one.wasm.clone()),
        [] => Err(BuildError::NoComponent {
            language: Language::Rust,
            reason: format!(
                "{} builds no cdylib; add `[lib] crate-type = [\"cdylib\"]`",
                manifest.display()
            ),
        }),
        several => Err(BuildError::NoComponent {
            language: Language::Rust,
            reason: format!(
                "the workspace {} builds {} cdylibs; run `weir build` in one package's folder",
                manifest.display(),
                several.len()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CDYLIB: &str = r#"{"reason":"compiler-artifact","manifest_path":"/p/Cargo.toml","target":{"kind":["cdylib"]},"filenames":["/t/wasm32-wasip2/release/op.wasm"],"executable":null,"fresh":true}"#;
    const BIN: &str = r#"{"reason":"compiler-artifact","manifest_path":"/p/Cargo.toml","target":{"kind":["bin"]},"filenames":["/t/wasm32-wasip2/release/cmd.wasm"],"executable":"/t/wasm32-wasip2/release/cmd.wasm","fresh":false}"#;
    const DEPENDENCY: &str = r#"{"reason":"compiler-artifact","manifest_path":"/r/serde/Cargo.toml","target":{"kind":["lib"]},"filenames":["/t/libserde.rlib"],"executable":null,"fresh":true}"#;

    #[test]
    fn the_cdylib_comes_before_a_binary() {
        let artifacts: Vec<Artifact> = [
            DEPENDENCY,
            BIN,
            CDYLIB,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .iter()
        .filter_map(|l| Artifact::parse(l))
        .collect();
        assert_eq!(artifacts.len(), 2);
        let manifest = Path::new("/p/Cargo.toml");
        assert_eq!(
            pick(&artifacts, manifest).expect("picked"),
            Path::new("/t/wasm32-wasip2/release/op.wasm")
        );
        assert_eq!(
            pick(&artifacts[..1], manifest).expect("picked"),
            Path::new("/t/wasm32-wasip2/release/cmd.wasm")
        );
        let err = pick(&[], manifest).expect_err("nothing");
        assert!(err.to_string().contains("cdylib"), "{err}");
    }
}
