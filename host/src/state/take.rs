//! The synchronous phase of a snapshot: [`KeyedStateBackend::snapshot`].

use super::backend::Tables;
use super::list::ListBody;
use super::map::MapBody;
use super::snapshot::{Change, GroupIncrement, Increment, StateChanges};
use super::table::KeyedTable;
use super::value::ValueBody;
use super::{KeyedStateBackend, StateBytes, StateKind};
use crate::ids::CheckpointId;
use crate::partition::{KeyGroupRange, hash_key};

impl KeyedStateBackend {
    /// Takes the changes since the previous snapshot as the increment of the current epoch's
    /// checkpoint, and starts the next epoch.
    ///
    /// Costs O(dirty keys): only the dirty lists are walked, and values are pinned by
    /// reference. Removed values and emptied maps and lists leave the tables here, once the
    /// increment records their removal.
    pub fn snapshot(&mut self) -> Increment {
        let checkpoint = self.epoch;
        let range = self.range();
        let per_state: Vec<_> = self
            .states
            .iter_mut()
            .map(|state| {
                let per_group: Vec<Vec<Change>> = match &mut state.tables {
                    Tables::Value(tables) => tables.iter_mut().map(take_values).collect(),
                    Tables::Map(tables) => tables.iter_mut().map(take_maps).collect(),
                    Tables::List(tables) => tables.iter_mut().map(take_lists).collect(),
                };
                (state.name.clone(), state.tables.kind(), per_group)
            })
            .collect();
        let groups = by_group(range, per_state);
        self.epoch = CheckpointId(checkpoint.0 + 1);
        Increment { checkpoint, groups }
    }

    /// [`Self::snapshot`] as the increment of `checkpoint`, which must come after every
    /// checkpoint this backend has snapshotted or restored: checkpoint ids are the
    /// coordinator's, and may skip numbers (after a restore, for one).
    pub fn snapshot_for(&mut self, checkpoint: CheckpointId) -> Increment {
        debug_assert!(checkpoint >= self.epoch, "checkpoint ids only grow");
        self.epoch = checkpoint.max(self.epoch);
        self.snapshot()
    }

    /// A full snapshot as checkpoint `checkpoint`: every live entry, each map and list marked
    /// cleared, so that the artifact alone rebuilds the state and starts a new chain. Costs
    /// O(state), and pins values by reference like an incremental snapshot.
    pub fn snapshot_full(&mut self, checkpoint: CheckpointId) -> Increment {
        // Take the dirty sets first: that drops tombstones and starts the next epoch.
        let increment = self.snapshot_for(checkpoint);
        let per_state: Vec<_> = self
            .states
            .iter()
            .map(|state| {
                let per_group: Vec<Vec<Change>> = match &state.tables {
                    Tables::Value(tables) => tables.iter().map(full_values).collect(),
                    Tables::Map(tables) => tables.iter().map(full_maps).collect(),
                    Tables::List(tables) => tables.iter().map(full_lists).collect(),
                };
                (state.name.clone(), state.tables.kind(), per_group)
            })
            .collect();
        let groups = by_group(self.range(), per_state);
        Increment {
            checkpoint: increment.checkpoint,
            groups,
        }
    }
}

/// Regroups per-state, per-group changes by key group, leaving out empty groups.
fn by_group(
    range: KeyGroupRange,
    per_state: Vec<(String, StateKind, Vec<Vec<Change>>)>,
) -> Vec<GroupIncrement> {
    let mut groups: Vec<GroupIncrement> = range
        .iter()
        .map(|group| GroupIncrement {
            group,
            states: Vec::new(),
        })
        .collect();
    for (name, kind, per_group) in per_state {
        for (offset, changes) in per_group.into_iter().enumerate() {
            if !changes.is_empty() {
                groups[offset].states.push(StateChanges {
                    name: name.clone(),
                    kind,
                    changes,
                });
            }
        }
    }
    groups.retain(|g| !g.states.is_empty());
    groups
}

fn full_values(table: &KeyedTable<ValueBody>) -> Vec<Change> {
    table
        .iter()
        .filter_map(|e| {
            let value = e.body.clone()?;
            Some(Change::Value {
                key: e.key.clone(),
                value: Some(value),
            })
        })
        .collect()
}

fn full_maps(table: &KeyedTable<MapBody>) -> Vec<Change> {
    table
        .iter()
        .map(|e| Change::Map {
            key: e.key.clone(),
            cleared: true,
            entries: e
                .body
                .entries
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), Some(v.value.clone()?))))
                .collect(),
        })
        .collect()
}

fn full_lists(table: &KeyedTable<ListBody>) -> Vec<Change> {
    table
        .iter()
        .map(|e| Change::List {
            key: e.key.clone(),
            cleared: true,
            appended: e.body.items.clone(),
        })
        .collect()
}

/// Walks the dirty entries of `table` in memory order, turning each into a [`Change`] with
/// `change`, which also says whether the entry can leave the table (a tombstone, an emptied
/// map or list). Removals happen after the walk, since a removal moves another entry.
fn take_changes<T>(
    table: &mut KeyedTable<T>,
    mut change: impl FnMut(StateBytes, &mut T) -> (Change, bool),
) -> Vec<Change> {
    let dirty = table.take_dirty();
    let mut changes = Vec::with_capacity(dirty.len());
    let mut removed = Vec::new();
    for position in dirty {
        let Some(entry) = table.entry_at_mut(position as usize) else {
            continue;
        };
        let key = entry.key.clone();
        let (c, remove) = change(key.clone(), &mut entry.body);
        if remove {
            removed.push(key);
        }
        changes.push(c);
    }
    for key in removed {
        table.remove(&key, hash_key(&key));
    }
    changes
}

fn take_values(table: &mut KeyedTable<ValueBody>) -> Vec<Change> {
    take_changes(table, |key, value| {
        let value = value.clone();
        // A tombstone goes into the increment; the table no longer needs it.
        let remove = value.is_none();
        (Change::Value { key, value }, remove)
    })
}

fn take_maps(table: &mut KeyedTable<MapBody>) -> Vec<Change> {
    take_changes(table, |key, map| {
        let entries = std::mem::take(&mut map.changed)
            .into_iter()
            .map(|map_key| {
                let value = map.entries.get(&map_key[..]).and_then(|v| v.value.clone());
                (map_key, value)
            })
            .collect();
        let cleared = std::mem::take(&mut map.cleared);
        map.entries.retain(|_, v| v.value.is_some());
        let change = Change::Map {
            key,
            cleared,
            entries,
        };
        (change, map.entries.is_empty())
    })
}

fn take_lists(table: &mut KeyedTable<ListBody>) -> Vec<Change> {
    take_changes(table, |key, list| {
        let appended = list.items[list.persisted..].to_vec();
        list.persisted = list.items.len();
        let cleared = std::mem::take(&mut list.cleared);
        let change = Change::List {
            key,
            cleared,
            appended,
        };
        (change, list.items.is_empty())
    })
}
