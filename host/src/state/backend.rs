//! [`KeyedStateBackend`]: one subtask's keyed state.

use std::collections::HashMap;

use super::aging::Ages;
use super::list::ListBody;
use super::map::MapBody;
use super::table::KeyedTable;
use super::take::Pinning;
use super::timers::TimerIndex;
use super::value::ValueBody;
use super::{StateBytes, StateEncoding, StateError, StateId, StateKind};
use crate::ids::CheckpointId;
use crate::partition::{KeyGroupRange, KeyGroups, KeyHash};

/// A key as the backend sees it: its bytes and its stable hash (computed once upstream).
#[derive(Clone, Copy, Debug)]
pub struct KeyRef<'a> {
    pub bytes: &'a [u8],
    pub hash: KeyHash,
}

impl<'a> KeyRef<'a> {
    pub fn new(bytes: &'a [u8], hash: KeyHash) -> Self {
        Self { bytes, hash }
    }
}

/// The tables of one declared state, one per key group of the subtask's range.
#[derive(Debug)]
pub(super) enum Tables {
    Value(Vec<KeyedTable<ValueBody>>),
    Map(Vec<KeyedTable<MapBody>>),
    List(Vec<KeyedTable<ListBody>>),
}

impl Tables {
    fn new(kind: StateKind, groups: usize) -> Self {
        fn tables<T>(groups: usize) -> Vec<KeyedTable<T>> {
            (0..groups).map(|_| KeyedTable::default()).collect()
        }
        match kind {
            StateKind::Value => Tables::Value(tables(groups)),
            StateKind::Map => Tables::Map(tables(groups)),
            StateKind::List => Tables::List(tables(groups)),
        }
    }

    pub(super) fn kind(&self) -> StateKind {
        match self {
            Tables::Value(_) => StateKind::Value,
            Tables::Map(_) => StateKind::Map,
            Tables::List(_) => StateKind::List,
        }
    }

    fn stats(&self) -> StateStats {
        fn sum<T>(tables: &[KeyedTable<T>]) -> StateStats {
            tables
                .iter()
                .fold(StateStats::default(), |acc, t| StateStats {
                    entries: acc.entries + t.len(),
                    dirty_keys: acc.dirty_keys + t.dirty_len(),
                })
        }
        match self {
            Tables::Value(t) => sum(t),
            Tables::Map(t) => sum(t),
            Tables::List(t) => sum(t),
        }
    }
}

/// An entry payload type, tied to the [`Tables`] variant that holds it.
pub(super) trait Body: Sized + Default {
    const KIND: StateKind;
    fn tables(tables: &Tables) -> Option<&Vec<KeyedTable<Self>>>;
    fn tables_mut(tables: &mut Tables) -> Option<&mut Vec<KeyedTable<Self>>>;
}

macro_rules! body {
    ($ty:ty, $variant:ident) => {
        impl Body for $ty {
            const KIND: StateKind = StateKind::$variant;
            fn tables(tables: &Tables) -> Option<&Vec<KeyedTable<Self>>> {
                match tables {
                    Tables::$variant(t) => Some(t),
                    _ => None,
                }
            }
            fn tables_mut(tables: &mut Tables) -> Option<&mut Vec<KeyedTable<Self>>> {
                match tables {
                    Tables::$variant(t) => Some(t),
                    _ => None,
                }
            }
        }
    };
}
body!(ValueBody, Value);
body!(MapBody, Map);
body!(ListBody, List);

#[derive(Debug)]
pub(super) struct DeclaredState {
    pub(super) name: String,
    pub(super) tables: Tables,
    /// Declared by the operator as it opened, as opposed to found only in a restored
    /// snapshot: state a new version of the operator no longer has.
    pub(super) by_operator: bool,
    /// How the operator encodes what it reads and writes: the host converts at the guest
    /// boundary ([`crate::guest`]) and stores CBOR whatever this is.
    pub(super) encoding: StateEncoding,
}

