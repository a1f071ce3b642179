//! Event time between tasks (DESIGN.md §11): the source's [`WatermarkGenerator`] and each
//! consumer's [`InputWatermarks`].
//!
//! A watermark `w` on a channel says that no record with a timestamp at or before `w` follows
//! on it (one that does is late). The source derives its watermarks from the latest timestamp
//! it has read, less the out-of-orderness it is told to allow (Flink's bounded
//! out-of-orderness: `max_timestamp - max_out_of_order - 1`), and sends them down every edge
//! in line with its records and barriers.
//!
//! It sends them at fixed places in its input: after every `batch_size` records (the job's
//! batch size; the source cuts its batches there) and at the end. Where a watermark falls
//! among the records decides which records are late, so at those places it does not depend
//! on how the records happened to be batched: a job restored from a checkpoint, whose batches
//! differ, judges those records as the run before the crash did. Between the fixed places it
//! also sends one after a batch read at least `interval` after the last (`watermark.interval_ms`,
//! [`DEFAULT_INTERVAL`] as in Flink's periodic watermarks): a slow source, or an input smaller
//! than a batch, then moves event time on while it runs, at the price of places that depend on
//! timing (`interval_ms = 0` keeps only the fixed ones). A consumer keeps one watermark per input channel;
//! its own is the minimum over the inputs that are not idle, and only ever moves forward. An
//! input is idle once its producer says so (the source read nothing for `idle_ms`), and
//! active again with its next record or watermark. The end of the input is the watermark
//! [`END_OF_TIME`], so every pending event-time timer fires before the operators close.

use std::time::{Duration, Instant};

use crate::record::RecordBatch;

/// The watermark of the end of the input: every timestamp is at or before it.
pub const END_OF_TIME: i64 = i64::MAX;

/// How often a source sends its watermark at least, besides the fixed places.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(200);

/// How a source makes watermarks (`[source] watermark`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatermarkPolicy {
    /// How far behind the latest timestamp read a record may still come.
    pub max_out_of_order: Duration,
    /// After how long without records the source says it is idle; `None`: never.
    pub idle: Option<Duration>,
    /// Sends a watermark after a batch read this long after the last one sent, between the
    /// fixed places too; `None`: at the fixed places only.
    pub interval: Option<Duration>,
}

/// What the source sends besides records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatermarkMessage {
    /// The source's watermark moved to this.
    At(i64),
    /// The source is idle: consumers leave it out of their watermark until it sends again.
    Idle,
}

/// The source's watermarks, from the timestamps of what it reads.
#[derive(Debug)]
pub struct WatermarkGenerator {
    policy: Option<WatermarkPolicy>,
    max_timestamp: Option<i64>,
    emitted: Option<i64>,
    /// When the last watermark was sent (or the generator made).
    emitted_at: Instant,
    last_record: Instant,
    idle: bool,
}

impl WatermarkGenerator {
    /// A generator following `policy` (none: no watermark but the end of input's), resuming
    /// after `max_timestamp` (a restored checkpoint's).
    pub fn new(policy: Option<WatermarkPolicy>, max_timestamp: Option<i64>) -> Self {
        let mut generator = Self {
            policy,
            max_timestamp,
            emitted: None,
            emitted_at: Instant::now(),
            last_record: Instant::now(),
            idle: false,
        };
        generator.emitted = generator.watermark();
        generator
    }

    /// The latest timestamp read, for checkpoints.
    pub fn max_timestamp(&self) -> Option<i64> {
        self.max_timestamp
    }

    fn watermark(&self) -> Option<i64> {
        let policy = self.policy?;
        let lag = i64::try_from(policy.max_out_of_order.as_millis()).unwrap_or(i64::MAX);
        Some(self.max_timestamp?.saturating_sub(lag).saturating_sub(1))
    }

