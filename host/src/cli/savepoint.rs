//! `weir savepoint STORE --name NAME [--checkpoint ID|latest] [--job NAME]` (and the
//! deletion behind `weir checkpoints delete-savepoint`): a job's completed checkpoint
//! copied out of its chain under a name, which retention, cleanup and `--fresh` leave alone
//! and `weir run JOB.toml --restore savepoint:NAME` restores (`crate::checkpoint::savepoint`).
//! STORE is read as `weir checkpoints` reads it: a job file, a folder or a store URL.

use anyhow::anyhow;

use std::time::Duration;

use super::Failure;
use super::client::{HostArgs, call, checkpoint_now, job_info};
use super::store_arg::StoreArg;
use crate::checkpoint::savepoint::{self, SavepointError};
use crate::serve::job_checkpoints::{InspectError, JobCheckpoints, SaveError, Which};
use crate::serve::protocol::{JobStatus, SavepointInfo, SavepointRequest};

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
    #[arg(long, value_name = "NAME", conflicts_with = "host")]
    job: Option<String>,
    /// A job that `weir serve` runs at this URL: STORE is the job's id. A running job first
    /// takes a checkpoint (unless --checkpoint names one), so the savepoint holds its state
    /// as of now. The token is WEIR_TOKEN's, or ~/.config/weir/token's.
    #[arg(long, value_name = "URL")]
    host: Option<String>,
}

pub(super) fn savepoint(args: SavepointArgs) -> Result<(), Failure> {
    let runtime = super::runtime(false)?;
    match args.host {
        Some(host) => runtime.block_on(create_served(
            host,
            &args.store,
            &args.name,
            args.checkpoint,
        )),
        None => runtime.block_on(create(
            &args.store,
            &args.name,
            args.checkpoint,
            args.job.as_deref(),
        )),
    }
}

/// `weir savepoint ID --host URL`: through the host's API.
async fn create_served(host: String, id: &str, name: &str, which: Which) -> Result<(), Failure> {
    let host = HostArgs::at(host);
    let checkpoint = match which {
        Which::Id(checkpoint) => Some(checkpoint.0),
        Which::Latest => {
            let info = job_info(&host, id).await?;
            // A Kafka job has no savepoints: the host says so below, before any checkpoint.
            if info.status == JobStatus::Running && info.partitions.is_none() {
                checkpoint_now(&host, id, Some(Duration::from_secs(60))).await?;
            }
            None
        }
    };
    let request = SavepointRequest {
        name: name.to_owned(),
        checkpoint,
    };
    let path = format!("/v1/jobs/{id}/savepoints");
    let saved: SavepointInfo = call(&host, reqwest::Method::POST, &path, Some(&request)).await?;
    outln!("{}", saved_message(&saved));
    Ok(())
}

fn saved_message(saved: &SavepointInfo) -> String {
    format!(
        "savepoint `{}` of job `{}`: checkpoint {} ({} artifacts copied); restore it with \
         `weir run JOB.toml --restore savepoint:{}`",
        saved.name, saved.job, saved.checkpoint, saved.artifacts, saved.name
    )
}

async fn create(store: &str, name: &str, which: Which, job: Option<&str>) -> Result<(), Failure> {
    let target = StoreArg::open(store, "")?;
    let job = target.one_job(job, &format!("checkpoint {which}")).await?;
    let saved = JobCheckpoints::new(&job, target.store_of(&job))
        .save_as(which, name)
        .await
        .map_err(|e| match e {
            SaveError::Inspect(InspectError::Storage(e))
            | SaveError::Savepoint(SavepointError::Storage(e)) => target.unreadable(e),
            e => Failure::input(anyhow!("{}: {e}", target.url)),
        })?;
    outln!("{}", saved_message(&saved));
    Ok(())
}

/// `weir checkpoints delete-savepoint NAME --store STORE [--job NAME]`.
pub(super) async fn delete(name: &str, store: &str, job: Option<&str>) -> Result<(), Failure> {
    let target = StoreArg::open(store, "")?;
    let job = target.one_job(job, &format!("savepoint {name}")).await?;
    let deleted = savepoint::delete(&target.store_of(&job), name)
        .await
        .map_err(|e| savepoint_failure(&target, e))?;
    outln!("deleted savepoint `{name}` of job `{job}` ({deleted} objects)");
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
