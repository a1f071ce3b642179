//! The payload of a list-state entry: one key's list.

use super::StateBytes;
use crate::ids::CheckpointId;

/// One key's list, appended to.
#[derive(Debug, Default)]
pub(crate) struct ListBody {
    pub items: Vec<StateBytes>,
    /// How many leading items earlier snapshots already hold; the next increment holds only
    /// `items[persisted..]`.
    pub persisted: usize,
    /// The list was cleared since the last snapshot (one clear event).
    pub cleared: bool,
    /// The increment that holds the list's first items (the oldest it needs).
    pub oldest: CheckpointId,
    /// Bytes of the items.
    pub bytes: usize,
}

impl ListBody {
    pub(crate) fn append(&mut self, item: &[u8]) {
        self.bytes += item.len();
        self.items.push(StateBytes::copy_from_slice(item));
    }

    pub(crate) fn clear(&mut self) {
        self.bytes = 0;
        self.items.clear();
        self.persisted = 0;
        self.cleared = true;
    }

    /// Writes the whole list again at the next snapshot: a clear event and every item, so
    /// that the increment alone holds the list (bounded chains, `state::aging`).
    pub(crate) fn rewrite(&mut self) {
        self.persisted = 0;
        self.cleared = true;
    }
}
