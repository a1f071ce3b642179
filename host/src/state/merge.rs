//! [`Increment::merge`]: two consecutive increments as one, so that an increment whose upload
//! failed is carried in the next one instead of piling up beside it (DESIGN.md §5.6).
//!
//! Restoring `older` then `newer` and restoring their merge give the same state: per key, the
//! newer change replaces a value (or tombstone); a newer map change without a clear applies
//! its entries over the older one's, one with a clear replaces it; list appends add up the
//! same way. The merge belongs to the newer checkpoint.

use std::collections::HashMap;

use super::StateBytes;
use super::snapshot::{Change, GroupIncrement, Increment, StateChanges};

impl Increment {
    /// `older` and then `self`, as one increment of `self`'s checkpoint.
    #[must_use]
    pub fn merge(older: Increment, newer: Increment) -> Increment {
        let mut groups: Vec<GroupIncrement> = Vec::new();
        let mut older = older.groups.into_iter().peekable();
        let mut newer_groups = newer.groups.into_iter().peekable();
        loop {
            let next = match (older.peek(), newer_groups.peek()) {
                (None, None) => break,
                (Some(_), None) => older.next(),
                (None, Some(_)) => newer_groups.next(),
                (Some(o), Some(n)) if o.group < n.group => older.next(),
                (Some(o), Some(n)) if n.group < o.group => newer_groups.next(),
                (Some(_), Some(_)) => {
                    let (o, n) = (older.next(), newer_groups.next());
                    o.zip(n).map(|(o, n)| GroupIncrement {
                        group: o.group,
                        states: merge_states(o.states, n.states),
                    })
                }
            };
            groups.extend(next);
        }
        Increment {
            checkpoint: newer.checkpoint,
            groups,
        }
    }
}

fn merge_states(older: Vec<StateChanges>, newer: Vec<StateChanges>) -> Vec<StateChanges> {
    let mut states = older;
    for n in newer {
        match states.iter_mut().find(|o| o.name == n.name) {
            Some(o) => {
                let changes = std::mem::take(&mut o.changes);
                o.changes = merge_changes(changes, n.changes);
            }
            None => states.push(n),
        }
    }
    states
}

fn key_of(change: &Change) -> &StateBytes {
    match change {
        Change::Value { key, .. } | Change::Map { key, .. } | Change::List { key, .. } => key,
    }
}

fn merge_changes(older: Vec<Change>, newer: Vec<Change>) -> Vec<Change> {
    let mut changes = older;
    let mut at: HashMap<StateBytes, usize> = changes
        .iter()
        .enumerate()
        .map(|(i, c)| (key_of(c).clone(), i))
        .collect();
    for change in newer {
        match at.get(key_of(&change)) {
            Some(&i) => {
                let old = std::mem::replace(
                    &mut changes[i],
                    Change::Value {
                        key: key_of(&change).clone(),
                        value: None,
                    },
                );
                changes[i] = combine(old, change);
            }
            None => {
                at.insert(key_of(&change).clone(), changes.len());
                changes.push(change);
            }
        }
    }
    changes
}

/// One key's older change followed by its newer one.
fn combine(old: Change, new: Change) -> Change {
    match (old, new) {
        (
            Change::Map {
                key,
                cleared,
                entries,
            },
            Change::Map {
                cleared: false,
                entries: newer,
                ..
            },
        ) => Change::Map {
            key,
            cleared,
            entries: overlay(entries, newer),
        },
        (
            Change::List {
                key,
                cleared,
                mut appended,
            },
            Change::List {
                cleared: false,
                appended: newer,
                ..
            },
        ) => {
            appended.extend(newer);
            Change::List {
                key,
                cleared,
                appended,
            }
        }
        // A value, or a map or list cleared first: the newer change is the whole story.
        (_, new) => new,
    }
}

