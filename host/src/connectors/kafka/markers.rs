//! What flows through a repartition topic besides records (DESIGN.md §12.1): each upstream
//! pipeline's [`Marker`]s, and a downstream partition's reckoning of them, [`Writers`].
//!
//! Every pipeline of a stage that feeds a repartition topic is one *writer* of it, named by
//! its own input partition. With each checkpoint's output it writes a marker to every
//! partition of the topic: how far its event time has come, or that it has ended. A marker
//! is a message with an empty value and a `weir-marker` header; it goes out with the
//! checkpoint's records, so it is published exactly once as they are, and after them, so no
//! record of that writer that precedes it in the partition is later than it says.
//!
//! A writer whose input went idle says so in a marker, and again when it is active: an idle
//! writer holds no one back, as an idle input inside a pipeline (`job::watermarks`).
//!
//! A downstream partition counts the writers' markers it has read: its watermark is the least
//! over the writers that have neither ended nor gone idle, once it has heard from all of them
//! (a writer it has not heard from may still send anything), and its input ends once every
//! writer has ended.
//! What it has counted is part of its checkpointed position, since a restore resumes after
//! the markers it read.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The header that makes a message a marker; its value is the marker, as JSON.
pub(crate) const MARKER_HEADER: &str = "weir-marker";

/// The event time at the end of a writer's input: every timestamp is at or before it.
const END: i64 = i64::MAX;

/// One writer's word to one partition of a repartition topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Marker {
    /// The writer: the upstream pipeline's input partition.
    pub(crate) writer: u32,
    /// How many writers the topic has (the upstream input's partitions).
    pub(crate) writers: u32,
    /// No record this writer sends after the marker has a timestamp at or before this;
    /// `i64::MAX` once the writer has ended.
    pub(crate) watermark: i64,
    /// The writer's input is idle: until its next marker, it holds no one back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) idle: bool,
}

impl Marker {
    /// The marker a writer sends once its input has ended.
    #[cfg(test)]
    pub(crate) fn end(writer: u32, writers: u32) -> Self {
        Self {
            writer,
            writers,
            watermark: END,
            idle: false,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a marker serialises")
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not a marker: {e}"))
    }
}

/// What a downstream partition has read of its writers' markers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Writers {
    /// How many writers there are, once a marker has said.
    count: Option<u32>,
    /// Each writer's latest watermark, by writer.
    watermarks: BTreeMap<u32, i64>,
    /// The writers whose latest marker says they are idle.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    idle: BTreeSet<u32>,
}

impl Writers {
    /// Counts a marker. A marker that disagrees with earlier ones on the number of writers
    /// is an error: the topic is fed by two different jobs, or the upstream input changed
    /// its partition count under a running job.
    pub(crate) fn observe(&mut self, marker: Marker) -> Result<(), String> {
        match self.count {
            Some(count) if count != marker.writers => {
                return Err(format!(
                    "a marker says the topic has {} writers, earlier ones said {count}",
                    marker.writers
                ));
            }
            _ => self.count = Some(marker.writers),
        }
        if marker.writer >= marker.writers {
            return Err(format!(
                "a marker comes from writer {} of {}",
                marker.writer, marker.writers
            ));
        }
        let at = self.watermarks.entry(marker.writer).or_insert(i64::MIN);
        *at = (*at).max(marker.watermark);
        if marker.idle {
            self.idle.insert(marker.writer);
        } else {
            self.idle.remove(&marker.writer);
        }
        Ok(())
    }

    /// Every writer has ended: nothing more will come.
    pub(crate) fn all_ended(&self) -> bool {
        self.count.is_some_and(|count| {
            self.watermarks.len() == count as usize && self.watermarks.values().all(|w| *w == END)
        })
    }

