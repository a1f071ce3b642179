//! [`KafkaSink`]: a job's output to a Kafka topic, exactly once or at least once.
//!
//! Exactly once without broker transactions: the output written between two barriers is
//! *staged* as one object in the checkpoint store when the later barrier arrives, before the
//! sink acknowledges it, so the checkpoint cannot complete without it. When the checkpoint
//! completes, the sink *publishes* it: each record goes out with a `weir-id` header naming
//! its lineage (job and input partition), checkpoint and place, and the object is deleted.
//! A run restored from checkpoint n publishes every staged object up to n that is still there;
//! the crash may have come in the middle of one, so it first reads back what the topic holds
//! since that object was staged (the topic's ends are recorded in it) and skips the ids
//! already there. Staged objects after n belong to checkpoints that never completed, and are
//! deleted. Only this sink writes and deletes in its staging folder.
//!
//! Consumers see each record once, with no need for `read_committed`. A consumer that reads
//! while a restored run republishes may see a checkpoint's records in two pieces, never twice.
//!
//! With `transactions = true`, each checkpoint's output is published in one broker
//! transaction, under a `transactional.id` named by the lineage and output
//! (`weir/<job>/<partition>/<output>`), the same in whichever process runs the partition.
//! A run's recovery initialises the transactions first, which aborts whatever the last owner
//! left open and fences it: a run that lost its partition without hearing it can no longer
//! commit, at the broker, whatever the owner token said when it looked. `read_committed`
//! consumers then see a checkpoint's output all at once or not at all. The staging and the
//! read-back stay as they are: the staged object is what survives a crash between the
//! checkpoint and the commit.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::runtime::Handle;

use super::settings::{ClientLog, Guarantee, KafkaSinkSpec, client_config};
use super::source::kafka_error;
use crate::checkpoint::CheckpointStore;
use crate::connectors::{ConnectorError, Sink, SinkPosition, SinkRestore};
use crate::ids::CheckpointId;
use crate::record::RecordBatch;

/// The header that names each record the exactly-once mode publishes.
pub(crate) const ID_HEADER: &str = "weir-id";

/// How long a flush may wait for the broker to acknowledge what was sent.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// First bytes of a staged-output object.
const STAGED_MAGIC: &[u8; 8] = b"WEIRKSO1";

/// Remembers the first failed delivery, so the next flush fails with it.
#[derive(Default)]
pub(crate) struct DeliveryErrors(Mutex<Option<String>>);

impl ClientContext for DeliveryErrors {}

impl ProducerContext for DeliveryErrors {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = result
            && let Ok(mut first) = self.0.lock()
        {
            first.get_or_insert_with(|| error.to_string());
        }
    }
}

/// Writes records to a topic: key, value and timestamp as the record has them.
pub struct KafkaSink {
    producer: BaseProducer<DeliveryErrors>,
    spec: KafkaSinkSpec,
    /// Names this sink's output in `weir-id` headers: the job and its input partition.
    lineage: String,
    /// `None`: at least once.
    staging: Option<Staging>,
}

/// The exactly-once mode's state.
struct Staging {
    store: CheckpointStore,
    runtime: Handle,
    /// Records written since the last stage, encoded.
    current: Vec<u8>,
    current_count: u32,
    /// Staged and not yet published, by checkpoint: the object's bytes.
    staged: BTreeMap<CheckpointId, Vec<u8>>,
    /// This run's claim on the output, written at recovery to the folder's owner object; a
    /// run that finds another claim there was taken over, and stops.
    token: String,
    /// Which output of the job this is, naming its staging folder
    /// (`CheckpointStore::staging_folder`).
    output: String,
}

impl KafkaSink {
    /// The staging folder of the job's sink (`CheckpointStore::staging_folder`).
    pub const JOB_SINK: &'static str = "sink";

