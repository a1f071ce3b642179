//! [`Router`]: splits one task's output among the subtasks of the next stage.
//!
//! A keyed edge sends each record to the subtask that owns its key group, and computes the
//! record's key hash once, here; the hash travels with the record so that the receiving
//! subtask never hashes the key again. An edge without key spreads whole batches round robin.
//! When a keyed edge leads to a single subtask, the batch moves on unchanged with its hash
//! column added: no record is copied.
//!
//! A record the edge cannot key (no key, no value at the JSON pointer) fails the routing, or,
//! for a router made to set bad records aside ([`Router::setting_bad_records_aside`]), is
//! left out and kept for [`Router::drain_rejected`].

use super::bad_records::describe_record;
use super::spec::KeyBy;
use crate::connectors::SourceOrigin;
use crate::connectors::json_records::json_key;
use crate::partition::{KeyGroups, KeyHash, hash_key};
use crate::record::{RecordBatch, RecordRef};

/// A record could not be routed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteError {
    #[error(
        "`{to}` partitions its input by record key (key_by = \"key\"), but {from} emitted a record without a key{}",
        suffix(record)
    )]
    MissingKey {
        from: String,
        to: String,
        /// The record, described (empty where the record goes along, as in a dead letter).
        record: String,
    },
    #[error(
        "`{to}` partitions its input by the JSON pointer {pointer:?}, but a record from {from} {problem}{}",
        suffix(record)
    )]
    BadJsonKey {
        from: String,
        to: String,
        pointer: String,
        problem: String,
        /// The record, described (empty where the record goes along, as in a dead letter).
        record: String,
    },
}

fn suffix(record: &str) -> String {
    if record.is_empty() {
        String::new()
    } else {
        format!(": {record}")
    }
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
    /// Records that could not be keyed, set aside; `None`: they fail the routing.
    rejected: Option<Vec<Unroutable>>,
    /// Names the origin of records from the source, in errors.
    origin: SourceOrigin,
}

/// A record a keyed edge could not key, set aside.
#[derive(Debug, PartialEq, Eq)]
pub struct Unroutable {
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub timestamp: Option<i64>,
    /// Its origin in the source's input, if the batch came from the source.
    pub origin: Option<u64>,
    pub error: RouteError,
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
            builders: (0..targets.max(1)).map(|_| RecordBatch::new()).collect(),
            ready: Vec::new(),
            next_target: 0,
            from,
            to,
            key: Vec::new(),
            rejected: None,
            origin: SourceOrigin::Generator,
        }
    }

    /// Names the origins of the source's records with `origin` in errors.
    pub fn naming_origins(mut self, origin: SourceOrigin) -> Self {
        self.origin = origin;
        self
    }

    /// Sets records that cannot be keyed aside instead of failing.
    pub fn setting_bad_records_aside(mut self) -> Self {
        self.rejected = Some(Vec::new());
        self
    }

    /// Moves the records set aside since the last call into `into`.
    pub fn drain_rejected(&mut self, into: &mut Vec<Unroutable>) {
        if let Some(rejected) = &mut self.rejected {
            into.append(rejected);
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
            Some(KeyBy::RecordKey)
                if self.targets == 1 && batch.iter().all(|r| r.key.is_some()) =>
            {
                let hashes = batch.iter().filter_map(|r| r.key.map(hash_key)).collect();
                batch.set_hashes(hashes);
                self.ready.push((0, batch));
            }
            Some(KeyBy::RecordKey) => {
                for (i, record) in batch.iter().enumerate() {
                    match record.key {
                        Some(key) => self.push(&batch, i, record, hash_key(key)),
                        None => self.reject(&batch, i, self.missing_key())?,
                    }
                }
                self.cut_all();
            }
            Some(KeyBy::JsonPointer(pointer)) => {
                for (i, record) in batch.iter().enumerate() {
                    if let Err(e) = self.json_key(&pointer, record.value) {
                        self.reject(&batch, i, e)?;
                        continue;
                    }
                    let hash = hash_key(&self.key);
                    let key = std::mem::take(&mut self.key);
                    self.push(
                        &batch,
                        i,
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
            record: String::new(),
        }
    }

    /// Record `index` of `batch` cannot be keyed: `error` fails the routing, naming the
    /// record, unless bad records are set aside.
    fn reject(
        &mut self,
        batch: &RecordBatch,
        index: usize,
        mut error: RouteError,
    ) -> Result<(), RouteError> {
        let record = batch.get(index);
        let Some(rejected) = &mut self.rejected else {
            let origin = batch.origin(index).map(|o| self.origin.describe(o));
            let described = describe_record(record, origin.as_deref());
            match &mut error {
                RouteError::MissingKey { record, .. } | RouteError::BadJsonKey { record, .. } => {
                    *record = described;
                }
            }
            return Err(error);
        };
        rejected.push(Unroutable {
            key: record.key.map(<[u8]>::to_vec),
            value: record.value.to_vec(),
            timestamp: record.timestamp,
            origin: batch.origin(index),
            error,
        });
        Ok(())
    }

    fn json_key(&mut self, pointer: &str, value: &[u8]) -> Result<(), RouteError> {
        let bad = |problem: String| RouteError::BadJsonKey {
            record: String::new(),
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

    /// Adds record `index` of `from`, as `record` (its key may be new), to its target's batch.
    #[inline]
    fn push(&mut self, from: &RecordBatch, index: usize, record: RecordRef<'_>, hash: KeyHash) {
        let group = self.key_groups.of(hash);
        let target = self.key_groups.subtask_of(group, self.targets).0 as usize;
        let builder = &mut self.builders[target];
        builder.push_routed(from, index, record, hash);
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
    fn a_router_made_for_no_targets_routes_to_one() {
        let mut router = Router::new(
            Some(KeyBy::JsonPointer("/k".into())),
            KeyGroups::new(8),
            0,
            1,
            "src".into(),
            "op".into(),
        );
        let mut batch = RecordBatch::new();
        batch.push(RecordRef::unkeyed(br#"{"k": "a"}"#));
        router.route(batch).expect("route");
        let routed: Vec<usize> = router.drain().map(|(target, _)| target).collect();
        assert_eq!(routed, [0]);
    }

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
