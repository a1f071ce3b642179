//! [`PositionIndex`]: a table's hash index, from a key's hash to its entry's position, in one
//! `u32` a bucket.
//!
//! hashbrown keeps a bucket's 7-bit tag in a control byte apart from its slot: in a large
//! table the two lie in different cache lines, so a lookup missed the cache twice before it
//! reached the entry (the control group, then the slot), and a profile of the keyed count
//! put half of a batch's state reads on those two loads. Here a bucket holds the position in
//! its low bits and, in the bits the position leaves free, a tag taken from the hash: a probe
//! reads one cache line, then the entry.
//!
//! Linear probing, at most three quarters full. A removal shifts the buckets after it back
//! instead of leaving a tombstone, so probes never grow longer with churn; that needs the
//! home bucket of each bucket it moves, so the caller gives the hash of the key at a position
//! (the index keeps no hashes: the table hashes its entry's key again, as growing does).

/// A bucket without an entry. No real bucket equals it: a position never has all its bits
/// set, since an index of `2^k` buckets holds fewer than `2^k - 1` entries.
const EMPTY: u32 = u32::MAX;

/// Positions in a table's entries, found by hash.
#[derive(Default)]
pub(crate) struct PositionIndex {
    /// A power of two many, or none.
    buckets: Box<[u32]>,
    /// The bucket bits that hold the position: log2 of the number of buckets.
    position_bits: u32,
    len: usize,
}

impl std::fmt::Debug for PositionIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PositionIndex")
            .field("len", &self.len)
            .field("buckets", &self.buckets.len())
            .finish()
    }
}

