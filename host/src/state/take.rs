//! The synchronous phase of a snapshot: [`KeyedStateBackend::snapshot`].

use super::backend::Tables;
use super::list::ListBody;
use super::map::MapBody;
use super::snapshot::{Change, GroupIncrement, Increment, StateChanges};
use super::table::KeyedTable;
use super::value::ValueBody;
use super::{KeyedStateBackend, StateBytes};
use crate::ids::CheckpointId;
use crate::partition::hash_key;

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
        let mut groups: Vec<GroupIncrement> = range
            .iter()
            .map(|group| GroupIncrement {
                group,
                states: Vec::new(),
            })
            .collect();
        for state in &mut self.states {
            let per_group: Vec<Vec<Change>> = match &mut state.tables {
                Tables::Value(tables) => tables.iter_mut().map(take_values).collect(),
                Tables::Map(tables) => tables.iter_mut().map(take_maps).collect(),
                Tables::List(tables) => tables.iter_mut().map(take_lists).collect(),
            };
            for (offset, changes) in per_group.into_iter().enumerate() {
                if !changes.is_empty() {
                    groups[offset].states.push(StateChanges {
                        name: state.name.clone(),
                        kind: state.tables.kind(),
                        changes,
                    });
                }
            }
        }
        groups.retain(|g| !g.states.is_empty());
        self.epoch = CheckpointId(checkpoint.0 + 1);
        Increment { checkpoint, groups }
    }
}

/// Removes the entries of `keys` (after a snapshot recorded their removal). Done after the
/// walk over dirty positions, since a removal moves another entry.
fn remove_all<T>(table: &mut KeyedTable<T>, keys: Vec<StateBytes>) {
    for key in keys {
        table.remove(&key, hash_key(&key));
    }
}

fn take_values(table: &mut KeyedTable<ValueBody>) -> Vec<Change> {
    let dirty = table.take_dirty();
    let mut changes = Vec::with_capacity(dirty.len());
    let mut removed = Vec::new();
    for position in dirty {
        let Some(entry) = table.entry_at(position as usize) else {
            continue;
        };
        let key = entry.key.clone();
        let value = entry.body.clone();
        if value.is_none() {
            // The tombstone goes into the increment; the table no longer needs it.
            removed.push(key.clone());
        }
        changes.push(Change::Value { key, value });
    }
    remove_all(table, removed);
    changes
}

fn take_maps(table: &mut KeyedTable<MapBody>) -> Vec<Change> {
    let dirty = table.take_dirty();
    let mut changes = Vec::with_capacity(dirty.len());
    let mut emptied = Vec::new();
    for position in dirty {
        let Some(entry) = table.entry_at_mut(position as usize) else {
            continue;
        };
        let key = entry.key.clone();
        let map = &mut entry.body;
        let entries = std::mem::take(&mut map.changed)
            .into_iter()
            .map(|map_key| {
                let value = map.entries.get(&map_key[..]).and_then(|v| v.value.clone());
                (map_key, value)
            })
            .collect();
        let cleared = std::mem::take(&mut map.cleared);
        map.entries.retain(|_, v| v.value.is_some());
        if map.entries.is_empty() {
            emptied.push(key.clone());
        }
        changes.push(Change::Map {
            key,
            cleared,
            entries,
        });
    }
    remove_all(table, emptied);
    changes
}

fn take_lists(table: &mut KeyedTable<ListBody>) -> Vec<Change> {
    let dirty = table.take_dirty();
    let mut changes = Vec::with_capacity(dirty.len());
    let mut emptied = Vec::new();
    for position in dirty {
        let Some(entry) = table.entry_at_mut(position as usize) else {
            continue;
        };
        let key = entry.key.clone();
        let list = &mut entry.body;
        let appended = list.items[list.persisted..].to_vec();
        list.persisted = list.items.len();
        let cleared = std::mem::take(&mut list.cleared);
        if list.items.is_empty() {
            emptied.push(key.clone());
        }
        changes.push(Change::List {
            key,
            cleared,
            appended,
        });
    }
    remove_all(table, emptied);
    changes
}
