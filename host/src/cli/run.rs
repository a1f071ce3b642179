//! `weir run JOB.toml [--restore latest|ID|METADATA | --fresh]`

use std::io::IsTerminal;
use std::path::PathBuf;

use super::Failure;
use crate::checkpoint::{RestoreFrom, StartFrom};
use crate::job::{JobSpec, RunOptions, run_job};

#[derive(Debug, clap::Args)]
pub(super) struct RunArgs {
    /// The job file (TOML).
    job: PathBuf,
    /// Start from a checkpoint: `latest`, a checkpoint id, or a metadata file. With
    /// `latest`, a job that has no completed checkpoint starts from the beginning. Without
    /// `--restore` or `--fresh`, a job whose store already holds checkpoints is refused.
    #[arg(long, value_name = "CHECKPOINT", conflicts_with = "fresh")]
    restore: Option<RestoreFrom>,
    /// Start over from the beginning: delete the job's checkpoints first (a file sink then
    /// starts an empty output).
    #[arg(long)]
    fresh: bool,
    /// Runs keyed operators with N subtasks (`N`), or one operator (`OPERATOR=N`); with
    /// `--restore`, the state is redistributed by key group (a rescale). Repeatable.
    #[arg(long, value_name = "[OPERATOR=]N")]
    parallelism: Vec<String>,
    /// Restore even though the checkpoint holds state of OPERATOR (by its uid) and the job
    /// no longer has it: that state is dropped. Without it such a restore is refused.
    /// Repeatable.
    #[arg(long, value_name = "OPERATOR")]
    allow_dropped_state: Vec<String>,
    /// The object store for checkpoints, overriding the job file's `[checkpoints] store`.
    #[arg(long, value_name = "URL")]
    checkpoint_store: Option<String>,
    /// Do not show a progress line, even on a terminal.
    #[arg(long)]
    no_progress: bool,
}

/// Runs the job; `quiet`: print errors only, no summary.
pub(super) fn run(args: RunArgs, quiet: bool) -> Result<(), Failure> {
    let mut spec = JobSpec::load(&args.job).map_err(Failure::input)?;
    for stale in crate::build::stale_components(
        spec.operators
            .iter()
            .map(|op| (op.name.as_str(), op.component.as_path())),
    ) {
        if !quiet {
            eprintln!("warning: {stale}");
        }
    }
    if let Some(url) = args.checkpoint_store {
        let checkpoints = spec.checkpoints.as_mut().ok_or_else(|| {
            Failure::input(anyhow::anyhow!(
                "--checkpoint-store: job `{}` keeps no checkpoints; add a [checkpoints] section",
                spec.name
            ))
        })?;
        checkpoints.store = url;
    }
    for setting in &args.parallelism {
        let (operator, n) = match setting.split_once('=') {
            Some((op, n)) => (Some(op), n),
            None => (None, setting.as_str()),
        };
        let n: u32 = n.parse().map_err(|_| {
            Failure::input(anyhow::anyhow!(
                "--parallelism {setting:?}: expected N or OPERATOR=N with N a number"
            ))
        })?;
        spec.set_parallelism(operator, n)
            .map_err(|e| Failure::input(anyhow::anyhow!("--parallelism {setting}: {e}")))?;
    }
    let engine = super::engine()?;
    let runtime = super::runtime(true)?;
    let options = RunOptions {
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        allow_dropped_state: args.allow_dropped_state,
        ..RunOptions::default()
    };
    if let crate::job::spec::SourceSpec::Kafka(_) = &spec.source {
        if args.fresh || args.restore.is_some() {
            return Err(Failure::input(anyhow::anyhow!(
                "job `{}` reads Kafka: each partition resumes from its own latest checkpoint, \
                 so --restore and --fresh do not apply (to start over, delete the job's \
                 folder in the checkpoint store)",
                spec.name
            )));
        }
        return run_kafka(&spec, &engine, &runtime, options, quiet);
    }
    let from = match (args.fresh, args.restore) {
        (true, _) => StartFrom::Fresh,
        (false, restore) => StartFrom::from(restore),
    };
    let summary = runtime
        .block_on(run_job(&spec, &engine, from, options))
        .map_err(|e| {
            let input = e.is_input_error();
            job_failure(&spec.name, e, input)
        })?;
    if !quiet {
        eprintln!("{summary}");
    }
    Ok(())
}

/// A Kafka job: this process joins the job's consumer group and runs the partitions the group
/// gives it, until Ctrl-C or SIGTERM (or, with `stop_at_end`, until they are done).
fn run_kafka(
    spec: &JobSpec,
    engine: &crate::engine::Engine,
    runtime: &tokio::runtime::Runtime,
    options: RunOptions,
    quiet: bool,
) -> Result<(), Failure> {
    let stop = options.stop.clone();
    runtime.spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match &mut term {
                Some(term) => {
                    term.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminated => {}
        }
        eprintln!("weir: stopping: leaving the group");
        stop.stop();
    });
    let summary = runtime
        .block_on(crate::group::run_group(spec, engine, options))
        .map_err(|e| {
            let input = e.is_input_error();
            job_failure(&spec.name, e, input)
        })?;
    if !quiet {
        eprint!("{summary}");
    }
    Ok(())
}

/// A job that could not start (`input`: exit 2) or failed (exit 1), named.
fn job_failure(
    job: &str,
    error: impl std::error::Error + Send + Sync + 'static,
    input: bool,
) -> Failure {
    let what = if input { "cannot run" } else { "failed" };
    let error = anyhow::Error::new(error).context(format!("job `{job}` {what}"));
    if input {
        Failure::input(error)
    } else {
        Failure::failed(error)
    }
}
