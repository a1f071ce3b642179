//! Timers as keyed state (DESIGN.md §11): [`KeyedStateBackend::timer_register`] and the index
//! that fires them.
//!
//! A key's timers are one value of a reserved value state, [`TIMERS_STATE`]: the key's timer
//! set, sorted, 13 bytes a timer. Registering or deleting a timer writes that value, so it
//! marks the key dirty like any write, and everything the backend does for values it does for
//! timers with no code of its own: squashed into the next increment (a key's whole set, once
//! per checkpoint however often it changed), a tombstone when the last timer goes, bounded
//! chains, restore by key group, rescale, cleanup. A key with one timer holds it inline in its
//! entry (no allocation); a few timers per key, the usual case (a window's end, a session's
//! gap), cost a short copy per change.
//!
//! What fires them is an in-memory index per clock of each key's earliest timer, ordered by
//! (timestamp, key): firing takes the first entry, fires that key's timers at that timestamp
//! in tag order and puts the key back at its next timer, so timers fire in (timestamp, key,
//! tag) order while the index holds one entry per key, not per timer (a pending timer then
//! costs its 13 bytes in the set and a share of its key's entry: less than a map entry). The
//! index is not checkpointed: a restore, or a roll-back of a failed call, marks it stale and
//! the next access rebuilds it from the state.

use std::collections::BTreeSet;

use super::backend::weight;
use super::value::ValueBody;
use super::{KeyRef, KeyedStateBackend, StateBytes, StateError, StateId, StateKind};
use crate::partition::{KeyHash, hash_key};

/// The reserved value state holding every key's timers. Operators cannot declare names that
/// start with `@`.
pub const TIMERS_STATE: &str = "@timers";

/// Bytes of one timer in a key's timer set.
const TIMER_BYTES: usize = 13;

/// The clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimeDomain {
    /// Fires when the watermark reaches the timer's timestamp.
    EventTime,
    /// Fires when the wall clock reaches it.
    ProcessingTime,
}

impl TimeDomain {
    /// The domain numbered `n` in the WIT (`time-domain`'s ordinal).
    pub fn from_ordinal(n: u32) -> Option<Self> {
        match n {
            0 => Some(Self::EventTime),
            1 => Some(Self::ProcessingTime),
            _ => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One timer of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timer {
    pub domain: TimeDomain,
    /// Milliseconds since the Unix epoch.
    pub at: i64,
    pub tag: u32,
}

impl Timer {
    /// Its bytes in a timer set; byte order is (domain, timestamp, tag) order.
    fn encode(self) -> [u8; TIMER_BYTES] {
        let mut out = [0; TIMER_BYTES];
        out[0] = self.domain as u8;
        // Flipping the sign bit makes big-endian bytes sort like the signed numbers.
        out[1..9].copy_from_slice(&((self.at as u64) ^ (1 << 63)).to_be_bytes());
        out[9..].copy_from_slice(&self.tag.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; TIMER_BYTES] = bytes.try_into().ok()?;
        let domain = TimeDomain::from_ordinal(u32::from(bytes[0]))?;
        let at = (u64::from_be_bytes(bytes[1..9].try_into().ok()?) ^ (1 << 63)) as i64;
        let tag = u32::from_be_bytes(bytes[9..].try_into().ok()?);
        Some(Self { domain, at, tag })
    }
}

/// A key's timer set holding `timers` (sorted and deduplicated here).
#[cfg(test)]
pub(super) fn encode_set(timers: impl IntoIterator<Item = Timer>) -> Vec<u8> {
    let mut encoded: Vec<[u8; TIMER_BYTES]> = timers.into_iter().map(Timer::encode).collect();
    encoded.sort_unstable();
    encoded.dedup();
    encoded.concat()
}

/// The timers of a key's set, or why they cannot be read.
pub(super) fn decode_set(set: &[u8]) -> Result<impl Iterator<Item = Timer> + '_, StateError> {
    if !set.len().is_multiple_of(TIMER_BYTES) {
        return Err(StateError::BadTimers(format!(
            "a key's timer set holds {} bytes, not a multiple of {TIMER_BYTES}",
            set.len()
        )));
    }
    // Sets are written sorted, each timer once; lookups binary-search them. A restored set
    // out of order would hide its timers from deletion, so a due one would fire forever.
    if !set.chunks_exact(TIMER_BYTES).is_sorted_by(|a, b| a < b) {
        return Err(StateError::BadTimers(
            "a key's timer set is out of order or holds a timer twice".into(),
        ));
    }
    let timers: Vec<Timer> = set
        .chunks_exact(TIMER_BYTES)
        .map(Timer::decode)
        .collect::<Option<_>>()
        .ok_or_else(|| StateError::BadTimers("a timer names an unknown clock".into()))?;
    Ok(timers.into_iter())
}

/// A timer that fired: removed from its key's set, handed to the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FiredTimer {
    pub key: StateBytes,
    pub at: i64,
    pub tag: u32,
}

/// A key's place in the firing order: its earliest timer of a clock, then the key.
///
/// Ordered as (timestamp, key). `prefix` (the key's first eight bytes, big-endian, zero
/// padded) orders like the key's bytes wherever it differs, so most comparisons in the index
/// are two integer compares; only keys that share their first eight bytes compare bytes. The
/// keys of a busy timestamp (every window of a second ends at once) would otherwise compare
/// their bytes at every level of the tree. `hash` is the key's hash (a function of the key, so
/// it never decides the order), kept so that firing, and warming before it, do not hash the
/// key again.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Head {
    at: i64,
    prefix: u64,
    key: StateBytes,
    /// The key's [`KeyHash`] (raw: a field of a derived order).
    hash: u64,
}

