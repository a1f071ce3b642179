//! [`Increment`]: what one snapshot of a subtask's keyed state holds.
//!
//! A snapshot freezes each table's dirty keys ([`super::KeyedStateBackend::freeze`]), then
//! pins their contents as of the freeze, a step at a time beside processing
//! ([`super::KeyedStateBackend::pin_frozen`]): for every dirty key one [`Change`] (squashed:
//! however often the key was written, its latest state), a tombstone for a removed value,
//! and for maps and lists a `cleared` flag instead of one tombstone per element. Pinning
//! costs O(dirty keys) and copies no long value: [`StateBytes`] share them. Encoding and
//! upload happen afterwards, off the processing path.
//!
//! Increments are grouped by key group so that a subtask restoring a range of key groups
//! takes only the groups it owns.

use super::{StateBytes, StateKind};
use crate::ids::CheckpointId;
use crate::partition::KeyGroup;

/// The changes of one subtask's state since its previous snapshot.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Increment {
    /// The checkpoint this increment belongs to.
    pub checkpoint: CheckpointId,
    /// One entry per key group with changes, in ascending order.
    pub groups: Vec<GroupIncrement>,
}

/// The changes of one key group.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupIncrement {
    pub group: KeyGroup,
    pub states: Vec<StateChanges>,
}

/// The changes of one state in one key group.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateChanges {
    /// States are named, not numbered, in increments: ids are per instance.
    pub name: String,
    pub kind: StateKind,
    pub changes: Vec<Change>,
}

/// One key's change.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Change {
    /// The key's value, or `None` if it was removed (a tombstone).
    Value {
        key: StateBytes,
        value: Option<StateBytes>,
    },
    /// The key's map: cleared first if `cleared`, then each entry put (`Some`) or removed
    /// (`None`).
    Map {
        key: StateBytes,
        cleared: bool,
        entries: Vec<(StateBytes, Option<StateBytes>)>,
    },
    /// The key's list: cleared first if `cleared`, then `appended` added at its end.
    List {
        key: StateBytes,
        cleared: bool,
        appended: Vec<StateBytes>,
    },
}

impl Increment {
    /// Number of changed keys.
    pub fn changes(&self) -> usize {
        self.groups
            .iter()
            .flat_map(|g| &g.states)
            .map(|s| s.changes.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}
