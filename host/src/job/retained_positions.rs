//! [`RetainedPositions`]: where the source stood at each of this run's checkpoints still
//! retained, to tell it which input no restore reads again (`Source::input_released`).
//!
//! A restore reads the input from the position of the checkpoint it restores, and a fallback
//! past a damaged checkpoint restores an older one, but never one older than the earliest
//! retained. So the input before the earliest retained checkpoint's position is released,
//! and only that: a checkpoint of an earlier run, whose position this run never saw,
//! releases nothing.

use std::collections::VecDeque;

use crate::connectors::SourcePosition;
use crate::ids::CheckpointId;

/// This run's completed checkpoints still retained, oldest first, with the source's
/// position at each.
#[derive(Debug, Default)]
pub(super) struct RetainedPositions {
    positions: VecDeque<(CheckpointId, SourcePosition)>,
}

impl RetainedPositions {
    /// Checkpoint `completed` (if this run's source took it, with its position) completed,
    /// and the store retains the checkpoints from `earliest_retained` on. Returns the
    /// position before which the input is released, if this run knows it.
    pub(super) fn completed(
        &mut self,
        completed: Option<(CheckpointId, SourcePosition)>,
        earliest_retained: CheckpointId,
    ) -> Option<&SourcePosition> {
        if let Some(completed) = completed {
            self.positions.push_back(completed);
        }
        while self
            .positions
            .front()
            .is_some_and(|(id, _)| *id < earliest_retained)
        {
            self.positions.pop_front();
        }
        self.positions
            .front()
            .filter(|(id, _)| *id == earliest_retained)
            .map(|(_, position)| position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: i64) -> SourcePosition {
        serde_json::json!({ "offset": offset })
    }

    #[test]
    fn the_earliest_retained_checkpoints_position_is_released_once_this_run_took_it() {
        let mut retained = RetainedPositions::default();
        // Retaining two: 1 and 2 are kept, then 2 and 3.
        assert_eq!(
            retained.completed(Some((CheckpointId(1), at(10))), CheckpointId(1)),
            Some(&at(10))
        );
        assert_eq!(
            retained.completed(Some((CheckpointId(2), at(20))), CheckpointId(1)),
            Some(&at(10)),
            "checkpoint 1 is still retained: nothing past its position goes"
        );
        assert_eq!(
            retained.completed(Some((CheckpointId(3), at(30))), CheckpointId(2)),
            Some(&at(20))
        );
    }

    #[test]
    fn a_checkpoint_of_an_earlier_run_or_one_never_seen_releases_nothing() {
        let mut retained = RetainedPositions::default();
        // Restored from 8, with 7 and 8 of the earlier run retained.
        assert_eq!(
            retained.completed(Some((CheckpointId(9), at(90))), CheckpointId(7)),
            None
        );
        assert_eq!(
            retained.completed(Some((CheckpointId(10), at(100))), CheckpointId(8)),
            None
        );
        assert_eq!(
            retained.completed(Some((CheckpointId(11), at(110))), CheckpointId(9)),
            Some(&at(90))
        );
        // 12 completed with 13 in one notification: this run saw only 13's position.
        assert_eq!(
            retained.completed(Some((CheckpointId(13), at(130))), CheckpointId(12)),
            None
        );
        assert_eq!(retained.completed(None, CheckpointId(13)), Some(&at(130)));
    }
}
