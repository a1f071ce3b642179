//! The job file as written: the TOML's tables as serde structs, which refuse unknown fields.
//! [`super::check`] turns a [`JobFile`] into a [`super::JobSpec`]; [`SourceSpec`] and
//! [`SinkSpec`] serve both, their paths resolved by then.

use std::path::PathBuf;

use serde::Deserialize;

use crate::connectors::generator::GeneratorClock;
use crate::connectors::kafka::settings::{KafkaSinkSpec, KafkaSourceSpec};
use crate::connectors::timestamps::{TimestampPolicy, TimestampSpec};
use crate::vocabulary::{RecordPolicy, WatermarkFile};

/// A job file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    pub job: JobSection,
    pub source: SourceSpec,
    #[serde(default)]
    pub operators: Vec<OperatorFile>,
    pub sink: SinkSpec,
    pub checkpoints: Option<CheckpointsFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsFile {
    pub store: Option<String>,
    pub interval_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub tolerable_failures: Option<u32>,
    pub retain: Option<usize>,
    pub max_chain: Option<usize>,
    pub rewrite_budget: Option<usize>,
    pub full_snapshot_every: Option<usize>,
    pub restart_attempts: Option<u32>,
    pub on_limit: Option<OnLimit>,
}

/// What a job does when a guest exceeds one of its limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnLimit {
    /// Fail at once. The default: replaying the same input after a restart usually hits the
    /// same limit again, and each restart costs a restore.
    #[default]
    Fail,
    /// Restart from the latest checkpoint, counted against `restart_attempts`.
    Restart,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSection {
    pub name: String,
    pub max_parallelism: Option<u32>,
    /// Records per batch handed to an operator.
    pub batch_size: Option<usize>,
}

/// Where records come from. As parsed, paths are relative to the job file; in a
/// [`super::JobSpec`], they are resolved.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SourceSpec {
    /// Each line a record, stamped with the time it was read (ingestion time).
    TextLines {
        path: PathBuf,
        /// At most this many lines per second of wall-clock time; none: as fast as it reads.
        #[serde(default)]
        records_per_second: Option<u64>,
        #[serde(default)]
        watermark: Option<WatermarkFile>,
    },
    JsonLines {
        path: PathBuf,
        /// A JSON pointer (RFC 6901) into each line whose value becomes the record key.
        key_pointer: Option<String>,
        /// What happens to a line that is not JSON, or has no value at `key_pointer`.
        #[serde(default)]
        on_bad_record: RecordPolicy,
        /// Where each line's event time is; none: records have no timestamp.
        #[serde(default)]
        timestamp: Option<TimestampSpec>,
        /// What happens to a line without a usable timestamp.
        #[serde(default)]
        on_bad_timestamp: TimestampPolicy,
        /// At most this many lines per second of wall-clock time; none: as fast as it reads.
        #[serde(default)]
        records_per_second: Option<u64>,
        #[serde(default)]
        watermark: Option<WatermarkFile>,
    },
    /// A Kafka topic, read by a pipeline per partition (`crate::group`).
    Kafka(KafkaSourceSpec),
    /// Synthetic records on a synthetic clock.
    Generator {
        records: u64,
        keys: u64,
        /// At most this many records per second of wall-clock time; none: as fast as it can.
        #[serde(default)]
        records_per_second: Option<u64>,
        #[serde(default)]
        clock: GeneratorClock,
        #[serde(default)]
        watermark: Option<WatermarkFile>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorFile {
    pub name: String,
    /// What the operator's state is kept under in checkpoints; default: its name. Keeps the
    /// state across a rename.
    pub uid: Option<String>,
    pub component: PathBuf,
    #[serde(default = "one")]
    pub parallelism: u32,
    pub key_by: Option<KeyByFile>,
    #[serde(default)]
    pub config: toml::Table,
    #[serde(default)]
    pub limits: LimitsFile,
    #[serde(default)]
    pub on_error: RecordPolicy,
    #[serde(default)]
    pub on_bad_record: RecordPolicy,
    /// Kafka jobs: the topic before this operator when it re-keys (`weir plan` says whether
    /// it does).
    #[serde(default)]
    pub repartition: RepartitionFile,
}

/// `[operators.repartition]`: the topic through which a Kafka job re-keys before an operator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepartitionFile {
    /// Default: `weir.<job>.<uid>.repartition`: by the operator's uid, so that a rename
    /// that keeps the uid keeps the topic.
    pub topic: Option<String>,
    /// Default: as many as the job's input topic.
    pub partitions: Option<u32>,
    /// The topic's `retention.ms` when Weir creates it; default: the brokers'. The bound on
    /// the topic where the brokers do not delete what the next stage has read past.
    pub retention_ms: Option<u64>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum KeyByFile {
    /// `key_by = "key"`: the key the upstream operator (or source) set.
    Named(String),
    /// `key_by = { json_pointer = "/user" }`: a field of the JSON value.
    Pointer(PointerFile),
    /// Anything else (a typo in the table, a number): kept so that the check can say which
    /// operator it is and what the accepted forms are, which serde's "did not match any
    /// variant" does not.
    Other(toml::Value),
}

/// `key_by = { json_pointer = "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PointerFile {
    pub json_pointer: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    pub memory_mb: Option<usize>,
    pub cpu_ms_per_call: Option<u64>,
    pub state_mb: Option<usize>,
}

/// Where records go. As parsed, a path is relative to the job file; in a [`super::JobSpec`], it
/// is resolved.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SinkSpec {
    Stdout,
    File { path: PathBuf },
    Discard,
    Kafka(KafkaSinkSpec),
}

impl SourceSpec {
    /// The `kind` as the job file writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceSpec::TextLines { .. } => "text-lines",
            SourceSpec::JsonLines { .. } => "json-lines",
            SourceSpec::Kafka(_) => "kafka",
            SourceSpec::Generator { .. } => "generator",
        }
    }
}

impl SinkSpec {
    /// The `kind` as the job file writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            SinkSpec::Stdout => "stdout",
            SinkSpec::File { .. } => "file",
            SinkSpec::Discard => "discard",
            SinkSpec::Kafka(_) => "kafka",
        }
    }
}
