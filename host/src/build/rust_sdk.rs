//! The Rust SDK (`weir-guest`) compiled into the `weir` binary, and staged into a Rust
//! project that takes it from there.
//!
//! A project made by `weir new --lang rust` depends on `weir-guest` by the path
//! [`STAGED_SDK`], inside its staging folder: `weir new` and every `weir build` write the SDK
//! of the `weir` binary there (its bindings are generated ahead, so it needs no WIT), so
//! the project builds wherever the binary runs, with the SDK that matches the host that will
//! check and run it. Files are rewritten only when their text changed, so Cargo's
//! fingerprints (file times) stay valid and the SDK is not recompiled on every build.
//!
//! The SDK's `Cargo.toml` inherits fields and dependencies from this repository's workspace;
//! the staged one has them resolved, so that it stands alone.

use std::path::Path;

use super::BuildError;

/// Where a project's `Cargo.toml` points `weir-guest` to take the staged SDK.
pub const STAGED_SDK: &str = ".weir-build/rust/weir-guest";

/// The SDK's sources, by path relative to its `src/`.
const SOURCES: [(&str, &str); 24] = [
    (
        "bindings.rs",
        include_str!("../../../guest-sdk/src/bindings.rs"),
    ),
    (
        "bindings/operator.rs",
        include_str!("../../../guest-sdk/src/bindings/operator.rs"),
    ),
    ("codec.rs", include_str!("../../../guest-sdk/src/codec.rs")),
    (
        "context.rs",
        include_str!("../../../guest-sdk/src/context.rs"),
    ),
    (
        "emitter.rs",
        include_str!("../../../guest-sdk/src/emitter.rs"),
    ),
    ("error.rs", include_str!("../../../guest-sdk/src/error.rs")),
    (
        "export.rs",
        include_str!("../../../guest-sdk/src/export.rs"),
    ),
    ("lib.rs", include_str!("../../../guest-sdk/src/lib.rs")),
    ("log.rs", include_str!("../../../guest-sdk/src/log.rs")),
    (
        "metrics.rs",
        include_str!("../../../guest-sdk/src/metrics.rs"),
    ),
    (
        "numbers.rs",
        include_str!("../../../guest-sdk/src/numbers.rs"),
    ),
    (
        "operator.rs",
        include_str!("../../../guest-sdk/src/operator.rs"),
    ),
    (
        "record.rs",
        include_str!("../../../guest-sdk/src/record.rs"),
    ),
    (
        "state/batch.rs",
        include_str!("../../../guest-sdk/src/state/batch.rs"),
    ),
    (
        "state/fake.rs",
        include_str!("../../../guest-sdk/src/state/fake.rs"),
    ),
    (
        "state/host.rs",
        include_str!("../../../guest-sdk/src/state/host.rs"),
    ),
    (
        "state/list.rs",
        include_str!("../../../guest-sdk/src/state/list.rs"),
    ),
    (
        "state/map.rs",
        include_str!("../../../guest-sdk/src/state/map.rs"),
    ),
    (
        "state/mod.rs",
        include_str!("../../../guest-sdk/src/state/mod.rs"),
    ),
    (
        "state/op_log.rs",
        include_str!("../../../guest-sdk/src/state/op_log.rs"),
    ),
    (
        "state/value.rs",
        include_str!("../../../guest-sdk/src/state/value.rs"),
    ),
    (
        "state/version.rs",
        include_str!("../../../guest-sdk/src/state/version.rs"),
    ),
    (
        "timers.rs",
        include_str!("../../../guest-sdk/src/timers.rs"),
    ),
    (
        "windows.rs",
        include_str!("../../../guest-sdk/src/windows.rs"),
    ),
];
const SDK_MANIFEST: &str = include_str!("../../../guest-sdk/Cargo.toml");
const WORKSPACE_MANIFEST: &str = include_str!("../../../Cargo.toml");

/// Whether the Rust project with the manifest `manifest` takes `weir-guest` from
/// [`STAGED_SDK`].
pub(super) fn uses_staged_sdk(manifest: &Path) -> bool {
    let Some(manifest) = std::fs::read_to_string(manifest)
        .ok()
        .and_then(|text| toml::from_str::<toml::Table>(&text).ok())
    else {
        return false;
    };
    manifest
        .get("dependencies")
        .and_then(|d| d.get("weir-guest"))
        .and_then(|d| d.get("path"))
        .and_then(toml::Value::as_str)
        .is_some_and(|path| Path::new(path) == Path::new(STAGED_SDK))
}

