//! [`run_group`]: a Kafka job run as one member of its consumer group, with a pipeline per
//! partition the group assigns to this process. It sits above [`crate::job`]: it runs
//! pipelines, and a pipeline knows nothing of the group that runs it.
//!
//! # Scale-out: a pipeline per input partition
//!
//! Kafka decides which process owns which partition; Weir has no membership code of its own.
//! Each process joins the job's consumer group and, for every partition assigned to it, runs
//! the whole job as a pipeline of its own, reading only that partition, as Kafka Streams runs
//! a task per partition. The pipeline's keyed state, checkpoints, staged output and cleanup
//! live under `<job>/partitions/<p>/` in the shared object store, so a partition's state moves
//! with the partition: the new owner restores that folder's latest checkpoint. At any time one
//! process owns a partition, so every artifact still has exactly one deleter, cleanup runs
//! where the partition runs, and orphan sweeps work per partition as for any job.
//!
//! Keyed state is per input partition, so records of one key must arrive on one partition.
//! A job that groups by another key than its input's is cut into stages (`job::stages`,
//! DESIGN.md §12.1): each stage runs here as a group of its own, reading the topic the stage
//! before writes, partitioned by its key. Weir creates those topics when they are missing.
//!
//! On revocation a process stops the partition's pipeline before it acknowledges the
//! rebalance, so the next owner never overlaps with it. A process killed outright loses its
//! partitions when its group session times out (`session.timeout.ms`, which the job file can
//! set in `[source.properties]`); the new owners replay from the last completed checkpoint.
//!
//! # How
//!
//! A thread polls the group member, which only follows the group: the partitions assigned to
//! it are paused at once, since each partition's pipeline reads with a consumer of its own.
//! The rebalance callbacks run on that thread: an assignment starts a pipeline per new
//! partition, restored from that partition's latest checkpoint; a revocation stops the
//! partitions' pipelines and waits for them before the member acknowledges, so the next owner
//! never overlaps with them.

mod origin;
mod purge;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::checkpoint::{RestoreFrom, StartFrom};
use crate::connectors::ConnectorError;
use crate::connectors::kafka::settings::KafkaSinkSpec;
use crate::connectors::kafka::settings::{Assignment, KafkaSourceSpec, client_config};
use crate::connectors::kafka::source::{InputPartition, PartitionLink, kafka_error};
use crate::engine::Engine;
use crate::job::spec::{RecordPolicy, SinkSpec, SourceSpec};
use crate::job::stages::{RepartitionTopic, StagePlan};
use crate::job::{
    CheckpointRequest, JobError, JobMetrics, JobSpec, RunOptions, RunSummary, StopSignal,
    SupervisorError, run_job,
};

/// How often a process that reads every partition looks for new ones.
const PARTITIONS_LOOK_EVERY: Duration = Duration::from_secs(5);

/// How often a group member checks that every partition assigned to it has a pipeline.
const ASSIGNMENT_LOOK_EVERY: Duration = Duration::from_secs(1);

/// What a process did as a member of its job's group.
#[derive(Debug, Default)]
pub struct GroupSummary {
    /// Each partition's last run in this process, by partition (of the job's input topic).
    pub partitions: BTreeMap<i32, RunSummary>,
    /// A job that re-keys: what this process did of each later stage, in order.
    pub stages: Vec<StageSummary>,
}

/// What a process did of one later stage of a job that re-keys.
#[derive(Debug)]
pub struct StageSummary {
    /// The stage's job name (`<job>.stage-<k>`).
    pub name: String,
    /// Each partition's last run in this process, by partition of the stage's topic.
    pub partitions: BTreeMap<i32, RunSummary>,
}

impl std::fmt::Display for GroupSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_partitions(f, &self.partitions)?;
        for stage in &self.stages {
            writeln!(f, "stage `{}`:", stage.name)?;
            write_partitions(f, &stage.partitions)?;
        }
        Ok(())
    }
}

fn write_partitions(
    f: &mut std::fmt::Formatter<'_>,
    partitions: &BTreeMap<i32, RunSummary>,
) -> std::fmt::Result {
    let owned: Vec<String> = partitions.keys().map(|p| p.to_string()).collect();
    writeln!(f, "partitions finished here: [{}]", owned.join(", "))?;
    for (partition, summary) in partitions {
        writeln!(f, "partition {partition}:")?;
        writeln!(f, "{summary}")?;
    }
    Ok(())
}

