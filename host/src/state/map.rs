//! The payload of a map-state entry: one key's map.

use super::StateBytes;
use super::map_entries::MapEntries;
use crate::ids::CheckpointId;

/// One map entry's value and when it was last written; `None` is a tombstone.
#[derive(Debug)]
pub struct MapValue {
    pub value: Option<StateBytes>,
    pub written_in: CheckpointId,
    /// Whether the chain holds a value for this map key (a snapshot took one, or a restore
    /// read one): only then does removing it need a tombstone. An entry put and removed
    /// between two snapshots (a window opened and fired) leaves nothing behind.
    pub persisted: bool,
}

/// One key's map. Ordered by map key so iteration is deterministic and pageable.
#[derive(Debug, Default)]
pub struct MapBody {
    pub entries: MapEntries,
    /// Map keys written since the last snapshot, each once per epoch (again if one is put,
    /// removed and put again: [`MapBody::compact_changed`] bounds that between snapshots).
    pub changed: Vec<StateBytes>,
    /// The whole map was cleared since the last snapshot: one clear event, after which only
    /// `changed` entries need writing.
    pub cleared: bool,
    /// Live (non-tombstone) entries.
    pub live: usize,
    /// Bytes of the live entries' keys and values.
    pub bytes: usize,
}

impl MapBody {
    pub fn get(&self, map_key: &[u8]) -> Option<&[u8]> {
        self.entries.get(map_key)?.value.as_deref()
    }

    pub fn put(&mut self, map_key: &[u8], value: &[u8], epoch: CheckpointId) {
        let value = StateBytes::copy_from_slice(value);
        self.bytes += value.len();
        if let Some(slot) = self.entries.get_mut(map_key) {
            match &slot.value {
                Some(old) => self.bytes -= old.len(),
                None => {
                    self.live += 1;
                    self.bytes += map_key.len();
                }
            }
            slot.value = Some(value);
            if slot.written_in != epoch {
                slot.written_in = epoch;
                self.changed.push(StateBytes::copy_from_slice(map_key));
            }
        } else {
            self.bytes += map_key.len();
            let map_key = StateBytes::copy_from_slice(map_key);
            self.changed.push(map_key.clone());
            self.entries.insert(
                map_key,
                MapValue {
                    value: Some(value),
                    written_in: epoch,
                    persisted: false,
                },
            );
            self.live += 1;
        }
    }

    pub fn remove(&mut self, map_key: &[u8], epoch: CheckpointId) {
        let Some(slot) = self.entries.get_mut(map_key) else {
            return;
        };
        let Some(old) = slot.value.take() else {
            return;
        };
        self.bytes -= map_key.len() + old.len();
        self.live -= 1;
        if !slot.persisted {
            // Put since the last snapshot (so already in `changed`), held by no chain: no
            // tombstone. A snapshot skips a changed key that is gone.
            self.entries.remove(map_key);
            if self.changed.len() > 2 * self.entries.len() + 32 {
                self.compact_changed(epoch);
            }
        } else if slot.written_in != epoch {
            slot.written_in = epoch;
            self.changed.push(StateBytes::copy_from_slice(map_key));
        }
    }

    /// Drops from `changed` the keys that are gone and those listed twice, so that a job
    /// that opens and removes entries without ever taking a snapshot (one without
    /// checkpoints) keeps `changed` within twice the map's size.
    fn compact_changed(&mut self, epoch: CheckpointId) {
        let entries = &self.entries;
        self.changed
            .retain(|k| entries.get(k).is_some_and(|v| v.written_in == epoch));
        self.changed.sort_unstable();
        self.changed.dedup();
    }

    /// Clears the map: one clear event; no tombstones are needed for what it removed.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.changed.clear();
        self.cleared = true;
        self.live = 0;
        self.bytes = 0;
    }

    /// Writes the whole map again in `epoch`: a clear event and every live entry, so that the
    /// increment alone holds the map (bounded chains, `state::aging`).
    pub fn rewrite(&mut self, epoch: CheckpointId) {
        self.entries.retain(|_, v| v.value.is_some());
        for v in self.entries.values_mut() {
            v.written_in = epoch;
        }
        self.changed = self.entries.keys().cloned().collect();
        self.cleared = true;
    }

    /// Live entries after `after` (or from the first), in key order.
    pub fn range_after<'a>(
        &'a self,
        after: Option<&[u8]>,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.entries
            .range_after(after)
            .filter_map(|(k, v)| Some((&k[..], v.value.as_deref()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_remove_clear_and_ordered_paging() {
        let e = CheckpointId(1);
        let mut map = MapBody::default();
        for k in ["c", "a", "b"] {
            map.put(k.as_bytes(), k.to_uppercase().as_bytes(), e);
        }
        map.put(b"a", b"A2", e);
        assert_eq!(
            map.changed.len(),
            3,
            "a second put in one epoch is squashed"
        );
        map.remove(b"b", e);
        assert_eq!(map.live, 2);
        let keys: Vec<_> = map.range_after(None).map(|(k, _)| k.to_vec()).collect();
        assert_eq!(keys, vec![b"a".to_vec(), b"c".to_vec()]);
        let after_a: Vec<_> = map
            .range_after(Some(b"a"))
            .map(|(k, _)| k.to_vec())
            .collect();
        assert_eq!(after_a, vec![b"c".to_vec()]);
        map.clear();
        assert!(map.cleared && map.live == 0 && map.range_after(None).next().is_none());
    }

    #[test]
    fn an_entry_no_chain_holds_is_removed_without_a_tombstone_and_changed_stays_bounded() {
        let e = CheckpointId(1);
        let mut map = MapBody::default();
        map.put(b"kept", b"1", e);
        map.entries.get_mut(b"kept").expect("put").persisted = true;
        // A window opened and fired, over and over, with no snapshot in between.
        for window in 0..10_000u32 {
            map.put(&window.to_be_bytes(), b"open", e);
            map.remove(&window.to_be_bytes(), e);
        }
        assert_eq!(map.entries.len(), 1, "no tombstones");
        assert!(
            map.changed.len() <= 2 * map.entries.len() + 33,
            "{}",
            map.changed.len()
        );
        map.remove(b"kept", e);
        assert!(
            map.entries.get(b"kept").is_some_and(|v| v.value.is_none()),
            "what a chain holds is removed by a tombstone"
        );
        assert_eq!(map.live, 0);
        assert_eq!(map.bytes, 0);
    }
}
