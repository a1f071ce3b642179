//! [`Ownership`]: which subtask deletes which artifact, after a restore with any parallelism.
//!
//! Every artifact has exactly one owner, the only task that may delete it (DESIGN.md §5).
//! While parallelism stays the same, the owner is the subtask that wrote it. A restore with
//! another parallelism hands each inherited artifact to exactly one new subtask: the one that
//! now owns the first key group of the artifact's owner at the time. Every subtask computes
//! the same answer from the same picture (all retained checkpoints), so no message is needed
//! to agree, and no artifact gets two deleters or none.
//!
//! Orphans (artifacts of checkpoints that never completed) are found by listing: each folder
//! `state/<operator>/<j>/` is swept by exactly one subtask, `j mod parallelism`, which is
//! subtask `j` itself whenever it still exists.

use std::collections::HashMap;

use super::metadata::CheckpointMetadata;
use crate::ids::SubtaskIndex;
use crate::partition::{KeyGroup, KeyGroups};

/// The owners of one operator's artifacts under a new parallelism.
#[derive(Debug, Default)]
pub struct Ownership {
    owners: HashMap<String, u32>,
}

impl Ownership {
    /// Assigns every artifact of `operator` referenced by `retained` (any order) to one of
    /// `parallelism` subtasks over `key_groups`.
    pub fn plan<'m>(
        operator: &str,
        parallelism: u32,
        key_groups: KeyGroups,
        retained: impl IntoIterator<Item = &'m CheckpointMetadata>,
    ) -> Self {
        let mut newest_first: Vec<&CheckpointMetadata> = retained.into_iter().collect();
        newest_first.sort_by_key(|m| std::cmp::Reverse(m.id));
        let mut owners = HashMap::new();
        for metadata in newest_first {
            let Some(handles) = metadata.operator(operator) else {
                continue;
            };
            for handle in &handles.subtasks {
                for artifact in &handle.chain {
                    // The newest checkpoint that references an artifact says who owned it.
                    owners.entry(artifact.path.clone()).or_insert_with(|| {
                        let owner_range = handles
                            .subtasks
                            .iter()
                            .find(|h| h.subtask == artifact.owner)
                            .unwrap_or(handle)
                            .range();
                        key_groups
                            .subtask_of(KeyGroup(owner_range.start), parallelism)
                            .0
                    });
                }
            }
        }
        Self { owners }
    }

    /// Whether `subtask` owns the artifact at `path` (relative to the job's folder).
    pub fn owns(&self, subtask: SubtaskIndex, path: &str) -> bool {
        self.owners.get(path) == Some(&subtask.0)
    }

    /// Whether `subtask` sweeps the folder of old subtask `folder` for orphans.
    pub fn sweeps(subtask: SubtaskIndex, parallelism: u32, folder: u32) -> bool {
        folder % parallelism.max(1) == subtask.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::{
        ArtifactRef, METADATA_VERSION, OperatorHandles, SubtaskHandle,
    };
    use crate::ids::CheckpointId;

    fn checkpoint(id: u64, parallelism: u32, groups: KeyGroups) -> CheckpointMetadata {
        let subtasks = (0..parallelism)
            .map(|s| {
                let range = groups.range_of(SubtaskIndex(s), parallelism);
                SubtaskHandle {
                    subtask: s,
                    key_groups: (range.start, range.end),
                    chain: (1..=id)
                        .map(|c| ArtifactRef {
                            path: format!("state/op/{s}/chk-{c}-p{parallelism}"),
                            checkpoint: CheckpointId(c),
                            bytes: 1,
                            full: c == 1,
                            owner: s,
                        })
                        .collect(),
                    live_bytes: 0,
                    watermark: None,
                    timers: 0,
                    states: Vec::new(),
                }
            })
            .collect();
        CheckpointMetadata {
            version: METADATA_VERSION,
            job: "j".into(),
            id: CheckpointId(id),
            completed_at_ms: 0,
            finished: false,
            key_groups: groups.count(),
            source: serde_json::Value::Null,
            sink: None,
            dead_letters: Default::default(),
            source_max_timestamp: None,
            operators: vec![OperatorHandles {
                name: "op".into(),
                parallelism,
                component: None,
                wit: None,
                state_encoding: Some(crate::checkpoint::metadata::STATE_ENCODING_CBOR.into()),
                subtasks,
            }],
            timing: None,
            counts: None,
        }
    }

    #[test]
    fn every_artifact_gets_exactly_one_owner_under_any_parallelism() {
        let groups = KeyGroups::new(128);
        let retained = [checkpoint(2, 2, groups), checkpoint(3, 3, groups)];
        for parallelism in 1..=5 {
            let plan = Ownership::plan("op", parallelism, groups, &retained);
            for artifact in retained.iter().flat_map(|m| m.artifacts()) {
                let owners = (0..parallelism)
                    .filter(|&s| plan.owns(SubtaskIndex(s), &artifact.path))
                    .count();
                assert_eq!(owners, 1, "{} at parallelism {parallelism}", artifact.path);
            }
        }
        // Unchanged parallelism: the writer keeps its artifacts.
        let plan = Ownership::plan("op", 3, groups, &retained);
        assert!(plan.owns(SubtaskIndex(2), "state/op/2/chk-1-p3"));
        for folder in 0..8 {
            let sweepers = (0..3)
                .filter(|&s| Ownership::sweeps(SubtaskIndex(s), 3, folder))
                .count();
            assert_eq!(sweepers, 1);
        }
    }
}
