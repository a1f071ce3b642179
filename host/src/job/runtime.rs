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
//!
//! This file wires a run: it makes the channels between tasks, starts the tasks
//! (`job::source_task`, `job::subtask_task`, `job::sink_task`) and the coordinator, and
//! reports the first real failure among them. A job that had finished only commits and
//! sweeps (`job::finished_sweep`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use super::RunSummary;
use super::bad_records::{BadRecordCounters, BadRecordPolicy, DeadLetters};
use super::downstream::Downstream;
use super::finished_sweep;
use super::in_flight::{self, Input, Output};
use super::input_gate::InputGate;
use super::metrics::JobMetrics;
use super::pipeline::{DeadLetterOutput, Pipeline, Stage};
use super::progress::Progress;
use super::restore_latch::RestoreLatch;
use super::router::Router;
use super::sink_task::{Outputs, SinkTask};
use super::source_task::SourceTask;
use super::spec::RecordPolicy;
use super::subtask_task::SubtaskTask;
use super::watermarks::{WatermarkGenerator, WatermarkPolicy};
use crate::checkpoint::actor::{Actor, acting};
use crate::checkpoint::coordinator::{Coordinator, CoordinatorSetup};
use crate::checkpoint::lease::LeaseCheck;
use crate::checkpoint::protocol::{Ack, Barrier, Notification};
use crate::checkpoint::subtask_checkpoints::{
    RestoreAssignment, SubtaskCheckpoints, SubtaskIdentity,
};
use crate::checkpoint::{CheckpointError, CheckpointMetadata, JobStart};
use crate::connectors::{Sink, Source, SourceOrigin};
use crate::ids::{OperatorName, SubtaskIndex};
use crate::operator::SubtaskContext;
use crate::partition::{KeyGroupRange, KeyGroups};

pub use super::job_error::JobError;
pub use super::run_options::{
    CheckpointRequest, Checkpointing, InFlight, RunOptions, StartedSignal, StopSignal,
};

/// Runs `pipeline` from `start` to the end of its input and returns what it did.
pub async fn run(
    pipeline: Pipeline,
    start: JobStart,
    options: RunOptions,
) -> Result<RunSummary, JobError> {
    let started = Instant::now();
    let metrics = options.metrics.clone().unwrap_or_else(|| {
        Arc::new(JobMetrics::new(
            pipeline
                .stages
                .iter()
                .map(|s| (s.name.as_str(), s.parallelism)),
        ))
    });
    let uids: Vec<&str> = pipeline.stages.iter().map(|s| s.uid.as_str()).collect();
    metrics.start_from(start.restored.as_deref(), &uids);
    if let Some(checkpoint) = start.restored.as_ref().filter(|m| m.finished) {
        // The job had finished: only its last output may still need committing.
        let name = pipeline.name.clone();
        finish_finished(pipeline, checkpoint, &start).await?;
        return Ok(metrics.summary(&name, started.elapsed()));
    }
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
        leases,
    } = pipeline;
    if let Some(checkpoint) = &start.restored {
        tracing::info!(checkpoint = checkpoint.id.0, "restoring");
        source.seek(&checkpoint.source).map_err(JobError::Source)?;
    }
    let _progress = options
        .progress
        .then(|| Progress::start(metrics.clone(), source.progress()))
        .flatten();

    let mut launch = Launch::new(
        Shape {
            name: &name,
            key_groups,
            batch_size,
            stages: &stages,
            checkpointing: checkpointing.as_ref(),
        },
        &dead_letters,
        source.origin(),
        &start,
        &options,
        metrics.clone(),
    );
    launch.spawn_source(source, &source_on_bad_record, watermarks);
    for stage in 0..stages.len() {
        launch.spawn_subtasks(stage);
    }
    launch.spawn_sink(sink, dead_letters);
    let result = launch.spawn_coordinator(leases).join().await;
    let summary = metrics.summary(&name, started.elapsed());
    result.map(|()| summary)
}

