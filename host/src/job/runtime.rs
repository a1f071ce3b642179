//! [`run`]: runs a [`Pipeline`] to the end of its input.
//!
//! Tasks: the source, the sink and every operator subtask each run as a blocking tokio task,
//! that is on a thread of their own. A subtask owns its operator instance and its state; Wasm
//! runs synchronously and is CPU-bound, and WASI's synchronous calls must not run on an async
//! worker thread (they block on the runtime), so subtasks never run on the async workers.
//! Tasks are connected by bounded channels of batches, so a slow stage holds back the ones
//! before it (backpressure) instead of buffering without bound.
//!
//! End of input is an explicit [`Message::End`], sent by every producer to every consumer
//! after its last batch. A consumer finishes only after it has seen `End` from each of its
//! producers; a channel that closes before that means a producer failed, and the consumer
//! aborts without finishing, so a failed run never commits partial output to its sink.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc::{self, Receiver, Sender};
use tokio::task::JoinSet;

use super::RunSummary;
use super::metrics::JobMetrics;
use super::pipeline::{Pipeline, Stage};
use super::progress::Progress;
use super::router::{RouteError, Router};
use crate::connectors::{ConnectorError, Sink, Source};
use crate::ids::{OperatorName, SubtaskIndex};
use crate::operator::{OperatorError, SubtaskContext};

use crate::record::RecordBatch;

/// Options for [`run`].
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Show a progress line on a terminal.
    pub progress: bool,
    /// Batches that may wait in each channel.
    pub channel_capacity: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            progress: false,
            channel_capacity: 8,
        }
    }
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
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error("a task of the job panicked: {0}")]
    Panicked(String),
    #[error("invalid pipeline: {0}")]
    Invalid(String),
    /// This task stopped because another one failed; never reported when the cause is known.
    #[error("the job was aborted because one of its tasks stopped")]
    Aborted,
}

/// What flows through a channel.
#[derive(Debug)]
pub enum Message {
    Batch(RecordBatch),
    /// The producer has sent its last batch.
    End,
}