impl Head {
    fn new(at: i64, key: StateBytes, hash: KeyHash) -> Self {
        let mut first = [0u8; 8];
        let n = key.len().min(8);
        first[..n].copy_from_slice(&key[..n]);
        Self {
            at,
            prefix: u64::from_be_bytes(first),
            key,
            hash: hash.0,
        }
    }
}

/// The keys of a subtask that have timers, by clock, in the order their earliest timers fire:
/// (timestamp, key).
#[derive(Debug, Default)]
pub(super) struct TimerIndex {
    heads: [BTreeSet<Head>; 2],
    /// Pending timers by clock.
    pending: [usize; 2],
    /// The state changed under the index (a restore, a roll-back): rebuild before use.
    stale: bool,
    /// The timer state's id, once declared (saves a lookup by name per timer).
    id: Option<StateId>,
    /// Reused for the timer set a change writes.
    scratch: Vec<u8>,
}

impl TimerIndex {
    pub(super) fn mark_stale(&mut self) {
        self.stale = true;
    }

    /// Moves `key`'s entry of `domain` from its earliest timer `before` to `after`.
    fn move_head(
        &mut self,
        domain: TimeDomain,
        key: KeyRef<'_>,
        before: Option<i64>,
        after: Option<i64>,
    ) {
        if before == after {
            return;
        }
        let heads = &mut self.heads[domain.index()];
        let (hash, key) = (key.hash, StateBytes::copy_from_slice(key.bytes));
        if let Some(at) = before {
            heads.remove(&Head::new(at, key.clone(), hash));
        }
        if let Some(at) = after {
            heads.insert(Head::new(at, key, hash));
        }
    }
}

/// The earliest timer of `domain` in the sorted set `set`, if any.
fn head(set: &[u8], domain: TimeDomain) -> Option<Timer> {
    set.chunks_exact(TIMER_BYTES)
        .find(|t| t[0] == domain as u8)
        .and_then(Timer::decode)
}

/// What a change of a key's timer set did: its earliest timer of the changed clock before and
/// after, and what the change returns.
struct SetChange<R> {
    before: Option<i64>,
    after: Option<i64>,
    result: R,
}

