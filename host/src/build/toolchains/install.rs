//! Installing one language's toolchain into a toolchains folder.
//!
//! Each install is safe to run again and from several commands at once (one at a time per
//! folder, behind `<dir>/.lock`). A language's folder is installed when its stamp file
//! `.weir-installed` holds what was installed (the pinned versions, or the hash of
//! `weir-cbuild`'s source): a changed pin reinstalls, an interrupted install (no stamp) starts
//! over. Downloads go through the cache folder first and are installed from there, so an
//! install with `offline` uses only what an earlier one downloaded.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sha2::{Digest, Sha256};

use super::{C_PACKAGES, CBUILD_SOURCE, COMPONENTIZE_PY, JS_PACKAGE, Progress, Toolchain};

/// The stamp file of an installed language folder.
const STAMP: &str = ".weir-installed";

/// Where and how to install.
#[derive(Clone, Debug)]
pub(crate) struct InstallOptions {
    /// The toolchains folder.
    pub dir: PathBuf,
    /// The cache folder of downloads.
    pub cache: PathBuf,
    /// Use only what the cache holds: no network.
    pub offline: bool,
}

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum InstallError {
    /// A program the install runs is missing and could not be installed.
    #[error("{what}: {hint}")]
    Missing { what: String, hint: String },
    /// A step's program failed; its output was shown.
    #[error("{step} failed ({status}){}", offline_hint(.offline))]
    Step {
        toolchain: Toolchain,
        step: String,
        status: std::process::ExitStatus,
        /// The step ran with `--offline`: the cache may lack what it needs.
        offline: Option<PathBuf>,
    },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn offline_hint(cache: &Option<PathBuf>) -> String {
    match cache {
        Some(cache) => format!(
            "; with --offline, the cache {} must hold what an install without it downloaded",
            cache.display()
        ),
        None => String::new(),
    }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> InstallError {
    let path = path.to_owned();
    move |source| InstallError::Io { what, path, source }
}

/// What installing `toolchain` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Installed {
    /// It was already installed: nothing ran.
    Already,
    Now,
}

/// Installs `toolchain` as `options` say, reporting its steps to `progress`.
pub(crate) fn install(
    toolchain: Toolchain,
    options: &InstallOptions,
    progress: &Progress,
) -> Result<Installed, InstallError> {
    std::fs::create_dir_all(&options.dir).map_err(io("cannot create", &options.dir))?;
    let lock_path = options.dir.join(".lock");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io("cannot open", &lock_path))?;
    lock.lock().map_err(io("cannot lock", &lock_path))?;
    let installer = Installer {
        toolchain,
        folder: options.dir.join(toolchain.folder()),
        options,
        progress,
    };
    match toolchain {
        Toolchain::Rust => installer.rust(),
        Toolchain::Python => installer.python(),
        Toolchain::JavaScript => installer.javascript(),
        Toolchain::C => installer.c(),
    }
}

/// The stamp of an installed language folder, if it has one.
pub(super) fn stamp(folder: &Path) -> Option<String> {
    std::fs::read_to_string(folder.join(STAMP)).ok()
}

/// The stamp of the C toolchain: the hash of `weir-cbuild`'s source.
pub(super) fn cbuild_stamp() -> String {
    let mut hash = Sha256::new();
    for (path, text) in CBUILD_SOURCE {
        hash.update(path.as_bytes());
        hash.update([0]);
        hash.update(text.as_bytes());
        hash.update([0]);
    }
    format!("weir-cbuild {:x}\n", hash.finalize())
}

struct Installer<'a> {
    toolchain: Toolchain,
    folder: PathBuf,
    options: &'a InstallOptions,
    progress: &'a Progress,
}

