//! `weir upgrade ID NEW_JOB.toml`: swaps a served job's code for a new version and keeps its
//! state (`crate::serve::registry` does the work). The command sends the new job file and
//! components as `weir submit` does, then waits until the upgrade has ended: the new version
//! completed its first checkpoint, or failed before it and was rolled back (or kept, with
//! `--no-rollback`). `--check` only asks what the upgrade would do to each operator's state.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::Failure;
use super::client::{HostArgs, call, job_info, print_jobs, submission};
use crate::serve::protocol::{JobInfo, UpgradeCheck, UpgradeRecord, UpgradeRequest, UpgradeStatus};

#[derive(Debug, clap::Args)]
pub(super) struct UpgradeArgs {
    /// The job's id on the host.
    id: String,
    /// The new version's job file; its components are sent with it. It keeps the job's
    /// name, source and sink.
    job: PathBuf,
    /// Keep the new version even if it fails before its first checkpoint (by default the
    /// old version then runs again, from the savepoint the upgrade took).
    #[arg(long)]
    no_rollback: bool,
    /// Only check: compile the new version and match its operators against the job's latest
    /// checkpoint, say what would happen to each one's state, and change nothing.
    #[arg(long, conflicts_with = "no_rollback")]
    check: bool,
    /// Let the new version drop the state of operator OP (its uid), which it no longer has,
    /// or the state STATE of OP, which OP no longer declares. Repeatable.
    #[arg(long, value_name = "OP[.STATE]")]
    allow_dropped_state: Vec<String>,
    /// How long to wait for the upgrade to end.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    timeout: u64,
    #[command(flatten)]
    host: HostArgs,
}

pub(super) fn upgrade(args: UpgradeArgs) -> Result<(), Failure> {
    super::runtime(false)?.block_on(run(args))
}

async fn run(args: UpgradeArgs) -> Result<(), Failure> {
    let request = UpgradeRequest {
        submission: submission(&args.job)?,
        no_rollback: args.no_rollback,
        check: args.check,
        allow_dropped_state: args.allow_dropped_state,
    };
    let path = format!("/v1/jobs/{}/upgrade", args.id);
    if args.check {
        let check: UpgradeCheck =
            call(&args.host, reqwest::Method::POST, &path, Some(&request)).await?;
        let at = check
            .checkpoint
            .map_or_else(String::new, |c| format!(", checked against checkpoint {c}"));
        outln!("upgrade of {} from version {}{at}:", check.job, check.from);
        for line in &check.operators {
            outln!("  {line}");
        }
        outln!("nothing was changed: run the same command without --check to upgrade");
        return Ok(());
    }
    let started: JobInfo = call(&args.host, reqwest::Method::POST, &path, Some(&request)).await?;
    let Some(asked) = started.upgrades.last().cloned() else {
        return Err(Failure::failed(anyhow!(
            "the host accepted the upgrade but records none"
        )));
    };
    eprintln!(
        "upgrading {} from version {} to {} (from {})...",
        args.id,
        asked.from,
        asked.to,
        restored_from(&asked)
    );
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let (info, upgrade) = loop {
        let info = job_info(&args.host, &args.id).await?;
        let upgrade = info.upgrades.iter().find(|u| u.to == asked.to).cloned();
        match upgrade {
            Some(u) if u.status != UpgradeStatus::InProgress => break (info, u),
            _ if Instant::now() >= deadline => {
                return Err(Failure::failed(anyhow!(
                    "the upgrade of {} to version {} did not end within {} s; it goes on \
                     (see `weir job {}`), or wait longer with --timeout",
                    args.id,
                    asked.to,
                    args.timeout,
                    args.id
                )));
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    print_jobs(&args.host, &[info])?;
    ended(&args.id, &upgrade)
}

/// Says how the upgrade ended: done is success, anything else a failure (exit 1).
fn ended(id: &str, upgrade: &UpgradeRecord) -> Result<(), Failure> {
    let reason = upgrade.reason.as_deref().unwrap_or("no reason given");
    match upgrade.status {
        UpgradeStatus::Done => {
            eprintln!(
                "upgraded {id} from version {} to {}: the new version completed its first \
                 checkpoint",
                upgrade.from, upgrade.to
            );
            Ok(())
        }
        UpgradeStatus::RolledBack => Err(Failure::failed(anyhow!(
            "the upgrade of {id} to version {} was rolled back: {reason}; version {} runs \
             again from {}",
            upgrade.to,
            upgrade.from,
            restored_from(upgrade)
        ))),
        UpgradeStatus::Failed | UpgradeStatus::InProgress => Err(Failure::failed(anyhow!(
            "the upgrade of {id} to version {} failed: {reason}",
            upgrade.to
        ))),
    }
}

/// What the versions of `upgrade` restore from: its savepoint, or (a Kafka job's) each
/// partition's latest checkpoint.
fn restored_from(upgrade: &UpgradeRecord) -> String {
    match upgrade.savepoint.as_str() {
        "" => "each partition's latest checkpoint".into(),
        name => format!("savepoint `{name}`"),
    }
}