    /// A sink for `spec`; `lineage` names its output. Exactly once needs `store`, the
    /// checkpoint store (of the input partition) where output is staged, in the folder
    /// `output` names ([`KafkaSink::JOB_SINK`], or a dead-letter topic's).
    pub fn new(
        spec: &KafkaSinkSpec,
        lineage: String,
        store: Option<CheckpointStore>,
        output: &str,
    ) -> Result<Self, ConnectorError> {
        let transactional_id = format!("weir/{lineage}/{output}");
        let mut ours = vec![
            ("enable.idempotence", "true"),
            ("partitioner", "murmur2_random"),
            ("linger.ms", "5"),
        ];
        if spec.transactions {
            ours.push(("transactional.id", &transactional_id));
        }
        let producer: BaseProducer<DeliveryErrors> = client_config(
            &spec.brokers,
            spec.connect_timeout(),
            &ours,
            &spec.properties,
        )
        .create_with_context(DeliveryErrors::default())
        .map_err(|e| kafka_error(&spec.brokers, format!("cannot create a producer: {e}")))?;
        let staging = match spec.guarantee {
            Guarantee::AtLeastOnce => None,
            Guarantee::ExactlyOnce => {
                let store = store.ok_or_else(|| {
                    kafka_error(
                        &spec.brokers,
                        "guarantee = \"exactly-once\" stages output in the checkpoint store: \
                         add a [checkpoints] section"
                            .into(),
                    )
                })?;
                let runtime = Handle::try_current().map_err(|_| {
                    kafka_error(&spec.brokers, "the sink needs a tokio runtime".into())
                })?;
                Some(Staging {
                    store,
                    runtime,
                    current: Vec::new(),
                    current_count: 0,
                    staged: BTreeMap::new(),
                    token: crate::ids::new_run_id(),
                    output: output.to_owned(),
                })
            }
        };
        Ok(Self {
            producer,
            spec: spec.clone(),
            lineage,
            staging,
        })
    }

    fn error(&self, message: String) -> ConnectorError {
        kafka_error(&self.spec.brokers, message)
    }

