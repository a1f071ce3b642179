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

    /// The partition, of a repartition topic's `partitions`, that a key of this hash is
    /// written to. It comes from the hash's low half, and key groups from its high half
    /// ([`super::KeyGroups::of`]), so a partition's keys spread over every key group, and so
    /// over every subtask of the pipeline that reads the partition. From the high half,
    /// partition `p` of `n` would hold only key-group range `p` of `n`: with 4 partitions read
    /// by an operator of 2 subtasks, each pipeline would send all its records to one of them.
    #[inline]
    pub fn topic_partition(self, partitions: u32) -> u32 {
        (((self.0 & 0xffff_ffff) * u64::from(partitions.max(1))) >> 32) as u32
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

    #[test]
    fn a_topic_partition_s_keys_reach_every_subtask_of_the_stage_that_reads_it() {
        let groups = super::super::KeyGroups::default();
        let partitions = 4;
        // (partition, subtask of 2) -> keys.
        let mut counts = [[0u32; 2]; 4];
        for i in 0..4_000 {
            let hash = hash_key(format!("word{i}").as_bytes());
            let partition = hash.topic_partition(partitions) as usize;
            let subtask = groups.subtask_of(groups.of(hash), 2).0 as usize;
            counts[partition][subtask] += 1;
        }
        for (partition, subtasks) in counts.iter().enumerate() {
            for (subtask, &keys) in subtasks.iter().enumerate() {
                // 500 expected in each.
                assert!(
                    (350..650).contains(&keys),
                    "partition {partition} subtask {subtask}: {keys} keys of 4000; {counts:?}"
                );
            }
        }
        assert_eq!(hash_key(b"x").topic_partition(1), 0);
    }
}