    /// The partition's watermark, once every writer has been heard from: the least over the
    /// writers still writing and not idle; while all of those are idle, the most any of
    /// them reached (as Flink's inputs do when all are idle: none is writing, so none holds
    /// the others back); `i64::MAX` once all have ended.
    pub(crate) fn watermark(&self) -> Option<i64> {
        let count = self.count?;
        if self.watermarks.len() < count as usize {
            return None;
        }
        if self.all_ended() {
            return Some(END);
        }
        let writing = self.watermarks.iter().filter(|(_, at)| **at != END);
        let active = writing
            .clone()
            .filter(|(writer, _)| !self.idle.contains(writer))
            .map(|(_, at)| *at)
            .min();
        active.or_else(|| {
            writing
                .map(|(_, at)| *at)
                .max()
                .filter(|at| *at != i64::MIN)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(writer: u32, watermark: i64) -> Marker {
        Marker {
            writer,
            writers: 3,
            watermark,
            idle: false,
        }
    }

    #[test]
    fn the_watermark_waits_for_every_writer_and_is_their_least() {
        let mut writers = Writers::default();
        assert_eq!(writers.watermark(), None);
        writers
            .observe(at(0, 100))
            .expect("a marker of the 3 writers");
        writers
            .observe(at(2, 50))
            .expect("a marker of the 3 writers");
        assert_eq!(
            writers.watermark(),
            None,
            "writer 1 may still send anything"
        );
        writers
            .observe(at(1, 70))
            .expect("a marker of the 3 writers");
        assert_eq!(writers.watermark(), Some(50));
        // A writer's watermark never goes back, even if markers arrive out of order.
        writers
            .observe(at(2, 40))
            .expect("a marker of the 3 writers");
        assert_eq!(writers.watermark(), Some(50));
        writers
            .observe(Marker::end(2, 3))
            .expect("a marker of the 3 writers");
        assert_eq!(
            writers.watermark(),
            Some(70),
            "an ended writer holds no one back"
        );
        assert!(!writers.all_ended());
        writers
            .observe(Marker::end(0, 3))
            .expect("a marker of the 3 writers");
        writers
            .observe(Marker::end(1, 3))
            .expect("a marker of the 3 writers");
        assert!(writers.all_ended());
        assert_eq!(writers.watermark(), Some(i64::MAX));
    }

    #[test]
    fn an_idle_writer_holds_no_one_back_until_it_writes_again() {
        let idle = |writer, watermark| Marker {
            idle: true,
            ..at(writer, watermark)
        };
        let mut writers = Writers::default();
        for marker in [at(0, 100), at(1, 70), idle(2, i64::MIN)] {
            writers.observe(marker).expect("a marker of the 3 writers");
        }
        assert_eq!(
            writers.watermark(),
            Some(70),
            "writer 2 never wrote, and is idle"
        );
        writers.observe(idle(1, 70)).expect("a marker");
        assert_eq!(writers.watermark(), Some(100));
        writers.observe(idle(0, 100)).expect("a marker");
        assert_eq!(
            writers.watermark(),
            Some(100),
            "every writer is idle: none holds the others back"
        );
        writers.observe(at(2, 20)).expect("a marker");
        assert_eq!(writers.watermark(), Some(20), "writer 2 writes again");
        // Idleness is part of the checkpointed position.
        let restored: Writers =
            serde_json::from_value(serde_json::to_value(&writers).expect("to JSON"))
                .expect("from JSON");
        assert_eq!(restored, writers);
        writers.observe(Marker::end(2, 3)).expect("a marker");
        assert_eq!(writers.watermark(), Some(100), "the others are idle");
        let mut never = Writers::default();
        for marker in [idle(0, i64::MIN), idle(1, i64::MIN), idle(2, i64::MIN)] {
            never.observe(marker).expect("a marker");
        }
        assert_eq!(never.watermark(), None, "no writer had a watermark");
    }

    #[test]
    fn markers_round_trip_and_inconsistent_ones_are_refused() {
        let marker = at(1, -5);
        assert_eq!(Marker::decode(&marker.encode()), Ok(marker));
        assert!(Marker::decode(b"{").is_err());
        let mut writers = Writers::default();
        writers
            .observe(at(0, 1))
            .expect("a marker of the 3 writers");
        let other_job = Marker {
            writer: 0,
            writers: 4,
            watermark: 1,
            idle: false,
        };
        assert!(writers.observe(other_job).is_err());
        assert!(writers.observe(at(3, 1)).is_err(), "writer 3 of 3");
        // The count survives a checkpoint.
        let restored: Writers =
            serde_json::from_value(serde_json::to_value(&writers).expect("to JSON"))
                .expect("from JSON");
        assert_eq!(restored, writers);
    }
}
