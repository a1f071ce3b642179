//! Property tests of the backend's snapshots against a `BTreeMap` oracle: random writes,
//! incremental and full snapshots (also frozen, with writes between the freeze and the end of
//! their pinning), restores, and crashes (also between the two phases of a snapshot) over a
//! tiny key space (to force collisions, overwrites, removals and clears of the same keys).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::backend::Tables;
use super::snapshot::{Change, GroupIncrement, Increment, StateChanges};
use super::timers::{TIMERS_STATE, decode_set, encode_set};
use super::{KeyRef, KeyedStateBackend, StateBytes, StateId, StateKind, TimeDomain, Timer};
use crate::checkpoint::format;
use crate::ids::{CheckpointId, SubtaskIndex};
use crate::partition::{KeyGroups, hash_key};

#[derive(Clone, Debug)]
enum Op {
    Set(u8, Vec<u8>),
    Remove(u8),
    MapPut(u8, u8, Vec<u8>),
    MapRemove(u8, u8),
    MapClear(u8),
    ListAppend(u8, Vec<u8>),
    ListClear(u8),
    /// Registers the timer (key, processing time?, timestamp, tag).
    TimerRegister(u8, bool, i64, u32),
    TimerDelete(u8, bool, i64, u32),
    /// The clock (processing time?) moves to this: the timers due fire, in order.
    Advance(bool, i64),
    /// A snapshot that first re-writes up to this many entries of the oldest increments;
    /// those it drains leave the chain.
    Snapshot(usize),
    /// A full snapshot: the chain starts again from it.
    FullSnapshot,
    /// The synchronous phase of a snapshot (after re-writing up to this many entries of the
    /// oldest increments) without its pinning: the writes that follow run beside it.
    Freeze(usize),
    /// Up to this many frozen entries pinned; the snapshot completes once all are. With no
    /// snapshot frozen, up to this many entries of the oldest increments re-written ahead of
    /// the next snapshot, as a subtask does between batches.
    Pin(usize),
    /// Restore the chain of the n-th completed snapshot (modulo their number).
    Restore(usize),
    /// The process dies, after the synchronous phase of a snapshot whose upload never
    /// happened if `mid_snapshot`; the subtask restarts from its last completed snapshot.
    Crash {
        mid_snapshot: bool,
    },
    /// The job restarts from its last completed snapshot with this many subtasks: each
    /// restores its key groups and writes them afresh, then the state goes back to one
    /// subtask whose chain is those artifacts.
    Rescale(u32),
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    // Short values live inline, long ones are shared: both paths.
    prop_oneof![
        (any::<u8>(), 1..4usize).prop_map(|(b, n)| vec![b; n]),
        any::<u8>().prop_map(|b| vec![b; 40]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..6u8;
    let map_key = 0..4u8;
    prop_oneof![
        4 => (key.clone(), value()).prop_map(|(k, v)| Op::Set(k, v)),
        2 => key.clone().prop_map(Op::Remove),
        3 => (key.clone(), map_key.clone(), value()).prop_map(|(k, m, v)| Op::MapPut(k, m, v)),
        2 => (key.clone(), map_key).prop_map(|(k, m)| Op::MapRemove(k, m)),
        1 => key.clone().prop_map(Op::MapClear),
        3 => (key.clone(), value()).prop_map(|(k, v)| Op::ListAppend(k, v)),
        1 => key.clone().prop_map(Op::ListClear),
        3 => (key.clone(), any::<bool>(), -2..8i64, 0..3u32)
            .prop_map(|(k, p, at, tag)| Op::TimerRegister(k, p, at, tag)),
        1 => (key, any::<bool>(), -2..8i64, 0..3u32)
            .prop_map(|(k, p, at, tag)| Op::TimerDelete(k, p, at, tag)),
        2 => (any::<bool>(), -3..9i64).prop_map(|(p, at)| Op::Advance(p, at)),
        3 => (0..6usize).prop_map(Op::Snapshot),
        1 => Just(Op::FullSnapshot),
        2 => (0..6usize).prop_map(Op::Freeze),
        3 => (0..3usize).prop_map(Op::Pin),
        1 => any::<usize>().prop_map(Op::Restore),
        1 => any::<bool>().prop_map(|mid_snapshot| Op::Crash { mid_snapshot }),
        1 => (2..5u32).prop_map(Op::Rescale),
    ]
}

/// Everything a backend holds, comparable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Dump {
    values: BTreeMap<Vec<u8>, Vec<u8>>,
    maps: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>,
    lists: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    /// Pending timers: (domain, timestamp, key, tag).
    timers: BTreeSet<(TimeDomain, i64, Vec<u8>, u32)>,
}

fn domain(processing: bool) -> TimeDomain {
    if processing {
        TimeDomain::ProcessingTime
    } else {
        TimeDomain::EventTime
    }
}

fn dump(backend: &KeyedStateBackend) -> Dump {
    let mut d = Dump::default();
    for state in &backend.states {
        match &state.tables {
            Tables::Value(tables) if state.name == TIMERS_STATE => {
                for e in tables.iter().flat_map(|t| t.iter()) {
                    if let Some(set) = &e.body {
                        for t in decode_set(set).expect("timers") {
                            d.timers.insert((t.domain, t.at, e.key.to_vec(), t.tag));
                        }
                    }
                }
            }
            Tables::Value(tables) => {
                for e in tables.iter().flat_map(|t| t.iter()) {
                    if let Some(v) = &e.body {
                        d.values.insert(e.key.to_vec(), v.to_vec());
                    }
                }
            }
            Tables::Map(tables) => {
                for e in tables.iter().flat_map(|t| t.iter()) {
                    let map: BTreeMap<_, _> = e
                        .body
                        .range_after(None)
                        .map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .collect();
                    if !map.is_empty() {
                        d.maps.insert(e.key.to_vec(), map);
                    }
                }
            }
            Tables::List(tables) => {
                for e in tables.iter().flat_map(|t| t.iter()) {
                    if !e.body.items.is_empty() {
                        let items = e.body.items.iter().map(|i| i.to_vec()).collect();
                        d.lists.insert(e.key.to_vec(), items);
                    }
                }
            }
        }
    }
    d
}

/// Keys of odd numbers are too long to be stored inline: both paths (`state/bytes.rs`).
fn key_bytes(k: u8) -> Vec<u8> {
    if k.is_multiple_of(2) {
        format!("key-{k}").into_bytes()
    } else {
        format!("a-longer-key-{k}").into_bytes()
    }
}

struct Ids {
    v: StateId,
    m: StateId,
    l: StateId,
}

fn new_backend(groups: KeyGroups, subtask: u32, parallelism: u32) -> (KeyedStateBackend, Ids) {
    let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(subtask), parallelism));
    let ids = Ids {
        v: b.declare("v", StateKind::Value).expect("declare"),
        m: b.declare("m", StateKind::Map).expect("declare"),
        l: b.declare("l", StateKind::List).expect("declare"),
    };
    b.seal_declarations();
    (b, ids)
}