/// Commits what a finished job's last checkpoint covers and sweeps what no retained
/// checkpoint references (`job::finished_sweep`).
async fn finish_finished(
    pipeline: Pipeline,
    checkpoint: &Arc<CheckpointMetadata>,
    start: &JobStart,
) -> Result<(), JobError> {
    let Pipeline {
        key_groups,
        sink,
        dead_letters,
        checkpointing,
        stages,
        ..
    } = pipeline;
    finished_sweep::finish(
        checkpoint,
        start,
        sink,
        dead_letters,
        checkpointing.as_ref(),
        &stages,
        key_groups,
    )
    .await
}

/// What a run's wiring reads of its pipeline.
#[derive(Clone, Copy)]
struct Shape<'a> {
    name: &'a str,
    key_groups: KeyGroups,
    batch_size: usize,
    stages: &'a [Stage],
    checkpointing: Option<&'a Checkpointing>,
}

/// A run being wired: the channels between its tasks, made up front, handed out as each
/// task is started, and the tasks started so far.
struct Launch<'a> {
    shape: Shape<'a>,
    start: &'a JobStart,
    options: &'a RunOptions,
    metrics: Arc<JobMetrics>,
    /// `edges[s]` connects the producers of stage `s` (the source for 0) to its subtasks;
    /// the last entry connects the last stage to the sink. Each task takes its ends.
    edges: Vec<Edge>,
    /// One per task in start order (source, subtasks, sink): its channel for dead letters.
    letters: std::vec::IntoIter<DeadLetters>,
    /// The sink's ends of those channels.
    letter_inputs: Vec<Input>,
    /// Where dead letters go, in the order of `Outputs`' dead-letter outputs.
    targets: Vec<RecordPolicy>,
    origin: SourceOrigin,
    /// How long the records queued in front of a consumer may take (`InFlight`).
    target: Option<std::time::Duration>,
    /// Barriers to the source, from the coordinator.
    triggers: Option<std::sync::mpsc::Receiver<Barrier>>,
    trigger_tx: std::sync::mpsc::Sender<Barrier>,
    /// What each subtask restores, from the checkpoint the run starts from.
    assignment: RestoreAssignment,
    /// Every task's acknowledgements, to the coordinator.
    ack_tx: mpsc::UnboundedSender<Ack>,
    ack_rx: mpsc::UnboundedReceiver<Ack>,
    /// The coordinator's notifications, one channel per task in start order.
    notify: Vec<mpsc::UnboundedSender<Notification>>,
    run_id: Arc<str>,
    /// Raised when every subtask has opened and restored; the sink waits on it (and takes it).
    latch: Option<RestoreLatch>,
    tasks: Tasks,
}

impl<'a> Launch<'a> {
    /// Makes every channel of the run.
    fn new(
        shape: Shape<'a>,
        dead_letters: &[DeadLetterOutput],
        origin: SourceOrigin,
        start: &'a JobStart,
        options: &'a RunOptions,
        metrics: Arc<JobMetrics>,
    ) -> Self {
        let stages = shape.stages;
        let capacity = options.channel_capacity.max(1);
        let mut consumer_counts: Vec<u32> = stages.iter().map(|s| s.parallelism).collect();
        consumer_counts.push(1);
        let mut producer_counts = vec![1];
        producer_counts.extend(stages.iter().map(|s| s.parallelism));
        let edges: Vec<Edge> = consumer_counts
            .iter()
            .zip(&producer_counts)
            .map(|(&consumers, &producers)| {
                Edge::new(producers, consumers, capacity, shape.batch_size)
            })
            .collect();

        // With dead-letter outputs, every task has one more channel, to the sink.
        let tasks_count = 1 + stages.iter().map(|s| s.parallelism as usize).sum::<usize>();
        let (letters, letter_inputs): (Vec<DeadLetters>, Vec<Input>) = if dead_letters.is_empty() {
            let none = (0..tasks_count).map(|_| DeadLetters::default()).collect();
            (none, Vec::new())
        } else {
            (0..tasks_count)
                .map(|_| {
                    let (tx, rx) = in_flight::channel(capacity, shape.batch_size);
                    (DeadLetters::new(tx, dead_letters.len()), rx)
                })
                .unzip()
        };
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        let (trigger_tx, triggers) = std::sync::mpsc::channel();
        let latch = RestoreLatch::new(
            stages.iter().map(|s| s.parallelism as usize).sum(),
            options.started.clone(),
        );
        Self {
            target: options.in_flight.target(shape.checkpointing, stages.len()),
            targets: dead_letters.iter().map(|d| d.target.clone()).collect(),
            shape,
            start,
            options,
            metrics,
            edges,
            letters: letters.into_iter(),
            letter_inputs,
            origin,
            triggers: Some(triggers),
            trigger_tx,
            ack_tx,
            ack_rx,
            notify: Vec::new(),
            run_id: crate::ids::new_run_id().into(),
            assignment: start.assignment(
                &shape
                    .stages
                    .iter()
                    .map(|s| s.uid.as_str())
                    .collect::<Vec<_>>(),
                &options.allow_dropped_state,
            ),
            latch: Some(latch),
            tasks: Tasks::new(shape.name),
        }
    }

