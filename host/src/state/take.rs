//! The synchronous phase of a snapshot: [`KeyedStateBackend::snapshot`].

use super::aging::AgedKey;
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
        // One vector sized once: at a million dirty keys, growing it by doubling cost more
        // than filling it (copies and fresh pages).
        let mut aged = Vec::with_capacity(self.stats().dirty_keys);
        let per_state: Vec<_> = self
            .states
            .iter_mut()
            .enumerate()
            .map(|(index, state)| {
                let aged = &mut aged;
                let per_group: Vec<Vec<Change>> = match &mut state.tables {
                    Tables::Value(tables) => (tables.iter_mut().enumerate())
                        .map(|(offset, t)| take_values(t, Aged::at(aged, index, offset)))
                        .collect(),
                    Tables::Map(tables) => (tables.iter_mut().enumerate())
                        .map(|(offset, t)| take_maps(t, Aged::at(aged, index, offset)))
                        .collect(),
                    Tables::List(tables) => (tables.iter_mut().enumerate())
                        .map(|(offset, t)| take_lists(t, Aged::at(aged, index, offset), checkpoint))
                        .collect(),
                };
                (state.name.clone(), state.tables.kind(), per_group)
            })
            .collect();
        let groups = by_group(range, per_state);
        self.epoch = CheckpointId(checkpoint.0 + 1);
        if !groups.is_empty() {
            self.age(checkpoint, aged);
        }
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
        // The full snapshot alone holds the state now: it is the whole chain.
        self.ages.clear();
        if !groups.is_empty() {
            let keys = self.live_keys();
            self.age(increment.checkpoint, keys);
        }
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

/// Where a table's keys that still have content after a snapshot go (the increment holds
/// their latest version): the aged keys of the increment, with the table's place.
struct Aged<'a> {
    keys: &'a mut Vec<AgedKey>,
    state: u32,
    offset: u32,
}

impl<'a> Aged<'a> {
    fn at(keys: &'a mut Vec<AgedKey>, state: usize, offset: usize) -> Self {
        Self {
            keys,
            state: state as u32,
            offset: offset as u32,
        }
    }
}

/// Dirty entries whose out-of-line contents are loaded into cache at once, ahead of pinning
/// them.
const TOUCH_AHEAD: usize = 32;

/// Walks the dirty entries of `table` in memory order, turning each into a [`Change`] with
/// `change`, which also says whether the entry can leave the table (a tombstone, an emptied
/// map or list). Removals happen after the walk, since a removal moves another entry.
///
/// Pinning a long value bumps its reference count, which lies in the value's own allocation,
/// somewhere in memory: one cache miss per key, one after the other. Every [`TOUCH_AHEAD`]
/// keys, `touch` first reads what the next ones hold out of line, so that those misses
/// overlap (as [`KeyedStateBackend::warm`] does for a batch's lookups).
fn take_changes<T>(
    table: &mut KeyedTable<T>,
    aged: Aged<'_>,
    touch: impl Fn(&T) -> u64,
    mut change: impl FnMut(StateBytes, &mut T) -> (Change, bool),
) -> Vec<Change> {
    let dirty = table.take_dirty();
    let mut changes = Vec::with_capacity(dirty.len());
    let mut removed = Vec::new();
    for (i, &position) in dirty.iter().enumerate() {
        if i % TOUCH_AHEAD == 0 {
            let touched = dirty[i..]
                .iter()
                .take(TOUCH_AHEAD)
                .filter_map(|&p| table.entry_at(p as usize))
                .fold(0, |acc, e| acc ^ touch(&e.body));
            std::hint::black_box(touched);
        }
        let Some(entry) = table.entry_at_mut(position as usize) else {
            continue;
        };
        let key = entry.key.clone();
        let (c, remove) = change(key.clone(), &mut entry.body);
        if remove {
            removed.push(key);
        } else {
            aged.keys.push(AgedKey {
                state: aged.state,
                offset: aged.offset,
                key,
            });
        }
        changes.push(c);
    }
    for key in removed {
        table.remove(&key, hash_key(&key));
    }
    changes
}

fn take_values(table: &mut KeyedTable<ValueBody>, aged: Aged<'_>) -> Vec<Change> {
    let touch = |value: &ValueBody| value.as_ref().map_or(0, StateBytes::touch);
    take_changes(table, aged, touch, |key, value| {
        let value = value.clone();
        // A tombstone goes into the increment; the table no longer needs it.
        let remove = value.is_none();
        (Change::Value { key, value }, remove)
    })
}

fn take_maps(table: &mut KeyedTable<MapBody>, aged: Aged<'_>) -> Vec<Change> {
    take_changes(
        table,
        aged,
        |map| map.entries.touch(),
        |key, map| {
            // A changed key that is gone was put and removed since the last snapshot: the
            // chain never held it (`MapValue::persisted`).
            let entries = std::mem::take(&mut map.changed)
                .into_iter()
                .filter_map(|map_key| {
                    let slot = map.entries.get_mut(&map_key[..])?;
                    slot.persisted = slot.value.is_some();
                    let value = slot.value.clone();
                    Some((map_key, value))
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
        },
    )
}

fn take_lists(
    table: &mut KeyedTable<ListBody>,
    aged: Aged<'_>,
    checkpoint: CheckpointId,
) -> Vec<Change> {
    take_changes(
        table,
        aged,
        |_| 0,
        |key, list| {
            let appended = list.items[list.persisted..].to_vec();
            if list.persisted == 0 && !appended.is_empty() {
                list.oldest = checkpoint;
            }
            list.persisted = list.items.len();
            let cleared = std::mem::take(&mut list.cleared);
            let change = Change::List {
                key,
                cleared,
                appended,
            };
            (change, list.items.is_empty())
        },
    )
}

impl KeyedStateBackend {
    /// Every key with content, as aged keys of one increment (a full snapshot).
    fn live_keys(&self) -> Vec<AgedKey> {
        fn keys<T>(
            state: usize,
            tables: &[KeyedTable<T>],
            live: impl Fn(&T) -> bool,
            out: &mut Vec<AgedKey>,
        ) {
            for (offset, table) in tables.iter().enumerate() {
                out.extend(table.iter().filter(|e| live(&e.body)).map(|e| AgedKey {
                    state: state as u32,
                    offset: offset as u32,
                    key: e.key.clone(),
                }));
            }
        }
        let mut out = Vec::new();
        for (i, state) in self.states.iter().enumerate() {
            match &state.tables {
                Tables::Value(t) => keys(i, t, Option::is_some, &mut out),
                Tables::Map(t) => keys(i, t, |m| m.live > 0, &mut out),
                Tables::List(t) => keys(i, t, |l| !l.items.is_empty(), &mut out),
            }
        }
        out
    }
}
