//! Checkpoints: how snapshots of keyed state are stored.
//!
//! Built so far (issue 3 in progress): [`format`], the versioned, checksummed artifact of one
//! subtask's increment, laid out by key group with an index for ranged reads. Still to come:
//! storage through `object_store`, the coordinator, worker-side cleanup, restore planning.

pub mod format;