/// Why a group run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The brokers or the topic are unusable (exit 2 at start).
    #[error(transparent)]
    Connect(ConnectorError),
    #[error("partition {partition}: {error}")]
    Partition {
        partition: i32,
        error: SupervisorError,
    },
    #[error("partition {partition}: the task panicked: {message}")]
    Panicked { partition: i32, message: String },
    /// A repartition topic the job needs exists with another partition count: records of
    /// one key would not all reach one pipeline, or a key's state would be in another one.
    #[error(
        "topic `{topic}` between the stages of job `{job}` has {partitions} partitions where \
         the job needs {wanted} (`weir plan` shows its stages): delete the topic, or give the \
         operator after it `repartition = {{ partitions = {partitions} }}`"
    )]
    TopicMismatch {
        job: String,
        topic: String,
        partitions: u32,
        wanted: u32,
    },
    /// A repartition topic the job needs does not exist, and the brokers did not create it.
    #[error(
        "topic `{topic}` between the stages of job `{job}` (`weir plan` shows them) does not \
         exist, and the brokers did not create it with {partitions} partitions: {message}. \
         Create it, or allow this client to create topics"
    )]
    CannotCreateTopic {
        job: String,
        topic: String,
        partitions: u32,
        message: String,
    },
    /// The job re-keys, and its stages stage their output toward the next in checkpoints.
    #[error(
        "job `{job}` re-keys its input before operator `{operator}`, so its stages pass \
         records through a topic exactly once, which needs checkpoints: add a \
         [checkpoints] section"
    )]
    StagesNeedCheckpoints { job: String, operator: String },
    /// Where the job began writing a repartition topic cannot be read or recorded.
    #[error("where job `{job}` began writing topic `{topic}` is unknown: {message}")]
    Origin {
        job: String,
        topic: String,
        message: String,
    },
    /// A later stage's folder holds checkpoints while the job's own has no record of
    /// starting: they are of an earlier start of the job, whose folder was deleted.
    #[error(
        "{folder} holds checkpoints of a stage of job `{job}` from an earlier start (the \
         job's own folder no longer says where it began writing the topics between its \
         stages): to start over, delete that folder too; to go on, restore the job's folder"
    )]
    StageLeftOver { job: String, folder: String },
    #[error("job `{job}`: {source}")]
    Store {
        job: String,
        source: crate::checkpoint::storage::StorageError,
    },
}

impl GroupError {
    /// The input (brokers, topic, job file) is unusable, as opposed to a run failing.
    pub fn is_input_error(&self) -> bool {
        match self {
            GroupError::Connect(_) => true,
            GroupError::Partition { error, .. } => error.is_input_error(),
            GroupError::TopicMismatch { .. }
            | GroupError::CannotCreateTopic { .. }
            | GroupError::StagesNeedCheckpoints { .. }
            | GroupError::StageLeftOver { .. } => true,
            GroupError::Panicked { .. } | GroupError::Origin { .. } | GroupError::Store { .. } => {
                false
            }
        }
    }
}

/// What a running member shows of itself (`weir serve` shows it in `weir jobs` and
/// `/metrics`): the partitions it owns, of every stage of the job, each with its counters
/// and lag.
#[derive(Debug, Default)]
pub struct GroupView {
    /// Owned partitions by stage and number; the member's pipelines update their entries,
    /// readers copy them.
    partitions: Mutex<BTreeMap<(usize, i32), PartitionView>>,
}

/// One owned partition's part of a [`GroupView`].
#[derive(Clone, Debug)]
struct PartitionView {
    stage: Arc<StagePlace>,
    metrics: Arc<JobMetrics>,
    link: Arc<PartitionLink>,
    checkpoint_now: CheckpointRequest,
}

/// Where a stage sits in its job (the whole job, for one that does not re-key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagePlace {
    /// 0 for the stage that reads the job's input.
    pub index: usize,
    /// The topic the stage reads: the job's, or the repartition topic before it.
    pub topic: String,
    /// The job's operators the stage runs: its operator `i` is the job's `first_operator + i`.
    pub first_operator: usize,
    /// Whether the stage writes the job's sink (the last one does).
    pub last: bool,
}

/// A partition a member owns, as [`GroupView::owned`] gives it.
#[derive(Clone, Debug)]
pub struct OwnedPartition {
    pub stage: Arc<StagePlace>,
    pub partition: i32,
    /// Messages of the partition not yet read.
    pub lag: i64,
    /// The counters of the partition's pipeline (the stage's operators only). They count
    /// the partition's whole history, here and in earlier owners: a run continues from its
    /// restored checkpoint's counts.
    pub metrics: Arc<JobMetrics>,
}

