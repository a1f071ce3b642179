//! What happens to records that cannot be processed: a line the source cannot read
//! (`[source] on_bad_record`), a record an operator's `key_by` cannot key (the operator's
//! `on_bad_record`), a record an operator fails on (its `on_error`). Each place follows its
//! [`RecordPolicy`]: fail the job (the default), skip the record, or write it to a dead-letter
//! file; skipped and dead-lettered records are counted per place ([`BadRecordCounters`]).
//!
//! Dead letters are output like the job's own, exactly once across restores: every task of
//! a job that has dead-letter files gets one more channel, to the sink task, which writes each
//! file through a file sink of its own. A task sends its dead letters on that channel before
//! the barrier that follows them ([`DeadLetters::barrier`]), so the sink aligns barriers over
//! those channels too, stages every file with the job's output, and commits them together
//! when the checkpoint completes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;

use super::in_flight::Output;
use super::runtime::JobError;
use super::spec::RecordPolicy;
use crate::checkpoint::protocol::Barrier;
use crate::record::{RecordBatch, RecordRef};

/// Bad records one place (the source, or an operator) set aside in this run.
#[derive(Debug, Default)]
pub struct BadRecordCounters {
    /// Records dropped by a `skip` policy.
    pub skipped: AtomicU64,
    /// Records sent to a dead-letter output.
    pub dead_lettered: AtomicU64,
}

/// A bad record, as its dead letter records it.
#[derive(Clone, Copy, Debug)]
pub struct DeadLetter<'a> {
    /// Where it was met: `None` for the source, else the operator (whose `key_by` or whose
    /// guest it failed).
    pub operator: Option<&'a str>,
    /// The subtask that met it, if an operator's.
    pub subtask: Option<u32>,
    /// Why it could not be processed.
    pub error: &'a str,
    /// Where it came from in the input, if known (`in.txt line 4`).
    pub origin: Option<&'a str>,
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
    pub timestamp: Option<i64>,
}

impl DeadLetter<'_> {
    /// Its line in a dead-letter file: a JSON object. Keys and values that are UTF-8 are
    /// strings; others are `{"base64": ..}`, so every byte survives.
    pub fn to_json(&self) -> Vec<u8> {
        let bytes = |b: &[u8]| match std::str::from_utf8(b) {
            Ok(text) => serde_json::Value::from(text),
            Err(_) => serde_json::json!({
                "base64": base64::engine::general_purpose::STANDARD.encode(b)
            }),
        };
        let letter = serde_json::json!({
            "operator": self.operator,
            "subtask": self.subtask,
            "error": self.error,
            "origin": self.origin,
            "key": self.key.map(bytes),
            "value": bytes(self.value),
            "timestamp": self.timestamp,
        });
        letter.to_string().into_bytes()
    }
}

/// A record as an error names it: its key and value (shortened) and, if known, where it came
/// from in the input: `the record with key "u1" and value "{\"id\":89}" (events.jsonl line 89)`.
pub fn describe_record(record: RecordRef<'_>, origin: Option<&str>) -> String {
    /// Bytes of a key or value shown; enough to recognise a record.
    const SHOWN: usize = 120;
    let show = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(SHOWN)]).into_owned();
        if bytes.len() > SHOWN {
            format!("{text:?}… ({} bytes)", bytes.len())
        } else {
            format!("{text:?}")
        }
    };
    let mut described = match record.key {
        Some(key) => format!(
            "the record with key {} and value {}",
            show(key),
            show(record.value)
        ),
        None => format!(
            "the record without key and with value {}",
            show(record.value)
        ),
    };
    if let Some(origin) = origin {
        described.push_str(&format!(" ({origin})"));
    }
    described
}

/// How one place handles the records it cannot process.
#[derive(Clone, Debug)]
pub struct BadRecordPolicy {
    handling: Handling,
    counters: Arc<BadRecordCounters>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handling {
    Fail,
    Skip,
    /// To the job's dead-letter file of this index.
    DeadLetter(usize),
}

impl BadRecordPolicy {
    /// `policy`, whose dead-letter file or topic (if any) is one of the job's `targets`
    /// (`JobSpec::dead_letter_targets`).
    pub fn new(
        policy: &RecordPolicy,
        targets: &[RecordPolicy],
        counters: Arc<BadRecordCounters>,
    ) -> Self {
        let handling = match policy {
            RecordPolicy::Fail => Handling::Fail,
            RecordPolicy::Skip => Handling::Skip,
            // The job's targets are gathered from its policies, so this one is among them.
            RecordPolicy::DeadLetter(_) | RecordPolicy::DeadLetterTopic(_) => targets
                .iter()
                .position(|t| t == policy)
                .map_or(Handling::Fail, Handling::DeadLetter),
        };
        Self { handling, counters }
    }

