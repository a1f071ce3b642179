//! [`UndoLog`]: the state changes of one `process` call, kept so that the call can be taken
//! back when it fails on a record that its operator's `on_error` sets aside (DESIGN.md §10).
//!
//! Each entry is what one write replaced, read just before the write; rolling back undoes the
//! entries newest first through the backend's ordinary writes. The undone keys are marked
//! dirty again, so the next increment writes their restored values: harmless, since those are
//! the values the last checkpoint holds or the increment would write anyway. Keeping a log
//! costs a read and a copy per write, so only operators whose failures are set aside keep one.

use super::{KeyRef, KeyedStateBackend, StateError, StateId};
use crate::partition::KeyHash;

/// What a write is about to change, to record before it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Write<'a> {
    /// A value set or removed.
    Value,
    /// A map entry put or removed, by its map key.
    MapEntry(&'a [u8]),
    /// A whole map cleared.
    MapClear,
    ListAppend,
    ListClear,
}

/// A key, owned.
#[derive(Debug)]
struct Key {
    bytes: Vec<u8>,
    hash: KeyHash,
}

impl Key {
    fn of(key: KeyRef<'_>) -> Self {
        Self {
            bytes: key.bytes.to_vec(),
            hash: key.hash,
        }
    }

    fn get(&self) -> KeyRef<'_> {
        KeyRef::new(&self.bytes, self.hash)
    }
}

