//! The bodies of `weir serve`'s HTTP API, shared by the server and the CLI client.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checkpoint::CheckpointMetadata;

/// `POST /v1/jobs`: a job file and its components.
#[derive(Debug, Serialize, Deserialize)]
pub struct SubmitRequest {
    /// The job file's text. Source and sink paths are paths on the host.
    pub job: String,
    /// Per operator name, its component's bytes in base64.
    pub components: BTreeMap<String, String>,
}

/// What the host says of a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobInfo {
    pub id: String,
    pub name: String,
    pub status: JobStatus,
    /// Why it failed, if it did.
    pub error: Option<String>,
    pub source_records: u64,
    pub sink_records: u64,
    pub operators: Vec<OperatorInfo>,
    pub checkpoints_completed: u64,
    /// The id of the last completed checkpoint, if any.
    pub last_checkpoint: Option<u64>,
    /// Whether its job file has a `[checkpoints]` section: only then are its checkpoints
    /// stored, and reachable through `GET /v1/jobs/{id}/checkpoints`.
    #[serde(default)]
    pub keeps_checkpoints: bool,
    /// A Kafka job: the partitions of its topic this host owns now, each run as a pipeline of
    /// its own with checkpoints of its own. The job's counts are their sums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<PartitionInfo>>,
    /// When this run of it started (Unix time, ms), while it runs.
    #[serde(default)]
    pub started_at_ms: Option<u64>,
    /// Every subtask of its latest run has restored its state and opened its operator:
    /// `weir submit` and `weir restart` wait for this (or the run's end) to say whether the
    /// job started.
    #[serde(default)]
    pub opened: bool,
    /// Records per second read by the source and taken by the sink, over the last second,
    /// while it runs.
    #[serde(default)]
    pub in_per_second: Option<f64>,
    #[serde(default)]
    pub out_per_second: Option<f64>,
    /// When its last checkpoint completed (Unix time, ms) in this host's run of it.
    #[serde(default)]
    pub last_checkpoint_at_ms: Option<u64>,
}

/// A partition of a Kafka job's topic that a host owns.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PartitionInfo {
    /// The stage of a job that re-keys whose partition this is (0: the job's input topic).
    #[serde(default)]
    pub stage: usize,
    /// The topic the partition is of.
    #[serde(default)]
    pub topic: Option<String>,
    pub partition: i32,
    /// Messages of the partition not yet read.
    pub lag: i64,
    /// Counts of the partition's whole history, earlier owners included.
    pub source_records: u64,
    pub sink_records: u64,
    /// The partition's last completed checkpoint, if any.
    pub last_checkpoint: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobStatus {
    Running,
    Finished,
    Failed,
    Cancelled,
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JobStatus::Running => "running",
            JobStatus::Finished => "finished",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OperatorInfo {
    pub name: String,
    pub parallelism: u32,
    pub records_in: u64,
    pub records_out: u64,
}

/// One completed checkpoint: a row of `weir checkpoints list` (its `--json` form), and an
/// element of `GET /v1/jobs/{id}/checkpoints`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointSummary {
    pub job: String,
    pub id: u64,
    pub completed_at_ms: u64,
    /// `completed_at_ms` as `2023-11-14 22:13:20 UTC`.
    pub completed_at: String,
    pub finished: bool,
    pub subtasks: usize,
    /// The distinct artifacts the checkpoint references, and their bytes.
    pub artifacts: usize,
    pub bytes: u64,
    /// Why its metadata cannot be read (torn, not metadata, another version); the other
    /// fields are then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
    /// The savepoint's name, for a row of a savepoint (a copy of checkpoint `id` that only
    /// the user deletes; `--restore savepoint:<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint: Option<String>,
}

/// `POST /v1/jobs/{id}/savepoints`: copy a completed checkpoint (the latest unless
/// `checkpoint` names one) into the savepoint `name` (`weir savepoint`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavepointRequest {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
}

/// A savepoint taken: of which job, from which checkpoint, how many artifacts it copied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavepointInfo {
    pub job: String,
    pub name: String,
    pub checkpoint: u64,
    pub artifacts: usize,
}

/// `GET /v1/jobs/{id}/checkpoints/{ID|latest}`: the checkpoint's metadata (its fields, as
/// `weir checkpoints show --json` prints them) and `stored`, the size of each artifact it
/// references that the store holds, by the path the metadata gives; a missing artifact is
/// absent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointDetail {
    #[serde(flatten)]
    pub metadata: CheckpointMetadata,
    pub stored: BTreeMap<String, u64>,
}

/// An error, with the HTTP status it came with.
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}
