//! [`CheckpointMetadata`]: the object whose presence makes a checkpoint complete.
//!
//! The coordinator writes it last, in one `put` (atomic on every `object_store` backend), once
//! every task has acknowledged. It holds the whole picture a restore needs: the source's
//! position and, for every subtask, its handle, the ordered chain of artifacts that rebuild its
//! state, each with its single owner. It is JSON, so that a person can read it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::connectors::{SinkPosition, SourcePosition};
use crate::ids::CheckpointId;
use crate::partition::KeyGroupRange;

/// The version of the metadata layout; a reader refuses others.
pub const METADATA_VERSION: u32 = 1;

/// A completed checkpoint of a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub version: u32,
    pub job: String,
    pub id: CheckpointId,
    /// When the checkpoint completed, in milliseconds since the Unix epoch.
    pub completed_at_ms: u64,
    /// The job's input had ended: the checkpoint holds the final state, and restoring it only
    /// commits the output it covers.
    pub finished: bool,
    /// The job's number of key groups, fixed for its lifetime.
    pub key_groups: u32,
    /// Where the source resumes.
    pub source: SourcePosition,
    /// What the sink's output holds once this checkpoint is committed (file sink: its length);
    /// a restore checks it. Absent for sinks that record nothing, and in checkpoints written
    /// before sinks recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<SinkPosition>,
    /// The same for each dead-letter file, by path.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dead_letters: BTreeMap<String, SinkPosition>,
    pub operators: Vec<OperatorHandles>,
}

/// The handles of one operator's subtasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorHandles {
    pub name: String,
    pub parallelism: u32,
    /// One per subtask, in subtask order.
    pub subtasks: Vec<SubtaskHandle>,
}

/// What rebuilds one subtask's state: its chain of artifacts, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskHandle {
    pub subtask: u32,
    /// The key groups `start .. end` the subtask owned.
    pub key_groups: (u32, u32),
    pub chain: Vec<ArtifactRef>,
    /// Bytes of the live keys and values the chain rebuilds (uncompressed, unframed): the
    /// chain's stored bytes over this is the space amplification.
    #[serde(default)]
    pub live_bytes: u64,
}

/// One artifact of a chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// The object's path, relative to the job's folder in the store.
    pub path: String,
    /// The checkpoint whose snapshot wrote it.
    pub checkpoint: CheckpointId,
    pub bytes: u64,
    /// A full snapshot: the chain starts here.
    pub full: bool,
    /// The subtask (of the same operator) that owns the artifact and alone deletes it.
    pub owner: u32,
}

impl SubtaskHandle {
    pub fn range(&self) -> KeyGroupRange {
        KeyGroupRange {
            start: self.key_groups.0,
            end: self.key_groups.1,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.chain.iter().map(|a| a.bytes).sum()
    }

    /// Stored bytes over live bytes; `None` for an empty state.
    pub fn space_amplification(&self) -> Option<f64> {
        (self.live_bytes > 0).then(|| self.bytes() as f64 / self.live_bytes as f64)
    }

    /// The oldest increment the chain still needs.
    pub fn oldest(&self) -> Option<CheckpointId> {
        self.chain.iter().map(|a| a.checkpoint).min()
    }
}

impl CheckpointMetadata {
    /// Every artifact the checkpoint references.
    pub fn artifacts(&self) -> impl Iterator<Item = &ArtifactRef> {
        self.operators
            .iter()
            .flat_map(|o| &o.subtasks)
            .flat_map(|s| &s.chain)
    }

    pub fn operator(&self, name: &str) -> Option<&OperatorHandles> {
        self.operators.iter().find(|o| o.name == name)
    }
}