impl KeyedStateBackend {
    /// The timer state's id, declared on first use (in any phase: it is the backend's own).
    pub fn timers_state(&mut self) -> Result<StateId, StateError> {
        if let Some(id) = self.timers.id {
            return Ok(id);
        }
        let id = self.declare_new(TIMERS_STATE, StateKind::Value)?;
        self.timers.id = Some(id);
        Ok(id)
    }

    /// Rebuilds the index from the state if it went stale.
    fn fresh_timer_index(&mut self) -> Result<(), StateError> {
        if !self.timers.stale {
            return Ok(());
        }
        let mut index = TimerIndex {
            id: self.state_id(TIMERS_STATE),
            scratch: std::mem::take(&mut self.timers.scratch),
            ..TimerIndex::default()
        };
        if let Some(id) = index.id {
            for (key, set) in self.value_entries(id)? {
                let mut heads = [None, None];
                for timer in decode_set(set)? {
                    let d = timer.domain.index();
                    index.pending[d] += 1;
                    heads[d].get_or_insert(timer.at);
                }
                let hash = hash_key(key.as_ref());
                for (d, at) in heads.into_iter().enumerate() {
                    if let Some(at) = at {
                        index.heads[d].insert(Head::new(at, key.clone(), hash));
                    }
                }
            }
        }
        self.timers = index;
        Ok(())
    }

    /// Changes `key`'s timer set with one lookup: `edit` reads the set (empty if the key has
    /// none) and either writes the new set into its second argument and returns `Some`, or
    /// returns `None` to leave it as it is. An empty new set removes the key's value. The
    /// index is the caller's to update, from the returned heads of `domain`.
    fn change_timer_set<R>(
        &mut self,
        key: KeyRef<'_>,
        domain: TimeDomain,
        edit: impl FnOnce(&[u8], &mut Vec<u8>) -> Option<R>,
    ) -> Result<Option<SetChange<R>>, StateError> {
        let id = self.timers_state()?;
        let epoch = self.epoch;
        let mut updated = std::mem::take(&mut self.timers.scratch);
        updated.clear();
        let table = self.table_mut::<ValueBody>(id, key)?;
        let position = table.position(key.bytes, key.hash);
        let set = position
            .and_then(|p| table.entry_at(p))
            .and_then(|e| e.body.as_deref())
            .unwrap_or_default();
        let before = head(set, domain).map(|t| t.at);
        let Some(result) = edit(set, &mut updated) else {
            self.timers.scratch = updated;
            return Ok(None);
        };
        let after = head(&updated, domain).map(|t| t.at);
        let entry = match position {
            Some(p) => table.write_at(p, epoch),
            // No set before and none after: nothing to write.
            None if updated.is_empty() => {
                self.timers.scratch = updated;
                return Ok(Some(SetChange {
                    before,
                    after,
                    result,
                }));
            }
            None => table.write(key.bytes, key.hash, epoch, Default::default),
        };
        let weight_before = weight(&entry.body, key.bytes);
        entry.body = (!updated.is_empty()).then(|| StateBytes::copy_from_slice(&updated));
        let weight_after = weight(&entry.body, key.bytes);
        self.live_bytes = self.live_bytes + weight_after - weight_before;
        self.timers.scratch = updated;
        Ok(Some(SetChange {
            before,
            after,
            result,
        }))
    }

    /// Registers `timer` for `key`; returns false if it was registered already (one timer per
    /// key, domain, timestamp and tag).
    pub fn timer_register(&mut self, key: KeyRef<'_>, timer: Timer) -> Result<bool, StateError> {
        self.fresh_timer_index()?;
        let encoded = timer.encode();
        let change = self.change_timer_set(key, timer.domain, |set, updated| {
            let position = binary_search(set, &encoded).err()?;
            updated.extend_from_slice(&set[..position]);
            updated.extend_from_slice(&encoded);
            updated.extend_from_slice(&set[position..]);
            Some(())
        })?;
        let Some(change) = change else {
            return Ok(false);
        };
        self.timers
            .move_head(timer.domain, key, change.before, change.after);
        self.timers.pending[timer.domain.index()] += 1;
        Ok(true)
    }