    /// A policy that fails the job (places that never meet bad records, and tests).
    pub fn fail() -> Self {
        Self {
            handling: Handling::Fail,
            counters: Arc::default(),
        }
    }

    /// Whether a bad record fails the job.
    pub fn fails(&self) -> bool {
        self.handling == Handling::Fail
    }

    /// Skips or dead-letters a bad record (a policy that fails the job sets nothing aside:
    /// its caller fails instead).
    pub fn set_aside(&self, letter: &DeadLetter<'_>, letters: &mut DeadLetters) {
        match self.handling {
            Handling::Fail => {}
            Handling::Skip => {
                self.counters.skipped.fetch_add(1, Ordering::Relaxed);
            }
            Handling::DeadLetter(file) => {
                letters.push(file, letter);
                self.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A task's channel to the sink for dead letters, and the letters waiting to go.
#[derive(Debug, Default)]
pub struct DeadLetters {
    /// `None` when the job has no dead-letter file.
    target: Option<Output>,
    /// Per file, the letters not sent yet.
    pending: Vec<RecordBatch>,
}

impl DeadLetters {
    /// For a job with `files` dead-letter files, sending on `target`.
    pub fn new(target: Output, files: usize) -> Self {
        Self {
            target: Some(target),
            pending: (0..files).map(|_| RecordBatch::new()).collect(),
        }
    }

    fn push(&mut self, file: usize, letter: &DeadLetter<'_>) {
        if let Some(batch) = self.pending.get_mut(file) {
            batch.push(RecordRef::unkeyed(&letter.to_json()));
        }
    }

    /// Sends the pending letters (after each batch, so they go before the next barrier).
    pub fn flush(&mut self) -> Result<(), JobError> {
        let Some(target) = &self.target else {
            return Ok(());
        };
        for (file, batch) in self.pending.iter_mut().enumerate() {
            if !batch.is_empty() {
                let batch = std::mem::take(batch);
                target
                    .send_dead_letters(file, batch)
                    .map_err(|_| JobError::Aborted)?;
            }
        }
        Ok(())
    }

    /// Sends the pending letters, then `barrier`: the letters belong to its checkpoint.
    pub fn barrier(&mut self, barrier: Barrier) -> Result<(), JobError> {
        self.flush()?;
        if let Some(target) = &self.target {
            target
                .send_barrier(barrier)
                .map_err(|_| JobError::Aborted)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::input_gate::Message;

    #[test]
    fn a_dead_letter_keeps_every_byte_and_says_where_it_came_from() {
        let letter = DeadLetter {
            operator: Some("count"),
            subtask: Some(1),
            error: "ValueError: boom",
            origin: Some("in.txt line 4"),
            key: Some(b"k\xff"),
            value: b"v\"1",
            timestamp: None,
        };
        let json: serde_json::Value =
            serde_json::from_slice(&letter.to_json()).expect("a JSON line");
        assert_eq!(
            json,
            serde_json::json!({
                "operator": "count",
                "subtask": 1,
                "error": "ValueError: boom",
                "origin": "in.txt line 4",
                "key": { "base64": "a/8=" },
                "value": "v\"1",
                "timestamp": null,
            })
        );
    }

    #[test]
    fn skipping_and_dead_lettering_count_and_queue_the_letters() {
        let files = [
            RecordPolicy::DeadLetter("/a.jsonl".into()),
            RecordPolicy::DeadLetterTopic("b".into()),
        ];
        let counters = Arc::new(BadRecordCounters::default());
        let (tx, mut rx) = crate::job::in_flight::channel(4, 16);
        let mut recv = || futures::executor::block_on(std::future::poll_fn(|cx| rx.poll_recv(cx)));
        let mut letters = DeadLetters::new(tx, files.len());
        let letter = DeadLetter {
            operator: None,
            subtask: None,
            error: "not valid JSON",
            origin: None,
            key: None,
            value: b"{",
            timestamp: None,
        };
        let skip = BadRecordPolicy::new(&RecordPolicy::Skip, &files, counters.clone());
        let to_b = BadRecordPolicy::new(
            &RecordPolicy::DeadLetterTopic("b".into()),
            &files,
            counters.clone(),
        );
        assert!(!skip.fails() && !to_b.fails());
        skip.set_aside(&letter, &mut letters);
        to_b.set_aside(&letter, &mut letters);
        to_b.set_aside(&letter, &mut letters);
        assert_eq!(counters.skipped.load(Ordering::Relaxed), 1);
        assert_eq!(counters.dead_lettered.load(Ordering::Relaxed), 2);
        letters
            .barrier(Barrier::new(crate::ids::CheckpointId(1), false))
            .expect("send");
        match recv() {
            Some(Message::DeadLetters { file: 1, batch }) => assert_eq!(batch.len(), 2),
            other => panic!("expected the letters of file 1, got {other:?}"),
        }
        assert!(matches!(recv(), Some(Message::Barrier(_))));
    }
}
