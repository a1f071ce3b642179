//! [`MapEntries`]: one key's map entries in map-key order, a sorted vector while the map is
//! small and a B-tree once it is large.
//!
//! Most maps are small: the open windows of a key (one to three), a user's few sessions, a
//! handful of attributes. A `BTreeMap` allocates a node of eleven slots for its first entry
//! (about a kilobyte with these keys and values) and moves through it on every search; a
//! sorted vector of a few entries is one small allocation, searched in the cache line or
//! two it sits in. A map that grows past [`SMALL_MAX`] entries moves into a B-tree for good,
//! which holds many entries in less memory and inserts in logarithmic time at any size.

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::ops::Bound;

use super::StateBytes;
use super::bytes::bytes_cmp;
use super::map::MapValue;

/// Entries a map holds in a sorted vector before it moves into a B-tree. Past about this
/// many, a B-tree's node (eleven slots, filled as the map grows) holds them in less memory
/// than the vector with its room to grow (`bytes_per_map_entry_10_per_key` of
/// `cargo bench --bench windows`: 116 B in B-trees, 142 B in vectors of up to 32).
const SMALL_MAX: usize = 8;

/// A map's entries, ordered by map key as byte strings.
#[derive(Debug)]
pub struct MapEntries(Repr);

#[derive(Debug)]
enum Repr {
    /// Sorted by key, no key twice.
    Small(Vec<(StateBytes, MapValue)>),
    Large(BTreeMap<StateBytes, MapValue>),
}

impl Default for MapEntries {
    fn default() -> Self {
        Self(Repr::Small(Vec::new()))
    }
}