impl GroupView {
    /// The partitions owned now, stage by stage, in order.
    pub fn owned(&self) -> Vec<OwnedPartition> {
        self.lock()
            .iter()
            .map(|((_, partition), view)| OwnedPartition {
                stage: view.stage.clone(),
                partition: *partition,
                lag: view.link.lag(),
                metrics: view.metrics.clone(),
            })
            .collect()
    }

    /// Asks every owned partition's pipeline for a checkpoint now.
    pub fn request_checkpoint(&self) {
        for view in self.lock().values() {
            view.checkpoint_now.request();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(usize, i32), PartitionView>> {
        self.partitions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How a partition's pipeline ended.
type PartitionRun = Result<RunSummary, SupervisorError>;

/// A partition's pipeline, running or finished.
struct PartitionTask {
    stop: StopSignal,
    /// `None` once finished.
    handle: Option<JoinHandle<PartitionRun>>,
    link: Arc<PartitionLink>,
}

/// What the member's callbacks and the manager share.
struct Shared {
    spec: JobSpec,
    kafka: KafkaSourceSpec,
    engine: Engine,
    options: RunOptions,
    runtime: Handle,
    /// Each partition this process has started, running or finished: whether it may start it again
    /// (under the lock, so a rebalance callback and the poller never both start one).
    tasks: Mutex<BTreeMap<i32, PartitionTask>>,
    /// Partitions whose pipeline finished (`stop_at_end`) or was stopped, with results.
    results: Mutex<Vec<(i32, Result<RunSummary, GroupError>)>>,
    /// The member, for commits from the pipelines; weak, so that the member's thread owns it.
    member: OnceLock<Weak<BaseConsumer<MemberContext>>>,
    /// Raised when the process leaves the group: no new pipelines start.
    leaving: AtomicBool,
    view: Arc<GroupView>,
    /// Which stage of the job this member runs, for `view`.
    place: Arc<StagePlace>,
    /// A stage that reads a repartition topic deletes what its pipelines released.
    purger: Option<Arc<purge::Purger>>,
}

impl Shared {
    fn start(self: &Arc<Self>, partition: i32) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        // Running, or finished here (`stop_at_end`): nothing to start.
        if tasks.contains_key(&partition) {
            return;
        }
        let committer: crate::connectors::kafka::source::OffsetCommitter = {
            let shared = Arc::downgrade(self);
            Arc::new(move |partition, offset| {
                if let Some(shared) = shared.upgrade() {
                    shared.commit(partition, offset, CommitMode::Async);
                }
            })
        };
        let mut link = PartitionLink::new(Some(committer));
        if let Some(purger) = &self.purger {
            let purger = purger.clone();
            link = link.with_purger(Arc::new(move |partition, offset| {
                purger.purge(partition, offset);
            }));
        }
        let link = Arc::new(link);
        let spec = partition_spec(
            &self.spec,
            InputPartition {
                partition,
                link: link.clone(),
            },
        );
        let stop = StopSignal::default();
        let view = PartitionView {
            stage: self.place.clone(),
            metrics: Arc::new(JobMetrics::new(
                spec.operators
                    .iter()
                    .map(|o| (o.name.as_str(), o.parallelism)),
            )),
            link: link.clone(),
            // Its own: a request shared by several pipelines would reach only one of them.
            checkpoint_now: CheckpointRequest::default(),
        };
        let options = RunOptions {
            stop: stop.clone(),
            progress: false,
            metrics: Some(view.metrics.clone()),
            checkpoint_now: view.checkpoint_now.clone(),
            // The process that had the partition lets go of it before it acknowledges the
            // revocation; one cut off from the group holds it until its lease expires.
            lease_wait: 2 * crate::checkpoint::lease::DEFAULT_TTL,
            ..self.options.clone()
        };
        self.view.lock().insert((self.place.index, partition), view);
        let engine = self.engine.clone();
        let from = StartFrom::Restore(RestoreFrom::Latest);
        tracing::info!(
            partition,
            "partition assigned: restoring its latest checkpoint"
        );
        let handle = self
            .runtime
            .spawn(async move { run_job(&spec, &engine, from, options).await });
        tasks.insert(
            partition,
            PartitionTask {
                stop,
                handle: Some(handle),
                link,
            },
        );
    }

    /// Stops a partition's pipeline and waits for it (on the member's thread, not a runtime's).
    fn stop(&self, partition: i32) {
        let task = self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&partition);
        let Some(mut task) = task else { return };
        self.view.lock().remove(&(self.place.index, partition));
        task.stop.stop();
        if let Some(handle) = task.handle.take() {
            let result = self.runtime.block_on(handle);
            tracing::info!(partition, "partition revoked: its pipeline stopped");
            self.note(partition, result);
        }
    }

    fn note(&self, partition: i32, result: Result<PartitionRun, tokio::task::JoinError>) {
        let result = match result {
            Ok(Ok(summary)) => Ok(summary),
            // Stopped on revocation or shutdown: not a failure.
            Ok(Err(SupervisorError::Failed {
                error: JobError::Stopped,
                ..
            })) => return,
            // Another process claimed the partition (this one's revocation came late, or the
            // other's did). Forget it: if the group still gives it to this process, the
            // member's next look at its assignment starts it again, and claims it back.
            Ok(Err(
                SupervisorError::Failed {
                    error: JobError::Sink(ConnectorError::TakenOver { .. }),
                    ..
                }
                | SupervisorError::Lease(_),
            )) => {
                tracing::warn!(
                    partition,
                    "partition taken over by another process: letting go"
                );
                self.tasks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&partition);
                self.view.lock().remove(&(self.place.index, partition));
                return;
            }
            Ok(Err(error)) => Err(GroupError::Partition { partition, error }),
            Err(e) => Err(GroupError::Panicked {
                partition,
                message: e.to_string(),
            }),
        };
        self.results
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((partition, result));
    }

    /// The pipelines that finished since the last look; their tasks stay, as finished.
    fn take_finished(&self) -> Vec<(i32, JoinHandle<PartitionRun>, Arc<PartitionLink>)> {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks
            .iter_mut()
            .filter(|(_, task)| task.handle.as_ref().is_some_and(|h| h.is_finished()))
            .filter_map(|(partition, task)| {
                Some((*partition, task.handle.take()?, task.link.clone()))
            })
            .collect()
    }

    /// Moves the results noted so far into `summary`, and the first failure into `failure`.
    fn collect(&self, summary: &mut GroupSummary, failure: &mut Option<GroupError>) {
        let results = std::mem::take(&mut *self.results.lock().unwrap_or_else(|e| e.into_inner()));
        for (partition, result) in results {
            match result {
                Ok(run) => {
                    summary.partitions.insert(partition, run);
                }
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
    }

    /// Commits a checkpointed offset to the group, for lag tools.
    fn commit(&self, partition: i32, offset: i64, mode: CommitMode) {
        let Some(member) = self.member.get().and_then(Weak::upgrade) else {
            return;
        };
        let mut offsets = TopicPartitionList::new();
        if offsets
            .add_partition_offset(&self.kafka.topic, partition, Offset::Offset(offset))
            .is_ok()
            && let Err(e) = member.commit(&offsets, mode)
        {
            // A partition just revoked, say: the next owner commits its own.
            tracing::debug!(partition, offset, error = %e, "offset commit refused");
        }
    }

    /// The partitions with a pipeline in this process, and each one's lag in messages.
    fn owned(&self) -> Vec<(i32, i64)> {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(p, t)| (*p, t.link.lag()))
            .collect()
    }
}

/// The job as one partition's pipeline runs it: that partition's input, and dead-letter files
/// of its own (`bad.jsonl` becomes `bad.partition-3.jsonl`), since each file is written
/// exactly once by one pipeline's checkpoints.
fn partition_spec(spec: &JobSpec, input: InputPartition) -> JobSpec {
    let own = |policy: &mut RecordPolicy| {
        if let RecordPolicy::DeadLetter(path) = policy {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            let name = match path.extension() {
                Some(ext) => format!(
                    "{stem}.partition-{}.{}",
                    input.partition,
                    ext.to_string_lossy()
                ),
                None => format!("{stem}.partition-{}", input.partition),
            };
            path.set_file_name(name);
        }
    };
    let mut spec = spec.clone();
    if let SourceSpec::Kafka(kafka) = &mut spec.source {
        own(&mut kafka.on_bad_record);
    }
    for op in &mut spec.operators {
        own(&mut op.on_error);
        own(&mut op.on_bad_record);
    }
    if let SinkSpec::Kafka(KafkaSinkSpec {
        repartition: Some(write),
        ..
    }) = &mut spec.sink
    {
        // This pipeline is the writer of the next stage's topic named by its partition.
        write.writer = input.partition as u32;
    }
    spec.input_partition = Some(input);
    spec
}

/// The job as partition 0's pipeline would run it, to check a job before running it (the
/// pipeline reaches no broker until it runs).
pub fn one_partition(spec: &JobSpec) -> JobSpec {
    partition_job(spec, 0)
}

/// The job as the pipeline of its input partition `partition` would run it, unlinked from
/// any group: to open it offline (`weir upgrade --check`).
pub fn partition_job(spec: &JobSpec, partition: i32) -> JobSpec {
    partition_spec(
        spec,
        InputPartition {
            partition,
            link: Arc::new(PartitionLink::new(None)),
        },
    )
}

/// The jobs `spec` (whose source is Kafka) runs as, each of whose input partitions keeps a
/// checkpoint folder of its own (`<job>/partitions/<p>/`): the job itself, or the jobs of
/// its stages. Asks the brokers for the input topic's partition count, as a run does, and
/// creates nothing.
pub async fn partitioned_jobs(spec: &JobSpec) -> Result<Vec<JobSpec>, GroupError> {
    let SourceSpec::Kafka(kafka) = &spec.source else {
        return Ok(vec![spec.clone()]);
    };
    let check = kafka.clone();
    let partitions = blocking(move || check_topic(&check))
        .await?
        .map_err(GroupError::Connect)?;
    Ok(match staged(spec, partitions as u32) {
        Some((plan, counts)) => plan.stage_jobs(spec, &counts),
        None => vec![spec.clone()],
    })
}

/// The group member's callbacks.
struct MemberContext {
    shared: Arc<Shared>,
}

impl ClientContext for MemberContext {}

impl ConsumerContext for MemberContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(partitions) = rebalance {
            for element in partitions.elements() {
                self.shared.stop(element.partition());
            }
        }
    }

