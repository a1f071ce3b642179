//! Identifiers that cross module boundaries, as newtypes so that a subtask index is never
//! passed where a key group is expected.

use std::fmt;

/// The index of one parallel instance of an operator, `0 .. parallelism`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubtaskIndex(pub u32);

impl fmt::Display for SubtaskIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A checkpoint's number. Writes made after checkpoint `n - 1` belong to checkpoint `n`.
/// Numbers start at 1; the default, 0, is before every checkpoint.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct CheckpointId(pub u64);

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Names one operator of a job (its position in the chain) for messages and metrics.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OperatorName(pub String);

impl fmt::Display for OperatorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A name for one run, unique across processes and restarts: the token of its leases and the
/// name of its artifacts.
pub fn new_run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}
