//! Rebuilding state from increments: [`KeyedStateBackend::restoring`] and
//! [`KeyedStateBackend::restore`].
//!
//! A restore applies a chain's increments oldest first, each as one or more batches of
//! key-group sections (the reader decodes a bounded window of an artifact at a time, so a
//! restore never holds a whole chain, or a whole artifact, decoded in memory). Every (state,
//! key group) pair has its own table, so the groups of a batch are applied side by side, one
//! share per core; what spans groups (the registry of states, the chain's aged keys, the live
//! byte count, the timer index) is done once, before or after.

use std::num::NonZeroUsize;

use super::aging::AgedKey;
use super::backend::Tables;
use super::list::ListBody;
use super::map::{MapBody, MapValue};
use super::snapshot::{Change, GroupIncrement, Increment, StateChanges};
use super::table::KeyedTable;
use super::value::ValueBody;
use super::{KeyedStateBackend, StateBytes, StateError, StateKind};
use crate::ids::CheckpointId;
use crate::partition::hash_key;

impl KeyedStateBackend {
    /// Applies one whole increment of a chain, oldest first: [`Self::restoring`] with one
    /// batch. Key groups outside this subtask's range are skipped, which is how a rescaled
    /// subtask takes only its share. Restored entries are not dirty: they are already in the
    /// chain. The next writes belong to the checkpoint after the newest one restored.
    ///
    /// It copies the increment's changes to apply them; a restore from storage hands its
    /// decoded windows over instead (`checkpoint::storage::restore_chain`).
    pub fn restore(&mut self, increment: &Increment) -> Result<(), StateError> {
        let mut restoring = self.restoring()?;
        restoring.apply(increment.checkpoint, increment.groups.clone())
    }

    /// Starts a restore, to which a reader hands an increment's key groups batch by batch
    /// ([`Restoring::apply`]); the restore ends when the guard is dropped.
    ///
    /// Only a backend without unsnapshotted writes (nor a snapshot being pinned) can be
    /// restored into: restoring removes entries, which would move the entries its dirty
    /// lists point at.
    pub fn restoring(&mut self) -> Result<Restoring<'_>, StateError> {
        if self.stats().dirty_keys > 0 || self.is_pinning() {
            return Err(StateError::RestoreOverWrites);
        }
        Ok(Restoring {
            backend: self,
            open: None,
        })
    }
}

/// A restore under way ([`KeyedStateBackend::restoring`]). Dropping it ends the restore:
/// the last increment's keys join the chain's aged keys, the live bytes are counted once for
/// the whole chain, and the timer index is rebuilt on its next use.
#[derive(Debug)]
pub struct Restoring<'a> {
    backend: &'a mut KeyedStateBackend,
    /// The increment being applied and the keys it left with content so far.
    open: Option<(CheckpointId, Vec<AgedKey>)>,
}

