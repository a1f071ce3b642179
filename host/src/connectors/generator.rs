//! A synthetic source for benchmarks: `records` keyed records over `keys` distinct keys, as
//! fast as it can or paced (`records_per_second`, for demos and tests that need a job to run
//! for a while).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::Deserialize;

use super::pace::Pace;
use super::{ConnectorError, Source, SourceOrigin, SourcePosition, SourceProgress};
use crate::record::{RecordBatch, RecordRef};

/// The checkpointed position of a generator, `{"records": ..}`: the next record's index.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GeneratorPosition {
    records: u64,
}

/// `[source] clock`: the generator's synthetic event time. Record `n` happens at
/// `start_ms + n * 1000 / events_per_second`; a `disorder` fraction of the records (picked by
/// a hash of `n`, so every replay is the same) come up to `max_delay_ms` late.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GeneratorClock {
    pub start_ms: i64,
    pub events_per_second: u64,
    pub disorder: f64,
    pub max_delay_ms: u64,
}

impl Default for GeneratorClock {
    fn default() -> Self {
        Self {
            // 2023-11-14T22:13:20Z: a fixed instant, so generated jobs are reproducible.
            start_ms: 1_700_000_000_000,
            events_per_second: 1_000,
            disorder: 0.0,
            max_delay_ms: 0,
        }
    }
}

/// Record `n` has key and value `k<i>` with `i` a fixed scramble of `n` modulo `keys`, so keys
/// arrive in a spread-out order while every run produces the same sequence.
pub struct GeneratorSource {
    next: u64,
    records: u64,
    keys: u64,
    key: Vec<u8>,
    /// Formats a key's number: through `core::fmt` it was 7 % of a keyed-count bench's time.
    digits: itoa::Buffer,
    progress: Arc<SourceProgress>,
    clock: GeneratorClock,
    pace: Option<Pace>,
}

impl GeneratorSource {
    pub fn new(records: u64, keys: u64) -> Self {
        let progress = Arc::new(SourceProgress::default());
        progress.total.store(records, Ordering::Relaxed);
        Self {
            next: 0,
            records,
            keys: keys.max(1),
            key: Vec::with_capacity(24),
            digits: itoa::Buffer::new(),
            progress,
            clock: GeneratorClock::default(),
            pace: None,
        }
    }

    /// The generator producing at most `per_second` records per second (`None`: no limit),
    /// from now or from where it is sought to.
    pub fn paced(mut self, per_second: Option<u64>) -> Self {
        self.pace = per_second.map(|per_second| Pace::new(per_second, self.next));
        self
    }

    /// How many records may be read now, at most `max`: waits until a batch is due (`Pace::due`).
    fn due(&self, max: usize) -> u64 {
        match &self.pace {
            Some(pace) if self.next < self.records => pace.due(self.next, max) as u64,
            _ => max as u64,
        }
    }

    /// The generator with its records' event time on `clock`.
    pub fn with_clock(mut self, clock: GeneratorClock) -> Self {
        self.clock = clock;
        self
    }

    /// The event time of record `n`.
    pub fn timestamp(&self, n: u64) -> i64 {
        let clock = &self.clock;
        let eps = clock.events_per_second.max(1);
        // In u64 while `n * 1000` fits (a 128-bit division per record showed in profiles).
        let since_start = match n.checked_mul(1000) {
            Some(ms) => ms / eps,
            None => u64::try_from(u128::from(n) * 1000 / u128::from(eps)).unwrap_or(u64::MAX),
        };
        let on_time = clock
            .start_ms
            .saturating_add(i64::try_from(since_start).unwrap_or(i64::MAX));
        // Two independent scrambles of n: whether the record is late, and by how much.
        let pick = n
            .wrapping_add(1)
            .wrapping_mul(0xd6e8_feb8_6659_fd93)
            .rotate_left(29);
        let fraction = (pick >> 11) as f64 / (1u64 << 53) as f64;
        let late = fraction < clock.disorder;
        if !late || clock.max_delay_ms == 0 {
            return on_time;
        }
        let delay = pick.wrapping_mul(0x9e37_79b9_7f4a_7c15) % (clock.max_delay_ms + 1);
        on_time.saturating_sub(delay as i64)
    }

    /// The key index of record `n`.
    pub fn key_index(&self, n: u64) -> u64 {
        (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17) % self.keys
    }
}