    /// Sends one record, waiting while the producer's queue is full.
    fn send(
        &self,
        key: Option<&[u8]>,
        value: &[u8],
        timestamp: Option<i64>,
        id: Option<&str>,
    ) -> Result<(), ConnectorError> {
        let mut record: BaseRecord<'_, [u8], [u8]> =
            BaseRecord::to(&self.spec.topic).payload(value);
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(t) = timestamp {
            record = record.timestamp(t);
        }
        if let Some(id) = id {
            record = record.headers(OwnedHeaders::new().insert(Header {
                key: ID_HEADER,
                value: Some(id),
            }));
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    self.producer.poll(Duration::from_millis(20));
                    record = back;
                }
                Err((e, _)) => {
                    return Err(
                        self.error(format!("cannot send to topic `{}`: {e}", self.spec.topic))
                    );
                }
            }
        }
    }

    /// A failed transaction step: another run fenced this one (it owns the partition now), or
    /// the broker failed it. An open transaction is aborted on the way out, if it can be.
    fn transaction_error(&self, step: &str, error: KafkaError) -> ConnectorError {
        let fenced = matches!(
            error.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::Fenced
                    | RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
            )
        );
        if fenced {
            return ConnectorError::TakenOver {
                what: format!(
                    "the output to topic `{}` (the broker fenced this run's transactions)",
                    self.spec.topic
                ),
            };
        }
        if let KafkaError::Transaction(e) = &error
            && e.txn_requires_abort()
            && let Err(abort) = self.producer.abort_transaction(FLUSH_TIMEOUT)
        {
            tracing::warn!(error = %abort, "cannot abort the transaction");
        }
        self.error(format!(
            "cannot {step} a transaction on topic `{}`: {error}",
            self.spec.topic
        ))
    }

    /// Waits until the broker has everything sent so far, or fails with the first error.
    fn flush(&self) -> Result<(), ConnectorError> {
        self.producer
            .flush(FLUSH_TIMEOUT)
            .map_err(|e| self.error(format!("flushing to topic `{}`: {e}", self.spec.topic)))?;
        let failed = self
            .producer
            .context()
            .0
            .lock()
            .ok()
            .and_then(|mut e| e.take());
        match failed {
            Some(e) => Err(self.error(format!(
                "delivery to topic `{}` failed: {e}",
                self.spec.topic
            ))),
            None => Ok(()),
        }
    }

    /// The topic's current ends, per partition.
    fn ends(&self) -> Result<Vec<(i32, i64)>, ConnectorError> {
        let topic = &self.spec.topic;
        let timeout = self.spec.connect_timeout();
        let metadata = self
            .producer
            .client()
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| self.error(format!("cannot read topic `{topic}`: {e}")))?;
        let partitions = metadata
            .topics()
            .first()
            .map(|t| t.partitions().iter().map(|p| p.id()).collect::<Vec<_>>())
            .unwrap_or_default();
        partitions
            .into_iter()
            .map(|p| {
                let (_, high) = self
                    .producer
                    .client()
                    .fetch_watermarks(topic, p, timeout)
                    .map_err(|e| {
                        self.error(format!("cannot read the end of `{topic}` {p}: {e}"))
                    })?;
                Ok((p, high))
            })
            .collect()
    }

    /// Publishes a staged object; `recovering`: first skip what the topic already holds.
    fn publish(
        &self,
        checkpoint: CheckpointId,
        object: &[u8],
        recovering: bool,
    ) -> Result<(), ConnectorError> {
        let staged = StagedOutput::decode(object)
            .map_err(|e| self.error(format!("staged output of checkpoint {checkpoint}: {e}")))?;
        let prefix = format!("{}/{}/", self.lineage, checkpoint.0);
        let present = if recovering {
            self.published_ids(&prefix, &staged.ends)?
        } else {
            HashSet::new()
        };
        if self.spec.transactions {
            self.producer
                .begin_transaction()
                .map_err(|e| self.transaction_error("begin", e))?;
        }
        let mut id = String::new();
        for (seq, record) in staged.records.iter().enumerate() {
            if present.contains(&(seq as u32)) {
                continue;
            }
            id.clear();
            id.push_str(&prefix);
            id.push_str(&seq.to_string());
            self.send(record.key, record.value, record.timestamp, Some(&id))?;
        }
        if self.spec.transactions {
            // Flushes, then commits: every record of the checkpoint becomes visible at once.
            self.producer
                .commit_transaction(FLUSH_TIMEOUT)
                .map_err(|e| self.transaction_error("commit", e))?;
        }
        self.flush()?;
        if recovering && !present.is_empty() {
            tracing::info!(
                checkpoint = checkpoint.0,
                skipped = present.len(),
                total = staged.records.len(),
                "republished staged output, skipping records the topic already held"
            );
        }
        Ok(())
    }

    /// The places (after `prefix`) of the ids the topic holds after `ends`.
    fn published_ids(
        &self,
        prefix: &str,
        ends: &[(i32, i64)],
    ) -> Result<HashSet<u32>, ConnectorError> {
        let topic = &self.spec.topic;
        let reader: BaseConsumer<ClientLog> = client_config(
            &self.spec.brokers,
            self.spec.connect_timeout(),
            &[
                ("enable.partition.eof", "true"),
                ("enable.auto.commit", "false"),
                // What an aborted transaction left is not published.
                ("isolation.level", "read_committed"),
                // librdkafka assigns only with a group id; this reader never joins or commits.
                ("group.id", "weir-sink-read-back"),
            ],
            &self.spec.properties,
        )
        .create_with_context(ClientLog)
        .map_err(|e| self.error(format!("cannot create a consumer: {e}")))?;
        let now = self.ends()?;
        let mut assignment = TopicPartitionList::new();
        let mut open = HashSet::new();
        for &(partition, high) in &now {
            let from = ends
                .iter()
                .find(|(p, _)| *p == partition)
                .map_or(0, |&(_, at)| at);
            if from < high {
                assignment
                    .add_partition_offset(topic, partition, Offset::Offset(from))
                    .map_err(|e| self.error(e.to_string()))?;
                open.insert(partition);
            }
        }
        let mut found = HashSet::new();
        if open.is_empty() {
            return Ok(found);
        }
        reader
            .assign(&assignment)
            .map_err(|e| self.error(format!("cannot read back topic `{topic}`: {e}")))?;
        let deadline = Instant::now() + FLUSH_TIMEOUT;
        while !open.is_empty() {
            if Instant::now() > deadline {
                return Err(self.error(format!(
                    "reading back topic `{topic}` took over {FLUSH_TIMEOUT:?}"
                )));
            }
            match reader.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    open.remove(&p);
                }
                Some(Err(e)) => {
                    return Err(self.error(format!("reading back topic `{topic}`: {e}")));
                }
                Some(Ok(message)) => {
                    let id = message.headers().and_then(|headers| {
                        headers
                            .iter()
                            .find(|h| h.key == ID_HEADER)
                            .and_then(|h| h.value)
                    });
                    if let Some(place) = id
                        .and_then(|id| id.strip_prefix(prefix.as_bytes()))
                        .and_then(|place| std::str::from_utf8(place).ok())
                        .and_then(|place| place.parse::<u32>().ok())
                    {
                        found.insert(place);
                    }
                }
            }
        }
        Ok(found)
    }
}