/// Where a key's entry was found in its table: passed back to a write of the same key in the
/// same batch to skip the lookup. Only a hint: it is checked before use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHint(pub u32);

/// Counts that describe a backend, for summaries and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateStats {
    /// Entries (keys) across all states, tombstones included.
    pub entries: usize,
    /// Keys written since the last snapshot.
    pub dirty_keys: usize,
}

/// One subtask's keyed state: every declared state, split by key group.
///
/// Every access names a key by its bytes and hash; the backend derives the key group and
/// refuses keys outside the subtask's range, so a routing bug can never write into another
/// subtask's state.
#[derive(Debug)]
pub struct KeyedStateBackend {
    groups: KeyGroups,
    range: KeyGroupRange,
    pub(super) states: Vec<DeclaredState>,
    by_name: HashMap<String, StateId>,
    /// The checkpoint that the current writes belong to.
    pub(super) epoch: CheckpointId,
    /// The epoch after the last snapshot or restore: the entries written in it or after (and
    /// only they) are dirty. Not always `epoch`, since checkpoint ids may skip numbers.
    pub(super) dirty_since: CheckpointId,
    /// Declaring is allowed only while the operator opens.
    declaring: bool,
    /// The keys of each increment of the chain, for re-writing the oldest ([`super::aging`]).
    pub(super) ages: Ages,
    /// Bytes of the live keys and values (maps and lists: their elements), kept as writes
    /// happen: the state's size without reading it all.
    pub(super) live_bytes: usize,
    /// The pending timers by time (`state::timers`).
    pub(super) timers: TimerIndex,
    /// The snapshot frozen and not yet wholly pinned (`state::frozen`).
    pub(super) pinning: Option<Pinning>,
}

impl KeyedStateBackend {
    /// An empty backend for a subtask owning `range` out of `groups`.
    pub fn new(groups: KeyGroups, range: KeyGroupRange) -> Self {
        Self {
            groups,
            range,
            states: Vec::new(),
            by_name: HashMap::new(),
            epoch: CheckpointId(1),
            dirty_since: CheckpointId(1),
            declaring: true,
            ages: Ages::new(),
            live_bytes: 0,
            timers: TimerIndex::default(),
            pinning: None,
        }
    }

    pub fn key_groups(&self) -> KeyGroups {
        self.groups
    }

    pub fn range(&self) -> KeyGroupRange {
        self.range
    }

    /// The checkpoint that current writes belong to.
    pub fn epoch(&self) -> CheckpointId {
        self.epoch
    }

    /// Starts the epoch at `checkpoint` (a run's first checkpoint, which follows every one in
    /// the store), unless it is past it already.
    pub fn begin_at(&mut self, checkpoint: CheckpointId) {
        self.epoch = self.epoch.max(checkpoint);
    }

    /// Declares a state its operator reads and writes as CBOR, or returns the id of the same
    /// state declared before.
    pub fn declare(&mut self, name: &str, kind: StateKind) -> Result<StateId, StateError> {
        self.declare_as(name, kind, StateEncoding::Cbor)
    }

    /// Declares a state its operator reads and writes as `encoding`, or returns the id of the
    /// same state declared before.
    pub fn declare_as(
        &mut self,
        name: &str,
        kind: StateKind,
        encoding: StateEncoding,
    ) -> Result<StateId, StateError> {
        if name.starts_with('@') {
            return Err(StateError::ReservedName(name.to_owned()));
        }
        if !self.declaring && !self.by_name.contains_key(name) {
            return Err(StateError::DeclareAfterOpen);
        }
        let id = self.declare_new(name, kind)?;
        let state = &mut self.states[id.0 as usize];
        state.by_operator = true;
        state.encoding = encoding;
        Ok(id)
    }

    /// How the operator encodes the state `state` (CBOR for one it has not declared).
    #[inline]
    pub fn encoding(&self, state: StateId) -> StateEncoding {
        self.states
            .get(state.0 as usize)
            .map_or(StateEncoding::Cbor, |s| s.encoding)
    }