    /// Deletes `timer` of `key`; returns false if there was no such timer.
    pub fn timer_delete(&mut self, key: KeyRef<'_>, timer: Timer) -> Result<bool, StateError> {
        self.fresh_timer_index()?;
        if self.state_id(TIMERS_STATE).is_none() {
            return Ok(false);
        }
        let encoded = timer.encode();
        let change = self.change_timer_set(key, timer.domain, |set, updated| {
            let position = binary_search(set, &encoded).ok()?;
            updated.extend_from_slice(&set[..position]);
            updated.extend_from_slice(&set[position + TIMER_BYTES..]);
            Some(())
        })?;
        let Some(change) = change else {
            return Ok(false);
        };
        self.timers
            .move_head(timer.domain, key, change.before, change.after);
        self.timers.pending[timer.domain.index()] -= 1;
        Ok(true)
    }

    /// The earliest timestamp of a pending timer of `domain`.
    pub fn next_timer(&mut self, domain: TimeDomain) -> Result<Option<i64>, StateError> {
        self.fresh_timer_index()?;
        Ok(self.timers.heads[domain.index()].first().map(|h| h.at))
    }

    /// Removes up to `most` timers of `domain` due at `upto` (timestamp at or before it), in
    /// firing order, and returns them: each leaves its key's set, a write of that key.
    pub fn take_due_timers(
        &mut self,
        domain: TimeDomain,
        upto: i64,
        most: usize,
    ) -> Result<Vec<FiredTimer>, StateError> {
        self.fresh_timer_index()?;
        let mut fired = Vec::new();
        let d = domain.index();
        self.warm_due_timer_sets(domain, upto, most)?;
        while fired.len() < most {
            if self.timers.heads[d].first().is_none_or(|h| h.at > upto) {
                break;
            }
            let Some(Head { at, key, hash, .. }) = self.timers.heads[d].pop_first() else {
                break;
            };
            let key_ref = KeyRef::new(&key, KeyHash(hash));
            // The key's earliest timer of the clock leaves its set: a write of the key.
            let change = self.change_timer_set(key_ref, domain, |set, updated| {
                let timer = head(set, domain).filter(|t| t.at == at)?;
                let position = binary_search(set, &timer.encode()).ok()?;
                updated.extend_from_slice(&set[..position]);
                updated.extend_from_slice(&set[position + TIMER_BYTES..]);
                Some(timer)
            })?;
            // Firing a timer the state does not hold would find it again: never ending.
            let Some(SetChange {
                after,
                result: timer,
                ..
            }) = change
            else {
                return Err(StateError::BadTimers(
                    "the index names a timer the state does not hold".into(),
                ));
            };
            if let Some(next) = after {
                self.timers.heads[d].insert(Head::new(next, key.clone(), KeyHash(hash)));
            }
            self.timers.pending[d] -= 1;
            fired.push(FiredTimer {
                key,
                at: timer.at,
                tag: timer.tag,
            });
        }
        Ok(fired)
    }

    /// Starts loading the timer sets of the keys whose timers are due next, up to `most`.
    ///
    /// Keys fire in (timestamp, key) order, which is no order in memory: each key's set would
    /// be a cache miss, waited for one after the other. Touched first for the whole run, the
    /// misses overlap (as [`KeyedStateBackend::warm`] does for a batch's keys).
    fn warm_due_timer_sets(
        &self,
        domain: TimeDomain,
        upto: i64,
        most: usize,
    ) -> Result<(), StateError> {
        let Some(id) = self.timers.id else {
            return Ok(());
        };
        let mut touched = 0u64;
        let due = self.timers.heads[domain.index()]
            .iter()
            .take_while(|h| h.at <= upto)
            .take(most);
        for h in due {
            let key = KeyRef::new(&h.key, KeyHash(h.hash));
            touched ^= self.table::<ValueBody>(id, key)?.touch(key.hash);
        }
        std::hint::black_box(touched);
        Ok(())
    }

