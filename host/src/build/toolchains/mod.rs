//! The toolchains that build operators, installed for one user: `weir toolchain install` and
//! `weir toolchain list`.
//!
//! A *toolchains folder* holds one folder per language it installed:
//!
//! - `python/`: a virtual environment with componentize-py (`python/bin/componentize-py`);
//! - `js/`: jco and componentize-js from npm (`js/node_modules/.bin/jco`);
//! - `c/`: `weir-cbuild` (C bindings and component encoding), built with Cargo from the
//!   source compiled into this binary (`c/bin/weir-cbuild`); clang-16, wasm-ld and wasi-libc
//!   are system packages, installed with apt;
//! - Rust needs no folder: `rustup target add wasm32-wasip2`.
//!
//! The default folder is `$WEIR_HOME/toolchains`, where `WEIR_HOME` defaults to `~/.weir`.
//! A checkout keeps its own in `target/tools/` (`scripts/setup-languages` installs there with
//! `--dir`), found from the binaries under `target/`. `weir build` looks for each tool in
//! order: its override variable, `$WEIR_HOME/toolchains`, the `tools/` folder next to the
//! binary, `PATH` (`crate::build::toolchain`).
//!
//! What installing downloads (Python wheels, npm packages, the crates of `weir-cbuild`) is
//! kept in a cache folder, `$WEIR_HOME/cache` by default, so that a second install, or an
//! install with `--offline`, needs no network.
//!
//! # Layout
//!
//! - `mod.rs`: the languages, the pinned versions, where things go.
//! - `install.rs`: installing one language's toolchain.
//! - `status.rs`: what is installed, with versions and paths (`weir toolchain list`).
//! - `progress.rs`: the steps of an install as a spinner on a terminal, as lines elsewhere.

mod install;
mod progress;
mod status;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub(crate) use install::{InstallError, InstallOptions, Installed, install};
pub(crate) use progress::Progress;
pub(crate) use status::status;

/// A language whose toolchain `weir toolchain install` installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Toolchain {
    Rust,
    Python,
    #[value(name = "js")]
    JavaScript,
    C,
}

impl Toolchain {
    pub(crate) const ALL: [Toolchain; 4] = [
        Toolchain::Rust,
        Toolchain::Python,
        Toolchain::JavaScript,
        Toolchain::C,
    ];

    /// The name `weir toolchain install` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Toolchain::Rust => "rust",
            Toolchain::Python => "python",
            Toolchain::JavaScript => "js",
            Toolchain::C => "c",
        }
    }

    /// Its folder inside a toolchains folder.
    pub(crate) fn folder(self) -> &'static str {
        match self {
            Toolchain::Rust => "rust",
            Toolchain::Python => "python",
            Toolchain::JavaScript => "js",
            Toolchain::C => "c",
        }
    }
}

impl std::fmt::Display for Toolchain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The componentize-py release Python operators are built with.
pub(crate) const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// The npm packages JavaScript operators are built with. jco 1.35.0 alone pulls
/// componentize-js 0.22 (5x slower) and preview2-shim 0.26.1, which breaks `jco componentize`
/// ("failed to get path metadata (os error 44)"): the overrides pin both. The QuickJS backend
/// (`--backend qjs`, componentize-qjs) comes with jco.
pub(crate) const JS_PACKAGE: &str = r#"{
  "name": "weir-js-toolchain",
  "private": true,
  "description": "Installed by weir toolchain install js",
  "dependencies": {
    "@bytecodealliance/jco": "1.35.0",
    "@bytecodealliance/componentize-js": "0.23.0"
  },
  "overrides": {
    "@bytecodealliance/preview2-shim": "0.25.0",
    "@bytecodealliance/componentize-js": "0.23.0"
  }
}
"#;

/// The system packages C operators are built with (Debian and Ubuntu names), and a file of
/// each that shows it is installed.
pub(crate) const C_PACKAGES: [(&str, &str); 4] = [
    ("clang-16", "/usr/bin/clang-16"),
    ("lld-16", "/usr/bin/wasm-ld-16"),
    ("wasi-libc", "/usr/lib/wasm32-wasi/libc.a"),
    (
        "libclang-rt-16-dev-wasm32",
        "/usr/lib/llvm-16/lib/clang/16/lib/wasi/libclang_rt.builtins-wasm32.a",
    ),
];

/// The source of `weir-cbuild` (`tools/weir-cbuild`), which `weir toolchain install c`
/// builds: path inside the crate, contents.
pub(crate) const CBUILD_SOURCE: [(&str, &str); 3] = [
    (
        "Cargo.toml",
        include_str!("../../../../tools/weir-cbuild/Cargo.toml"),
    ),
    (
        "Cargo.lock",
        include_str!("../../../../tools/weir-cbuild/Cargo.lock"),
    ),
    (
        "src/main.rs",
        include_str!("../../../../tools/weir-cbuild/src/main.rs"),
    ),
];

/// `$WEIR_HOME`, or `~/.weir`; `None` without either variable.
pub(crate) fn weir_home(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(home) = env("WEIR_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(home));
    }
    env("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| Path::new(&home).join(".weir"))
}

/// The toolchains folder `weir toolchain install` uses by default: `$WEIR_HOME/toolchains`.
pub(crate) fn default_dir(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    weir_home(env).map(|home| home.join("toolchains"))
}

/// The cache folder of downloads by default: `$WEIR_HOME/cache`.
pub(crate) fn default_cache(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    weir_home(env).map(|home| home.join("cache"))
}

/// The toolchains folders a build looks in, in order: `$WEIR_HOME/toolchains`, then the
/// `tools/` folder next to the binary `exe` (`target/tools/` for `target/debug/weir`, and for
/// a benchmark in `target/release/deps/`).
pub(crate) fn search_dirs(
    env: &dyn Fn(&str) -> Option<OsString>,
    exe: Option<&Path>,
) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = default_dir(env).into_iter().collect();
    if let Some(exe) = exe {
        dirs.extend(
            exe.ancestors()
                .skip(2)
                .take(2)
                .map(|base| base.join("tools")),
        );
    }
    dirs
}

/// The process's own environment, as the functions here take it.
pub(crate) fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        let vars = vars.to_vec();
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn weir_home_comes_first_then_the_users_home() {
        let both = env_of(&[("WEIR_HOME", "/w"), ("HOME", "/home/u")]);
        assert_eq!(default_dir(&both), Some(PathBuf::from("/w/toolchains")));
        assert_eq!(default_cache(&both), Some(PathBuf::from("/w/cache")));
        let home = env_of(&[("HOME", "/home/u")]);
        assert_eq!(
            default_dir(&home),
            Some(PathBuf::from("/home/u/.weir/toolchains"))
        );
        assert_eq!(default_dir(&env_of(&[])), None);
    }

    #[test]
    fn a_build_looks_in_weir_home_then_next_to_the_binary() {
        let env = env_of(&[("WEIR_HOME", "/w")]);
        let dirs = search_dirs(&env, Some(Path::new("/repo/target/debug/weir")));
        assert_eq!(
            dirs,
            [
                PathBuf::from("/w/toolchains"),
                PathBuf::from("/repo/target/tools"),
                PathBuf::from("/repo/tools"),
            ]
        );
        let installed = search_dirs(&env_of(&[]), Some(Path::new("/opt/weir/bin/weir")));
        assert_eq!(installed[0], PathBuf::from("/opt/weir/tools"));
    }
}