    /// Declares a state, in any phase: restore declares the states it finds in snapshots.
    pub(super) fn declare_new(
        &mut self,
        name: &str,
        kind: StateKind,
    ) -> Result<StateId, StateError> {
        if let Some(&id) = self.by_name.get(name) {
            let existing = self.states[id.0 as usize].tables.kind();
            return if existing == kind {
                Ok(id)
            } else {
                Err(StateError::KindConflict {
                    name: name.to_owned(),
                    existing,
                    requested: kind,
                })
            };
        }
        if name.is_empty() || name.chars().count() > 128 {
            return Err(StateError::InvalidName(name.to_owned()));
        }
        let id = StateId(self.states.len() as u32);
        self.states.push(DeclaredState {
            name: name.to_owned(),
            tables: Tables::new(kind, self.range.len()),
            by_operator: false,
            encoding: StateEncoding::Cbor,
        });
        self.by_name.insert(name.to_owned(), id);
        Ok(id)
    }

    /// The states a restore found that the operator did not declare as it opened and that
    /// hold entries, with their entry counts: state its new version has no place for.
    pub fn unclaimed_states(&self) -> Vec<(&str, usize)> {
        self.states
            .iter()
            .filter(|s| !s.by_operator && !s.name.starts_with('@'))
            .map(|s| (s.name.as_str(), s.tables.stats().entries))
            .filter(|(_, entries)| *entries > 0)
            .collect()
    }

    /// The names of the states the operator declared as it opened.
    pub fn declared_states(&self) -> Vec<&str> {
        self.states
            .iter()
            .filter(|s| s.by_operator)
            .map(|s| s.name.as_str())
            .collect()
    }

    /// The names of the operator's states that hold entries, for a checkpoint's metadata.
    pub fn states_with_entries(&self) -> Vec<String> {
        self.states
            .iter()
            .filter(|s| !s.name.starts_with('@') && s.tables.stats().entries > 0)
            .map(|s| s.name.clone())
            .collect()
    }

    /// Empties the state `name` (`--allow-dropped-state`). Its entries leave the live state
    /// only: the caller makes the next checkpoint a full one, so no later restore reads them
    /// from the chain again.
    pub fn drop_state(&mut self, name: &str) {
        assert!(
            !self.is_pinning(),
            "a state dropped while a snapshot is pinned"
        );
        if let Some(&id) = self.by_name.get(name) {
            let state = &mut self.states[id.0 as usize];
            state.tables = Tables::new(state.tables.kind(), self.range.len());
            self.recount_live_bytes();
        }
    }

    /// Ends the declaration phase; called once the operator has opened.
    pub fn seal_declarations(&mut self) {
        self.declaring = false;
    }

    /// The name of a declared state, for messages.
    pub fn state_name(&self, state: StateId) -> Option<&str> {
        self.states.get(state.0 as usize).map(|s| s.name.as_str())
    }

    /// The id of a declared state.
    pub fn state_id(&self, name: &str) -> Option<StateId> {
        self.by_name.get(name).copied()
    }

    /// Entry and dirty-key counts across all states.
    pub fn stats(&self) -> StateStats {
        self.states
            .iter()
            .map(|s| s.tables.stats())
            .fold(StateStats::default(), |a, b| StateStats {
                entries: a.entries + b.entries,
                dirty_keys: a.dirty_keys + b.dirty_keys,
            })
    }

    /// The offset of the key's group in this subtask's range, or why it is not ours.
    #[inline]
    fn group_offset(&self, key: KeyRef<'_>) -> Result<usize, StateError> {
        let group = self.groups.of(key.hash);
        self.range
            .offset(group)
            .ok_or(StateError::KeyGroupOutOfRange {
                group,
                range: self.range,
            })
    }

    fn wrong_kind(&self, state: StateId, expected: StateKind) -> StateError {
        match self.states.get(state.0 as usize) {
            Some(s) => StateError::WrongKind {
                name: s.name.clone(),
                expected,
                actual: s.tables.kind(),
            },
            None => StateError::UnknownState(state.0),
        }
    }

