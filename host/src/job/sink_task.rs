//! [`SinkTask`]: the task that writes the job's output, and [`Outputs`], what it writes to.
//!
//! The sink task writes the last stage's batches to the job's sink and the dead letters every
//! task sends it to their files or topics (`job::bad_records`). At each barrier it stages all
//! of them, and it commits them together when the checkpoint completes, so that the job's
//! output and its dead letters are exactly once across restores (DESIGN.md §6). After a
//! restore it rolls them back to the restored checkpoint, but only once every subtask has
//! restored its state (`job::restore_latch`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::input_gate::{Event, InputGate};
use super::job_error::JobError;
use super::metrics::JobMetrics;
use super::pipeline::DeadLetterOutput;
use super::restore_latch::RestoreLatch;
use super::watermarks::WatermarkChange;
use crate::checkpoint::CheckpointMetadata;
use crate::checkpoint::metadata::{BarrierTiming, TaskCounts};
use crate::checkpoint::protocol::{Ack, BarrierReport, Notification, StagedOutput};
use crate::connectors::{ConnectorError, Sink, SinkRestore};
use crate::ids::CheckpointId;

/// The sink: writes the job's output and its dead letters, stages at barriers, commits on
/// completion.
pub(super) struct SinkTask {
    pub(super) outputs: Outputs,
    pub(super) gate: InputGate,
    pub(super) restored: Option<Arc<CheckpointMetadata>>,
    /// Opens once every subtask has restored its state: only then does the output roll back.
    pub(super) latch: RestoreLatch,
    /// Acknowledgements to the coordinator: staged output per barrier.
    pub(super) acks: UnboundedSender<Ack>,
    pub(super) metrics: Arc<JobMetrics>,
}

impl SinkTask {
    pub(super) fn run(mut self) -> Result<(), JobError> {
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
                    if let Some((output, sink)) = self.outputs.dead_letters.get_mut(file) {
                        sink.write(&batch).map_err(|source| JobError::DeadLetters {
                            output: output.clone(),
                            source: Box::new(source),
                        })?;
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
                Event::Watermark(WatermarkChange::Advanced(at)) => {
                    self.outputs.sink.watermark(at);
                }
                Event::Watermark(WatermarkChange::Idle) => self.outputs.sink.idle(true),
                Event::Watermark(WatermarkChange::Active) => self.outputs.sink.idle(false),
                Event::Deadline => {}
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
            ..BarrierReport::default()
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

/// Everything a job writes: its sink and its dead-letter files and topics, staged, committed
/// and recovered together.
pub(super) struct Outputs {
    sink: Box<dyn Sink>,
    /// Each dead-letter file or topic with its sink, by the name its checkpoints record it
    /// under, in the order of [`Pipeline::dead_letters`].
    dead_letters: Vec<(String, Box<dyn Sink>)>,
}

impl Outputs {
    pub(super) fn new(sink: Box<dyn Sink>, dead_letters: Vec<DeadLetterOutput>) -> Self {
        let dead_letters = dead_letters.into_iter().map(|d| (d.name, d.sink)).collect();
        Self { sink, dead_letters }
    }

    pub(super) fn recover(
        &mut self,
        restored: Option<&CheckpointMetadata>,
    ) -> Result<(), JobError> {
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
            .map_err(|source| JobError::DeadLetters {
                output: path.clone(),
                source: Box::new(source),
            })?;
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
        for (output, sink) in &mut self.dead_letters {
            sink.commit(checkpoint)
                .map_err(|source| JobError::DeadLetters {
                    output: output.clone(),
                    source: Box::new(source),
                })?;
        }
        Ok(())
    }
}