impl Restoring<'_> {
    /// Applies `groups`, a batch of the key groups of `checkpoint`'s increment (in the
    /// increment's order; an increment's batches in a row, increments oldest first).
    pub fn apply(
        &mut self,
        checkpoint: CheckpointId,
        groups: Vec<GroupIncrement>,
    ) -> Result<(), StateError> {
        if self
            .open
            .as_ref()
            .is_some_and(|(open, _)| *open != checkpoint)
        {
            self.close_increment();
        }
        let backend = &mut *self.backend;
        let range = backend.range();
        // The registry of states is shared by every group: declare what the batch names first.
        let mut work: Vec<GroupWork> = Vec::with_capacity(groups.len());
        for group in groups {
            let Some(offset) = range.offset(group.group) else {
                continue;
            };
            let mut states = Vec::with_capacity(group.states.len());
            for changes in group.states {
                let id = backend.declare_new(&changes.name, changes.kind)?;
                states.push((id.0, changes));
            }
            work.push(GroupWork {
                offset,
                states,
                tables: Vec::new(),
            });
        }
        // Hand each group the tables of its key group, in every state: disjoint borrows.
        let mut by_offset: Vec<Vec<(u32, TableMut<'_>)>> =
            (0..range.len()).map(|_| Vec::new()).collect();
        for (id, state) in backend.states.iter_mut().enumerate() {
            let id = id as u32;
            match &mut state.tables {
                Tables::Value(tables) => {
                    for (offset, t) in tables.iter_mut().enumerate() {
                        by_offset[offset].push((id, TableMut::Value(t)));
                    }
                }
                Tables::Map(tables) => {
                    for (offset, t) in tables.iter_mut().enumerate() {
                        by_offset[offset].push((id, TableMut::Map(t)));
                    }
                }
                Tables::List(tables) => {
                    for (offset, t) in tables.iter_mut().enumerate() {
                        by_offset[offset].push((id, TableMut::List(t)));
                    }
                }
            }
        }
        for group in &mut work {
            group.tables = std::mem::take(&mut by_offset[group.offset]);
        }
        let aged = apply_side_by_side(work, checkpoint)?;
        match &mut self.open {
            Some((_, keys)) => keys.extend(aged),
            None => self.open = Some((checkpoint, aged)),
        }
        let backend = &mut *self.backend;
        if backend.epoch <= checkpoint {
            // Saturating: the id is as read from the artifact.
            backend.epoch = CheckpointId(checkpoint.0.saturating_add(1));
        }
        // Restored entries are not dirty: written in `checkpoint` or before.
        backend.dirty_since = backend.dirty_since.max(backend.epoch);
        Ok(())
    }

    /// The open increment's keys join the chain's aged keys.
    fn close_increment(&mut self) {
        if let Some((checkpoint, keys)) = self.open.take() {
            self.backend.age(checkpoint, keys);
        }
    }
}

impl Drop for Restoring<'_> {
    fn drop(&mut self) {
        self.close_increment();
        self.backend.recount_live_bytes();
        self.backend.timers_changed();
    }
}

/// One key group of a batch: its changes per state, and that group's table in each state.
struct GroupWork<'t> {
    offset: usize,
    states: Vec<(u32, StateChanges)>,
    tables: Vec<(u32, TableMut<'t>)>,
}

impl GroupWork<'_> {
    /// Applies the group's changes; the keys left with content join `aged`.
    fn apply(self, checkpoint: CheckpointId, aged: &mut Vec<AgedKey>) -> Result<(), StateError> {
        let GroupWork {
            offset,
            states,
            mut tables,
        } = self;
        for (id, changes) in states {
            let Some(table) = tables.iter_mut().find(|(t, _)| *t == id).map(|(_, t)| t) else {
                // Declared before the tables were lent out: every state has a table here.
                return Err(StateError::UnknownState(id));
            };
            table.presize(changes.changes.len());
            let kind = changes.kind;
            for change in changes.changes {
                if let Some(key) = apply(table, checkpoint, change, kind)? {
                    aged.push(AgedKey {
                        state: id,
                        offset: offset as u32,
                        key,
                    });
                }
            }
        }
        Ok(())
    }

    /// Roughly how much work the group is: its changes.
    fn weight(&self) -> usize {
        self.states.iter().map(|(_, c)| c.changes.len()).sum()
    }
}