    #[inline]
    pub(super) fn table<B: Body>(
        &self,
        state: StateId,
        key: KeyRef<'_>,
    ) -> Result<&KeyedTable<B>, StateError> {
        let group = self.group_offset(key)?;
        self.states
            .get(state.0 as usize)
            .and_then(|s| B::tables(&s.tables))
            .map(|t| &t[group])
            .ok_or_else(|| self.wrong_kind(state, B::KIND))
    }

    #[inline]
    pub(super) fn table_mut<B: Body>(
        &mut self,
        state: StateId,
        key: KeyRef<'_>,
    ) -> Result<&mut KeyedTable<B>, StateError> {
        let group = self.group_offset(key)?;
        let index = state.0 as usize;
        if !self
            .states
            .get(index)
            .is_some_and(|s| s.tables.kind() == B::KIND)
        {
            return Err(self.wrong_kind(state, B::KIND));
        }
        self.states
            .get_mut(index)
            .and_then(|s| B::tables_mut(&mut s.tables))
            .map(|t| &mut t[group])
            .ok_or(StateError::UnknownState(state.0))
    }

    // ----- value state -----------------------------------------------------------------

    /// The value of `key`, if any.
    #[inline]
    pub fn value_get(&self, state: StateId, key: KeyRef<'_>) -> Result<Option<&[u8]>, StateError> {
        let table = self.table::<ValueBody>(state, key)?;
        Ok(table
            .get(key.bytes, key.hash)
            .and_then(|e| e.body.as_deref()))
    }

