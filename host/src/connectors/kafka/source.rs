//! [`PartitionSource`]: one partition of a Kafka topic as a job's [`Source`].
//!
//! A job that reads Kafka runs one pipeline per partition it owns (`kafka::group`), so each
//! source reads exactly one partition, assigned by hand (no group membership of its own): the
//! offset to resume from comes from the partition's checkpoint, which is the truth on
//! restore. The offsets of completed checkpoints are then committed to the consumer group
//! too, through the process's group member, so that lag tools see progress.
//!
//! A partition of a repartition topic between two stages of a job also carries its writers'
//! markers (`markers`): they are read, not passed on as records; they give the partition's
//! watermark and, once every writer has ended, the end of its input.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use rdkafka::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::statistics::Statistics;

use super::markers::{MARKER_HEADER, Marker, Writers};
use super::settings::{
    KafkaSourceSpec, StartPosition, ValueFormat, client_config, log_client_error,
};
use crate::connectors::json_records::{Decoded, JsonDecoder};
use crate::connectors::{
    ConnectorError, Rejected, Source, SourceOrigin, SourcePosition, SourceProgress,
};
use crate::record::{RecordBatch, RecordRef};

/// How long one read waits for the first message before returning what it has (nothing), so
/// that the source task can inject barriers and watermarks while the topic is quiet.
const POLL_WAIT: Duration = Duration::from_millis(50);

/// Commits a partition's checkpointed offset to the consumer group (for lag tools only: the
/// checkpoint is what a restore reads).
pub(crate) type OffsetCommitter = Arc<dyn Fn(i32, i64) + Send + Sync>;

/// What a partition's pipeline shares with the process's group member: where to commit
/// offsets, and how far behind the partition's end it is.
pub struct PartitionLink {
    committer: Option<OffsetCommitter>,
    /// Deletes a repartition topic's records before an offset no retained checkpoint
    /// reads again (`crate::group`).
    purger: Option<OffsetCommitter>,
    /// The partition's end as last seen.
    high: AtomicI64,
    /// The offset of the next message the pipeline reads.
    next: AtomicI64,
}

impl PartitionLink {
    pub fn new(committer: Option<OffsetCommitter>) -> Self {
        Self {
            committer,
            purger: None,
            high: AtomicI64::new(-1),
            next: AtomicI64::new(-1),
        }
    }

    /// The same, deleting the records before offsets the pipeline releases.
    #[must_use]
    pub(crate) fn with_purger(mut self, purger: OffsetCommitter) -> Self {
        self.purger = Some(purger);
        self
    }

    /// The offset of the next message the pipeline reads, once it has started reading.
    pub fn next_offset(&self) -> Option<i64> {
        Some(self.next.load(Ordering::Relaxed)).filter(|n| *n >= 0)
    }

    /// Messages in the partition not yet read (0 before the pipeline starts reading).
    pub fn lag(&self) -> i64 {
        let next = self.next.load(Ordering::Relaxed);
        if next < 0 {
            return 0;
        }
        (self.high.load(Ordering::Relaxed) - next).max(0)
    }
}

impl std::fmt::Debug for PartitionLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionLink")
            .field("high", &self.high)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// A partition reader's client callbacks: errors to the log, and the partition's end, from the
/// statistics librdkafka gathers as it fetches, to the link (for the lag).
struct ReaderContext {
    link: Arc<PartitionLink>,
    topic: String,
    partition: i32,
}

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        let Some(partition) = statistics
            .topics
            .get(&self.topic)
            .and_then(|t| t.partitions.get(&self.partition))
        else {
            return;
        };
        // What a read_committed reader can reach: the last stable offset (the high
        // watermark less open transactions), where the broker reports one.
        let end = if partition.ls_offset >= 0 {
            partition.ls_offset
        } else {
            partition.hi_offset
        };
        if end >= 0 {
            self.link.high.fetch_max(end, Ordering::Relaxed);
        }
    }
}

impl ConsumerContext for ReaderContext {}

