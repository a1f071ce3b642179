//! [`CheckpointHistory`]: the last checkpoints a pipeline tried, failed ones included, with
//! what each cost; what the console's checkpoint table shows
//! (`GET /v1/jobs/{id}/checkpoints/history`).
//!
//! The store keeps only completed checkpoints, and their metadata only what a restore needs;
//! a person watching a job also wants the ones that failed and why, how long each took and
//! paused the job, and how much it wrote. The coordinator records that here as it goes. It
//! lives as long as the host process: a restarted host starts a new history.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::metadata::CheckpointMetadata;
use crate::ids::CheckpointId;

/// How many checkpoints a history keeps: at a 1 s interval, the last ten minutes or so.
pub(crate) const KEPT: usize = 600;

/// Where a checkpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckpointStatus {
    InProgress,
    Completed,
    Failed,
}

/// One checkpoint tried. Times in milliseconds; what is not known yet (or, for a failed
/// checkpoint, at all) is `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    pub id: u64,
    /// The Kafka partition whose pipeline took it; `None` for a job of one pipeline.
    pub partition: Option<i32>,
    pub status: CheckpointStatus,
    /// Unix time.
    pub triggered_at_ms: u64,
    /// Trigger to completion (metadata written) or failure.
    pub duration_ms: Option<f64>,
    /// The longest synchronous pause of any subtask, start delay of the barrier and
    /// alignment.
    pub sync_pause_ms: Option<f64>,
    pub start_delay_ms: Option<f64>,
    pub alignment_ms: Option<f64>,
    pub entries_written: Option<u64>,
    pub artifacts_written: Option<u64>,
    pub bytes_written: Option<u64>,
    /// Artifacts deleted since the checkpoint before completed (mostly what it released).
    pub artifacts_deleted: Option<u64>,
    /// The longest and the mean chain of increments of the subtasks that keep state.
    pub chain_max: Option<u64>,
    pub chain_mean: Option<f64>,
    /// Bytes of live state, and of the artifacts that hold it (every artifact the checkpoint
    /// references): their ratio is the space amplification of incremental snapshots.
    pub state_bytes: Option<u64>,
    pub retained_bytes: Option<u64>,
    pub space_amplification: Option<f64>,
    /// Why it failed.
    pub error: Option<String>,
}

/// What a completed checkpoint cost, as the coordinator measured it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Completion {
    pub duration_us: u64,
    pub sync_pause_us: u64,
    pub start_delay_us: u64,
    pub alignment_us: u64,
    pub entries_written: u64,
    pub artifacts_written: u64,
    pub bytes_written: u64,
    pub artifacts_deleted: u64,
}

/// The last [`KEPT`] checkpoints of a pipeline, oldest first.
#[derive(Debug, Default)]
pub struct CheckpointHistory {
    /// Written by the coordinator, read by the API.
    records: Mutex<VecDeque<CheckpointRecord>>,
}

impl CheckpointHistory {
    fn records(&self) -> std::sync::MutexGuard<'_, VecDeque<CheckpointRecord>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checkpoint `id` was triggered now.
    pub fn triggered(&self, id: CheckpointId, now_ms: u64) {
        let mut records = self.records();
        if records.len() == KEPT {
            records.pop_front();
        }
        records.push_back(CheckpointRecord {
            id: id.0,
            partition: None,
            status: CheckpointStatus::InProgress,
            triggered_at_ms: now_ms,
            duration_ms: None,
            sync_pause_ms: None,
            start_delay_ms: None,
            alignment_ms: None,
            entries_written: None,
            artifacts_written: None,
            bytes_written: None,
            artifacts_deleted: None,
            chain_max: None,
            chain_mean: None,
            state_bytes: None,
            retained_bytes: None,
            space_amplification: None,
            error: None,
        });
    }

    /// Checkpoint `id` failed after `duration_us`.
    pub fn failed(&self, id: CheckpointId, duration_us: u64, error: String) {
        self.update(id, |r| {
            r.status = CheckpointStatus::Failed;
            r.duration_ms = Some(ms(duration_us));
            r.error = Some(error);
        });
    }