    fn post_rebalance(&self, member: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(partitions) = rebalance {
            // The member only follows the group: each pipeline reads on its own.
            if let Err(e) = member.pause(partitions) {
                tracing::warn!(error = %e, "cannot pause the group member's partitions");
            }
            if self.shared.leaving.load(Ordering::Relaxed) {
                return;
            }
            for element in partitions.elements() {
                self.shared.start(element.partition());
            }
            let owned: Vec<i32> = self.shared.owned().iter().map(|(p, _)| *p).collect();
            tracing::info!(?owned, "partitions owned after the rebalance");
        }
    }
}

/// Checks that the brokers answer and the topic exists, within the connect timeout; returns
/// its partition count.
pub fn check_topic(kafka: &KafkaSourceSpec) -> Result<usize, ConnectorError> {
    partition_count(kafka, &kafka.topic)?.ok_or_else(|| {
        kafka_error(
            &kafka.brokers,
            format!("topic `{}` does not exist", kafka.topic),
        )
    })
}

/// A client of the brokers of `kafka` that only asks them about topics: it joins no group.
fn metadata_client(kafka: &KafkaSourceSpec) -> Result<BaseConsumer, ConnectorError> {
    client_config(
        &kafka.brokers,
        kafka.connect_timeout(),
        &[],
        &kafka.properties,
    )
    .create()
    .map_err(|e| kafka_error(&kafka.brokers, format!("cannot create a client: {e}")))
}