    /// Starts loading into cache the entries of `keys` (a batch's distinct keys) in the
    /// states an operator reaches one key and one call at a time: maps, lists, and the
    /// reserved states (timers). Value states are read for a whole batch at once
    /// ([`KeyedStateBackend::value_get_many`]), which does the same.
    ///
    /// With more keys than the processor's caches hold, each lookup of a batch's key misses
    /// the cache two or three times (the index, the entry, a map's entries), one call after
    /// the other; started here for every key at once, the misses overlap and the calls find
    /// the entries in cache.
    pub fn warm<'k>(&self, keys: impl Iterator<Item = KeyRef<'k>> + Clone) {
        let mut touched = 0u64;
        for state in &self.states {
            let per_key = matches!(state.tables, Tables::Map(_) | Tables::List(_));
            if !per_key && !state.name.starts_with('@') {
                continue;
            }
            for key in keys.clone() {
                let Ok(group) = self.group_offset(key) else {
                    continue;
                };
                touched ^= match &state.tables {
                    Tables::Value(t) => t[group].touch(key.hash),
                    Tables::Map(t) => t[group].touch_with(key.hash, |e| e.body.entries.touch()),
                    Tables::List(t) => t[group].touch(key.hash),
                };
            }
        }
        std::hint::black_box(touched);
    }

    /// Looks up the values of many keys at once, calling `f(i, value)` for the `i`-th key.
    ///
    /// Faster than one [`KeyedStateBackend::value_get`] per key when the state is larger than
    /// the processor's caches: a first pass starts loading every key's entry, so their cache
    /// misses overlap, and a second pass reads them.
    pub fn value_get_many<'k>(
        &self,
        state: StateId,
        keys: impl Iterator<Item = KeyRef<'k>> + Clone,
        mut f: impl FnMut(usize, Option<&[u8]>, Option<EntryHint>),
    ) -> Result<(), StateError> {
        let mut touched = 0u64;
        for key in keys.clone() {
            if let Ok(table) = self.table::<ValueBody>(state, key) {
                touched ^= table.touch(key.hash);
            }
        }
        std::hint::black_box(touched);
        for (i, key) in keys.enumerate() {
            let table = self.table::<ValueBody>(state, key)?;
            match table.position(key.bytes, key.hash) {
                Some(position) => {
                    let value = table.entry_at(position).and_then(|e| e.body.as_deref());
                    f(i, value, Some(EntryHint(position as u32)));
                }
                None => f(i, None, None),
            }
        }
        Ok(())
    }

    /// Every live (key, value) of the value state `state`, in no particular order.
    pub fn value_entries(
        &self,
        state: StateId,
    ) -> Result<impl Iterator<Item = (&StateBytes, &[u8])>, StateError> {
        let tables = self
            .states
            .get(state.0 as usize)
            .and_then(|s| ValueBody::tables(&s.tables))
            .ok_or_else(|| self.wrong_kind(state, StateKind::Value))?;
        Ok(tables
            .iter()
            .flat_map(|t| t.iter())
            .filter_map(|e| Some((&e.key, e.body.as_deref()?))))
    }

    /// Sets the value of `key`, trying `hint` (from [`KeyedStateBackend::value_get_many`]
    /// in the same batch) before looking the key up.
    #[inline]
    pub fn value_set_hinted(
        &mut self,
        state: StateId,
        key: KeyRef<'_>,
        hint: Option<EntryHint>,
        value: &[u8],
    ) -> Result<(), StateError> {
        let epoch = self.epoch;
        let table = self.table_mut::<ValueBody>(state, key)?;
        let hint = hint.map(|h| h.0 as usize);
        let entry = table.write_hinted(hint, key.bytes, key.hash, epoch, ValueBody::default);
        let before = weight(&entry.body, key.bytes);
        entry.body = Some(StateBytes::copy_from_slice(value));
        self.live_bytes = self.live_bytes + key.bytes.len() + value.len() - before;
        Ok(())
    }

    /// Sets the value of `key`.
    #[inline]
    pub fn value_set(
        &mut self,
        state: StateId,
        key: KeyRef<'_>,
        value: &[u8],
    ) -> Result<(), StateError> {
        let epoch = self.epoch;
        let table = self.table_mut::<ValueBody>(state, key)?;
        let entry = table.write(key.bytes, key.hash, epoch, ValueBody::default);
        let before = weight(&entry.body, key.bytes);
        entry.body = Some(StateBytes::copy_from_slice(value));
        self.live_bytes = self.live_bytes + key.bytes.len() + value.len() - before;
        Ok(())
    }

    /// Removes the value of `key`; the entry stays as a tombstone until a snapshot records it.
    pub fn value_remove(&mut self, state: StateId, key: KeyRef<'_>) -> Result<(), StateError> {
        let epoch = self.epoch;
        let table = self.table_mut::<ValueBody>(state, key)?;
        let live = table
            .get(key.bytes, key.hash)
            .is_some_and(|e| e.body.is_some());
        if live && let Some(entry) = table.write_existing(key.bytes, key.hash, epoch) {
            let before = weight(&entry.body, key.bytes);
            entry.body = None;
            self.live_bytes -= before;
        }
        Ok(())
    }

    // ----- map state -------------------------------------------------------------------

    /// The map of `key`, if it has one.
    pub fn map(&self, state: StateId, key: KeyRef<'_>) -> Result<Option<&MapBody>, StateError> {
        let table = self.table::<MapBody>(state, key)?;
        Ok(table.get(key.bytes, key.hash).map(|e| &e.body))
    }

    pub fn map_get(
        &self,
        state: StateId,
        key: KeyRef<'_>,
        map_key: &[u8],
    ) -> Result<Option<&[u8]>, StateError> {
        Ok(self.map(state, key)?.and_then(|m| m.get(map_key)))
    }

    pub fn map_put(
        &mut self,
        state: StateId,
        key: KeyRef<'_>,
        map_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        let epoch = self.epoch;
        let table = self.table_mut::<MapBody>(state, key)?;
        let map = &mut table
            .write(key.bytes, key.hash, epoch, MapBody::default)
            .body;
        let before = map.bytes;
        map.put(map_key, value, epoch);
        let after = map.bytes;
        self.live_bytes = self.live_bytes + after - before;
        Ok(())
    }

    pub fn map_remove(
        &mut self,
        state: StateId,
        key: KeyRef<'_>,
        map_key: &[u8],
    ) -> Result<(), StateError> {
        let epoch = self.epoch;
        let table = self.table_mut::<MapBody>(state, key)?;
        // One lookup of the key; it is marked dirty only if the map held `map_key`.
        let present = table.position(key.bytes, key.hash).filter(|&p| {
            table
                .entry_at(p)
                .is_some_and(|e| e.body.get(map_key).is_some())
        });
        if let Some(position) = present {
            let entry = table.write_at(position, epoch);
            let before = entry.body.bytes;
            entry.body.remove(map_key, epoch);
            let freed = before - entry.body.bytes;
            self.live_bytes -= freed;
        }
        Ok(())
    }

    pub fn map_clear(&mut self, state: StateId, key: KeyRef<'_>) -> Result<(), StateError> {
        let epoch = self.epoch;
        let table = self.table_mut::<MapBody>(state, key)?;
        if let Some(entry) = table.write_existing(key.bytes, key.hash, epoch) {
            let freed = entry.body.bytes;
            entry.body.clear();
            self.live_bytes -= freed;
        }
        Ok(())
    }

    // ----- list state ------------------------------------------------------------------

    /// The items of `key`'s list, oldest first (empty if it has none).
    pub fn list_items(&self, state: StateId, key: KeyRef<'_>) -> Result<&[StateBytes], StateError> {
        let table = self.table::<ListBody>(state, key)?;
        Ok(table
            .get(key.bytes, key.hash)
            .map_or(&[][..], |e| e.body.items.as_slice()))
    }

    pub fn list_append(
        &mut self,
        state: StateId,
        key: KeyRef<'_>,
        item: &[u8],
    ) -> Result<(), StateError> {
        let epoch = self.epoch;
        let table = self.table_mut::<ListBody>(state, key)?;
        table
            .write(key.bytes, key.hash, epoch, ListBody::default)
            .body
            .append(item);
        self.live_bytes += item.len();
        Ok(())
    }

    pub fn list_clear(&mut self, state: StateId, key: KeyRef<'_>) -> Result<(), StateError> {
        let epoch = self.epoch;
        let table = self.table_mut::<ListBody>(state, key)?;
        if let Some(entry) = table.write_existing(key.bytes, key.hash, epoch) {
            let freed = entry.body.bytes;
            entry.body.clear();
            self.live_bytes -= freed;
        }
        Ok(())
    }
}

