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
//!
//! A sink that writes a repartition topic between two stages of a job (DESIGN.md §12.1)
//! picks each record's partition from the key the next stage groups by (from its key hash,
//! `KeyHash::topic_partition`, so every writer agrees), and adds to each
//! checkpoint's output a marker per partition when its watermark moved (`markers`).

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

use super::markers::{MARKER_HEADER, Marker};
use super::settings::{ClientLog, Guarantee, KafkaSinkSpec, RepartitionWrite, client_config};
use super::source::kafka_error;
use crate::checkpoint::CheckpointStore;
use crate::connectors::json_records::json_key;
use crate::connectors::{ConnectorError, Sink, SinkPosition, SinkRestore};
use crate::ids::CheckpointId;
use crate::partition::hash_key;
use crate::record::RecordBatch;
use crate::vocabulary::KeyBy;

/// The header that names each record the exactly-once mode publishes.
pub(crate) const ID_HEADER: &str = "weir-id";

/// How long a flush may wait for the broker to acknowledge what was sent.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// First bytes of a staged-output object: each record with its partition and kind.
const STAGED_MAGIC: &[u8; 8] = b"WEIRKSO2";

/// First bytes of a staged-output object of the first format (records only), which a run
/// may find staged by a run of an earlier version.
const STAGED_MAGIC_V1: &[u8; 8] = b"WEIRKSO1";

/// A staged entry's partition when the producer's partitioner picks it.
const ANY_PARTITION: i32 = -1;

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
    /// Into a repartition topic: where each record goes, and the markers to send.
    repartition: Option<Repartition>,
}

/// A repartition sink's own state.
struct Repartition {
    write: RepartitionWrite,
    /// The job's latest watermark, reached since the last markers were staged.
    watermark: Option<i64>,
    /// The watermark the last markers said.
    said: Option<i64>,
    /// Whether the job's input is idle now, and whether the last markers said it was.
    idle: bool,
    said_idle: bool,
}

impl Repartition {
    fn new(write: &RepartitionWrite) -> Self {
        Self {
            write: write.clone(),
            watermark: None,
            said: None,
            idle: false,
            said_idle: false,
        }
    }

    /// The partition of a record, and, keyed by a JSON pointer, the key it is sent with (the
    /// value there). A record the next stage cannot key goes to partition 0 as it is: the
    /// next stage's operator meets it as it would in one process, and applies its
    /// `on_bad_record`.
    fn place(&self, key: Option<&[u8]>, value: &[u8]) -> (i32, Option<Vec<u8>>) {
        let (key, new_key) = match &self.write.key_by {
            KeyBy::RecordKey => (key.map(<[u8]>::to_vec), None),
            KeyBy::JsonPointer(pointer) => {
                let found = serde_json::from_slice::<serde_json::Value>(value)
                    .ok()
                    .and_then(|json| {
                        json.pointer(pointer).map(|at| {
                            let mut key = Vec::new();
                            json_key(at, &mut key);
                            key
                        })
                    });
                (found.clone(), found)
            }
        };
        let partition = key.map_or(0, |key| {
            hash_key(&key).topic_partition(self.write.partitions) as i32
        });
        (partition, new_key)
    }

