//! [`KeyedTable`]: the hash table of one (state, key group) pair, with its dirty list.

use std::collections::HashMap;

use super::StateBytes;
use super::bytes::bytes_eq;
use super::chunked::ChunkedVec;
use super::frozen::{Frozen, Pin};
use super::position_index::PositionIndex;

use crate::ids::CheckpointId;
use crate::partition::{KeyHash, hash_key};

/// One key's entry: the key, when it was last written, and the kind's payload.
///
/// The key's hash is not kept: the index holds the 32 bits it needs, and the rare paths that
/// need the whole hash (a removal, a full snapshot's ages) hash the key again.
#[derive(Debug)]
pub(crate) struct Entry<T> {
    pub key: StateBytes,
    /// The checkpoint whose increment will hold (or holds) this entry's latest write.
    pub written_in: CheckpointId,
    pub body: T,
}

/// The entries of one state in one key group, and the keys written since the last snapshot.
///
/// Entries live densely in a chunked vector (no more than one chunk of unused room); the hash
/// index holds only their positions, with a tag from the hash beside each in one `u32`
/// ([`PositionIndex`]). With many keys, a lookup then costs two cache misses (the bucket,
/// then the entry), and the index of a large state stays small.
///
/// The index keeps no hashes: a probe compares keys only where the tag matches (the entry it
/// reads is almost always the one sought), and growing the index, or shifting buckets back
/// after a removal, hashes the keys again ([`KeyedTable::grow_index`]).
#[derive(Debug)]
pub(crate) struct KeyedTable<T> {
    entries: ChunkedVec<Entry<T>>,
    /// Positions in `entries`.
    index: PositionIndex,
    /// Positions of the entries written since the last snapshot, each once (squashing): an
    /// entry is pushed only when its `written_in` moves to the current epoch. Positions, not
    /// keys: nothing is copied per write, and a snapshot visits the entries in memory order.
    /// Entries move only when one is removed: by a restore, or when a snapshot's walk of
    /// this table ends ([`KeyedTable::unfreeze`], which fixes this list up).
    ///
    /// Entries appended since the last freeze (from `fresh` on) are not in it: they are
    /// dirty by their position, which spares a table filling with new keys a list as long
    /// as itself.
    dirty: Vec<u32>,
    /// The number of entries at the last freeze (or restore): those after it were appended
    /// since, and are dirty.
    fresh: u32,
    /// The entries of the snapshot being pinned, if it wrote any here (`state::frozen`).
    frozen: Option<Box<Frozen>>,
}

/// The hash the index uses for a key of hash `hash`.
#[inline]
fn index_hash(hash: KeyHash) -> u64 {
    hash.table_hash()
}

/// [`index_hash`] of an entry's key, hashed again.
#[inline]
fn rehash<T>(entry: &Entry<T>) -> u64 {
    index_hash(hash_key(&entry.key))
}

impl<T> Default for KeyedTable<T> {
    fn default() -> Self {
        Self {
            entries: ChunkedVec::default(),
            index: PositionIndex::default(),
            dirty: Vec::new(),
            fresh: 0,
            frozen: None,
        }
    }
}