impl Source for GeneratorSource {
    fn read_batch(&mut self, max: usize, out: &mut RecordBatch) -> Result<bool, ConnectorError> {
        let end = self.records.min(self.next + self.due(max));
        for n in self.next..end {
            let index = self.key_index(n);
            self.key.clear();
            self.key.push(b'k');
            self.key
                .extend_from_slice(self.digits.format(index).as_bytes());
            let record = RecordRef {
                timestamp: Some(self.timestamp(n)),
                ..RecordRef::keyed(&self.key, &self.key)
            };
            out.push_from_source(record, n);
        }
        self.progress
            .done
            .fetch_add(end - self.next, Ordering::Relaxed);
        self.next = end;
        Ok(self.next < self.records)
    }

    fn position(&self) -> SourcePosition {
        serde_json::json!({ "records": self.next })
    }

    fn seek(&mut self, position: &SourcePosition) -> Result<(), ConnectorError> {
        let bad = |message: String| ConnectorError::BadPosition {
            source_name: "generator".to_owned(),
            message,
        };
        let GeneratorPosition { records } = GeneratorPosition::deserialize(position)
            .map_err(|e| bad(format!("{position} is not a generator position: {e}")))?;
        if records > self.records {
            return Err(bad(format!(
                "record {records} is beyond the end ({} records)",
                self.records
            )));
        }
        self.next = records;
        if let Some(pace) = &mut self.pace {
            pace.restart(records);
        }
        self.progress.done.store(records, Ordering::Relaxed);
        Ok(())
    }

    fn progress(&self) -> Arc<SourceProgress> {
        self.progress.clone()
    }

    fn origin(&self) -> SourceOrigin {
        SourceOrigin::Generator
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produces_exactly_the_records_over_the_keys() {
        let mut source = GeneratorSource::new(10_000, 100);
        let mut batch = RecordBatch::new();
        while source.read_batch(1024, &mut batch).expect("read") {}
        assert_eq!(batch.len(), 10_000);
        let keys: std::collections::HashSet<_> = batch.iter().filter_map(|r| r.key).collect();
        assert_eq!(keys.len(), 100);
    }

    /// Records as owned (key, value) pairs.
    fn read_rest(source: &mut GeneratorSource, max: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut batch = RecordBatch::new();
        while source.read_batch(max, &mut batch).expect("read") {}
        batch
            .iter()
            .map(|r| (r.key.unwrap_or_default().to_vec(), r.value.to_vec()))
            .collect()
    }

    #[test]
    fn a_paced_generator_produces_no_faster_than_its_pace() {
        let started = std::time::Instant::now();
        let mut source = GeneratorSource::new(300, 10).paced(Some(2_000));
        assert_eq!(read_rest(&mut source, 64).len(), 300);
        // Record n is due n/2000 s after the start: the last at 149.5 ms.
        assert!(started.elapsed() >= std::time::Duration::from_millis(149));
    }

    #[test]
    fn a_generator_seeked_to_a_position_produces_exactly_the_rest() {
        let mut source = GeneratorSource::new(1_000, 10);
        source
            .read_batch(300, &mut RecordBatch::new())
            .expect("read");
        let position = source.position();
        assert_eq!(position, serde_json::json!({ "records": 300 }));
        let rest = read_rest(&mut source, 128);
        assert_eq!(rest.len(), 700);

        let mut resumed = GeneratorSource::new(1_000, 10);
        resumed.seek(&position).expect("seek");
        assert_eq!(resumed.progress().done.load(Ordering::Relaxed), 300);
        assert_eq!(read_rest(&mut resumed, 97), rest);
        assert_eq!(resumed.position(), source.position());
    }

    #[test]
    fn positions_a_generator_cannot_have_produced_are_errors() {
        let cases = [
            (
                serde_json::json!({ "offset": 3, "line": 1 }),
                "unknown field",
            ),
            (serde_json::json!({}), "missing field `records`"),
            (serde_json::json!(3), "not a generator position"),
            (
                serde_json::json!({ "records": 11 }),
                "beyond the end (10 records)",
            ),
        ];
        for (position, expected) in cases {
            let err = GeneratorSource::new(10, 2)
                .seek(&position)
                .expect_err("bad position");
            assert!(matches!(err, ConnectorError::BadPosition { .. }), "{err:?}");
            assert!(err.to_string().contains(expected), "{position}: {err}");
        }
        let mut source = GeneratorSource::new(10, 2);
        source
            .seek(&serde_json::json!({ "records": 10 }))
            .expect("the end is a position");
        assert!(read_rest(&mut source, 4).is_empty());
    }
}