    /// Pending timers of each domain: event time, processing time.
    pub fn timers_pending(&mut self) -> Result<(usize, usize), StateError> {
        self.fresh_timer_index()?;
        Ok((self.timers.pending[0], self.timers.pending[1]))
    }

    /// Every timer of `key`, in (domain, timestamp, tag) order.
    pub fn timers_of(&self, key: KeyRef<'_>) -> Result<Vec<Timer>, StateError> {
        let Some(id) = self.state_id(TIMERS_STATE) else {
            return Ok(Vec::new());
        };
        match self.value_get(id, key)? {
            Some(set) => Ok(decode_set(set)?.collect()),
            None => Ok(Vec::new()),
        }
    }

    /// The state changed without the index seeing it: rebuild it before its next use.
    pub(super) fn timers_changed(&mut self) {
        self.timers.mark_stale();
    }
}

/// Where `timer` is, or would go, in the sorted set `set` (in bytes).
fn binary_search(set: &[u8], timer: &[u8; TIMER_BYTES]) -> Result<usize, usize> {
    let count = set.len() / TIMER_BYTES;
    let (mut low, mut high) = (0, count);
    while low < high {
        let mid = (low + high) / 2;
        let at = &set[mid * TIMER_BYTES..(mid + 1) * TIMER_BYTES];
        match at.cmp(&timer[..]) {
            std::cmp::Ordering::Less => low = mid + 1,
            std::cmp::Ordering::Greater => high = mid,
            std::cmp::Ordering::Equal => return Ok(mid * TIMER_BYTES),
        }
    }
    Err(low * TIMER_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubtaskIndex;
    use crate::partition::KeyGroups;

    fn backend() -> KeyedStateBackend {
        let groups = KeyGroups::default();
        KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1))
    }

    fn key(k: &str) -> KeyRef<'_> {
        KeyRef::new(k.as_bytes(), hash_key(k.as_bytes()))
    }

    fn event(at: i64, tag: u32) -> Timer {
        Timer {
            domain: TimeDomain::EventTime,
            at,
            tag,
        }
    }

    #[test]
    fn encoding_sorts_like_the_numbers() {
        let timers = [
            event(-5, 0),
            event(-1, 7),
            event(0, 0),
            event(3, 1),
            event(3, 2),
        ];
        for pair in timers.windows(2) {
            assert!(pair[0].encode() < pair[1].encode(), "{pair:?}");
        }
        for t in timers {
            assert_eq!(Timer::decode(&t.encode()), Some(t));
        }
    }

    #[test]
    fn timers_fire_in_timestamp_then_key_order_and_leave_the_state() {
        let mut b = backend();
        assert!(b.timer_register(key("b"), event(10, 0)).expect("register"));
        assert!(!b.timer_register(key("b"), event(10, 0)).expect("again"));
        b.timer_register(key("a"), event(10, 0)).expect("register");
        b.timer_register(key("a"), event(5, 1)).expect("register");
        b.timer_register(key("a"), event(20, 0)).expect("register");
        let processing = Timer {
            domain: TimeDomain::ProcessingTime,
            ..event(1, 0)
        };
        b.timer_register(key("c"), processing).expect("register");
        assert_eq!(b.timers_pending(), Ok((4, 1)));
        assert!(b.timer_delete(key("a"), event(20, 0)).expect("delete"));
        assert!(!b.timer_delete(key("a"), event(20, 0)).expect("delete"));
        let fired = b
            .take_due_timers(TimeDomain::EventTime, 10, 100)
            .expect("due");
        let fired: Vec<_> = fired.iter().map(|f| (f.at, &f.key[..], f.tag)).collect();
        assert_eq!(
            fired,
            [(5, &b"a"[..], 1), (10, &b"a"[..], 0), (10, &b"b"[..], 0)]
        );
        assert_eq!(b.timers_of(key("a")), Ok(vec![]));
        assert_eq!(b.timers_pending(), Ok((0, 1)));
        assert_eq!(b.next_timer(TimeDomain::ProcessingTime), Ok(Some(1)));
    }

    #[test]
    fn keys_sharing_their_first_bytes_or_holding_zeros_fire_in_byte_order() {
        // The index orders by an eight-byte prefix before the bytes: keys that differ only
        // past it, are prefixes of each other, or end in zero bytes must still fire in
        // (timestamp, key bytes, tag) order.
        let keys: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"\0".to_vec(),
            b"\0\0".to_vec(),
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"abcdefgh".to_vec(),
            b"abcdefgh\0".to_vec(),
            b"abcdefghij".to_vec(),
            b"abcdefghi".to_vec(),
            b"abcdefgg\xff\xff".to_vec(),
            b"\xff".to_vec(),
            vec![0x7f; 30],
            vec![0x7f; 29],
        ];
        let mut b = backend();
        let mut expected = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            for (at, tag) in [(10 + (i as i64 % 3), 1), (10, 0), (40, 2)] {
                let kr = KeyRef::new(k, hash_key(k));
                if b.timer_register(kr, event(at, tag)).expect("register") {
                    expected.push((at, k.clone(), tag));
                }
            }
        }
        expected.sort();
        let mut fired = Vec::new();
        // A few at a time, so that a key re-enters the index between takes.
        loop {
            let due = b
                .take_due_timers(TimeDomain::EventTime, 100, 4)
                .expect("due");
            if due.is_empty() {
                break;
            }
            fired.extend(due.into_iter().map(|f| (f.at, f.key.to_vec(), f.tag)));
        }
        assert_eq!(fired, expected);
        assert_eq!(b.timers_pending(), Ok((0, 0)));
        assert_eq!(
            b.live_bytes(),
            0,
            "every set is gone, and its bytes with it"
        );
    }

    #[test]
    fn the_index_is_rebuilt_from_the_state_after_a_restore() {
        let mut b = backend();
        b.timer_register(key("x"), event(7, 3)).expect("register");
        b.timer_register(key("y"), event(2, 0)).expect("register");
        let increment = b.snapshot();
        let mut restored = backend();
        restored.restore(&increment).expect("restore");
        assert_eq!(restored.timers_pending(), Ok((2, 0)));
        let fired = restored
            .take_due_timers(TimeDomain::EventTime, i64::MAX, 100)
            .expect("due");
        assert_eq!(fired.len(), 2);
        assert_eq!(&fired[0].key[..], b"y");
    }

    #[test]
    fn a_restored_timer_set_out_of_order_is_an_error_not_a_timer_firing_forever() {
        use crate::state::{Change, GroupIncrement, Increment, StateChanges};
        let groups = KeyGroups::default();
        let mut set = event(9, 0).encode().to_vec();
        set.extend_from_slice(&event(3, 0).encode());
        let increment = Increment {
            checkpoint: crate::ids::CheckpointId(1),
            groups: vec![GroupIncrement {
                group: groups.of(hash_key(b"k")),
                states: vec![StateChanges {
                    name: TIMERS_STATE.into(),
                    kind: StateKind::Value,
                    changes: vec![Change::Value {
                        key: StateBytes::copy_from_slice(b"k"),
                        value: Some(StateBytes::copy_from_slice(&set)),
                    }],
                }],
            }],
        };
        let mut restored = backend();
        restored.restore(&increment).expect("restore");
        let e = restored
            .take_due_timers(TimeDomain::EventTime, i64::MAX, 100)
            .expect_err("out of order");
        assert!(e.to_string().contains("out of order"), "{e}");
        assert!(restored.timers_of(key("k")).is_err());
    }

    #[test]
    fn operators_cannot_declare_the_reserved_name() {
        let mut b = backend();
        assert!(b.declare(TIMERS_STATE, StateKind::Map).is_err());
    }
}
