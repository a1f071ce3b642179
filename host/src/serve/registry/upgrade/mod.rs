//! `weir upgrade`: a served job's code swapped for a new version without losing its state
//! (DESIGN.md §8.8).
//!
//! An upgrade is checked before anything stops: the new job file and components are
//! written into `jobs/<id>/versions/<n>/` and compiled, they must keep the job's name,
//! source and sink, and the job's latest checkpoint (a Kafka job's: each partition's) must
//! restore into them ([`check`]; `--check` also restores it offline). Then the old version
//! stops after a last checkpoint, that checkpoint is copied into the savepoint
//! `upgrade-<n>`, and the new version starts from it. If the new version fails before its
//! first checkpoint completes (a trap, a refused restore, a limit), the old version starts
//! again from the same savepoint, unless the upgrade said not to roll back. Nothing the new
//! version wrote reaches the output before a checkpoint of it completes, so a rollback loses
//! and repeats nothing.
//!
//! Every step is recorded in the job's `job.json` before it is taken, so a host killed in
//! the middle resumes the version that was running and, if it was the new one, still rolls
//! back if that fails before its first checkpoint ([`Versions::interrupted`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

mod check;

use super::{HostedJob, JobRecord, Registry, info, unix_ms};
use crate::checkpoint::{CheckpointStore, RestoreFrom};
use crate::job::JobSpec;
use crate::serve::job_checkpoints::Which;
use crate::serve::protocol::{
    JobInfo, JobStatus, UpgradeCheck, UpgradeRecord, UpgradeRequest, UpgradeStatus,
};

/// Why an upgrade cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("no job {0}")]
    NoSuchJob(String),
    #[error("job {0} is being upgraded already: wait for that upgrade to end (`weir job {0}`)")]
    InProgress(String),
    /// The new version cannot replace the old one; nothing was changed.
    #[error("{0}")]
    Refused(String),
}

/// What an upgrade request did.
#[derive(Debug)]
pub enum UpgradeAnswer {
    /// The upgrade goes on in the background: the job's `upgrades` say how it ends.
    Started(JobInfo),
    /// `--check`: what the upgrade would do; nothing was changed.
    Checked(UpgradeCheck),
}

/// Which version of a job runs, and its upgrades: kept in its `job.json`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Versions {
    #[serde(default = "first_version", rename = "version")]
    pub(super) current: u32,
    #[serde(default)]
    pub(super) upgrades: Vec<UpgradeRecord>,
}

fn first_version() -> u32 {
    1
}

impl Default for Versions {
    fn default() -> Self {
        Self {
            current: first_version(),
            upgrades: Vec::new(),
        }
    }
}

impl Versions {
    /// The job file of the version that runs.
    pub(super) fn job_file(&self, dir: &Path) -> PathBuf {
        version_dir(dir, self.current).join("job.toml")
    }