    /// The markers due at a checkpoint: one per partition if the watermark moved, or the
    /// input went idle or active since the last.
    fn due_markers(&mut self) -> Option<Vec<u8>> {
        let moved = self
            .watermark
            .is_some_and(|w| self.said.is_none_or(|said| said < w));
        // An idle writer that never had a watermark still says so: the next stage waits to
        // hear from every writer.
        let idle_changed = self.idle != self.said_idle;
        if !moved && !idle_changed {
            return None;
        }
        let watermark = self.watermark.unwrap_or(i64::MIN);
        self.said = Some(watermark);
        self.said_idle = self.idle;
        Some(
            Marker {
                writer: self.write.writer,
                writers: self.write.writers,
                watermark,
                idle: self.idle,
            }
            .encode(),
        )
    }
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
            repartition: spec.repartition.as_ref().map(Repartition::new),
            spec: spec.clone(),
            lineage,
            staging,
        })
    }

    fn error(&self, message: String) -> ConnectorError {
        kafka_error(&self.spec.brokers, message)
    }

    /// Sends one entry (a record, or a marker as its header), waiting while the producer's
    /// queue is full.
    fn send(&self, entry: &StagedRecord<'_>, id: Option<&str>) -> Result<(), ConnectorError> {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.spec.topic);
        if !entry.marker {
            record = record.payload(entry.value);
        }
        if entry.partition != ANY_PARTITION {
            record = record.partition(entry.partition);
        }
        if let Some(key) = entry.key {
            record = record.key(key);
        }
        if let Some(t) = entry.timestamp {
            record = record.timestamp(t);
        }
        if id.is_some() || entry.marker {
            let mut headers = OwnedHeaders::new();
            if let Some(id) = id {
                headers = headers.insert(Header {
                    key: ID_HEADER,
                    value: Some(id),
                });
            }
            if entry.marker {
                headers = headers.insert(Header {
                    key: MARKER_HEADER,
                    value: Some(entry.value),
                });
            }
            record = record.headers(headers);
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
            self.send(record, Some(&id))?;
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
        for record in batch.iter() {
            let (partition, new_key) = match &self.repartition {
                Some(repartition) => repartition.place(record.key, record.value),
                None => (ANY_PARTITION, None),
            };
            let entry = StagedRecord {
                marker: false,
                partition,
                key: new_key.as_deref().or(record.key),
                value: record.value,
                timestamp: record.timestamp,
            };
            match &mut self.staging {
                Some(staging) => {
                    encode_record(&mut staging.current, &entry);
                    staging.current_count += 1;
                }
                None => self.send(&entry, None)?,
            }
        }
        if self.staging.is_none() {
            self.producer.poll(Duration::ZERO);
        }
        Ok(())
    }

    fn watermark(&mut self, at: i64) {
        if let Some(repartition) = &mut self.repartition {
            repartition.watermark = Some(repartition.watermark.map_or(at, |w| w.max(at)));
            // A watermark comes from an active input.
            repartition.idle = false;
        }
    }

    fn idle(&mut self, idle: bool) {
        if let Some(repartition) = &mut self.repartition {
            repartition.idle = idle;
        }
    }

    fn stage(&mut self, checkpoint: CheckpointId) -> Result<Option<SinkPosition>, ConnectorError> {
        // The markers go after the checkpoint's records: none of those is later than they say.
        if let Some(repartition) = &mut self.repartition
            && let Some(marker) = repartition.due_markers()
        {
            for partition in 0..repartition.write.partitions as i32 {
                let entry = StagedRecord {
                    marker: true,
                    partition,
                    key: None,
                    value: &marker,
                    timestamp: None,
                };
                match &mut self.staging {
                    Some(staging) => {
                        encode_record(&mut staging.current, &entry);
                        staging.current_count += 1;
                    }
                    None => self.send(&entry, None)?,
                }
            }
        }
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

/// Appends one entry to a staged object's records: its kind (1: a marker), its partition,
/// then key, value and timestamp.
fn encode_record(out: &mut Vec<u8>, entry: &StagedRecord<'_>) {
    out.put_u8(u8::from(entry.marker));
    out.put_i32_le(entry.partition);
    match entry.key {
        Some(key) => {
            out.put_u32_le(key.len() as u32);
            out.extend_from_slice(key);
        }
        None => out.put_u32_le(u32::MAX),
    }
    out.put_u32_le(entry.value.len() as u32);
    out.extend_from_slice(entry.value);
    out.put_i64_le(entry.timestamp.unwrap_or(i64::MIN));
}

/// One staged entry, borrowed from its object: a record, or a marker (whose value goes out
/// as its header).
struct StagedRecord<'a> {
    marker: bool,
    /// [`ANY_PARTITION`]: the producer's partitioner picks.
    partition: i32,
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
        let (rest, placed) = match body.strip_prefix(STAGED_MAGIC) {
            Some(rest) => (rest, true),
            None => (
                body.strip_prefix(STAGED_MAGIC_V1)
                    .ok_or("not a staged-output object")?,
                false,
            ),
        };
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
            let (marker, partition) = if placed {
                let mut head = take(&mut cursor, 5)?;
                (head.get_u8() == 1, head.get_i32_le())
            } else {
                (false, ANY_PARTITION)
            };
            let key_len = take(&mut cursor, 4)?.get_u32_le();
            let key = match key_len {
                u32::MAX => None,
                n => Some(take(&mut cursor, n as usize)?),
            };
            let value_len = take(&mut cursor, 4)?.get_u32_le();
            let value = take(&mut cursor, value_len as usize)?;
            let timestamp = take(&mut cursor, 8)?.get_i64_le();
            records.push(StagedRecord {
                marker,
                partition,
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
        let record = |key, value, timestamp| StagedRecord {
            marker: false,
            partition: ANY_PARTITION,
            key,
            value,
            timestamp,
        };
        encode_record(&mut records, &record(Some(b"k"), b"v1", Some(7)));
        encode_record(&mut records, &record(None, b"", None));
        let marker = Marker::end(1, 2).encode();
        encode_record(
            &mut records,
            &StagedRecord {
                marker: true,
                partition: 4,
                ..record(None, &marker, None)
            },
        );
        let mut object = STAGED_MAGIC.to_vec();
        object.put_u32_le(1);
        object.put_i32_le(3);
        object.put_i64_le(42);
        object.put_u32_le(3);
        object.extend_from_slice(&records);
        let sum = xxhash_rust::xxh3::xxh3_64(&object);
        object.put_u64_le(sum);
        let staged = StagedOutput::decode(&object).expect("decodes");
        assert_eq!(staged.ends, vec![(3, 42)]);
        assert_eq!(staged.records.len(), 3);
        assert_eq!(staged.records[0].key, Some(&b"k"[..]));
        assert_eq!(staged.records[0].value, b"v1");
        assert_eq!(staged.records[0].timestamp, Some(7));
        assert_eq!(staged.records[1].key, None);
        assert_eq!(staged.records[1].timestamp, None);
        assert!(!staged.records[1].marker);
        assert_eq!(staged.records[1].partition, ANY_PARTITION);
        assert!(staged.records[2].marker);
        assert_eq!(staged.records[2].partition, 4);
        assert_eq!(
            Marker::decode(staged.records[2].value),
            Ok(Marker::end(1, 2))
        );
        let mut damaged = object.clone();
        damaged[10] ^= 1;
        assert!(StagedOutput::decode(&damaged).is_err());
        assert!(StagedOutput::decode(&object[..5]).is_err());
    }

    #[test]
    fn an_object_staged_by_an_earlier_version_still_decodes() {
        // The first format: no ends beyond the count, records without kind or partition.
        let mut object = STAGED_MAGIC_V1.to_vec();
        object.put_u32_le(0);
        object.put_u32_le(1);
        object.put_u32_le(1);
        object.extend_from_slice(b"k");
        object.put_u32_le(2);
        object.extend_from_slice(b"v1");
        object.put_i64_le(7);
        let sum = xxhash_rust::xxh3::xxh3_64(&object);
        object.put_u64_le(sum);
        let staged = StagedOutput::decode(&object).expect("decodes");
        assert_eq!(staged.records.len(), 1);
        let record = &staged.records[0];
        assert_eq!((record.key, record.value), (Some(&b"k"[..]), &b"v1"[..]));
        assert_eq!((record.marker, record.partition), (false, ANY_PARTITION));
    }

    fn repartition(key_by: KeyBy) -> Repartition {
        Repartition::new(&RepartitionWrite {
            key_by,
            partitions: 4,
            writers: 2,
            writer: 1,
        })
    }

    #[test]
    fn a_record_goes_to_the_partition_of_the_next_stages_key() {
        let by_key = repartition(KeyBy::RecordKey);
        let by_word = repartition(KeyBy::JsonPointer("/word".into()));
        let mut used = HashSet::new();
        for word in ["the", "a", "weir", "river", "stream", "of", "and"] {
            let expected = hash_key(word.as_bytes()).topic_partition(4) as i32;
            used.insert(expected);
            assert_eq!(by_key.place(Some(word.as_bytes()), b"x"), (expected, None));
            // Keyed by a JSON pointer: the value there decides, and becomes the key.
            let value = format!(r#"{{"word":"{word}","n":1}}"#);
            assert_eq!(
                by_word.place(Some(b"other"), value.as_bytes()),
                (expected, Some(word.as_bytes().to_vec()))
            );
        }
        assert!(used.len() > 1, "keys spread over the partitions: {used:?}");
        // What the next stage cannot key goes to partition 0 as it is, for its operator to
        // judge as it would in one process.
        assert_eq!(by_key.place(None, b"x"), (0, None));
        assert_eq!(by_word.place(Some(b"k"), b"not json"), (0, None));
        assert_eq!(by_word.place(Some(b"k"), br#"{"n":1}"#), (0, None));
    }

    #[test]
    fn markers_are_due_when_the_watermark_moved_and_say_who_wrote_them() {
        let mut repartition = repartition(KeyBy::RecordKey);
        assert_eq!(repartition.due_markers(), None, "no watermark yet");
        repartition.watermark = Some(10);
        let due = repartition.due_markers().expect("the watermark moved");
        assert_eq!(
            Marker::decode(&due),
            Ok(Marker {
                writer: 1,
                writers: 2,
                watermark: 10,
                idle: false,
            })
        );
        assert_eq!(repartition.due_markers(), None, "said already");
        // Going idle is said once, and so is being active again.
        repartition.idle = true;
        let idle = repartition.due_markers().expect("gone idle");
        assert!(Marker::decode(&idle).is_ok_and(|m| m.idle && m.watermark == 10));
        assert_eq!(repartition.due_markers(), None, "said already");
        repartition.idle = false;
        let active = repartition.due_markers().expect("active again");
        assert!(Marker::decode(&active).is_ok_and(|m| !m.idle));
        repartition.watermark = Some(i64::MAX);
        let end = repartition.due_markers().expect("the end");
        assert_eq!(Marker::decode(&end), Ok(Marker::end(1, 2)));
    }
}
