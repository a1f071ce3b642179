//! [`Pace`]: at most so many records per second of wall-clock time, for a source that should
//! not run as fast as it can (a demo at a readable speed, or a test whose bounded job must
//! still be running when the test acts, however fast the machine).

use std::time::{Duration, Instant};

/// A schedule: record `first + n` is due `n / per_second` after `since`.
#[derive(Debug)]
pub(crate) struct Pace {
    per_second: u64,
    since: Instant,
    first: u64,
}

impl Pace {
    /// A pace of `per_second` (at least 1) starting now at record `first`.
    pub(crate) fn new(per_second: u64, first: u64) -> Self {
        Self {
            per_second: per_second.max(1),
            since: Instant::now(),
            first,
        }
    }

    /// Starts over now at record `first`: after a seek, the source does not rush to catch up
    /// with time it did not run.
    pub(crate) fn restart(&mut self, first: u64) {
        self.since = Instant::now();
        self.first = first;
    }

    /// How many records from record `next` on may be read now, at most `max`: sleeps until
    /// a batch is due. A batch is `max` records, or a hundredth of a second's worth if that
    /// is fewer (but at least one): a pace far below the source's speed still reads in
    /// batches, not a record at a time.
    pub(crate) fn due(&self, next: u64, max: usize) -> usize {
        if max == 0 {
            return 0;
        }
        let batch = (self.per_second / 100).clamp(1, max as u64);
        loop {
            let elapsed = self.since.elapsed();
            let allowed = (self.first
                + (elapsed.as_nanos() * u128::from(self.per_second) / 1_000_000_000) as u64)
                .saturating_sub(next);
            if allowed >= batch {
                return allowed.min(max as u64) as usize;
            }
            let batch_due = Duration::from_nanos(
                ((next + batch - self.first) as u128 * 1_000_000_000 / u128::from(self.per_second))
                    as u64,
            );
            std::thread::sleep(
                batch_due
                    .saturating_sub(elapsed)
                    .max(Duration::from_micros(100)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_no_faster_than_the_pace_in_batches_and_a_restart_does_not_catch_up() {
        let started = Instant::now();
        let mut pace = Pace::new(1_000, 0);
        let mut next = 0;
        while next < 100 {
            let due = pace.due(next, 64);
            // A hundredth of a second's worth at least (or what is left of a late one).
            assert!((10..=64).contains(&due), "{due}");
            next += due as u64;
        }
        // Record 99 was due 99 ms after the start.
        assert!(started.elapsed() >= Duration::from_millis(99));
        assert_eq!(pace.due(next, 0), 0);
        assert_eq!(pace.due(next, 1), 1, "a batch is at most `max`");

        // Restarted at record 1000 (a seek): the next batch is due 10 ms on, not at once to
        // catch up with the time before.
        pace.restart(1_000);
        let restarted = Instant::now();
        let mut next = 1_000;
        while next < 1_050 {
            next += pace.due(next, 16) as u64;
        }
        assert!(restarted.elapsed() >= Duration::from_millis(49));
    }
}