impl MapEntries {
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Small(v) => v.len(),
            Repr::Large(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<&MapValue> {
        match &self.0 {
            Repr::Small(v) => search(v, key).ok().map(|i| &v[i].1),
            Repr::Large(m) => m.get(key),
        }
    }

    #[inline]
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut MapValue> {
        match &mut self.0 {
            Repr::Small(v) => search(v, key).ok().map(|i| &mut v[i].1),
            Repr::Large(m) => m.get_mut(key),
        }
    }

    /// Puts `value` under `key`, replacing what was there.
    pub fn insert(&mut self, key: StateBytes, value: MapValue) {
        match &mut self.0 {
            Repr::Small(v) => match search(v, &key) {
                Ok(i) => v[i].1 = value,
                Err(i) if v.len() < SMALL_MAX => {
                    // Growing by half, from one entry: a vector's own growth (four first,
                    // then doubling) would leave most of a one-window map's memory, and a
                    // third of a ten-entry map's, empty.
                    if v.len() == v.capacity() {
                        v.reserve_exact((v.len() / 2).max(1));
                    }
                    v.insert(i, (key, value));
                }
                Err(_) => {
                    let mut large: BTreeMap<_, _> = std::mem::take(v).into_iter().collect();
                    large.insert(key, value);
                    self.0 = Repr::Large(large);
                }
            },
            Repr::Large(m) => {
                m.insert(key, value);
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<MapValue> {
        match &mut self.0 {
            Repr::Small(v) => search(v, key).ok().map(|i| v.remove(i).1),
            Repr::Large(m) => m.remove(key),
        }
    }

    pub fn clear(&mut self) {
        self.0 = Repr::Small(Vec::new());
    }

    /// Keeps the entries for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &mut MapValue) -> bool) {
        match &mut self.0 {
            Repr::Small(v) => v.retain_mut(|(k, value)| keep(k, value)),
            Repr::Large(m) => m.retain(|k, value| keep(k, value)),
        }
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> Iter<'_> {
        self.range_after(None)
    }

    /// The entries after `after` (or from the first), in key order.
    pub fn range_after(&self, after: Option<&[u8]>) -> Iter<'_> {
        match &self.0 {
            Repr::Small(v) => {
                let from = match after {
                    Some(k) => search(v, k).map_or_else(|i| i, |i| i + 1),
                    None => 0,
                };
                Iter::Small(v[from..].iter())
            }
            Repr::Large(m) => {
                let lower = match after {
                    Some(k) => Bound::Excluded(k),
                    None => Bound::Unbounded,
                };
                Iter::Large(m.range::<[u8], _>((lower, Bound::Unbounded)))
            }
        }
    }

    /// Reads the first entry's key (of a small map), so that the entries are in cache when
    /// the map is searched: see `KeyedStateBackend::warm`.
    #[inline]
    pub fn touch(&self) -> u64 {
        match &self.0 {
            Repr::Small(v) => v.first().map_or(0, |(k, _)| k.len() as u64),
            Repr::Large(_) => 0,
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &StateBytes> {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &MapValue> {
        self.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> Box<dyn Iterator<Item = &mut MapValue> + '_> {
        match &mut self.0 {
            Repr::Small(v) => Box::new(v.iter_mut().map(|(_, value)| value)),
            Repr::Large(m) => Box::new(m.values_mut()),
        }
    }
}

/// Where `key` is in the sorted `entries`, or where it would go.
#[inline]
fn search(entries: &[(StateBytes, MapValue)], key: &[u8]) -> Result<usize, usize> {
    entries.binary_search_by(|(k, _)| bytes_cmp(k, key))
}

/// The entries of a [`MapEntries`], in key order.
#[derive(Debug)]
pub enum Iter<'a> {
    Small(std::slice::Iter<'a, (StateBytes, MapValue)>),
    Large(btree_map::Range<'a, StateBytes, MapValue>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a StateBytes, &'a MapValue);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::Small(it) => it.next().map(|(k, v)| (k, v)),
            Self::Large(it) => it.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::CheckpointId;

    fn value(n: u32) -> MapValue {
        MapValue {
            value: Some(StateBytes::copy_from_slice(&n.to_le_bytes())),
            written_in: CheckpointId(1),
            persisted: false,
        }
    }

    /// Every operation, on maps that stay small and on one that grows into a B-tree and
    /// shrinks again, against a `BTreeMap`.
    #[test]
    fn entries_behave_as_an_ordered_map_at_any_size() {
        let mut rng = 0x9e37_79b9_u64;
        let mut next = move |bound: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound
        };
        for keys in [4, SMALL_MAX as u64, 200] {
            let (mut ours, mut oracle) = (MapEntries::default(), BTreeMap::new());
            for step in 0..5_000u32 {
                let key = format!("k{}", next(keys)).into_bytes();
                match next(4) {
                    0 | 1 => {
                        ours.insert(StateBytes::copy_from_slice(&key), value(step));
                        oracle.insert(key.clone(), step);
                    }
                    2 => {
                        assert_eq!(ours.remove(&key).is_some(), oracle.remove(&key).is_some());
                    }
                    _ => {
                        let after = (next(3) > 0).then_some(key.as_slice());
                        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
                        let want: Vec<_> = oracle
                            .range::<[u8], _>((lower, Bound::Unbounded))
                            .map(|(k, v)| (k.clone(), v.to_le_bytes().to_vec()))
                            .collect();
                        let got: Vec<_> = ours
                            .range_after(after)
                            .map(|(k, v)| (k.to_vec(), v.value.as_deref().unwrap_or(&[]).to_vec()))
                            .collect();
                        assert_eq!(got, want, "{keys} keys, step {step}");
                    }
                }
                assert_eq!(ours.len(), oracle.len());
                assert_eq!(
                    ours.get(&key).and_then(|v| v.value.as_deref()),
                    oracle
                        .get(&key)
                        .map(|v| v.to_le_bytes())
                        .as_ref()
                        .map(|b| &b[..])
                );
            }
            ours.retain(|k, _| k.len() % 2 == 0);
            oracle.retain(|k, _| k.len() % 2 == 0);
            assert!(ours.keys().map(|k| k.to_vec()).eq(oracle.keys().cloned()));
        }
    }
}