/// The partition a pipeline of a Kafka job reads (`crate::job::JobSpec::input_partition`).
#[derive(Clone, Debug)]
pub struct InputPartition {
    pub partition: i32,
    pub link: Arc<PartitionLink>,
}

/// What a checkpoint records of a partition source.
#[derive(Debug, Serialize, Deserialize)]
struct PartitionPosition {
    topic: String,
    partition: i32,
    /// The offset of the next message to read; `None`: nothing read yet, start as the job
    /// file says.
    offset: Option<i64>,
    /// A repartition topic's: the markers read before `offset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    writers: Option<Writers>,
}

/// Reads one partition of a topic.
pub struct PartitionSource {
    consumer: BaseConsumer<ReaderContext>,
    spec: KafkaSourceSpec,
    partition: i32,
    reader: MessageReader,
    /// The offset of the next message; `None` until the start is resolved.
    next: Option<i64>,
    /// With `stop_at_end`: where the partition ended when this source started reading.
    end: Option<i64>,
    /// A repartition topic's partition: its writers' markers read so far. Its input ends
    /// when they have all ended, not at the partition's end.
    writers: Option<Writers>,
    /// Shared with the group member: offsets to commit, lag.
    link: Arc<PartitionLink>,
    assigned: bool,
    progress: Arc<SourceProgress>,
}

/// Makes records of messages.
struct MessageReader {
    format: ValueFormat,
    decoder: JsonDecoder,
    /// Bad messages set aside since the last drain; `None`: a bad message fails the source.
    rejected: Option<Vec<Rejected>>,
    skipped_for_timestamp: u64,
    /// `kafka topic T partition P`, for errors.
    name: String,
}

