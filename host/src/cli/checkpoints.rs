//! `weir checkpoints list STORE [--host URL] [--json]` and
//! `weir checkpoints show ID|latest --store STORE [--job NAME] [--host URL] [--json]` and
//! `weir checkpoints verify [ID|latest|all] --store STORE [--job NAME] [--json]` and
//! `weir checkpoints delete-savepoint NAME --store STORE [--job NAME]`
//!
//! Read-only inspection of the checkpoints jobs left in an object store, so that an operator
//! can see what a restore would start from (and what it costs) without running anything.
//! STORE is one of:
//!
//! - a job file, whose `[checkpoints] store` and job name are used;
//! - a folder (relative or absolute): the store `file://` of its absolute path, every job
//!   under it; or, when it is one job's folder in a store (it holds that job's
//!   `checkpoints/chk-….json`) or that `checkpoints/` folder itself, that job only;
//! - an object-store URL (`file:///var/weir`, `s3://bucket/prefix`): every job under it;
//!
//! A Kafka job keeps checkpoints per partition (`job/partitions/p/`): each partition is
//! listed as a job named `job/partitions/p`, which `show --job` takes too.
//! - with `--host URL`, the id of a job that `weir serve` runs there, read through the host's
//!   API (`GET /v1/jobs/{id}/checkpoints`), which answers with what a store would give.
//!
//! `weir checkpoints delete-savepoint NAME --store STORE [--job NAME]` deletes a savepoint;
//! everything else here reads, and is safe to point at the store of a running job.

use anyhow::anyhow;

use super::Failure;
use super::client::{HostArgs, call};
use super::store_arg::{PARTITIONS, StoreArg};
use crate::checkpoint::CheckpointMetadata;
use crate::checkpoint::metadata::BarrierTiming;
use crate::checkpoint::verify::CheckpointReport as VerifyReport;
use crate::clock::utc;
use crate::ids::CheckpointId;
use crate::serve::job_checkpoints::{InspectError, JobCheckpoints, Which, distinct_artifacts};
use crate::serve::protocol::{CheckpointDetail, CheckpointSummary};

