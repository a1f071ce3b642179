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
    /// The version of the job that runs (1 as submitted; each upgrade adds one).
    #[serde(default = "first_version")]
    pub version: u32,
    /// Its upgrades, oldest first (`weir upgrade`).
    #[serde(default)]
    pub upgrades: Vec<UpgradeRecord>,
}

fn first_version() -> u32 {
    1
}

/// `POST /v1/jobs/{id}/upgrade`: a new version of a job (`weir upgrade`): its job file and
/// components, as a submission sends them.
#[derive(Debug, Serialize, Deserialize)]
pub struct UpgradeRequest {
    #[serde(flatten)]
    pub submission: SubmitRequest,
    /// Keep the new version even if it fails before its first checkpoint.
    #[serde(default)]
    pub no_rollback: bool,
    /// Only check the new version against the job's latest checkpoint; change nothing.
    #[serde(default)]
    pub check: bool,
    /// Operators (by uid) whose state the new version may drop.
    #[serde(default)]
    pub allow_dropped_state: Vec<String>,
}

/// One upgrade of a job, as the job's history keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeRecord {
    pub from: u32,
    pub to: u32,
    /// When it was asked for, Unix time in milliseconds.
    pub at_ms: u64,
    /// The savepoint the new version restores, and a rollback the old one.
    pub savepoint: String,
    /// Whether a failure of the new version before its first checkpoint rolls back.
    pub rollback: bool,
    /// Operators (by uid) whose state the new version may drop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_dropped_state: Vec<String>,
    pub status: UpgradeStatus,
    /// Why it failed or was rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpgradeStatus {
    /// Stopping the old version, or waiting for the new one's first checkpoint.
    InProgress,
    /// The new version completed a checkpoint (or finished): it stays.
    Done,
    /// The new version failed before its first checkpoint; the old one runs again.
    RolledBack,
    /// The upgrade could not be made, or the new version failed and was kept.
    Failed,
}

impl std::fmt::Display for UpgradeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UpgradeStatus::InProgress => "in progress",
            UpgradeStatus::Done => "done",
            UpgradeStatus::RolledBack => "rolled back",
            UpgradeStatus::Failed => "failed",
        })
    }
}

/// What `weir upgrade --check` finds: what would happen to each operator's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeCheck {
    pub job: String,
    pub from: u32,
    /// The checkpoint checked against (the job's latest), if it has one.
    pub checkpoint: Option<u64>,
    /// Per operator of the new version, and per state dropped, what the restore does.
    pub operators: Vec<String>,
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