impl<T> KeyedTable<T> {
    /// Where `key`'s entry is, if it exists.
    #[inline(always)]
    pub(crate) fn position(&self, key: &[u8], hash: KeyHash) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(index_hash(hash), |p| {
                bytes_eq(&entries[p as usize].key, key)
            })
            .map(|p| p as usize)
    }

    /// Starts loading the entry `hash` most likely names (the first whose tag matches) into
    /// cache, without waiting for it and without comparing keys. Called for a whole batch of
    /// keys before looking them up, it lets the processor fetch many entries from memory at
    /// once instead of one after the other. Returns a value derived from the load, for the
    /// caller to pass to [`std::hint::black_box`] so that the load is not optimised away.
    #[inline(always)]
    pub(crate) fn touch(&self, hash: KeyHash) -> u64 {
        self.touch_with(hash, |e| e.written_in.0)
    }

    /// [`KeyedTable::touch`], reading what `read` reads of the entry (a map's first entry,
    /// which lies elsewhere in memory, say).
    #[inline(always)]
    pub(crate) fn touch_with(&self, hash: KeyHash, read: impl Fn(&Entry<T>) -> u64) -> u64 {
        self.index
            .find(index_hash(hash), |_| true)
            .map_or(0, |p| read(&self.entries[p as usize]))
    }

    /// The entry at `position` (from [`KeyedTable::position`]).
    #[inline]
    pub(crate) fn entry_at(&self, position: usize) -> Option<&Entry<T>> {
        self.entries.get(position)
    }

    #[inline]
    pub(crate) fn get(&self, key: &[u8], hash: KeyHash) -> Option<&Entry<T>> {
        self.position(key, hash).map(|i| &self.entries[i])
    }

    /// The entry of `key` for writing, created with `make` if absent, and marked dirty in
    /// `epoch`.
    #[inline]
    pub(crate) fn write(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        epoch: CheckpointId,
        make: impl FnOnce() -> T,
    ) -> &mut Entry<T>
    where
        T: Pin,
    {
        // A new entry is older than any epoch, so the mark always records a new key.
        let position = self.position_or_insert(key, hash, CheckpointId(0), make);
        self.mark(position, epoch)
    }

    /// The position of `key`'s entry, appended (written in `written_in`) if absent.
    #[inline]
    fn position_or_insert(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        written_in: CheckpointId,
        make: impl FnOnce() -> T,
    ) -> usize {
        match self.position(key, hash) {
            Some(position) => position,
            None => self.insert_new(key, hash, written_in, make()),
        }
    }

    /// Appends a new entry and indexes it; returns its position.
    fn insert_new(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        written_in: CheckpointId,
        body: T,
    ) -> usize {
        let entry = Entry {
            key: StateBytes::copy_from_slice(key),
            written_in,
            body,
        };
        self.insert_entry(entry, hash)
    }

    /// Appends `entry`, whose key hashes to `hash` and is not in the table, and indexes it;
    /// returns its position.
    #[inline]
    fn insert_entry(&mut self, entry: Entry<T>, hash: KeyHash) -> usize {
        if self.index.len() == self.index.capacity() {
            self.grow_index(self.index.len() + 1);
        }
        let position = self.entries.push(entry);
        // More than 4 G keys in one key group of one subtask is beyond any memory.
        self.index.insert_unique(index_hash(hash), position as u32);
        position
    }

    /// Makes the index room for at least `capacity` entries, built again from the entries
    /// in their order: each key is hashed again (the index keeps no hashes), reading the
    /// entries one after the other rather than in the order of the old index's buckets.
    #[cold]
    fn grow_index(&mut self, capacity: usize) {
        let capacity = capacity.max(self.index.capacity() * 2);
        let mut index = PositionIndex::with_capacity(capacity);
        for (position, entry) in self.entries.iter().enumerate() {
            index.insert_unique(rehash(entry), position as u32);
        }
        self.index = index;
    }

    /// Like [`KeyedTable::write`], first trying `hint`, a position that a lookup earlier in
    /// the same batch returned for this key. Positions never change between snapshots, so
    /// the hint is usually right and saves the hash lookup; it is checked, so a wrong one
    /// only costs that lookup.
    #[inline]
    pub(crate) fn write_hinted(
        &mut self,
        hint: Option<usize>,
        key: &[u8],
        hash: KeyHash,
        epoch: CheckpointId,
        make: impl FnOnce() -> T,
    ) -> &mut Entry<T>
    where
        T: Pin,
    {
        let hit = hint.filter(|&p| self.entries.get(p).is_some_and(|e| bytes_eq(&e.key, key)));
        let Some(position) = hit else {
            return self.write(key, hash, epoch, make);
        };
        self.mark(position, epoch)
    }

    /// The entry of `key` for writing if it exists, marked dirty in `epoch`.
    #[inline]
    pub(crate) fn write_existing(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        epoch: CheckpointId,
    ) -> Option<&mut Entry<T>>
    where
        T: Pin,
    {
        let position = self.position(key, hash)?;
        Some(self.mark(position, epoch))
    }

    /// The entry at `position` (from [`KeyedTable::position`]) for writing, marked dirty in
    /// `epoch`.
    #[inline]
    pub(crate) fn write_at(&mut self, position: usize, epoch: CheckpointId) -> &mut Entry<T>
    where
        T: Pin,
    {
        self.mark(position, epoch)
    }

    /// The entry at `position`, marked dirty in `epoch`: its key joins the dirty list the
    /// first time it is written in an epoch. A frozen entry the snapshot's walk has not
    /// reached is pinned first, so that its increment holds it as it was at the freeze.
    #[inline]
    fn mark(&mut self, position: usize, epoch: CheckpointId) -> &mut Entry<T>
    where
        T: Pin,
    {
        let entry = &mut self.entries[position];
        if entry.written_in != epoch {
            if let Some(frozen) = &mut self.frozen
                && frozen.awaits(position, entry.written_in)
            {
                frozen.pin(entry);
            }
            entry.written_in = epoch;
            // Positions fit in u32: see `insert_new`.
            if position < self.fresh as usize {
                self.dirty.push(position as u32);
            }
        }
        entry
    }

    /// Freezes the entries written since the last snapshot (in `since..=checkpoint`) as
    /// `checkpoint`'s: writes from now on are a later epoch's (the synchronous phase of a
    /// snapshot, O(1)).
    pub(crate) fn freeze(&mut self, since: CheckpointId, checkpoint: CheckpointId) {
        debug_assert!(self.frozen.is_none(), "the previous snapshot is pinned");
        let len = self.entries.len() as u32;
        let appended = self.fresh..len;
        if !self.dirty.is_empty() || !appended.is_empty() {
            let dirty = std::mem::take(&mut self.dirty);
            self.frozen = Some(Box::new(Frozen::new(since, checkpoint, dirty, appended)));
        }
        self.fresh = len;
    }

    /// Pins up to `budget` frozen entries; returns how many it visited (`state::frozen`).
    pub(crate) fn walk_frozen(&mut self, budget: usize, kept: &mut impl FnMut(StateBytes)) -> usize
    where
        T: Pin,
    {
        match &mut self.frozen {
            Some(frozen) => frozen.walk(&mut self.entries, budget, kept),
            None => 0,
        }
    }

    /// Whether every frozen entry is pinned (or nothing is frozen).
    pub(crate) fn walked(&self) -> bool {
        self.frozen.as_ref().is_none_or(|f| f.walked())
    }

    /// Ends the walk of this table: removes the entries pinned empty that were not written
    /// again since, and returns what pinning gave (`None` if nothing was frozen here).
    pub(crate) fn unfreeze(&mut self) -> Option<Box<Frozen>> {
        let mut frozen = self.frozen.take()?;
        debug_assert!(frozen.walked());
        // Where each entry of the dirty list is in it: built only if a removal moves a dirty
        // entry.
        let mut in_dirty: Option<HashMap<u32, usize>> = None;
        for key in std::mem::take(&mut frozen.emptied) {
            let hash = hash_key(&key);
            let Some(position) = self.position(&key, hash) else {
                continue;
            };
            if !frozen.holds(self.entries[position].written_in) {
                continue;
            }
            let last = self.entries.len() - 1;
            let fresh = self.fresh as usize;
            self.remove(&key, hash);
            if position == last {
                continue;
            }
            // The last entry moved into `position` (a frozen one's, so before `fresh`). One
            // appended since the freeze leaves the entries dirty by position: it joins the
            // dirty list. One written since the freeze (only those have a `written_in` past
            // the frozen one) is in the dirty list already, at its old position.
            let moved = position as u32;
            if last >= fresh {
                self.dirty.push(moved);
                if let Some(in_dirty) = &mut in_dirty {
                    in_dirty.insert(moved, self.dirty.len() - 1);
                }
            } else if self.entries[position].written_in > frozen.checkpoint {
                let dirty = &self.dirty;
                let in_dirty = in_dirty.get_or_insert_with(|| {
                    dirty.iter().enumerate().map(|(i, &p)| (p, i)).collect()
                });
                if let Some(i) = in_dirty.remove(&(last as u32)) {
                    self.dirty[i] = moved;
                    in_dirty.insert(moved, i);
                }
            }
        }
        Some(frozen)
    }

    /// The entry at `position`, for changes that must not mark it dirty (snapshots, restore).
    #[inline]
    pub(crate) fn entry_at_mut(&mut self, position: usize) -> Option<&mut Entry<T>> {
        self.entries.get_mut(position)
    }

    /// Puts an entry restored from a snapshot: not dirty, written in `written_in`.
    ///
    /// The key is the decoded one: a new entry takes a copy of its handle (a long key's
    /// reference count, a short one's 12 bytes), not of its bytes.
    #[inline]
    pub(crate) fn restore(
        &mut self,
        key: &StateBytes,
        hash: KeyHash,
        written_in: CheckpointId,
        make: impl FnOnce() -> T,
    ) -> &mut Entry<T> {
        let position = match self.position(key, hash) {
            Some(position) => position,
            None => self.insert_entry(
                Entry {
                    key: key.clone(),
                    written_in,
                    body: make(),
                },
                hash,
            ),
        };
        // Restored entries are not dirty (a restore starts from a table without dirty ones).
        self.fresh = self.entries.len() as u32;
        let entry = &mut self.entries[position];
        entry.written_in = written_in;
        entry
    }

    /// Removes `key`'s entry, if any. The last entry moves into its place (its index slot is
    /// updated), so positions handed out before are no longer valid.
    pub(crate) fn remove(&mut self, key: &[u8], hash: KeyHash) -> Option<Entry<T>> {
        let entries = &self.entries;
        let position = self.index.remove(
            index_hash(hash),
            |p| bytes_eq(&entries[p as usize].key, key),
            |p| rehash(&entries[p as usize]),
        )? as usize;
        let removed = self.entries.swap_remove(position);
        // The entries dirty by position stay those from `fresh` on: the last one, if it was
        // one of them, is the caller's to list (`unfreeze`).
        self.fresh = self.fresh.min(self.entries.len() as u32);
        if let Some(moved) = self.entries.get(position) {
            let last = self.entries.len() as u32;
            self.index.replace(rehash(moved), last, position as u32);
        }
        Some(removed)
    }

    /// Makes room for `entries` in a table that has none yet: a restore knows how many keys
    /// a full snapshot brings. (A later increment's changes are mostly to keys already here,
    /// so a table with entries grows as it goes.)
    pub(crate) fn presize(&mut self, entries: usize) {
        if self.entries.len() == 0 {
            self.entries.reserve(entries);
            self.grow_index(entries);
        }
    }

    /// Number of entries, tombstones included.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Number of entries written since the last snapshot.
    pub(crate) fn dirty_len(&self) -> usize {
        self.dirty.len() + (self.entries.len() - self.fresh as usize)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry<T>> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::snapshot::Change;

    impl Pin for u32 {
        fn pin(&mut self, key: StateBytes, _: CheckpointId) -> (Change, bool) {
            let value = Some(StateBytes::copy_from_slice(&self.to_le_bytes()));
            (Change::Value { key, value }, false)
        }
    }

    #[test]
    fn a_value_entry_is_four_words() {
        // The key and the value (12 bytes each, `state/bytes.rs`) beside the epoch: the
        // memory per key of docs/performance.md counts on it.
        assert_eq!(size_of::<Entry<crate::state::value::ValueBody>>(), 32);
    }

    #[test]
    fn the_index_finds_every_key_as_it_grows_and_shrinks() {
        let key = |i: u32| format!("key-{i}").into_bytes();
        let e = CheckpointId(1);
        let mut presized = KeyedTable::<u32>::default();
        presized.presize(1000);
        for mut table in [KeyedTable::<u32>::default(), presized] {
            for i in 0..5000 {
                table.write(&key(i), hash_key(&key(i)), e, || i);
            }
            for i in (0..5000).step_by(3) {
                let removed = table.remove(&key(i), hash_key(&key(i)));
                assert_eq!(removed.map(|e| e.body), Some(i));
            }
            for i in 0..6000 {
                let body = table.get(&key(i), hash_key(&key(i))).map(|e| e.body);
                let expected = (i < 5000 && i % 3 != 0).then_some(i);
                assert_eq!(body, expected, "key {i}");
            }
            assert_eq!(table.len(), 5000 - 5000usize.div_ceil(3));
        }
    }

    #[test]
    fn repeated_writes_mark_a_key_dirty_once_per_epoch() {
        let mut table = KeyedTable::<u32>::default();
        let (e1, e2) = (CheckpointId(1), CheckpointId(2));
        for _ in 0..10 {
            table.write(b"a", hash_key(b"a"), e1, || 0).body += 1;
        }
        table.write(b"b", hash_key(b"b"), e1, || 0);
        assert_eq!(table.dirty_len(), 2);
        assert_eq!(table.get(b"a", hash_key(b"a")).map(|e| e.body), Some(10));
        table.freeze(e1, e1);
        assert_eq!(table.dirty_len(), 0, "frozen");
        table.write(b"a", hash_key(b"a"), e2, || 0);
        assert_eq!(table.dirty_len(), 1, "a new epoch marks the key again");
        assert!(table.write_existing(b"zz", hash_key(b"zz"), e2).is_none());
    }

    #[test]
    fn a_wrong_hint_falls_back_to_the_lookup() {
        let mut table = KeyedTable::<u32>::default();
        let e = CheckpointId(1);
        for k in ["a", "b", "c"] {
            table.write(k.as_bytes(), hash_key(k.as_bytes()), e, || 0);
        }
        let b = table.position(b"b", hash_key(b"b")).expect("b exists");
        table
            .write_hinted(Some(b), b"b", hash_key(b"b"), e, || 0)
            .body = 7;
        // A hint naming another key, or no entry at all, is ignored.
        table
            .write_hinted(Some(b), b"c", hash_key(b"c"), e, || 0)
            .body = 9;
        table
            .write_hinted(Some(99), b"d", hash_key(b"d"), e, || 0)
            .body = 4;
        let body = |k: &str| {
            table
                .get(k.as_bytes(), hash_key(k.as_bytes()))
                .map(|e| e.body)
        };
        assert_eq!(
            (body("a"), body("b"), body("c"), body("d")),
            (Some(0), Some(7), Some(9), Some(4))
        );
    }
}