/// The partition count of `topic` on the brokers of `kafka`; `None` if it does not exist. A
/// consumer asks, which never has the brokers create a topic by asking for it.
fn partition_count(kafka: &KafkaSourceSpec, topic: &str) -> Result<Option<usize>, ConnectorError> {
    let client = metadata_client(kafka)?;
    let timeout = kafka.connect_timeout();
    let metadata = client.fetch_metadata(Some(topic), timeout).map_err(|e| {
        kafka_error(
            &kafka.brokers,
            format!("no broker answered within {timeout:?} ({e})"),
        )
    })?;
    Ok(match metadata.topics().first() {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => Some(t.partitions().len()),
        _ => None,
    })
}

/// Runs `spec` (whose source is Kafka) as a member of its consumer group until it is stopped
/// (`options.stop`), a partition's pipeline fails, or, with `stop_at_end`, every partition
/// this process owns has reached its end.
///
/// `options.metrics` is not used (each partition's pipeline counts on its own, see
/// [`run_group_watched`]); `options.checkpoint_now` reaches every partition's pipeline.
pub async fn run_group(
    spec: &JobSpec,
    engine: &Engine,
    options: RunOptions,
) -> Result<GroupSummary, GroupError> {
    run_group_watched(spec, engine, options, Arc::default()).await
}

/// [`run_group`], showing the partitions it owns in `view` while it runs.
pub async fn run_group_watched(
    spec: &JobSpec,
    engine: &Engine,
    options: RunOptions,
    view: Arc<GroupView>,
) -> Result<GroupSummary, GroupError> {
    let SourceSpec::Kafka(kafka) = &spec.source else {
        return Err(GroupError::Connect(ConnectorError::Kafka {
            brokers: String::new(),
            message: format!("job `{}` does not read Kafka", spec.name),
        }));
    };
    let check = kafka.clone();
    let partitions = blocking(move || check_topic(&check))
        .await?
        .map_err(GroupError::Connect)?;
    match stage_jobs(spec, kafka, partitions as u32).await? {
        Some(mut jobs) => {
            origin::set_origins(spec, &mut jobs).await?;
            run_stages(&jobs, engine, options, view).await
        }
        None => {
            let place = StagePlace {
                index: 0,
                topic: kafka.topic.clone(),
                first_operator: 0,
                last: true,
            };
            run_stage(spec, kafka, engine, options, view, place).await
        }
    }
}

