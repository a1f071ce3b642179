//! [`KeyedTable`]: the hash table of one (state, key group) pair, with its dirty list.

use hashbrown::HashTable;

use super::StateBytes;

use crate::ids::CheckpointId;
use crate::partition::KeyHash;

/// One key's entry: the key, its hash, when it was last written, and the kind's payload.
#[derive(Debug)]
pub struct Entry<T> {
    pub key: StateBytes,
    /// The stable key hash; kept so the table can grow without rehashing keys.
    pub hash: KeyHash,
    /// The checkpoint whose increment will hold (or holds) this entry's latest write.
    pub written_in: CheckpointId,
    pub body: T,
}

/// The entries of one state in one key group, and the keys written since the last snapshot.
#[derive(Debug)]
pub struct KeyedTable<T> {
    entries: HashTable<Entry<T>>,
    /// Keys written since the last snapshot, each once (squashing): a key is pushed only when
    /// its entry's `written_in` moves to the current epoch.
    dirty: Vec<StateBytes>,
}

impl<T> Default for KeyedTable<T> {
    fn default() -> Self {
        Self {
            entries: HashTable::new(),
            dirty: Vec::new(),
        }
    }
}

impl<T> KeyedTable<T> {
    #[inline]
    pub fn get(&self, key: &[u8], hash: KeyHash) -> Option<&Entry<T>> {
        self.entries
            .find(hash.table_hash(), |e| e.hash == hash && e.key[..] == *key)
    }

    /// The entry of `key` for writing, created with `make` if absent, and marked dirty in
    /// `epoch`. Only a new key allocates (its copy of the key bytes).
    #[inline]
    pub fn write(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        epoch: CheckpointId,
        make: impl FnOnce() -> T,
    ) -> &mut Entry<T> {
        let entry = self
            .entries
            .entry(
                hash.table_hash(),
                |e| e.hash == hash && e.key[..] == *key,
                |e| e.hash.table_hash(),
            )
            .or_insert_with(|| Entry {
                key: StateBytes::copy_from_slice(key),
                hash,
                // Older than any epoch, so the mark below always records a new key.
                written_in: CheckpointId(0),
                body: make(),
            })
            .into_mut();
        if entry.written_in != epoch {
            entry.written_in = epoch;
            self.dirty.push(entry.key.clone());
        }
        entry
    }

    /// The entry of `key` for writing if it exists, marked dirty in `epoch`.
    #[inline]
    pub fn write_existing(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        epoch: CheckpointId,
    ) -> Option<&mut Entry<T>> {
        let entry = self
            .entries
            .find_mut(hash.table_hash(), |e| e.hash == hash && e.key[..] == *key)?;
        if entry.written_in != epoch {
            entry.written_in = epoch;
            self.dirty.push(entry.key.clone());
        }
        Some(entry)
    }

    /// Number of entries, tombstones included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keys written since the last snapshot.
    pub fn dirty(&self) -> &[StateBytes] {
        &self.dirty
    }

    pub fn iter(&self) -> impl Iterator<Item = &Entry<T>> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::hash_key;

    #[test]
    fn repeated_writes_mark_a_key_dirty_once_per_epoch() {
        let mut table = KeyedTable::<u32>::default();
        let (e1, e2) = (CheckpointId(1), CheckpointId(2));
        for _ in 0..10 {
            table.write(b"a", hash_key(b"a"), e1, || 0).body += 1;
        }
        table.write(b"b", hash_key(b"b"), e1, || 0);
        assert_eq!(table.dirty().len(), 2);
        assert_eq!(table.get(b"a", hash_key(b"a")).map(|e| e.body), Some(10));
        table.write(b"a", hash_key(b"a"), e2, || 0);
        assert_eq!(table.dirty().len(), 3, "a new epoch marks the key again");
        assert!(table.write_existing(b"zz", hash_key(b"zz"), e2).is_none());
    }
}
