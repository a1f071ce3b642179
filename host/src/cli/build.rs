//! `weir build [PATH] [-o OUT] [--force]`

use std::path::PathBuf;

use super::Failure;
use crate::bindings::PACKAGE;
use crate::build::{BuildError, BuildOptions, Project};

#[derive(Debug, clap::Args)]
pub(super) struct BuildArgs {
    /// The operator project: a folder with Cargo.toml (Rust), operator.py (Python),
    /// operator.js (JavaScript) or operator.c (C).
    #[arg(default_value = ".")]
    path: PathBuf,
    /// Where to write the component [default: operator.wasm in the project].
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Build even when the component is newer than the project's sources.
    #[arg(long)]
    force: bool,
}

pub(super) fn build(args: BuildArgs) -> Result<(), Failure> {
    let project = Project::detect(&args.path).map_err(failure)?;
    let options = BuildOptions {
        out: args.out,
        force: args.force,
    };
    let out = options.out_path(&project).map_err(failure)?;
    if options.force || !project.is_up_to_date(&out) {
        eprintln!(
            "weir build: building the {} operator in {}",
            project.language(),
            project.dir().display()
        );
    }
    let (engine, functions) = super::build_engine(&project.language().to_string().to_lowercase())?;
    let built = crate::build::build(&project, &options, &engine);
    if let Some(functions) = functions {
        functions.save();
    }
    let built = built.map_err(|e| match e {
        BuildError::Check(_) => Failure::failed(anyhow::Error::new(e).context(format!(
            "the component built from {} was not written",
            project.dir().display()
        ))),
        other => failure(other),
    })?;
    if built.up_to_date {
        outln!("{}: up to date", built.out.display());
    } else {
        outln!(
            "{}: built from the {} operator in {} ({} KiB, {:.1} s); implements weir:operator/operator ({PACKAGE})",
            built.out.display(),
            built.language,
            project.dir().display(),
            built.bytes.div_ceil(1024),
            built.seconds,
        );
    }
    Ok(())
}

fn failure(e: BuildError) -> Failure {
    if e.is_input_error() {
        Failure::input(e)
    } else {
        Failure::failed(e)
    }
}
