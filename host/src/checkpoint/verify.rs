//! [`verify`]: reads everything a checkpoint references and says whether a restore of it
//! would succeed, artifact by artifact (DESIGN.md §8).
//!
//! A restore reads only the sections its subtasks own and stops at the first damage; this
//! reads every artifact whole, checks its size against the metadata, its header, footer,
//! index and every section's checksum, decodes every section, and applies every subtask's
//! chain in order to an empty backend, so that a chain whose artifacts are each whole but do
//! not fit together is found too. It writes nothing.

use std::collections::BTreeMap;

use object_store::ObjectStoreExt;
use serde::Serialize;

use super::checkpoint_store::CheckpointStore;
use super::format;
use super::metadata::CheckpointMetadata;
use super::storage::StorageError;
use crate::ids::CheckpointId;
use crate::partition::KeyGroups;
use crate::state::{Increment, KeyedStateBackend};

/// What [`verify`] found in one checkpoint.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CheckpointReport {
    pub job: String,
    pub checkpoint: CheckpointId,
    /// The metadata object, as the store names it.
    pub metadata: String,
    /// Why the metadata cannot be read; then nothing else was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata_damage: Option<String>,
    /// Every artifact the checkpoint references, in path order.
    pub artifacts: Vec<ArtifactReport>,
    /// Chains whose artifacts read whole but do not apply in order.
    pub chains: Vec<ChainDamage>,
}

/// One artifact: whole, or how it is damaged.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ArtifactReport {
    /// As recorded in the metadata (relative to the job's folder).
    pub path: String,
    /// As the store names it.
    pub object: String,
    /// The size the metadata records.
    pub bytes: u64,
    /// Key-group sections read and checked.
    pub sections: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
}

/// A subtask's chain that does not apply.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ChainDamage {
    pub operator: String,
    pub subtask: u32,
    /// The artifact whose increment failed to apply.
    pub path: String,
    pub damage: String,
}

impl CheckpointReport {
    /// Nothing is damaged: a restore of this checkpoint would read it all.
    pub(crate) fn is_whole(&self) -> bool {
        self.metadata_damage.is_none()
            && self.chains.is_empty()
            && self.artifacts.iter().all(|a| a.damage.is_none())
    }

    /// Everything damaged, one line each.
    pub(crate) fn damage(&self) -> Vec<String> {
        let metadata = self
            .metadata_damage
            .iter()
            .map(|d| format!("{}: {d}", self.metadata));
        let artifacts = self
            .artifacts
            .iter()
            .filter_map(|a| Some(format!("{}: {}", a.object, a.damage.as_ref()?)));
        let chains = self.chains.iter().map(|c| {
            format!(
                "the chain of operator `{}` subtask {} does not apply at {}: {}",
                c.operator, c.subtask, c.path, c.damage
            )
        });
        metadata.chain(artifacts).chain(chains).collect()
    }
}

/// Reads and checks checkpoint `id` of the store's job. Damage is reported; only a store
/// that cannot be read (or a checkpoint that does not exist) is an error.
pub(crate) async fn verify(
    store: &CheckpointStore,
    job: &str,
    id: CheckpointId,
) -> Result<CheckpointReport, StorageError> {
    let mut report = CheckpointReport {
        job: job.to_owned(),
        checkpoint: id,
        metadata: store.locate(&store.metadata_path(id)),
        metadata_damage: None,
        artifacts: Vec::new(),
        chains: Vec::new(),
    };
    let metadata = match store.read_metadata(id).await {
        Ok(metadata) => metadata,
        Err(StorageError::Metadata { message, .. }) => {
            report.metadata_damage = Some(message);
            return Ok(report);
        }
        Err(e) => return Err(e),
    };
    let mut artifacts: BTreeMap<String, ArtifactReport> = BTreeMap::new();
    for artifact in metadata.artifacts() {
        artifacts
            .entry(artifact.path.clone())
            .or_insert_with(|| ArtifactReport {
                path: artifact.path.clone(),
                object: store.locate(&store.resolve(&artifact.path)),
                bytes: artifact.bytes,
                sections: 0,
                damage: None,
            });
    }
    report.chains = check_chains(store, &metadata, &mut artifacts).await?;
    report.artifacts = artifacts.into_values().collect();
    Ok(report)
}

/// Reads every subtask's chain, artifact by artifact, into a backend of the subtask's key
/// groups; fills in each artifact's report, and returns the chains that do not apply.
async fn check_chains(
    store: &CheckpointStore,
    metadata: &CheckpointMetadata,
    artifacts: &mut BTreeMap<String, ArtifactReport>,
) -> Result<Vec<ChainDamage>, StorageError> {
    let groups = KeyGroups::new(metadata.key_groups);
    let mut damaged = Vec::new();
    for operator in &metadata.operators {
        for handle in &operator.subtasks {
            let mut backend = KeyedStateBackend::new(groups, handle.range());
            // A chain with a damaged artifact cannot be applied past it.
            let mut applies = true;
            for artifact in &handle.chain {
                let report = artifacts
                    .get_mut(&artifact.path)
                    .expect("every artifact has a report");
                let increment = match read_whole(store, report).await? {
                    Some(increment) => increment,
                    None => {
                        applies = false;
                        continue;
                    }
                };
                if applies && let Err(e) = backend.restore(&increment) {
                    damaged.push(ChainDamage {
                        operator: operator.name.clone(),
                        subtask: handle.subtask,
                        path: artifact.path.clone(),
                        damage: e.to_string(),
                    });
                    applies = false;
                }
            }
        }
    }
    Ok(damaged)
}

/// Reads and decodes the artifact `report` is about; records its damage and returns `None`
/// when it has some.
async fn read_whole(
    store: &CheckpointStore,
    report: &mut ArtifactReport,
) -> Result<Option<Increment>, StorageError> {
    let path = store.resolve(&report.path);
    let read = async {
        let got = store.object_store().get(&path).await?;
        got.bytes().await
    };
    let bytes = match read.await {
        Ok(bytes) => bytes,
        Err(object_store::Error::NotFound { .. }) => {
            report.damage = Some("the object is missing".into());
            return Ok(None);
        }
        Err(source) => return Err(StorageError::Store { path, source }),
    };
    if report.bytes != 0 && bytes.len() as u64 != report.bytes {
        report.damage = Some(format!(
            "holds {} bytes, and the metadata records {}",
            bytes.len(),
            report.bytes
        ));
        return Ok(None);
    }
    match format::decode(&bytes, None) {
        Ok(increment) => {
            report.sections = increment.groups.len();
            Ok(Some(increment))
        }
        Err(e) => {
            report.damage = Some(e.to_string());
            Ok(None)
        }
    }
}