impl PartitionSource {
    /// A source for `partition` of the spec's topic. It reaches the broker only when it first
    /// reads.
    pub fn new(spec: &KafkaSourceSpec, input: &InputPartition) -> Result<Self, ConnectorError> {
        let consumer: BaseConsumer<ReaderContext> = client_config(
            &spec.brokers,
            spec.connect_timeout(),
            &[
                // librdkafka assigns only in a group; this consumer never joins it (no
                // subscribe) and never commits.
                ("group.id", &spec.group_id),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "true"),
                // A checkpointed offset the broker no longer holds is an error, never a
                // silent jump.
                ("auto.offset.reset", "error"),
                ("isolation.level", "read_committed"),
                // The partition's end, for the lag, comes with the client's statistics.
                ("statistics.interval.ms", "1000"),
            ],
            &spec.properties,
        )
        .create_with_context(ReaderContext {
            link: input.link.clone(),
            topic: spec.topic.clone(),
            partition: input.partition,
        })
        .map_err(|e| kafka_error(&spec.brokers, format!("cannot create a consumer: {e}")))?;
        let decoder = JsonDecoder::new(
            spec.key_pointer.clone(),
            spec.timestamp.clone(),
            spec.on_bad_timestamp,
        );
        let rejected = match spec.on_bad_record {
            crate::vocabulary::RecordPolicy::Fail => None,
            _ => Some(Vec::new()),
        };
        Ok(Self {
            consumer,
            spec: spec.clone(),
            partition: input.partition,
            reader: MessageReader {
                format: spec.format,
                decoder,
                rejected,
                skipped_for_timestamp: 0,
                name: format!("kafka topic {} partition {}", spec.topic, input.partition),
            },
            next: None,
            end: None,
            writers: spec.repartition_input.as_ref().map(|_| Writers::default()),
            link: input.link.clone(),
            assigned: false,
            progress: Arc::default(),
        })
    }

    fn error(&self, message: String) -> ConnectorError {
        kafka_error(&self.spec.brokers, message)
    }

    /// Resolves where to start, assigns the partition at that offset, and notes its end.
    fn assign(&mut self) -> Result<(), ConnectorError> {
        let topic = &self.spec.topic;
        let timeout = self.spec.connect_timeout();
        let (low, high) = self
            .consumer
            .fetch_watermarks(topic, self.partition, timeout)
            .map_err(|e| {
                self.error(format!(
                    "cannot read the offsets of topic `{topic}` partition {}: {e}",
                    self.partition
                ))
            })?;
        let start = match (self.next, &self.spec.repartition_input, self.spec.start) {
            // A repartition topic's partition without a checkpoint: where the job began
            // writing it, which the topic must still hold (`crate::group`'s origin).
            (None, Some(input), _) => {
                let origin = input
                    .origin
                    .get(self.partition as usize)
                    .copied()
                    .unwrap_or(0);
                if origin < low || origin > high {
                    return Err(self.error(format!(
                        "topic `{topic}` partition {} holds offsets {low} to {high}, but this \
                         job began writing it at {origin}: {}",
                        self.partition,
                        if origin < low {
                            "records were deleted (by retention or a size limit) before this \
                             stage read them"
                        } else {
                            "the topic was deleted and made again since; delete the job's \
                             folders in the checkpoint store to start over"
                        }
                    )));
                }
                origin
            }
            (Some(offset), _, _) => {
                if offset < low {
                    return Err(self.error(format!(
                        "topic `{topic}` partition {} no longer holds offset {offset}, where \
                         the checkpoint resumes (it starts at {low}): the messages between \
                         were deleted by retention",
                        self.partition
                    )));
                }
                offset
            }
            (None, None, StartPosition::Earliest) => low,
            (None, None, StartPosition::Latest) => high,
            (None, None, StartPosition::Timestamp { timestamp_ms }) => {
                let mut wanted = TopicPartitionList::new();
                wanted
                    .add_partition_offset(topic, self.partition, Offset::Offset(timestamp_ms))
                    .map_err(|e| self.error(e.to_string()))?;
                let found = self
                    .consumer
                    .offsets_for_times(wanted, timeout)
                    .map_err(|e| self.error(format!("cannot look up offsets by time: {e}")))?;
                match found.elements().first().map(|e| e.offset()) {
                    Some(Offset::Offset(offset)) => offset,
                    // No message at or after that time yet.
                    _ => high,
                }
            }
        };
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, self.partition, Offset::Offset(start))
            .map_err(|e| self.error(e.to_string()))?;
        self.consumer
            .assign(&assignment)
            .map_err(|e| self.error(format!("cannot assign partition: {e}")))?;
        self.next = Some(start);
        self.link.high.store(high, Ordering::Relaxed);
        self.link.next.store(start, Ordering::Relaxed);
        if self.spec.stop_at_end && self.writers.is_none() {
            self.end = Some(high);
        }
        self.progress
            .total
            .store(high.max(0) as u64, Ordering::Relaxed);
        self.progress
            .done
            .store(start.max(0) as u64, Ordering::Relaxed);
        self.assigned = true;
        Ok(())
    }

    fn at_end(&self) -> bool {
        match &self.writers {
            Some(writers) => writers.all_ended(),
            None => matches!((self.next, self.end), (Some(next), Some(end)) if next >= end),
        }
    }
}

/// Counts `message` into `writers` if it is a writer's marker (of a repartition topic, whose
/// partition `name` is); `false` for a record.
fn take_marker(
    writers: &mut Option<Writers>,
    name: &str,
    brokers: &str,
    message: &rdkafka::message::BorrowedMessage<'_>,
) -> Result<bool, ConnectorError> {
    let Some(writers) = writers else {
        return Ok(false);
    };
    let Some(marker) = message.headers().and_then(|headers| {
        headers
            .iter()
            .find(|h| h.key == MARKER_HEADER)
            .map(|h| h.value.unwrap_or_default())
    }) else {
        return Ok(false);
    };
    Marker::decode(marker)
        .and_then(|marker| writers.observe(marker))
        .map_err(|problem| {
            kafka_error(
                brokers,
                format!("{name} offset {}: {problem}", message.offset()),
            )
        })?;
    Ok(true)
}

