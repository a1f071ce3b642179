//! Reading a backend's entries back out, for inspection (`weir state get|scan`): every live
//! key of every state, with what it holds. Read-only; the processing path never calls it.

use super::backend::Tables;
use super::timers::{TIMERS_STATE, decode_set};
use super::{KeyedStateBackend, StateBytes, Timer};
use crate::partition::KeyGroup;

/// What one key holds in one state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Contents<'a> {
    Value(&'a [u8]),
    /// The live entries, in map-key order.
    Map(Vec<(&'a [u8], &'a [u8])>),
    /// The items, oldest first.
    List(&'a [StateBytes]),
    /// The key's timers ([`TIMERS_STATE`]), in (domain, timestamp, tag) order, and the timer
    /// set's bytes as stored. A set that cannot be read shows as a [`Contents::Value`].
    Timers {
        timers: Vec<Timer>,
        set: &'a [u8],
    },
}

/// One live (key, state) of a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateEntry<'a> {
    pub group: KeyGroup,
    pub key: &'a [u8],
    pub state: &'a str,
    pub contents: Contents<'a>,
}

impl KeyedStateBackend {
    /// The names of the declared states (those a restore found included), in declaration
    /// order.
    pub fn state_names(&self) -> impl Iterator<Item = &str> {
        self.states.iter().map(|s| s.name.as_str())
    }

    /// Every live entry of every state, ordered by key group, key bytes, then state name.
    /// Tombstones, empty maps and empty lists are left out.
    pub fn entries(&self) -> Vec<StateEntry<'_>> {
        let start = self.range().start;
        let group = |offset: usize| KeyGroup(start + offset as u32);
        let mut out = Vec::new();
        for declared in &self.states {
            let state = declared.name.as_str();
            let timers = state == TIMERS_STATE;
            match &declared.tables {
                Tables::Value(tables) => {
                    for (offset, table) in tables.iter().enumerate() {
                        for e in table.iter() {
                            let Some(value) = e.body.as_deref() else {
                                continue;
                            };
                            let contents = match decode_set(value) {
                                Ok(set) if timers => Contents::Timers {
                                    timers: set.collect(),
                                    set: value,
                                },
                                _ => Contents::Value(value),
                            };
                            out.push(StateEntry {
                                group: group(offset),
                                key: &e.key,
                                state,
                                contents,
                            });
                        }
                    }
                }
                Tables::Map(tables) => {
                    for (offset, table) in tables.iter().enumerate() {
                        for e in table.iter() {
                            let entries: Vec<_> = e.body.range_after(None).collect();
                            if entries.is_empty() {
                                continue;
                            }
                            out.push(StateEntry {
                                group: group(offset),
                                key: &e.key,
                                state,
                                contents: Contents::Map(entries),
                            });
                        }
                    }
                }
                Tables::List(tables) => {
                    for (offset, table) in tables.iter().enumerate() {
                        for e in table.iter() {
                            if e.body.items.is_empty() {
                                continue;
                            }
                            out.push(StateEntry {
                                group: group(offset),
                                key: &e.key,
                                state,
                                contents: Contents::List(&e.body.items),
                            });
                        }
                    }
                }
            }
        }
        out.sort_by(|a, b| (a.group, a.key, a.state).cmp(&(b.group, b.key, b.state)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubtaskIndex;
    use crate::partition::{KeyGroups, hash_key};
    use crate::state::{KeyRef, StateKind, TimeDomain};

    fn key(k: &str) -> KeyRef<'_> {
        KeyRef::new(k.as_bytes(), hash_key(k.as_bytes()))
    }

    #[test]
    fn restored_entries_of_every_kind_are_listed_in_key_group_order() {
        let groups = KeyGroups::new(16);
        let all = groups.range_of(SubtaskIndex(0), 1);
        let mut b = KeyedStateBackend::new(groups, all);
        let v = b.declare("count", StateKind::Value).expect("declare");
        let m = b.declare("seen", StateKind::Map).expect("declare");
        let l = b.declare("log", StateKind::List).expect("declare");
        for i in 0..20u8 {
            b.value_set(v, key(&format!("k{i}")), &[i]).expect("set");
        }
        b.value_remove(v, key("k3")).expect("remove");
        b.map_put(m, key("k1"), b"b", b"2").expect("put");
        b.map_put(m, key("k1"), b"a", b"1").expect("put");
        b.map_put(m, key("k2"), b"x", b"gone").expect("put");
        b.map_remove(m, key("k2"), b"x").expect("remove");
        b.list_append(l, key("k1"), b"first").expect("append");
        b.list_append(l, key("k1"), b"second").expect("append");
        let timer = Timer {
            domain: TimeDomain::EventTime,
            at: 1_700_000_000_000,
            tag: 7,
        };
        b.timer_register(key("k1"), timer).expect("timer");
        let increment = b.snapshot();

        // Only the key group of k1, as `weir state get` reads it.
        let g = groups.of(hash_key(b"k1"));
        let mut one = KeyedStateBackend::new(
            groups,
            crate::partition::KeyGroupRange {
                start: g.0,
                end: g.0 + 1,
            },
        );
        one.restore(&increment).expect("restore");
        let k1: Vec<_> = one
            .entries()
            .into_iter()
            .filter(|e| e.key == b"k1")
            .collect();
        assert_eq!(
            k1.iter().map(|e| e.state).collect::<Vec<_>>(),
            ["@timers", "count", "log", "seen"]
        );
        assert!(k1.iter().all(|e| e.group == g));
        let Contents::Timers { timers, set } = &k1[0].contents else {
            panic!("{:?}", k1[0]);
        };
        assert_eq!((timers.as_slice(), set.len()), (&[timer][..], 13));
        assert_eq!(k1[1].contents, Contents::Value(&[1]));
        let Contents::List(items) = &k1[2].contents else {
            panic!("{:?}", k1[2]);
        };
        assert_eq!(
            items.iter().map(|i| &i[..]).collect::<Vec<_>>(),
            [&b"first"[..], b"second"]
        );
        assert_eq!(
            k1[3].contents,
            Contents::Map(vec![(&b"a"[..], &b"1"[..]), (b"b", b"2")])
        );

        // Everything: the removed value and the emptied map are not listed.
        let mut whole = KeyedStateBackend::new(groups, all);
        whole.restore(&increment).expect("restore");
        let entries = whole.entries();
        let count: Vec<&[u8]> = entries
            .iter()
            .filter(|e| e.state == "count")
            .map(|e| e.key)
            .collect();
        assert_eq!(count.len(), 19);
        assert!(!count.contains(&&b"k3"[..]));
        assert!(!entries.iter().any(|e| e.key == b"k2" && e.state == "seen"));
        assert!(
            entries
                .windows(2)
                .all(|w| (w[0].group, w[0].key) <= (w[1].group, w[1].key))
        );
        let mut names: Vec<&str> = whole.state_names().collect();
        names.sort_unstable();
        assert_eq!(names, ["@timers", "count", "log", "seen"]);
    }
}
