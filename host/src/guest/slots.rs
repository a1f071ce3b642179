//! [`KeySlots`]: the distinct keys of the batch being processed.
//!
//! Before each `process` call the host numbers the distinct keys of the batch (slots, in
//! order of first appearance) and tells the guest each record's slot. The guest then caches
//! state per slot in a plain vector, with no hashing of its own, and names keys by slot in
//! state calls, so it can only reach keys of the records it was given.

use hashbrown::HashTable;

use crate::bindings::weir::operator::types::Batch;
use crate::partition::{KeyHash, hash_key};
use crate::record::{FLAG_HAS_KEY, Number, Numbers};
use crate::state::{EntryHint, KeyRef, StateId};

/// The slot of a record without key.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// The distinct keys of the current batch, by slot.
#[derive(Debug, Default)]
pub struct KeySlots {
    /// Key bytes back to back; slot `i` is `arena[start(i) .. ends[i]]`.
    arena: Vec<u8>,
    ends: Vec<u32>,
    hashes: Vec<KeyHash>,
    /// Finds a key's slot while numbering a batch.
    index: HashTable<u32>,
    /// Per value state read in this batch, where each slot's entry was found, so that the
    /// batch's writes skip the lookup (see [`EntryHint`]).
    hints: Vec<(StateId, Vec<Option<EntryHint>>)>,
}

impl KeySlots {
    /// Numbers the keys of `batch` and writes each record's slot into `record_slots`.
    /// `hashes` holds the records' key hashes if the batch came through a keyed edge; keys of
    /// other batches are hashed here.
    pub fn assign(&mut self, batch: &Batch, hashes: &[KeyHash], record_slots: &mut Numbers<u32>) {
        self.clear();
        record_slots.clear();
        let mut start = 0usize;
        let key_ends = batch.key_ends.chunks_exact(4).map(<u32 as Number>::from_le);
        let value_ends = batch
            .value_ends
            .chunks_exact(4)
            .map(<u32 as Number>::from_le);
        let records = key_ends.zip(value_ends).zip(&batch.flags);
        for (i, ((key_end, value_end), flags)) in records.enumerate() {
            let key = &batch.data[start..key_end as usize];
            start = value_end as usize;
            if flags & FLAG_HAS_KEY == 0 {
                record_slots.push(NO_SLOT);
                continue;
            }
            let hash = hashes.get(i).copied().unwrap_or_else(|| hash_key(key));
            record_slots.push(self.slot_of(key, hash));
        }
    }

    /// Numbers `keys` (the keys of fired timers) and writes each one's slot into `slots`.
    pub fn assign_keys<'k>(
        &mut self,
        keys: impl Iterator<Item = &'k [u8]>,
        slots: &mut Numbers<u32>,
    ) {
        self.clear();
        slots.clear();
        for key in keys {
            slots.push(self.slot_of(key, hash_key(key)));
        }
    }

    fn clear(&mut self) {
        self.arena.clear();
        self.ends.clear();
        self.hashes.clear();
        self.index.clear();
        self.hints.clear();
    }

    /// The slot of `key`, numbered now if it is new to the batch.
    fn slot_of(&mut self, key: &[u8], hash: KeyHash) -> u32 {
        let (arena, ends) = (&self.arena, &self.ends);
        let slot_key = |slot: u32| {
            let s = slot as usize;
            let from = if s == 0 { 0 } else { ends[s - 1] as usize };
            &arena[from..ends[s] as usize]
        };
        let found = self
            .index
            .find(hash.table_hash(), |&s| {
                self.hashes[s as usize] == hash && slot_key(s) == key
            })
            .copied();
        if let Some(slot) = found {
            return slot;
        }
        let slot = self.ends.len() as u32;
        self.arena.extend_from_slice(key);
        self.ends.push(self.arena.len() as u32);
        self.hashes.push(hash);
        let hashes = &self.hashes;
        self.index.insert_unique(hash.table_hash(), slot, |&s| {
            hashes[s as usize].table_hash()
        });
        slot
    }

    /// Remembers where the entries of `slots` were found for `state` in this batch.
    pub fn set_hints(
        &mut self,
        state: StateId,
        slots: impl Iterator<Item = u32>,
        found: &[Option<EntryHint>],
    ) {
        let mut hints = vec![None; self.len()];
        for (slot, &hint) in slots.zip(found) {
            if let Some(h) = hints.get_mut(slot as usize) {
                *h = hint;
            }
        }
        match self.hints.iter_mut().find(|(s, _)| *s == state) {
            Some((_, existing)) => *existing = hints,
            None => self.hints.push((state, hints)),
        }
    }

    /// Where the entry of `slot` was found for `state` in this batch, if it was.
    #[inline]
    pub fn hint(&self, state: StateId, slot: u32) -> Option<EntryHint> {
        let (_, hints) = self.hints.iter().find(|(s, _)| *s == state)?;
        hints.get(slot as usize).copied().flatten()
    }

    /// The batch's distinct keys, by slot.
    pub fn keys(&self) -> impl Iterator<Item = KeyRef<'_>> + Clone {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .zip(&self.hashes)
            .map(|((from, &to), &hash)| KeyRef::new(&self.arena[from as usize..to as usize], hash))
    }

    /// Number of distinct keys in the batch.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The key in `slot`, or a message for the guest if there is no such slot.
    #[inline]
    pub fn key(&self, slot: u32) -> Result<KeyRef<'_>, String> {
        let s = slot as usize;
        if s >= self.ends.len() {
            return Err(if slot == NO_SLOT {
                "state access needs a keyed record, but this record has no key (key the stream with `key_by`)".to_owned()
            } else {
                format!(
                    "key slot {slot} does not exist: this batch has {} distinct keys",
                    self.ends.len()
                )
            });
        }
        let from = if s == 0 { 0 } else { self.ends[s - 1] as usize };
        Ok(KeyRef::new(
            &self.arena[from..self.ends[s] as usize],
            self.hashes[s],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RecordBatch, RecordRef};

    #[test]
    fn equal_keys_share_a_slot_in_order_of_first_appearance() {
        let mut batch = RecordBatch::new();
        for key in ["b", "a", "b", "c", "a"] {
            batch.push(RecordRef::keyed(key.as_bytes(), b"v"));
        }
        batch.push(RecordRef::unkeyed(b"v"));
        let (wit, hashes) = batch.into_wit();
        let mut slots = KeySlots::default();
        let mut record_slots = Numbers::default();
        slots.assign(&wit, &hashes, &mut record_slots);
        assert_eq!(
            record_slots.iter().collect::<Vec<_>>(),
            [0, 1, 0, 2, 1, NO_SLOT]
        );
        assert_eq!(slots.len(), 3);
        assert_eq!(slots.key(2).expect("slot").bytes, b"c");
        assert!(
            slots
                .key(NO_SLOT)
                .expect_err("keyless")
                .contains("needs a keyed record")
        );
        assert!(
            slots
                .key(3)
                .expect_err("no such slot")
                .contains("3 distinct keys")
        );
    }
}
