//! `weir savepoint STORE --name NAME [--checkpoint ID|latest] [--job NAME]` (and the
//! deletion behind `weir checkpoints delete-savepoint`): a job's completed checkpoint
//! copied out of its chain under a name, which retention, cleanup and `--fresh` leave alone
//! and `weir run JOB.toml --restore savepoint:NAME` restores (`crate::checkpoint::savepoint`).
//! STORE is read as `weir checkpoints` reads it: a job file, a folder or a store URL.

use anyhow::anyhow;

use super::Failure;
use super::store_arg::StoreArg;
use crate::checkpoint::savepoint::{self, SavepointError};
use crate::serve::job_checkpoints::{InspectError, JobCheckpoints, Which};

#[derive(Debug, clap::Args)]
pub(super) struct SavepointArgs {
    /// The job's checkpoints: a job file (JOB.toml), a folder, or an object-store URL.
    #[arg(value_name = "STORE")]
    store: String,
    /// The savepoint's name: letters, digits, '.', '_' and '-'.
    #[arg(long)]
    name: String,
    /// The checkpoint to copy: an id, or `latest`.
    #[arg(long, value_name = "ID|latest", default_value = "latest")]
    checkpoint: Which,
    /// The job, when the store holds the checkpoints of several.
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
}

pub(super) fn savepoint(args: SavepointArgs) -> Result<(), Failure> {
    let runtime = super::runtime(false)?;
    runtime.block_on(create(
        &args.store,
        &args.name,
        args.checkpoint,
        args.job.as_deref(),
    ))
}

async fn create(store: &str, name: &str, which: Which, job: Option<&str>) -> Result<(), Failure> {
    let target = StoreArg::open(store, "")?;
    let job = target.one_job(job, &format!("checkpoint {which}")).await?;
    let checkpoints = target.store_of(&job);
    let detail = JobCheckpoints::new(&job, checkpoints.clone())
        .detail(which)
        .await
        .map_err(|e| match e {
            InspectError::Storage(e) => target.unreadable(e),
            e => Failure::input(anyhow!("{}: {e}", target.url)),
        })?;
    let metadata = detail.metadata;
    let copied = savepoint::create(&checkpoints, &metadata, name)
        .await
        .map_err(|e| savepoint_failure(&target, e))?;
    println!(
        "savepoint `{name}` of job `{job}`: checkpoint {} ({copied} artifacts copied); \
         restore it with `weir run JOB.toml --restore savepoint:{name}`",
        metadata.id
    );
    Ok(())
}

/// `weir checkpoints delete-savepoint NAME --store STORE [--job NAME]`.
pub(super) async fn delete(name: &str, store: &str, job: Option<&str>) -> Result<(), Failure> {
    let target = StoreArg::open(store, "")?;
    let job = target.one_job(job, &format!("savepoint {name}")).await?;
    let deleted = savepoint::delete(&target.store_of(&job), name)
        .await
        .map_err(|e| savepoint_failure(&target, e))?;
    println!("deleted savepoint `{name}` of job `{job}` ({deleted} objects)");
    Ok(())
}

/// A store that cannot be read fails (exit 1); a wrong name or an existing savepoint is the
/// user's to fix (exit 2).
fn savepoint_failure(target: &StoreArg, e: SavepointError) -> Failure {
    match e {
        SavepointError::Storage(e) => target.unreadable(e),
        e => Failure::input(anyhow!("{}: {e}", target.url)),
    }
}
