//! [`LatencyHistogram`]: how long calls took, in the fixed buckets Prometheus histograms use.
//!
//! Lock-free (one atomic per bucket), so the subtask that records and `/metrics` that reads
//! never wait for each other.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds: a batch call takes from tens of microseconds (a
/// small batch of a Rust guest) to seconds (a slow guest near its CPU limit).
pub(crate) const BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5,
];

/// Counts of observations per bucket, plus their sum.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Observations at most `BUCKETS[i]` and above `BUCKETS[i - 1]`; the last slot counts
    /// those above every bound.
    counts: [AtomicU64; BUCKETS.len() + 1],
    /// The sum of every observation, in nanoseconds.
    sum_ns: AtomicU64,
}

/// A histogram as Prometheus exposes it: cumulative counts per bound.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    /// `(bound in seconds, observations at most that bound)`, ascending.
    pub cumulative: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(BUCKETS.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let mut cumulative = Vec::with_capacity(BUCKETS.len());
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            total += count.load(Ordering::Relaxed);
            cumulative.push((*bound, total));
        }
        total += self.counts[BUCKETS.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            cumulative,
            count: total,
            sum_seconds: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_cumulative_per_bound() {
        let h = LatencyHistogram::default();
        h.observe(Duration::from_micros(40)); // first bucket
        h.observe(Duration::from_micros(100)); // exactly the second bound
        h.observe(Duration::from_millis(3)); // the 5 ms bucket
        h.observe(Duration::from_secs(10)); // above every bound
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.cumulative[0], (0.000_05, 1));
        assert_eq!(s.cumulative[1], (0.000_1, 2));
        assert_eq!(s.cumulative[5], (0.002_5, 2));
        assert_eq!(s.cumulative[6], (0.005, 3));
        assert_eq!(s.cumulative.last(), Some(&(2.5, 3)));
        assert!((s.sum_seconds - 10.00314).abs() < 1e-9, "{}", s.sum_seconds);
    }
}
