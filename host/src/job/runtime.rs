//! [`run`]: runs a [`Pipeline`] to the end of its input, with checkpoints.
//!
//! Tasks: the source, the sink and every operator subtask each run as a blocking tokio task,
//! that is on a thread of their own. A subtask owns its operator instance and its state; Wasm
//! runs synchronously and is CPU-bound, and WASI's synchronous calls must not run on an async
//! worker thread (they block on the runtime), so subtasks never run on the async workers.
//! Tasks are connected by bounded channels of batches, one per producer and consumer, so a
//! slow stage holds back the ones before it (backpressure) instead of buffering without bound,
//! and a consumer aligning a barrier can stop reading one producer ([`InputGate`]). In a job
//! that checkpoints, each consumer also bounds the records queued in front of it by time, to
//! what it processes in its share of the checkpoint interval ([`InFlight`], `job::in_flight`),
//! so that barriers, which wait behind those records, keep to the interval.
//!
//! The coordinator runs as an async task. The end of the input is the last checkpoint's
//! barrier: operators close when it passes, and the run is over when that checkpoint
//! completes and the sink has committed. A channel that closes before its last barrier means
//! a task failed; the others stop without committing anything more.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::task::JoinSet;

use super::RunSummary;
use super::bad_records::{
    BadRecordCounters, BadRecordPolicy, DeadLetter, DeadLetters, describe_record,
};
use super::downstream::Downstream;
use super::in_flight::{self, Input, Output};
use super::input_gate::{Closed, Event, InputGate};
use super::metrics::{JobMetrics, SubtaskMetrics};
use super::pipeline::{DeadLetterOutput, Pipeline, Stage};
use super::progress::Progress;
use super::restore_latch::{RestoreLatch, Restoring};
use super::router::{RouteError, Router};
use super::spec::RecordPolicy;
use super::watermarks::{END_OF_TIME, WatermarkChange, WatermarkGenerator, WatermarkMessage};
use crate::checkpoint::actor::{Actor, acting};
use crate::checkpoint::coordinator::{Coordinator, CoordinatorSetup};
use crate::checkpoint::metadata::{BarrierTiming, TaskCounts};
use crate::checkpoint::protocol::{Ack, Barrier, BarrierReport, Notification, StagedOutput};
use crate::checkpoint::subtask_checkpoints::{
    RestoreAssignment, SubtaskCheckpoints, SubtaskIdentity,
};
use crate::checkpoint::{
    ChainPolicy, CheckpointError, CheckpointMetadata, CheckpointStore, JobStart,
};
use crate::connectors::{ConnectorError, Rejected, Sink, SinkRestore, Source, SourceOrigin};
use crate::guest::GuestLogFile;
use crate::guest::state_host::processing_time_now;
use crate::ids::{CheckpointId, OperatorName, SubtaskIndex};
use crate::operator::{FailureKind, OperatorError, OperatorInstance, SubtaskContext};
use crate::record::RecordBatch;
use crate::state::TimeDomain;

/// Most timers handed to an operator in one call.
const TIMERS_PER_CALL: usize = 1024;

/// Options for [`run`].
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Show a progress line on a terminal.
    pub progress: bool,
    /// Batches that may wait in each channel, at most.
    pub channel_capacity: usize,
    /// How the records waiting in each channel are bounded besides.
    pub in_flight: InFlight,
    /// Stops the job where it is (no last checkpoint) when raised.
    pub stop: StopSignal,
    /// Asks for a checkpoint now (`weir checkpoint ID`), besides the periodic ones.
    pub checkpoint_now: CheckpointRequest,
    /// Counters to update, for a caller that watches the job while it runs (`weir serve`);
    /// they must be made for the pipeline's operators. A run makes its own otherwise.
    pub metrics: Option<Arc<JobMetrics>>,
    /// Where to keep the guests' log lines besides the host's log (`weir serve` keeps them
    /// in the job's folder, for `weir job ID --logs`).
    pub guest_log: Option<Arc<GuestLogFile>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            progress: false,
            channel_capacity: 8,
            in_flight: InFlight::default(),
            stop: StopSignal::default(),
            checkpoint_now: CheckpointRequest::default(),
            metrics: None,
            guest_log: None,
        }
    }
}

/// How many records may wait in front of each consumer (`job::in_flight`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InFlight {
    /// What the consumer processes in its share of the checkpoint interval
    /// ([`in_flight::target`]); in a job without checkpoints, `channel_capacity` batches.
    #[default]
    CheckpointInterval,
    /// `channel_capacity` full batches, whatever the consumer's pace (as before in-flight
    /// data was bounded by time; for comparison).
    Batches,
}

impl InFlight {
    /// The target time of every consumer of a pipeline of `operators` operators.
    fn target(self, checkpointing: Option<&Checkpointing>, operators: usize) -> Option<Duration> {
        match self {
            InFlight::CheckpointInterval => {
                checkpointing.map(|c| in_flight::target(c.interval, operators))
            }
            InFlight::Batches => None,
        }
    }
}