    /// Takes in a batch the source read (possibly empty) and says what to send after it:
    /// a watermark if `at_mark` (the batch ends at one of the fixed places) or the interval
    /// has passed since the last, or that the source is idle.
    pub fn observe(&mut self, batch: &RecordBatch, at_mark: bool) -> Option<WatermarkMessage> {
        let now = Instant::now();
        if batch.is_empty() {
            let idle_after = self.policy.and_then(|p| p.idle)?;
            if !self.idle && now.duration_since(self.last_record) >= idle_after {
                self.idle = true;
                return Some(WatermarkMessage::Idle);
            }
            return None;
        }
        self.last_record = now;
        if let Some(latest) = batch.max_timestamp() {
            self.max_timestamp = Some(self.max_timestamp.map_or(latest, |m| m.max(latest)));
        }
        let interval_passed = self
            .policy
            .and_then(|p| p.interval)
            .is_some_and(|interval| now.duration_since(self.emitted_at) >= interval);
        if !at_mark && !interval_passed {
            return None;
        }
        let was_idle = std::mem::take(&mut self.idle);
        match self.watermark() {
            Some(w) if self.emitted.is_none_or(|e| w > e) || was_idle => {
                self.emitted = Some(w);
                self.emitted_at = now;
                Some(WatermarkMessage::At(w))
            }
            _ => None,
        }
    }
}

/// A change of a consumer's watermark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatermarkChange {
    /// It moved forward to this.
    Advanced(i64),
    /// Every input is idle: so is the consumer's output.
    Idle,
    /// An input is active again after all were idle.
    Active,
}

/// A consumer's watermark over its inputs.
#[derive(Debug)]
pub struct InputWatermarks {
    /// Per input, its latest watermark.
    inputs: Vec<Option<i64>>,
    idle: Vec<bool>,
    current: Option<i64>,
    all_idle: bool,
}

impl InputWatermarks {
    /// `inputs` inputs, starting from `restored` (a restored checkpoint's watermark), below
    /// which the watermark never goes.
    pub fn new(inputs: usize, restored: Option<i64>) -> Self {
        Self {
            inputs: vec![None; inputs],
            idle: vec![false; inputs],
            current: restored,
            all_idle: false,
        }
    }

    /// Starts from `restored`, below which the watermark never goes.
    pub fn restore_floor(&mut self, restored: Option<i64>) {
        self.current = self.current.max(restored);
    }

    /// The consumer's watermark.
    pub fn current(&self) -> Option<i64> {
        self.current
    }

    /// Input `input` sent `message`; returns the changes of the consumer's watermark.
    pub fn on_message(
        &mut self,
        input: usize,
        message: WatermarkMessage,
        changes: &mut Vec<WatermarkChange>,
    ) {
        let Some(slot) = self.inputs.get_mut(input) else {
            return;
        };
        match message {
            WatermarkMessage::At(w) => {
                *slot = Some(slot.map_or(w, |old| old.max(w)));
                self.idle[input] = false;
            }
            WatermarkMessage::Idle => self.idle[input] = true,
        }
        self.combine(changes);
    }

    /// Input `input` sent records: it is not idle.
    pub fn on_records(&mut self, input: usize, changes: &mut Vec<WatermarkChange>) {
        if self.idle.get(input).copied() == Some(true) {
            self.idle[input] = false;
            self.combine(changes);
        }
    }

