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

use std::sync::Arc;
use std::time::Instant;

use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::RunSummary;
use super::bad_records::{BadRecordCounters, BadRecordPolicy, DeadLetters};
use super::downstream::Downstream;
use super::finished_sweep;
use super::in_flight::{self, Input, Output};
use super::input_gate::InputGate;
use super::metrics::JobMetrics;
use super::pipeline::Pipeline;
use super::progress::Progress;
use super::restore_latch::RestoreLatch;
use super::router::Router;
use super::sink_task::{Outputs, SinkTask};
use super::source_task::SourceTask;
use super::spec::RecordPolicy;
use super::subtask_task::SubtaskTask;
use super::watermarks::WatermarkGenerator;
use crate::checkpoint::actor::{Actor, acting};
use crate::checkpoint::coordinator::{Coordinator, CoordinatorSetup};
use crate::checkpoint::subtask_checkpoints::{SubtaskCheckpoints, SubtaskIdentity};
use crate::checkpoint::{CheckpointMetadata, JobStart};
use crate::ids::{OperatorName, SubtaskIndex};
use crate::operator::SubtaskContext;

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
        finished_sweep::finish(
            checkpoint,
            &start,
            sink,
            dead_letters,
            checkpointing.as_ref(),
            &stages,
            key_groups,
        )
        .await?;
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
    let run_id: Arc<str> = crate::ids::new_run_id().into();
    let assignment = start.assignment();
    let latch = RestoreLatch::new(
        stages.iter().map(|s| s.parallelism as usize).sum(),
        options.started.clone(),
    );

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
        )
        .counting_blocked_time(&metrics.source_backpressured_us),
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
            )
            .counting_blocked_time(&metrics.operators[s].subtasks[i].backpressured_us);
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