    /// The number the next upgrade gets: above every version recorded or written (an upgrade
    /// the host stopped before recording it may have left a folder).
    fn next(&self, dir: &Path) -> u32 {
        let written = std::fs::read_dir(dir.join("versions"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
        let recorded = self.upgrades.iter().map(|u| u.to);
        written
            .chain(recorded)
            .chain([self.current])
            .max()
            .unwrap_or(1)
            + 1
    }

    /// The upgrade in progress, if any.
    fn in_progress(&mut self) -> Option<&mut UpgradeRecord> {
        self.upgrades
            .last_mut()
            .filter(|u| u.status == UpgradeStatus::InProgress)
    }

    /// Whether an upgrade was in progress: the job is meant to run then, whatever its last
    /// run's status (the old version's ends as it is stopped for the upgrade).
    pub(super) fn upgrading(&self) -> bool {
        self.upgrades
            .last()
            .is_some_and(|u| u.status == UpgradeStatus::InProgress)
    }

    /// After the host stopped in the middle of an upgrade: the upgrade to watch, if the new
    /// version had started; otherwise the upgrade is recorded as failed, and the old version
    /// resumes.
    pub(super) fn interrupted(&mut self) -> Option<UpgradeRecord> {
        let current = self.current;
        let upgrade = self.in_progress()?;
        if current == upgrade.to {
            return Some(upgrade.clone());
        }
        upgrade.status = UpgradeStatus::Failed;
        upgrade.reason = Some(format!(
            "the host stopped before version {} started; version {} resumed",
            upgrade.to, upgrade.from
        ));
        None
    }

    /// Records how the upgrade in progress ended.
    fn end(&mut self, status: UpgradeStatus, reason: Option<String>) {
        if let Some(upgrade) = self.in_progress() {
            upgrade.status = status;
            upgrade.reason = reason;
        }
    }
}

/// The folder of version `version` of the job whose folder is `dir`: the job's own for
/// the version submitted.
pub(super) fn version_dir(dir: &Path, version: u32) -> PathBuf {
    match version {
        0 | 1 => dir.to_owned(),
        n => dir.join("versions").join(n.to_string()),
    }
}

impl Registry {
    /// Upgrades job `id` to the version `request` sends: checks it, then (unless only
    /// checking) stops, saves, swaps and watches in the background.
    pub async fn upgrade(
        self: &Arc<Self>,
        id: &str,
        request: UpgradeRequest,
    ) -> Result<UpgradeAnswer, UpgradeError> {
        let job = self
            .jobs()
            .get(id)
            .cloned()
            .ok_or_else(|| UpgradeError::NoSuchJob(id.to_owned()))?;
        if !self.upgrading().insert(id.to_owned()) {
            return Err(UpgradeError::InProgress(id.to_owned()));
        }
        let answer = self.begin_upgrade(job, request).await;
        if !matches!(answer, Ok(UpgradeAnswer::Started(_))) {
            self.upgrading().remove(id);
        }
        answer
    }

    async fn begin_upgrade(
        self: &Arc<Self>,
        job: Arc<HostedJob>,
        request: UpgradeRequest,
    ) -> Result<UpgradeAnswer, UpgradeError> {
        let refused = |m: String| UpgradeError::Refused(m);
        let id = job.id.clone();
        if job.checkpoint_store.is_none() {
            return Err(refused(format!(
                "job {id} keeps no checkpoints (its job file has no [checkpoints] section): \
                 there is no state to carry over; submit the new version as a new job"
            )));
        }
        if job.status() == JobStatus::Finished {
            return Err(refused(format!(
                "job {id} finished: it read its input to the end, so a new version would have \
                 nothing to run on; submit the new version as a new job"
            )));
        }
        let dir = self.job_dir(&id);
        let (from, to) = {
            let versions = job.versions();
            (versions.current, versions.next(&dir))
        };
        let folder = version_dir(&dir, to);
        let checked = self.check_upgrade(&job, &request, &folder, from).await;
        let (spec, check) = match checked {
            Ok(checked) if !request.check => checked,
            Ok((_, check)) => {
                let _ = std::fs::remove_dir_all(&folder);
                return Ok(UpgradeAnswer::Checked(check));
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&folder);
                return Err(refused(e));
            }
        };
        tracing::info!(job = %id, from, to, operators = ?check.operators, "upgrading");
        let upgrade = UpgradeRecord {
            from,
            to,
            at_ms: unix_ms(),
            // A Kafka job's partitions each keep their own checkpoints: each restores its
            // latest, with no savepoint.
            savepoint: match job.group {
                Some(_) => String::new(),
                None => format!("upgrade-{to}"),
            },
            rollback: !request.no_rollback,
            allow_dropped_state: request.allow_dropped_state.clone(),
            status: UpgradeStatus::InProgress,
            reason: None,
        };
        job.versions().upgrades.push(upgrade.clone());
        JobRecord::of(&job).write(&dir);
        let answer = info(&job);
        tokio::spawn(self.clone().carry_out(job, spec, upgrade));
        Ok(UpgradeAnswer::Started(answer))
    }

    /// Writes the new version into `folder` and checks it against version `from` and the
    /// job's latest checkpoint; changes nothing else.
    async fn check_upgrade(
        self: &Arc<Self>,
        job: &HostedJob,
        request: &UpgradeRequest,
        folder: &Path,
        from: u32,
    ) -> Result<(JobSpec, UpgradeCheck), String> {
        let dir = self.job_dir(&job.id);
        let (registry, id) = (self.clone(), job.id.clone());
        let (into, submission) = (folder.to_owned(), request.submission.job.clone());
        let components = request.submission.components.clone();
        // Writing and compiling components blocks.
        let spec = tokio::task::spawn_blocking(move || {
            let request = crate::serve::protocol::SubmitRequest {
                job: submission,
                components,
            };
            registry.prepared(&into, &dir, &request, Some(&id))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let dir = self.job_dir(&job.id);
        kept_in_place(&version_dir(&dir, from), folder, &job.name, &spec)?;
        let store_url = job.checkpoint_store.as_deref().unwrap_or_default();
        let (engine, allowed) = (&self.engine, &request.allow_dropped_state);
        let latest = if job.group.is_some() {
            // A Kafka job's partitions each keep their own checkpoints.
            let notes = check::partitions(&spec, store_url, engine, allowed, request.check).await?;
            check::Checked {
                checkpoint: None,
                notes,
            }
        } else {
            let store = CheckpointStore::open(store_url, &spec.name).map_err(|e| e.to_string())?;
            let checked = check::latest(&spec, store, engine, allowed, request.check).await?;
            if checked.checkpoint.is_none() && job.status() != JobStatus::Running {
                return Err(format!(
                    "job {} ({}) has no completed checkpoint to carry its state over from",
                    job.id,
                    job.status()
                ));
            }
            checked
        };
        let check = UpgradeCheck {
            job: job.id.clone(),
            from,
            checkpoint: latest.checkpoint,
            operators: latest.notes,
        };
        Ok((spec, check))
    }

    /// Stops the old version after a last checkpoint, saves it, starts the new version from
    /// the savepoint and watches it.
    async fn carry_out(
        self: Arc<Self>,
        job: Arc<HostedJob>,
        spec: JobSpec,
        upgrade: UpgradeRecord,
    ) {
        let was_running = job.status() == JobStatus::Running;
        if was_running {
            job.clone().stop_after_checkpoint().await;
        }
        job.ended().await;
        let saved = match self.checkpoints(&job.id) {
            _ if job.group.is_some() => Ok(()),
            Ok(checkpoints) => checkpoints
                .save_as(Which::Latest, &upgrade.savepoint)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = saved {
            let reason = format!("cannot take the savepoint `{}`: {e}", upgrade.savepoint);
            tracing::warn!(job = %job.id, %reason, "upgrade failed");
            let dir = self.job_dir(&job.id);
            job.versions().end(UpgradeStatus::Failed, Some(reason));
            JobRecord::of(&job).write(&dir);
            // The old version goes on where it stopped.
            let job_file = job.versions().job_file(&dir);
            if was_running && let Ok(old) = JobSpec::load(&job_file) {
                self.relaunch(&job, old, RestoreFrom::Latest, Vec::new());
            }
            self.upgrading().remove(&job.id);
            return;
        }
        job.versions().current = upgrade.to;
        let restore = restore_of(&job, &upgrade);
        match self.relaunch(&job, spec, restore, upgrade.allow_dropped_state.clone()) {
            Some(upgraded) => self.watch_upgrade(upgraded, upgrade).await,
            None => {
                self.upgrading().remove(&job.id);
            }
        }
    }

    /// Watches the new version until its first checkpoint completes (the upgrade is done)
    /// or it ends without one: failed, it rolls back if the upgrade says so.
    pub(super) async fn watch_upgrade(
        self: Arc<Self>,
        job: Arc<HostedJob>,
        upgrade: UpgradeRecord,
    ) {
        let dir = self.job_dir(&job.id);
        let checkpointed = || job.checkpoints_completed() > 0;
        let mut asked: Option<tokio::time::Instant> = None;
        let (status, reason) = loop {
            let status = job.status();
            // Once it has opened, its first checkpoint is asked for rather than waited for
            // (the job file's interval may be an hour), and again every second: a Kafka
            // job's partitions may come to it after the first request.
            if job.started.is_raised() && asked.is_none_or(|at| at.elapsed().as_secs() >= 1) {
                job.checkpoint_now.request();
                asked = Some(tokio::time::Instant::now());
            }
            // A checkpoint completed before the run ended counts, however it ended.
            if checkpointed() {
                break (UpgradeStatus::Done, None);
            }
            match status {
                JobStatus::Running => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                JobStatus::Finished => break (UpgradeStatus::Done, None),
                JobStatus::Cancelled => {
                    let reason = format!(
                        "version {} was cancelled before its first checkpoint",
                        upgrade.to
                    );
                    break (UpgradeStatus::Failed, Some(reason));
                }
                JobStatus::Failed => {
                    let error = job
                        .outcome
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .1
                        .clone();
                    let reason = format!(
                        "version {} failed before its first checkpoint: {}",
                        upgrade.to,
                        error.unwrap_or_default()
                    );
                    let status = if upgrade.rollback {
                        UpgradeStatus::RolledBack
                    } else {
                        UpgradeStatus::Failed
                    };
                    break (status, Some(reason));
                }
            }
        };
        match &reason {
            Some(reason) => tracing::warn!(job = %job.id, %status, %reason, "upgrade ended"),
            None => tracing::info!(job = %job.id, to = upgrade.to, "upgrade done"),
        }
        if status != UpgradeStatus::RolledBack {
            job.versions().end(status, reason);
        } else {
            let old_file = version_dir(&dir, upgrade.from).join("job.toml");
            match JobSpec::load(&old_file) {
                Ok(old) => {
                    {
                        let mut versions = job.versions();
                        versions.end(status, reason);
                        versions.current = upgrade.from;
                    }
                    let restore = restore_of(&job, &upgrade);
                    self.relaunch(&job, old, restore, Vec::new());
                }
                Err(e) => {
                    tracing::error!(job = %job.id, error = %e, "cannot roll back");
                    let why = format!("{}; cannot roll back: {e}", reason.unwrap_or_default());
                    job.versions().end(UpgradeStatus::Failed, Some(why));
                }
            }
        }
        // The rolled-back run wrote its record as it started; this one says how it ended.
        JobRecord::of(&job).write(&dir);
        self.upgrading().remove(&job.id);
    }
}

/// Where a version of `job` restores from in `upgrade`: its savepoint; a Kafka job's
/// partitions each from their own latest checkpoint.
fn restore_of(job: &HostedJob, upgrade: &UpgradeRecord) -> RestoreFrom {
    match job.group {
        Some(_) => RestoreFrom::Latest,
        None => RestoreFrom::Savepoint(upgrade.savepoint.clone()),
    }
}

/// Refuses a new version that changes the job's name, source or sink: the checkpoints are
/// kept under the name, and what they say of the input read and the output written is about
/// that source and that sink.
fn kept_in_place(old: &Path, new: &Path, name: &str, spec: &JobSpec) -> Result<(), String> {
    if spec.name != name {
        return Err(format!(
            "the new version is named `{}`, the job `{name}`: an upgrade keeps the job's \
             name, under which its checkpoints are kept",
            spec.name
        ));
    }
    let table = |folder: &Path| -> Result<toml::Table, String> {
        let path = folder.join("job.toml");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    };
    let (old, new) = (table(old)?, table(new)?);
    for section in ["source", "sink"] {
        if old.get(section) != new.get(section) {
            return Err(format!(
                "the new version's [{section}] differs from the job's: an upgrade keeps the \
                 job's source and sink, whose positions and output its checkpoints hold; \
                 submit a job that reads or writes elsewhere as a new job"
            ));
        }
    }
    Ok(())
}