impl PositionIndex {
    /// An index with room for `capacity` positions.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        if capacity == 0 {
            return Self::default();
        }
        let buckets = capacity
            .saturating_mul(4)
            .div_ceil(3)
            .max(8)
            .next_power_of_two();
        // Positions are `u32`; a tag keeps at least one bit.
        assert!(
            buckets <= 1 << 31,
            "an index of {capacity} keys in one key group is beyond any memory"
        );
        Self {
            buckets: vec![EMPTY; buckets].into_boxed_slice(),
            position_bits: buckets.trailing_zeros(),
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// How many positions it holds before it must grow: three quarters of the buckets.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.buckets.len() / 4 * 3
    }

    #[inline(always)]
    fn position_mask(&self) -> u32 {
        (1u32 << self.position_bits) - 1
    }

    /// The bits of a bucket above the position, taken from `hash`'s high half (its low half
    /// picks the bucket).
    #[inline(always)]
    fn tag(&self, hash: u64) -> u32 {
        ((hash >> 32) as u32) & !self.position_mask()
    }

    /// The bucket of the first position, from `hash`'s probe sequence, for which `eq` holds;
    /// `eq` sees only positions whose tag matches.
    #[inline(always)]
    fn find_bucket(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.buckets.len() - 1;
        let position_mask = self.position_mask();
        let tag = self.tag(hash);
        let mut i = hash as usize & mask;
        loop {
            let bucket = self.buckets[i];
            if bucket == EMPTY {
                return None;
            }
            if bucket & !position_mask == tag && eq(bucket & position_mask) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The first position along `hash`'s probe sequence for which `eq` holds.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let bucket = self.find_bucket(hash, eq)?;
        Some(self.buckets[bucket] & self.position_mask())
    }

    /// Adds `position` under `hash`. The caller makes room first (`len < capacity`) and
    /// knows that its key is not indexed yet.
    #[inline]
    pub(crate) fn insert_unique(&mut self, hash: u64, position: u32) {
        debug_assert!(self.len < self.capacity(), "the index has room");
        debug_assert!(
            position < self.position_mask(),
            "a position fits beside its tag"
        );
        let mask = self.buckets.len() - 1;
        let mut i = hash as usize & mask;
        while self.buckets[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.buckets[i] = self.tag(hash) | position;
        self.len += 1;
    }

    /// Makes the bucket of `from` (under `hash`) hold `to` instead; false if none does.
    pub(crate) fn replace(&mut self, hash: u64, from: u32, to: u32) -> bool {
        debug_assert!(to < self.position_mask(), "a position fits beside its tag");
        match self.find_bucket(hash, |p| p == from) {
            Some(i) => {
                self.buckets[i] = self.tag(hash) | to;
                true
            }
            None => false,
        }
    }

    /// Removes the first position along `hash`'s probe sequence for which `eq` holds, and
    /// returns it. `hash_at` gives the hash of the key at a position, for the buckets after
    /// it that shift back.
    pub(crate) fn remove(
        &mut self,
        hash: u64,
        eq: impl FnMut(u32) -> bool,
        hash_at: impl Fn(u32) -> u64,
    ) -> Option<u32> {
        let mut hole = self.find_bucket(hash, eq)?;
        let removed = self.buckets[hole] & self.position_mask();
        let mask = self.buckets.len() - 1;
        let position_mask = self.position_mask();
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let bucket = self.buckets[i];
            if bucket == EMPTY {
                break;
            }
            // The bucket may fill the hole unless its probe starts after the hole (it
            // would then no longer be found from its start).
            let home = hash_at(bucket & position_mask) as usize & mask;
            if i.wrapping_sub(home) & mask >= i.wrapping_sub(hole) & mask {
                self.buckets[hole] = bucket;
                hole = i;
            }
        }
        self.buckets[hole] = EMPTY;
        self.len -= 1;
        Some(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Hashes whose low bits collide often, to make long runs of full buckets.
    fn hash(key: u32) -> u64 {
        let mixed = u64::from(key).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (mixed & !0xffff_ffff) | u64::from(key % 7)
    }

    proptest! {
        /// Against a `HashMap` of key to position: the index finds every key it holds,
        /// under colliding hashes, through inserts, removals that shift buckets back, moves
        /// and growth.
        #[test]
        fn it_finds_what_a_map_holds(ops in prop::collection::vec((0u8..3, 0u32..200), 1..400)) {
            // The table the index indexes: position -> key, as `KeyedTable` keeps entries.
            let mut keys: Vec<u32> = Vec::new();
            let mut index = PositionIndex::default();
            for (op, key) in ops {
                let found = index.find(hash(key), |p| keys[p as usize] == key);
                match op {
                    0 | 1 if found.is_none() => {
                        if index.len() == index.capacity() {
                            let mut grown = PositionIndex::with_capacity(index.len() * 2 + 1);
                            for (p, &k) in keys.iter().enumerate() {
                                grown.insert_unique(hash(k), p as u32);
                            }
                            index = grown;
                        }
                        keys.push(key);
                        index.insert_unique(hash(key), keys.len() as u32 - 1);
                    }
                    2 if found.is_some() => {
                        // Remove, then move the last key into its place, as `KeyedTable` does.
                        let position = found.expect("found");
                        let keys_now = keys.clone();
                        let removed = index.remove(hash(key), |p| keys_now[p as usize] == key, |p| {
                            hash(keys_now[p as usize])
                        });
                        prop_assert_eq!(removed, Some(position));
                        keys.swap_remove(position as usize);
                        if let Some(&moved) = keys.get(position as usize) {
                            assert!(index.replace(hash(moved), keys.len() as u32, position));
                        }
                    }
                    _ => {}
                }
                prop_assert_eq!(index.len(), keys.len());
                for (p, &k) in keys.iter().enumerate() {
                    prop_assert_eq!(index.find(hash(k), |q| keys[q as usize] == k), Some(p as u32));
                }
                for absent in (0..200).filter(|k| !keys.contains(k)) {
                    prop_assert_eq!(index.find(hash(absent), |q| keys[q as usize] == absent), None);
                }
            }
        }
    }

    #[test]
    fn it_sizes_to_three_quarters_full_at_most() {
        assert_eq!(PositionIndex::default().capacity(), 0);
        assert_eq!(PositionIndex::with_capacity(1).capacity(), 6);
        let index = PositionIndex::with_capacity(78_125);
        assert_eq!(index.buckets.len(), 131_072);
        assert!(index.capacity() >= 78_125);
        assert_eq!(PositionIndex::default().remove(1, |_| true, |_| 0), None);
        assert_eq!(PositionIndex::default().find(1, |_| true), None);
    }
}
