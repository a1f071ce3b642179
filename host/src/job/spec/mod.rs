//! The job file: its TOML form ([`JobFile`]) and the checked, resolved form ([`JobSpec`]).
//!
//! ```toml
//! [job]
//! name = "wordcount"
//! max_parallelism = 128          # key groups; optional, default 128
//!
//! [source]
//! kind = "text-lines"            # or "json-lines", "generator", "kafka"
//! path = "input.txt"             # relative to the job file
//! # json-lines only: a line that is not JSON, or has no value at key_pointer:
//! # on_bad_record = "fail"       # or "skip", or { dead_letter = "bad.jsonl" }
//!
//! [[operators]]
//! name = "tokenize"
//! component = "tokenizer.wasm"   # relative to the job file
//! parallelism = 1
//!
//! [[operators]]
//! name = "count"
//! component = "counter.wasm"
//! parallelism = 3
//! key_by = "key"                 # partition this operator's input by record key
//! config = { min_length = 1 }    # handed to the operator as JSON
//! on_error = "fail"              # the operator fails on a record: "fail" the job, "skip"
//!                                # the record, or { dead_letter = "failed.jsonl" }
//! on_bad_record = "fail"         # a record its key_by cannot key (same choices)
//!
//! [sink]
//! kind = "file"                  # or "stdout", "discard", "kafka"
//! path = "out.txt"
//!
//! [checkpoints]                  # optional: without it, nothing is checkpointed
//! store = "file:///var/weir"     # any object_store URL; default: a folder next to the job file
//! interval_ms = 1000             # how often a checkpoint starts
//! timeout_ms = 600000            # a checkpoint not complete by then fails (is aborted)
//! tolerable_failures = 10        # checkpoints that may fail in a row (store down) before
//!                                # the job fails; after each, the next waits twice as long
//! retain = 2                     # completed checkpoints kept (at least 1)
//! max_chain = 16                 # the chain length each subtask keeps under
//! rewrite_budget = 10000         # entries re-written per checkpoint to drain old increments
//! # full_snapshot_every = 50     # instead: a full snapshot every N checkpoints (comparisons)
//! restart_attempts = 3           # automatic restarts from the latest checkpoint
//! on_limit = "fail"              # a guest over its CPU, memory or state limit: "fail" the
//!                                # job, or "restart" it like any other failure
//! ```
//!
//! Unknown fields are errors, reported with line and column; checks that need more than the
//! syntax (paths, ranges, names) report which section and field is wrong.
//!
//! - [`file`]: the file as written ([`JobFile`]), one serde struct per table.
//! - [`check`]: the checker, from a [`JobFile`] to a [`JobSpec`]: paths resolved, ranges,
//!   names and combinations checked, each error naming its section and field.
//! - This module: the checked [`JobSpec`], and what the runtime asks of it.
//! - The words shared with the connectors (record policies, watermarks) are
//!   [`crate::vocabulary`]'s, re-exported here.

mod check;
pub(crate) mod file;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use file::{
    CheckpointsFile, JobFile, JobSection, KeyByFile, LimitsFile, OnLimit, OperatorFile,
    RepartitionFile, SinkSpec, SourceSpec,
};

use crate::checkpoint::ChainPolicy;
use crate::connectors::kafka::settings::{Guarantee, KafkaSinkSpec};
use crate::connectors::kafka::source::InputPartition;
use crate::job::watermarks::WatermarkPolicy;
use crate::operator::GuestLimits;
use crate::partition::KeyGroups;
pub use crate::vocabulary::{KeyBy, RecordPolicy, WatermarkFile};

/// How a job checkpoints, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointSpec {
    /// The object-store URL under which the job's checkpoints live.
    pub store: String,
    pub interval: Duration,
    /// How long a checkpoint may take, trigger to metadata written, before it fails.
    pub timeout: Duration,
    /// Checkpoints that may fail in a row before the job fails.
    pub tolerable_failures: u32,
    /// Completed checkpoints kept, at least 1.
    pub retain: usize,
    /// How the chains of subtasks stay bounded.
    pub chains: ChainPolicy,
    /// Times a failed run is restarted from its latest checkpoint.
    pub restart_attempts: u32,
    /// Whether a guest over a limit is such a failure.
    pub on_limit: OnLimit,
}

impl CheckpointSpec {
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
    /// Long enough for a large first snapshot to upload, short enough that a hung store call
    /// shows as failed checkpoints, and the last checkpoint's retries end in a restart.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
    pub const DEFAULT_RETAIN: usize = 2;
    pub const DEFAULT_MAX_CHAIN: usize = 16;
    pub const DEFAULT_REWRITE_BUDGET: usize = 10_000;
    pub const DEFAULT_RESTART_ATTEMPTS: u32 = 3;
    /// With the default interval and the pause doubling after each failure (at most a
    /// minute), about four minutes of a store being down.
    pub const DEFAULT_TOLERABLE_FAILURES: u32 = 10;
    /// The folder, next to the job file, that holds checkpoints when no store is named.
    pub const DEFAULT_FOLDER: &str = ".weir-checkpoints";
}

/// A checked job, paths resolved against the job file's folder.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub name: String,
    pub key_groups: KeyGroups,
    pub batch_size: usize,
    pub source: SourceSpec,
    pub operators: Vec<OperatorSpec>,
    pub sink: SinkSpec,
    pub checkpoints: Option<CheckpointSpec>,
    /// How the source makes watermarks (`[source] watermark`).
    pub watermark: Option<WatermarkPolicy>,
    /// The one partition of a Kafka source this spec runs (`crate::group`, which
    /// runs a pipeline per partition); `None` for a spec as loaded.
    pub input_partition: Option<InputPartition>,
}

