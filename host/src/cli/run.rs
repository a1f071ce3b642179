//! `weir run JOB.toml [--restore latest|ID|METADATA | --fresh]`

use std::io::IsTerminal;
use std::path::PathBuf;

use super::Failure;
use crate::checkpoint::savepoint::{self, SavepointError};
use crate::checkpoint::{CheckpointStore, RestoreFrom, StartFrom};
use crate::ids::CheckpointId;
use crate::job::{JobError, JobSpec, RunOptions, StopSignal, SupervisorError, run_job};

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
    /// Restore even though the checkpoint holds state of OPERATOR (by its uid) that the job
    /// no longer has, or a state STATE of it that the operator no longer declares: that
    /// state is dropped. Without it such a restore is refused. Repeatable.
    #[arg(long, value_name = "OPERATOR[.STATE]")]
    allow_dropped_state: Vec<String>,
    /// When the run ends, or is stopped with Ctrl-C or SIGTERM, copy its latest completed
    /// checkpoint into the savepoint NAME (`weir savepoint`); restore it later with
    /// `--restore savepoint:NAME`. A stopped run then exits 0.
    #[arg(long, value_name = "NAME")]
    savepoint_on_exit: Option<String>,
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
        if args.savepoint_on_exit.is_some() {
            return Err(Failure::input(anyhow::anyhow!(
                "--savepoint-on-exit: job `{}` reads Kafka, whose partitions checkpoint on \
                 their own: it has no savepoints",
                spec.name
            )));
        }
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
    // Refused before the run, not after it: a name in use, or no checkpoints to copy.
    let saving = match args.savepoint_on_exit {
        Some(name) => {
            let store = exit_savepoint_store(&spec, &name, &runtime)?;
            stop_on_signal(&runtime, &options.stop, "stopping: taking the savepoint");
            Some((name, store))
        }
        None => None,
    };
    match runtime.block_on(run_job(&spec, &engine, from, options)) {
        Ok(summary) if !quiet => eprintln!("{summary}"),
        Ok(_) => {}
        // Only a savepoint's signal stops a run that is not a Kafka one.
        Err(SupervisorError::Failed {
            error: JobError::Stopped,
            ..
        }) if saving.is_some() => {}
        Err(e) => {
            let input = e.is_input_error();
            return Err(job_failure(&spec.name, e, input));
        }
    }
    if let Some((name, store)) = saving {
        let id = runtime.block_on(save_latest(&store, &name))?;
        eprintln!(
            "weir: savepoint `{name}` holds checkpoint {id} of job `{}`: restore it with \
             `weir run JOB.toml --restore savepoint:{name}`",
            spec.name
        );
    }
    Ok(())
}

/// The store `--savepoint-on-exit NAME` will write to, once NAME is known to be free there.
fn exit_savepoint_store(
    spec: &JobSpec,
    name: &str,
    runtime: &tokio::runtime::Runtime,
) -> Result<CheckpointStore, Failure> {
    let checkpoints = spec.checkpoints.as_ref().ok_or_else(|| {
        Failure::input(anyhow::anyhow!(
            "--savepoint-on-exit: job `{}` keeps no checkpoints; add a [checkpoints] section",
            spec.name
        ))
    })?;
    let store = CheckpointStore::open(&checkpoints.store, &spec.name).map_err(Failure::input)?;
    let taken = runtime
        .block_on(savepoint::names(&store))
        .map_err(Failure::failed)?;
    if taken.iter().any(|n| n == name) {
        return Err(Failure::input(anyhow::anyhow!(
            "--savepoint-on-exit: {}",
            SavepointError::Exists(name.to_owned())
        )));
    }
    Ok(store)
}

/// Copies the latest completed checkpoint in `store` into the savepoint `name`; its id.
async fn save_latest(store: &CheckpointStore, name: &str) -> Result<CheckpointId, Failure> {
    let failed = |e: anyhow::Error| Failure::failed(e.context(format!("savepoint `{name}`")));
    let latest = store.completed().await.map_err(|e| failed(e.into()))?;
    let id = *latest.last().ok_or_else(|| {
        failed(anyhow::anyhow!(
            "the run completed no checkpoint, so there is nothing to save"
        ))
    })?;
    let metadata = store
        .read_metadata(id)
        .await
        .map_err(|e| failed(e.into()))?;
    savepoint::create(store, &metadata, name)
        .await
        .map_err(|e| failed(e.into()))?;
    Ok(id)
}

/// Raises `stop` at Ctrl-C or SIGTERM, saying `what` it does then.
fn stop_on_signal(runtime: &tokio::runtime::Runtime, stop: &StopSignal, what: &'static str) {
    let stop = stop.clone();
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
        eprintln!("weir: {what}");
        stop.stop();
    });
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
    stop_on_signal(runtime, &options.stop, "stopping: leaving the group");
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