impl Staging {
    /// Claims the output for this run.
    fn claim(&self) -> Result<(), object_store::Error> {
        let path = self.store.owner_path(&self.output);
        let payload = object_store::PutPayload::from(self.token.clone().into_bytes());
        self.runtime
            .block_on(self.store.object_store().put(&path, payload))
            .map(|_| ())
    }

    /// Fails if another run claimed the output since this one did: staging or publishing
    /// now would compete with the new owner.
    fn check_claim(&self, brokers: &str) -> Result<(), ConnectorError> {
        let path = self.store.owner_path(&self.output);
        let store = self.store.object_store().clone();
        let owner = self
            .runtime
            .block_on(async { store.get(&path).await?.bytes().await })
            .map_err(|e| kafka_error(brokers, format!("cannot read {path}: {e}")))?;
        if owner.as_ref() == self.token.as_bytes() {
            Ok(())
        } else {
            Err(ConnectorError::TakenOver {
                what: format!(
                    "the output of {}",
                    self.store.relative(&path).trim_end_matches("/owner")
                ),
            })
        }
    }

    async fn staged_objects(
        &self,
    ) -> Result<Vec<(CheckpointId, object_store::path::Path)>, object_store::Error> {
        let folder = self.store.staging_folder(&self.output);
        let listed: Vec<_> = self
            .store
            .object_store()
            .list(Some(&folder))
            .try_collect()
            .await?;
        let mut found: Vec<_> = listed
            .into_iter()
            .filter_map(|meta| {
                let name = meta.location.filename()?;
                let id = name
                    .strip_prefix("chk-")?
                    .strip_suffix(".out")?
                    .parse()
                    .ok()?;
                Some((CheckpointId(id), meta.location))
            })
            .collect();
        found.sort();
        Ok(found)
    }
}

