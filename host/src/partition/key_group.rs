//! Key groups and their assignment to subtasks.

use std::fmt;
use std::ops::Range;

use super::KeyHash;
use crate::ids::SubtaskIndex;

/// The most key groups a job may have.
pub const MAX_KEY_GROUPS: u32 = 32_768;

/// One key group, `0 .. max_parallelism`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct KeyGroup(pub u32);

impl fmt::Display for KeyGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A contiguous, half-open range of key groups owned by one subtask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyGroupRange {
    pub start: u32,
    pub end: u32,
}

impl KeyGroupRange {
    pub fn contains(&self, group: KeyGroup) -> bool {
        self.start <= group.0 && group.0 < self.end
    }

    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The position of `group` inside the range, for indexing per-range tables.
    pub fn offset(&self, group: KeyGroup) -> Option<usize> {
        self.contains(group)
            .then(|| (group.0 - self.start) as usize)
    }

    pub fn iter(&self) -> impl Iterator<Item = KeyGroup> {
        (self.start..self.end).map(KeyGroup)
    }

    pub fn as_range(&self) -> Range<u32> {
        self.start..self.end
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// The key-group space of a job: how many key groups there are (the max parallelism).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyGroups {
    count: u32,
}

impl KeyGroups {
    /// The default number of key groups.
    pub const DEFAULT_COUNT: u32 = 128;

    /// `count` must be at least 1; the job file validation guarantees it.
    pub fn new(count: u32) -> Self {
        Self {
            count: count.max(1),
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// The key group of a key hash: the high 32 bits scaled onto `0 .. count`
    /// (a multiply-shift, which unlike a modulo keeps all groups equally likely).
    #[inline]
    pub fn of(&self, hash: KeyHash) -> KeyGroup {
        KeyGroup((((hash.0 >> 32) * u64::from(self.count)) >> 32) as u32)
    }

    /// The key groups owned by `subtask` out of `parallelism` subtasks: contiguous ranges,
    /// sizes differing by at most one, covering every group exactly once.
    pub fn range_of(&self, subtask: SubtaskIndex, parallelism: u32) -> KeyGroupRange {
        let p = u64::from(parallelism.max(1));
        let n = u64::from(self.count);
        let i = u64::from(subtask.0);
        KeyGroupRange {
            start: (i * n).div_ceil(p) as u32,
            end: ((i + 1) * n).div_ceil(p) as u32,
        }
    }

    /// The subtask that owns `group` among `parallelism` subtasks; the inverse of
    /// [`KeyGroups::range_of`].
    #[inline]
    pub fn subtask_of(&self, group: KeyGroup, parallelism: u32) -> SubtaskIndex {
        SubtaskIndex(
            ((u64::from(group.0) * u64::from(parallelism.max(1))) / u64::from(self.count)) as u32,
        )
    }
}

impl Default for KeyGroups {
    fn default() -> Self {
        Self::new(Self::DEFAULT_COUNT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::hash_key;

    #[test]
    fn ranges_cover_every_group_once_and_agree_with_subtask_of() {
        for count in [1, 2, 7, 128, 1000] {
            let groups = KeyGroups::new(count);
            for parallelism in 1..=count.min(17) {
                let mut next = 0;
                for s in 0..parallelism {
                    let range = groups.range_of(SubtaskIndex(s), parallelism);
                    assert_eq!(range.start, next, "count {count} p {parallelism} s {s}");
                    assert!(!range.is_empty());
                    for g in range.iter() {
                        assert_eq!(groups.subtask_of(g, parallelism), SubtaskIndex(s));
                    }
                    next = range.end;
                }
                assert_eq!(next, count);
            }
        }
    }

    #[test]
    fn keys_spread_over_groups() {
        let groups = KeyGroups::new(128);
        let mut seen = [0u32; 128];
        for i in 0..100_000 {
            seen[groups.of(hash_key(format!("key-{i}").as_bytes())).0 as usize] += 1;
        }
        // ~781 per group; a bad spread would leave groups far off.
        assert!(seen.iter().all(|&n| (600..1000).contains(&n)), "{seen:?}");
    }
}
