//! Taking a snapshot: [`KeyedStateBackend::freeze`] (its synchronous phase), then
//! [`KeyedStateBackend::pin_frozen`]; [`KeyedStateBackend::snapshot`] does both at once.

use super::aging::AgedKey;
use super::backend::Tables;
use super::frozen::Pin;
use super::list::ListBody;
use super::map::MapBody;
use super::snapshot::{Change, GroupIncrement, Increment, StateChanges};
use super::table::KeyedTable;
use super::value::ValueBody;
use super::{KeyedStateBackend, StateKind};
use crate::ids::CheckpointId;
use crate::partition::KeyGroupRange;

/// Frozen entries a subtask pins between two batches ([`KeyedStateBackend::pin_frozen`]):
/// under a millisecond of work (a million keys pin in 70 – 90 ms on a 2-core VM), so that
/// pinning a million dirty keys delays no batch by more.
pub const PIN_STEP: usize = 8192;

/// A snapshot frozen and not yet wholly pinned: where the walk is, and what it gathered.
#[derive(Debug)]
pub(super) struct Pinning {
    checkpoint: CheckpointId,
    /// The next table to walk: its state, and its key group's offset in the range.
    state: usize,
    offset: usize,
    /// Per state, per key group: the changes of the tables walked.
    per_state: Vec<Vec<Vec<Change>>>,
    /// The keys pinned with content: the increment's aged keys.
    aged: Vec<AgedKey>,
    /// Keys frozen: `aged` is sized once, by the first pin (at a million dirty keys, growing
    /// it by doubling cost more than filling it: copies and fresh pages).
    dirty: usize,
}

impl KeyedStateBackend {
    /// Takes the changes since the previous snapshot as the increment of the current epoch's
    /// checkpoint, and starts the next epoch: [`Self::freeze`], then every frozen entry
    /// pinned at once.
    pub fn snapshot(&mut self) -> Increment {
        self.freeze(self.epoch);
        self.pin_frozen(usize::MAX)
            .expect("an unbounded walk pins every frozen entry")
    }

    /// The synchronous phase of a snapshot as `checkpoint`, which must come after every
    /// checkpoint this backend has snapshotted or restored: freezes the changes since the
    /// previous snapshot as its increment and starts the next epoch. Costs O(states × key
    /// groups), whatever the number of dirty keys; [`Self::pin_frozen`] then pins them, a
    /// step at a time, and a write to a frozen entry not pinned yet pins it first
    /// (`state::frozen`).
    ///
    /// Panics if the previous snapshot is not wholly pinned yet.
    pub fn freeze(&mut self, checkpoint: CheckpointId) {
        assert!(
            self.pinning.is_none(),
            "a snapshot was frozen before the previous one was pinned"
        );
        debug_assert!(checkpoint >= self.epoch, "checkpoint ids only grow");
        let checkpoint = checkpoint.max(self.epoch);
        let since = self.dirty_since;
        let dirty = self.stats().dirty_keys;
        let groups = self.range().len();
        for state in &mut self.states {
            match &mut state.tables {
                Tables::Value(t) => t.iter_mut().for_each(|t| t.freeze(since, checkpoint)),
                Tables::Map(t) => t.iter_mut().for_each(|t| t.freeze(since, checkpoint)),
                Tables::List(t) => t.iter_mut().for_each(|t| t.freeze(since, checkpoint)),
            }
        }
        self.pinning = Some(Pinning {
            checkpoint,
            state: 0,
            offset: 0,
            per_state: vec![vec![Vec::new(); groups]; self.states.len()],
            aged: Vec::new(),
            dirty,
        });
        self.epoch = CheckpointId(checkpoint.0 + 1);
        self.dirty_since = self.epoch;
    }

    /// Whether a frozen snapshot awaits [`Self::pin_frozen`].
    pub fn is_pinning(&self) -> bool {
        self.pinning.is_some()
    }

    /// Pins up to about `budget` frozen entries, in memory order table by table; returns the
    /// increment once every frozen entry is pinned, `None` while some are left (or nothing is
    /// frozen). Values are pinned by reference; the entries pinned empty (tombstones, emptied
    /// maps and lists) leave their table as its walk ends, unless written again since.
    pub fn pin_frozen(&mut self, budget: usize) -> Option<Increment> {
        let pinning = self.pinning.as_mut()?;
        if pinning.aged.capacity() == 0 {
            pinning.aged.reserve_exact(pinning.dirty);
        }
        let mut spent = 0;
        while let Some(state) = self.states.get_mut(pinning.state) {
            let (index, offset) = (pinning.state as u32, pinning.offset);
            let aged = Aged {
                keys: &mut pinning.aged,
                state: index,
                offset: offset as u32,
            };
            let left = budget - spent;
            let walk = match &mut state.tables {
                Tables::Value(t) => t.get_mut(offset).map(|t| walk(t, left, aged)),
                Tables::Map(t) => t.get_mut(offset).map(|t| walk(t, left, aged)),
                Tables::List(t) => t.get_mut(offset).map(|t| walk(t, left, aged)),
            };
            match walk {
                None => {
                    pinning.state += 1;
                    pinning.offset = 0;
                }
                Some((visited, Some(changes))) => {
                    spent += visited;
                    // A state declared since the freeze (the timers' state, at the first
                    // timer) has nothing frozen.
                    if !changes.is_empty() {
                        pinning.per_state[index as usize][offset] = changes;
                    }
                    pinning.offset += 1;
                }
                Some((_, None)) => return None,
            }
        }
        let pinning = self.pinning.take()?;
        let per_state: Vec<_> = (self.states.iter().zip(pinning.per_state))
            .map(|(state, per_group)| (state.name.clone(), state.tables.kind(), per_group))
            .collect();
        let groups = by_group(self.range(), per_state);
        if !groups.is_empty() {
            self.age(pinning.checkpoint, pinning.aged);
        }
        Some(Increment {
            checkpoint: pinning.checkpoint,
            groups,
        })
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

/// Walks `table`'s frozen entries for up to `budget` of them; once the walk of the table is
/// over, also returns its changes (empty if nothing was frozen there).
fn walk<T: Pin>(
    table: &mut KeyedTable<T>,
    budget: usize,
    aged: Aged<'_>,
) -> (usize, Option<Vec<Change>>) {
    let (state, offset) = (aged.state, aged.offset);
    let keys = aged.keys;
    let age = |key| AgedKey { state, offset, key };
    let visited = table.walk_frozen(budget, &mut |key| keys.push(age(key)));
    if !table.walked() {
        return (visited, None);
    }
    let Some(frozen) = table.unfreeze() else {
        return (visited, Some(Vec::new()));
    };
    // Keys a write pinned before the walk reached them.
    keys.extend(frozen.kept.into_iter().map(age));
    (visited, Some(frozen.changes))
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
