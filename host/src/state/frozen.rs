//! Copy-on-write snapshots: a table's dirty set frozen at a checkpoint, then pinned a step at
//! a time beside processing ([`Frozen`]).
//!
//! The synchronous part of a snapshot only freezes (`KeyedStateBackend::freeze`): each table's
//! dirty list becomes its frozen set and the epoch steps, so the pause does not grow with the
//! dirty keys. Pinning, turning a frozen entry into the increment's [`Change`] (its value by
//! reference, a map's changed entries, a list's new items), then runs in bounded steps between
//! batches (`KeyedStateBackend::pin_frozen`), walking each table's frozen entries in memory
//! order. A write to a frozen entry the walk has not reached pins it first: that is the copy
//! of copy-on-write, except that nothing is copied, since the increment holds the value the
//! entry had at the freeze by reference and the write replaces it.
//!
//! Which frozen entries still await pinning needs no flag per entry: the frozen positions are
//! sorted, the walk goes in order, so every position before the walk's was pinned by it; and
//! an entry pinned by a write has left the frozen epochs (its `written_in` moved on to the
//! next one), which the walk checks before pinning.

use std::ops::Range;

use super::StateBytes;
use super::chunked::ChunkedVec;
use super::list::ListBody;
use super::map::MapBody;
use super::snapshot::Change;
use super::table::Entry;
use super::value::ValueBody;
use crate::ids::CheckpointId;

/// An entry payload a snapshot can pin.
pub(crate) trait Pin {
    /// The change an increment records for this body as it is now, leaving the body as the
    /// next epoch starts from it; and whether the entry can leave its table once that change
    /// is recorded (a tombstone, an emptied map or list).
    fn pin(&mut self, key: StateBytes, checkpoint: CheckpointId) -> (Change, bool);

    /// Reads what the body holds out of line (a long value's reference count, a map's
    /// entries), for the walk to load ahead of pinning.
    fn touch(&self) -> u64 {
        0
    }
}

impl Pin for ValueBody {
    fn pin(&mut self, key: StateBytes, _: CheckpointId) -> (Change, bool) {
        let value = self.clone();
        // A tombstone goes into the increment; the table no longer needs it.
        let remove = value.is_none();
        (Change::Value { key, value }, remove)
    }

    fn touch(&self) -> u64 {
        self.as_ref().map_or(0, StateBytes::touch)
    }
}

impl Pin for MapBody {
    fn pin(&mut self, key: StateBytes, _: CheckpointId) -> (Change, bool) {
        // A changed key that is gone was put and removed since the last snapshot: the chain
        // never held it (`MapValue::persisted`).
        let entries = std::mem::take(&mut self.changed)
            .into_iter()
            .filter_map(|map_key| {
                let slot = self.entries.get_mut(&map_key[..])?;
                slot.persisted = slot.value.is_some();
                let value = slot.value.clone();
                Some((map_key, value))
            })
            .collect();
        let cleared = std::mem::take(&mut self.cleared);
        self.entries.retain(|_, v| v.value.is_some());
        let change = Change::Map {
            key,
            cleared,
            entries,
        };
        (change, self.entries.is_empty())
    }

    fn touch(&self) -> u64 {
        self.entries.touch()
    }
}

impl Pin for ListBody {
    fn pin(&mut self, key: StateBytes, checkpoint: CheckpointId) -> (Change, bool) {
        let appended = self.items[self.persisted..].to_vec();
        if self.persisted == 0 && !appended.is_empty() {
            self.oldest = checkpoint;
        }
        self.persisted = self.items.len();
        let cleared = std::mem::take(&mut self.cleared);
        let change = Change::List {
            key,
            cleared,
            appended,
        };
        (change, self.items.is_empty())
    }
}

/// Frozen entries whose out-of-line contents are loaded into cache at once, ahead of pinning
/// them: pinning a long key or value bumps its reference count, in its own block, one cache
/// miss each; loading the next ones first lets those misses overlap.
const TOUCH_AHEAD: usize = 32;

/// One table's entries written in the frozen checkpoint, and what pinning them gave so far.
#[derive(Debug)]
pub(crate) struct Frozen {
    /// The checkpoint whose increment this is.
    pub(crate) checkpoint: CheckpointId,
    /// The first epoch after the previous snapshot: the frozen entries were last written in
    /// `since..=checkpoint` (checkpoint ids may skip numbers), entries written after the
    /// freeze in a later epoch, and the other entries before.
    since: CheckpointId,
    /// Positions of the frozen entries written before the previous snapshot's freeze (the
    /// table's dirty list); sorted before the walk starts. Each lies before `appended`.
    positions: Vec<u32>,
    sorted: bool,
    /// The frozen entries appended since the previous freeze, dirty by their position.
    appended: Range<u32>,
    /// How far the walk got: in `positions`, then in `appended`.
    next: usize,
    /// The changes pinned so far, in no particular order (each key once).
    pub(crate) changes: Vec<Change>,
    /// Keys pinned with content, which the increment holds until re-written (aging).
    pub(crate) kept: Vec<StateBytes>,
    /// Keys pinned empty (a tombstone, an emptied map or list): they leave the table once the
    /// walk is over, unless written again since.
    pub(crate) emptied: Vec<StateBytes>,
}

