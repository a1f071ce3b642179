//! Words the job file shares with the parts it configures: what happens to a record that
//! cannot be processed ([`RecordPolicy`]), how a source makes watermarks ([`WatermarkFile`])
//! and how an operator's input is keyed ([`KeyBy`]). A leaf: the job file ([`crate::job::spec`]) and the connectors that
//! take these settings (Kafka's `[source]`) both use it, and it uses neither.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `[source] watermark = { max_out_of_order_ms = N, idle_ms = M, interval_ms = I }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkFile {
    #[serde(default)]
    pub max_out_of_order_ms: u64,
    pub idle_ms: Option<u64>,
    /// At least this often (ms of processing) besides every `batch_size` records; 0: only
    /// there. Default `watermarks::DEFAULT_INTERVAL`.
    pub interval_ms: Option<u64>,
}

/// How an operator's input is partitioned among its subtasks (and, in front of a stage of a
/// Kafka job, among the partitions of the repartition topic that feeds it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyBy {
    /// By the record's key.
    RecordKey,
    /// By the value at a JSON pointer in the record's (JSON) value, which becomes its key.
    JsonPointer(String),
}

/// What happens to a record that cannot be processed: one the operator fails on
/// (`on_error`), or one that cannot be read or keyed (`on_bad_record`). As parsed, a
/// dead-letter path is relative to the job file; in a [`crate::job::JobSpec`], it is resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub enum RecordPolicy {
    /// The job fails, naming the record. The default: nothing is dropped unless asked.
    #[default]
    Fail,
    /// The record is dropped and counted.
    Skip,
    /// The record is written, with why and where it came from, as a JSON line to a file
    /// (exactly once, with the checkpoints, like the file sink), and counted.
    DeadLetter(PathBuf),
    /// As [`RecordPolicy::DeadLetter`], to a Kafka topic on the brokers of the job's Kafka
    /// source (or sink), with the guarantee of its Kafka sink (exactly once otherwise).
    DeadLetterTopic(String),
}

impl TryFrom<toml::Value> for RecordPolicy {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, String> {
        const USE: &str = "use \"fail\", \"skip\", { dead_letter = \"path\" } or \
                           { dead_letter_topic = \"topic\" }";
        match value {
            toml::Value::String(name) => match name.as_str() {
                "fail" => Ok(Self::Fail),
                "skip" => Ok(Self::Skip),
                other => Err(format!("unknown policy {other:?}: {USE}")),
            },
            toml::Value::Table(table) => {
                let mut fields = table.into_iter();
                match (fields.next(), fields.next()) {
                    (Some((key, toml::Value::String(path))), None) if key == "dead_letter" => {
                        Ok(Self::DeadLetter(PathBuf::from(path)))
                    }
                    (Some((key, toml::Value::String(topic))), None)
                        if key == "dead_letter_topic" =>
                    {
                        Ok(Self::DeadLetterTopic(topic))
                    }
                    _ => Err(format!(
                        "a table policy is {{ dead_letter = \"path\" }} or \
                         {{ dead_letter_topic = \"topic\" }} alone; {USE}"
                    )),
                }
            }
            other => Err(format!("{other} is not a policy: {USE}")),
        }
    }
}

impl RecordPolicy {
    /// The dead-letter file, if records go to one.
    pub fn dead_letter(&self) -> Option<&Path> {
        match self {
            Self::DeadLetter(path) => Some(path),
            _ => None,
        }
    }

    /// Whether records go to a dead-letter file or topic.
    pub fn is_dead_letter(&self) -> bool {
        matches!(self, Self::DeadLetter(_) | Self::DeadLetterTopic(_))
    }
}
