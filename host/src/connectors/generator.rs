//! A synthetic source for benchmarks: `records` keyed records over `keys` distinct keys.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{ConnectorError, Source, SourceProgress};
use crate::record::{RecordBatch, RecordRef};

/// Record `n` has key and value `k<i>` with `i` a fixed scramble of `n` modulo `keys`, so keys
/// arrive in a spread-out order while every run produces the same sequence.
pub struct GeneratorSource {
    next: u64,
    records: u64,
    keys: u64,
    key: Vec<u8>,
    progress: Arc<SourceProgress>,
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
            progress,
        }
    }

    /// The key index of record `n`.
    pub fn key_index(&self, n: u64) -> u64 {
        (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17) % self.keys
    }
}

impl Source for GeneratorSource {
    fn read_batch(&mut self, max: usize, out: &mut RecordBatch) -> Result<bool, ConnectorError> {
        let end = self.records.min(self.next + max as u64);
        for n in self.next..end {
            self.key.clear();
            // Writing into a Vec cannot fail.
            let _ = write!(self.key, "k{}", self.key_index(n));
            out.push(RecordRef::keyed(&self.key, &self.key));
        }
        self.progress
            .done
            .fetch_add(end - self.next, Ordering::Relaxed);
        self.next = end;
        Ok(self.next < self.records)
    }

    fn progress(&self) -> Arc<SourceProgress> {
        self.progress.clone()
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
}