fn restored(
    groups: KeyGroups,
    chain: &[Increment],
    subtask: u32,
    parallelism: u32,
) -> KeyedStateBackend {
    let (mut b, _) = new_backend(groups, subtask, parallelism);
    for increment in chain {
        b.restore(increment).expect("restore");
    }
    b
}

/// The full snapshot equivalent to `d`: every live entry, every map and list written whole.
fn full_snapshot(groups: KeyGroups, d: &Dump, checkpoint: CheckpointId) -> Increment {
    let mut by_group: BTreeMap<u32, Vec<StateChanges>> = BTreeMap::new();
    let mut push = |key: &[u8], name: &str, kind: StateKind, change: Change| {
        let states = by_group.entry(groups.of(hash_key(key)).0).or_default();
        match states.iter_mut().find(|s| s.name == name) {
            Some(s) => s.changes.push(change),
            None => states.push(StateChanges {
                name: name.into(),
                kind,
                changes: vec![change],
            }),
        }
    };
    let bytes = |b: &[u8]| StateBytes::copy_from_slice(b);
    for (k, v) in &d.values {
        push(
            k,
            "v",
            StateKind::Value,
            Change::Value {
                key: bytes(k),
                value: Some(bytes(v)),
            },
        );
    }
    for (k, m) in &d.maps {
        let entries = m
            .iter()
            .map(|(mk, v)| (bytes(mk), Some(bytes(v))))
            .collect();
        push(
            k,
            "m",
            StateKind::Map,
            Change::Map {
                key: bytes(k),
                cleared: true,
                entries,
            },
        );
    }
    let mut timers: BTreeMap<&[u8], Vec<Timer>> = BTreeMap::new();
    for (domain, at, key, tag) in &d.timers {
        timers.entry(key).or_default().push(Timer {
            domain: *domain,
            at: *at,
            tag: *tag,
        });
    }
    for (k, set) in timers {
        push(
            k,
            TIMERS_STATE,
            StateKind::Value,
            Change::Value {
                key: bytes(k),
                value: Some(bytes(&encode_set(set))),
            },
        );
    }
    for (k, l) in &d.lists {
        let appended = l.iter().map(|i| bytes(i)).collect();
        push(
            k,
            "l",
            StateKind::List,
            Change::List {
                key: bytes(k),
                cleared: true,
                appended,
            },
        );
    }
    Increment {
        checkpoint,
        groups: by_group
            .into_iter()
            .map(|(g, states)| GroupIncrement {
                group: crate::partition::KeyGroup(g),
                states,
            })
            .collect(),
    }
}