/// Runs a blocking Kafka call off the runtime's threads.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, GroupError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| GroupError::Panicked {
            partition: -1,
            message: e.to_string(),
        })
}

/// The jobs of the stages of `spec`, whose input topic has `partitions`, with the topics
/// between them made ready (DESIGN.md §12.1); `None` for a job that runs whole: one that does
/// not re-key, or whose stages would all have one partition (one pipeline then sees every
/// record, and the answer is the same without the topics).
async fn stage_jobs(
    spec: &JobSpec,
    kafka: &KafkaSourceSpec,
    partitions: u32,
) -> Result<Option<Vec<JobSpec>>, GroupError> {
    let Some((plan, counts)) = staged(spec, partitions) else {
        return Ok(None);
    };
    if spec.checkpoints.is_none()
        && let Some(first) = plan.topics().next()
    {
        return Err(GroupError::StagesNeedCheckpoints {
            job: spec.name.clone(),
            operator: first.operator.clone(),
        });
    }
    for (topic, wanted) in plan.topics().zip(&counts[1..]) {
        ensure_topic(&spec.name, kafka, topic, *wanted).await?;
    }
    Ok(Some(plan.stage_jobs(spec, &counts)))
}

/// The stages of `spec`, whose input topic has `partitions`, and each stage's partition
/// count; `None` for a job that runs whole (see [`stage_jobs`]).
fn staged(spec: &JobSpec, partitions: u32) -> Option<(StagePlan, Vec<u32>)> {
    let plan = StagePlan::of(spec);
    let mut counts = vec![partitions];
    counts.extend(plan.topics().map(|t| t.partitions.unwrap_or(partitions)));
    plan.topics().next()?;
    if counts.iter().all(|c| *c == 1) {
        return None;
    }
    Some((plan, counts))
}

/// Makes sure `repartition`'s topic exists with `wanted` partitions, on the brokers of the
/// job's source: creates it if it is missing, and says so. A topic that exists keeps its
/// settings (its retention among them).
async fn ensure_topic(
    job: &str,
    kafka: &KafkaSourceSpec,
    repartition: &RepartitionTopic,
    wanted: u32,
) -> Result<(), GroupError> {
    let topic = repartition.topic.as_str();
    let mismatch = |partitions: usize| GroupError::TopicMismatch {
        job: job.to_owned(),
        topic: topic.to_owned(),
        partitions: partitions as u32,
        wanted,
    };
    let count = {
        let (kafka, topic) = (kafka.clone(), topic.to_owned());
        move || partition_count(&kafka, &topic)
    };
    match blocking(count.clone())
        .await?
        .map_err(GroupError::Connect)?
    {
        Some(partitions) if partitions == wanted as usize => return Ok(()),
        Some(partitions) => return Err(mismatch(partitions)),
        None => {}
    }
    let cannot = |message: String| GroupError::CannotCreateTopic {
        job: job.to_owned(),
        topic: topic.to_owned(),
        partitions: wanted,
        message,
    };
    let admin: AdminClient<DefaultClientContext> = client_config(
        &kafka.brokers,
        kafka.connect_timeout(),
        &[],
        &kafka.properties,
    )
    .create()
    .map_err(|e| cannot(format!("cannot create an admin client: {e}")))?;
    let retention = repartition.retention_ms.map(|ms| ms.to_string());
    let new = new_topic(topic, wanted, retention.as_deref());
    let options = AdminOptions::new()
        .operation_timeout(Some(kafka.connect_timeout()))
        .request_timeout(Some(kafka.connect_timeout()));
    let created = admin
        .create_topics([&new], &options)
        .await
        .map_err(|e| cannot(e.to_string()))?;
    for result in created {
        match result {
            Ok(_) => {
                tracing::info!(topic, partitions = wanted, "created a repartition topic");
                eprintln!(
                    "weir: created topic `{topic}` with {wanted} partitions between the \
                     stages of `{job}`"
                );
            }
            // Another process of the job made it first.
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(cannot(code.to_string())),
        }
    }
    // Until every broker knows it, a reader of the topic would fail.
    let deadline = std::time::Instant::now() + kafka.connect_timeout();
    loop {
        match blocking(count.clone())
            .await?
            .map_err(GroupError::Connect)?
        {
            Some(partitions) if partitions == wanted as usize => return Ok(()),
            Some(partitions) => return Err(mismatch(partitions)),
            None if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None => return Err(cannot("the new topic did not show in the metadata".into())),
        }
    }
}

