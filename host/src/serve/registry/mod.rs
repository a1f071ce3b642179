//! [`Registry`]: the jobs a host runs.
//!
//! Each job gets its own folder under the data directory (`jobs/<id>/`): its job file, its
//! components, and its checkpoints, whatever store the job file names, so that no job can
//! reach another's state. Jobs run as tasks of the host's runtime; one failing fails alone.
//!
//! A job's later versions (`weir upgrade`, [`upgrade`]) live beside the first, each in
//! `jobs/<id>/versions/<n>/` with its job file and components, all of them checkpointing
//! into the job's one store.
//!
//! A Kafka job is the exception to the store rule: it runs as a member of its consumer group
//! (`crate::group`), a pipeline per partition the group gives this host, and its
//! partitions move between hosts with their state, so its checkpoints stay in the store its
//! job file names, shared by every host of the group (outside the data directory).

mod upgrade;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;

use super::graph::{GraphInputs, JobGraph, TopicNode};
use super::job_checkpoints::JobCheckpoints;
use super::prometheus::{KafkaPipeline, PipelineCounters};
use super::protocol::{JobInfo, JobStatus, OperatorInfo, PartitionInfo, SubmitRequest};
use super::rates::{PipelineView, RateHistory, RatesBody};
use crate::checkpoint::history::CheckpointRecord;
use crate::checkpoint::{CheckpointStore, JobStart, RestoreFrom, StartFrom};
use crate::engine::Engine;
use crate::group::GroupView;
use crate::job::pipeline::file_outputs;
use crate::job::spec::{SinkSpec, SourceSpec};
use crate::job::{
    CheckpointRequest, JobMetrics, JobSpec, Pipeline, RunOptions, StartedSignal, StopSignal,
    run_job,
};
use crate::operator::{GuestLogFile, LogLine};
use upgrade::Versions;
pub use upgrade::{UpgradeAnswer, UpgradeError};

/// A submission that cannot be run, with why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SubmitError(pub String);

/// Why a job cannot be restarted.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    #[error("no job {0}")]
    NoSuchJob(String),
    #[error("job {0} is running: cancel it first")]
    Running(String),
    #[error("job {0} is being upgraded: wait for the upgrade to end (`weir job {0}`)")]
    Upgrading(String),
    #[error("{0}")]
    Unusable(String),
}

/// Why a job's checkpoints cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointsError {
    #[error("no job {0}")]
    NoSuchJob(String),
    #[error("job {id} (`{name}`) keeps no checkpoints: its job file has no [checkpoints] section")]
    KeepsNone { id: String, name: String },
    #[error(
        "job {id} (`{name}`) reads Kafka: each partition of its topic keeps checkpoints of \
         its own, under `{name}/partitions/<p>/` in its store; list them with `weir \
         checkpoints list {store}`"
    )]
    PerPartition {
        id: String,
        name: String,
        store: String,
    },
    #[error("job {id}: cannot open its checkpoint store: {source}")]
    Store {
        id: String,
        source: crate::checkpoint::storage::StorageError,
    },
}

/// One job of the host.
struct HostedJob {
    id: String,
    name: String,
    /// The counters of a job run as one pipeline.
    metrics: Arc<JobMetrics>,
    /// A Kafka job: the partitions the host owns, each a pipeline with counters of its own.
    group: Option<Arc<GroupView>>,
    stop: StopSignal,
    checkpoint_now: CheckpointRequest,
    /// Raised once its run has started: every subtask opened and restored (a Kafka job's
    /// from the start: its partitions start and stop as the group assigns them).
    started: StartedSignal,
    /// The URL of the store its checkpoints go to (in its folder); `None` when its job
    /// file has no `[checkpoints]` section.
    checkpoint_store: Option<String>,
    outcome: Mutex<(JobStatus, Option<String>)>,
    /// The guests' log lines, in the job's folder.
    log: Arc<GuestLogFile>,
    /// What each node of its graph is, source to sink (`graph::describe`).
    details: Vec<String>,
    /// The repartition topics between its stages (`graph::topic_nodes`).
    topics: Vec<TopicNode>,
    /// When this run of it started, Unix time in milliseconds; `None` for a job that had
    /// ended when the host started.
    started_at_ms: Option<u64>,
    /// Its rates, sampled every second while it runs (`rates::sample_every`); locked by the
    /// sampler and by the API's readers, each for a moment.
    rates: Mutex<RateHistory>,
    /// The files it writes (output and dead letters), resolved: no other job of the host
    /// may write them while it runs.
    outputs: Vec<PathBuf>,
    /// Which version of it runs and its upgrades; shared by every run of the job (a restart
    /// or an upgrade makes a new `HostedJob`), locked for a moment to read or change.
    versions: Arc<Mutex<Versions>>,
}