impl MessageReader {
    /// Makes a record of one message, or sets it aside, or fails.
    fn take(
        &mut self,
        message: &rdkafka::message::BorrowedMessage<'_>,
        out: &mut RecordBatch,
    ) -> Result<bool, ConnectorError> {
        let offset = message.offset();
        let value = message.payload().unwrap_or_default();
        let kafka_time = message.timestamp().to_millis();
        let origin = offset as u64;
        let problem = match self.format {
            ValueFormat::Raw => {
                let record = RecordRef {
                    key: message.key(),
                    value,
                    timestamp: kafka_time,
                };
                out.push_from_source(record, origin);
                return Ok(true);
            }
            ValueFormat::Json => match self.decoder.decode(value) {
                Decoded::Record { key, timestamp } => {
                    let record = RecordRef {
                        key: key.or(message.key()),
                        value,
                        timestamp: timestamp.or(kafka_time),
                    };
                    out.push_from_source(record, origin);
                    return Ok(true);
                }
                Decoded::SkippedForTimestamp => {
                    self.skipped_for_timestamp += 1;
                    return Ok(false);
                }
                Decoded::Bad(problem) => problem,
                Decoded::Misconfigured(message) => {
                    return Err(ConnectorError::BadRecord {
                        path: self.name.clone().into(),
                        line: origin,
                        message: format!("{message} (offset {offset})"),
                    });
                }
            },
        };
        match &mut self.rejected {
            Some(rejected) => {
                rejected.push(Rejected {
                    origin,
                    raw: value.to_vec(),
                    reason: problem,
                });
                Ok(false)
            }
            None => Err(ConnectorError::BadRecord {
                path: self.name.clone().into(),
                line: origin,
                message: format!("{problem} (offset {offset})"),
            }),
        }
    }
}

impl Source for PartitionSource {
    fn read_batch(&mut self, max: usize, out: &mut RecordBatch) -> Result<bool, ConnectorError> {
        if !self.assigned {
            self.assign()?;
        }
        let mut read = 0;
        let mut wait = POLL_WAIT;
        while read < max && !self.at_end() {
            let Some(polled) = self.consumer.poll(wait) else {
                break;
            };
            wait = Duration::ZERO;
            match polled {
                Ok(message) => {
                    self.next = Some(message.offset() + 1);
                    let brokers = &self.spec.brokers;
                    let marker =
                        take_marker(&mut self.writers, &self.reader.name, brokers, &message)?;
                    if !marker && self.reader.take(&message, out)? {
                        read += 1;
                    }
                }
                Err(KafkaError::PartitionEOF(_)) => {
                    // At the end: the position may be past the last message read (control
                    // records of transactions take offsets too).
                    if let Ok(positions) = self.consumer.position()
                        && let Some(Offset::Offset(at)) = positions
                            .find_partition(&self.spec.topic, self.partition)
                            .map(|p| p.offset())
                    {
                        self.next = Some(self.next.map_or(at, |n| n.max(at)));
                    }
                    break;
                }
                // The broker no longer holds the next offset (`auto.offset.reset` is
                // `error`): never a jump past records nobody read.
                Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) => {
                    return Err(self.error(format!(
                        "topic `{}` partition {} no longer holds offset {}, the next to read: \
                         records were deleted (by retention or a size limit) before this job \
                         read them ({e})",
                        self.spec.topic,
                        self.partition,
                        self.next.unwrap_or_default()
                    )));
                }
                Err(e) => {
                    return Err(self.error(format!(
                        "reading topic `{}` partition {}: {e}",
                        self.spec.topic, self.partition
                    )));
                }
            }
        }
        if let Some(next) = self.next {
            self.progress
                .done
                .store(next.max(0) as u64, Ordering::Relaxed);
            self.link.next.store(next, Ordering::Relaxed);
            self.link.high.fetch_max(next, Ordering::Relaxed);
        }
        Ok(!self.at_end())
    }

    fn position(&self) -> SourcePosition {
        serde_json::to_value(PartitionPosition {
            topic: self.spec.topic.clone(),
            partition: self.partition,
            offset: self.next,
            writers: self.writers.clone(),
        })
        .unwrap_or_default()
    }

    fn seek(&mut self, position: &SourcePosition) -> Result<(), ConnectorError> {
        let bad = |message: String| ConnectorError::BadPosition {
            source_name: format!(
                "kafka topic {} partition {}",
                self.spec.topic, self.partition
            ),
            message,
        };
        let position: PartitionPosition = serde_json::from_value(position.clone())
            .map_err(|e| bad(format!("{position} is not a Kafka position: {e}")))?;
        if position.topic != self.spec.topic || position.partition != self.partition {
            return Err(bad(format!(
                "the checkpoint is of topic `{}` partition {}",
                position.topic, position.partition
            )));
        }
        if self.writers.is_some() {
            self.writers = Some(position.writers.unwrap_or_default());
        }
        self.next = position.offset;
        self.assigned = false;
        Ok(())
    }

    fn progress(&self) -> Arc<SourceProgress> {
        self.progress.clone()
    }

    fn origin(&self) -> SourceOrigin {
        SourceOrigin::Kafka {
            topic: self.spec.topic.clone(),
            partition: self.partition,
        }
    }

    fn drain_rejected(&mut self, into: &mut Vec<Rejected>) {
        if let Some(rejected) = &mut self.reader.rejected {
            into.append(rejected);
        }
    }

    fn skipped_for_timestamp(&self) -> u64 {
        self.reader.skipped_for_timestamp
    }

    fn watermark(&self) -> Option<i64> {
        self.writers.as_ref().and_then(Writers::watermark)
    }

    fn checkpoint_completed(&mut self, position: &SourcePosition) {
        if let (Some(committer), Some(offset)) = (&self.link.committer, offset_in(position)) {
            committer(self.partition, offset);
        }
    }

    fn input_released(&mut self, position: &SourcePosition) {
        if let (Some(purger), Some(offset)) = (&self.link.purger, offset_in(position)) {
            purger(self.partition, offset);
        }
    }
}