/// The bytes the backend counts as live for the state `d`.
fn weigh(d: &Dump) -> usize {
    let values: usize = d.values.iter().map(|(k, v)| k.len() + v.len()).sum();
    let maps: usize = d
        .maps
        .values()
        .flat_map(|m| m.iter())
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let lists: usize = d.lists.values().flatten().map(Vec::len).sum();
    let mut timer_keys: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (_, _, key, _) in &d.timers {
        *timer_keys.entry(key).or_default() += 1;
    }
    let timers: usize = timer_keys.iter().map(|(k, n)| k.len() + 13 * n).sum();
    values + maps + lists + timers
}

/// A snapshot taken: its increment, the increments it lets leave the chain, and the state it
/// holds (as of its freeze).
struct Snapshotted {
    increment: Increment,
    released: Vec<CheckpointId>,
    state: Dump,
}

impl Snapshotted {
    /// Stores the increment (through the stored format, as a checkpoint does) at the end of
    /// `chain`, and records the chain and state as a completed snapshot's.
    fn record(
        self,
        backend: &KeyedStateBackend,
        chain: &mut Vec<Increment>,
        completed: &mut Vec<(Vec<Increment>, Dump)>,
    ) -> Result<(), TestCaseError> {
        chain.retain(|i| !self.released.contains(&i.checkpoint));
        let bytes = format::encode(&self.increment).expect("encode");
        let stored = format::decode(&bytes, None).expect("decode");
        prop_assert_eq!(&stored, &self.increment);
        if !stored.is_empty() {
            chain.push(stored);
        }
        let ages: Vec<CheckpointId> = backend.chain_checkpoints().collect();
        let links: Vec<CheckpointId> = chain.iter().map(|i| i.checkpoint).collect();
        prop_assert_eq!(ages, links, "the backend knows its chain");
        completed.push((chain.clone(), self.state));
        Ok(())
    }
}