/// The jobs of one host.
pub struct Registry {
    engine: Engine,
    data_dir: PathBuf,
    /// Every job submitted, by id; held only to look up, insert or list, never across a job's work.
    jobs: Mutex<BTreeMap<String, Arc<HostedJob>>>,
    /// The number of the next job submitted (ids `job-<n>`).
    next: AtomicU64,
    /// The ids of the jobs being upgraded (checked, stopped, swapped, watched): a second
    /// upgrade or a restart of one waits for the first to end.
    upgrading: Mutex<BTreeSet<String>>,
}

impl Registry {
    pub fn new(engine: Engine, data_dir: PathBuf) -> Self {
        Self {
            engine,
            data_dir,
            jobs: Mutex::default(),
            next: AtomicU64::new(1),
            upgrading: Mutex::default(),
        }
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<HostedJob>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a submitted job in its folder, checks it (job file and components), and starts
    /// it. Blocking: components may compile.
    pub fn submit(self: &Arc<Self>, request: SubmitRequest) -> Result<JobInfo, SubmitError> {
        let id = loop {
            let id = format!("job-{}", self.next.fetch_add(1, Ordering::Relaxed));
            if !self.data_dir.join("jobs").join(&id).exists() {
                break id;
            }
        };
        let dir = self.job_dir(&id);
        let spec = match self.prepared(&dir, &dir, &request, None) {
            Ok(spec) => spec,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let job = self.start(id, spec, None, &dir, (Versions::default(), Vec::new()));
        Ok(info(&job))
    }

    /// The folder of job `id`.
    fn job_dir(&self, id: &str) -> PathBuf {
        self.data_dir.join("jobs").join(id)
    }

    /// Writes a submitted job file and its components into `folder` (of the job whose folder
    /// is `dir`) and checks them: paths, outputs no other running job than `writer` writes,
    /// components that compile and link.
    fn prepared(
        &self,
        folder: &Path,
        dir: &Path,
        request: &SubmitRequest,
        writer: Option<&str>,
    ) -> Result<JobSpec, SubmitError> {
        prepare(folder, &dir.join("checkpoints"), request)
            .and_then(|spec| self.outside_data_dir(spec))
            .and_then(|spec| self.outputs_free(spec, writer))
            .and_then(|spec| {
                // A Kafka job is checked as one partition's pipeline: the group runs those.
                let pipeline = match &spec.source {
                    SourceSpec::Kafka(_) => crate::group::one_partition(&spec),
                    _ => spec.clone(),
                };
                Pipeline::from_spec(&pipeline, &self.engine)
                    .map(|_| spec)
                    .map_err(|e| SubmitError(e.to_string()))
            })
    }

    /// Picks up the jobs of an earlier run of the host from the data directory: those that
    /// were running resume from their latest checkpoint (or from the beginning, if they had
    /// none); the others are listed as they ended.
    pub fn resume(self: &Arc<Self>) {
        let Ok(folders) = std::fs::read_dir(self.data_dir.join("jobs")) else {
            return;
        };
        for folder in folders.flatten() {
            let dir = folder.path();
            let Some(mut record) = JobRecord::read(&dir) else {
                continue;
            };
            let running = record.status == JobStatus::Running || record.versions.upgrading();
            // An upgrade the host stopped in the middle of goes on, or says it ended.
            let watch = record.versions.interrupted();
            let spec = match JobSpec::load(&record.versions.job_file(&dir)) {
                Ok(spec) => spec,
                Err(e) => {
                    tracing::warn!(job = %record.id, error = %e, "cannot resume");
                    continue;
                }
            };
            if running {
                tracing::info!(job = %record.id, "resuming from the latest checkpoint");
                // A new version being watched may drop what its upgrade allowed.
                let allowed = watch.as_ref().map(|u| u.allow_dropped_state.clone());
                let job = self.start(
                    record.id,
                    spec,
                    Some(RestoreFrom::Latest),
                    &dir,
                    (record.versions, allowed.unwrap_or_default()),
                );
                if let Some(upgrade) = watch {
                    self.upgrading().insert(job.id.clone());
                    tokio::spawn(self.clone().watch_upgrade(job, upgrade));
                }
            } else {
                let outcome = (record.status, record.error);
                let versions = Arc::new(Mutex::new(record.versions));
                let job = hosted(record.id, &spec, outcome, &dir, versions);
                self.jobs().insert(job.id.clone(), job);
            }
        }
    }

    /// Runs `spec` as job `id` at the version `versions` say (its restore may drop the state
    /// of the operators `allow_dropped_state` names), recording its status in `dir` as it
    /// changes.
    fn start(
        self: &Arc<Self>,
        id: String,
        spec: JobSpec,
        restore: Option<RestoreFrom>,
        dir: &Path,
        (versions, allow_dropped_state): (Versions, Vec<String>),
    ) -> Arc<HostedJob> {
        let versions = Arc::new(Mutex::new(versions));
        let job = hosted(id.clone(), &spec, (JobStatus::Running, None), dir, versions);
        self.jobs().insert(id, job.clone());
        self.run(job.clone(), spec, restore, dir, allow_dropped_state);
        job
    }

    /// Runs `job` in the background, recording its status in `dir` as it changes; its
    /// restore may drop the state of the operators (by uid) `allow_dropped_state` names.
    fn run(
        &self,
        job: Arc<HostedJob>,
        spec: JobSpec,
        restore: Option<RestoreFrom>,
        dir: &Path,
        allow_dropped_state: Vec<String>,
    ) {
        JobRecord::of(&job).write(dir);
        let engine = self.engine.clone();
        job.started.lower();
        if job.group.is_some() {
            job.started.raise();
        }
        let options = RunOptions {
            stop: job.stop.clone(),
            checkpoint_now: job.checkpoint_now.clone(),
            metrics: Some(job.metrics.clone()),
            guest_log: Some(job.log.clone()),
            started: job.started.clone(),
            allow_dropped_state,
            ..RunOptions::default()
        };
        let (running, dir) = (job.clone(), dir.to_owned());
        tokio::spawn(async move {
            let result = match &running.group {
                // Each partition resumes from its own latest checkpoint.
                Some(view) => {
                    crate::group::run_group_watched(&spec, &engine, options, view.clone())
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
                None => run_job(&spec, &engine, restore, options)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
            };
            let outcome = match result {
                // A group member leaves without error when stopped.
                Ok(()) if running.group.is_some() && running.stop.is_raised() => {
                    (JobStatus::Cancelled, None)
                }
                Ok(()) => (JobStatus::Finished, None),
                Err(_) if running.stop.is_raised() => (JobStatus::Cancelled, None),
                Err(e) => {
                    tracing::warn!(job = %running.id, error = %e, "job failed");
                    (JobStatus::Failed, Some(e))
                }
            };
            *running.outcome.lock().unwrap_or_else(|e| e.into_inner()) = outcome;
            JobRecord::of(&running).write(&dir);
        });
    }

    pub fn list(&self) -> Vec<JobInfo> {
        self.jobs().values().map(|j| info(j)).collect()
    }

    pub fn get(&self, id: &str) -> Option<JobInfo> {
        self.jobs().get(id).map(|j| info(j))
    }

    /// Stops a running job; its checkpoints stay, so it can be restarted from them.
    ///
    /// With `final_checkpoint`, the job first takes a checkpoint and stops once it completed
    /// (or after a minute without one), so a restart loses no progress.
    pub fn cancel(&self, id: &str, final_checkpoint: bool) -> Option<JobInfo> {
        let job = self.jobs().get(id).cloned()?;
        if !final_checkpoint {
            job.stop.stop();
            return Some(info(&job));
        }
        tokio::spawn(job.clone().stop_after_checkpoint());
        Some(info(&job))
    }

    /// Runs a job that ended (finished, failed or cancelled) again from one of its
    /// checkpoints: `checkpoint`, or its latest when `None`; its restore may drop the state
    /// `allow_dropped_state` names (`OP` or `OP.STATE`).
    pub async fn restart(
        self: &Arc<Self>,
        id: &str,
        from: Option<RestoreFrom>,
        allow_dropped_state: Vec<String>,
    ) -> Result<JobInfo, RestartError> {
        let job = self
            .jobs()
            .get(id)
            .cloned()
            .ok_or_else(|| RestartError::NoSuchJob(id.to_owned()))?;
        if job.status() == JobStatus::Running {
            return Err(RestartError::Running(id.to_owned()));
        }
        if self.upgrading().contains(id) {
            return Err(RestartError::Upgrading(id.to_owned()));
        }
        let unusable = |e: String| RestartError::Unusable(e);
        let dir = self.job_dir(id);
        let job_file = job.versions().job_file(&dir);
        let spec = JobSpec::load(&job_file).map_err(|e| unusable(e.to_string()))?;
        let checkpoints = spec.checkpoints.as_ref().ok_or_else(|| {
            unusable(format!(
                "job {id} keeps no checkpoints: it can only be submitted again"
            ))
        })?;
        let chosen = from.is_some();
        let restore = from.unwrap_or(RestoreFrom::Latest);
        if matches!(spec.source, SourceSpec::Kafka(_)) {
            if chosen {
                return Err(unusable(format!(
                    "job {id} reads Kafka: each partition resumes from its own latest \
                     checkpoint, so no checkpoint can be chosen"
                )));
            }
        } else {
            // Checked here so that a wrong id is a bad request, not a failed job.
            let store = CheckpointStore::open(&checkpoints.store, &spec.name)
                .map_err(|e| unusable(e.to_string()))?;
            let start = JobStart::plan(
                &store,
                &spec.name,
                &StartFrom::Restore(restore.clone()),
                &[],
            )
            .await
            .map_err(|e| unusable(format!("cannot restore: {e}")))?;
            let uids: Vec<&str> = spec.operators.iter().map(|op| op.uid.as_str()).collect();
            start
                .check_state_kept(&spec.name, &uids, &allow_dropped_state)
                .map_err(|e| unusable(format!("cannot restore: {e}")))?;
        }
        // Two restarts at once would run the job twice.
        self.relaunch(&job, spec, restore, allow_dropped_state)
            .map(|restarted| info(&restarted))
            .ok_or_else(|| RestartError::Running(id.to_owned()))
    }

    /// Runs `spec` as the job `ended` was, from `restore`, unless another run of the job
    /// replaced `ended` meanwhile (`None` then).
    fn relaunch(
        &self,
        ended: &Arc<HostedJob>,
        spec: JobSpec,
        restore: RestoreFrom,
        allow_dropped_state: Vec<String>,
    ) -> Option<Arc<HostedJob>> {
        let mut jobs = self.jobs();
        if jobs.get(&ended.id).is_some_and(|j| !Arc::ptr_eq(j, ended)) {
            return None;
        }
        let dir = self.job_dir(&ended.id);
        let running = (JobStatus::Running, None);
        let job = hosted(
            ended.id.clone(),
            &spec,
            running,
            &dir,
            ended.versions.clone(),
        );
        jobs.insert(job.id.clone(), job.clone());
        drop(jobs);
        self.run(job.clone(), spec, Some(restore), &dir, allow_dropped_state);
        Some(job)
    }

    fn upgrading(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.upgrading.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last `tail` lines the job's guests logged that `keep` keeps.
    pub fn logs(
        &self,
        id: &str,
        tail: usize,
        keep: impl Fn(&LogLine) -> bool,
    ) -> Option<std::io::Result<Vec<LogLine>>> {
        let job = self.jobs().get(id).cloned()?;
        Some(job.log.tail_matching(tail, keep))
    }

    /// Reads the rates of every running job; called every second by `rates::sample_every`.
    pub fn sample_rates(&self) {
        let jobs: Vec<Arc<HostedJob>> = self.jobs().values().cloned().collect();
        for job in jobs.iter().filter(|j| j.status() == JobStatus::Running) {
            let pipelines = job.pipelines();
            job.rates()
                .sample(&pipelines, std::time::Instant::now(), unix_ms());
        }
    }

    /// A job's graph with its counts, rates, state and backpressure now.
    pub fn graph(&self, id: &str) -> Option<JobGraph> {
        let job = self.jobs().get(id).cloned()?;
        let pipelines = job.pipelines();
        let rates = job.rates();
        Some(super::graph::graph(&GraphInputs {
            job: &job.id,
            name: &job.name,
            status: job.status(),
            details: &job.details,
            topics: &job.topics,
            pipelines: &pipelines,
            rates: &rates,
            now_ms: unix_ms() as i64,
        }))
    }

    /// A job's rates over the last five minutes, after `since_ms` if given.
    pub fn rates(&self, id: &str, since_ms: Option<u64>) -> Option<RatesBody> {
        let job = self.jobs().get(id).cloned()?;
        Some(job.rates().body(since_ms))
    }

    /// The checkpoints a job tried in this host's run of it, newest first (of a Kafka job,
    /// those of the partitions it owns now).
    pub fn checkpoint_history(&self, id: &str) -> Option<Vec<CheckpointRecord>> {
        let job = self.jobs().get(id).cloned()?;
        let mut records: Vec<CheckpointRecord> = job
            .pipelines()
            .iter()
            .flat_map(|p| p.metrics.checkpoints.history.newest_first(p.partition))
            .collect();
        records.sort_by_key(|r| {
            std::cmp::Reverse((r.triggered_at_ms, r.id, r.partition.map_or(-1, i64::from)))
        });
        Some(records)
    }

    /// Refuses a job whose source or sink lies in the host's data directory, where it could
    /// read or overwrite another job's files.
    fn outside_data_dir(&self, spec: JobSpec) -> Result<JobSpec, SubmitError> {
        let data = std::fs::canonicalize(&self.data_dir)
            .map_err(|e| SubmitError(format!("{}: {e}", self.data_dir.display())))?;
        let mut paths = Vec::new();
        match &spec.source {
            SourceSpec::TextLines { path, .. } | SourceSpec::JsonLines { path, .. } => {
                paths.push(("source", path.clone()))
            }
            _ => {}
        }
        if let SinkSpec::File { path } = &spec.sink {
            paths.push(("sink", path.clone()));
        }
        for file in spec.dead_letter_files() {
            paths.push(("dead-letter", file));
        }
        // A Kafka job keeps the store its job file names (`prepare`): on local disk, it must
        // not be another job's.
        if let (SourceSpec::Kafka(_), Some(checkpoints)) = (&spec.source, &spec.checkpoints)
            && let Some(path) = local_store_path(&checkpoints.store)
        {
            paths.push(("checkpoint store", path));
        }
        for (what, path) in paths {
            if resolved(&path).starts_with(&data) {
                return Err(SubmitError(format!(
                    "the {what} path {} is inside the host's data directory, where jobs keep \
                     their state: choose another path",
                    path.display()
                )));
            }
        }
        Ok(spec)
    }

    /// Refuses a job that would write a file a running job of this host other than `writer`
    /// writes (one writer per output). A file another process writes is refused by its lease
    /// when the job starts (`crate::checkpoint::lease`).
    fn outputs_free(&self, spec: JobSpec, writer: Option<&str>) -> Result<JobSpec, SubmitError> {
        let jobs = self.jobs();
        for output in file_outputs(&spec) {
            let output = resolved(&output);
            let writer = jobs.values().find(|job| {
                job.status() == JobStatus::Running
                    && job.outputs.contains(&output)
                    && Some(job.id.as_str()) != writer
            });
            if let Some(writer) = writer {
                return Err(SubmitError(format!(
                    "{} is written by job {} (`{}`), which is running: one job at a time \
                     writes an output; cancel it first, or choose another path",
                    output.display(),
                    writer.id,
                    writer.name
                )));
            }
        }
        Ok(spec)
    }

    /// Asks a job for a checkpoint now.
    pub fn checkpoint(&self, id: &str) -> Option<JobInfo> {
        let job = self.jobs().get(id).cloned()?;
        job.checkpoint_now.request();
        Some(info(&job))
    }

    /// The completed checkpoints of a job, to inspect.
    pub fn checkpoints(&self, id: &str) -> Result<JobCheckpoints, CheckpointsError> {
        let job = self
            .jobs()
            .get(id)
            .cloned()
            .ok_or_else(|| CheckpointsError::NoSuchJob(id.to_owned()))?;
        let url = job
            .checkpoint_store
            .as_deref()
            .ok_or_else(|| CheckpointsError::KeepsNone {
                id: id.to_owned(),
                name: job.name.clone(),
            })?;
        if job.group.is_some() {
            return Err(CheckpointsError::PerPartition {
                id: id.to_owned(),
                name: job.name.clone(),
                store: url.trim_end_matches('/').to_owned(),
            });
        }
        let store =
            CheckpointStore::open(url, &job.name).map_err(|source| CheckpointsError::Store {
                id: id.to_owned(),
                source,
            })?;
        Ok(JobCheckpoints::new(job.name.clone(), store))
    }

    /// Every job's counters, for `/metrics`: one set per pipeline (per owned partition of a
    /// Kafka job).
    pub fn metrics(&self) -> Vec<PipelineCounters> {
        let mut pipelines = Vec::new();
        for job in self.jobs().values() {
            let counters = |partition, metrics| PipelineCounters {
                job_id: job.id.clone(),
                job: job.name.clone(),
                partition,
                metrics,
            };
            match &job.group {
                Some(view) => pipelines.extend(view.owned().into_iter().map(|p| {
                    let partition = KafkaPipeline {
                        stage: p.stage,
                        partition: p.partition,
                        lag: p.lag,
                    };
                    counters(Some(partition), p.metrics)
                })),
                None => pipelines.push(counters(None, job.metrics.clone())),
            }
        }
        pipelines
    }
}

impl HostedJob {
    fn status(&self) -> JobStatus {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    fn versions(&self) -> std::sync::MutexGuard<'_, Versions> {
        self.versions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for a checkpoint and stops once every pipeline (every owned partition of a Kafka
    /// job) completed one more, or after a minute without.
    async fn stop_after_checkpoint(self: Arc<Self>) {
        let before = self.last_checkpoints();
        self.checkpoint_now.request();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        let done = || {
            let now = self.last_checkpoints();
            before.iter().all(|(p, b)| now.get(p).is_none_or(|n| n > b))
        };
        while !done() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.stop.stop();
    }

    /// Waits until its run has ended (its leases let go), however it ends.
    async fn ended(&self) -> JobStatus {
        loop {
            match self.status() {
                JobStatus::Running => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                status => return status,
            }
        }
    }

    fn rates(&self) -> std::sync::MutexGuard<'_, RateHistory> {
        self.rates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its pipelines: one, or one per owned partition of a Kafka job.
    fn pipelines(&self) -> Vec<PipelineView> {
        match &self.group {
            Some(view) => view
                .owned()
                .into_iter()
                .map(|p| PipelineView {
                    partition: Some(p.partition),
                    metrics: p.metrics,
                    stage: Some(p.stage),
                    lag: Some(p.lag),
                })
                .collect(),
            None => vec![PipelineView {
                partition: None,
                metrics: self.metrics.clone(),
                stage: None,
                lag: None,
            }],
        }
    }

    /// The checkpoints its pipelines completed since this run of it started (of a Kafka
    /// job, those of the partitions it owns now).
    fn checkpoints_completed(&self) -> u64 {
        let completed = |m: &JobMetrics| m.checkpoints.completed.load(Ordering::Relaxed);
        match &self.group {
            Some(view) => view.owned().iter().map(|p| completed(&p.metrics)).sum(),
            None => completed(&self.metrics),
        }
    }

    /// The last completed checkpoint of each pipeline: by stage and partition for a Kafka
    /// job, under `(0, -1)` for a job of one pipeline.
    fn last_checkpoints(&self) -> BTreeMap<(usize, i32), u64> {
        let last = |m: &JobMetrics| m.checkpoints.last_completed.load(Ordering::Relaxed);
        match &self.group {
            Some(view) => view
                .owned()
                .iter()
                .map(|p| ((p.stage.index, p.partition), last(&p.metrics)))
                .collect(),
            None => BTreeMap::from([((0, -1), last(&self.metrics))]),
        }
    }
}

/// The folder of a checkpoint store on local disk (a `file://` URL); `None` for object
/// storage.
fn local_store_path(store: &str) -> Option<PathBuf> {
    url::Url::parse(store)
        .ok()
        .filter(|url| url.scheme() == "file")
        .and_then(|url| url.to_file_path().ok())
}

/// `path` with symbolic links and `..` resolved as far as it exists (a sink's file may not
/// exist yet).
fn resolved(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut existing = path;
    loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            return rest.into_iter().rev().fold(canonical, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_owned(),
        }
    }
}

fn hosted(
    id: String,
    spec: &JobSpec,
    outcome: (JobStatus, Option<String>),
    dir: &Path,
    versions: Arc<Mutex<Versions>>,
) -> Arc<HostedJob> {
    let started_at_ms = (outcome.0 == JobStatus::Running).then(unix_ms);
    Arc::new(HostedJob {
        id,
        name: spec.name.clone(),
        group: matches!(spec.source, SourceSpec::Kafka(_)).then(Arc::default),
        metrics: Arc::new(JobMetrics::new(
            spec.operators
                .iter()
                .map(|o| (o.name.as_str(), o.parallelism)),
        )),
        stop: StopSignal::default(),
        checkpoint_now: CheckpointRequest::default(),
        started: StartedSignal::default(),
        checkpoint_store: spec.checkpoints.as_ref().map(|c| c.store.clone()),
        outcome: Mutex::new(outcome),
        log: Arc::new(GuestLogFile::new(dir.join("guest.log"))),
        details: super::graph::describe(spec),
        topics: super::graph::topic_nodes(spec),
        started_at_ms,
        rates: Mutex::new(RateHistory::new(
            spec.operators.iter().map(|o| o.name.as_str()),
        )),
        outputs: file_outputs(spec).iter().map(|p| resolved(p)).collect(),
        versions,
    })
}

/// Now, in milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What survives the host: `jobs/<id>/job.json`, written when a job starts and ends.
#[derive(serde::Serialize, serde::Deserialize)]
struct JobRecord {
    id: String,
    status: JobStatus,
    error: Option<String>,
    /// Absent in the records of hosts before upgrades: version 1, never upgraded.
    #[serde(flatten)]
    versions: Versions,
}

impl JobRecord {
    fn of(job: &HostedJob) -> Self {
        let (status, error) = job
            .outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Self {
            id: job.id.clone(),
            status,
            error,
            versions: job.versions().clone(),
        }
    }

    fn read(dir: &Path) -> Option<Self> {
        serde_json::from_slice(&std::fs::read(dir.join("job.json")).ok()?).ok()
    }

    /// Written to a temporary file and renamed, so a crash never leaves half a record.
    fn write(&self, dir: &Path) {
        let (temp, path) = (dir.join("job.json.tmp"), dir.join("job.json"));
        let written = serde_json::to_vec(self)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&temp, bytes))
            .and_then(|()| std::fs::rename(&temp, &path));
        if let Err(e) = written {
            tracing::warn!(job = %self.id, error = %e, "cannot record the job's status");
        }
    }
}

fn info(job: &HostedJob) -> JobInfo {
    let (status, error) = job
        .outcome
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let Some(view) = &job.group else {
        let summary = job.metrics.summary(&job.name, std::time::Duration::ZERO);
        let last = last_completed(&job.metrics);
        return job_info(job, (status, error), summary, last, None);
    };
    // A Kafka job: the sums over the partitions owned now. A job that re-keys reads its
    // input in its first stage and writes its output in its last; each stage counts its
    // own operators.
    let mut total = job.metrics.summary(&job.name, std::time::Duration::ZERO);
    let mut partitions = Vec::new();
    for owned in view.owned() {
        let summary = owned.metrics.summary(&job.name, std::time::Duration::ZERO);
        let stage = &owned.stage;
        if stage.index == 0 {
            total.source_records += summary.source_records;
        }
        if stage.last {
            total.sink_records += summary.sink_records;
        }
        total.checkpoints_completed += summary.checkpoints_completed;
        let operators = total.operators.iter_mut().skip(stage.first_operator);
        for (sum, o) in operators.zip(&summary.operators) {
            sum.records_in += o.records_in;
            sum.records_out += o.records_out;
        }
        partitions.push(PartitionInfo {
            stage: stage.index,
            topic: Some(stage.topic.clone()),
            partition: owned.partition,
            lag: owned.lag,
            source_records: summary.source_records,
            sink_records: summary.sink_records,
            last_checkpoint: last_completed(&owned.metrics),
        });
    }
    job_info(job, (status, error), total, None, Some(partitions))
}

/// The id of the last checkpoint a pipeline completed, if any.
fn last_completed(metrics: &JobMetrics) -> Option<u64> {
    Some(metrics.checkpoints.last_completed.load(Ordering::Relaxed)).filter(|id| *id > 0)
}

fn job_info(
    job: &HostedJob,
    (status, error): (JobStatus, Option<String>),
    summary: crate::job::RunSummary,
    last_checkpoint: Option<u64>,
    partitions: Option<Vec<PartitionInfo>>,
) -> JobInfo {
    // Rates only while it runs: an ended job's last ones would read as current.
    let rate = |node| {
        (status == JobStatus::Running)
            .then(|| job.rates().node(node))
            .flatten()
    };
    let sink = job.details.len().saturating_sub(1);
    let versions = job.versions().clone();
    JobInfo {
        id: job.id.clone(),
        name: job.name.clone(),
        status,
        error,
        source_records: summary.source_records,
        sink_records: summary.sink_records,
        operators: summary
            .operators
            .into_iter()
            .map(|o| OperatorInfo {
                name: o.name,
                parallelism: o.parallelism,
                records_in: o.records_in,
                records_out: o.records_out,
            })
            .collect(),
        checkpoints_completed: summary.checkpoints_completed,
        last_checkpoint,
        keeps_checkpoints: job.checkpoint_store.is_some(),
        partitions,
        started_at_ms: job.started_at_ms.filter(|_| status == JobStatus::Running),
        opened: job.started.is_raised(),
        in_per_second: rate(0).map(|(_, out)| out),
        out_per_second: rate(sink).map(|(sink_in, _)| sink_in),
        last_checkpoint_at_ms: job
            .pipelines()
            .iter()
            .map(|p| {
                p.metrics
                    .checkpoints
                    .last_completed_at_ms
                    .load(Ordering::Relaxed)
            })
            .max()
            .filter(|at| *at > 0),
        version: versions.current,
        upgrades: versions.upgrades,
    }
}

/// Writes the job's files into `dir`: its components under `components/`, and its job file
/// pointing at them, with checkpoints (if any) kept in the job's folder `checkpoints`. Then
/// loads and checks the job file ([`JobSpec::load`]); the components are not compiled here.
pub fn prepare(
    dir: &Path,
    checkpoints_dir: &Path,
    request: &SubmitRequest,
) -> Result<JobSpec, SubmitError> {
    let bad = |m: String| SubmitError(m);
    let io = |what: &Path, e: std::io::Error| SubmitError(format!("{}: {e}", what.display()));
    let components = dir.join("components");
    std::fs::create_dir_all(&components).map_err(|e| io(&components, e))?;
    let mut table: toml::Table = toml::from_str(&request.job)
        .map_err(|e| bad(format!("the job file is not valid TOML: {e}")))?;
    let operators = table
        .get_mut("operators")
        .and_then(|o| o.as_array_mut())
        .ok_or_else(|| bad("the job file has no [[operators]]".into()))?;
    for op in operators.iter_mut().filter_map(|o| o.as_table_mut()) {
        let name = op
            .get("name")
            .and_then(|n| n.as_str())
            .ok_or_else(|| bad("an operator has no name".into()))?
            .to_owned();
        let encoded = request
            .components
            .get(&name)
            .ok_or_else(|| bad(format!("no component was sent for operator `{name}`")))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| bad(format!("the component of `{name}` is not base64: {e}")))?;
        if name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(bad(format!("operator name `{name}` cannot name a file")));
        }
        let file = components.join(format!("{name}.wasm"));
        std::fs::write(&file, bytes).map_err(|e| io(&file, e))?;
        op.insert(
            "component".into(),
            toml::Value::String(format!("components/{name}.wasm")),
        );
    }
    // A Kafka job's partitions move between hosts with their state, so its checkpoints stay
    // in the store its job file names, which every host of its group shares.
    let kafka = table
        .get("source")
        .and_then(|s| s.get("kind"))
        .and_then(|k| k.as_str())
        == Some("kafka");
    if let Some(checkpoints) = table
        .get_mut("checkpoints")
        .and_then(|c| c.as_table_mut())
        .filter(|_| !kafka)
    {
        let store = url::Url::from_directory_path(checkpoints_dir)
            .map_err(|()| bad(format!("cannot name {} as a URL", dir.display())))?;
        checkpoints.insert("store".into(), toml::Value::String(store.to_string()));
    }
    let path = dir.join("job.toml");
    std::fs::write(&path, table.to_string()).map_err(|e| io(&path, e))?;
    JobSpec::load(&path).map_err(|e| bad(e.to_string()))
}