/// Applies the groups of a batch, split into one share per core (by their number of
/// changes) when there is enough work to split.
fn apply_side_by_side(
    mut work: Vec<GroupWork<'_>>,
    checkpoint: CheckpointId,
) -> Result<Vec<AgedKey>, StateError> {
    let total: usize = work.iter().map(GroupWork::weight).sum();
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let shares = cores
        .min(work.len())
        .min(total / MIN_CHANGES_PER_SHARE)
        .max(1);
    if shares == 1 {
        return apply_run(work, checkpoint);
    }
    // Consecutive runs of groups of about equal weight, so that the aged keys keep the
    // increment's order.
    let per_share = total.div_ceil(shares);
    let mut runs: Vec<Vec<GroupWork<'_>>> = Vec::with_capacity(shares);
    let mut weight = 0;
    for group in work.drain(..) {
        if runs.is_empty() || (weight >= per_share && runs.len() < shares) {
            runs.push(Vec::new());
            weight = 0;
        }
        weight += group.weight();
        if let Some(run) = runs.last_mut() {
            run.push(group);
        }
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .into_iter()
            .map(|run| scope.spawn(move || apply_run(run, checkpoint)))
            .collect();
        let mut aged = Vec::with_capacity(total);
        for handle in handles {
            match handle.join() {
                Ok(share) => aged.extend(share?),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(aged)
    })
}

/// Applies a run of groups in order; returns the keys left with content, in a vector sized
/// once (a batch's keys are a million at times).
fn apply_run(
    run: Vec<GroupWork<'_>>,
    checkpoint: CheckpointId,
) -> Result<Vec<AgedKey>, StateError> {
    let mut aged = Vec::with_capacity(run.iter().map(GroupWork::weight).sum());
    for group in run {
        group.apply(checkpoint, &mut aged)?;
    }
    Ok(aged)
}

/// Below this many changes a batch is applied on the calling thread: a thread costs more.
const MIN_CHANGES_PER_SHARE: usize = 4096;

/// One (state, key group) table, whatever its kind.
enum TableMut<'t> {
    Value(&'t mut KeyedTable<ValueBody>),
    Map(&'t mut KeyedTable<MapBody>),
    List(&'t mut KeyedTable<ListBody>),
}

impl TableMut<'_> {
    fn presize(&mut self, entries: usize) {
        match self {
            TableMut::Value(t) => t.presize(entries),
            TableMut::Map(t) => t.presize(entries),
            TableMut::List(t) => t.presize(entries),
        }
    }

    fn kind(&self) -> StateKind {
        match self {
            TableMut::Value(_) => StateKind::Value,
            TableMut::Map(_) => StateKind::Map,
            TableMut::List(_) => StateKind::List,
        }
    }
}

/// Applies one change; returns the key if it has content afterwards (the increment holds its
/// latest version).
fn apply(
    table: &mut TableMut<'_>,
    checkpoint: CheckpointId,
    change: Change,
    kind: StateKind,
) -> Result<Option<StateBytes>, StateError> {
    match (table, change) {
        (TableMut::Value(table), Change::Value { key, value }) => {
            let hash = hash_key(&key);
            match value {
                Some(value) => {
                    table.restore(&key, hash, checkpoint, || None).body = Some(value);
                    Ok(Some(key))
                }
                None => {
                    table.remove(&key, hash);
                    Ok(None)
                }
            }
        }
        (
            TableMut::Map(table),
            Change::Map {
                key,
                cleared,
                entries,
            },
        ) => {
            let hash = hash_key(&key);
            let map = &mut table.restore(&key, hash, checkpoint, Default::default).body;
            if cleared {
                map.entries.clear();
            }
            for (map_key, value) in entries {
                match value {
                    Some(value) => {
                        map.entries.insert(
                            map_key,
                            MapValue {
                                value: Some(value),
                                written_in: checkpoint,
                                persisted: true,
                            },
                        );
                    }
                    None => {
                        map.entries.remove(&map_key[..]);
                    }
                }
            }
            map.live = map.entries.len();
            if map.entries.is_empty() {
                table.remove(&key, hash);
                return Ok(None);
            }
            Ok(Some(key))
        }
        (
            TableMut::List(table),
            Change::List {
                key,
                cleared,
                appended,
            },
        ) => {
            let hash = hash_key(&key);
            let list = &mut table.restore(&key, hash, checkpoint, Default::default).body;
            if cleared {
                list.items.clear();
            }
            if list.items.is_empty() {
                list.oldest = checkpoint;
            }
            list.items.extend(appended);
            list.persisted = list.items.len();
            if list.items.is_empty() {
                table.remove(&key, hash);
                return Ok(None);
            }
            Ok(Some(key))
        }
        (table, _) => Err(StateError::WrongKind {
            name: format!("(a {kind} change)"),
            expected: kind,
            actual: table.kind(),
        }),
    }
}
