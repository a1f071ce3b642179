//! [`Router`]: splits one task's output among the subtasks of the next stage.
//!
//! A keyed edge sends each record to the subtask that owns its key group, and computes the
//! record's key hash once, here; the hash travels with the record so that the receiving
//! subtask never hashes the key again. An edge without key spreads whole batches round robin.
//! When a keyed edge leads to a single subtask, the batch moves on unchanged with its hash
//! column added: no record is copied.

use super::spec::KeyBy;
use crate::connectors::lines::json_key;
use crate::partition::{KeyGroups, KeyHash, hash_key};
use crate::record::{RecordBatch, RecordRef};

/// A record could not be routed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteError {
    #[error(
        "`{to}` partitions its input by record key (key_by = \"key\"), but {from} emitted a record without a key"
    )]
    MissingKey { from: String, to: String },
    #[error(
        "`{to}` partitions its input by the JSON pointer {pointer:?}, but a record from {from} {problem}"
    )]
    BadJsonKey {
        from: String,
        to: String,
        pointer: String,
        problem: String,
    },
}

/// The routing of one producer (source or subtask) to the next stage.
pub struct Router {
    key_by: Option<KeyBy>,
    key_groups: KeyGroups,
    targets: u32,
    batch_size: usize,
    /// Per target, the batch being filled (keyed edges).
    builders: Vec<RecordBatch>,
    /// Batches ready to send, with their target.
    ready: Vec<(usize, RecordBatch)>,
    next_target: usize,
    /// Names for messages.
    from: String,
    to: String,
    key: Vec<u8>,
}

impl Router {
    pub fn new(
        key_by: Option<KeyBy>,
        key_groups: KeyGroups,
        targets: u32,
        batch_size: usize,
        from: String,
        to: String,
    ) -> Self {
        Self {
            key_by,
            key_groups,
            targets: targets.max(1),
            batch_size,
            builders: (0..targets).map(|_| RecordBatch::new()).collect(),
            ready: Vec::new(),
            next_target: 0,
            from,
            to,
            key: Vec::new(),
        }
    }

    /// Routes a batch; afterwards [`Router::drain`] yields what is ready to send.
    pub fn route(&mut self, mut batch: RecordBatch) -> Result<(), RouteError> {
        if batch.is_empty() {
            return Ok(());
        }
        match self.key_by.clone() {
            None => {
                let target = self.next_target;
                self.next_target = (self.next_target + 1) % self.targets as usize;
                self.ready.push((target, batch));
            }
            Some(KeyBy::RecordKey) if self.targets == 1 => {
                let hashes = self.record_key_hashes(&batch)?;
                batch.set_hashes(hashes);
                self.ready.push((0, batch));
            }
            Some(KeyBy::RecordKey) => {
                for record in batch.iter() {
                    let key = record.key.ok_or_else(|| self.missing_key())?;
                    let hash = hash_key(key);
                    self.push(record, hash);
                }
                self.cut_all();
            }
            Some(KeyBy::JsonPointer(pointer)) => {
                for record in batch.iter() {
                    self.json_key(&pointer, record.value)?;
                    let hash = hash_key(&self.key);
                    let key = std::mem::take(&mut self.key);
                    self.push(
                        RecordRef {
                            key: Some(&key),
                            ..record
                        },
                        hash,
                    );
                    self.key = key;
                }
                self.cut_all();
            }
        }
        Ok(())
    }

    /// Batches ready to send, with their target subtask.
    pub fn drain(&mut self) -> std::vec::Drain<'_, (usize, RecordBatch)> {
        self.ready.drain(..)
    }

    pub fn targets(&self) -> u32 {
        self.targets
    }

    fn missing_key(&self) -> RouteError {
        RouteError::MissingKey {
            from: self.from.clone(),
            to: self.to.clone(),
        }
    }

    fn record_key_hashes(&self, batch: &RecordBatch) -> Result<Vec<KeyHash>, RouteError> {
        batch
            .iter()
            .map(|r| r.key.map(hash_key).ok_or_else(|| self.missing_key()))
            .collect()
    }

    fn json_key(&mut self, pointer: &str, value: &[u8]) -> Result<(), RouteError> {
        let bad = |problem: String| RouteError::BadJsonKey {
            from: self.from.clone(),
            to: self.to.clone(),
            pointer: pointer.to_owned(),
            problem,
        };
        let json: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| bad(format!("is not valid JSON ({e})")))?;
        let key = json
            .pointer(pointer)
            .ok_or_else(|| bad("has no value there".to_owned()))?;
        json_key(key, &mut self.key);
        Ok(())
    }

    #[inline]
    fn push(&mut self, record: RecordRef<'_>, hash: KeyHash) {
        let group = self.key_groups.of(hash);
        let target = self.key_groups.subtask_of(group, self.targets).0 as usize;
        let builder = &mut self.builders[target];
        builder.push_hashed(record, hash);
        if builder.len() >= self.batch_size {
            let full = std::mem::take(builder);
            self.ready.push((target, full));
        }
    }

    /// Sends partly filled batches on, so a record never waits for later input.
    fn cut_all(&mut self) {
        for (target, builder) in self.builders.iter_mut().enumerate() {
            if !builder.is_empty() {
                self.ready.push((target, std::mem::take(builder)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubtaskIndex;

    #[test]
    fn keyed_routing_sends_each_key_to_the_owner_of_its_group() {
        let groups = KeyGroups::new(128);
        let mut router = Router::new(
            Some(KeyBy::RecordKey),
            groups,
            3,
            4,
            "src".into(),
            "op".into(),
        );
        let mut batch = RecordBatch::new();
        let keys: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
        for k in &keys {
            batch.push(RecordRef::keyed(k.as_bytes(), b"v"));
        }
        router.route(batch).expect("route");
        let mut seen = 0;
        for (target, out) in router.drain() {
            assert!(out.len() <= 4);
            for (i, r) in out.iter().enumerate() {
                let key = r.key.expect("keyed");
                assert_eq!(out.hashes()[i], hash_key(key));
                let owner = groups.subtask_of(groups.of(hash_key(key)), 3);
                assert_eq!(owner, SubtaskIndex(target as u32));
                seen += 1;
            }
        }
        assert_eq!(seen, 50);
    }

    #[test]
    fn a_keyless_record_on_a_keyed_edge_is_an_error_naming_both_ends() {
        let mut router = Router::new(
            Some(KeyBy::RecordKey),
            KeyGroups::default(),
            2,
            8,
            "operator `a` subtask 0".into(),
            "b".into(),
        );
        let mut batch = RecordBatch::new();
        batch.push(RecordRef::unkeyed(b"v"));
        let err = router.route(batch).expect_err("keyless").to_string();
        assert!(
            err.contains("`b` partitions its input by record key")
                && err.contains("operator `a` subtask 0"),
            "{err}"
        );
    }

    #[test]
    fn json_pointer_keys_records() {
        let mut router = Router::new(
            Some(KeyBy::JsonPointer("/u".into())),
            KeyGroups::default(),
            2,
            8,
            "s".into(),
            "t".into(),
        );
        let mut batch = RecordBatch::new();
        batch.push(RecordRef::unkeyed(br#"{"u":"ann"}"#));
        router.route(batch).expect("route");
        let (_, out) = router.drain().next().expect("one batch");
        assert_eq!(out.get(0).key, Some(&b"ann"[..]));
    }
}