#[derive(Clone, Debug)]
pub struct OperatorSpec {
    pub name: String,
    /// What its state is kept under in checkpoints, and matched by at a restore: the job
    /// file's `uid`, else the name.
    pub uid: String,
    pub component: PathBuf,
    pub parallelism: u32,
    pub key_by: Option<KeyBy>,
    pub config_json: String,
    pub limits: GuestLimits,
    /// What happens to a record the operator fails on.
    pub on_error: RecordPolicy,
    /// What happens to a record `key_by` cannot key.
    pub on_bad_record: RecordPolicy,
    /// The topic before this operator if it re-keys a Kafka job ([`crate::job::stages`]).
    pub repartition: RepartitionFile,
}

/// The source's `on_bad_record` policy, for sources that can meet a bad record.
pub fn source_policy(source: &SourceSpec) -> Option<&RecordPolicy> {
    match source {
        SourceSpec::JsonLines { on_bad_record, .. } => Some(on_bad_record),
        SourceSpec::Kafka(kafka) => Some(&kafka.on_bad_record),
        SourceSpec::TextLines { .. } | SourceSpec::Generator { .. } => None,
    }
}

impl JobSpec {
    /// Every place the job writes dead letters to (a file or a topic), as the policy that
    /// names it, each once, in the order the job file names them (source, then operators).
    pub fn dead_letter_targets(&self) -> Vec<RecordPolicy> {
        let mut targets: Vec<RecordPolicy> = Vec::new();
        let policies = source_policy(&self.source).into_iter().chain(
            self.operators
                .iter()
                .flat_map(|op| [&op.on_error, &op.on_bad_record]),
        );
        for policy in policies.filter(|p| p.is_dead_letter()) {
            if !targets.contains(policy) {
                targets.push(policy.clone());
            }
        }
        targets
    }

    /// Every dead-letter file the job writes to, as [`JobSpec::dead_letter_targets`].
    pub fn dead_letter_files(&self) -> Vec<PathBuf> {
        self.dead_letter_targets()
            .iter()
            .filter_map(|t| t.dead_letter().map(Path::to_owned))
            .collect()
    }

    /// The sink of a dead-letter topic: the brokers (and client properties) of the job's
    /// Kafka sink, or else of its Kafka source; the guarantee of its Kafka sink, or else
    /// exactly once. `None` for a job with neither (the job file check refuses those).
    pub fn dead_letter_topic_sink(&self, topic: &str) -> Option<KafkaSinkSpec> {
        match (&self.sink, &self.source) {
            (SinkSpec::Kafka(sink), _) => Some(KafkaSinkSpec {
                topic: topic.to_owned(),
                repartition: None,
                ..sink.clone()
            }),
            (_, SourceSpec::Kafka(source)) => Some(KafkaSinkSpec {
                brokers: source.brokers.clone(),
                topic: topic.to_owned(),
                guarantee: Guarantee::ExactlyOnce,
                transactions: false,
                connect_timeout_ms: source.connect_timeout_ms,
                properties: Default::default(),
                repartition: None,
            }),
            _ => None,
        }
    }
}

/// A parallelism a job cannot be given.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RescaleError {
    #[error("parallelism {parallelism} is out of range: use 1 to max_parallelism ({max})")]
    OutOfRange { parallelism: u32, max: u32 },
    #[error("job `{job}` has no operator `{operator}`")]
    NoSuchOperator { job: String, operator: String },
    #[error("job `{job}` has no keyed operator; name one: --parallelism OPERATOR=N")]
    NoKeyedOperator { job: String },
}

/// A job file that cannot be run, with what and where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    #[error("cannot read job file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("job file {path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("job file {path}: {location}: {message}")]
    Invalid {
        path: PathBuf,
        location: String,
        message: String,
    },
}

/// Default records per batch: large enough to amortise a guest call (~0.5 µs), small enough
/// to keep batches in cache.
pub const DEFAULT_BATCH_SIZE: usize = 1024;

impl JobSpec {
    /// Sets the parallelism of `operator`, or of every operator that partitions its input by
    /// key (the ones that hold keyed state) when `None`: a rescale, when the job is restored.
    pub fn set_parallelism(
        &mut self,
        operator: Option<&str>,
        parallelism: u32,
    ) -> Result<(), RescaleError> {
        let max = self.key_groups.count();
        if !(1..=max).contains(&parallelism) {
            return Err(RescaleError::OutOfRange { parallelism, max });
        }
        let mut found = false;
        for op in &mut self.operators {
            let chosen = match operator {
                Some(name) => op.name == name,
                None => op.key_by.is_some(),
            };
            if chosen {
                op.parallelism = parallelism;
                found = true;
            }
        }
        match (found, operator) {
            (true, _) => Ok(()),
            (false, Some(name)) => Err(RescaleError::NoSuchOperator {
                job: self.name.clone(),
                operator: name.to_owned(),
            }),
            (false, None) => Err(RescaleError::NoKeyedOperator {
                job: self.name.clone(),
            }),
        }
    }

    /// Reads, parses and checks a job file.
    pub fn load(path: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, path, base)
    }

    /// Parses and checks job-file text; `path` names it in errors and `base` resolves
    /// relative paths.
    pub fn parse(text: &str, path: &Path, base: &Path) -> Result<Self, SpecError> {
        let file: JobFile = toml::from_str(text).map_err(|e| SpecError::Syntax {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        check::Checker { path, base }.check(file)
    }
}
