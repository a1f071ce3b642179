//! [`CheckpointMetadata`]: the object whose presence makes a checkpoint complete.
//!
//! The coordinator writes it last, in one `put` (atomic on every `object_store` backend), once
//! every task has acknowledged. It holds the whole picture a restore needs: the source's
//! position and, for every subtask, its handle, the ordered chain of artifacts that rebuild its
//! state, each with its single owner. It is JSON, so that a person can read it.
//!
//! It also says what the checkpoint cost ([`CheckpointTiming`]: the barrier's start delay and
//! alignment, the tasks' pauses, the duration) and what the job had counted when the barrier
//! passed each task ([`RecordCounts`]), so that a restore continues the counts with the
//! state. Both are absent in checkpoints written before they were recorded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::CheckpointId;
use crate::partition::KeyGroupRange;
use crate::partition::MAX_KEY_GROUPS;

/// Where a source stands in its input, as recorded in a checkpoint: each source writes and
/// reads its own JSON shape (a file source: byte offset and line number).
pub type SourcePosition = serde_json::Value;

/// What a sink records in a checkpoint about the output it covers, in the sink's own JSON
/// shape (the file sink: the output's length once the checkpoint is committed), so that a
/// restore can check the output still holds it.
pub type SinkPosition = serde_json::Value;

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
    /// The latest event time the source had read (milliseconds since the Unix epoch), from
    /// which its watermarks resume: a restore never moves a watermark back. Absent when the
    /// source had read no timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_max_timestamp: Option<i64>,
    /// Where the checkpoint's time went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<CheckpointTiming>,
    /// The job's record counters as the barrier passed each task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<RecordCounts>,
}

/// Where one task's share of a checkpoint's time went, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierTiming {
    /// From the trigger at the coordinator to the barrier's first arrival at the task: the
    /// time it spent in queues behind records (and in the tasks before it).
    pub start_delay_us: u64,
    /// From the barrier's first arrival to its last, at a task with several inputs (zero with
    /// one): how long the task read only the inputs whose barrier had not come yet.
    pub alignment_us: u64,
    /// How long the task stopped processing for the checkpoint: a subtask to take its
    /// snapshot's synchronous part, the sink to stage its output.
    pub sync_pause_us: u64,
}

/// Where a checkpoint's time went, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointTiming {
    /// From the trigger to the last acknowledgement (the metadata write follows).
    pub duration_us: u64,
    /// The longest start delay of any task: the subtasks and the sink.
    pub start_delay_us: u64,
    /// The longest alignment of any task.
    pub alignment_us: u64,
    /// The longest synchronous pause of any task.
    pub sync_pause_us: u64,
    /// Per operator (in the order of `operators`), per subtask.
    pub operators: Vec<Vec<BarrierTiming>>,
    pub sink: BarrierTiming,
}

impl CheckpointTiming {
    /// The timing of a checkpoint that took `duration`, from every task's: the maxima.
    pub fn new(duration_us: u64, operators: Vec<Vec<BarrierTiming>>, sink: BarrierTiming) -> Self {
        let tasks = || operators.iter().flatten().chain([&sink]);
        let most = |field: fn(&BarrierTiming) -> u64| tasks().map(field).max().unwrap_or(0);
        Self {
            duration_us,
            start_delay_us: most(|t| t.start_delay_us),
            alignment_us: most(|t| t.alignment_us),
            sync_pause_us: most(|t| t.sync_pause_us),
            operators,
            sink,
        }
    }
}

/// One task's record counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCounts {
    pub records_in: u64,
    pub records_out: u64,
    /// Key and value bytes.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// What the job had counted when a checkpoint's barrier passed each task: the records before
/// the barrier, which is what a restore of the checkpoint has already processed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordCounts {
    /// Records the source had read.
    pub source_records: u64,
    /// Records the sink had written.
    pub sink_records: u64,
    /// Per operator (in the order of `operators`), per subtask.
    pub operators: Vec<Vec<TaskCounts>>,
}

/// The handles of one operator's subtasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorHandles {
    /// The operator's uid.
    pub name: String,
    pub parallelism: u32,
    /// The digest of the component that wrote this state (`sha256:<hex>`), where known: a
    /// checkpoint from before digests were recorded, or a pipeline built in code, has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// The WIT package its component was linked against (`weir:operator@<version>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wit: Option<String>,
    /// How the operator's state is stored: `cbor` since WIT 0.6.0, whatever the operator's
    /// language. A checkpoint without it was written by an older host, which stored a Python,
    /// JavaScript or C operator's JSON text as it was: a restore converts that state
    /// (`KeyedStateBackend::reencode_json_text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_encoding: Option<String>,
    /// One per subtask, in subtask order.
    pub subtasks: Vec<SubtaskHandle>,
}

