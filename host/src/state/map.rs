//! The payload of a map-state entry: one key's map.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::StateBytes;
use crate::ids::CheckpointId;

/// One map entry's value and when it was last written; `None` is a tombstone.
#[derive(Debug)]
pub struct MapValue {
    pub value: Option<StateBytes>,
    pub written_in: CheckpointId,
}

/// One key's map. Ordered by map key so iteration is deterministic and pageable.
#[derive(Debug, Default)]
pub struct MapBody {
    pub entries: BTreeMap<StateBytes, MapValue>,
    /// Map keys written since the last snapshot, each once per epoch.
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
                },
            );
            self.live += 1;
        }
    }

    pub fn remove(&mut self, map_key: &[u8], epoch: CheckpointId) {
        if let Some(slot) = self.entries.get_mut(map_key)
            && let Some(old) = slot.value.take()
        {
            self.bytes -= map_key.len() + old.len();
            self.live -= 1;
            if slot.written_in != epoch {
                slot.written_in = epoch;
                self.changed.push(StateBytes::copy_from_slice(map_key));
            }
        }
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
        let lower = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        self.entries
            .range::<[u8], _>((lower, Bound::Unbounded))
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
}