/// The creation request of a repartition topic: `partitions`, the brokers' own replication
/// factor (-1), and `retention.ms` if the job file sets it.
fn new_topic<'a>(topic: &'a str, partitions: u32, retention_ms: Option<&'a str>) -> NewTopic<'a> {
    let new = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(-1));
    match retention_ms {
        Some(ms) => new.set("retention.ms", ms),
        None => new,
    }
}

/// Runs every stage of a job that re-keys at once, each as a group of its own, until each
/// ends; the first to fail stops the others.
async fn run_stages(
    jobs: &[JobSpec],
    engine: &Engine,
    options: RunOptions,
    view: Arc<GroupView>,
) -> Result<GroupSummary, GroupError> {
    let mut first_operator = 0;
    let mut runs: futures::stream::FuturesUnordered<_> = jobs
        .iter()
        .enumerate()
        .map(|(k, job)| {
            let SourceSpec::Kafka(kafka) = &job.source else {
                unreachable!("every stage reads Kafka")
            };
            let place = StagePlace {
                index: k,
                topic: kafka.topic.clone(),
                first_operator,
                last: k + 1 == jobs.len(),
            };
            first_operator += job.operators.len();
            let (view, options) = (view.clone(), options.clone());
            async move { (k, run_stage(job, kafka, engine, options, view, place).await) }
        })
        .collect();
    let mut summary = GroupSummary::default();
    let mut later = BTreeMap::new();
    let mut failure = None;
    while let Some((k, result)) = futures::StreamExt::next(&mut runs).await {
        match result {
            Ok(stage) if k == 0 => summary.partitions = stage.partitions,
            Ok(stage) => {
                later.insert(
                    k,
                    StageSummary {
                        name: jobs[k].name.clone(),
                        partitions: stage.partitions,
                    },
                );
            }
            Err(error) => {
                if failure.is_none() {
                    options.stop.stop();
                    failure = Some(error);
                }
            }
        }
    }
    summary.stages = later.into_values().collect();
    match failure {
        Some(error) => Err(error),
        None => Ok(summary),
    }
}

/// Runs one stage of a job (the whole job, if it does not re-key) as a member of the stage's
/// consumer group.
async fn run_stage(
    spec: &JobSpec,
    kafka: &KafkaSourceSpec,
    engine: &Engine,
    options: RunOptions,
    view: Arc<GroupView>,
    place: StagePlace,
) -> Result<GroupSummary, GroupError> {
    let shared = Arc::new(Shared {
        spec: spec.clone(),
        kafka: kafka.clone(),
        engine: engine.clone(),
        options: options.clone(),
        runtime: Handle::current(),
        tasks: Mutex::default(),
        results: Mutex::default(),
        member: OnceLock::new(),
        leaving: AtomicBool::new(false),
        view,
        place: Arc::new(place),
        purger: kafka
            .repartition_input
            .is_some()
            .then(|| Arc::new(purge::Purger::new(kafka, Handle::current()))),
    });
    let member = join_group(&shared).map_err(GroupError::Connect)?;
    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let (shared, done) = (shared.clone(), done.clone());
        std::thread::Builder::new()
            .name("weir-kafka-member".into())
            .spawn(move || follow_group(&member, &shared, &done))
            .map_err(|e| GroupError::Panicked {
                partition: -1,
                message: e.to_string(),
            })?
    };
    let (mut summary, mut failure) = watch_pipelines(&shared, &options).await;
    done.store(true, Ordering::Relaxed);
    tokio::task::spawn_blocking(move || poller.join())
        .await
        .ok();
    shared.collect(&mut summary, &mut failure);
    match failure {
        Some(error) => Err(error),
        None => Ok(summary),
    }
}

/// Makes this process's member of the job's consumer group, subscribed to the topic (unless
/// it reads every partition itself, `assignment = "all"`).
fn join_group(shared: &Arc<Shared>) -> Result<Arc<BaseConsumer<MemberContext>>, ConnectorError> {
    let kafka = &shared.kafka;
    let member: BaseConsumer<MemberContext> = client_config(
        &kafka.brokers,
        kafka.connect_timeout(),
        &[
            ("group.id", &kafka.group_id),
            ("enable.auto.commit", "false"),
            ("partition.assignment.strategy", "cooperative-sticky"),
            // Partitions added to the topic reach the group within this (default 5 min).
            ("topic.metadata.refresh.interval.ms", "10000"),
        ],
        &kafka.properties,
    )
    .create_with_context(MemberContext {
        shared: shared.clone(),
    })
    .map_err(|e| kafka_error(&kafka.brokers, e.to_string()))?;
    let member = Arc::new(member);
    let _ = shared.member.set(Arc::downgrade(&member));
    if kafka.assignment != Assignment::All {
        member
            .subscribe(&[&kafka.topic])
            .map_err(|e| kafka_error(&kafka.brokers, e.to_string()))?;
    }
    Ok(member)
}

