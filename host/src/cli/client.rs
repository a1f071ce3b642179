//! The commands that talk to a running `weir serve`: `submit`, `jobs`, `job` (with `--logs`,
//! its guests' log lines), `cancel`, `checkpoint` (which waits for the checkpoint and says
//! which it was), `restart`. `weir checkpoints --host` reads a served job's checkpoints
//! through [`call`] too.
//!
//! The host is `--host URL`, else `WEIR_HOST`, else `http://127.0.0.1:7070`; the token is
//! `WEIR_TOKEN`, else the file `$XDG_CONFIG_HOME/weir/token` (`~/.config/weir/token`).
//! Exit codes: 0 done, 1 the host failed or cannot be reached, 2 the request is wrong (a bad
//! job file, an unknown job), 3 the host refused the token.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use base64::Engine as _;
use reqwest::StatusCode;

use super::Failure;
use crate::job::JobSpec;
use crate::job::spec::{RecordPolicy, SinkSpec, SourceSpec, source_policy};
use crate::operator::LogLine;
use crate::serve::job_checkpoints::distinct_artifacts;
use crate::serve::protocol::{
    CheckpointDetail, ErrorBody, JobInfo, JobStatus, PartitionInfo, SubmitRequest,
};

#[derive(Debug, clap::Args)]
pub(super) struct HostArgs {
    /// The host's URL.
    #[arg(long, env = "WEIR_HOST", default_value = "http://127.0.0.1:7070")]
    host: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

impl HostArgs {
    /// The host at `url`, for a command that prints its answers itself.
    pub(super) fn at(url: String) -> Self {
        Self {
            host: url,
            json: false,
        }
    }
}

#[derive(Debug, clap::Subcommand)]
pub(super) enum ClientCommand {
    /// Submit a job file and its components to a host.
    Submit {
        job: PathBuf,
        #[command(flatten)]
        host: HostArgs,
    },
    /// List the host's jobs.
    Jobs {
        #[command(flatten)]
        host: HostArgs,
    },
    /// Show one job, or with --logs the lines its operators logged.
    Job {
        id: String,
        /// Show the job's guest log lines (newest last) instead of its status.
        #[arg(long)]
        logs: bool,
        /// How many of the last log lines to show.
        #[arg(long, default_value_t = 200, requires = "logs")]
        tail: usize,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Stop a job (its checkpoints stay).
    Cancel {
        id: String,
        /// Take a last checkpoint first, so a restart loses no progress.
        #[arg(long)]
        checkpoint: bool,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Ask a job for a checkpoint now, and wait until one completes.
    Checkpoint {
        id: String,
        /// How long to wait for the checkpoint to complete.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        timeout: u64,
        /// Only ask; do not wait for the checkpoint.
        #[arg(long, conflicts_with = "timeout")]
        no_wait: bool,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Run a job that ended (cancelled, failed, finished) again from a checkpoint.
    Restart {
        id: String,
        /// The checkpoint's id; the job's latest by default.
        #[arg(long)]
        checkpoint: Option<u64>,
        /// A savepoint of the job (`weir savepoint`) instead of a checkpoint.
        #[arg(long, value_name = "NAME", conflicts_with = "checkpoint")]
        savepoint: Option<String>,
        /// Let the restore drop the state of operator OP (its uid), which the job no longer
        /// has, or the state STATE of OP, which OP no longer declares. Repeatable.
        #[arg(long, value_name = "OP[.STATE]")]
        allow_dropped_state: Vec<String>,
        #[command(flatten)]
        host: HostArgs,
    },
}

pub(super) fn client(command: ClientCommand) -> Result<(), Failure> {
    let runtime = super::runtime(false)?;
    runtime.block_on(async {
        match command {
            ClientCommand::Submit { job, host } => {
                let request = submission(&job)?;
                let info: JobInfo =
                    call(&host, reqwest::Method::POST, "/v1/jobs", Some(&request)).await?;
                started(&host, info).await
            }
            ClientCommand::Jobs { host } => {
                let jobs: Vec<JobInfo> =
                    call(&host, reqwest::Method::GET, "/v1/jobs", None::<&()>).await?;
                print_jobs(&host, &jobs)
            }
            ClientCommand::Job {
                id,
                logs: true,
                tail,
                host,
            } => {
                let path = format!("/v1/jobs/{id}/logs?tail={tail}");
                let lines: Vec<LogLine> =
                    call(&host, reqwest::Method::GET, &path, None::<&()>).await?;
                print_logs(&host, &lines)
            }
            ClientCommand::Job { id, host, .. } => {
                let info = job_info(&host, &id).await?;
                print_job(&host, &info)
            }
            ClientCommand::Cancel {
                id,
                checkpoint,
                host,
            } => {
                let action = if checkpoint {
                    "cancel?checkpoint=true"
                } else {
                    "cancel"
                };
                act(&host, &id, action).await
            }
            ClientCommand::Checkpoint {
                id,
                timeout,
                no_wait,
                host,
            } => {
                let wait = (!no_wait).then_some(Duration::from_secs(timeout));
                checkpoint_now(&host, &id, wait).await
            }
            ClientCommand::Restart {
                id,
                checkpoint,
                savepoint,
                allow_dropped_state,
                host,
            } => {
                let mut query: Vec<String> = Vec::new();
                match (checkpoint, savepoint) {
                    (Some(c), _) => query.push(format!("checkpoint={c}")),
                    (None, Some(name)) => query.push(format!("savepoint={name}")),
                    (None, None) => {}
                }
                if !allow_dropped_state.is_empty() {
                    query.push(format!(
                        "allow_dropped_state={}",
                        allow_dropped_state.join(",")
                    ));
                }
                let action = match query.is_empty() {
                    true => "restart".to_owned(),
                    false => format!("restart?{}", query.join("&")),
                };
                act(&host, &id, &action).await
            }
        }
    })
}

/// `POST /v1/jobs/{id}/{action}`, then the job as it is (once started, for a restart).
async fn act(host: &HostArgs, id: &str, action: &str) -> Result<(), Failure> {
    let path = format!("/v1/jobs/{id}/{action}");
    let info: JobInfo = call(host, reqwest::Method::POST, &path, None::<&()>).await?;
    if action.starts_with("restart") {
        return started(host, info).await;
    }
    print_jobs(host, &[info])
}

/// Waits until the job `info` describes has started (every subtask opened its operator and
/// restored its state) or ended, then prints it: a job that failed before it started is an
/// error, with the job's. One that started and then failed on its records is printed as
/// failed: the submission itself worked.
async fn started(host: &HostArgs, mut info: JobInfo) -> Result<(), Failure> {
    while info.status == JobStatus::Running && !info.opened {
        tokio::time::sleep(Duration::from_millis(50)).await;
        info = job_info(host, &info.id).await?;
    }
    if info.status == JobStatus::Failed && !info.opened {
        let (id, error) = (info.id.clone(), info.error.clone().unwrap_or_default());
        print_jobs(host, &[info])?;
        return Err(Failure::failed(anyhow!(
            "job {id} failed as it started: {error}"
        )));
    }
    print_jobs(host, &[info])
}

/// `weir checkpoint ID`: asks for a checkpoint; unless `wait` is `None`, waits until one
/// completes (the first after the request) and says which, with its size as `weir
/// checkpoints list` counts it.
pub(super) async fn checkpoint_now(
    host: &HostArgs,
    id: &str,
    wait: Option<Duration>,
) -> Result<(), Failure> {
    let path = format!("/v1/jobs/{id}/checkpoint");
    let asked: JobInfo = call(host, reqwest::Method::POST, &path, None::<&()>).await?;
    if asked.status != JobStatus::Running {
        return Err(Failure::input(anyhow!(
            "job {id} is {}: only a running job takes checkpoints (run it again with `weir restart {id}`)",
            asked.status
        )));
    }
    let Some(timeout) = wait else {
        if host.json {
            return print_jobs(host, &[asked]);
        }
        outln!("checkpoint requested for {id}");
        return Ok(());
    };
    if asked.partitions.is_some() {
        return partition_checkpoints(host, id, &asked, timeout).await;
    }
    let before = asked.last_checkpoint.unwrap_or(0);
    let deadline = Instant::now() + timeout;
    let (info, completed) = loop {
        let info = job_info(host, id).await?;
        match info.last_checkpoint {
            Some(completed) if completed > before => break (info, completed),
            _ if info.status != JobStatus::Running => {
                return Err(Failure::failed(anyhow!(
                    "job {id} ended ({}) before the checkpoint completed{}",
                    info.status,
                    info.error.map(|e| format!(": {e}")).unwrap_or_default()
                )));
            }
            _ if Instant::now() >= deadline => {
                return Err(Failure::failed(anyhow!(
                    "no checkpoint of job {id} completed within {} s of the request; it may \
                     still complete (see `weir job {id}`), or wait longer with --timeout",
                    timeout.as_secs()
                )));
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    if host.json {
        return print_jobs(host, &[info]);
    }
    if !info.keeps_checkpoints {
        outln!(
            "checkpoint {completed} of {id} completed; the job keeps no checkpoints (its job \
             file has no [checkpoints] section), so nothing was stored"
        );
        return Ok(());
    }
    let path = format!("/v1/jobs/{id}/checkpoints/{completed}");
    let detail: Result<CheckpointDetail, _> =
        call(host, reqwest::Method::GET, &path, None::<&()>).await;
    let size = match detail {
        Ok(detail) => {
            let (artifacts, bytes) = distinct_artifacts(&detail.metadata);
            let plural = if artifacts == 1 { "" } else { "s" };
            format!(": {bytes} bytes in {artifacts} artifact{plural}")
        }
        // Retention may have removed it already, when checkpoints follow closely.
        Err(failure) => {
            eprintln!("warning: cannot read its size: {:#}", failure.error);
            String::new()
        }
    };
    outln!("checkpoint {completed} of {id} completed{size}");
    Ok(())
}

/// `GET /v1/jobs/{id}`.
pub(super) async fn job_info(host: &HostArgs, id: &str) -> Result<JobInfo, Failure> {
    let path = format!("/v1/jobs/{id}");
    call(host, reqwest::Method::GET, &path, None::<&()>).await
}

/// `weir checkpoint ID --wait` for a Kafka job: waits until every partition the host owned
/// when asked has completed a checkpoint since.
async fn partition_checkpoints(
    host: &HostArgs,
    id: &str,
    asked: &JobInfo,
    timeout: Duration,
) -> Result<(), Failure> {
    // By stage and partition: a job that re-keys owns partitions of each stage's topic.
    let before: BTreeMap<(usize, i32), u64> = asked
        .partitions
        .iter()
        .flatten()
        .map(|p| ((p.stage, p.partition), p.last_checkpoint.unwrap_or(0)))
        .collect();
    let deadline = Instant::now() + timeout;
    loop {
        let info = job_info(host, id).await?;
        let now = info.partitions.clone().unwrap_or_default();
        let done = before.iter().all(|((stage, partition), before)| {
            now.iter()
                .find(|p| p.stage == *stage && p.partition == *partition)
                // One let go of meanwhile checkpoints on its new host.
                .is_none_or(|p| p.last_checkpoint.unwrap_or(0) > *before)
        });
        if done {
            if host.json {
                return print_jobs(host, &[info]);
            }
            for p in &now {
                let stage = match p.stage {
                    0 => String::new(),
                    k => format!("stage {k} "),
                };
                outln!(
                    "{stage}partition {}: checkpoint {} completed",
                    p.partition,
                    p.last_checkpoint
                        .map_or_else(|| "-".into(), |c| c.to_string())
                );
            }
            return Ok(());
        }
        if info.status != JobStatus::Running {
            return Err(Failure::failed(anyhow!(
                "job {id} ended ({}) before the checkpoints completed{}",
                info.status,
                info.error.map(|e| format!(": {e}")).unwrap_or_default()
            )));
        }
        if Instant::now() >= deadline {
            return Err(Failure::failed(anyhow!(
                "not every partition of job {id} completed a checkpoint within {} s of the \
                 request; see `weir job {id}`, or wait longer with --timeout",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The job file with source, sink and dead-letter paths made absolute (the host reads and
/// writes them), and its components.
pub(super) fn submission(job: &Path) -> Result<SubmitRequest, Failure> {
    let spec = JobSpec::load(job).map_err(Failure::input)?;
    for stale in crate::build::stale_components(
        spec.operators
            .iter()
            .map(|op| (op.name.as_str(), op.component.as_path())),
    ) {
        eprintln!("warning: {stale}");
    }
    let text = std::fs::read_to_string(job)
        .with_context(|| format!("cannot read {}", job.display()))
        .map_err(Failure::input)?;
    // The spec resolved paths against the job file's folder; the host needs them whole.
    let mut table: toml::Table = toml::from_str(&text).map_err(Failure::input)?;
    absolute_paths(&spec, &mut table)?;
    absolute_dead_letters(&spec, &mut table)?;
    Ok(SubmitRequest {
        job: table.to_string(),
        components: components(&spec)?,
    })
}

/// The source's and sink's files named whole in the job file `table`, and a Kafka job's
/// checkpoint store: it stays the job file's, shared by the hosts of its group (the default
/// one, next to the job file, is named whole).
fn absolute_paths(spec: &JobSpec, table: &mut toml::Table) -> Result<(), Failure> {
    let source = match &spec.source {
        SourceSpec::TextLines { path, .. } | SourceSpec::JsonLines { path, .. } => Some(path),
        SourceSpec::Generator { .. } | SourceSpec::Kafka(_) => None,
    };
    let sink = match &spec.sink {
        SinkSpec::File { path } => Some(path),
        SinkSpec::Stdout | SinkSpec::Discard | SinkSpec::Kafka(_) => None,
    };
    for (section, path) in [("source", source), ("sink", sink)] {
        if let Some(path) = path
            && let Some(section) = table.get_mut(section).and_then(|s| s.as_table_mut())
        {
            section.insert(
                "path".into(),
                toml::Value::String(absolute(path)?.display().to_string()),
            );
        }
    }
    if let (SourceSpec::Kafka(_), Some(checkpoints), Some(section)) = (
        &spec.source,
        &spec.checkpoints,
        table.get_mut("checkpoints").and_then(|s| s.as_table_mut()),
    ) {
        section.insert(
            "store".into(),
            toml::Value::String(checkpoints.store.clone()),
        );
    }
    Ok(())
}

/// Every dead-letter file of the job file `table` named whole.
fn absolute_dead_letters(spec: &JobSpec, table: &mut toml::Table) -> Result<(), Failure> {
    let value = |policy: &RecordPolicy| -> Result<Option<toml::Value>, Failure> {
        let Some(path) = policy.dead_letter() else {
            return Ok(None);
        };
        let mut table = toml::Table::new();
        table.insert(
            "dead_letter".into(),
            toml::Value::String(absolute(path)?.display().to_string()),
        );
        Ok(Some(toml::Value::Table(table)))
    };
    if let (Some(policy), Some(section)) = (
        source_policy(&spec.source),
        table.get_mut("source").and_then(|s| s.as_table_mut()),
    ) && let Some(value) = value(policy)?
    {
        section.insert("on_bad_record".into(), value);
    }
    if let Some(operators) = table.get_mut("operators").and_then(|o| o.as_array_mut()) {
        for (op, spec) in operators.iter_mut().zip(&spec.operators) {
            let Some(op) = op.as_table_mut() else {
                continue;
            };
            for (field, policy) in [
                ("on_error", &spec.on_error),
                ("on_bad_record", &spec.on_bad_record),
            ] {
                if let Some(value) = value(policy)? {
                    op.insert(field.into(), value);
                }
            }
        }
    }
    Ok(())
}

fn absolute(path: &Path) -> Result<std::path::PathBuf, Failure> {
    std::path::absolute(path)
        .with_context(|| format!("cannot make {} absolute", path.display()))
        .map_err(Failure::input)
}

/// Each operator's component, base64, by operator name.
fn components(spec: &JobSpec) -> Result<BTreeMap<String, String>, Failure> {
    let mut components = BTreeMap::new();
    for op in &spec.operators {
        let bytes = std::fs::read(&op.component)
            .with_context(|| format!("cannot read {}", op.component.display()))
            .map_err(Failure::input)?;
        components.insert(
            op.name.clone(),
            base64::engine::general_purpose::STANDARD.encode(bytes),
        );
    }
    Ok(components)
}

fn token() -> Result<String, Failure> {
    if let Ok(token) = std::env::var("WEIR_TOKEN") {
        return Ok(token);
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|c| c.join("weir/token"));
    match config.as_ref().map(std::fs::read_to_string) {
        Some(Ok(token)) => Ok(token.trim().to_owned()),
        _ => Err(Failure::input(anyhow!(
            "no token: set WEIR_TOKEN or write it to {}",
            config.map_or_else(
                || "~/.config/weir/token".into(),
                |c| c.display().to_string()
            )
        ))),
    }
}

pub(super) async fn call<T: serde::de::DeserializeOwned>(
    host: &HostArgs,
    method: reqwest::Method,
    path: &str,
    body: Option<&impl serde::Serialize>,
) -> Result<T, Failure> {
    let url = format!("{}{path}", host.host.trim_end_matches('/'));
    let mut request = crate::http::client()
        .request(method, &url)
        .bearer_auth(token()?);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("cannot reach the host at {}", host.host))
        .map_err(Failure::failed)?;
    let status = response.status();
    if status.is_success() {
        return response
            .json()
            .await
            .context("the host sent an unreadable answer")
            .map_err(Failure::failed);
    }
    let message = response
        .json::<ErrorBody>()
        .await
        .map_or_else(|_| status.to_string(), |e| e.error);
    let error = anyhow!("{} ({status})", message);
    Err(match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Failure {
            code: 3,
            error: error.context("the host refused the token"),
        },
        s if s.is_client_error() => Failure::input(error),
        _ => Failure::failed(error),
    })
}

pub(super) fn print_jobs(host: &HostArgs, jobs: &[JobInfo]) -> Result<(), Failure> {
    if host.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(jobs).map_err(Failure::failed)?
        );
        return Ok(());
    }
    let kafka = jobs.iter().any(|j| j.partitions.is_some());
    let (partitions_header, lag_header) = if kafka {
        ("PARTITIONS", "LAG")
    } else {
        ("", "")
    };
    outln!(
        "{:<10} {:<20} {:<10} {:>12} {:>12} {:>11} {:<12} {:>8}",
        "ID",
        "NAME",
        "STATUS",
        "RECORDS IN",
        "RECORDS OUT",
        "CHECKPOINT",
        partitions_header,
        lag_header
    );
    for j in jobs {
        // A Kafka job: the partitions this host owns, and their lag in messages.
        let (partitions, lag) = match &j.partitions {
            Some(owned) => (
                owned_partitions(owned),
                owned.iter().map(|p| p.lag).sum::<i64>().to_string(),
            ),
            None => (String::new(), String::new()),
        };
        let line = format!(
            "{:<10} {:<20} {:<10} {:>12} {:>12} {:>11} {:<12} {:>8}",
            j.id,
            j.name,
            j.status.to_string(),
            j.source_records,
            j.sink_records,
            j.last_checkpoint
                .map_or_else(|| "-".into(), |c| c.to_string()),
            partitions,
            lag
        );
        outln!("{}", line.trim_end());
    }
    Ok(())
}

/// `0,2,4`, or `-` for none; a job that re-keys adds each later stage's: `0,2; stage 1: 1,3`.
fn owned_partitions(owned: &[PartitionInfo]) -> String {
    if owned.is_empty() {
        return "-".into();
    }
    let mut stages: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for p in owned {
        stages
            .entry(p.stage)
            .or_default()
            .push(p.partition.to_string());
    }
    let listed: Vec<String> = stages
        .into_iter()
        .map(|(stage, numbers)| match stage {
            0 => numbers.join(","),
            k => format!("stage {k}: {}", numbers.join(",")),
        })
        .collect();
    listed.join("; ")
}

fn print_logs(host: &HostArgs, lines: &[LogLine]) -> Result<(), Failure> {
    if host.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(lines).map_err(Failure::failed)?
        );
    } else {
        for line in lines {
            outln!("{line}");
        }
    }
    Ok(())
}

fn print_job(host: &HostArgs, job: &JobInfo) -> Result<(), Failure> {
    if host.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(job).map_err(Failure::failed)?
        );
        return Ok(());
    }
    outln!("job         {} ({})", job.id, job.name);
    outln!("status      {}", job.status);
    if let Some(error) = &job.error {
        outln!("error       {error}");
    }
    outln!("source      {} records", job.source_records);
    outln!("sink        {} records", job.sink_records);
    outln!(
        "checkpoints {} completed, last {}",
        job.checkpoints_completed,
        job.last_checkpoint
            .map_or_else(|| "-".into(), |c| c.to_string())
    );
    outln!(
        "\n{:<20} {:>11} {:>12} {:>12}",
        "OPERATOR",
        "PARALLELISM",
        "RECORDS IN",
        "RECORDS OUT"
    );
    for o in &job.operators {
        outln!(
            "{:<20} {:>11} {:>12} {:>12}",
            o.name,
            o.parallelism,
            o.records_in,
            o.records_out
        );
    }
    if let Some(owned) = &job.partitions {
        outln!(
            "\npartitions owned by this host: {} (counts of each partition's whole history)",
            owned_partitions(owned)
        );
        let topic = |p: &PartitionInfo| p.topic.clone().unwrap_or_default();
        let width = owned
            .iter()
            .map(|p| topic(p).len())
            .max()
            .unwrap_or(0)
            .max(5);
        outln!(
            "{:<width$} {:<10} {:>10} {:>12} {:>12} {:>11}",
            "TOPIC",
            "PARTITION",
            "LAG",
            "RECORDS IN",
            "RECORDS OUT",
            "CHECKPOINT"
        );
        for p in owned {
            outln!(
                "{:<width$} {:<10} {:>10} {:>12} {:>12} {:>11}",
                topic(p),
                p.partition,
                p.lag,
                p.source_records,
                p.sink_records,
                p.last_checkpoint
                    .map_or_else(|| "-".into(), |c| c.to_string())
            );
        }
    }
    if !job.upgrades.is_empty() {
        outln!("\nversion {} (upgrades, oldest first)", job.version);
        outln!(
            "{:<8} {:<23} {:<12} {:<14} WHY",
            "VERSION",
            "ASKED",
            "STATUS",
            "SAVEPOINT"
        );
        for u in &job.upgrades {
            outln!(
                "{:<8} {:<23} {:<12} {:<14} {}",
                format!("{} -> {}", u.from, u.to),
                crate::clock::utc(u.at_ms),
                u.status.to_string(),
                if u.savepoint.is_empty() {
                    "-"
                } else {
                    &u.savepoint
                },
                u.reason.as_deref().unwrap_or("")
            );
        }
    }
    Ok(())
}
