//! Rebuilding state from increments: [`KeyedStateBackend::restore`].

use super::aging::AgedKey;
use super::backend::Tables;
use super::map::MapValue;
use super::snapshot::{Change, Increment};
use super::{KeyedStateBackend, StateBytes, StateError, StateKind};
use crate::ids::CheckpointId;
use crate::partition::{KeyHash, hash_key};

impl KeyedStateBackend {
    /// Applies one increment of a chain, oldest first. Key groups outside this subtask's
    /// range are skipped, which is how a rescaled subtask takes only its share. Restored
    /// entries are not dirty: they are already in the chain. The next writes belong to the
    /// checkpoint after the newest one restored.
    ///
    /// Only a backend without unsnapshotted writes can be restored into: restoring removes
    /// entries, which would move the entries its dirty lists point at.
    pub fn restore(&mut self, increment: &Increment) -> Result<(), StateError> {
        if self.stats().dirty_keys > 0 {
            return Err(StateError::RestoreOverWrites);
        }
        let checkpoint = increment.checkpoint;
        let mut aged = Vec::new();
        for group in &increment.groups {
            let Some(offset) = self.range().offset(group.group) else {
                continue;
            };
            for changes in &group.states {
                let id = self.declare_new(&changes.name, changes.kind)?;
                let tables = &mut self.states[id.0 as usize].tables;
                for change in &changes.changes {
                    if let Some((key, hash)) =
                        apply(tables, offset, checkpoint, change, changes.kind)?
                    {
                        aged.push(AgedKey {
                            state: id.0,
                            offset: offset as u32,
                            hash,
                            key,
                        });
                    }
                }
            }
        }
        self.age(checkpoint, aged);
        self.recount_live_bytes();
        self.timers_changed();
        if self.epoch <= checkpoint {
            // Saturating: the id is as read from the artifact.
            self.epoch = CheckpointId(checkpoint.0.saturating_add(1));
        }
        Ok(())
    }
}

/// Applies one change; returns the key if it has content afterwards (the increment holds its
/// latest version).
fn apply(
    tables: &mut Tables,
    offset: usize,
    checkpoint: CheckpointId,
    change: &Change,
    kind: StateKind,
) -> Result<Option<(StateBytes, KeyHash)>, StateError> {
    match (tables, change) {
        (Tables::Value(tables), Change::Value { key, value }) => {
            let table = &mut tables[offset];
            let hash = hash_key(key);
            match value {
                Some(value) => {
                    table.restore(key, hash, checkpoint, || None).body = Some(value.clone());
                    Ok(Some((key.clone(), hash)))
                }
                None => {
                    table.remove(key, hash);
                    Ok(None)
                }
            }
        }
        (
            Tables::Map(tables),
            Change::Map {
                key,
                cleared,
                entries,
            },
        ) => {
            let table = &mut tables[offset];
            let hash = hash_key(key);
            let map = &mut table.restore(key, hash, checkpoint, Default::default).body;
            if *cleared {
                map.entries.clear();
            }
            for (map_key, value) in entries {
                match value {
                    Some(value) => {
                        map.entries.insert(
                            map_key.clone(),
                            MapValue {
                                value: Some(value.clone()),
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
                table.remove(key, hash);
                return Ok(None);
            }
            Ok(Some((key.clone(), hash)))
        }
        (
            Tables::List(tables),
            Change::List {
                key,
                cleared,
                appended,
            },
        ) => {
            let table = &mut tables[offset];
            let hash = hash_key(key);
            let list = &mut table.restore(key, hash, checkpoint, Default::default).body;
            if *cleared {
                list.items.clear();
            }
            if list.items.is_empty() {
                list.oldest = checkpoint;
            }
            list.items.extend(appended.iter().cloned());
            list.persisted = list.items.len();
            if list.items.is_empty() {
                table.remove(key, hash);
                return Ok(None);
            }
            Ok(Some((key.clone(), hash)))
        }
        (tables, _) => Err(StateError::WrongKind {
            name: format!("(a {kind} change)"),
            expected: kind,
            actual: tables.kind(),
        }),
    }
}