/// What one write replaced.
#[derive(Debug)]
enum Undo {
    Value {
        previous: Option<Vec<u8>>,
    },
    MapEntry {
        map_key: Vec<u8>,
        previous: Option<Vec<u8>>,
    },
    /// The entries of a map before it was cleared.
    Map {
        previous: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// A list's length before an append.
    ListLen {
        len: usize,
    },
    /// A list's items before it was cleared.
    List {
        previous: Vec<Vec<u8>>,
    },
}

/// The changes of one call, oldest first.
#[derive(Debug, Default)]
pub(crate) struct UndoLog {
    entries: Vec<(StateId, Key, Undo)>,
}

impl UndoLog {
    /// Records what `write` to `key` of `state` is about to replace. Call it just before a
    /// write that then succeeds (a failed write changes nothing: leave it out).
    pub(crate) fn record(
        &mut self,
        backend: &KeyedStateBackend,
        state: StateId,
        key: KeyRef<'_>,
        write: Write<'_>,
    ) -> Result<(), StateError> {
        let owned = |v: Option<&[u8]>| v.map(<[u8]>::to_vec);
        let undo = match write {
            Write::Value => Undo::Value {
                previous: owned(backend.value_get(state, key)?),
            },
            Write::MapEntry(map_key) => Undo::MapEntry {
                map_key: map_key.to_vec(),
                previous: owned(backend.map_get(state, key, map_key)?),
            },
            Write::MapClear => Undo::Map {
                previous: backend
                    .map(state, key)?
                    .map(|map| {
                        map.range_after(None)
                            .map(|(k, v)| (k.to_vec(), v.to_vec()))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            Write::ListAppend => Undo::ListLen {
                len: backend.list_items(state, key)?.len(),
            },
            Write::ListClear => Undo::List {
                previous: backend
                    .list_items(state, key)?
                    .iter()
                    .map(|item| item.to_vec())
                    .collect(),
            },
        };
        self.entries.push((state, Key::of(key), undo));
        Ok(())
    }

    /// Forgets what was recorded (the call succeeded).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    /// Undoes every recorded change, newest first, and forgets them.
    pub(crate) fn roll_back(&mut self, backend: &mut KeyedStateBackend) -> Result<(), StateError> {
        // Timer writes are value writes; the index that fires them follows the state.
        backend.timers_changed();
        while let Some((state, key, undo)) = self.entries.pop() {
            let key = key.get();
            match undo {
                Undo::Value { previous: Some(v) } => backend.value_set(state, key, &v)?,
                Undo::Value { previous: None } => backend.value_remove(state, key)?,
                Undo::MapEntry {
                    map_key,
                    previous: Some(v),
                } => backend.map_put(state, key, &map_key, &v)?,
                Undo::MapEntry {
                    map_key,
                    previous: None,
                } => backend.map_remove(state, key, &map_key)?,
                Undo::Map { previous } => {
                    for (map_key, value) in previous {
                        backend.map_put(state, key, &map_key, &value)?;
                    }
                }
                Undo::ListLen { len } => {
                    let kept: Vec<Vec<u8>> = backend.list_items(state, key)?[..len]
                        .iter()
                        .map(|item| item.to_vec())
                        .collect();
                    replace_list(backend, state, key, kept)?;
                }
                Undo::List { previous } => replace_list(backend, state, key, previous)?,
            }
        }
        Ok(())
    }
}

fn replace_list(
    backend: &mut KeyedStateBackend,
    state: StateId,
    key: KeyRef<'_>,
    items: Vec<Vec<u8>>,
) -> Result<(), StateError> {
    backend.list_clear(state, key)?;
    for item in items {
        backend.list_append(state, key, &item)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubtaskIndex;
    use crate::partition::{KeyGroups, hash_key};
    use crate::state::StateKind;

    fn key(k: &str) -> KeyRef<'_> {
        KeyRef::new(k.as_bytes(), hash_key(k.as_bytes()))
    }

    /// Everything the backend holds for keys `a` and `b`, as text.
    fn picture(b: &KeyedStateBackend, v: StateId, m: StateId, l: StateId) -> String {
        let mut out = String::new();
        for k in ["a", "b"] {
            let map: Vec<_> = b
                .map(m, key(k))
                .expect("map")
                .map(|map| {
                    map.range_after(None)
                        .map(|(x, y)| (x.to_vec(), y.to_vec()))
                        .collect()
                })
                .unwrap_or_default();
            out += &format!(
                "{k}: {:?} {map:?} {:?}\n",
                b.value_get(v, key(k)).expect("value"),
                b.list_items(l, key(k)).expect("list")
            );
        }
        out
    }

    #[test]
    fn rolling_back_restores_what_every_write_of_the_call_replaced() {
        let groups = KeyGroups::default();
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let v = b.declare("v", StateKind::Value).expect("declare");
        let m = b.declare("m", StateKind::Map).expect("declare");
        let l = b.declare("l", StateKind::List).expect("declare");
        b.value_set(v, key("a"), b"1").expect("set");
        b.map_put(m, key("a"), b"x", b"1").expect("put");
        b.map_put(m, key("a"), b"y", b"2").expect("put");
        b.list_append(l, key("a"), b"i1").expect("append");
        let before = picture(&b, v, m, l);

        // A call that writes every kind of change, some twice to the same place.
        let mut undo = UndoLog::default();
        let ka = key("a");
        let kb = key("b");
        undo.record(&b, v, ka, Write::Value).expect("record");
        b.value_set(v, ka, b"2").expect("set");
        undo.record(&b, v, ka, Write::Value).expect("record");
        b.value_remove(v, ka).expect("remove");
        undo.record(&b, v, kb, Write::Value).expect("record");
        b.value_set(v, kb, b"new").expect("set");
        undo.record(&b, m, ka, Write::MapEntry(b"x"))
            .expect("record");
        b.map_put(m, ka, b"x", b"9").expect("put");
        undo.record(&b, m, ka, Write::MapClear).expect("record");
        b.map_clear(m, ka).expect("clear");
        undo.record(&b, m, ka, Write::MapEntry(b"z"))
            .expect("record");
        b.map_put(m, ka, b"z", b"3").expect("put");
        undo.record(&b, l, ka, Write::ListAppend).expect("record");
        b.list_append(l, ka, b"i2").expect("append");
        undo.record(&b, l, ka, Write::ListClear).expect("record");
        b.list_clear(l, ka).expect("clear");
        undo.record(&b, l, ka, Write::ListAppend).expect("record");
        b.list_append(l, ka, b"i3").expect("append");
        undo.record(&b, l, kb, Write::ListAppend).expect("record");
        b.list_append(l, kb, b"j").expect("append");
        assert_ne!(picture(&b, v, m, l), before);

        undo.roll_back(&mut b).expect("roll back");
        assert_eq!(picture(&b, v, m, l), before);
        undo.roll_back(&mut b).expect("nothing left to undo");
        assert_eq!(picture(&b, v, m, l), before);
    }
}
