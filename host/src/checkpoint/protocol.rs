//! The messages between the coordinator and the job's tasks (DESIGN.md §1, §5).
//!
//! They are plain values sent over channels, even inside one process, so that running tasks
//! in other processes would change the transport and not the protocol:
//!
//! - the coordinator asks the source for a checkpoint ([`Barrier`] on the source's trigger
//!   channel); the source records its position and sends the barrier down every edge;
//! - a task with several inputs aligns the barrier (waits until it came on every input), takes
//!   its snapshot and forwards it; the sink stages its output;
//! - every task acknowledges ([`Ack`]); subtasks with their handle once their artifacts are
//!   uploaded; each with a [`BarrierReport`]: how long the barrier waited in queues to reach
//!   it (start delay, from the trigger time it carries) and for its other inputs
//!   (alignment), how long the task paused, and its record counters as the barrier passed;
//! - the coordinator writes the metadata and tells every task ([`Notification`]).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::{SinkPosition, SourcePosition};
use crate::ids::CheckpointId;

use super::error::CheckpointError;
use super::metadata::{BarrierTiming, SubtaskHandle, TaskCounts};

/// A checkpoint's barrier. Every record before it on a channel belongs to the checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Barrier {
    pub checkpoint: CheckpointId,
    /// The source has ended: nothing follows this barrier, and operators close before they
    /// snapshot, so the checkpoint holds the job's final state and output.
    pub last: bool,
    /// When the coordinator triggered the checkpoint, by the wall clock (the one clock tasks
    /// in other processes would share): a task measures its start delay from it.
    pub triggered_at: SystemTime,
}

impl Barrier {
    /// The barrier of `checkpoint`, triggered now.
    pub fn new(checkpoint: CheckpointId, last: bool) -> Self {
        Self {
            checkpoint,
            last,
            triggered_at: SystemTime::now(),
        }
    }

    /// How long ago the checkpoint was triggered (zero if the clock went back).
    pub fn age(&self) -> Duration {
        self.triggered_at.elapsed().unwrap_or_default()
    }
}

/// What a task reports of a barrier that passed it, besides its state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BarrierReport {
    pub timing: BarrierTiming,
    /// The task's counters as they stood when the barrier passed: a restore continues them.
    pub counts: TaskCounts,
    /// A subtask's watermark as the barrier passed.
    pub watermark: Option<i64>,
    /// The entries a subtask's snapshot wrote (keys changed, and entries re-written).
    pub entries: u64,
}

/// A task's acknowledgement of a checkpoint, or the source's report that it has ended.
#[derive(Debug)]
pub enum Ack {
    /// The source sent the barrier; it resumes from `position`, having read `records`.
    Source {
        checkpoint: CheckpointId,
        position: SourcePosition,
        records: u64,
        /// The latest event time read, from which watermarks resume.
        max_timestamp: Option<i64>,
    },
    /// The source has read all its input and waits for the last checkpoint.
    SourceEnded,
    /// A subtask snapshotted and uploaded its state, or could not.
    Subtask {
        checkpoint: CheckpointId,
        operator: usize,
        subtask: u32,
        result: Result<SubtaskHandle, CheckpointError>,
        report: BarrierReport,
    },
    /// The sink staged its output (and says what the checkpoint records of it), or could not.
    /// Its report counts the records it wrote in `records_in`.
    Sink {
        checkpoint: CheckpointId,
        result: Result<StagedOutput, String>,
        report: BarrierReport,
    },
}

/// What the sink staged for a checkpoint: what the checkpoint records of the job's output and
/// of each dead-letter file (by path).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StagedOutput {
    pub sink: Option<SinkPosition>,
    pub dead_letters: BTreeMap<String, SinkPosition>,
}

/// What the coordinator tells the subtasks and the sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notification {
    /// `completed` is complete; every checkpoint before `earliest_retained` is gone.
    Complete {
        completed: CheckpointId,
        earliest_retained: CheckpointId,
    },
    /// The checkpoint failed; its artifacts stay with their owners, as a later increment may
    /// build on them.
    Abort(CheckpointId),
    /// After the last barrier, when the last checkpoint failed: take the checkpoint again
    /// without a barrier (every task is idle, so no record can be on the way).
    Retake(CheckpointId),
}