impl Frozen {
    pub(crate) fn new(
        since: CheckpointId,
        checkpoint: CheckpointId,
        positions: Vec<u32>,
        appended: Range<u32>,
    ) -> Self {
        Self {
            checkpoint,
            since,
            changes: Vec::new(),
            positions,
            sorted: false,
            appended,
            next: 0,
            kept: Vec::new(),
            emptied: Vec::new(),
        }
    }

    /// Sorts the positions for the walk, and makes room for the changes (each key once): work
    /// left out of the freeze, done by the first pin, whether the walk's or a write's.
    fn sort(&mut self) {
        if !self.sorted {
            self.positions.sort_unstable();
            self.changes.reserve_exact(self.len());
            self.sorted = true;
        }
    }

    /// Number of frozen positions.
    fn len(&self) -> usize {
        self.positions.len() + self.appended.len()
    }

    /// The `i`-th frozen position, in the walk's order (ascending, once sorted).
    #[inline]
    fn at(&self, i: usize) -> Option<usize> {
        match self.positions.get(i) {
            Some(&p) => Some(p as usize),
            None => {
                let p = self.appended.start as usize + (i - self.positions.len());
                (p < self.appended.end as usize).then_some(p)
            }
        }
    }

    /// Whether an entry last written in `written_in` was frozen and not written since.
    #[inline]
    pub(crate) fn holds(&self, written_in: CheckpointId) -> bool {
        (self.since..=self.checkpoint).contains(&written_in)
    }

    /// Whether the entry at `position`, last written in `written_in`, is frozen and still to
    /// be pinned: the walk has not passed it.
    #[inline]
    pub(crate) fn awaits(&mut self, position: usize, written_in: CheckpointId) -> bool {
        if !self.holds(written_in) {
            return false;
        }
        self.sort();
        self.at(self.next).is_some_and(|p| position >= p)
    }

    /// Pins `entry`, a frozen entry not pinned yet (a write is about to change it).
    pub(crate) fn pin<T: Pin>(&mut self, entry: &mut Entry<T>) {
        let kept = &mut self.kept;
        pin_entry(
            entry,
            self.checkpoint,
            &mut self.changes,
            &mut self.emptied,
            |key| kept.push(key),
        );
    }

    /// Whether the walk is over: every frozen entry is pinned.
    pub(crate) fn walked(&self) -> bool {
        self.next >= self.len()
    }

    /// Pins up to `budget` frozen entries of `entries`, in memory order; returns how many it
    /// visited. Keys with content go to `kept` (the caller's, when it gathers them across
    /// tables) rather than this table's own list.
    pub(crate) fn walk<T: Pin>(
        &mut self,
        entries: &mut ChunkedVec<Entry<T>>,
        budget: usize,
        kept: &mut impl FnMut(StateBytes),
    ) -> usize {
        self.sort();
        let end = self.len().min(self.next.saturating_add(budget));
        let start = self.next;
        for i in start..end {
            if (i - start).is_multiple_of(TOUCH_AHEAD) {
                let touched = (i..end.min(i + TOUCH_AHEAD))
                    .filter_map(|j| entries.get(self.at(j)?))
                    .fold(0, |acc, e| acc ^ e.key.touch() ^ e.body.touch());
                std::hint::black_box(touched);
            }
            let Some(position) = self.at(i) else {
                break;
            };
            // A key written again after an epoch step without a snapshot (checkpoint ids
            // that skip) is in the dirty list twice.
            if i > 0 && i < self.positions.len() && self.positions[i - 1] as usize == position {
                continue;
            }
            let Some(entry) = entries.get_mut(position) else {
                continue;
            };
            // A write since the freeze pinned it already.
            if !self.holds(entry.written_in) {
                continue;
            }
            pin_entry(
                entry,
                self.checkpoint,
                &mut self.changes,
                &mut self.emptied,
                &mut *kept,
            );
        }
        self.next = end;
        end - start
    }
}

/// Pins `entry` as of `checkpoint`: its change joins `changes`, its key `emptied` or, if it
/// keeps content, goes to `kept`.
#[inline]
fn pin_entry<T: Pin>(
    entry: &mut Entry<T>,
    checkpoint: CheckpointId,
    changes: &mut Vec<Change>,
    emptied: &mut Vec<StateBytes>,
    kept: impl FnOnce(StateBytes),
) {
    let key = entry.key.clone();
    let (change, empty) = entry.body.pin(key.clone(), checkpoint);
    if empty {
        emptied.push(key);
    } else {
        kept(key);
    }
    changes.push(change);
}