impl Sink for KafkaSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        match &mut self.staging {
            Some(staging) => {
                for record in batch.iter() {
                    encode_record(
                        &mut staging.current,
                        record.key,
                        record.value,
                        record.timestamp,
                    );
                    staging.current_count += 1;
                }
                Ok(())
            }
            None => {
                for record in batch.iter() {
                    self.send(record.key, record.value, record.timestamp, None)?;
                }
                self.producer.poll(Duration::ZERO);
                Ok(())
            }
        }
    }

    fn stage(&mut self, checkpoint: CheckpointId) -> Result<Option<SinkPosition>, ConnectorError> {
        if self.staging.as_ref().is_none_or(|s| s.current_count == 0) {
            if self.staging.is_none() {
                self.flush()?;
            }
            return Ok(None);
        }
        let ends = self.ends()?;
        let brokers = self.spec.brokers.clone();
        let Some(staging) = &mut self.staging else {
            return Ok(None);
        };
        staging.check_claim(&brokers)?;
        let mut object = Vec::with_capacity(staging.current.len() + 64);
        object.extend_from_slice(STAGED_MAGIC);
        object.put_u32_le(ends.len() as u32);
        for (partition, end) in &ends {
            object.put_i32_le(*partition);
            object.put_i64_le(*end);
        }
        object.put_u32_le(staging.current_count);
        object.extend_from_slice(&staging.current);
        let checksum = xxhash_rust::xxh3::xxh3_64(&object);
        object.put_u64_le(checksum);
        let path = staging.store.staging_path(&staging.output, checkpoint);
        let store = staging.store.object_store().clone();
        let payload = object_store::PutPayload::from(object.clone());
        staging
            .runtime
            .block_on(store.put(&path, payload))
            .map_err(|e| kafka_error(&brokers, format!("cannot stage output at {path}: {e}")))?;
        let records = staging.current_count;
        staging.staged.insert(checkpoint, object);
        staging.current.clear();
        staging.current_count = 0;
        Ok(Some(serde_json::json!({ "staged_records": records })))
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let Some(staging) = &mut self.staging else {
            return Ok(());
        };
        let later = staging.staged.split_off(&CheckpointId(checkpoint.0 + 1));
        let due = std::mem::replace(&mut staging.staged, later);
        if !due.is_empty() {
            staging.check_claim(&self.spec.brokers)?;
        }
        // Staged by this run and not yet published: nothing to read back (a publish that
        // fails half-way fails the run, and the restored run's recovery reads back). Reading
        // back here would read every pipeline's output since the object was staged, at
        // every checkpoint of every partition.
        for (id, object) in due {
            self.publish(id, &object, false)?;
            self.delete_staged(id)?;
        }
        Ok(())
    }

    fn recover(&mut self, restored: Option<SinkRestore<'_>>) -> Result<(), ConnectorError> {
        let Some(staging) = &self.staging else {
            return Ok(());
        };
        let brokers = self.spec.brokers.clone();
        staging
            .claim()
            .map_err(|e| kafka_error(&brokers, format!("cannot claim the output: {e}")))?;
        if self.spec.transactions {
            // Aborts what the last owner left open, and fences it.
            self.producer
                .init_transactions(self.spec.connect_timeout())
                .map_err(|e| self.transaction_error("start", e))?;
        }
        let listed = staging
            .runtime
            .block_on(staging.staged_objects())
            .map_err(|e| kafka_error(&brokers, format!("cannot list staged output: {e}")))?;
        let restored = restored.map(|r| r.checkpoint);
        for (id, path) in listed {
            if restored.is_some_and(|r| id <= r) {
                let store = staging.store.object_store().clone();
                let object = staging
                    .runtime
                    .block_on(async { store.get(&path).await?.bytes().await })
                    .map_err(|e| kafka_error(&brokers, format!("cannot read {path}: {e}")))?;
                self.publish(id, &object, true)?;
            }
            // Published now, or of a checkpoint that never completed.
            self.delete_staged(id)?;
        }
        Ok(())
    }
}

impl KafkaSink {
    fn delete_staged(&self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let Some(staging) = &self.staging else {
            return Ok(());
        };
        let path = staging.store.staging_path(&staging.output, checkpoint);
        staging
            .runtime
            .block_on(crate::checkpoint::checkpoint_store::delete_if_present(
                staging.store.object_store().as_ref(),
                &path,
            ))
            .map_err(|e| self.error(format!("cannot delete staged output: {e}")))
    }
}

