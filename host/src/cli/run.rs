//! `weir run JOB.toml`

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;

use super::Failure;
use crate::job::{JobSpec, Pipeline, RunOptions, run as run_job};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job file (TOML).
    job: PathBuf,
    /// Do not show a progress line, even on a terminal.
    #[arg(long)]
    no_progress: bool,
    /// Do not print the summary at the end.
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(args: RunArgs) -> Result<(), Failure> {
    let spec = JobSpec::load(&args.job).map_err(Failure::input)?;
    let engine = super::engine()?;
    let pipeline = Pipeline::from_spec(&spec, &engine).map_err(Failure::input)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weir-worker")
        .build()
        .context("cannot start the tokio runtime")
        .map_err(Failure::failed)?;
    let options = RunOptions {
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        ..RunOptions::default()
    };
    let summary = runtime
        .block_on(run_job(pipeline, options))
        .with_context(|| format!("job `{}` failed", spec.name))
        .map_err(Failure::failed)?;
    if !args.quiet {
        eprintln!("{summary}");
    }
    Ok(())
}
