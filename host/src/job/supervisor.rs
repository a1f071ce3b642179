//! [`run_job`]: runs a job from its spec, from where its checkpoints say, and restarts it
//! from its latest checkpoint when a run fails (as often as the job file allows; a guest over
//! one of its limits only if `on_limit = "restart"`).

use super::pipeline::{Pipeline, PrepareError};
use super::runtime::{JobError, RunOptions, run};
use super::spec::OnLimit;
use super::{JobSpec, RunSummary};
use crate::checkpoint::start::StartError;
use crate::checkpoint::{CheckpointStore, JobStart, RestoreFrom};
use crate::engine::Engine;

/// Why a job could not run to its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SupervisorError {
    /// The job file's components, source or sink are unusable.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The checkpoint to start from is unusable.
    #[error("cannot restore: {0}")]
    Start(#[from] StartError),
    #[error("job `{0}` keeps no checkpoints: add a [checkpoints] section to restore it")]
    NotCheckpointed(String),
    #[error("{error}{}", restarts_note(*.restarts))]
    Failed { error: JobError, restarts: u32 },
}

fn restarts_note(restarts: u32) -> String {
    match restarts {
        0 => String::new(),
        1 => " (after 1 restart)".into(),
        n => format!(" (after {n} restarts)"),
    }
}

impl SupervisorError {
    /// The input (job file, component, checkpoint) is unusable, as opposed to a run failing.
    pub fn is_input_error(&self) -> bool {
        !matches!(self, SupervisorError::Failed { .. })
    }
}

/// Runs `spec` to its end, restoring `restore` first if given.
pub async fn run_job(
    spec: &JobSpec,
    engine: &Engine,
    restore: Option<RestoreFrom>,
    options: RunOptions,
) -> Result<RunSummary, SupervisorError> {
    run_job_in(spec, engine, restore, options, None).await
}

/// [`run_job`] with checkpoints in `store` instead of the one the job file names (a wrapped
/// store, in tests).
pub async fn run_job_in(
    spec: &JobSpec,
    engine: &Engine,
    restore: Option<RestoreFrom>,
    options: RunOptions,
    store: Option<CheckpointStore>,
) -> Result<RunSummary, SupervisorError> {
    let attempts = spec.checkpoints.as_ref().map_or(0, |c| c.restart_attempts);
    let on_limit = spec
        .checkpoints
        .as_ref()
        .map_or_else(OnLimit::default, |c| c.on_limit);
    let restartable = |error: &JobError| match error {
        JobError::Stopped => false,
        JobError::Operator(e) if e.kind.is_limit() => on_limit == OnLimit::Restart,
        _ => true,
    };
    let mut restore = restore;
    let mut restarts = 0;
    loop {
        let mut pipeline = Pipeline::from_spec(spec, engine)?;
        if let (Some(checkpointing), Some(store)) = (&mut pipeline.checkpointing, &store) {
            checkpointing.store = store.clone();
        }
        let start = match &pipeline.checkpointing {
            Some(c) => JobStart::plan(&c.store, &spec.name, restore.as_ref()).await?,
            None if restore.is_some() => {
                return Err(SupervisorError::NotCheckpointed(spec.name.clone()));
            }
            None => JobStart::fresh(),
        };
        if restore.is_some() && start.restored.is_none() {
            tracing::info!(job = %spec.name, "no completed checkpoint yet: starting from the beginning");
        }
        match run(pipeline, start, options.clone()).await {
            Ok(mut summary) => {
                summary.restarts = restarts;
                return Ok(summary);
            }
            Err(error) if restarts < attempts && restartable(&error) => {
                restarts += 1;
                tracing::warn!(
                    job = %spec.name,
                    %error,
                    "the job failed; restarting from its latest checkpoint ({restarts} of {attempts})"
                );
                restore = Some(RestoreFrom::Latest);
            }
            Err(error) => return Err(SupervisorError::Failed { error, restarts }),
        }
    }
}
