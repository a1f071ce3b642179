//! A `weir` installed the usual way builds every language: `cargo install --path host`, then
//! `weir toolchain install python js c` into a `WEIR_HOME` of its own (and a `HOME` of its
//! own), then `weir new`, `weir build` and `weir run` of a project per language, all outside
//! the checkout.
//!
//! Two things keep it within CI's time, and neither skips a step:
//!
//! - `cargo install` builds in the dev profile (`--debug`) into the workspace's target folder,
//!   so it installs the `weir` the test build already compiled instead of compiling wasmtime
//!   again in release mode;
//! - `weir toolchain install --offline` installs from the downloads `scripts/setup-languages`
//!   kept in `target/tools/cache` (tests reach no package registry): a venv with
//!   componentize-py, jco from npm's cache, `weir-cbuild` compiled from the source in the
//!   binary (its dependencies come compiled from the cache's Cargo target folder).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{cache_dir, repo, stderr};

/// What every new project's job prints: `user<TAB>count` for each line of its `input.jsonl`.
const NEW_PROJECT_OUTPUT: &str = "ada\t1\nbob\t1\nada\t2\nada\t3\n";

/// The machine of a user who installed `weir`: its own home, `weir` on its `PATH`, the Rust
/// toolchain of this machine.
struct Machine {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    home: PathBuf,
    weir_home: PathBuf,
    projects: PathBuf,
}

impl Machine {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let machine = Machine {
            bin: dir.path().join("root/bin"),
            home: dir.path().join("home"),
            weir_home: dir.path().join("weir-home"),
            projects: dir.path().join("projects"),
            _dir: dir,
        };
        std::fs::create_dir_all(&machine.home).expect("home");
        std::fs::create_dir_all(&machine.projects).expect("projects");
        machine
    }

    /// `weir ARGS` in `cwd`, the installed one, with this machine's environment.
    fn weir(&self, cwd: &Path, args: &[&str]) -> Output {
        let path = std::env::join_paths(std::iter::once(self.bin.clone()).chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ))
        .expect("PATH");
        let mut command = Command::new(self.bin.join("weir"));
        command
            .args(args)
            .current_dir(cwd)
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("WEIR_HOME", &self.weir_home)
            // The user's Rust: rustup and Cargo stay where they are on this machine.
            .env("CARGO_HOME", cargo_home())
            .env("RUSTUP_HOME", rustup_home())
            // Downloads from the run's cache; crates from Cargo's.
            .env("WEIR_TOOLCHAIN_CACHE", repo().join("target/tools/cache"))
            .env("CARGO_NET_OFFLINE", "true")
            // Compiled components from the tests' cache, Rust projects' dependencies from
            // their shared target folder: speed only.
            .env("WEIR_CACHE_DIR", cache_dir())
            .env("CARGO_TARGET_DIR", repo().join("target/test-build-rust"))
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1");
        for tool in [
            "WEIR_COMPONENTIZE_PY",
            "WEIR_JCO",
            "WEIR_CLANG",
            "WEIR_CBUILD",
        ] {
            command.env_remove(tool);
        }
        without_test_env(&mut command);
        command.output().expect("the installed weir runs")
    }
}

/// Removes from `command`'s environment what Cargo sets for the test process (`CARGO_PKG_NAME`
/// and the other package variables, `CARGO_MANIFEST_DIR`, `OUT_DIR`, ...): a user's shell has
/// none of them. Build scripts watch some (ring's, through `cc`, watches `CARGO_PKG_NAME` and
/// `OUT_DIR`): a `cargo` run with them set sees them changed and rebuilds ring, rustls,
/// reqwest, object_store and weir-host in the workspace's target folder, here and again in the
/// next build from a shell (the doc tests' step of `scripts/test`), 20 s each time.
fn without_test_env(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let set_for_tests = name.to_str().is_some_and(|name| {
            [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_BIN_",
                "CARGO_CRATE_",
            ]
            .iter()
            .any(|prefix| name.starts_with(prefix))
                || ["OUT_DIR", "CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR"].contains(&name)
        });
        if set_for_tests {
            command.env_remove(name);
        }
    }
}

fn real_home() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME").map_or_else(|| real_home().join(".cargo"), PathBuf::from)
}

fn rustup_home() -> PathBuf {
    std::env::var_os("RUSTUP_HOME").map_or_else(|| real_home().join(".rustup"), PathBuf::from)
}

fn succeeded(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(out)
    );
}

#[test]
fn an_installed_weir_installs_its_toolchains_and_builds_every_language_outside_the_checkout() {
    let machine = Machine::new();
    let root = machine.bin.parent().expect("root");
    let mut install = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    install
        .args(["install", "--debug", "--locked", "--offline", "--path"])
        .arg(repo().join("host"))
        .arg("--root")
        .arg(root)
        .env("CARGO_TARGET_DIR", repo().join("target"));
    without_test_env(&mut install);
    let install = install.output().expect("cargo runs");
    succeeded("cargo install --path host", &install);
    assert!(machine.bin.join("weir").is_file());

    let out = machine.weir(
        &machine.projects,
        &["toolchain", "install", "--offline", "python", "js", "c"],
    );
    succeeded("weir toolchain install python js c", &out);
    let toolchains = machine.weir_home.join("toolchains");
    for installed in [
        "python/bin/componentize-py",
        "js/node_modules/.bin/jco",
        "c/bin/weir-cbuild",
    ] {
        assert!(toolchains.join(installed).is_file(), "{installed} missing");
    }

    // The list names what a build will use: the tools in this WEIR_HOME.
    let out = machine.weir(&machine.projects, &["toolchain", "list"]);
    succeeded("weir toolchain list", &out);
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    for (language, tool) in [
        ("python", "componentize-py 0.25.1"),
        ("js", "jco 1.35.0"),
        ("c", "clang"),
        ("rust", "wasm32-wasip2"),
    ] {
        let line = list
            .lines()
            .find(|line| line.starts_with(language))
            .unwrap_or_else(|| panic!("no {language} line:\n{list}"));
        assert!(line.contains(tool), "{line}");
        if language != "rust" {
            assert!(
                line.contains(&toolchains.display().to_string()),
                "{language} is not from WEIR_HOME: {line}"
            );
        }
    }

    for lang in ["python", "js", "c", "rust"] {
        let name = format!("installed-{lang}");
        let out = machine.weir(&machine.projects, &["new", "--lang", lang, &name]);
        succeeded(&format!("weir new --lang {lang}"), &out);
        let project = machine.projects.join(&name);
        let out = machine.weir(&project, &["build"]);
        succeeded(&format!("weir build of the new {lang} project"), &out);
        let out = machine.weir(&project, &["run", "job.toml", "--quiet"]);
        succeeded(&format!("weir run of the new {lang} project"), &out);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            NEW_PROJECT_OUTPUT,
            "{lang}"
        );
    }
}

#[test]
fn a_missing_toolchain_names_the_install_command() {
    let machine = Machine::new();
    // No install here: the tools of the checkout are not next to this binary.
    let weir = machine.bin.join("weir");
    std::fs::create_dir_all(&machine.bin).expect("bin");
    std::fs::copy(env!("CARGO_BIN_EXE_weir"), &weir).expect("copy weir");
    let out = machine.weir(&machine.projects, &["new", "--lang", "js", "missing-js"]);
    succeeded("weir new", &out);
    let out = machine.weir(&machine.projects.join("missing-js"), &["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("jco not found: run `weir toolchain install js`"),
        "{}",
        stderr(&out)
    );
}