/// Asks a running job for a checkpoint as soon as none is in flight.
#[derive(Clone, Debug, Default)]
pub struct CheckpointRequest(Arc<tokio::sync::Notify>);

impl CheckpointRequest {
    pub fn request(&self) {
        self.0.notify_one();
    }

    /// Waits for the next request (or the one made since the last wait).
    pub async fn requested(&self) {
        self.0.notified().await;
    }
}

/// Asks a running job to stop: its source reads no more and the job ends with
/// [`JobError::Stopped`], as if it had crashed, so it resumes from its latest checkpoint.
#[derive(Clone, Debug, Default)]
pub struct StopSignal(Arc<AtomicBool>);

impl StopSignal {
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// How a pipeline checkpoints.
#[derive(Clone, Debug)]
pub struct Checkpointing {
    pub store: CheckpointStore,
    pub interval: Duration,
    /// How long a checkpoint may take before it fails.
    pub timeout: Duration,
    /// Checkpoints that may fail in a row before the job fails.
    pub tolerable_failures: u32,
    pub retain: usize,
    pub chains: ChainPolicy,
}

/// Why a job failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    #[error(transparent)]
    Operator(#[from] OperatorError),
    #[error("source: {0}")]
    Source(ConnectorError),
    #[error("sink: {0}")]
    Sink(ConnectorError),
    #[error("dead letters: {0}")]
    DeadLetters(String),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the job was stopped")]
    Stopped,
    #[error("a task of the job panicked: {0}")]
    Panicked(String),
    #[error("invalid pipeline: {0}")]
    Invalid(String),
    /// This task stopped because another one failed; never reported when the cause is known.
    #[error("the job was aborted because one of its tasks stopped")]
    Aborted,
}

impl From<Closed> for JobError {
    fn from(_: Closed) -> Self {
        JobError::Aborted
    }
}

/// Runs `pipeline` from `start` to the end of its input and returns what it did.
pub async fn run(
    pipeline: Pipeline,
    start: JobStart,
    options: RunOptions,
) -> Result<RunSummary, JobError> {
    let Pipeline {
        name,
        key_groups,
        batch_size,
        mut source,
        source_on_bad_record,
        stages,
        sink,
        dead_letters,
        checkpointing,
        watermarks,
    } = pipeline;
    let metrics = options.metrics.clone().unwrap_or_else(|| {
        Arc::new(JobMetrics::new(
            stages.iter().map(|s| (s.name.as_str(), s.parallelism)),
        ))
    });
    metrics.start_from(start.restored.as_deref());
    let started = Instant::now();
    if stages.is_empty() {
        return Err(JobError::Invalid(
            "a pipeline needs at least one operator".into(),
        ));
    }
    let restored = start.restored.clone();
    if let Some(checkpoint) = start.restored.as_ref().filter(|m| m.finished) {
        // The job had finished: only its last output may still need committing.
        tracing::info!(
            checkpoint = checkpoint.id.0,
            "the job had finished; committing its output"
        );
        let mut outputs = Outputs::new(sink, dead_letters);
        // Sinks block (files, brokers): not on an async worker.
        let finished = checkpoint.clone();
        tokio::task::spawn_blocking(move || outputs.recover(Some(&finished)))
            .await
            .map_err(|e| JobError::Panicked(e.to_string()))??;
        // A run killed after its last checkpoint completed may not have cleaned up: every
        // subtask still sweeps what no retained checkpoint references.
        if let Some(checkpointing) = &checkpointing {
            let sweep = Sweep {
                checkpointing: checkpointing.clone(),
                stages: stages
                    .iter()
                    .map(|s| (s.name.clone(), s.parallelism))
                    .collect(),
                key_groups,
                assignment: RestoreAssignment {
                    restored: None,
                    retained: start.retained.clone(),
                },
            };
            tokio::task::spawn_blocking(move || sweep.run())
                .await
                .map_err(|e| JobError::Panicked(e.to_string()))?
                .map_err(JobError::Checkpoint)?;
        }
        return Ok(metrics.summary(&name, started.elapsed()));
    }
    if let Some(checkpoint) = &start.restored {
        tracing::info!(checkpoint = checkpoint.id.0, "restoring");
        source.seek(&checkpoint.source).map_err(JobError::Source)?;
    }
    let _progress = options
        .progress
        .then(|| Progress::start(metrics.clone(), source.progress()))
        .flatten();

    let capacity = options.channel_capacity.max(1);
    let target = options
        .in_flight
        .target(checkpointing.as_ref(), stages.len());
    let (ack_tx, ack_rx) = mpsc::unbounded_channel();
    let (trigger_tx, trigger_rx) = std::sync::mpsc::channel();
    let mut notify = Vec::new();
    let runtime = Handle::current();
    let run_id: Arc<str> = run_id().into();
    let assignment = start.assignment();
    let latch = RestoreLatch::new(stages.iter().map(|s| s.parallelism as usize).sum());

    // Edges: `edges[s]` connects the producers of stage `s` (the source for 0) to its
    // subtasks; the last entry connects the last stage to the sink.
    let mut consumer_counts: Vec<u32> = stages.iter().map(|s| s.parallelism).collect();
    consumer_counts.push(1);
    let mut producer_counts = vec![1];
    producer_counts.extend(stages.iter().map(|s| s.parallelism));
    let mut edges: Vec<Edge> = consumer_counts
        .iter()
        .zip(&producer_counts)
        .map(|(&consumers, &producers)| Edge::new(producers, consumers, capacity, batch_size))
        .collect();

    // With dead-letter files, every task has one more channel, to the sink.
    let tasks_count = 1 + stages.iter().map(|s| s.parallelism as usize).sum::<usize>();
    let (mut letters, letter_inputs): (Vec<DeadLetters>, Vec<Input>) = if dead_letters.is_empty() {
        (
            (0..tasks_count).map(|_| DeadLetters::default()).collect(),
            Vec::new(),
        )
    } else {
        (0..tasks_count)
            .map(|_| {
                let (tx, rx) = in_flight::channel(capacity, batch_size);
                (DeadLetters::new(tx, dead_letters.len()), rx)
            })
            .unzip()
    };
    let mut letters = letters.drain(..);
    let origin = source.origin();
    let targets: Vec<RecordPolicy> = dead_letters.iter().map(|d| d.target.clone()).collect();
    let policy = |policy: &RecordPolicy, counters: &Arc<BadRecordCounters>| {
        BadRecordPolicy::new(policy, &targets, counters.clone())
    };

    let mut tasks = JoinSet::new();
    let (source_notify_tx, source_notify_rx) = mpsc::unbounded_channel();
    notify.push(source_notify_tx);
    let source_task = SourceTask {
        notifications: source_notify_rx,
        acked: std::collections::VecDeque::new(),
        bad_lines: policy(&source_on_bad_record, &metrics.source_bad_records),
        origin: origin.clone(),
        rejected: Vec::new(),
        source,
        downstream: Downstream::new(
            Router::new(
                stages[0].key_by.clone(),
                key_groups,
                stages[0].parallelism,
                batch_size,
                "the source".into(),
                stages[0].name.clone(),
            ),
            edges[0].senders.remove(0),
            policy(&stages[0].on_bad_record, &metrics.operators[0].bad_records),
            stages[0].name.clone(),
            origin.clone(),
            letters.next().unwrap_or_default(),
        ),
        batch_size,
        triggers: trigger_rx,
        acks: ack_tx.clone(),
        metrics: metrics.clone(),
        stop: options.stop.clone(),
        watermarks: WatermarkGenerator::new(
            watermarks,
            start.restored.as_ref().and_then(|m| m.source_max_timestamp),
        ),
    };
    tasks.spawn_blocking(move || source_task.run());

    for (s, stage) in stages.iter().enumerate() {
        let next = stages.get(s + 1);
        let inputs = std::mem::take(&mut edges[s].receivers);
        for (i, input) in inputs.into_iter().enumerate() {
            let subtask = SubtaskIndex(i as u32);
            let ctx = SubtaskContext {
                job: name.clone().into(),
                operator: OperatorName(stage.name.clone()),
                subtask,
                parallelism: stage.parallelism,
                key_groups,
                range: key_groups.range_of(subtask, stage.parallelism),
                config_json: stage.config_json.clone(),
                limits: stage.limits,
                guest_log: options.guest_log.clone(),
                first_checkpoint: start.next_checkpoint,
            };
            let from = format!("operator `{}` subtask {i}", stage.name);
            let (router, unroutable, next_name) = match next {
                Some(next) => (
                    Router::new(
                        next.key_by.clone(),
                        key_groups,
                        next.parallelism,
                        batch_size,
                        from,
                        next.name.clone(),
                    ),
                    policy(&next.on_bad_record, &metrics.operators[s + 1].bad_records),
                    next.name.clone(),
                ),
                None => (
                    Router::new(None, key_groups, 1, batch_size, from, "the sink".into()),
                    BadRecordPolicy::fail(),
                    "the sink".into(),
                ),
            };
            let downstream = Downstream::new(
                router,
                edges[s + 1].senders.remove(0),
                unroutable,
                next_name,
                origin.clone(),
                letters.next().unwrap_or_default(),
            );
            let (notify_tx, notify_rx) = mpsc::unbounded_channel();
            notify.push(notify_tx);
            let checkpoints = checkpointing.as_ref().map(|c| {
                let mut checkpoints = SubtaskCheckpoints::new(
                    c.store.clone(),
                    runtime.clone(),
                    ack_tx.clone(),
                    SubtaskIdentity {
                        operator: stage.name.clone(),
                        operator_index: s,
                        subtask,
                        parallelism: stage.parallelism,
                        key_groups,
                        range: ctx.range,
                    },
                    run_id.clone(),
                    c.chains,
                );
                checkpoints.count_into(
                    metrics.operators[s].subtasks[subtask.0 as usize]
                        .snapshots
                        .clone(),
                );
                checkpoints.upload_within(c.timeout);
                checkpoints
            });
            let restored_watermark = restored_watermark(start.restored.as_deref(), s, ctx.range);
            let task = SubtaskTask {
                stage: stage.clone(),
                stage_index: s,
                ctx,
                gate: InputGate::new(input, notify_rx, target, batch_size)
                    .restoring_watermark(restored_watermark),
                downstream,
                on_error: policy(&stage.on_error, &metrics.operators[s].bad_records),
                origin: origin.clone(),
                checkpoints,
                assignment: assignment.clone(),
                restoring: latch.part(),
                acks: ack_tx.clone(),
                metrics: metrics.clone(),
            };
            tasks.spawn_blocking(move || task.run());
        }
    }
    let (notify_tx, notify_rx) = mpsc::unbounded_channel();
    notify.push(notify_tx);
    let sink_inputs = std::mem::take(&mut edges[stages.len()].receivers).remove(0);
    let sink_task = SinkTask {
        outputs: Outputs::new(sink, dead_letters),
        gate: InputGate::new(sink_inputs, notify_rx, target, batch_size)
            .with_dead_letters(letter_inputs),
        restored,
        latch,
        acks: ack_tx.clone(),
        metrics: metrics.clone(),
    };
    tasks.spawn_blocking(move || sink_task.run());
    drop(ack_tx);
    drop(edges);

    let coordinator = Coordinator::new(
        CoordinatorSetup {
            job: name.clone(),
            key_groups: key_groups.count(),
            operators: stages
                .iter()
                .map(|s| (s.name.clone(), s.parallelism))
                .collect(),
            store: checkpointing.as_ref().map(|c| c.store.clone()),
            interval: checkpointing.as_ref().map(|c| c.interval),
            timeout: checkpointing.as_ref().map(|c| c.timeout),
            retain: checkpointing.as_ref().map_or(1, |c| c.retain),
            tolerable_failures: checkpointing.as_ref().map_or(0, |c| c.tolerable_failures),
            next: start.next_checkpoint,
            retained: start.retained.iter().map(|m| m.id).collect(),
        },
        trigger_tx,
        ack_rx,
        notify,
        metrics.checkpoints.clone(),
        options.checkpoint_now.0.clone(),
    );
    let coordinator = tokio::spawn(acting(Actor::Coordinator, coordinator.run()));
    let stop_coordinator = coordinator.abort_handle();

    let mut failure: Option<JobError> = None;
    let note = |result: Result<(), JobError>, failure: &mut Option<JobError>| {
        if let Err(e) = result {
            // Keep the first real cause; `Aborted` only echoes it.
            if failure
                .as_ref()
                .is_none_or(|f| matches!(f, JobError::Aborted))
            {
                *failure = Some(e);
            }
            // Tasks waiting for notifications stop when the coordinator is gone.
            stop_coordinator.abort();
        }
    };
    while let Some(joined) = tasks.join_next().await {
        let result = joined.unwrap_or_else(|e| Err(JobError::Panicked(e.to_string())));
        note(result, &mut failure);
    }
    let coordinated = match coordinator.await {
        Ok(result) => result.map_err(JobError::Checkpoint),
        Err(e) if e.is_cancelled() => Err(JobError::Aborted),
        Err(e) => Err(JobError::Panicked(e.to_string())),
    };
    note(coordinated, &mut failure);
    let summary = metrics.summary(&name, started.elapsed());
    match failure {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

/// Everything a job writes: its sink and its dead-letter files and topics, staged, committed
/// and recovered together.
struct Outputs {
    sink: Box<dyn Sink>,
    /// Each dead-letter file or topic with its sink, by the name its checkpoints record it
    /// under, in the order of [`Pipeline::dead_letters`].
    dead_letters: Vec<(String, Box<dyn Sink>)>,
}

impl Outputs {
    fn new(sink: Box<dyn Sink>, dead_letters: Vec<DeadLetterOutput>) -> Self {
        let dead_letters = dead_letters.into_iter().map(|d| (d.name, d.sink)).collect();
        Self { sink, dead_letters }
    }

    fn recover(&mut self, restored: Option<&CheckpointMetadata>) -> Result<(), JobError> {
        self.sink
            .recover(restored.map(|m| SinkRestore {
                checkpoint: m.id,
                position: m.sink.as_ref(),
            }))
            .map_err(JobError::Sink)?;
        for (path, sink) in &mut self.dead_letters {
            sink.recover(restored.map(|m| SinkRestore {
                checkpoint: m.id,
                position: m.dead_letters.get(path.as_str()),
            }))
            .map_err(|e| JobError::DeadLetters(e.to_string()))?;
        }
        Ok(())
    }

    fn stage(&mut self, checkpoint: CheckpointId) -> Result<StagedOutput, ConnectorError> {
        let mut staged = StagedOutput {
            sink: self.sink.stage(checkpoint)?,
            dead_letters: Default::default(),
        };
        for (path, sink) in &mut self.dead_letters {
            if let Some(position) = sink.stage(checkpoint)? {
                staged.dead_letters.insert(path.clone(), position);
            }
        }
        Ok(staged)
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), JobError> {
        self.sink.commit(checkpoint).map_err(JobError::Sink)?;
        for (_, sink) in &mut self.dead_letters {
            sink.commit(checkpoint)
                .map_err(|e| JobError::DeadLetters(e.to_string()))?;
        }
        Ok(())
    }
}

/// The cleanup of a job that had finished: each subtask's orphan sweep, without running.
struct Sweep {
    checkpointing: Checkpointing,
    stages: Vec<(String, u32)>,
    key_groups: crate::partition::KeyGroups,
    assignment: RestoreAssignment,
}

impl Sweep {
    fn run(self) -> Result<(), CheckpointError> {
        let (acks, _ignored) = mpsc::unbounded_channel();
        for (index, (operator, parallelism)) in self.stages.iter().enumerate() {
            for i in 0..*parallelism {
                let subtask = SubtaskIndex(i);
                let range = self.key_groups.range_of(subtask, *parallelism);
                let mut checkpoints = SubtaskCheckpoints::new(
                    self.checkpointing.store.clone(),
                    Handle::current(),
                    acks.clone(),
                    SubtaskIdentity {
                        operator: operator.clone(),
                        operator_index: index,
                        subtask,
                        parallelism: *parallelism,
                        key_groups: self.key_groups,
                        range,
                    },
                    run_id().into(),
                    self.checkpointing.chains,
                );
                let mut empty = crate::state::KeyedStateBackend::new(self.key_groups, range);
                checkpoints.start(&mut empty, &self.assignment)?;
                checkpoints.finish();
            }
        }
        Ok(())
    }
}

/// The watermark a subtask of operator `operator` owning `range` restores: the least of the
/// restored subtasks' whose key groups it takes (the subtasks of an operator pass a barrier
/// with the same watermark, since watermarks travel in line with barriers).
fn restored_watermark(
    restored: Option<&CheckpointMetadata>,
    operator: usize,
    range: crate::partition::KeyGroupRange,
) -> Option<i64> {
    restored?
        .operators
        .get(operator)?
        .subtasks
        .iter()
        .filter(|h| {
            let old = h.range();
            old.start < range.end && range.start < old.end
        })
        .filter_map(|h| h.watermark)
        .min()
}

/// A name for this run's artifacts, unique enough across runs of a job.
/// A name for one run, unique across processes and restarts.
pub(crate) fn run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// The channels between one stage's producers and its consumers.
struct Edge {
    /// Per producer, one output per consumer.
    senders: Vec<Vec<Output>>,
    /// Per consumer, one input per producer.
    receivers: Vec<Vec<Input>>,
}

impl Edge {
    fn new(producers: u32, consumers: u32, capacity: usize, batch_size: usize) -> Self {
        let mut senders: Vec<Vec<Output>> = (0..producers).map(|_| Vec::new()).collect();
        let mut receivers = Vec::new();
        for _ in 0..consumers {
            let mut inputs = Vec::new();
            for producer in &mut senders {
                let (tx, rx) = in_flight::channel(capacity, batch_size);
                producer.push(tx);
                inputs.push(rx);
            }
            receivers.push(inputs);
        }
        Self { senders, receivers }
    }
}

/// The source: reads, routes, sets bad lines aside, and injects barriers when the
/// coordinator asks.
struct SourceTask {
    source: Box<dyn Source>,
    /// `[source] on_bad_record`.
    bad_lines: BadRecordPolicy,
    origin: SourceOrigin,
    /// Reused between batches.
    rejected: Vec<Rejected>,
    downstream: Downstream,
    batch_size: usize,
    triggers: std::sync::mpsc::Receiver<Barrier>,
    /// The coordinator's news, for [`Source::checkpoint_completed`].
    notifications: mpsc::UnboundedReceiver<Notification>,
    /// The positions of checkpoints acknowledged and not yet complete or aborted.
    acked: std::collections::VecDeque<(CheckpointId, crate::connectors::SourcePosition)>,
    acks: UnboundedSender<Ack>,
    metrics: Arc<JobMetrics>,
    stop: StopSignal,
    watermarks: WatermarkGenerator,
}

impl SourceTask {
    fn run(mut self) -> Result<(), JobError> {
        loop {
            if self.stop.is_raised() {
                return Err(JobError::Stopped);
            }
            while let Ok(barrier) = self.triggers.try_recv() {
                self.barrier(barrier)?;
            }
            self.take_notifications();
            // No more than the next stage wants: a batch read is in flight too. And no further
            // than the next place a watermark goes (`job::watermarks`).
            let read = self.metrics.source_records.load(Ordering::Relaxed);
            let to_mark = self.batch_size - (read % self.batch_size as u64) as usize;
            let wanted = self.downstream.batch_size();
            let size = wanted.clamp(1, to_mark);
            let mut batch = crate::record::RecordBatch::with_capacity(size, size * 32);
            let more = self
                .source
                .read_batch(size, &mut batch)
                .map_err(JobError::Source)?;
            self.metrics
                .source_records
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            self.metrics
                .source_skipped_timestamps
                .store(self.source.skipped_for_timestamp(), Ordering::Relaxed);
            self.set_aside_bad_lines();
            let read = self.metrics.source_records.load(Ordering::Relaxed);
            let at_mark = read.is_multiple_of(self.batch_size as u64);
            let watermark = self.watermarks.observe(&batch, at_mark);
            if !batch.is_empty() {
                self.downstream.send(batch)?;
            }
            if let Some(watermark) = watermark {
                self.downstream.watermark(watermark)?;
            }
            if !more {
                break;
            }
        }
        // The end of the input: every pending event-time timer fires before the last barrier.
        self.downstream
            .watermark(WatermarkMessage::At(END_OF_TIME))?;
        self.acks
            .send(Ack::SourceEnded)
            .map_err(|_| JobError::Aborted)?;
        loop {
            let barrier = self.triggers.recv().map_err(|_| JobError::Aborted)?;
            self.barrier(barrier)?;
            if barrier.last {
                return Ok(());
            }
        }
    }

    /// The lines the source set aside (it does only when `on_bad_record` lets it).
    fn set_aside_bad_lines(&mut self) {
        self.source.drain_rejected(&mut self.rejected);
        for line in self.rejected.drain(..) {
            let origin = self.origin.describe(line.origin);
            let letter = DeadLetter {
                operator: None,
                subtask: None,
                error: &line.reason,
                origin: Some(&origin),
                key: None,
                value: &line.raw,
                timestamp: None,
            };
            self.bad_lines
                .set_aside(&letter, &mut self.downstream.letters);
        }
    }

    /// Tells the source which of its positions are now in completed checkpoints.
    fn take_notifications(&mut self) {
        while let Ok(notification) = self.notifications.try_recv() {
            match notification {
                Notification::Complete { completed, .. } => {
                    let mut newest = None;
                    while self.acked.front().is_some_and(|(id, _)| *id <= completed) {
                        newest = self.acked.pop_front();
                    }
                    if let Some((_, position)) = newest {
                        self.source.checkpoint_completed(&position);
                    }
                }
                Notification::Abort(id) => self.acked.retain(|(acked, _)| *acked != id),
                Notification::Retake(_) => {}
            }
        }
    }

    fn barrier(&mut self, barrier: Barrier) -> Result<(), JobError> {
        let position = self.source.position();
        self.acked.push_back((barrier.checkpoint, position.clone()));
        self.acks
            .send(Ack::Source {
                checkpoint: barrier.checkpoint,
                position,
                records: self.metrics.source_records.load(Ordering::Relaxed),
                max_timestamp: self.watermarks.max_timestamp(),
            })
            .map_err(|_| JobError::Aborted)?;
        self.downstream.barrier(barrier)
    }
}

/// One operator subtask: its instance, its inputs and its routing to the next stage.
struct SubtaskTask {
    stage: Stage,
    stage_index: usize,
    ctx: SubtaskContext,
    gate: InputGate,
    downstream: Downstream,
    /// What happens to a record the operator fails on.
    on_error: BadRecordPolicy,
    /// Names the origin of records that come from the source.
    origin: SourceOrigin,
    /// `None` when the job does not checkpoint.
    checkpoints: Option<SubtaskCheckpoints>,
    assignment: RestoreAssignment,
    /// Given back once the state is restored, which lets the sink roll back its output.
    restoring: Restoring,
    acks: UnboundedSender<Ack>,
    metrics: Arc<JobMetrics>,
}

impl SubtaskTask {
    fn run(mut self) -> Result<(), JobError> {
        let mut operator = self.stage.factory.instantiate(&self.ctx)?;
        if !self.on_error.fails() {
            operator.keep_undo_log();
        }
        if let Some(checkpoints) = &mut self.checkpoints {
            checkpoints
                .start(operator.state_mut(), &self.assignment)
                .map_err(JobError::Checkpoint)?;
        }
        self.restoring.restored();
        let counters =
            self.metrics.operators[self.stage_index].subtasks[self.ctx.subtask.0 as usize].clone();
        operator.set_watermark(self.gate.watermark());
        counters.set_watermark(self.gate.watermark());
        let mut last: Option<CheckpointId> = None;
        loop {
            // Processing-time timers due now fire first (after a restore: those that came
            // due while the job was down); the next one bounds the wait for input.
            let deadline = if last.is_none() {
                self.fire_processing_timers(operator.as_mut(), &counters)?
            } else {
                None
            };
            counters.set_timers_pending(operator.state_mut().timers_pending().ok());
            match self.gate.recv_until(deadline)? {
                Event::Deadline => {}
                Event::Watermark(WatermarkChange::Advanced(watermark)) => {
                    operator.set_watermark(Some(watermark));
                    counters.set_watermark(Some(watermark));
                    self.fire_timers(
                        operator.as_mut(),
                        TimeDomain::EventTime,
                        watermark,
                        &counters,
                    )?;
                    self.downstream.watermark(WatermarkMessage::At(watermark))?;
                }
                Event::Watermark(WatermarkChange::Idle) => {
                    self.downstream.watermark(WatermarkMessage::Idle)?;
                }
                Event::Watermark(WatermarkChange::Active) => {
                    if let Some(watermark) = self.gate.watermark() {
                        self.downstream.watermark(WatermarkMessage::At(watermark))?;
                    }
                }
                Event::Batch(batch) => {
                    if let Some(watermark) = self.gate.watermark() {
                        counters.count_late(batch.count_at_or_before(watermark));
                    }
                    counters.count_in(&batch);
                    let started = Instant::now();
                    let out = self.process(operator.as_mut(), batch)?;
                    counters.batch_latency.observe(started.elapsed());
                    counters.count_out(&out);
                    self.downstream.send(out)?;
                }
                // Only the sink reads dead letters.
                Event::DeadLetters { .. } => {}
                Event::Barrier(barrier) => {
                    if barrier.last {
                        let out = operator.close()?;
                        counters.count_out(&out);
                        self.downstream.send(out)?;
                        last = Some(barrier.checkpoint);
                    }
                    let timing = self.gate.barrier_timing();
                    counters.barrier_passed(timing);
                    let report = BarrierReport {
                        timing,
                        counts: counters.counts(),
                        watermark: self.gate.watermark(),
                    };
                    self.snapshot(operator.as_mut(), barrier.checkpoint, report)?;
                    self.downstream.barrier(barrier)?;
                }
                Event::Notification(Notification::Complete {
                    completed,
                    earliest_retained,
                }) => {
                    if let Some(checkpoints) = &mut self.checkpoints {
                        checkpoints.complete(completed, earliest_retained);
                    }
                    if last.is_some_and(|l| completed >= l) {
                        break;
                    }
                }
                Event::Notification(Notification::Retake(checkpoint)) => {
                    let report = BarrierReport {
                        counts: counters.counts(),
                        watermark: self.gate.watermark(),
                        ..BarrierReport::default()
                    };
                    self.snapshot(operator.as_mut(), checkpoint, report)?;
                }
                Event::Notification(Notification::Abort(checkpoint)) => {
                    if let Some(checkpoints) = &mut self.checkpoints {
                        checkpoints.abort(checkpoint);
                    }
                }
            }
        }
        if let Some(checkpoints) = &mut self.checkpoints {
            checkpoints.finish();
        }
        let stats = operator.state().stats();
        tracing::debug!(
            operator = %self.ctx.operator,
            subtask = self.ctx.subtask.0,
            state_entries = stats.entries,
            "subtask finished"
        );
        Ok(())
    }

    /// Fires the timers of `domain` due at `upto`, batch after batch, until none is due: a
    /// timer the operator registers while handling one and that is due already fires in
    /// the same call.
    fn fire_timers(
        &mut self,
        operator: &mut dyn OperatorInstance,
        domain: TimeDomain,
        upto: i64,
        counters: &SubtaskMetrics,
    ) -> Result<(), JobError> {
        loop {
            let due = operator
                .state_mut()
                .take_due_timers(domain, upto, TIMERS_PER_CALL)
                .map_err(|e| self.ctx.error(FailureKind::Timers, e.to_string()))?;
            if due.is_empty() {
                return Ok(());
            }
            counters.count_fired(due.len());
            let started = Instant::now();
            let out = operator.on_timers(domain, &due)?;
            counters.batch_latency.observe(started.elapsed());
            counters.count_out(&out);
            self.downstream.send(out)?;
        }
    }

    /// Fires the processing-time timers due now; returns when the next one is due.
    fn fire_processing_timers(
        &mut self,
        operator: &mut dyn OperatorInstance,
        counters: &SubtaskMetrics,
    ) -> Result<Option<Instant>, JobError> {
        let ctx = self.ctx.clone();
        let next = |operator: &mut dyn OperatorInstance| {
            operator
                .state_mut()
                .next_timer(TimeDomain::ProcessingTime)
                .map_err(|e| ctx.error(FailureKind::Timers, e.to_string()))
        };
        let Some(at) = next(operator)? else {
            return Ok(None);
        };
        let now = processing_time_now();
        if at <= now {
            self.fire_timers(operator, TimeDomain::ProcessingTime, now, counters)?;
        }
        Ok(next(operator)?.map(|at| {
            let wait = at.saturating_sub(processing_time_now()).max(0) as u64;
            Instant::now() + Duration::from_millis(wait)
        }))
    }

    /// Processes `batch`. A record the operator fails on fails the job, named, unless
    /// `on_error` sets it aside: then the failed call's state writes are taken back and the
    /// batch is processed again without it (DESIGN.md §10).
    fn process(
        &mut self,
        operator: &mut dyn OperatorInstance,
        mut batch: RecordBatch,
    ) -> Result<RecordBatch, JobError> {
        loop {
            let mut error = match operator.process(&mut batch) {
                Ok(out) => return Ok(out),
                Err(error) => error,
            };
            let index = error
                .record
                .map(|i| i as usize)
                .filter(|&i| i < batch.len() && error.kind == FailureKind::Returned);
            let Some(index) = index else {
                return Err(error.into());
            };
            let record = batch.get(index);
            let origin = batch.origin(index).map(|o| self.origin.describe(o));
            if self.on_error.fails() {
                error.on = Some(describe_record(record, origin.as_deref()));
                return Err(error.into());
            }
            operator
                .roll_back()
                .map_err(|e| self.ctx.error(FailureKind::Returned, e))?;
            let letter = DeadLetter {
                operator: Some(&self.ctx.operator.0),
                subtask: Some(self.ctx.subtask.0),
                error: &error.message,
                origin: origin.as_deref(),
                key: record.key,
                value: record.value,
                timestamp: record.timestamp,
            };
            self.on_error
                .set_aside(&letter, &mut self.downstream.letters);
            tracing::debug!(
                operator = %self.ctx.operator,
                subtask = self.ctx.subtask.0,
                record = %describe_record(record, origin.as_deref()),
                error = %error.message,
                "the operator failed on a record; set aside (on_error)"
            );
            batch = batch.without(index);
        }
    }

    fn snapshot(
        &mut self,
        operator: &mut dyn OperatorInstance,
        checkpoint: CheckpointId,
        report: BarrierReport,
    ) -> Result<(), JobError> {
        match &mut self.checkpoints {
            Some(checkpoints) => checkpoints.snapshot(operator.state_mut(), checkpoint, report),
            None => {
                let range = self.ctx.range;
                self.acks
                    .send(Ack::Subtask {
                        checkpoint,
                        operator: self.stage_index,
                        subtask: self.ctx.subtask.0,
                        result: Ok(crate::checkpoint::metadata::SubtaskHandle {
                            subtask: self.ctx.subtask.0,
                            key_groups: (range.start, range.end),
                            chain: Vec::new(),
                            live_bytes: 0,
                            watermark: report.watermark,
                            timers: 0,
                        }),
                        report,
                    })
                    .map_err(|_| JobError::Aborted)?;
            }
        }
        Ok(())
    }
}

/// The sink: writes the job's output and its dead letters, stages at barriers, commits on
/// completion.
struct SinkTask {
    outputs: Outputs,
    gate: InputGate,
    restored: Option<Arc<CheckpointMetadata>>,
    /// Opens once every subtask has restored its state: only then does the output roll back.
    latch: RestoreLatch,
    acks: UnboundedSender<Ack>,
    metrics: Arc<JobMetrics>,
}

impl SinkTask {
    fn run(mut self) -> Result<(), JobError> {
        if self.restored.is_some() && !self.latch.wait() {
            return Err(JobError::Aborted);
        }
        self.outputs.recover(self.restored.as_deref())?;
        let mut last: Option<CheckpointId> = None;
        loop {
            match self.gate.recv()? {
                Event::Batch(batch) => {
                    self.outputs.sink.write(&batch).map_err(JobError::Sink)?;
                    self.metrics
                        .sink_records
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
                Event::DeadLetters { file, batch } => {
                    if let Some((_, sink)) = self.outputs.dead_letters.get_mut(file) {
                        sink.write(&batch)
                            .map_err(|e| JobError::DeadLetters(e.to_string()))?;
                    }
                }
                Event::Barrier(barrier) => {
                    if barrier.last {
                        last = Some(barrier.checkpoint);
                    }
                    let timing = self.gate.barrier_timing();
                    self.stage(barrier.checkpoint, timing)?;
                }
                Event::Notification(Notification::Retake(checkpoint)) => {
                    self.stage(checkpoint, BarrierTiming::default())?;
                }
                Event::Notification(Notification::Complete { completed, .. }) => {
                    self.outputs.commit(completed)?;
                    if last.is_some_and(|l| completed >= l) {
                        return Ok(());
                    }
                }
                Event::Notification(Notification::Abort(_)) => {}
                Event::Watermark(_) | Event::Deadline => {}
            }
        }
    }

    /// Stages the output of `checkpoint`, whose barrier cost `timing` to arrive.
    fn stage(
        &mut self,
        checkpoint: CheckpointId,
        mut timing: BarrierTiming,
    ) -> Result<(), JobError> {
        let paused = Instant::now();
        let result = self.outputs.stage(checkpoint).map_err(|e| e.to_string());
        timing.sync_pause_us = paused.elapsed().as_micros() as u64;
        let report = BarrierReport {
            timing,
            counts: TaskCounts {
                records_in: self.metrics.sink_records.load(Ordering::Relaxed),
                ..TaskCounts::default()
            },
            watermark: None,
        };
        self.acks
            .send(Ack::Sink {
                checkpoint,
                result,
                report,
            })
            .map_err(|_| JobError::Aborted)
    }
}