/// Writes the SDK into the staging folder of the project in `project_dir`.
pub(super) fn stage(project_dir: &Path) -> Result<(), BuildError> {
    let sdk = project_dir.join(STAGED_SDK);
    write_if_changed(&sdk.join("Cargo.toml"), &manifest())?;
    for (relative, text) in SOURCES {
        write_if_changed(&sdk.join("src").join(relative), text)?;
    }
    Ok(())
}

fn write_if_changed(path: &Path, text: &str) -> Result<(), BuildError> {
    if std::fs::read(path).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(BuildError::io("cannot create", parent))?;
    }
    std::fs::write(path, text).map_err(BuildError::io("cannot write", path))
}

/// The SDK's manifest with what it takes from the workspace (`x.workspace = true`) written
/// out, and the workspace's lints as its own.
fn manifest() -> String {
    let parse = |text: &str| toml::from_str::<toml::Table>(text).expect("a valid manifest");
    let mut sdk = parse(SDK_MANIFEST);
    let workspace = parse(WORKSPACE_MANIFEST);
    let workspace = workspace
        .get("workspace")
        .and_then(toml::Value::as_table)
        .expect("a [workspace] table");
    let inherited = |section: &str| workspace.get(section).and_then(toml::Value::as_table);
    let from_workspace =
        |value: &toml::Value| value.get("workspace").and_then(toml::Value::as_bool) == Some(true);

    if let (Some(package), Some(shared)) = (
        sdk.get_mut("package").and_then(toml::Value::as_table_mut),
        inherited("package"),
    ) {
        for (key, value) in package.iter_mut() {
            if from_workspace(value)
                && let Some(shared) = shared.get(key)
            {
                *value = shared.clone();
            }
        }
    }
    if let (Some(dependencies), Some(shared)) = (
        sdk.get_mut("dependencies")
            .and_then(toml::Value::as_table_mut),
        inherited("dependencies"),
    ) {
        for (name, value) in dependencies.iter_mut() {
            if !from_workspace(value) {
                continue;
            }
            let Some(shared) = shared.get(name) else {
                continue;
            };
            let mut resolved = match shared {
                toml::Value::String(version) => {
                    toml::Table::from_iter([("version".to_owned(), version.clone().into())])
                }
                other => other.as_table().cloned().unwrap_or_default(),
            };
            // A member may add features and set `optional`; both join the shared entry.
            if let Some(own) = value.as_table() {
                for (key, own_value) in own {
                    match (key.as_str(), resolved.get_mut(key)) {
                        ("workspace", _) => {}
                        ("features", Some(toml::Value::Array(features))) => {
                            features.extend(own_value.as_array().cloned().unwrap_or_default());
                        }
                        _ => {
                            resolved.insert(key.clone(), own_value.clone());
                        }
                    }
                }
            }
            *value = toml::Value::Table(resolved);
        }
    }
    if sdk.get("lints").is_some_and(from_workspace) {
        match inherited("lints") {
            Some(lints) => sdk.insert("lints".into(), toml::Value::Table(lints.clone())),
            None => sdk.remove("lints"),
        };
    }
    format!(
        "# Staged by `weir build` from the SDK compiled into the weir binary: edits are lost.\n{}",
        toml::to_string(&sdk).expect("a manifest serializes")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_of_the_sdk_is_embedded() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/src");
        let mut found = Vec::new();
        let mut dirs = vec![src.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read the SDK") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let relative = path.strip_prefix(&src).expect("inside src");
                    found.push(relative.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        found.sort();
        let mut embedded: Vec<String> = SOURCES.iter().map(|(p, _)| (*p).to_owned()).collect();
        embedded.sort();
        assert_eq!(
            embedded, found,
            "SOURCES must list every file of guest-sdk/src"
        );
    }

    #[test]
    fn the_staged_manifest_stands_alone() {
        let manifest: toml::Table = toml::from_str(&manifest()).expect("valid TOML");
        let text = toml::to_string(&manifest).expect("serialize");
        assert!(!text.contains("workspace"), "{text}");
        assert_eq!(manifest["package"]["name"].as_str(), Some("weir-guest"));
        assert_eq!(
            manifest["package"]["version"].as_str(),
            Some(env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(manifest["package"]["edition"].as_str(), Some("2024"));
        let deps = manifest["dependencies"].as_table().expect("dependencies");
        assert!(deps["wit-bindgen"]["version"].as_str().is_some());
        let serde_features = deps["serde"]["features"].as_array().expect("features");
        assert!(serde_features.iter().any(|f| f.as_str() == Some("derive")));
        assert!(manifest.contains_key("lints"));
    }
}