#[cfg(test)]
mod tests {
    use crate::ids::{CheckpointId, SubtaskIndex};
    use crate::partition::{KeyGroups, hash_key};
    use crate::state::{Change, KeyRef, KeyedStateBackend, StateKind};

    fn key(k: &[u8]) -> KeyRef<'_> {
        KeyRef::new(k, hash_key(k))
    }

    fn values(increment: &crate::state::Increment) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut out: Vec<_> = (increment.groups.iter())
            .flat_map(|g| &g.states)
            .flat_map(|s| &s.changes)
            .map(|c| match c {
                Change::Value { key, value } => (key.to_vec(), value.as_ref().map(|v| v.to_vec())),
                other => panic!("not a value change: {other:?}"),
            })
            .collect();
        out.sort();
        out
    }

    /// One key group, so that every key shares one table.
    fn backend() -> (KeyedStateBackend, crate::state::StateId) {
        let groups = KeyGroups::new(1);
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let v = b.declare("v", StateKind::Value).expect("declare");
        (b, v)
    }

    #[test]
    fn a_write_after_the_freeze_goes_to_the_next_increment_and_the_frozen_one_keeps_the_old_value()
    {
        let (mut b, v) = backend();
        for k in [b"a", b"b", b"c"] {
            b.value_set(v, key(k), b"1").expect("set");
        }
        b.freeze(CheckpointId(1));
        assert!(b.pin_frozen(1).is_none(), "one of three pinned");
        // `c` is not pinned yet (the walk goes in memory order): the write pins it first.
        b.value_set(v, key(b"c"), b"2").expect("set");
        b.value_set(v, key(b"d"), b"2").expect("set");
        let first = b.pin_frozen(usize::MAX).expect("pinned");
        let one = |k: &[u8]| (k.to_vec(), Some(b"1".to_vec()));
        assert_eq!(values(&first), vec![one(b"a"), one(b"b"), one(b"c")]);
        let second = b.snapshot();
        let two = |k: &[u8]| (k.to_vec(), Some(b"2".to_vec()));
        assert_eq!(values(&second), vec![two(b"c"), two(b"d")]);
    }

    #[test]
    fn a_tombstone_leaving_its_table_moves_a_key_written_since_without_losing_its_write() {
        let (mut b, v) = backend();
        for k in [b"a", b"b", b"c"] {
            b.value_set(v, key(k), b"1").expect("set");
        }
        drop(b.snapshot());
        b.value_remove(v, key(b"a")).expect("remove");
        b.freeze(CheckpointId(2));
        // `c`, the last entry, is written in the next epoch; the tombstone of `a` leaves the
        // table as the walk ends, and `c` moves into its place.
        b.value_set(v, key(b"c"), b"3").expect("set");
        let frozen = b.pin_frozen(usize::MAX).expect("pinned");
        assert_eq!(values(&frozen), vec![(b"a".to_vec(), None)]);
        assert_eq!(b.stats().entries, 2, "the tombstone is gone");
        assert_eq!(b.stats().dirty_keys, 1);
        b.value_set(v, key(b"b"), b"3").expect("set");
        let next = b.snapshot();
        let three = |k: &[u8]| (k.to_vec(), Some(b"3".to_vec()));
        assert_eq!(values(&next), vec![three(b"b"), three(b"c")]);
        assert_eq!(b.value_get(v, key(b"c")).expect("get"), Some(&b"3"[..]));
    }

    #[test]
    fn a_tombstone_leaving_its_table_moves_a_key_appended_since_which_stays_dirty() {
        let (mut b, v) = backend();
        for k in [b"a", b"b"] {
            b.value_set(v, key(k), b"1").expect("set");
        }
        drop(b.snapshot());
        b.value_remove(v, key(b"a")).expect("remove");
        b.freeze(CheckpointId(2));
        // `d` is appended after the freeze: dirty by its position, until the tombstone of
        // `a` leaves and `d` moves into its place.
        b.value_set(v, key(b"d"), b"4").expect("set");
        assert_eq!(b.stats().dirty_keys, 1);
        let frozen = b.pin_frozen(usize::MAX).expect("pinned");
        assert_eq!(values(&frozen), vec![(b"a".to_vec(), None)]);
        assert_eq!(b.stats().entries, 2, "the tombstone is gone");
        assert_eq!(b.stats().dirty_keys, 1, "`d` is still dirty");
        b.value_set(v, key(b"e"), b"5").expect("set");
        let next = b.snapshot();
        assert_eq!(
            values(&next),
            vec![
                (b"d".to_vec(), Some(b"4".to_vec())),
                (b"e".to_vec(), Some(b"5".to_vec()))
            ]
        );
    }
}
