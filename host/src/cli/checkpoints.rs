//! `weir checkpoints list STORE [--json]` and
//! `weir checkpoints show ID --store STORE [--job NAME] [--json]`
//!
//! Read-only inspection of the checkpoints jobs left in an object store, so that an operator
//! can see what a restore would start from (and what it costs) without running anything.
//! STORE is an object-store URL (`file:///var/weir`, `s3://bucket/prefix`) or a job file,
//! whose `[checkpoints] store` and job name are used. Everything here reads; nothing writes
//! or deletes, so it is safe to point at the store of a running job.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use anyhow::anyhow;
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path;

use super::Failure;
use crate::checkpoint::metadata::BarrierTiming;
use crate::checkpoint::storage::open_store;
use crate::checkpoint::{CheckpointMetadata, CheckpointStore};
use crate::ids::CheckpointId;
use crate::job::JobSpec;

#[derive(Debug, clap::Args)]
pub struct CheckpointsArgs {
    #[command(subcommand)]
    command: CheckpointsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum CheckpointsCommand {
    /// List the completed checkpoints of every job in a store, or of a job file's job.
    List {
        /// An object-store URL (file:///dir, s3://bucket/prefix) or a job file (JOB.toml).
        #[arg(value_name = "STORE")]
        store: String,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one checkpoint: source position and every subtask's chain of artifacts.
    Show {
        /// The checkpoint id.
        id: u64,
        /// An object-store URL (file:///dir, s3://bucket/prefix) or a job file (JOB.toml).
        #[arg(long, value_name = "STORE")]
        store: String,
        /// The job, when the store holds the checkpoints of several.
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
        /// Print the checkpoint's metadata as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn checkpoints(args: CheckpointsArgs) -> Result<(), Failure> {
    // One thread is plenty for a handful of sequential requests; the runtime still needs
    // I/O and timers for remote stores.
    let runtime = super::runtime(false)?;
    match args.command {
        CheckpointsCommand::List { store, json } => runtime.block_on(list(&store, json)),
        CheckpointsCommand::Show {
            id,
            store,
            job,
            json,
        } => runtime.block_on(show(CheckpointId(id), &store, job.as_deref(), json)),
    }
}

/// The store to read and, when STORE was a job file, the one job to read in it.
struct Target {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    job: Option<String>,
}

impl Target {
    /// Reads STORE: a job file if it is a file or looks like one, else a URL.
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
        } else {
            (arg.to_owned(), None)
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

    fn checkpoint_store(&self, job: &str) -> CheckpointStore {
        CheckpointStore::new(self.store.clone(), &self.prefix, job)
    }

    fn unreadable(&self, e: impl Into<anyhow::Error>) -> Failure {
        Failure::input(
            e.into()
                .context(format!("cannot read the store {}", self.url)),
        )
    }

    /// The jobs to look at: the job file's, or every folder under the prefix that has a
    /// `checkpoints/` folder (the layout [`CheckpointStore`] writes), sorted by name.
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
            if inside
                .common_prefixes
                .iter()
                .any(|p| p.filename() == Some("checkpoints"))
            {
                jobs.push(name);
            }
        }
        jobs.sort();
        Ok(jobs)
    }

    /// The completed checkpoints of `job`, ascending.
    async fn completed(&self, job: &str) -> Result<Vec<CheckpointId>, Failure> {
        self.checkpoint_store(job)
            .completed()
            .await
            .map_err(|e| self.unreadable(e))
    }

    async fn metadata(&self, job: &str, id: CheckpointId) -> Result<CheckpointMetadata, Failure> {
        self.checkpoint_store(job)
            .read_metadata(id)
            .await
            .map_err(|e| self.unreadable(e))
    }
}

/// One row of `list`, also its JSON form.
#[derive(serde::Serialize)]
struct Row {
    job: String,
    id: u64,
    completed_at_ms: u64,
    completed_at: String,
    finished: bool,
    subtasks: usize,
    artifacts: usize,
    bytes: u64,
}

/// The artifacts a checkpoint references, each once: after a rescale several subtasks'
/// chains share an artifact, and counting it twice would overstate what the store holds.
fn distinct_artifacts(metadata: &CheckpointMetadata) -> (usize, u64) {
    let mut seen = HashSet::new();
    let mut bytes = 0;
    for artifact in metadata.artifacts() {
        if seen.insert(&artifact.path) {
            bytes += artifact.bytes;
        }
    }
    (seen.len(), bytes)
}

async fn list(store: &str, json: bool) -> Result<(), Failure> {
    let target = Target::open(store)?;
    let mut rows = Vec::new();
    for job in target.jobs().await? {
        for id in target.completed(&job).await? {
            let m = target.metadata(&job, id).await?;
            let (artifacts, bytes) = distinct_artifacts(&m);
            rows.push(Row {
                job: job.clone(),
                id: id.0,
                completed_at_ms: m.completed_at_ms,
                completed_at: utc(m.completed_at_ms),
                finished: m.finished,
                subtasks: m.operators.iter().map(|o| o.subtasks.len()).sum(),
                artifacts,
                bytes,
            });
        }
    }
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
    table.extend(rows.iter().map(|r| {
        vec![
            r.job.clone(),
            r.id.to_string(),
            r.completed_at.clone(),
            yes_no(r.finished).to_owned(),
            r.subtasks.to_string(),
            r.artifacts.to_string(),
            r.bytes.to_string(),
        ]
    }));
    print!(
        "{}",
        render(&table, &[false, true, false, false, true, true, true])
    );
    Ok(())
}

async fn show(id: CheckpointId, store: &str, job: Option<&str>, json: bool) -> Result<(), Failure> {
    let target = Target::open(store)?;
    let job = match job {
        Some(job) => job.to_owned(),
        None => {
            let jobs = target.jobs().await?;
            match jobs.as_slice() {
                [only] => only.clone(),
                [] => {
                    return Err(Failure::input(anyhow!(
                        "checkpoint {id} does not exist: {} holds no checkpoints",
                        target.url
                    )));
                }
                _ => {
                    return Err(Failure::input(anyhow!(
                        "{} holds the checkpoints of several jobs ({}); choose one with --job",
                        target.url,
                        jobs.join(", ")
                    )));
                }
            }
        }
    };
    let ids = target.completed(&job).await?;
    if !ids.contains(&id) {
        let existing = if ids.is_empty() {
            "it has no completed checkpoints".to_owned()
        } else {
            let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
            format!("completed checkpoints: {}", ids.join(", "))
        };
        return Err(Failure::input(anyhow!(
            "checkpoint {id} of job `{job}` does not exist in {}; {existing}",
            target.url
        )));
    }
    let m = target.metadata(&job, id).await?;
    if json {
        println!("{}", to_json(&m)?);
        return Ok(());
    }
    let stored = stored_sizes(&target, &job).await?;
    print!("{}", describe(&m, &target.checkpoint_store(&job), &stored));
    Ok(())
}

/// The size of every object under the job's `state/` folder, by full path, so that `show`
/// can say which referenced artifacts are actually present (a restore needs all of them).
async fn stored_sizes(target: &Target, job: &str) -> Result<BTreeMap<Path, u64>, Failure> {
    let cs = target.checkpoint_store(job);
    let state = cs.resolve("state");
    let objects: Vec<_> = cs
        .object_store()
        .list(Some(&state))
        .try_collect()
        .await
        .map_err(|e| target.unreadable(e))?;
    Ok(objects.into_iter().map(|o| (o.location, o.size)).collect())
}

/// The human-readable form of `show`.
fn describe(m: &CheckpointMetadata, cs: &CheckpointStore, stored: &BTreeMap<Path, u64>) -> String {
    use std::fmt::Write;

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
                        .get(&cs.resolve(&a.path))
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

/// `2023-11-14 22:13:20 UTC` from milliseconds since the Unix epoch, by hand: a calendar
/// crate for one timestamp format is not worth the dependency.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Year, month, day of the day `z` days after 1970-01-01 in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
