//! `weir checkpoints list STORE [--host URL] [--json]` and
//! `weir checkpoints show ID|latest --store STORE [--job NAME] [--host URL] [--json]` and
//! `weir checkpoints verify [ID|latest|all] --store STORE [--job NAME] [--json]`
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
//! Everything here reads; nothing writes or deletes, so it is safe to point at the store of a
//! running job.

use std::sync::Arc;

use anyhow::anyhow;
use object_store::ObjectStore;
use object_store::path::Path;

use super::Failure;
use super::client::{HostArgs, call};
use crate::checkpoint::CheckpointMetadata;
use crate::checkpoint::CheckpointStore;
use crate::checkpoint::metadata::BarrierTiming;
use crate::checkpoint::storage::open_store;
use crate::checkpoint::verify::CheckpointReport as VerifyReport;
use crate::ids::CheckpointId;
use crate::job::JobSpec;
use crate::serve::job_checkpoints::{InspectError, JobCheckpoints, Which, distinct_artifacts, utc};
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
    }
}

async fn verify(
    which: VerifyWhich,
    store: &str,
    job: Option<&str>,
    json: bool,
) -> Result<(), Failure> {
    let target = Target::open(store)?;
    let shown = match which {
        VerifyWhich::One(which) => which,
        VerifyWhich::All => Which::Latest,
    };
    let job = target.one_job(job, shown).await?;
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
        println!("{}", to_json(&reports)?);
    } else {
        for report in &reports {
            print!("{}", verify_text(report));
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
            let target = Target::open(store)?;
            let mut rows = Vec::new();
            for job in target.jobs().await? {
                let summaries = target
                    .checkpoints(&job)
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
            let target = Target::open(store)?;
            let job = target.one_job(job, which).await?;
            target
                .checkpoints(&job)
                .detail(which)
                .await
                .map_err(|e| match e {
                    InspectError::Storage(e) => target.unreadable(e),
                    e => Failure::input(anyhow!("{}: {e}", target.url)),
                })?
        }
    };
    if json {
        println!("{}", to_json(&detail.metadata)?);
    } else {
        print!("{}", describe(&detail));
    }
    Ok(())
}

/// The store to read and, when STORE was a job file or one job's folder, the one job to
/// read in it.
struct Target {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    job: Option<String>,
}

impl Target {
    /// Reads STORE: a job file if it is a file or looks like one, a folder, else a URL.
    fn open(arg: &str) -> Result<Self, Failure> {
        let as_path = std::path::Path::new(arg);
        let (url, job) = if as_path.is_file() || arg.ends_with(".toml") {
            let spec = JobSpec::load(as_path).map_err(Failure::input)?;
            let checkpoints = spec.checkpoints.ok_or_else(|| {
                Failure::input(anyhow!(
                    "job `{}` ({arg}) keeps no checkpoints: it has no [checkpoints] section",
                    spec.name
                ))
            })?;
            (checkpoints.store, Some(spec.name))
        } else if as_path.is_dir() {
            folder(as_path).map_err(Failure::input)?
        } else if url::Url::parse(arg).is_ok() {
            (arg.to_owned(), None)
        } else {
            return Err(Failure::input(anyhow!(
                "{arg} is neither a job file, a folder nor a store URL (for a job that \
                 `weir serve` runs, give its id with --host URL)"
            )));
        };
        // `open_store` creates a missing local folder (a job needs it); an inspection must
        // not, and a mistyped path should say so rather than list nothing.
        if let Ok(parsed) = url::Url::parse(&url)
            && parsed.scheme() == "file"
            && let Ok(dir) = parsed.to_file_path()
            && !dir.is_dir()
        {
            return Err(Failure::input(anyhow!(
                "cannot read the store {url}: the folder {} does not exist",
                dir.display()
            )));
        }
        let (store, prefix) = open_store(&url).map_err(|e| {
            Failure::input(
                anyhow!(e).context(format!("{arg} is neither a store URL nor a job file")),
            )
        })?;
        Ok(Self {
            url,
            store,
            prefix,
            job,
        })
    }

    /// The checkpoints of `job`, or of a Kafka job's partition named `job/partitions/p`.
    fn checkpoints(&self, job: &str) -> JobCheckpoints {
        JobCheckpoints::new(job, self.store_of(job))
    }

    /// The store of `job`'s checkpoints, or of a Kafka job's partition's.
    fn store_of(&self, job: &str) -> CheckpointStore {
        let store = match job
            .split_once(PARTITIONS)
            .and_then(|(name, p)| Some((name, p.parse().ok()?)))
        {
            Some((name, partition)) => {
                CheckpointStore::new(self.store.clone(), &self.prefix, name).partition(partition)
            }
            None => CheckpointStore::new(self.store.clone(), &self.prefix, job),
        };
        store.named_by(&self.url)
    }

    fn unreadable(&self, e: impl Into<anyhow::Error>) -> Failure {
        Failure::input(
            e.into()
                .context(format!("cannot read the store {}", self.url)),
        )
    }

