//! `weir toolchain install [rust|python|js|c|all]...` and `weir toolchain list`.

use std::io::IsTerminal;
use std::path::PathBuf;

use super::Failure;
use crate::build::toolchains::{
    InstallError, InstallOptions, Installed, Progress, Toolchain, default_cache, default_dir,
    install, process_env, status,
};

#[derive(Debug, clap::Args)]
pub(super) struct ToolchainArgs {
    #[command(subcommand)]
    command: ToolchainCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ToolchainCommand {
    /// Install the toolchains that build operators in these languages (default: all).
    ///
    /// Python, JavaScript and C go into a toolchains folder, `$WEIR_HOME/toolchains`
    /// (`WEIR_HOME` defaults to `~/.weir`); Rust gets the wasm32-wasip2 target through rustup.
    /// System packages (python3-venv, nodejs and npm, clang-16 and wasi-libc) are installed
    /// with apt when missing.
    Install {
        /// The languages: rust, python, js, c or all.
        #[arg(value_name = "LANG", default_value = "all")]
        languages: Vec<LanguageArg>,
        /// The toolchains folder to install into instead of `$WEIR_HOME/toolchains`.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The folder that keeps downloads (`$WEIR_HOME/cache` by default; also
        /// `WEIR_TOOLCHAIN_CACHE`).
        #[arg(long, value_name = "DIR", env = "WEIR_TOOLCHAIN_CACHE")]
        cache: Option<PathBuf>,
        /// Download nothing: install from what the cache folder holds.
        #[arg(long)]
        offline: bool,
    },
    /// Say which toolchains a build finds, with their versions and paths.
    List,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LanguageArg {
    Rust,
    Python,
    Js,
    C,
    All,
}

pub(super) fn toolchain(args: ToolchainArgs) -> Result<(), Failure> {
    match args.command {
        ToolchainCommand::Install {
            languages,
            dir,
            cache,
            offline,
        } => install_all(&languages, dir, cache, offline),
        ToolchainCommand::List => list(),
    }
}

fn chosen(languages: &[LanguageArg]) -> Vec<Toolchain> {
    let mut chosen: Vec<Toolchain> = languages
        .iter()
        .flat_map(|language| match language {
            LanguageArg::Rust => vec![Toolchain::Rust],
            LanguageArg::Python => vec![Toolchain::Python],
            LanguageArg::Js => vec![Toolchain::JavaScript],
            LanguageArg::C => vec![Toolchain::C],
            LanguageArg::All => Toolchain::ALL.to_vec(),
        })
        .collect();
    chosen.sort();
    chosen.dedup();
    chosen
}

fn install_all(
    languages: &[LanguageArg],
    dir: Option<PathBuf>,
    cache: Option<PathBuf>,
    offline: bool,
) -> Result<(), Failure> {
    let no_home = || {
        Failure::input(anyhow::anyhow!(
            "neither WEIR_HOME nor HOME is set: name the toolchains folder with --dir and the \
             cache with --cache"
        ))
    };
    let dir = match dir {
        Some(dir) => dir,
        None => default_dir(&process_env).ok_or_else(no_home)?,
    };
    let cache = match cache {
        Some(cache) => cache,
        None => default_cache(&process_env).ok_or_else(no_home)?,
    };
    let absolute = |path: PathBuf| std::path::absolute(&path).unwrap_or(path);
    let options = InstallOptions {
        dir: absolute(dir),
        cache: absolute(cache),
        offline,
    };
    let progress = Progress::new(std::io::stderr().is_terminal());
    for toolchain in chosen(languages) {
        let result = install(toolchain, &options, &progress);
        match result {
            Ok(installed) => {
                let status = status(toolchain);
                let what = if installed == Installed::Already {
                    "already installed"
                } else {
                    "installed"
                };
                progress.println(format!(
                    "{toolchain}: {what}: {}",
                    status.versions.join(", ")
                ));
            }
            Err(e) => {
                progress.finish();
                let input = matches!(e, InstallError::Missing { .. });
                let error = anyhow::Error::new(e)
                    .context(format!("cannot install the {toolchain} toolchain"));
                return Err(if input {
                    Failure::input(error)
                } else {
                    Failure::failed(error)
                });
            }
        }
    }
    progress.finish();
    eprintln!(
        "toolchains in {} ({:.0} s)",
        options.dir.display(),
        progress.elapsed().as_secs_f64()
    );
    Ok(())
}

fn list() -> Result<(), Failure> {
    for toolchain in Toolchain::ALL {
        let status = status(toolchain);
        match &status.missing {
            None => {
                let paths: Vec<String> = status
                    .paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                outln!(
                    "{:<7}{}  ({})",
                    toolchain.name(),
                    status.versions.join(", "),
                    paths.join(", ")
                );
            }
            Some(why) => {
                outln!("{:<7}not installed: {why}", toolchain.name());
            }
        }
    }
    if let Some(dir) = default_dir(&process_env) {
        outln!(
            "(weir toolchain install puts toolchains in {})",
            dir.display()
        );
    }
    Ok(())
}