/// The bytes a value entry holds: its key and value, or nothing for a tombstone.
#[inline]
pub(super) fn weight(body: &ValueBody, key: &[u8]) -> usize {
    body.as_ref().map_or(0, |v| key.len() + v.len())
}

impl KeyedStateBackend {
    /// Bytes of the live keys and values (of maps and lists: their elements' keys and
    /// values, and the items), for metrics and space amplification.
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// Counts [`Self::live_bytes`] again from the tables, after a restore.
    pub(super) fn recount_live_bytes(&mut self) {
        let mut total = 0;
        for state in &mut self.states {
            match &mut state.tables {
                Tables::Value(tables) => {
                    for e in tables.iter().flat_map(|t| t.iter()) {
                        total += weight(&e.body, &e.key);
                    }
                }
                Tables::Map(tables) => {
                    for table in tables.iter_mut() {
                        for position in 0..table.len() {
                            if let Some(e) = table.entry_at_mut(position) {
                                e.body.bytes = e
                                    .body
                                    .entries
                                    .iter()
                                    .filter_map(|(k, v)| Some(k.len() + v.value.as_ref()?.len()))
                                    .sum();
                                total += e.body.bytes;
                            }
                        }
                    }
                }
                Tables::List(tables) => {
                    for table in tables.iter_mut() {
                        for position in 0..table.len() {
                            if let Some(e) = table.entry_at_mut(position) {
                                e.body.bytes = e.body.items.iter().map(|i| i.len()).sum();
                                total += e.body.bytes;
                            }
                        }
                    }
                }
            }
        }
        self.live_bytes = total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubtaskIndex;
    use crate::partition::hash_key;

    fn key(k: &str) -> KeyRef<'_> {
        KeyRef::new(k.as_bytes(), hash_key(k.as_bytes()))
    }