#[derive(Debug, clap::Args)]
pub struct CheckpointsArgs {
    #[command(subcommand)]
    command: CheckpointsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum CheckpointsCommand {
    /// List the completed checkpoints of every job in a store, or of one job.
    List {
        /// A job file (JOB.toml), a folder, an object-store URL (file:///dir,
        /// s3://bucket/prefix), or with --host a served job's id.
        #[arg(value_name = "STORE")]
        store: String,
        #[command(flatten)]
        served: Served,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one checkpoint: source position and every subtask's chain of artifacts.
    Show {
        /// The checkpoint id, or `latest`.
        #[arg(value_name = "ID|latest")]
        which: Which,
        /// A job file (JOB.toml), a folder, an object-store URL (file:///dir,
        /// s3://bucket/prefix), or with --host a served job's id.
        #[arg(long, value_name = "STORE")]
        store: String,
        /// The job, when the store holds the checkpoints of several.
        #[arg(long, value_name = "NAME", conflicts_with = "host")]
        job: Option<String>,
        #[command(flatten)]
        served: Served,
        /// Print the checkpoint's metadata as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read every artifact a checkpoint references, check every checksum and that every
    /// chain decodes: exit 0 when all is whole, 1 when something is damaged.
    Verify {
        /// The checkpoint id, `latest`, or `all` (every checkpoint of the job).
        #[arg(value_name = "ID|latest|all", default_value = "latest")]
        which: VerifyWhich,
        /// A job file (JOB.toml), a folder, or an object-store URL (file:///dir,
        /// s3://bucket/prefix).
        #[arg(long, value_name = "STORE")]
        store: String,
        /// The job, when the store holds the checkpoints of several.
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
        /// Print a JSON array of per-checkpoint reports instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Delete a savepoint (`weir savepoint`): its metadata first, then its copies.
    DeleteSavepoint {
        /// The savepoint's name.
        name: String,
        /// A job file (JOB.toml), a folder, or an object-store URL.
        #[arg(long, value_name = "STORE")]
        store: String,
        /// The job, when the store holds the checkpoints of several.
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
    },
}

/// Which checkpoints `verify` reads.
#[derive(Clone, Copy, Debug)]
enum VerifyWhich {
    All,
    One(Which),
}

impl std::str::FromStr for VerifyWhich {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(Self::All),
            _ => s.parse().map(Self::One).map_err(|_: String| {
                format!("{s:?} is not a checkpoint: use a checkpoint id, `latest` or `all`")
            }),
        }
    }
}

#[derive(Debug, clap::Args)]
struct Served {
    /// Read the checkpoints of a job run by `weir serve` at this URL: STORE is the job's id.
    /// The token is WEIR_TOKEN's, or ~/.config/weir/token's. (WEIR_HOST does not count
    /// here: without --host, STORE is read as a job file, folder or URL.)
    #[arg(long, value_name = "URL")]
    host: Option<String>,
}

pub fn checkpoints(args: CheckpointsArgs) -> Result<(), Failure> {
    // One thread is plenty for a handful of sequential requests; the runtime still needs
    // I/O and timers for remote stores.
    let runtime = super::runtime(false)?;
    match args.command {
        CheckpointsCommand::List {
            store,
            served,
            json,
        } => runtime.block_on(list(&store, served.host, json)),
        CheckpointsCommand::Show {
            which,
            store,
            job,
            served,
            json,
        } => runtime.block_on(show(which, &store, job.as_deref(), served.host, json)),
        CheckpointsCommand::Verify {
            which,
            store,
            job,
            json,
        } => runtime.block_on(verify(which, &store, job.as_deref(), json)),
        CheckpointsCommand::DeleteSavepoint { name, store, job } => {
            runtime.block_on(super::savepoint::delete(&name, &store, job.as_deref()))
        }
    }
}

async fn verify(
    which: VerifyWhich,
    store: &str,
    job: Option<&str>,
    json: bool,
) -> Result<(), Failure> {
    let target = StoreArg::open(store, SERVED_HINT)?;
    let shown = match which {
        VerifyWhich::One(which) => which,
        VerifyWhich::All => Which::Latest,
    };
    let job = target.one_job(job, &format!("checkpoint {shown}")).await?;
    let checkpoints = target.store_of(&job);
    let ids = checkpoints
        .completed()
        .await
        .map_err(|e| target.unreadable(e))?;
    let chosen: Vec<CheckpointId> = match which {
        VerifyWhich::All => ids.clone(),
        VerifyWhich::One(Which::Latest) => ids.last().copied().into_iter().collect(),
        VerifyWhich::One(Which::Id(id)) => ids.iter().copied().filter(|i| *i == id).collect(),
    };
    if chosen.is_empty() {
        return Err(Failure::input(match which {
            VerifyWhich::One(Which::Id(id)) => anyhow!(
                "checkpoint {id} of job `{job}` does not exist (or is no longer retained) in {}",
                target.url
            ),
            _ => anyhow!("job `{job}` has no checkpoints in {}", target.url),
        }));
    }
    let mut reports = Vec::new();
    for id in chosen {
        reports.push(
            crate::checkpoint::verify::verify(&checkpoints, &job, id)
                .await
                .map_err(|e| target.unreadable(e))?,
        );
    }
    if json {
        outln!("{}", to_json(&reports)?);
    } else {
        for report in &reports {
            out!("{}", verify_text(report));
        }
    }
    let damaged: Vec<String> = reports
        .iter()
        .filter(|r| !r.is_whole())
        .map(|r| r.checkpoint.to_string())
        .collect();
    match damaged.as_slice() {
        [] => Ok(()),
        [one] => Err(Failure::failed(anyhow!("checkpoint {one} is damaged"))),
        many => Err(Failure::failed(anyhow!(
            "checkpoints {} are damaged",
            many.join(", ")
        ))),
    }
}

/// A checkpoint's report: one line per artifact, then what is damaged.
fn verify_text(report: &VerifyReport) -> String {
    let mut text = format!(
        "checkpoint {} of job `{}`: {}\n",
        report.checkpoint,
        report.job,
        if report.is_whole() {
            "whole"
        } else {
            "DAMAGED"
        }
    );
    let mut rows = vec![cells(&["ARTIFACT", "BYTES", "SECTIONS", "STATUS"])];
    for a in &report.artifacts {
        rows.push(vec![
            a.path.clone(),
            a.bytes.to_string(),
            a.sections.to_string(),
            if a.damage.is_some() { "DAMAGED" } else { "ok" }.to_owned(),
        ]);
    }
    if !report.artifacts.is_empty() {
        text.push_str(&render(&rows, &[false, true, true, false]));
    }
    for damage in report.damage() {
        text.push_str(&format!("  damaged: {damage}\n"));
    }
    text
}

async fn list(store: &str, host: Option<String>, json: bool) -> Result<(), Failure> {
    let rows: Vec<CheckpointSummary> = match host {
        Some(host) => served(host, &format!("/v1/jobs/{store}/checkpoints")).await?,
        None => {
            let target = StoreArg::open(store, SERVED_HINT)?;
            let mut rows = Vec::new();
            for job in target.jobs().await? {
                let summaries = JobCheckpoints::new(&job, target.store_of(&job))
                    .summaries()
                    .await
                    .map_err(|e| target.unreadable(e))?;
                // A Kafka job's partition is listed as `job/partitions/p`, its folder.
                rows.extend(summaries.into_iter().map(|mut row| {
                    if job.contains(PARTITIONS) {
                        row.job = job.clone();
                    }
                    row
                }));
            }
            rows
        }
    };
    print_list(&rows, json)
}

/// What the host at `host` answers to a GET of `path`.
/// The end of the message for a STORE that is none of a job file, a folder or a URL.
const SERVED_HINT: &str = " (for a job that `weir serve` runs, give its id with --host URL)";

async fn served<T: serde::de::DeserializeOwned>(host: String, path: &str) -> Result<T, Failure> {
    call(&HostArgs::at(host), reqwest::Method::GET, path, None::<&()>).await
}

async fn show(
    which: Which,
    store: &str,
    job: Option<&str>,
    host: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let detail: CheckpointDetail = match host {
        Some(host) => served(host, &format!("/v1/jobs/{store}/checkpoints/{which}")).await?,
        None => {
            let target = StoreArg::open(store, SERVED_HINT)?;
            let job = target.one_job(job, &format!("checkpoint {which}")).await?;
            JobCheckpoints::new(&job, target.store_of(&job))
                .detail(which)
                .await
                .map_err(|e| match e {
                    InspectError::Storage(e) => target.unreadable(e),
                    e => Failure::input(anyhow!("{}: {e}", target.url)),
                })?
        }
    };
    if json {
        outln!("{}", to_json(&detail.metadata)?);
    } else {
        out!("{}", describe(&detail));
    }
    Ok(())
}

fn print_list(rows: &[CheckpointSummary], json: bool) -> Result<(), Failure> {
    if json {
        outln!("{}", to_json(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        outln!("no completed checkpoints");
        return Ok(());
    }
    let mut table = vec![cells(&[
        "JOB",
        "ID",
        "COMPLETED",
        "FINISHED",
        "SUBTASKS",
        "ARTIFACTS",
        "BYTES",
    ])];
    // A savepoint by what restores it.
    let id = |r: &CheckpointSummary| match &r.savepoint {
        Some(name) => format!("savepoint:{name}"),
        None => r.id.to_string(),
    };
    table.extend(rows.iter().map(|r| match &r.damaged {
        Some(_) => vec![
            r.job.clone(),
            id(r),
            "DAMAGED".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ],
        None => vec![
            r.job.clone(),
            id(r),
            r.completed_at.clone(),
            yes_no(r.finished).to_owned(),
            r.subtasks.to_string(),
            r.artifacts.to_string(),
            r.bytes.to_string(),
        ],
    }));
    out!(
        "{}",
        render(&table, &[false, true, false, false, true, true, true])
    );
    // Why, below the table: the reasons are long.
    for r in rows {
        match (&r.damaged, &r.savepoint) {
            (Some(why), Some(name)) => outln!("damaged: savepoint {name} of {}: {why}", r.job),
            (Some(why), None) => outln!("damaged: checkpoint {} of {}: {why}", r.id, r.job),
            (None, _) => {}
        }
    }
    Ok(())
}

/// The human-readable form of `show`.
pub fn describe(detail: &CheckpointDetail) -> String {
    use std::fmt::Write;

    let (m, stored) = (&detail.metadata, &detail.stored);
    let (artifacts, bytes) = distinct_artifacts(m);
    let mut out = String::new();
    let header = [
        ("job", m.job.clone()),
        ("checkpoint", m.id.to_string()),
        ("completed", utc(m.completed_at_ms)),
        ("finished", yes_no(m.finished).to_owned()),
        ("source", m.source.to_string()),
        ("key groups", m.key_groups.to_string()),
        ("artifacts", format!("{artifacts} ({bytes} bytes)")),
    ];
    for (name, value) in header.into_iter().chain(timing_lines(m)) {
        let _ = writeln!(out, "{name:<11} {value}");
    }
    for op in &m.operators {
        let _ = writeln!(
            out,
            "\noperator `{}` (parallelism {})",
            op.name, op.parallelism
        );
        if let Some(component) = &op.component {
            let _ = writeln!(out, "  component {component}");
        }
        if let Some(wit) = &op.wit {
            let _ = writeln!(out, "  wit       {wit}");
        }
        let states = op.states();
        if !states.is_empty() {
            let _ = writeln!(out, "  states    {}", states.join(", "));
        }
        for s in &op.subtasks {
            let sizes: Vec<String> = s.chain.iter().map(|a| a.bytes.to_string()).collect();
            let _ = writeln!(
                out,
                "  subtask {}: key groups {}..{}, chain of {}, {} bytes ({})",
                s.subtask,
                s.key_groups.0,
                s.key_groups.1,
                s.chain.len(),
                s.bytes(),
                sizes.join(" + ")
            );
            let amplification = s
                .space_amplification()
                .map_or_else(|| "-".to_owned(), |a| format!("{a:.2}"));
            let oldest = s.oldest().map_or_else(|| "-".to_owned(), |c| c.to_string());
            let _ = writeln!(
                out,
                "    oldest increment {oldest}, live {} bytes, stored {} bytes, space amplification {amplification}",
                s.live_bytes,
                s.bytes(),
            );
            let watermark = s
                .watermark
                .map_or_else(|| "none".to_owned(), watermark_text);
            let _ = writeln!(
                out,
                "    timers pending {}, watermark {watermark}",
                s.timers
            );
            let mut table = vec![cells(&[
                "PATH",
                "CHECKPOINT",
                "BYTES",
                "KIND",
                "OWNER",
                "STORED",
            ])];
            table.extend(s.chain.iter().map(|a| {
                vec![
                    a.path.clone(),
                    a.checkpoint.to_string(),
                    a.bytes.to_string(),
                    if a.full { "full" } else { "incremental" }.to_owned(),
                    a.owner.to_string(),
                    stored
                        .get(&a.path)
                        .map_or_else(|| "missing".to_owned(), ToString::to_string),
                ]
            }));
            for line in render(&table, &[false, true, true, false, true, true]).lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    out
}

/// A watermark as a UTC time with milliseconds, or the end of input.
fn watermark_text(w: i64) -> String {
    if w == crate::job::watermarks::END_OF_TIME {
        return "end of input".to_owned();
    }
    // RFC 3339 has four-digit years: humantime fails to format a later time (and `format!`
    // panics on a failing `Display`), so such a watermark, read from the metadata, is shown
    // in milliseconds only.
    const YEAR_10000_MS: u64 = 253_402_300_800_000;
    match u64::try_from(w).ok().filter(|&ms| ms < YEAR_10000_MS) {
        Some(ms) => format!(
            "{} ({w} ms)",
            humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
            )
        ),
        None => format!("{w} ms"),
    }
}

/// Where the checkpoint's time went, and which task waited or paused longest.
fn timing_lines(m: &CheckpointMetadata) -> Vec<(&'static str, String)> {
    let Some(t) = &m.timing else {
        return vec![(
            "timing",
            "not recorded (written by an older weir)".to_owned(),
        )];
    };
    let mut tasks: Vec<(String, BarrierTiming)> = Vec::new();
    for (op, subtasks) in m.operators.iter().zip(&t.operators) {
        for (i, timing) in subtasks.iter().enumerate() {
            tasks.push((format!("operator `{}` subtask {i}", op.name), *timing));
        }
    }
    tasks.push(("the sink".to_owned(), t.sink));
    let ms = |us: u64| format!("{:.1} ms", us as f64 / 1e3);
    let longest = |most: u64, field: fn(&BarrierTiming) -> u64| {
        let at = tasks.iter().find(|(_, t)| most > 0 && field(t) == most);
        at.map_or_else(String::new, |(name, _)| format!(", longest at {name}"))
    };
    vec![
        (
            "duration",
            format!(
                "{} (trigger to the last acknowledgement)",
                ms(t.duration_us)
            ),
        ),
        (
            "start delay",
            format!(
                "{} (trigger to first barrier){}",
                ms(t.start_delay_us),
                longest(t.start_delay_us, |t| t.start_delay_us)
            ),
        ),
        (
            "alignment",
            format!(
                "{} (first barrier to last){}",
                ms(t.alignment_us),
                longest(t.alignment_us, |t| t.alignment_us)
            ),
        ),
        (
            "sync pause",
            format!(
                "{}{}",
                ms(t.sync_pause_us),
                longest(t.sync_pause_us, |t| t.sync_pause_us)
            ),
        ),
    ]
}

fn to_json(value: &impl serde::Serialize) -> Result<String, Failure> {
    serde_json::to_string_pretty(value).map_err(Failure::failed)
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn cells(names: &[&str]) -> Vec<String> {
    names.iter().map(|&s| s.to_owned()).collect()
}

/// Aligns `rows` in columns two spaces apart; numbers (`right[i]`) align right.
pub(super) fn render(rows: &[Vec<String>], right: &[bool]) -> String {
    let mut widths = vec![0; right.len()];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = " ".repeat(widths[i] - cell.chars().count());
            if right[i] {
                line.push_str(&pad);
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&pad);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_past_year_9999_are_shown_in_milliseconds() {
        assert_eq!(
            watermark_text(1_700_000_000_000),
            "2023-11-14T22:13:20.000Z (1700000000000 ms)"
        );
        assert_eq!(watermark_text(253_402_300_800_000), "253402300800000 ms");
        assert_eq!(watermark_text(i64::MAX - 1), format!("{} ms", i64::MAX - 1));
        assert_eq!(watermark_text(-5), "-5 ms");
    }
}
