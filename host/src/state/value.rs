//! The payload of a value-state entry.

use super::StateBytes;

/// A value-state entry's value: `None` is a tombstone, kept until a snapshot records the
/// removal.
pub(crate) type ValueBody = Option<StateBytes>;
