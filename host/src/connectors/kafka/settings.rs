//! The `[source]` and `[sink]` sections of a job that reads or writes Kafka, and the client
//! settings made from them.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, ClientContext};
use serde::Deserialize;

use crate::connectors::timestamps::{TimestampPolicy, TimestampSpec};
use crate::vocabulary::{RecordPolicy, WatermarkFile};

/// How long a client tries to reach the brokers before the job gives up, by default
/// (`socket.connection.setup.timeout.ms` and the first metadata request).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `[source] kind = "kafka"`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceSpec {
    /// `bootstrap.servers`: `host:port[,host:port...]`.
    pub brokers: String,
    pub topic: String,
    /// The consumer group: the processes of a job that share its partitions, and where the
    /// offsets of completed checkpoints are committed for lag tools.
    pub group_id: String,
    /// Which partitions this process reads.
    #[serde(default)]
    pub assignment: Assignment,
    /// Where a partition no checkpoint covers starts.
    #[serde(default)]
    pub start: StartPosition,
    /// How each message's value is read.
    #[serde(default)]
    pub format: ValueFormat,
    /// JSON values only: a JSON pointer whose value becomes the record key. Without it, the
    /// record key is the message key.
    pub key_pointer: Option<String>,
    /// JSON values only: where each value's event time is. Without it, the event time is the
    /// message's Kafka timestamp.
    #[serde(default)]
    pub timestamp: Option<TimestampSpec>,
    #[serde(default)]
    pub on_bad_timestamp: TimestampPolicy,
    /// What happens to a message whose JSON does not parse, or has no key at `key_pointer`.
    #[serde(default)]
    pub on_bad_record: RecordPolicy,
    /// Stop each partition at the end it had when its task started, instead of waiting for
    /// more messages (for tests, benchmarks and backfills).
    #[serde(default)]
    pub stop_at_end: bool,
    /// How long to try to reach the brokers at start, in milliseconds.
    pub connect_timeout_ms: Option<u64>,
    /// librdkafka properties passed through (`session.timeout.ms`, `security.protocol`...).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    #[serde(default)]
    pub watermark: Option<WatermarkFile>,
    /// The topic is a repartition topic between two stages of a job (`crate::job::stages`):
    /// its writers' markers say where event time is and where the input ends. Set by the
    /// stage that reads it, never by a job file.
    #[serde(skip)]
    pub repartition_input: Option<RepartitionInput>,
}

/// How a stage reads the repartition topic before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepartitionInput {
    /// The topic's partitions.
    pub partitions: u32,
    /// By partition: the offset where the job began writing it (`crate::group`); a
    /// partition with no checkpoint starts there. Empty until the group has read it.
    pub origin: Vec<i64>,
}

/// `[source] assignment`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Assignment {
    /// The partitions the consumer group gives this process: several processes share the
    /// topic, and take over each other's partitions.
    #[default]
    Group,
    /// Every partition, without joining the group (as Flink's Kafka source does): one process
    /// runs the job, and a restarted one resumes at once instead of waiting for the group to
    /// forget the old one. Offsets are still committed to the group, for lag tools.
    All,
}

/// `[source] start`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum StartPosition {
    /// The oldest message the broker still holds.
    #[default]
    Earliest,
    /// Only messages produced after the partition's task started.
    Latest,
    /// `{ timestamp_ms = N }`: the first message with a timestamp at or after N.
    #[serde(untagged)]
    Timestamp { timestamp_ms: i64 },
}

/// `[source] format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ValueFormat {
    /// The value's bytes as they are.
    #[default]
    Raw,
    /// One JSON value per message: checked, and keys and timestamps can be read from it.
    Json,
}

/// `[sink] kind = "kafka"`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkSpec {
    pub brokers: String,
    pub topic: String,
    #[serde(default)]
    pub guarantee: Guarantee,
    /// With `exactly-once`: publish each checkpoint's output in one broker transaction, under
    /// a `transactional.id` per input partition and output, so that a new owner's start
    /// fences the old one at the broker, and `read_committed` consumers see a checkpoint's
    /// output all at once.
    #[serde(default)]
    pub transactions: bool,
    pub connect_timeout_ms: Option<u64>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// The topic is a repartition topic, written by a stage of a job
    /// (`crate::job::stages`); never set by a job file.
    #[serde(skip)]
    pub repartition: Option<RepartitionWrite>,
}

/// How a stage writes the repartition topic toward the next stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepartitionWrite {
    /// The key of the operator that reads the topic: a record's partition comes from its
    /// key's hash (`KeyHash::topic_partition`), the same in every client that writes it.
    pub key_by: crate::vocabulary::KeyBy,
    /// The topic's partitions.
    pub partitions: u32,
    /// How many pipelines write the topic: the partitions of the stage's input.
    pub writers: u32,
    /// Which of them this is: its input partition (set per pipeline by `crate::group`).
    pub writer: u32,
}

/// `[sink] guarantee`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Guarantee {
    /// Output of a checkpoint is published once it completes, each message once: staged in
    /// the checkpoint store, published with an id in its `weir-id` header, and, after a
    /// crash, what the topic already holds is skipped. Needs no broker transactions.
    #[default]
    ExactlyOnce,
    /// Output is sent as it is made and flushed at every checkpoint; a restore may send the
    /// output since the last checkpoint again.
    AtLeastOnce,
}

/// A client's settings: the brokers, what Weir needs, then the job's own properties, which
/// win.
pub(crate) fn client_config(
    brokers: &str,
    connect_timeout: Duration,
    ours: &[(&str, &str)],
    properties: &BTreeMap<String, String>,
) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    let timeout = connect_timeout.as_millis().to_string();
    config.set("socket.connection.setup.timeout.ms", &timeout);
    config.set("log_level", "3");
    for (key, value) in ours {
        config.set(*key, *value);
    }
    for (key, value) in properties {
        config.set(key, value);
    }
    config
}

impl KafkaSourceSpec {
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout_ms
            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_millis)
    }
}

impl KafkaSinkSpec {
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout_ms
            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_millis)
    }
}

/// The callbacks of Weir's consumers: client errors go to the log as warnings (a failed read
/// also fails the read), except the end-of-partition events that `enable.partition.eof`
/// makes librdkafka report as errors.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientLog;

impl ClientContext for ClientLog {
    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(error, reason);
    }
}

/// Logs a client's error as a warning, unless it is the end of a partition.
pub fn log_client_error(error: KafkaError, reason: &str) {
    {
        // The end of a partition is news for the reader, not an error.
        let end = matches!(
            error,
            KafkaError::PartitionEOF(_)
                | KafkaError::Global(rdkafka::types::RDKafkaErrorCode::PartitionEOF)
        );
        if !end {
            tracing::warn!(%error, reason, "Kafka client error");
        }
    }
}

impl ConsumerContext for ClientLog {}
