//! Checkpoints: how snapshots of keyed state are stored.
//!
//! Built so far (issue 3 in progress):
//! - [`format`]: the versioned, checksummed artifact of one subtask's increment, laid out by
//!   key group with an index for ranged reads.
//! - [`storage`]: stores chosen by URL through `object_store`, writing artifacts and reading
//!   only the key groups a subtask owns.
//! - [`instrumented_store`]: a store wrapper that counts reads, writes and deletes per path
//!   and injects faults, for tests.
//!
//! Still to come: the coordinator (barriers, acknowledgements, metadata, retention),
//! worker-side cleanup, restore planning, two-phase sinks.

pub mod format;
pub mod instrumented_store;
pub mod storage;