impl Installer<'_> {
    fn is_stamped(&self, expected: &str) -> bool {
        stamp(&self.folder).as_deref() == Some(expected)
    }

    /// Empties the language's folder for a new install.
    fn start_over(&self) -> Result<(), InstallError> {
        if self.folder.exists() {
            std::fs::remove_dir_all(&self.folder).map_err(io("cannot remove", &self.folder))?;
        }
        std::fs::create_dir_all(&self.folder).map_err(io("cannot create", &self.folder))
    }

    fn finish(&self, stamp: &str) -> Result<Installed, InstallError> {
        let path = self.folder.join(STAMP);
        std::fs::write(&path, stamp).map_err(io("cannot write", &path))?;
        Ok(Installed::Now)
    }

    /// Runs one step: its output is kept, and shown only if it fails.
    fn run(&self, step: &str, command: &mut Command) -> Result<Output, InstallError> {
        self.progress.step(format!("{}: {step}", self.toolchain));
        tracing::debug!(?command, "running");
        let output =
            command
                .stdin(Stdio::null())
                .output()
                .map_err(|source| InstallError::Missing {
                    what: format!("cannot run {:?} ({source})", command.get_program()),
                    hint: format!("it is needed to {step}"),
                })?;
        if !output.status.success() {
            self.progress.println(format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
            return Err(InstallError::Step {
                toolchain: self.toolchain,
                step: step.to_owned(),
                status: output.status,
                offline: self.options.offline.then(|| self.options.cache.clone()),
            });
        }
        Ok(output)
    }

    fn cache(&self, name: &str) -> Result<PathBuf, InstallError> {
        let dir = self.options.cache.join(name);
        std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
        Ok(dir)
    }

    /// `rustup target add wasm32-wasip2`, for the toolchain `cargo` runs here.
    fn rust(&self) -> Result<Installed, InstallError> {
        if super::status::wasip2_installed() {
            return Ok(Installed::Already);
        }
        if !on_path("rustup") {
            return Err(InstallError::Missing {
                what: "rustup not found".into(),
                hint: "install Rust with rustup (https://rustup.rs), then run `weir toolchain \
                       install rust` again"
                    .into(),
            });
        }
        self.run(
            "adding the wasm32-wasip2 target",
            Command::new("rustup").args(["target", "add", "wasm32-wasip2"]),
        )?;
        Ok(Installed::Now)
    }

    /// componentize-py in a virtual environment, from wheels in the cache.
    fn python(&self) -> Result<Installed, InstallError> {
        let stamp = format!("{COMPONENTIZE_PY}\n");
        if self.is_stamped(&stamp) {
            return Ok(Installed::Already);
        }
        let python = Command::new("python3")
            .args(["-c", "import venv, ensurepip"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !python.is_ok_and(|s| s.success()) {
            // A fresh Debian has python3 without its venv module (ensurepip is in python3-venv).
            self.apt_install(&["python3-venv"], "Python 3 with its venv module")?;
        }
        self.start_over()?;
        self.run(
            "creating a virtual environment",
            Command::new("python3")
                .args(["-m", "venv"])
                .arg(&self.folder),
        )?;
        let pip = || {
            let mut pip = Command::new(self.folder.join("bin/pip"));
            pip.args(["--quiet", "--disable-pip-version-check"]);
            pip
        };
        let wheels = self.cache("pip")?;
        if !self.options.offline {
            self.run(
                &format!("downloading {COMPONENTIZE_PY}"),
                pip()
                    .args(["download", "--dest"])
                    .arg(&wheels)
                    .arg(COMPONENTIZE_PY),
            )?;
        }
        self.run(
            &format!("installing {COMPONENTIZE_PY}"),
            pip()
                .args(["install", "--no-index", "--find-links"])
                .arg(&wheels)
                .arg(COMPONENTIZE_PY),
        )?;
        let tool = self.folder.join("bin/componentize-py");
        if !tool.is_file() {
            return Err(InstallError::Missing {
                what: format!(
                    "installing {COMPONENTIZE_PY} did not produce {}",
                    tool.display()
                ),
                hint: "remove the folder and install again".into(),
            });
        }
        self.finish(&stamp)
    }

    /// jco and componentize-js with npm, through the npm cache in the cache folder.
    fn javascript(&self) -> Result<Installed, InstallError> {
        if self.is_stamped(JS_PACKAGE) {
            return Ok(Installed::Already);
        }
        if !on_path("npm") || !on_path("node") {
            self.apt_install(&["nodejs", "npm"], "Node.js and npm")?;
        }
        self.start_over()?;
        let manifest = self.folder.join("package.json");
        std::fs::write(&manifest, JS_PACKAGE).map_err(io("cannot write", &manifest))?;
        let mut npm = Command::new("npm");
        npm.args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .arg("--cache")
            .arg(self.cache("npm")?)
            .arg(if self.options.offline {
                "--offline"
            } else {
                "--prefer-offline"
            })
            .current_dir(&self.folder);
        self.run("installing jco 1.35.0 and componentize-js 0.23.0", &mut npm)?;
        let tool = self.folder.join("node_modules/.bin/jco");
        if !tool.is_file() {
            return Err(InstallError::Missing {
                what: format!("npm install did not produce {}", tool.display()),
                hint: "remove the folder and install again".into(),
            });
        }
        self.finish(JS_PACKAGE)
    }

    /// clang-16 and wasi-libc from apt; `weir-cbuild` built with Cargo.
    fn c(&self) -> Result<Installed, InstallError> {
        let missing: Vec<&str> = C_PACKAGES
            .iter()
            .filter(|(_, file)| !Path::new(file).exists())
            .map(|(package, _)| *package)
            .collect();
        let stamp = cbuild_stamp();
        if missing.is_empty() && self.is_stamped(&stamp) {
            return Ok(Installed::Already);
        }
        if !missing.is_empty() {
            self.apt_install(&missing, "clang for wasm32-wasi with wasi-libc")?;
        }
        if !on_path("cargo") {
            return Err(InstallError::Missing {
                what: "cargo not found (it builds weir-cbuild, the C toolchain's component tool)"
                    .into(),
                hint: "install Rust with rustup (https://rustup.rs), then run `weir toolchain \
                       install c` again"
                    .into(),
            });
        }
        self.start_over()?;
        let source = self.folder.join("src");
        for (path, text) in CBUILD_SOURCE {
            let path = source.join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
            }
            std::fs::write(&path, text).map_err(io("cannot write", &path))?;
        }
        // Built in the cache: a second install compiles only weir-cbuild itself.
        let target = self.cache("cargo-target")?;
        let mut cargo = Command::new("cargo");
        cargo
            .args(["build", "--release", "--locked", "--quiet"])
            .arg("--manifest-path")
            .arg(source.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target)
            // Run from the language's folder, not from wherever `weir` was started: a
            // rust-toolchain.toml there must not choose the compiler.
            .current_dir(&self.folder);
        if self.options.offline {
            cargo.arg("--offline");
        }
        self.run("building weir-cbuild", &mut cargo)?;
        let built = target.join("release/weir-cbuild");
        let bin = self.folder.join("bin");
        std::fs::create_dir_all(&bin).map_err(io("cannot create", &bin))?;
        let tool = bin.join("weir-cbuild");
        std::fs::copy(&built, &tool).map_err(io("cannot copy", &built))?;
        self.finish(&stamp)
    }

    /// Installs Debian packages with apt, as root or through sudo.
    fn apt_install(&self, packages: &[&str], what: &str) -> Result<(), InstallError> {
        let hint = format!(
            "install {what} (`apt-get install {}`), then run `weir toolchain install {}` again",
            packages.join(" "),
            self.toolchain
        );
        if !on_path("apt-get") {
            return Err(InstallError::Missing {
                what: format!("{what} not found, and there is no apt-get to install it"),
                hint,
            });
        }
        if self.options.offline {
            return Err(InstallError::Missing {
                what: format!("{what} not found (--offline: apt-get would download)"),
                hint,
            });
        }
        let root = is_root();
        if !root && !on_path("sudo") {
            return Err(InstallError::Missing {
                what: format!("{what} not found, and installing it takes root (no sudo)"),
                hint,
            });
        }
        let apt = |args: &[&str]| {
            let mut command = if root {
                Command::new("apt-get")
            } else {
                let mut sudo = Command::new("sudo");
                sudo.arg("apt-get");
                sudo
            };
            command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
            command
        };
        self.run("updating apt's package lists", &mut apt(&["update", "-qq"]))?;
        let mut args = vec!["install", "-y", "-qq"];
        args.extend_from_slice(packages);
        self.run(
            &format!("installing {}", packages.join(" ")),
            &mut apt(&args),
        )?;
        Ok(())
    }
}

/// Whether the executable `program` is on `PATH`.
fn on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    crate::build::toolchain::search_path(&path, program.as_ref()).is_some()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