    /// A key whose group falls outside `range`.
    fn foreign_key(groups: KeyGroups, range: KeyGroupRange) -> String {
        (0..)
            .map(|i| format!("k{i}"))
            .find(|k| !range.contains(groups.of(hash_key(k.as_bytes()))))
            .expect("some key hashes outside a partial range")
    }

    #[test]
    fn values_are_isolated_per_key_and_per_state() {
        let groups = KeyGroups::default();
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let s1 = b.declare("one", StateKind::Value).expect("declare");
        let s2 = b.declare("two", StateKind::Value).expect("declare");
        b.value_set(s1, key("a"), b"1a").expect("set");
        b.value_set(s2, key("a"), b"2a").expect("set");
        b.value_set(s1, key("b"), b"1b").expect("set");
        assert_eq!(b.value_get(s1, key("a")).expect("get"), Some(&b"1a"[..]));
        assert_eq!(b.value_get(s2, key("a")).expect("get"), Some(&b"2a"[..]));
        assert_eq!(b.value_get(s2, key("b")).expect("get"), None);
        b.value_remove(s1, key("a")).expect("remove");
        assert_eq!(b.value_get(s1, key("a")).expect("get"), None);
        assert_eq!(b.stats().entries, 3, "the removal stays as a tombstone");
    }

    #[test]
    fn access_outside_the_subtask_key_groups_is_refused_with_a_clear_error() {
        let groups = KeyGroups::new(128);
        let range = groups.range_of(SubtaskIndex(1), 3);
        let mut b = KeyedStateBackend::new(groups, range);
        let s = b.declare("count", StateKind::Value).expect("declare");
        let foreign = foreign_key(groups, range);
        let err = b.value_set(s, key(&foreign), b"").expect_err("refused");
        assert!(matches!(err, StateError::KeyGroupOutOfRange { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains("outside this subtask's key groups 43..86"),
            "{msg}"
        );
        assert!(b.value_get(s, key(&foreign)).is_err());
        assert!(b.map_get(s, key(&foreign), b"x").is_err());
        assert_eq!(b.stats().entries, 0, "nothing was written");
    }

    #[test]
    fn declarations_check_kind_and_phase() {
        let groups = KeyGroups::default();
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let v = b.declare("s", StateKind::Value).expect("declare");
        assert_eq!(b.declare("s", StateKind::Value), Ok(v));
        assert!(matches!(
            b.declare("s", StateKind::Map),
            Err(StateError::KindConflict { .. })
        ));
        assert!(matches!(
            b.map_get(v, key("a"), b"k"),
            Err(StateError::WrongKind { .. })
        ));
        b.seal_declarations();
        assert_eq!(
            b.declare("late", StateKind::List),
            Err(StateError::DeclareAfterOpen)
        );
    }

    #[test]
    fn maps_and_lists_per_key() {
        let groups = KeyGroups::default();
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let m = b.declare("m", StateKind::Map).expect("declare");
        let l = b.declare("l", StateKind::List).expect("declare");
        b.map_put(m, key("a"), b"x", b"1").expect("put");
        b.map_put(m, key("b"), b"x", b"2").expect("put");
        b.map_remove(m, key("a"), b"x").expect("remove");
        assert_eq!(b.map_get(m, key("a"), b"x").expect("get"), None);
        assert_eq!(b.map_get(m, key("b"), b"x").expect("get"), Some(&b"2"[..]));
        b.list_append(l, key("a"), b"i1").expect("append");
        b.list_append(l, key("a"), b"i2").expect("append");
        assert_eq!(b.list_items(l, key("a")).expect("items").len(), 2);
        b.list_clear(l, key("a")).expect("clear");
        assert!(b.list_items(l, key("a")).expect("items").is_empty());
        assert!(b.list_items(l, key("b")).expect("items").is_empty());
    }
}