/// The member's thread: polls, which runs the rebalance callbacks, and makes sure every
/// partition this process should run has its pipeline; once `done`, leaves the group, the
/// partitions' pipelines stopped first.
fn follow_group(member: &BaseConsumer<MemberContext>, shared: &Arc<Shared>, done: &AtomicBool) {
    let all = shared.kafka.assignment == Assignment::All;
    let mut next_look = std::time::Instant::now();
    while !done.load(Ordering::Relaxed) {
        // Messages only come before a pause takes effect: dropped, since each partition's
        // pipeline reads them itself.
        let _ = member.poll(Duration::from_millis(100));
        if std::time::Instant::now() < next_look {
            continue;
        }
        if all {
            // Every partition, new ones included.
            next_look += PARTITIONS_LOOK_EVERY;
            match check_topic(&shared.kafka) {
                Ok(count) => {
                    for partition in 0..count as i32 {
                        shared.start(partition);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot list the partitions"),
            }
        } else {
            // Every assigned partition has its pipeline, also one that let go of it after
            // another process's claim while the group kept it here.
            next_look += ASSIGNMENT_LOOK_EVERY;
            if !shared.leaving.load(Ordering::Relaxed)
                && let Ok(assigned) = member.assignment()
            {
                for element in assigned.elements() {
                    shared.start(element.partition());
                }
            }
        }
    }
    shared.leaving.store(true, Ordering::Relaxed);
    // Leaving revokes every partition: their pipelines stop first.
    member.unsubscribe();
    for _ in 0..if all { 0 } else { 50 } {
        let _ = member.poll(Duration::from_millis(20));
        if shared.owned().is_empty() {
            break;
        }
    }
    let owned: Vec<i32> = shared.owned().iter().map(|(p, _)| *p).collect();
    for partition in owned {
        shared.stop(partition);
    }
}

/// Collects the partitions' pipelines as they end, and says which partitions this process
/// owns when that changes, until one fails, the run is stopped, or (`stop_at_end`) every
/// owned partition has reached its end. Passes checkpoint requests on to the pipelines.
async fn watch_pipelines(
    shared: &Shared,
    options: &RunOptions,
) -> (GroupSummary, Option<GroupError>) {
    let kafka = &shared.kafka;
    let mut summary = GroupSummary::default();
    let mut failure = None;
    let mut last_owned = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            () = options.checkpoint_now.requested() => shared.view.request_checkpoint(),
        }
        // Collect what finished on its own.
        for (partition, handle, link) in shared.take_finished() {
            let result = handle.await;
            if matches!(result, Ok(Ok(_)))
                && let Some(end) = link.next_offset()
            {
                // The last checkpoint completed after the source ended, which never heard;
                // wait for this commit, as the process may leave next.
                tokio::task::block_in_place(|| shared.commit(partition, end, CommitMode::Sync));
            }
            shared.note(partition, result);
        }
        shared.collect(&mut summary, &mut failure);
        if failure.is_some() || options.stop.is_raised() {
            break;
        }
        let owned = shared.owned();
        let partitions: Vec<i32> = owned.iter().map(|(p, _)| *p).collect();
        if last_owned.as_ref() != Some(&partitions) {
            eprintln!(
                "weir: this process owns partitions {partitions:?} of `{}`",
                kafka.topic
            );
            last_owned = Some(partitions);
        }
        if kafka.stop_at_end && !owned.is_empty() {
            let tasks = shared.tasks.lock().unwrap_or_else(|e| e.into_inner());
            if tasks.values().all(|t| t.handle.is_none()) {
                break;
            }
        }
    }
    (summary, failure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repartition_topic_is_created_with_the_retention_the_job_file_sets() {
        let set = new_topic("weir.wc.count.repartition", 4, Some("3600000"));
        assert_eq!(
            (set.name, set.num_partitions, set.config),
            (
                "weir.wc.count.repartition",
                4,
                vec![("retention.ms", "3600000")]
            )
        );
        assert!(matches!(set.replication, TopicReplication::Fixed(-1)));
        assert!(new_topic("t", 1, None).config.is_empty());
    }
}