    /// The jobs to look at: the one named, or every folder under the prefix that has a
    /// `checkpoints/` folder (the layout [`CheckpointStore`] writes), and every partition of
    /// a Kafka job (`job/partitions/p/checkpoints/`, named `job/partitions/p`), sorted by
    /// name.
    async fn jobs(&self) -> Result<Vec<String>, Failure> {
        if let Some(job) = &self.job {
            return Ok(vec![job.clone()]);
        }
        let top = self
            .store
            .list_with_delimiter(Some(&self.prefix))
            .await
            .map_err(|e| self.unreadable(e))?;
        let mut jobs = Vec::new();
        for folder in top.common_prefixes {
            let Some(name) = folder.filename().map(str::to_owned) else {
                continue;
            };
            let inside = self
                .store
                .list_with_delimiter(Some(&folder))
                .await
                .map_err(|e| self.unreadable(e))?;
            let has = |folder: &str| {
                inside
                    .common_prefixes
                    .iter()
                    .any(|p| p.filename() == Some(folder))
            };
            if has("checkpoints") {
                jobs.push(name.clone());
            }
            if has("partitions") {
                let partitions = self
                    .store
                    .list_with_delimiter(Some(&folder.clone().join("partitions")))
                    .await
                    .map_err(|e| self.unreadable(e))?;
                let mut numbers: Vec<i32> = partitions
                    .common_prefixes
                    .iter()
                    .filter_map(|p| p.filename()?.parse().ok())
                    .collect();
                numbers.sort_unstable();
                jobs.extend(numbers.iter().map(|p| format!("{name}{PARTITIONS}{p}")));
            }
        }
        jobs.sort_by(|a, b| {
            // Partitions in number order after their job.
            let key = |j: &str| match j.split_once(PARTITIONS) {
                Some((name, p)) => (name.to_owned(), p.parse::<i64>().unwrap_or(-1)),
                None => (j.to_owned(), -1),
            };
            key(a).cmp(&key(b))
        });
        Ok(jobs)
    }

    /// The job whose checkpoint `which` to show: `--job`, the target's, or the store's only
    /// one.
    async fn one_job(&self, job: Option<&str>, which: Which) -> Result<String, Failure> {
        if let Some(job) = job {
            return Ok(job.to_owned());
        }
        let jobs = self.jobs().await?;
        match jobs.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(Failure::input(anyhow!(
                "checkpoint {which} does not exist: {} holds no checkpoints",
                self.url
            ))),
            _ => Err(Failure::input(anyhow!(
                "{} holds the checkpoints of several jobs ({}); choose one with --job",
                self.url,
                jobs.join(", ")
            ))),
        }
    }
}

/// What joins a Kafka job's name and a partition's number in the name of the partition's
/// checkpoints: their folder.
const PARTITIONS: &str = "/partitions/";

/// The store URL and job a folder names (see the module's documentation).
fn folder(path: &std::path::Path) -> anyhow::Result<(String, Option<String>)> {
    let dir = std::path::absolute(path)?;
    let job_folder = if holds_metadata(&dir.join("checkpoints")) {
        Some(dir.as_path())
    } else if dir.file_name().is_some_and(|n| n == "checkpoints") && holds_metadata(&dir) {
        dir.parent()
    } else {
        None
    };
    let (store, job) = match job_folder.and_then(|j| Some((j.parent()?, j.file_name()?))) {
        Some((store, job)) => (store, Some(job.to_string_lossy().into_owned())),
        None => (dir.as_path(), None),
    };
    let url = url::Url::from_directory_path(store)
        .map_err(|()| anyhow!("cannot name {} as a URL", store.display()))?;
    Ok((url.to_string(), job))
}

/// Whether `dir` directly holds checkpoint metadata, `chk-<id>.json` (the layout of
/// `host/src/checkpoint/checkpoint_store.rs`). Directly: a store folder holds it only
/// further down, under each job's folder.
fn holds_metadata(dir: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with("chk-")
            && name.ends_with(".json")
            && e.file_type().is_ok_and(|t| t.is_file())
    })
}

fn print_list(rows: &[CheckpointSummary], json: bool) -> Result<(), Failure> {
    if json {
        println!("{}", to_json(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!("no completed checkpoints");
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
    table.extend(rows.iter().map(|r| match &r.damaged {
        Some(_) => vec![
            r.job.clone(),
            r.id.to_string(),
            "DAMAGED".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ],
        None => vec![
            r.job.clone(),
            r.id.to_string(),
            r.completed_at.clone(),
            yes_no(r.finished).to_owned(),
            r.subtasks.to_string(),
            r.artifacts.to_string(),
            r.bytes.to_string(),
        ],
    }));
    print!(
        "{}",
        render(&table, &[false, true, false, false, true, true, true])
    );
    // Why, below the table: the reasons are long.
    for r in rows {
        if let Some(why) = &r.damaged {
            println!("damaged: checkpoint {} of {}: {why}", r.id, r.job);
        }
    }
    Ok(())
}

/// The human-readable form of `show`.
fn describe(detail: &CheckpointDetail) -> String {
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
    match u64::try_from(w) {
        Ok(ms) => format!(
            "{} ({w} ms)",
            humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
            )
        ),
        Err(_) => format!("{w} ms"),
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
fn render(rows: &[Vec<String>], right: &[bool]) -> String {
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
