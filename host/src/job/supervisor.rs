//! [`run_job`]: runs a job from its spec, from where its checkpoints say, and restarts it
//! when a run fails (as often as the job file allows; a guest over one of its limits only if
//! `on_limit = "restart"`).
//!
//! A restart resumes the run it restarts and nothing else: from the newest checkpoint that
//! run completed, else from the checkpoint it began from, else from the beginning
//! ([`StartFrom::Restart`]). Restoring any newer checkpoint in the store instead, one of an
//! earlier run of the same job, would resume that run into an output this run replaced.

use super::pipeline::{Pipeline, PrepareError, checkpoint_store};
use super::run_leases::RunLeases;
use super::runtime::{JobError, RunOptions, run};
use super::spec::OnLimit;
use super::{JobSpec, RunSummary};
use crate::checkpoint::lease::{LeaseCheck, LeaseError};
use crate::checkpoint::start::StartError;
use crate::checkpoint::{CheckpointError, CheckpointStore, JobStart, StartFrom};
use crate::connectors::ConnectorError;
use crate::engine::Engine;
use crate::operator::FailureKind;

/// Why a job could not run to its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SupervisorError {
    /// The job file's components, source or sink are unusable.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The checkpoint to start from is unusable, or a run from the beginning is refused.
    #[error("{}", start_message(.0))]
    Start(#[from] StartError),
    #[error("job `{0}` keeps no checkpoints: add a [checkpoints] section to restore it")]
    NotCheckpointed(String),
    /// Another run owns the job's checkpoints or one of its outputs (DESIGN.md §16).
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error("{error}{}", restarts_note(*.restarts))]
    Failed { error: JobError, restarts: u32 },
}

fn start_message(error: &StartError) -> String {
    match error {
        // Not a restore: the message says what to do instead.
        StartError::Existing { .. } => error.to_string(),
        _ => format!("cannot restore: {error}"),
    }
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

/// Runs `spec` to its end, from where `from` says (`None`: the beginning; `Some(restore)`:
/// that checkpoint; or any [`StartFrom`]).
pub async fn run_job(
    spec: &JobSpec,
    engine: &Engine,
    from: impl Into<StartFrom>,
    options: RunOptions,
) -> Result<RunSummary, SupervisorError> {
    run_job_in(spec, engine, from, options, None).await
}

/// [`run_job`] with checkpoints in `store` instead of the one the job file names (a wrapped
/// store, in tests).
pub async fn run_job_in(
    spec: &JobSpec,
    engine: &Engine,
    from: impl Into<StartFrom>,
    options: RunOptions,
    store: Option<CheckpointStore>,
) -> Result<RunSummary, SupervisorError> {
    let from = from.into();
    let store = match (&spec.checkpoints, store) {
        (None, _) => None,
        (Some(_), Some(store)) => Some(store),
        (Some(_), None) => checkpoint_store(spec).map_err(PrepareError::Store)?,
    };
    if store.is_none() && matches!(from, StartFrom::Restore(_)) {
        return Err(SupervisorError::NotCheckpointed(spec.name.clone()));
    }
    // Taken before anything is read or written, held across restarts.
    let leases = RunLeases::acquire(spec, store.as_ref(), options.lease_wait).await?;
    let result = supervise(spec, engine, from, options, store, leases.checks()).await;
    leases.release().await;
    result
}

/// Runs and restarts the job while the run holds its `leases`.
async fn supervise(
    spec: &JobSpec,
    engine: &Engine,
    mut from: StartFrom,
    options: RunOptions,
    store: Option<CheckpointStore>,
    leases: Vec<LeaseCheck>,
) -> Result<RunSummary, SupervisorError> {
    let attempts = spec.checkpoints.as_ref().map_or(0, |c| c.restart_attempts);
    let on_limit = spec
        .checkpoints
        .as_ref()
        .map_or_else(OnLimit::default, |c| c.on_limit);
    let restartable = |error: &JobError| match error {
        JobError::Stopped => false,
        // It would fail the same way again.
        JobError::Checkpoint(e) if e.is_deterministic() => false,
        // The output lost what the checkpoint covers: every restore would find the same.
        JobError::Sink(ConnectorError::OutputLost { .. }) => false,
        // Another process owns the output now: restarting would take it back.
        JobError::Sink(e) if e.is_taken_over() => false,
        JobError::Operator(e) if e.kind.is_limit() => on_limit == OnLimit::Restart,
        // `open` sees the job file's config and the restored state, and a restart gives it
        // the same again (no checkpoint completes while an operator cannot open): a bad
        // config would fail `restart_attempts` more times before saying so.
        JobError::Operator(e) if e.kind == FailureKind::Open => false,
        _ => true,
    };
    let mut restarts = 0;
    // Checkpoints a restore found damaged: the next attempt falls back past them.
    let mut damaged: Vec<CheckpointError> = Vec::new();
    let mut warned = std::collections::HashSet::new();
    loop {
        let mut pipeline = Pipeline::from_spec(spec, engine)?;
        if let (Some(checkpointing), Some(store)) = (&mut pipeline.checkpointing, &store) {
            checkpointing.store = store.clone();
        }
        pipeline.guarded_by(leases.clone());
        let start = match &pipeline.checkpointing {
            Some(c) => JobStart::plan(&c.store, &spec.name, &from, &damaged).await?,
            None => JobStart::fresh(),
        };
        let uids: Vec<&str> = spec.operators.iter().map(|op| op.uid.as_str()).collect();
        start.check_state_kept(&spec.name, &uids, &options.allow_dropped_state)?;
        if let Some(restored) = &start.restored {
            for damage in &start.passed_over {
                if warned.insert(damage.checkpoint()) {
                    tracing::warn!(
                        job = %spec.name,
                        "{damage}; restoring checkpoint {} instead",
                        restored.id
                    );
                }
            }
        }
        if matches!(from, StartFrom::Restore(_)) && start.restored.is_none() {
            tracing::info!(job = %spec.name, "no completed checkpoint yet: starting from the beginning");
        }
        let lineage = start.lineage(&from);
        let restored = start.restored.as_ref().map(|m| m.id);
        match run(pipeline, start, options.clone()).await {
            Ok(mut summary) => {
                summary.restarts = restarts;
                return Ok(summary);
            }
            // The checkpoint restored is damaged: plan again without it, which falls back
            // to an older one or fails, and costs no restart.
            Err(JobError::Checkpoint(e @ CheckpointError::Damaged { .. }))
                if e.checkpoint() == restored =>
            {
                damaged.push(e);
            }
            Err(error) if restarts < attempts && restartable(&error) => {
                restarts += 1;
                tracing::warn!(
                    job = %spec.name,
                    %error,
                    "the job failed; restarting from its latest checkpoint ({restarts} of {attempts})"
                );
                from = StartFrom::Restart(lineage);
            }
            Err(error) => return Err(SupervisorError::Failed { error, restarts }),
        }
    }
}