    /// Checkpoint `id` completed with `metadata`, at `cost`.
    pub fn completed(&self, id: CheckpointId, metadata: &CheckpointMetadata, cost: Completion) {
        let subtasks = metadata.operators.iter().flat_map(|o| &o.subtasks);
        // Stateless subtasks have no chain: the mean is over those that keep state.
        let chains: Vec<u64> = subtasks
            .clone()
            .map(|s| s.chain.len() as u64)
            .filter(|length| *length > 0)
            .collect();
        let state_bytes: u64 = subtasks.clone().map(|s| s.live_bytes).sum();
        let mut artifacts: Vec<(&str, u64)> = subtasks
            .flat_map(|s| &s.chain)
            .map(|a| (a.path.as_str(), a.bytes))
            .collect();
        // Subtasks restored from one artifact after a rescale share it.
        artifacts.sort_unstable();
        artifacts.dedup();
        let retained_bytes: u64 = artifacts.iter().map(|(_, bytes)| bytes).sum();
        self.update(id, |r| {
            r.status = CheckpointStatus::Completed;
            r.duration_ms = Some(ms(cost.duration_us));
            r.sync_pause_ms = Some(ms(cost.sync_pause_us));
            r.start_delay_ms = Some(ms(cost.start_delay_us));
            r.alignment_ms = Some(ms(cost.alignment_us));
            r.entries_written = Some(cost.entries_written);
            r.artifacts_written = Some(cost.artifacts_written);
            r.bytes_written = Some(cost.bytes_written);
            r.artifacts_deleted = Some(cost.artifacts_deleted);
            r.chain_max = chains.iter().max().copied();
            r.chain_mean = (!chains.is_empty())
                .then(|| chains.iter().sum::<u64>() as f64 / chains.len() as f64);
            r.state_bytes = Some(state_bytes);
            r.retained_bytes = Some(retained_bytes);
            r.space_amplification =
                (state_bytes > 0).then(|| retained_bytes as f64 / state_bytes as f64);
        });
    }

    fn update(&self, id: CheckpointId, change: impl FnOnce(&mut CheckpointRecord)) {
        let mut records = self.records();
        if let Some(record) = records.iter_mut().rev().find(|r| r.id == id.0) {
            change(record);
        }
    }

    /// The records, newest first, each marked with `partition`.
    pub fn newest_first(&self, partition: Option<i32>) -> Vec<CheckpointRecord> {
        self.records()
            .iter()
            .rev()
            .cloned()
            .map(|r| CheckpointRecord { partition, ..r })
            .collect()
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::{ArtifactRef, OperatorHandles, SubtaskHandle};

    fn artifact(path: &str, bytes: u64) -> ArtifactRef {
        ArtifactRef {
            path: path.into(),
            checkpoint: CheckpointId(1),
            bytes,
            full: false,
            owner: 0,
        }
    }

    fn subtask(chain: Vec<ArtifactRef>, live_bytes: u64) -> SubtaskHandle {
        SubtaskHandle {
            chain,
            live_bytes,
            ..SubtaskHandle::default()
        }
    }

    #[test]
    fn a_completed_checkpoint_records_its_chains_and_space_amplification() {
        let history = CheckpointHistory::default();
        history.triggered(CheckpointId(3), 1_000);
        let mut metadata = CheckpointMetadata::bare("job", 3);
        metadata.operators = vec![OperatorHandles {
            name: "count".into(),
            parallelism: 2,
            component: None,
            wit: None,
            state_encoding: Some(crate::checkpoint::metadata::STATE_ENCODING_CBOR.into()),
            subtasks: vec![
                subtask(vec![artifact("a", 100), artifact("shared", 50)], 60),
                subtask(vec![artifact("shared", 50)], 40),
            ],
        }];
        let cost = Completion {
            duration_us: 12_500,
            entries_written: 7,
            ..Completion::default()
        };
        history.completed(CheckpointId(3), &metadata, cost);
        let [record] = history
            .newest_first(Some(2))
            .try_into()
            .expect("one record");
        assert_eq!(record.status, CheckpointStatus::Completed);
        assert_eq!(record.partition, Some(2));
        assert_eq!(record.duration_ms, Some(12.5));
        assert_eq!(record.entries_written, Some(7));
        assert_eq!((record.chain_max, record.chain_mean), (Some(2), Some(1.5)));
        // The shared artifact counts once: 150 bytes hold 100 bytes of state.
        assert_eq!(record.retained_bytes, Some(150));
        assert_eq!(record.space_amplification, Some(1.5));
    }

    #[test]
    fn a_failure_keeps_its_error_and_the_oldest_records_go_first() {
        let history = CheckpointHistory::default();
        for id in 1..=(KEPT as u64 + 2) {
            history.triggered(CheckpointId(id), id);
        }
        history.failed(
            CheckpointId(KEPT as u64 + 2),
            2_000,
            "the store is down".into(),
        );
        let records = history.newest_first(None);
        assert_eq!(records.len(), KEPT);
        assert_eq!(records[0].status, CheckpointStatus::Failed);
        assert_eq!(records[0].error.as_deref(), Some("the store is down"));
        assert_eq!(records[1].status, CheckpointStatus::InProgress);
        assert_eq!(records.last().map(|r| r.id), Some(3));
    }
}