/// The next offset to read in a position this source returned (`PartitionPosition`), read
/// without decoding the rest (a repartition topic's writers).
fn offset_in(position: &SourcePosition) -> Option<i64> {
    position.get("offset").and_then(serde_json::Value::as_i64)
}

/// A Kafka client failed, at `brokers`.
pub(crate) fn kafka_error(brokers: &str, message: String) -> ConnectorError {
    ConnectorError::Kafka {
        brokers: brokers.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rdkafka::statistics::{Partition, Topic};

    use super::*;

    fn statistics(topic: &str, partition: i32, hi: i64, ls: i64) -> Statistics {
        let partition_stats = Partition {
            partition,
            hi_offset: hi,
            ls_offset: ls,
            ..Partition::default()
        };
        Statistics {
            topics: HashMap::from([(
                topic.to_owned(),
                Topic {
                    topic: topic.to_owned(),
                    partitions: HashMap::from([(partition, partition_stats)]),
                    ..Topic::default()
                },
            )]),
            ..Statistics::default()
        }
    }

    #[test]
    fn the_lag_follows_the_partitions_end_from_the_clients_statistics() {
        let link = Arc::new(PartitionLink::new(None));
        let context = ReaderContext {
            link: link.clone(),
            topic: "t".into(),
            partition: 2,
        };
        assert_eq!(link.lag(), 0, "nothing read yet: no lag");
        link.next.store(100, Ordering::Relaxed);
        link.high.store(100, Ordering::Relaxed);
        assert_eq!(link.lag(), 0);
        // 50 messages arrive: the last stable offset counts, not the high watermark (an open
        // transaction's records are not readable yet).
        context.stats(statistics("t", 2, 160, 150));
        assert_eq!(link.lag(), 50);
        // Another partition's or topic's figures are not this one's.
        context.stats(statistics("t", 3, 900, 900));
        context.stats(statistics("u", 2, 900, 900));
        assert_eq!(link.lag(), 50);
        // A broker that reports no stable offset: the high watermark.
        context.stats(statistics("t", 2, 170, -1));
        assert_eq!(link.lag(), 70);
        link.next.store(170, Ordering::Relaxed);
        assert_eq!(link.lag(), 0);
    }
}
