//! [`release`]: which of its artifacts a subtask deletes when a checkpoint completes, decided
//! from what it remembers alone, apart from the deleting (DESIGN.md §5.3).
//!
//! An artifact goes when no retained checkpoint (nor a later one, in flight) references it and
//! the subtask's chain no longer holds it: those referenced only by checkpoints before the
//! lesser of the completed and the earliest retained one, those of aborted checkpoints, and
//! those whose deletion failed before.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::ids::CheckpointId;

/// What a subtask remembers of the artifacts it owns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Owned {
    /// Per checkpoint that may still be retained: the subtask's artifacts it references.
    pub referenced: BTreeMap<CheckpointId, Vec<String>>,
    /// Artifacts of aborted checkpoints, not yet deleted.
    pub aborted: Vec<String>,
}

/// `complete(completed, earliest_retained)`: forgets the checkpoints that left retention and
/// returns the artifacts to delete. `chain` is the subtask's current chain, whose artifacts
/// stay; `undeleted` are artifacts whose deletion failed before.
pub(crate) fn release(
    owned: &mut Owned,
    completed: CheckpointId,
    earliest_retained: CheckpointId,
    chain: &[&str],
    undeleted: Vec<String>,
) -> BTreeSet<String> {
    let keep_from = earliest_retained.min(completed);
    let retained = owned.referenced.split_off(&keep_from);
    let released = std::mem::replace(&mut owned.referenced, retained);
    let keep: HashSet<&str> = owned
        .referenced
        .values()
        .flatten()
        .map(String::as_str)
        .chain(chain.iter().copied())
        .collect();
    let (still_needed, aborted): (Vec<String>, Vec<String>) = std::mem::take(&mut owned.aborted)
        .into_iter()
        .partition(|p| keep.contains(p.as_str()));
    let doomed = released
        .into_values()
        .flatten()
        .chain(aborted)
        .chain(undeleted)
        .filter(|p| !keep.contains(p.as_str()))
        .collect();
    owned.aborted = still_needed;
    doomed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(referenced: &[(u64, &[&str])], aborted: &[&str]) -> Owned {
        Owned {
            referenced: referenced
                .iter()
                .map(|(id, paths)| {
                    (
                        CheckpointId(*id),
                        paths.iter().map(|p| (*p).to_owned()).collect(),
                    )
                })
                .collect(),
            aborted: aborted.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    fn set(paths: &[&str]) -> BTreeSet<String> {
        paths.iter().map(|p| (*p).to_owned()).collect()
    }

    #[test]
    fn what_only_checkpoints_before_the_earliest_retained_reference_goes() {
        // Chains: 1 = [a], 2 = [a, b], 3 = [b, c] (a drained), retain 2.
        let mut state = owned(&[(1, &["a"]), (2, &["a", "b"]), (3, &["b", "c"])], &[]);
        let doomed = release(
            &mut state,
            CheckpointId(3),
            CheckpointId(2),
            &["b", "c"],
            vec![],
        );
        assert_eq!(doomed, set(&[]), "a is still referenced by 2");
        assert_eq!(
            state.referenced.keys().map(|c| c.0).collect::<Vec<_>>(),
            [2, 3]
        );
        let doomed = release(
            &mut state,
            CheckpointId(4),
            CheckpointId(3),
            &["b", "c"],
            vec![],
        );
        assert_eq!(doomed, set(&["a"]));
    }

    #[test]
    fn aborted_artifacts_go_unless_the_chain_or_a_retained_checkpoint_holds_them() {
        // 2 aborted: its x left the chain, its y is still in it (a later increment builds
        // on it).
        let mut state = owned(&[(1, &["a"])], &["x", "y"]);
        let doomed = release(
            &mut state,
            CheckpointId(3),
            CheckpointId(1),
            &["a", "y"],
            vec![],
        );
        assert_eq!(doomed, set(&["x"]));
        assert_eq!(
            state.aborted,
            &["y"],
            "y is kept, and released once the chain lets go"
        );
        let doomed = release(&mut state, CheckpointId(4), CheckpointId(1), &["a"], vec![]);
        assert_eq!(doomed, set(&["y"]));
        assert!(state.aborted.is_empty());
    }

    #[test]
    fn deletes_that_failed_are_tried_again_and_a_lost_notification_is_subsumed() {
        let mut state = owned(&[(1, &["a"]), (2, &["b"]), (3, &["c"])], &[]);
        // The notification of 2 was lost: 3's releases what 2's would have.
        let doomed = release(
            &mut state,
            CheckpointId(3),
            CheckpointId(3),
            &["c"],
            vec!["old".into()],
        );
        assert_eq!(doomed, set(&["a", "b", "old"]));
        // An out-of-date notification releases nothing more.
        let doomed = release(&mut state, CheckpointId(2), CheckpointId(2), &["c"], vec![]);
        assert_eq!(doomed, set(&[]));
    }
}