/// Runs `pipeline` to the end of its input and returns what it did.
pub async fn run(pipeline: Pipeline, options: RunOptions) -> Result<RunSummary, JobError> {
    let Pipeline {
        name,
        key_groups,
        batch_size,
        source,
        stages,
        sink,
    } = pipeline;
    let job: Arc<str> = name.clone().into();
    let metrics = Arc::new(JobMetrics::new(
        stages.iter().map(|s| (s.name.as_str(), s.parallelism)),
    ));
    let started = Instant::now();
    let _progress = options
        .progress
        .then(|| Progress::start(metrics.clone(), source.progress()))
        .flatten();

    // One input channel per subtask, and one for the sink.
    let capacity = options.channel_capacity.max(1);
    let mut senders: Vec<Vec<Sender<Message>>> = Vec::new();
    let mut receivers: Vec<Vec<Receiver<Message>>> = Vec::new();
    for stage in &stages {
        let (tx, rx): (Vec<_>, Vec<_>) = (0..stage.parallelism)
            .map(|_| mpsc::channel(capacity))
            .unzip();
        senders.push(tx);
        receivers.push(rx);
    }
    let (sink_tx, sink_rx) = mpsc::channel(capacity);

    let Some(first) = stages.first() else {
        return Err(JobError::Invalid(
            "a pipeline needs at least one operator".into(),
        ));
    };
    let mut tasks = JoinSet::new();
    let source_router = Router::new(
        first.key_by.clone(),
        key_groups,
        first.parallelism,
        batch_size,
        "the source".into(),
        first.name.clone(),
    );
    let targets = senders[0].clone();
    let source_metrics = metrics.clone();
    tasks.spawn_blocking(move || {
        run_source(source, source_router, targets, batch_size, &source_metrics)
    });

    for (s, (stage, inputs)) in stages.iter().zip(receivers).enumerate() {
        let upstream = if s == 0 { 1 } else { stages[s - 1].parallelism };
        let next = stages.get(s + 1);
        for (i, input) in inputs.into_iter().enumerate() {
            let subtask = SubtaskIndex(i as u32);
            let ctx = SubtaskContext {
                job: job.clone(),
                operator: OperatorName(stage.name.clone()),
                subtask,
                parallelism: stage.parallelism,
                key_groups,
                range: key_groups.range_of(subtask, stage.parallelism),
                config_json: stage.config_json.clone(),
                limits: stage.limits,
            };
            let from = format!("operator `{}` subtask {i}", stage.name);
            let (router, targets) = match next {
                Some(next) => (
                    Router::new(
                        next.key_by.clone(),
                        key_groups,
                        next.parallelism,
                        batch_size,
                        from,
                        next.name.clone(),
                    ),
                    senders[s + 1].clone(),
                ),
                None => (
                    Router::new(None, key_groups, 1, batch_size, from, "the sink".into()),
                    vec![sink_tx.clone()],
                ),
            };
            let task = SubtaskTask {
                stage: stage.clone(),
                ctx,
                input,
                upstream,
                router,
                targets,
                metrics: metrics.clone(),
                stage_index: s,
            };
            tasks.spawn_blocking(move || task.run());
        }
    }
    let sink_upstream = stages.last().map_or(1, |s| s.parallelism);
    drop(senders);
    drop(sink_tx);
    let sink_metrics = metrics.clone();
    tasks.spawn_blocking(move || run_sink(sink, sink_rx, sink_upstream, &sink_metrics));

    let mut failure: Option<JobError> = None;
    while let Some(joined) = tasks.join_next().await {
        let result = joined.unwrap_or_else(|e| Err(JobError::Panicked(e.to_string())));
        if let Err(e) = result {
            // Keep the first real cause; `Aborted` only echoes it.
            if failure
                .as_ref()
                .is_none_or(|f| matches!(f, JobError::Aborted))
            {
                failure = Some(e);
            }
        }
    }
    let summary = metrics.summary(&name, started.elapsed());
    match failure {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

fn run_source(
    mut source: Box<dyn Source>,
    mut router: Router,
    targets: Vec<Sender<Message>>,
    batch_size: usize,
    metrics: &JobMetrics,
) -> Result<(), JobError> {
    loop {
        let mut batch = RecordBatch::with_capacity(batch_size, batch_size * 32);
        let more = source
            .read_batch(batch_size, &mut batch)
            .map_err(JobError::Source)?;
        metrics
            .source_records
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        router.route(batch)?;
        send_ready(&mut router, &targets)?;
        if !more {
            break;
        }
    }
    for target in &targets {
        target
            .blocking_send(Message::End)
            .map_err(|_| JobError::Aborted)?;
    }
    Ok(())
}

fn run_sink(
    mut sink: Box<dyn Sink>,
    mut input: Receiver<Message>,
    upstream: u32,
    metrics: &JobMetrics,
) -> Result<(), JobError> {
    let mut ended = 0;
    while ended < upstream {
        match input.blocking_recv() {
            Some(Message::Batch(batch)) => {
                sink.write(&batch).map_err(JobError::Sink)?;
                metrics
                    .sink_records
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            Some(Message::End) => ended += 1,
            None => return Err(JobError::Aborted),
        }
    }
    sink.finish().map_err(JobError::Sink)
}

/// One operator subtask: its instance, its input and its routing to the next stage.
struct SubtaskTask {
    stage: Stage,
    ctx: SubtaskContext,
    input: Receiver<Message>,
    /// Producers that must each send `End` before the input is complete.
    upstream: u32,
    router: Router,
    targets: Vec<Sender<Message>>,
    metrics: Arc<JobMetrics>,
    stage_index: usize,
}

impl SubtaskTask {
    fn run(mut self) -> Result<(), JobError> {
        let mut operator = self.stage.factory.instantiate(&self.ctx)?;
        let counters = &self.metrics.operators[self.stage_index];
        let i = self.ctx.subtask.0 as usize;
        let mut ended = 0;
        while ended < self.upstream {
            match self.input.blocking_recv() {
                Some(Message::Batch(batch)) => {
                    counters.records_in[i].fetch_add(batch.len() as u64, Ordering::Relaxed);
                    let out = operator.process(batch)?;
                    counters.records_out[i].fetch_add(out.len() as u64, Ordering::Relaxed);
                    self.router.route(out)?;
                    send_ready(&mut self.router, &self.targets)?;
                }
                Some(Message::End) => ended += 1,
                None => return Err(JobError::Aborted),
            }
        }
        let out = operator.close()?;
        counters.records_out[i].fetch_add(out.len() as u64, Ordering::Relaxed);
        self.router.route(out)?;
        send_ready(&mut self.router, &self.targets)?;
        for target in &self.targets {
            target
                .blocking_send(Message::End)
                .map_err(|_| JobError::Aborted)?;
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
}

fn send_ready(router: &mut Router, targets: &[Sender<Message>]) -> Result<(), JobError> {
    for (target, batch) in router.drain() {
        targets[target]
            .blocking_send(Message::Batch(batch))
            .map_err(|_| JobError::Aborted)?;
    }
    Ok(())
}
