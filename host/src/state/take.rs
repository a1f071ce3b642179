//! The synchronous phase of a snapshot: [`KeyedStateBackend::snapshot`].

use super::KeyedStateBackend;
use super::backend::Tables;
use super::list::ListBody;
use super::map::MapBody;
use super::snapshot::{Change, GroupIncrement, Increment, StateChanges};
use super::table::KeyedTable;
use super::value::ValueBody;
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

fn take_values(table: &mut KeyedTable<ValueBody>) -> Vec<Change> {
    let dirty = table.take_dirty();
    let mut changes = Vec::with_capacity(dirty.len());
    for key in dirty {
        let hash = hash_key(&key);
        let value = table.get(&key, hash).and_then(|e| e.body.clone());
        if value.is_none() {
            // The tombstone goes into the increment; the table no longer needs it.
            table.remove(&key, hash);
        }
        changes.push(Change::Value { key, value });
    }
    changes
}

fn take_maps(table: &mut KeyedTable<MapBody>) -> Vec<Change> {
    let dirty = table.take_dirty();
    let mut changes = Vec::with_capacity(dirty.len());
    for key in dirty {
        let hash = hash_key(&key);
        let Some(position) = table.position(&key, hash) else {
            continue;
        };
        let Some(entry) = table.entry_at_mut(position) else {
            continue;
        };
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
        let empty = map.entries.is_empty();
        changes.push(Change::Map {
            key: key.clone(),
            cleared,
            entries,
        });
        if empty {
            table.remove(&key, hash);
        }
    }
    changes
}

fn take_lists(table: &mut KeyedTable<ListBody>) -> Vec<Change> {
    let dirty = table.take_dirty();
    let mut changes = Vec::with_capacity(dirty.len());
    for key in dirty {
        let hash = hash_key(&key);
        let Some(position) = table.position(&key, hash) else {
            continue;
        };
        let Some(entry) = table.entry_at_mut(position) else {
            continue;
        };
        let list = &mut entry.body;
        let appended = list.items[list.persisted..].to_vec();
        list.persisted = list.items.len();
        let cleared = std::mem::take(&mut list.cleared);
        let empty = list.items.is_empty();
        changes.push(Change::List {
            key: key.clone(),
            cleared,
            appended,
        });
        if empty {
            table.remove(&key, hash);
        }
    }
    changes
}