/// Pins the rest of the frozen snapshot, if any, and records it, as a subtask does at the
/// next barrier.
fn settle(
    frozen: &mut Option<Snapshotted>,
    backend: &mut KeyedStateBackend,
    chain: &mut Vec<Increment>,
    completed: &mut Vec<(Vec<Increment>, Dump)>,
) -> Result<(), TestCaseError> {
    if let Some(frozen) = frozen.take() {
        let increment = backend.pin_frozen(usize::MAX).expect("pinned");
        let done = Snapshotted {
            increment,
            ..frozen
        };
        done.record(backend, chain, completed)?;
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    // Few key groups, so that several keys share a group and a table.
    let groups = KeyGroups::new(8);
    let (mut backend, ids) = new_backend(groups, 0, 1);
    let mut oracle = Dump::default();
    // The chain of the last completed snapshot, and every completed snapshot's chain and
    // state.
    let mut chain: Vec<Increment> = Vec::new();
    let mut completed: Vec<(Vec<Increment>, Dump)> = Vec::new();
    // A snapshot frozen and not yet pinned, with the state at its freeze.
    let mut frozen: Option<Snapshotted> = None;
    // Checkpoint ids only grow, also across crashes (they are the coordinator's).
    let mut next_id = 1;
    for op in ops {
        let key_of = |k: u8| key_bytes(k);
        match op {
            Op::Set(k, v) => {
                let key = key_of(k);
                backend
                    .value_set(ids.v, KeyRef::new(&key, hash_key(&key)), &v)
                    .expect("set");
                oracle.values.insert(key, v);
            }
            Op::Remove(k) => {
                let key = key_of(k);
                backend
                    .value_remove(ids.v, KeyRef::new(&key, hash_key(&key)))
                    .expect("remove");
                oracle.values.remove(&key);
            }
            Op::MapPut(k, m, v) => {
                let key = key_of(k);
                backend
                    .map_put(ids.m, KeyRef::new(&key, hash_key(&key)), &[m], &v)
                    .expect("put");
                oracle.maps.entry(key).or_default().insert(vec![m], v);
            }
            Op::MapRemove(k, m) => {
                let key = key_of(k);
                backend
                    .map_remove(ids.m, KeyRef::new(&key, hash_key(&key)), &[m])
                    .expect("remove");
                if let Some(map) = oracle.maps.get_mut(&key) {
                    map.remove(&vec![m]);
                    if map.is_empty() {
                        oracle.maps.remove(&key);
                    }
                }
            }
            Op::MapClear(k) => {
                let key = key_of(k);
                backend
                    .map_clear(ids.m, KeyRef::new(&key, hash_key(&key)))
                    .expect("clear");
                oracle.maps.remove(&key);
            }
            Op::ListAppend(k, v) => {
                let key = key_of(k);
                backend
                    .list_append(ids.l, KeyRef::new(&key, hash_key(&key)), &v)
                    .expect("append");
                oracle.lists.entry(key).or_default().push(v);
            }
            Op::ListClear(k) => {
                let key = key_of(k);
                backend
                    .list_clear(ids.l, KeyRef::new(&key, hash_key(&key)))
                    .expect("clear");
                oracle.lists.remove(&key);
            }
            Op::TimerRegister(k, p, at, tag) | Op::TimerDelete(k, p, at, tag) => {
                let key = key_of(k);
                let timer = Timer {
                    domain: domain(p),
                    at,
                    tag,
                };
                let entry = (timer.domain, at, key.clone(), tag);
                let key = KeyRef::new(&key, hash_key(&key));
                if let Op::TimerRegister(..) = op {
                    let new = backend.timer_register(key, timer).expect("register");
                    prop_assert_eq!(new, oracle.timers.insert(entry));
                } else {
                    let was = backend.timer_delete(key, timer).expect("delete");
                    prop_assert_eq!(was, oracle.timers.remove(&entry));
                }
            }
            Op::Advance(p, upto) => {
                let domain = domain(p);
                let fired = backend
                    .take_due_timers(domain, upto, usize::MAX)
                    .expect("due");
                let fired: Vec<(i64, Vec<u8>, u32)> = fired
                    .into_iter()
                    .map(|f| (f.at, f.key.to_vec(), f.tag))
                    .collect();
                // In (timestamp, key, tag) order, exactly the oracle's due timers.
                let due: Vec<_> = oracle
                    .timers
                    .iter()
                    .filter(|(d, at, _, _)| *d == domain && *at <= upto)
                    .cloned()
                    .collect();
                for timer in &due {
                    oracle.timers.remove(timer);
                }
                let due: Vec<_> = due
                    .into_iter()
                    .map(|(_, at, k, tag)| (at, k, tag))
                    .collect();
                prop_assert_eq!(fired, due, "timers fired");
            }
            Op::Snapshot(_) | Op::FullSnapshot => {
                settle(&mut frozen, &mut backend, &mut chain, &mut completed)?;
                let id = CheckpointId(next_id);
                next_id += 1;
                let (increment, released) = if let Op::Snapshot(budget) = op {
                    let released = backend.rewrite_oldest(id, budget);
                    (backend.snapshot_for(id), released)
                } else {
                    chain.clear();
                    (backend.snapshot_full(id), Vec::new())
                };
                prop_assert_eq!(increment.checkpoint, id);
                let done = Snapshotted {
                    increment,
                    released,
                    state: oracle.clone(),
                };
                done.record(&backend, &mut chain, &mut completed)?;
                prop_assert_eq!(backend.stats().dirty_keys, 0);
            }
            Op::Freeze(budget) => {
                settle(&mut frozen, &mut backend, &mut chain, &mut completed)?;
                let id = CheckpointId(next_id);
                next_id += 1;
                let released = backend.rewrite_oldest(id, budget);
                backend.freeze(id);
                prop_assert_eq!(backend.stats().dirty_keys, 0);
                frozen = Some(Snapshotted {
                    increment: Increment {
                        checkpoint: id,
                        groups: Vec::new(),
                    },
                    released,
                    state: oracle.clone(),
                });
            }
            Op::Pin(budget) if !backend.is_pinning() => {
                backend.rewrite_some(budget);
            }
            Op::Pin(budget) => {
                if let Some(increment) = backend.pin_frozen(budget) {
                    let frozen = frozen.take().expect("a snapshot was frozen");
                    prop_assert_eq!(increment.checkpoint, frozen.increment.checkpoint);
                    let done = Snapshotted {
                        increment,
                        ..frozen
                    };
                    done.record(&backend, &mut chain, &mut completed)?;
                }
                prop_assert_eq!(backend.is_pinning(), frozen.is_some());
            }
            Op::Restore(n) if !completed.is_empty() => {
                let (chain, state) = &completed[n % completed.len()];
                let b = restored(groups, chain, 0, 1);
                prop_assert_eq!(&dump(&b), state, "restore of snapshot {}", n);
            }
            Op::Restore(_) => {}
            Op::Crash { mid_snapshot } => {
                // A snapshot still pinning is lost with the process.
                frozen = None;
                if mid_snapshot && !backend.is_pinning() {
                    // The synchronous phase ran; the artifact never reached the store.
                    let _lost = backend.snapshot_for(CheckpointId(next_id));
                    next_id += 1;
                }
                backend = restored(groups, &chain, 0, 1);
                oracle = completed.last().map(|(_, d)| d.clone()).unwrap_or_default();
            }
            Op::Rescale(parallelism) => {
                frozen = None;
                let state = completed.last().map(|(_, d)| d.clone()).unwrap_or_default();
                let id = CheckpointId(next_id);
                next_id += 1;
                let mut union = Dump::default();
                let mut fresh = Vec::new();
                for subtask in 0..parallelism {
                    let mut part = restored(groups, &chain, subtask, parallelism);
                    let d = dump(&part);
                    union.values.extend(d.values);
                    union.maps.extend(d.maps);
                    union.lists.extend(d.lists);
                    union.timers.extend(d.timers);
                    let full = part.snapshot_full(id);
                    let bytes = format::encode(&full).expect("encode");
                    let stored = format::decode(&bytes, None).expect("decode");
                    if !stored.is_empty() {
                        fresh.push(stored);
                    }
                }
                prop_assert_eq!(
                    &union,
                    &state,
                    "{} subtasks restoring their key groups",
                    parallelism
                );
                completed.push((fresh.clone(), state.clone()));
                // Back to one subtask: its state comes from the others' artifacts, so its
                // first snapshot writes it afresh and starts its own chain.
                backend = restored(groups, &fresh, 0, 1);
                backend.forget_chain();
                let full = backend.snapshot_full(CheckpointId(next_id));
                next_id += 1;
                chain = if full.is_empty() {
                    Vec::new()
                } else {
                    vec![full]
                };
                completed.push((chain.clone(), state.clone()));
                oracle = state;
            }
        }
        prop_assert_eq!(&dump(&backend), &oracle, "live state");
        prop_assert_eq!(backend.live_bytes(), weigh(&oracle), "live bytes");
        // The index that fires timers (rebuilt after restores) holds what the state holds.
        let pending = backend.timers_pending().expect("pending");
        let count = |d: TimeDomain| oracle.timers.iter().filter(|t| t.0 == d).count();
        prop_assert_eq!(
            pending,
            (
                count(TimeDomain::EventTime),
                count(TimeDomain::ProcessingTime)
            ),
            "pending timers"
        );
    }
    if let (Some(last), Some((_, expected))) = (chain.last(), completed.last()) {
        // The chain, a full snapshot and a rescaled restore all give the same state.
        let from_chain = restored(groups, &chain, 0, 1);
        prop_assert_eq!(&dump(&from_chain), expected);
        let full = full_snapshot(groups, expected, last.checkpoint);
        prop_assert_eq!(
            &dump(&restored(groups, std::slice::from_ref(&full), 0, 1)),
            expected
        );
        let mut union = Dump::default();
        for subtask in 0..3 {
            let part = dump(&restored(groups, &chain, subtask, 3));
            union.values.extend(part.values);
            union.maps.extend(part.maps);
            union.lists.extend(part.lists);
            union.timers.extend(part.timers);
        }
        prop_assert_eq!(
            &union,
            expected,
            "three subtasks restoring their key groups"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn snapshots_and_restores_match_the_oracle(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops)?;
    }
}

#[test]
fn a_snapshot_holds_only_what_changed_squashed() {
    let groups = KeyGroups::new(8);
    let (mut b, ids) = new_backend(groups, 0, 1);
    let key = |k: &'static [u8]| KeyRef::new(k, hash_key(k));
    for i in 0..10u8 {
        b.value_set(ids.v, key(b"hot"), &[i]).expect("set");
    }
    b.value_set(ids.v, key(b"cold"), b"c").expect("set");
    let first = b.snapshot();
    assert_eq!(first.changes(), 2, "ten writes to one key are one change");
    b.value_set(ids.v, key(b"hot"), b"again").expect("set");
    let second = b.snapshot();
    assert_eq!(
        second.changes(),
        1,
        "the untouched key is not written again"
    );
    assert_eq!(second.checkpoint, CheckpointId(2));
    assert!(b.snapshot().is_empty());
}