    fn policy(&self, policy: &RecordPolicy, counters: &Arc<BadRecordCounters>) -> BadRecordPolicy {
        BadRecordPolicy::new(policy, &self.targets, counters.clone())
    }

    /// A channel for the coordinator's notifications to the next task started.
    fn notifications(&mut self) -> mpsc::UnboundedReceiver<Notification> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.notify.push(tx);
        rx
    }

    /// Starts the source, routing to the first stage, or straight to the sink in a pipeline
    /// of no operator (a stage of a Kafka job that only re-partitions its input).
    fn spawn_source(
        &mut self,
        source: Box<dyn Source>,
        on_bad_record: &RecordPolicy,
        watermarks: Option<WatermarkPolicy>,
    ) {
        let Shape {
            key_groups,
            batch_size,
            stages,
            ..
        } = self.shape;
        let metrics = self.metrics.clone();
        let (key_by, targets, next, next_policy) = match stages.first() {
            Some(first) => (
                first.key_by.clone(),
                first.parallelism,
                first.name.clone(),
                self.policy(&first.on_bad_record, &metrics.operators[0].bad_records),
            ),
            None => (
                None,
                1,
                "the sink".to_owned(),
                self.policy(&RecordPolicy::Fail, &metrics.source_bad_records),
            ),
        };
        let notifications = self.notifications();
        let source_task = SourceTask {
            notifications,
            acked: std::collections::VecDeque::new(),
            retained: Default::default(),
            bad_lines: self.policy(on_bad_record, &metrics.source_bad_records),
            origin: self.origin.clone(),
            rejected: Vec::new(),
            source,
            downstream: Downstream::new(
                Router::new(
                    key_by,
                    key_groups,
                    targets,
                    batch_size,
                    "the source".into(),
                    next.clone(),
                ),
                self.edges[0].senders.remove(0),
                next_policy,
                next,
                self.origin.clone(),
                self.letters.next().unwrap_or_default(),
            )
            .counting_blocked_time(&metrics.source_backpressured_us),
            batch_size,
            triggers: self.triggers.take().expect("one source"),
            acks: self.ack_tx.clone(),
            metrics: metrics.clone(),
            stop: self.options.stop.clone(),
            watermarks: WatermarkGenerator::new(
                watermarks,
                self.start
                    .restored
                    .as_ref()
                    .and_then(|m| m.source_max_timestamp),
            ),
            carried: None,
        };
        self.tasks
            .spawn("the source".into(), move || source_task.run());
    }

    /// Starts the subtasks of stage `s`, each routing to the next stage or the sink.
    fn spawn_subtasks(&mut self, s: usize) {
        let Shape {
            name,
            key_groups,
            batch_size,
            stages,
            ..
        } = self.shape;
        let stage = &stages[s];
        let metrics = self.metrics.clone();
        let inputs = std::mem::take(&mut self.edges[s].receivers);
        for (i, input) in inputs.into_iter().enumerate() {
            let subtask = SubtaskIndex(i as u32);
            let ctx = SubtaskContext {
                job: name.into(),
                operator: OperatorName(stage.name.clone()),
                subtask,
                parallelism: stage.parallelism,
                key_groups,
                range: key_groups.range_of(subtask, stage.parallelism),
                config_json: stage.config_json.clone(),
                limits: stage.limits,
                guest_log: self.options.guest_log.clone(),
                first_checkpoint: self.start.next_checkpoint,
            };
            let downstream = self.downstream_of(s, i);
            let notifications = self.notifications();
            let checkpoints = self.subtask_checkpoints(s, subtask, ctx.range);
            let restored_watermark =
                restored_watermark(self.start.restored.as_deref(), s, ctx.range);
            let task = SubtaskTask {
                stage: stage.clone(),
                stage_index: s,
                ctx,
                gate: InputGate::new(input, notifications, self.target, batch_size)
                    .restoring_watermark(restored_watermark),
                downstream,
                on_error: self.policy(&stage.on_error, &metrics.operators[s].bad_records),
                origin: self.origin.clone(),
                checkpoints,
                assignment: self.assignment.clone(),
                restoring: self.latch.as_ref().expect("the sink starts last").part(),
                acks: self.ack_tx.clone(),
                metrics: metrics.clone(),
            };
            let name = format!("operator `{}` subtask {i}", stage.name);
            self.tasks.spawn(name, move || task.run());
        }
    }

    /// Where subtask `i` of stage `s` sends its output: routed to the next stage's subtasks
    /// by its key (records it cannot key handled as that stage's `on_bad_record` says), or to
    /// the sink.
    fn downstream_of(&mut self, s: usize, i: usize) -> Downstream {
        let Shape {
            key_groups,
            batch_size,
            stages,
            ..
        } = self.shape;
        let stage = &stages[s];
        let metrics = self.metrics.clone();
        let from = format!("operator `{}` subtask {i}", stage.name);
        let (router, unroutable, next_name) = match stages.get(s + 1) {
            Some(next) => (
                Router::new(
                    next.key_by.clone(),
                    key_groups,
                    next.parallelism,
                    batch_size,
                    from,
                    next.name.clone(),
                ),
                self.policy(&next.on_bad_record, &metrics.operators[s + 1].bad_records),
                next.name.clone(),
            ),
            None => (
                Router::new(None, key_groups, 1, batch_size, from, "the sink".into()),
                BadRecordPolicy::fail(),
                "the sink".into(),
            ),
        };
        Downstream::new(
            router,
            self.edges[s + 1].senders.remove(0),
            unroutable,
            next_name,
            self.origin.clone(),
            self.letters.next().unwrap_or_default(),
        )
        .counting_blocked_time(&metrics.operators[s].subtasks[i].backpressured_us)
    }

    /// The checkpoints of `subtask` of stage `s`, owning `range`; `None` when the job does
    /// not checkpoint.
    fn subtask_checkpoints(
        &self,
        s: usize,
        subtask: SubtaskIndex,
        range: KeyGroupRange,
    ) -> Option<SubtaskCheckpoints> {
        let Shape {
            key_groups,
            stages,
            checkpointing,
            ..
        } = self.shape;
        let stage = &stages[s];
        let c = checkpointing?;
        let mut checkpoints = SubtaskCheckpoints::new(
            c.store.clone(),
            Handle::current(),
            self.ack_tx.clone(),
            SubtaskIdentity {
                operator: stage.uid.clone(),
                operator_index: s,
                subtask,
                parallelism: stage.parallelism,
                key_groups,
                range,
            },
            self.run_id.clone(),
            c.chains,
        );
        checkpoints.count_into(
            self.metrics.operators[s].subtasks[subtask.0 as usize]
                .snapshots
                .clone(),
        );
        checkpoints.upload_within(c.timeout);
        Some(checkpoints)
    }

    /// Starts the sink, which takes the last stage's output and every dead letter.
    fn spawn_sink(&mut self, sink: Box<dyn Sink>, dead_letters: Vec<DeadLetterOutput>) {
        let notifications = self.notifications();
        let last = self.shape.stages.len();
        let inputs = std::mem::take(&mut self.edges[last].receivers).remove(0);
        let sink_task = SinkTask {
            outputs: Outputs::new(sink, dead_letters),
            gate: InputGate::new(inputs, notifications, self.target, self.shape.batch_size)
                .with_dead_letters(std::mem::take(&mut self.letter_inputs)),
            restored: self.start.restored.clone(),
            latch: self.latch.take().expect("one sink"),
            acks: self.ack_tx.clone(),
            metrics: self.metrics.clone(),
        };
        self.tasks.spawn("the sink".into(), move || sink_task.run());
    }

    /// Starts the coordinator with the channels to and from every task; what is left of the
    /// wiring goes, so that the acknowledgements end when the last task does.
    fn spawn_coordinator(self, leases: Vec<LeaseCheck>) -> Running {
        let Launch {
            shape,
            start,
            options,
            metrics,
            trigger_tx,
            ack_rx,
            notify,
            tasks,
            ..
        } = self;
        let checkpointing = shape.checkpointing;
        let coordinator = Coordinator::new(
            CoordinatorSetup {
                job: shape.name.to_owned(),
                key_groups: shape.key_groups.count(),
                operators: shape
                    .stages
                    .iter()
                    .map(|s| (s.uid.clone(), s.parallelism))
                    .collect(),
                components: shape.stages.iter().map(|s| s.component.clone()).collect(),
                store: checkpointing.map(|c| c.store.clone()),
                interval: checkpointing.map(|c| c.interval),
                timeout: checkpointing.map(|c| c.timeout),
                retain: checkpointing.map_or(1, |c| c.retain),
                tolerable_failures: checkpointing.map_or(0, |c| c.tolerable_failures),
                next: start.next_checkpoint,
                retained: start.retained.iter().map(|m| m.id).collect(),
                subtasks: metrics
                    .operators
                    .iter()
                    .flat_map(|o| &o.subtasks)
                    .map(|s| s.snapshots.clone())
                    .collect(),
                leases,
            },
            trigger_tx,
            ack_rx,
            notify,
            metrics.checkpoints.clone(),
            options.checkpoint_now.0.clone(),
        );
        Running {
            tasks,
            coordinator: tokio::spawn(acting(Actor::Coordinator, coordinator.run())),
        }
    }
}

