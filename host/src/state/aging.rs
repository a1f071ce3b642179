//! Bounded chains without full snapshots (DESIGN.md §4): [`KeyedStateBackend::rewrite_oldest`].
//!
//! The backend remembers, per increment of its chain (oldest first), the keys that increment
//! wrote with content. Each entry knows the checkpoint that last wrote it, so a key still
//! lives in an increment exactly when its entry's `written_in` is that increment (or older:
//! restored entries). Before each snapshot, a bounded number of the keys of the oldest
//! increments that still live there are re-written (marked dirty in the current epoch, as if
//! the operator had written them); once every key of the oldest increment has been
//! re-written or was overwritten since, that increment holds nothing needed and leaves the
//! chain. Tombstones and clear events in it are not needed either, since no older increment
//! remains for them to cancel. A whole map or list is re-written at once (a clear event and
//! its live contents), which also lets go of every older piece of it.
//!
//! The oldest increments drain at the pace of the budget, so a chain stays bounded without
//! ever writing the whole state at once; keys that change often cost nothing, as their
//! older versions die by themselves.

use std::collections::VecDeque;

use super::KeyedStateBackend;
use super::StateBytes;
use super::backend::Tables;
use super::frozen::Pin;
use super::list::ListBody;
use super::map::MapBody;
use super::table::KeyedTable;
use super::value::ValueBody;
use crate::ids::CheckpointId;
use crate::partition::hash_key;

/// The keys one increment of the chain wrote with content, and how far re-writing got.
#[derive(Debug)]
pub(super) struct AgedIncrement {
    pub(super) checkpoint: CheckpointId,
    pub(super) keys: Vec<AgedKey>,
    /// Keys before it were re-written or found dead.
    pub(super) cursor: usize,
}

/// A key of an increment: where its entry is (state, key-group offset) and the key. Its hash
/// is computed again when the key is re-written: a chain holds an aged key per key of each
/// increment, and only the budget's few are looked up per checkpoint.
#[derive(Debug)]
pub(super) struct AgedKey {
    pub(super) state: u32,
    pub(super) offset: u32,
    pub(super) key: StateBytes,
}

/// The chain's increments, oldest first.
pub(super) type Ages = VecDeque<AgedIncrement>;

impl KeyedStateBackend {
    /// Re-writes up to `budget` entries (a map or list counts its elements) whose latest
    /// version lives in the oldest increments of the chain, as writes of `checkpoint`, the
    /// one about to be snapshotted. Returns the increments that no longer hold anything
    /// needed once that snapshot is stored: they leave the chain with it.
    pub fn rewrite_oldest(&mut self, checkpoint: CheckpointId, budget: usize) -> Vec<CheckpointId> {
        // Its writes belong to the snapshot about to be frozen, after the previous one.
        assert!(
            !self.is_pinning(),
            "the previous snapshot is not pinned yet"
        );
        self.epoch = checkpoint.max(self.epoch);
        self.rewrite_some(budget);
        let mut released = Vec::new();
        while let Some(front) = self.ages.front()
            && front.cursor >= front.keys.len()
        {
            released.push(front.checkpoint);
            self.ages.pop_front();
        }
        released
    }

    /// Re-writes up to `budget` entries of the oldest increments, as [`Self::rewrite_oldest`]
    /// does, as writes of the current epoch: a subtask does part of a checkpoint's re-writing
    /// between batches, before the checkpoint, so that its synchronous part has little left
    /// to do. The increments drained stay in the chain until the next
    /// [`Self::rewrite_oldest`] releases them with the snapshot that holds their keys.
    ///
    /// Returns the keys it visited, live or dead (dead keys cost a lookup each; at most four
    /// times the budget and 1 024 are looked up), and the elements it re-wrote.
    pub fn rewrite_some(&mut self, budget: usize) -> (usize, usize) {
        assert!(
            !self.is_pinning(),
            "the previous snapshot is not pinned yet"
        );
        let epoch = self.epoch;
        let lookups = budget.saturating_mul(4).saturating_add(1024);
        let (mut visited, mut spent) = (0, 0);
        for front in self.ages.iter_mut() {
            while front.cursor < front.keys.len() && spent < budget && visited < lookups {
                let aged = &front.keys[front.cursor];
                visited += 1;
                spent += rewrite(
                    &mut self.states[aged.state as usize].tables,
                    aged,
                    front.checkpoint,
                    epoch,
                );
                front.cursor += 1;
            }
            if front.cursor < front.keys.len() {
                break;
            }
        }
        (visited, spent)
    }

    /// Keys the chain's increments still hold for re-writing, dead ones included: the work
    /// left before the oldest of them are gone.
    pub fn aged_keys(&self) -> usize {
        self.ages.iter().map(|a| a.keys.len() - a.cursor).sum()
    }

    /// The increments the backend's state rests on, oldest first.
    pub fn chain_checkpoints(&self) -> impl Iterator<Item = CheckpointId> + '_ {
        self.ages.iter().map(|a| a.checkpoint)
    }

    /// Forgets the chain the state was restored from: its next snapshot must be a full one
    /// (after a rescale, the state comes from other subtasks' chains).
    pub fn forget_chain(&mut self) {
        self.ages.clear();
    }

    /// Records that `checkpoint`'s increment wrote `keys` with content.
    pub(super) fn age(&mut self, checkpoint: CheckpointId, keys: Vec<AgedKey>) {
        self.ages.push_back(AgedIncrement {
            checkpoint,
            keys,
            cursor: 0,
        });
    }
}

/// Re-writes `aged` if its latest version still lives in `oldest` or before; returns the
/// number of elements re-written.
fn rewrite(
    tables: &mut Tables,
    aged: &AgedKey,
    oldest: CheckpointId,
    epoch: CheckpointId,
) -> usize {
    let offset = aged.offset as usize;
    match tables {
        Tables::Value(tables) => rewrite_in(
            &mut tables[offset],
            aged,
            epoch,
            |e: &ValueBody, written_in| (e.is_some() && written_in <= oldest).then_some(1),
            |_| {},
        ),
        Tables::Map(tables) => rewrite_in(
            &mut tables[offset],
            aged,
            epoch,
            |map: &MapBody, _| {
                map.entries
                    .values()
                    .any(|v| v.value.is_some() && v.written_in <= oldest)
                    .then_some(map.live)
            },
            |map: &mut MapBody| map.rewrite(epoch),
        ),
        Tables::List(tables) => rewrite_in(
            &mut tables[offset],
            aged,
            epoch,
            |list: &ListBody, _| {
                (!list.items.is_empty() && list.oldest <= oldest).then_some(list.items.len())
            },
            ListBody::rewrite,
        ),
    }
}

/// Marks `aged`'s entry dirty and applies `then` to its body if `live` says it lives in the
/// oldest increments (and how many elements re-writing it costs).
fn rewrite_in<T: Pin>(
    table: &mut KeyedTable<T>,
    aged: &AgedKey,
    epoch: CheckpointId,
    live: impl FnOnce(&T, CheckpointId) -> Option<usize>,
    then: impl FnOnce(&mut T),
) -> usize {
    let hash = hash_key(&aged.key);
    let Some(entry) = table.get(&aged.key, hash) else {
        return 0;
    };
    let Some(cost) = live(&entry.body, entry.written_in) else {
        return 0;
    };
    if let Some(entry) = table.write_existing(&aged.key, hash, epoch) {
        then(&mut entry.body);
    }
    cost
}
