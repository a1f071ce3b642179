//! [`RunLeases`]: the leases a run takes before it touches anything (DESIGN.md §16): its
//! checkpoint folder's, in the checkpoint store, and one per file it writes (the output and
//! the dead-letter files), in the output's staging folder. Held for the whole run, restarts
//! included, renewed in the background, released at its end.

use std::sync::Arc;
use std::time::Duration;

use object_store::local::LocalFileSystem;
use object_store::path::Path;

use super::JobSpec;
use super::pipeline::file_outputs;
use crate::checkpoint::CheckpointStore;
use crate::checkpoint::lease::{HeldLease, Lease, LeaseCheck, LeaseError, LeaseOptions};
use crate::connectors::FileSink;

/// The leases of one run.
#[derive(Debug)]
pub(super) struct RunLeases {
    held: Vec<HeldLease>,
}

impl RunLeases {
    /// Takes every lease the run of `spec` needs, its checkpoints in `store`; `wait`: how long
    /// to wait for one another run holds (zero: refuse at once).
    pub(super) async fn acquire(
        spec: &JobSpec,
        store: Option<&CheckpointStore>,
        wait: Duration,
    ) -> Result<Self, LeaseError> {
        let options = LeaseOptions {
            wait,
            ..LeaseOptions::default()
        };
        let mut held = Vec::new();
        if let Some(store) = store {
            let what = format!(
                "job `{}` (its checkpoints at {})",
                spec.name,
                store.locate(store.folder())
            );
            let lease = Lease::acquire(
                store.object_store().clone(),
                store.folder(),
                &what,
                &options,
            )
            .await?;
            held.push(lease.keep_renewed());
        }
        for output in file_outputs(spec) {
            let lease = output_lease(&output, &options).await?;
            held.push(lease.keep_renewed());
        }
        Ok(Self { held })
    }

    /// What the run's commits consult.
    pub(super) fn checks(&self) -> Vec<LeaseCheck> {
        self.held.iter().map(HeldLease::check).collect()
    }

    /// Lets go of every lease, so that the next run starts at once.
    pub(super) async fn release(self) {
        for lease in self.held {
            lease.release().await;
        }
    }
}

/// The lease of the file `output`, in its staging folder (made if missing).
async fn output_lease(
    output: &std::path::Path,
    options: &LeaseOptions,
) -> Result<Lease, LeaseError> {
    let what = format!("the output {}", output.display());
    let folder = FileSink::lease_folder(output).ok_or_else(|| LeaseError::Store {
        what: what.clone(),
        path: Path::from(output.display().to_string()),
        source: object_store::Error::Generic {
            store: "local",
            source: "an output path must end in a file name".into(),
        },
    })?;
    let store = std::fs::create_dir_all(&folder)
        .map_err(|e| object_store::Error::Generic {
            store: "local",
            source: Box::new(e),
        })
        .and_then(|()| LocalFileSystem::new_with_prefix(&folder))
        .map_err(|source| LeaseError::Store {
            what: what.clone(),
            path: Path::from(folder.display().to_string()),
            source,
        })?;
    Lease::acquire(Arc::new(store), &Path::default(), &what, options).await
}