/// Map entries: the newer put or removal of an entry replaces the older one.
fn overlay(
    older: Vec<(StateBytes, Option<StateBytes>)>,
    newer: Vec<(StateBytes, Option<StateBytes>)>,
) -> Vec<(StateBytes, Option<StateBytes>)> {
    let mut entries = older;
    let mut at: HashMap<StateBytes, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.clone(), i))
        .collect();
    for (k, v) in newer {
        match at.get(&k) {
            Some(&i) => entries[i].1 = v,
            None => {
                at.insert(k.clone(), entries.len());
                entries.push((k, v));
            }
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ids::{CheckpointId, SubtaskIndex};
    use crate::partition::{KeyGroups, hash_key};
    use crate::state::{KeyRef, KeyedStateBackend, StateId, StateKind};

    /// One operation on a backend with a value, a map and a list state.
    #[derive(Clone, Debug)]
    enum Op {
        Set(u8, u8),
        Remove(u8),
        MapPut(u8, u8, u8),
        MapRemove(u8, u8),
        MapClear(u8),
        Append(u8, u8),
        ListClear(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        let k = 0u8..12;
        prop_oneof![
            (k.clone(), any::<u8>()).prop_map(|(k, v)| Op::Set(k, v)),
            k.clone().prop_map(Op::Remove),
            (k.clone(), 0u8..4, any::<u8>()).prop_map(|(k, e, v)| Op::MapPut(k, e, v)),
            (k.clone(), 0u8..4).prop_map(|(k, e)| Op::MapRemove(k, e)),
            k.clone().prop_map(Op::MapClear),
            (k.clone(), any::<u8>()).prop_map(|(k, v)| Op::Append(k, v)),
            k.prop_map(Op::ListClear),
        ]
    }

    /// A backend with a value, a map and a list state, and their ids.
    fn backend() -> (KeyedStateBackend, [StateId; 3]) {
        let groups = KeyGroups::new(8);
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let ids = [
            ("v", StateKind::Value),
            ("m", StateKind::Map),
            ("l", StateKind::List),
        ]
        .map(|(name, kind)| b.declare(name, kind).expect("declare"));
        (b, ids)
    }

    fn apply(b: &mut KeyedStateBackend, [v, m, l]: [StateId; 3], ops: &[Op]) {
        for op in ops {
            let (Op::Set(k, ..)
            | Op::Remove(k)
            | Op::MapPut(k, ..)
            | Op::MapRemove(k, ..)
            | Op::MapClear(k)
            | Op::Append(k, ..)
            | Op::ListClear(k)) = op;
            let key = format!("key-{k}").into_bytes();
            let key = KeyRef::new(&key, hash_key(&key));
            match op {
                Op::Set(_, x) => b.value_set(v, key, &[*x]),
                Op::Remove(_) => b.value_remove(v, key),
                Op::MapPut(_, e, x) => b.map_put(m, key, &[*e], &[*x]),
                Op::MapRemove(_, e) => b.map_remove(m, key, &[*e]),
                Op::MapClear(_) => b.map_clear(m, key),
                Op::Append(_, x) => b.list_append(l, key, &[*x]),
                Op::ListClear(_) => b.list_clear(l, key),
            }
            .expect("operation");
        }
    }

    /// Everything a backend holds, in a canonical order.
    fn contents(b: &mut KeyedStateBackend) -> Vec<(u32, String, Vec<u8>, String)> {
        let full = b.snapshot_full(CheckpointId(1_000));
        let mut rows = Vec::new();
        for g in full.groups {
            for s in g.states {
                for c in s.changes {
                    let (key, body) = match c {
                        Change::Value { key, value } => (key, format!("{value:?}")),
                        Change::Map { key, entries, .. } => {
                            let mut live: Vec<_> = entries
                                .into_iter()
                                .filter_map(|(k, v)| Some((k.to_vec(), v?.to_vec())))
                                .collect();
                            live.sort();
                            (key, format!("{live:?}"))
                        }
                        Change::List { key, appended, .. } => (
                            key,
                            format!(
                                "{:?}",
                                appended.iter().map(|i| i.to_vec()).collect::<Vec<_>>()
                            ),
                        ),
                    };
                    if body != "None" && body != "[]" {
                        rows.push((g.group.0, s.name.clone(), key.to_vec(), body));
                    }
                }
            }
        }
        rows.sort();
        rows
    }

    proptest! {
        #[test]
        fn restoring_the_merge_equals_restoring_both(
            base in proptest::collection::vec(op(), 0..40),
            first in proptest::collection::vec(op(), 0..40),
            second in proptest::collection::vec(op(), 0..40),
        ) {
            let (mut live, ids) = backend();
            apply(&mut live, ids, &base);
            let base_increment = live.snapshot_for(CheckpointId(1));
            apply(&mut live, ids, &first);
            let older = live.snapshot_for(CheckpointId(2));
            apply(&mut live, ids, &second);
            let newer = live.snapshot_for(CheckpointId(3));

            let (mut both, _) = backend();
            for increment in [&base_increment, &older, &newer] {
                both.restore(increment).expect("restore");
            }
            let merged = Increment::merge(older, newer);
            prop_assert_eq!(merged.checkpoint, CheckpointId(3));
            let (mut one, _) = backend();
            one.restore(&base_increment).expect("restore");
            one.restore(&merged).expect("restore merge");
            let expected = contents(&mut live);
            prop_assert_eq!(contents(&mut both), expected.clone());
            prop_assert_eq!(contents(&mut one), expected);
        }
    }
}