/// A run's tasks, each on a thread of its own, with their names for a panic's report.
struct Tasks {
    job: String,
    set: JoinSet<Result<(), JobError>>,
    names: HashMap<tokio::task::Id, String>,
}

impl Tasks {
    fn new(job: &str) -> Self {
        Self {
            job: job.to_owned(),
            set: JoinSet::new(),
            names: HashMap::new(),
        }
    }

    /// Starts `task` on a thread of its own, its life (start, end, failure) in a span at
    /// debug level.
    fn spawn(
        &mut self,
        name: String,
        task: impl FnOnce() -> Result<(), JobError> + Send + 'static,
    ) {
        let span = tracing::debug_span!("task", job = %self.job, task = %name);
        let handle = self.set.spawn_blocking(move || {
            let _entered = span.enter();
            tracing::debug!("started");
            let result = task();
            match &result {
                Ok(()) => tracing::debug!("ended"),
                Err(e) => tracing::debug!(error = %e, "ended"),
            }
            result
        });
        self.names.insert(handle.id(), name);
    }

    /// The next task to end, with its result; `None` once all have.
    async fn next(&mut self) -> Option<Result<(), JobError>> {
        Some(match self.set.join_next_with_id().await? {
            Ok((_, result)) => result,
            Err(e) => Err(JobError::Panicked {
                task: self.names.get(&e.id()).cloned().unwrap_or_default(),
                message: e.to_string(),
            }),
        })
    }
}

/// A run's tasks and its coordinator, started.
struct Running {
    tasks: Tasks,
    coordinator: JoinHandle<Result<(), CheckpointError>>,
}

impl Running {
    /// Waits for every task and the coordinator; the first real failure among them, if any.
    async fn join(mut self) -> Result<(), JobError> {
        let stop_coordinator = self.coordinator.abort_handle();
        let mut failure: Option<JobError> = None;
        let mut note = |result: Result<(), JobError>| {
            if let Err(e) = result {
                // Keep the first real cause; `Aborted` only echoes it.
                if failure
                    .as_ref()
                    .is_none_or(|f| matches!(f, JobError::Aborted))
                {
                    failure = Some(e);
                }
                // Tasks waiting for notifications stop when the coordinator is gone.
                stop_coordinator.abort();
            }
        };
        while let Some(result) = self.tasks.next().await {
            note(result);
        }
        note(match self.coordinator.await {
            Ok(result) => result.map_err(JobError::Checkpoint),
            Err(e) if e.is_cancelled() => Err(JobError::Aborted),
            Err(e) => Err(JobError::Panicked {
                task: "the coordinator".into(),
                message: e.to_string(),
            }),
        });
        failure.map_or(Ok(()), Err)
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
