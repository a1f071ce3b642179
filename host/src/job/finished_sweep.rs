//! The run of a job that had finished before it was started again: nothing runs, but the
//! output of its last checkpoint is committed, and each subtask sweeps its orphans.
//!
//! A job finishes when its last checkpoint completes and its sink commits. A process killed
//! in between leaves that output staged, and artifacts that no retained checkpoint
//! references; restoring the finished checkpoint does only what was left (DESIGN.md §8.1,
//! §5.4).

use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::job_error::JobError;
use super::pipeline::{DeadLetterOutput, Stage};
use super::run_options::Checkpointing;
use super::sink_task::Outputs;
use crate::checkpoint::subtask_checkpoints::{
    RestoreAssignment, SubtaskCheckpoints, SubtaskIdentity,
};
use crate::checkpoint::{CheckpointError, CheckpointMetadata, JobStart};
use crate::connectors::Sink;
use crate::ids::SubtaskIndex;

/// Commits the output of `checkpoint`, the last of a job that had finished, and sweeps
/// what no retained checkpoint references.
pub(super) async fn finish(
    checkpoint: &Arc<CheckpointMetadata>,
    start: &JobStart,
    sink: Box<dyn Sink>,
    dead_letters: Vec<DeadLetterOutput>,
    checkpointing: Option<&Checkpointing>,
    stages: &[Stage],
    key_groups: crate::partition::KeyGroups,
) -> Result<(), JobError> {
    tracing::info!(
        checkpoint = checkpoint.id.0,
        "the job had finished; committing its output"
    );
    let mut outputs = Outputs::new(sink, dead_letters);
    // Sinks block (files, brokers): not on an async worker.
    let finished = checkpoint.clone();
    tokio::task::spawn_blocking(move || outputs.recover(Some(&finished)))
        .await
        .map_err(|e| JobError::Panicked {
            task: "the sink".into(),
            message: e.to_string(),
        })??;
    // A run killed after its last checkpoint completed may not have cleaned up: every
    // subtask still sweeps what no retained checkpoint references.
    if let Some(checkpointing) = checkpointing {
        let sweep = Sweep {
            checkpointing: checkpointing.clone(),
            stages: stages
                .iter()
                .map(|s| (s.uid.clone(), s.parallelism))
                .collect(),
            key_groups,
            assignment: RestoreAssignment {
                restored: None,
                retained: start.retained.clone(),
                // It completes no checkpoint, so deletes nothing that leaves retention.
                adopted: Vec::new(),
                detached: false,
                allow_dropped_state: Vec::new(),
            },
        };
        tokio::task::spawn_blocking(move || sweep.run())
            .await
            .map_err(|e| JobError::Panicked {
                task: "the sweep of the finished job's subtasks".into(),
                message: e.to_string(),
            })?
            .map_err(JobError::Checkpoint)?;
    }
    Ok(())
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
                    crate::ids::new_run_id().into(),
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
