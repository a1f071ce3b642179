//! Checkpoints: incremental snapshots in object storage, their coordination, cleanup and
//! restore (DESIGN.md §4–§8, §13, §14).
//!
//! - [`actor`]: which task issues a store call (for attribution in tests and logs).
//! - [`protocol`]: the messages between the coordinator and the tasks (barriers, acks,
//!   notifications).
//! - [`coordinator`]: [`coordinator::Coordinator`], one per job: triggers, completes (writes
//!   metadata last), retains the last N, notifies.
//! - [`subtask_checkpoints`]: a subtask's side: snapshot, asynchronous upload, its chain,
//!   cleanup of what it owns, restore and orphan sweep.
//! - [`release`]: which artifacts a subtask deletes when a checkpoint completes (pure).
//! - [`ownership`]: which subtask deletes which artifact (and sweeps which folder) after a
//!   restore with any parallelism.
//! - [`metadata`]: [`metadata::CheckpointMetadata`], the object that makes a checkpoint
//!   complete: source position and every subtask's handle (chain and owners).
//! - [`checkpoint_store`]: where a job's objects live in the store, and the operations on them.
//! - [`error`]: [`CheckpointError`], failures on the checkpoint path by kind: damage, store,
//!   incompatible, failed.
//! - [`start`]: where a run starts: the checkpoint to restore, the retained ones, the next id.
//! - [`format`](mod@format): the versioned, checksummed artifact of one increment, laid out by key group
//!   with an index for ranged reads.
//! - `section`: a key group's section decoded straight from its CBOR, for restores.
//! - [`storage`]: stores chosen by URL through `object_store`; ranged reads of artifacts.
//! - [`history`]: the last checkpoints a pipeline tried, failed ones included, with their
//!   costs, for the console.
//! - [`savepoint`]: a completed checkpoint copied out of the chain under a name, which only
//!   the user deletes.
//! - [`verify`]: reads a checkpoint whole and reports its damage, artifact by artifact.
//! - [`instrumented_store`]: a store wrapper that counts reads, writes and deletes per path
//!   and injects faults, for tests.

pub mod actor;
pub mod checkpoint_store;
pub(crate) mod coordinator;
pub(crate) mod error;
pub mod format;
pub(crate) mod history;
pub mod instrumented_store;
pub mod lease;
pub mod metadata;
pub mod ownership;
pub mod protocol;
pub(crate) mod release;
pub mod savepoint;
mod section;
pub(crate) mod start;
pub mod storage;
pub mod subtask_checkpoints;
pub(crate) mod verify;

pub use checkpoint_store::CheckpointStore;
pub use error::CheckpointError;
pub use metadata::{CheckpointMetadata, SinkPosition, SourcePosition};
pub use start::{JobStart, RestoreFrom, RunLineage, StartFrom};
pub use subtask_checkpoints::ChainPolicy;