    fn combine(&mut self, changes: &mut Vec<WatermarkChange>) {
        let active: Vec<Option<i64>> = self
            .inputs
            .iter()
            .zip(&self.idle)
            .filter(|(_, idle)| !**idle)
            .map(|(w, _)| *w)
            .collect();
        if active.is_empty() {
            if !self.all_idle {
                self.all_idle = true;
                changes.push(WatermarkChange::Idle);
            }
            return;
        }
        if std::mem::take(&mut self.all_idle) {
            changes.push(WatermarkChange::Active);
        }
        // An active input without a watermark yet holds the consumer back.
        let Some(min) = active.iter().copied().collect::<Option<Vec<i64>>>() else {
            return;
        };
        let Some(min) = min.into_iter().min() else {
            return;
        };
        if self.current.is_none_or(|c| min > c) {
            self.current = Some(min);
            changes.push(WatermarkChange::Advanced(min));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordRef;

    fn changes(w: &mut InputWatermarks, input: usize, m: WatermarkMessage) -> Vec<WatermarkChange> {
        let mut out = Vec::new();
        w.on_message(input, m, &mut out);
        out
    }

    #[test]
    fn the_watermark_is_the_minimum_over_active_inputs_and_never_goes_back() {
        let mut w = InputWatermarks::new(2, None);
        assert_eq!(changes(&mut w, 0, WatermarkMessage::At(10)), []);
        assert_eq!(
            changes(&mut w, 1, WatermarkMessage::At(5)),
            [WatermarkChange::Advanced(5)]
        );
        assert_eq!(
            changes(&mut w, 1, WatermarkMessage::At(20)),
            [WatermarkChange::Advanced(10)]
        );
        // Input 0 idle: input 1 alone decides.
        assert_eq!(
            changes(&mut w, 0, WatermarkMessage::Idle),
            [WatermarkChange::Advanced(20)]
        );
        assert_eq!(
            changes(&mut w, 1, WatermarkMessage::Idle),
            [WatermarkChange::Idle]
        );
        // Input 0 comes back behind: the watermark stays.
        assert_eq!(
            changes(&mut w, 0, WatermarkMessage::At(12)),
            [WatermarkChange::Active]
        );
        assert_eq!(w.current(), Some(20));
    }

    #[test]
    fn a_restored_watermark_is_a_floor() {
        let mut w = InputWatermarks::new(1, Some(100));
        assert_eq!(changes(&mut w, 0, WatermarkMessage::At(50)), []);
        assert_eq!(
            changes(&mut w, 0, WatermarkMessage::At(101)),
            [WatermarkChange::Advanced(101)]
        );
    }

    #[test]
    fn the_source_lags_its_latest_timestamp_by_the_out_of_orderness() {
        let policy = WatermarkPolicy {
            max_out_of_order: Duration::from_millis(100),
            idle: Some(Duration::ZERO),
            interval: None,
        };
        let mut g = WatermarkGenerator::new(Some(policy), None);
        let mut batch = RecordBatch::new();
        batch.push(RecordRef {
            timestamp: Some(1_000),
            ..RecordRef::unkeyed(b"a")
        });
        batch.push(RecordRef {
            timestamp: Some(900),
            ..RecordRef::unkeyed(b"b")
        });
        let mut later = RecordBatch::new();
        later.push(RecordRef {
            timestamp: Some(1_500),
            ..RecordRef::unkeyed(b"c")
        });
        assert_eq!(g.observe(&batch, true), Some(WatermarkMessage::At(899)));
        assert_eq!(g.observe(&batch, true), None, "no advance");
        assert_eq!(g.observe(&later, false), None, "between marks");
        assert_eq!(
            g.observe(&RecordBatch::new(), false),
            Some(WatermarkMessage::Idle)
        );
        assert_eq!(g.observe(&RecordBatch::new(), true), None, "idle once");
        // Resumed from a checkpoint: from the latest timestamp read, marks or not.
        let g = WatermarkGenerator::new(Some(policy), g.max_timestamp());
        assert_eq!(g.watermark(), Some(1_399));
    }

    #[test]
    fn between_the_marks_the_source_sends_its_watermark_once_the_interval_passed() {
        let timestamped = |ts| {
            let mut batch = RecordBatch::new();
            batch.push(RecordRef {
                timestamp: Some(ts),
                ..RecordRef::unkeyed(b"a")
            });
            batch
        };
        let policy = |interval| WatermarkPolicy {
            max_out_of_order: Duration::from_millis(100),
            idle: None,
            interval,
        };
        // An interval of zero has always passed: every batch that moves it sends it.
        let mut g = WatermarkGenerator::new(Some(policy(Some(Duration::ZERO))), None);
        assert_eq!(
            g.observe(&timestamped(1_000), false),
            Some(WatermarkMessage::At(899))
        );
        assert_eq!(g.observe(&timestamped(950), false), None, "no advance");
        assert_eq!(
            g.observe(&timestamped(1_200), false),
            Some(WatermarkMessage::At(1_099))
        );
        // One that has not passed yet (a day), or none: the marks only.
        for interval in [Some(Duration::from_secs(86_400)), None] {
            let mut g = WatermarkGenerator::new(Some(policy(interval)), None);
            assert_eq!(g.observe(&timestamped(1_000), false), None, "{interval:?}");
            assert_eq!(
                g.observe(&timestamped(1_000), true),
                Some(WatermarkMessage::At(899))
            );
        }
    }
}
