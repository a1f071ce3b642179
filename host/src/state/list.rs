//! The payload of a list-state entry: one key's list.

use super::StateBytes;

/// One key's list, appended to.
#[derive(Debug, Default)]
pub struct ListBody {
    pub items: Vec<StateBytes>,
    /// How many leading items earlier snapshots already hold; the next increment holds only
    /// `items[persisted..]`.
    pub persisted: usize,
    /// The list was cleared since the last snapshot (one clear event).
    pub cleared: bool,
}

impl ListBody {
    pub fn append(&mut self, item: &[u8]) {
        self.items.push(StateBytes::copy_from_slice(item));
    }

    pub fn clear(&mut self) {
        self.items.clear();
        self.persisted = 0;
        self.cleared = true;
    }
}