fn encode_record(out: &mut Vec<u8>, key: Option<&[u8]>, value: &[u8], timestamp: Option<i64>) {
    match key {
        Some(key) => {
            out.put_u32_le(key.len() as u32);
            out.extend_from_slice(key);
        }
        None => out.put_u32_le(u32::MAX),
    }
    out.put_u32_le(value.len() as u32);
    out.extend_from_slice(value);
    out.put_i64_le(timestamp.unwrap_or(i64::MIN));
}

/// One staged record, borrowed from its object.
struct StagedRecord<'a> {
    key: Option<&'a [u8]>,
    value: &'a [u8],
    timestamp: Option<i64>,
}

/// A staged-output object: the topic's ends when it was staged, then the records.
struct StagedOutput<'a> {
    ends: Vec<(i32, i64)>,
    records: Vec<StagedRecord<'a>>,
}

impl<'a> StagedOutput<'a> {
    fn decode(object: &'a [u8]) -> Result<Self, String> {
        let short = || "cut short".to_owned();
        let body_len = object.len().checked_sub(8).ok_or_else(short)?;
        let (body, mut sum) = object.split_at(body_len);
        if xxhash_rust::xxh3::xxh3_64(body) != sum.get_u64_le() {
            return Err("checksum mismatch: the object is damaged".into());
        }
        let rest = body
            .strip_prefix(STAGED_MAGIC)
            .ok_or("not a staged-output object")?;
        let mut cursor = rest;
        let take = |cursor: &mut &'a [u8], n: usize| -> Result<&'a [u8], String> {
            if cursor.len() < n {
                return Err(short());
            }
            let (head, tail) = cursor.split_at(n);
            *cursor = tail;
            Ok(head)
        };
        let count = u32::from_le_bytes(take(&mut cursor, 4)?.try_into().map_err(|_| short())?);
        let mut ends = Vec::new();
        for _ in 0..count {
            let mut entry = take(&mut cursor, 12)?;
            ends.push((entry.get_i32_le(), entry.get_i64_le()));
        }
        let records_count = take(&mut cursor, 4)?.get_u32_le();
        let mut records = Vec::with_capacity(records_count as usize);
        for _ in 0..records_count {
            let key_len = take(&mut cursor, 4)?.get_u32_le();
            let key = match key_len {
                u32::MAX => None,
                n => Some(take(&mut cursor, n as usize)?),
            };
            let value_len = take(&mut cursor, 4)?.get_u32_le();
            let value = take(&mut cursor, value_len as usize)?;
            let timestamp = take(&mut cursor, 8)?.get_i64_le();
            records.push(StagedRecord {
                key,
                value,
                timestamp: (timestamp != i64::MIN).then_some(timestamp),
            });
        }
        if !cursor.is_empty() {
            return Err("bytes after the last record".into());
        }
        Ok(Self { ends, records })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_output_round_trips_and_damage_is_caught() {
        let mut records = Vec::new();
        encode_record(&mut records, Some(b"k"), b"v1", Some(7));
        encode_record(&mut records, None, b"", None);
        let mut object = STAGED_MAGIC.to_vec();
        object.put_u32_le(1);
        object.put_i32_le(3);
        object.put_i64_le(42);
        object.put_u32_le(2);
        object.extend_from_slice(&records);
        let sum = xxhash_rust::xxh3::xxh3_64(&object);
        object.put_u64_le(sum);
        let staged = StagedOutput::decode(&object).expect("decodes");
        assert_eq!(staged.ends, vec![(3, 42)]);
        assert_eq!(staged.records.len(), 2);
        assert_eq!(staged.records[0].key, Some(&b"k"[..]));
        assert_eq!(staged.records[0].value, b"v1");
        assert_eq!(staged.records[0].timestamp, Some(7));
        assert_eq!(staged.records[1].key, None);
        assert_eq!(staged.records[1].timestamp, None);
        let mut damaged = object.clone();
        damaged[10] ^= 1;
        assert!(StagedOutput::decode(&damaged).is_err());
        assert!(StagedOutput::decode(&object[..5]).is_err());
    }
}