/// [`OperatorHandles::state_encoding`] of every checkpoint a host of WIT 0.6.0 or later writes.
pub const STATE_ENCODING_CBOR: &str = "cbor";

impl OperatorHandles {
    /// Whether an older host wrote this operator's state, storing a JSON guest's text as it
    /// was rather than as CBOR.
    pub fn stores_json_text(&self) -> bool {
        self.state_encoding.is_none()
    }

    /// The states holding entries in any of its subtasks, by name, sorted.
    pub fn states(&self) -> Vec<&str> {
        let mut states: Vec<&str> = self
            .subtasks
            .iter()
            .flat_map(|s| &s.states)
            .map(String::as_str)
            .collect();
        states.sort_unstable();
        states.dedup();
        states
    }
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
    /// The subtask's watermark as the barrier passed (milliseconds since the Unix epoch), if
    /// it had one: the restored subtask starts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<i64>,
    /// Timers pending in the subtask's state (both clocks).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timers: u64,
    /// The states (by name) holding entries in the subtask's state: what a new version of
    /// the operator must declare, or drop with `--allow-dropped-state OP.STATE`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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

    /// The stored bytes of the chain (saturating: the sizes are as read from the metadata).
    pub fn bytes(&self) -> u64 {
        self.chain
            .iter()
            .fold(0, |sum, a| sum.saturating_add(a.bytes))
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

    /// The operators whose state this checkpoint holds (live keys or pending timers) and
    /// that are not among `uids`, with the bytes of their live state: what a restore into a
    /// job of those operators would drop.
    pub fn state_without_place(&self, uids: &[&str]) -> Vec<(&str, u64)> {
        self.operators
            .iter()
            .filter(|o| !uids.contains(&o.name.as_str()))
            .filter(|o| o.subtasks.iter().any(|s| s.live_bytes > 0 || s.timers > 0))
            .map(|o| {
                let bytes = o.subtasks.iter().map(|s| s.live_bytes).sum();
                (o.name.as_str(), bytes)
            })
            .collect()
    }

    /// Checks what readers rely on and the JSON syntax cannot say (metadata has no checksum:
    /// a damaged or hand-edited file parses): the number of key groups is one a job can
    /// have, and every subtask's key groups lie within them. A reader sizes a subtask's
    /// tables by its range, so a range past the key groups (or ending before it starts)
    /// would otherwise cost gigabytes or a panic instead of an error.
    pub fn check(&self) -> Result<(), MetadataInconsistency> {
        if !(1..=MAX_KEY_GROUPS).contains(&self.key_groups) {
            return Err(MetadataInconsistency::KeyGroups {
                key_groups: self.key_groups,
            });
        }
        for operator in &self.operators {
            for handle in &operator.subtasks {
                let (start, end) = handle.key_groups;
                if start > end || end > self.key_groups {
                    return Err(MetadataInconsistency::SubtaskRange {
                        operator: operator.name.clone(),
                        subtask: handle.subtask,
                        range: handle.key_groups,
                        key_groups: self.key_groups,
                    });
                }
            }
        }
        Ok(())
    }
}

/// What [`CheckpointMetadata::check`] found wrong in metadata that parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataInconsistency {
    #[error("{key_groups} key groups is out of range (1 to {MAX_KEY_GROUPS})")]
    KeyGroups { key_groups: u32 },
    #[error(
        "operator `{operator}` subtask {subtask} owns key groups {}..{}, not within the \
         checkpoint's {key_groups} key groups",
        range.0,
        range.1
    )]
    SubtaskRange {
        operator: String,
        subtask: u32,
        range: (u32, u32),
        key_groups: u32,
    },
}

#[cfg(test)]
impl CheckpointMetadata {
    /// Checkpoint `id` of job `job`, with no operator, no timing and no counts: for tests.
    pub(crate) fn bare(job: &str, id: u64) -> Self {
        Self {
            version: METADATA_VERSION,
            job: job.to_owned(),
            id: CheckpointId(id),
            completed_at_ms: 0,
            finished: false,
            key_groups: 128,
            source: serde_json::Value::Null,
            sink: None,
            dead_letters: Default::default(),
            source_max_timestamp: None,
            operators: Vec::new(),
            timing: None,
            counts: None,
        }
    }
}
