//! The stable hash of a record key.

use xxhash_rust::xxh3::xxh3_64;

/// The 64-bit hash of a record key: XXH3-64 with seed 0 over the key bytes.
///
/// Part of the persistent format: key groups (and so the layout of every snapshot) derive from
/// it, so it must never change for a given key. It is computed once per record, where the
/// record is routed, and travels with the record so that no later stage hashes it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyHash(pub u64);

impl KeyHash {
    /// A well-mixed hash for in-memory hash tables. The key group is taken from some bits of
    /// the stable hash; a table holding one key group would see those bits constant, so they
    /// are remixed (the SplitMix64 finaliser) before a table uses them.
    #[inline]
    pub fn table_hash(self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Hashes a record key.
#[inline]
pub fn hash_key(key: &[u8]) -> KeyHash {
    KeyHash(xxh3_64(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_across_versions() {
        // Snapshots depend on these exact values; if this fails, the format broke.
        assert_eq!(hash_key(b"").0, 0x2d06_8005_38d3_94c2);
        assert_eq!(hash_key(b"weir").0, hash_key(b"weir").0);
        assert_ne!(hash_key(b"a").0, hash_key(b"b").0);
    }
}
