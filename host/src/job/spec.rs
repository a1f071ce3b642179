//! The job file: its TOML form ([`JobFile`]) and the checked, resolved form ([`JobSpec`]).
//!
//! ```toml
//! [job]
//! name = "wordcount"
//! max_parallelism = 128          # key groups; optional, default 128
//!
//! [source]
//! kind = "text-lines"            # or "json-lines", "generator", "kafka" (`crate::kafka`)
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

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::checkpoint::ChainPolicy;
use crate::connectors::generator::GeneratorClock;
use crate::connectors::timestamps::{TimestampPolicy, TimestampSpec};
use crate::job::watermarks::WatermarkPolicy;
use crate::kafka::settings::{Guarantee, KafkaSinkSpec, KafkaSourceSpec, ValueFormat};
use crate::kafka::source::InputPartition;
use crate::operator::GuestLimits;
use crate::partition::KeyGroups;

/// The most key groups a job may have.
pub const MAX_KEY_GROUPS: u32 = 32_768;

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSection {
    pub name: String,
    pub max_parallelism: Option<u32>,
    /// Records per batch handed to an operator.
    pub batch_size: Option<usize>,
}

/// Where records come from. As parsed, paths are relative to the job file; in a
/// [`JobSpec`], they are resolved.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SourceSpec {
    /// Each line a record, stamped with the time it was read (ingestion time).
    TextLines {
        path: PathBuf,
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
        #[serde(default)]
        watermark: Option<WatermarkFile>,
    },
    /// A Kafka topic, read by a pipeline per partition (`crate::kafka`).
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorFile {
    pub name: String,
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
}

/// What happens to a record that cannot be processed: one the operator fails on
/// (`on_error`), or one that cannot be read or keyed (`on_bad_record`). As parsed, a
/// dead-letter path is relative to the job file; in a [`JobSpec`], it is resolved.
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

fn one() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum KeyByFile {
    /// `key_by = "key"`: the key the upstream operator (or source) set.
    Named(String),
    /// `key_by = { json_pointer = "/user" }`: a field of the JSON value.
    Pointer { json_pointer: String },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    pub memory_mb: Option<usize>,
    pub cpu_ms_per_call: Option<u64>,
    pub state_mb: Option<usize>,
}

/// Where records go. As parsed, a path is relative to the job file; in a [`JobSpec`], it
/// is resolved.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SinkSpec {
    Stdout,
    File { path: PathBuf },
    Discard,
    Kafka(KafkaSinkSpec),
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
    /// The one partition of a Kafka source this spec runs (`crate::kafka::group`, which
    /// runs a pipeline per partition); `None` for a spec as loaded.
    pub input_partition: Option<InputPartition>,
}

#[derive(Clone, Debug)]
pub struct OperatorSpec {
    pub name: String,
    pub component: PathBuf,
    pub parallelism: u32,
    pub key_by: Option<KeyBy>,
    pub config_json: String,
    pub limits: GuestLimits,
    /// What happens to a record the operator fails on.
    pub on_error: RecordPolicy,
    /// What happens to a record `key_by` cannot key.
    pub on_bad_record: RecordPolicy,
}

/// How an operator's input is partitioned among its subtasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyBy {
    /// By the record's key.
    RecordKey,
    /// By the value at a JSON pointer in the record's (JSON) value, which becomes its key.
    JsonPointer(String),
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
                ..sink.clone()
            }),
            (_, SourceSpec::Kafka(source)) => Some(KafkaSinkSpec {
                brokers: source.brokers.clone(),
                topic: topic.to_owned(),
                guarantee: Guarantee::ExactlyOnce,
                transactions: false,
                connect_timeout_ms: source.connect_timeout_ms,
                properties: Default::default(),
            }),
            _ => None,
        }
    }
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
    ) -> Result<(), String> {
        let max = self.key_groups.count();
        if !(1..=max).contains(&parallelism) {
            return Err(format!(
                "parallelism {parallelism} is out of range: use 1 to max_parallelism ({max})"
            ));
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
            (false, Some(name)) => Err(format!("job `{}` has no operator `{name}`", self.name)),
            (false, None) => Err(format!(
                "job `{}` has no keyed operator; name one: --parallelism OPERATOR=N",
                self.name
            )),
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
        Checker { path, base }.check(file)
    }
}

struct Checker<'a> {
    path: &'a Path,
    base: &'a Path,
}

/// `path` without `.` segments, and without `..` ones where the folder before is not a
/// symbolic link (there `..` leads out of the link's target, which only the file system
/// knows): `jobs/../data/in.txt` reads `data/in.txt`, as users see it in errors, summaries and
/// the console.
fn without_dot_segments(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                let last_is_normal =
                    matches!(out.components().next_back(), Some(Component::Normal(_)));
                let is_link =
                    std::fs::symlink_metadata(&out).is_ok_and(|m| m.file_type().is_symlink());
                if last_is_normal && !is_link {
                    out.pop();
                } else if !matches!(out.components().next_back(), Some(Component::RootDir)) {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

impl Checker<'_> {
    fn invalid(&self, location: impl Into<String>, message: impl Into<String>) -> SpecError {
        SpecError::Invalid {
            path: self.path.to_owned(),
            location: location.into(),
            message: message.into(),
        }
    }

    fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            without_dot_segments(p)
        } else {
            without_dot_segments(&self.base.join(p))
        }
    }

    fn existing_file(
        &self,
        location: &str,
        p: &Path,
        what: &str,
        hint: fn(&Path) -> String,
    ) -> Result<PathBuf, SpecError> {
        let resolved = self.resolve(p);
        if resolved.is_file() {
            Ok(resolved)
        } else {
            Err(self.invalid(
                location,
                format!(
                    "{what} {} does not exist (looked for {}){}",
                    p.display(),
                    resolved.display(),
                    hint(&resolved)
                ),
            ))
        }
    }

    fn check(&self, file: JobFile) -> Result<JobSpec, SpecError> {
        let job = &file.job;
        if job.name.trim().is_empty() {
            return Err(self.invalid("[job] name", "must not be empty"));
        }
        let max = job.max_parallelism.unwrap_or(KeyGroups::DEFAULT_COUNT);
        if !(1..=MAX_KEY_GROUPS).contains(&max) {
            return Err(self.invalid(
                "[job] max_parallelism",
                format!("{max} is out of range: use 1 to {MAX_KEY_GROUPS}"),
            ));
        }
        let batch_size = job.batch_size.unwrap_or(DEFAULT_BATCH_SIZE);
        if !(1..=1 << 20).contains(&batch_size) {
            return Err(self.invalid(
                "[job] batch_size",
                format!("{batch_size} is out of range: use 1 to 1048576"),
            ));
        }
        if file.operators.is_empty() {
            return Err(self.invalid("[[operators]]", "a job needs at least one operator"));
        }
        let source = self.check_source(file.source)?;
        let mut names = HashSet::new();
        let mut operators = Vec::new();
        for (i, op) in file.operators.into_iter().enumerate() {
            let at = format!("operators[{i}] (`{}`)", op.name);
            if op.name.trim().is_empty() {
                return Err(self.invalid(format!("operators[{i}] name"), "must not be empty"));
            }
            if !names.insert(op.name.clone()) {
                return Err(
                    self.invalid(format!("{at} name"), "another operator has the same name")
                );
            }
            operators.push(self.check_operator(&at, op, max)?);
        }
        let sink = match file.sink {
            SinkSpec::Stdout => SinkSpec::Stdout,
            SinkSpec::Discard => SinkSpec::Discard,
            SinkSpec::Kafka(kafka) => {
                for (field, value) in [("brokers", &kafka.brokers), ("topic", &kafka.topic)] {
                    if value.trim().is_empty() {
                        return Err(self.invalid(format!("[sink] {field}"), "must not be empty"));
                    }
                }
                if kafka.transactions && kafka.guarantee != Guarantee::ExactlyOnce {
                    return Err(self.invalid(
                        "[sink] transactions",
                        "broker transactions publish each checkpoint's output exactly once: \
                         they need guarantee = \"exactly-once\"",
                    ));
                }
                if kafka.guarantee == Guarantee::ExactlyOnce && file.checkpoints.is_none() {
                    return Err(self.invalid(
                        "[sink] guarantee",
                        "\"exactly-once\" publishes output as checkpoints complete: add a \
                         [checkpoints] section, or use guarantee = \"at-least-once\"",
                    ));
                }
                SinkSpec::Kafka(kafka)
            }
            SinkSpec::File { path } => {
                let resolved = self.resolve(&path);
                let parent = resolved.parent().filter(|p| !p.as_os_str().is_empty());
                if let Some(parent) = parent
                    && !parent.is_dir()
                {
                    return Err(self.invalid(
                        "[sink] path",
                        format!(
                            "the folder {} of the output file does not exist",
                            parent.display()
                        ),
                    ));
                }
                SinkSpec::File { path: resolved }
            }
        };
        if matches!(source, SourceSpec::Kafka(_)) && file.checkpoints.is_none() {
            return Err(self.invalid(
                "[checkpoints]",
                "a Kafka source keeps its offsets in checkpoints: add a [checkpoints] section",
            ));
        }
        if let (SinkSpec::File { path: output }, SourceSpec::TextLines { path: input, .. })
        | (SinkSpec::File { path: output }, SourceSpec::JsonLines { path: input, .. }) =
            (&sink, &source)
            && same_file(output, input)
        {
            return Err(self.invalid(
                "[sink] path",
                format!(
                    "{} is the source's input: the output would overwrite it",
                    output.display()
                ),
            ));
        }
        self.check_dead_letters(&source, &operators, &sink)?;
        let checkpoints = file
            .checkpoints
            .map(|c| self.check_checkpoints(c))
            .transpose()?;
        let watermark = match &source {
            SourceSpec::TextLines { watermark, .. }
            | SourceSpec::JsonLines { watermark, .. }
            | SourceSpec::Kafka(KafkaSourceSpec { watermark, .. })
            | SourceSpec::Generator { watermark, .. } => watermark.map(|w| WatermarkPolicy {
                max_out_of_order: Duration::from_millis(w.max_out_of_order_ms),
                idle: w.idle_ms.map(Duration::from_millis),
                interval: match w.interval_ms {
                    None => Some(crate::job::watermarks::DEFAULT_INTERVAL),
                    Some(0) => None,
                    Some(ms) => Some(Duration::from_millis(ms)),
                },
            }),
        };
        Ok(JobSpec {
            name: file.job.name,
            key_groups: KeyGroups::new(max),
            batch_size,
            source,
            operators,
            sink,
            checkpoints,
            watermark,
            input_partition: None,
        })
    }

    /// Resolves a record policy's dead-letter path; its folder must exist.
    fn check_policy(
        &self,
        location: &str,
        policy: RecordPolicy,
    ) -> Result<RecordPolicy, SpecError> {
        let RecordPolicy::DeadLetter(path) = policy else {
            return Ok(policy);
        };
        let resolved = self.resolve(&path);
        let parent = resolved.parent().filter(|p| !p.as_os_str().is_empty());
        if resolved.file_name().is_none() || parent.is_some_and(|p| !p.is_dir()) {
            return Err(self.invalid(
                location,
                format!(
                    "dead_letter {}: name a file in an existing folder",
                    path.display()
                ),
            ));
        }
        Ok(RecordPolicy::DeadLetter(resolved))
    }

    /// Dead letters go to their own files: not the output, not the input.
    fn check_dead_letters(
        &self,
        source: &SourceSpec,
        operators: &[OperatorSpec],
        sink: &SinkSpec,
    ) -> Result<(), SpecError> {
        let mut taken: Vec<(&Path, &str)> = Vec::new();
        if let SinkSpec::File { path } = sink {
            taken.push((path, "the sink's output"));
        }
        if let SourceSpec::TextLines { path, .. } | SourceSpec::JsonLines { path, .. } = source {
            taken.push((path, "the source's input"));
        }
        let policies = source_policy(source)
            .map(|p| ("[source] on_bad_record".to_owned(), p))
            .into_iter()
            .chain(operators.iter().flat_map(|op| {
                [
                    (format!("operator `{}` on_error", op.name), &op.on_error),
                    (
                        format!("operator `{}` on_bad_record", op.name),
                        &op.on_bad_record,
                    ),
                ]
            }));
        let mut topics: Vec<(&str, &str)> = Vec::new();
        if let SinkSpec::Kafka(kafka) = sink {
            topics.push((&kafka.topic, "the sink's output topic"));
        }
        if let SourceSpec::Kafka(kafka) = source {
            topics.push((&kafka.topic, "the source's input topic"));
        }
        for (location, policy) in policies {
            if let Some(path) = policy.dead_letter()
                && let Some((_, what)) = taken.iter().find(|(t, _)| *t == path)
            {
                return Err(self.invalid(
                    location,
                    format!("dead_letter {} is {what}", path.display()),
                ));
            }
            if let RecordPolicy::DeadLetterTopic(topic) = policy {
                if topic.trim().is_empty() {
                    return Err(self.invalid(location, "dead_letter_topic must not be empty"));
                }
                if topics.is_empty() {
                    return Err(self.invalid(
                        location,
                        "dead_letter_topic goes to the brokers of the job's Kafka source or \
                         sink, and this job has neither: use { dead_letter = \"path\" }",
                    ));
                }
                if let Some((_, what)) = topics.iter().find(|(t, _)| t == topic) {
                    return Err(
                        self.invalid(location, format!("dead_letter_topic `{topic}` is {what}"))
                    );
                }
            }
        }
        Ok(())
    }

    fn check_checkpoints(&self, file: CheckpointsFile) -> Result<CheckpointSpec, SpecError> {
        let store = match file.store {
            Some(url) => {
                url::Url::parse(&url).map_err(|e| {
                    self.invalid(
                        "[checkpoints] store",
                        format!("{url:?} is not a URL ({e}); write e.g. \"file:///var/weir\" or \"s3://bucket/prefix\""),
                    )
                })?;
                url
            }
            None => {
                let dir = std::path::absolute(self.base.join(CheckpointSpec::DEFAULT_FOLDER))
                    .map_err(|e| self.invalid("[checkpoints] store", e.to_string()))?;
                url::Url::from_directory_path(&dir)
                    .map_err(|()| {
                        self.invalid(
                            "[checkpoints] store",
                            format!("cannot name {} as a URL", dir.display()),
                        )
                    })?
                    .to_string()
            }
        };
        let interval = Duration::from_millis(
            file.interval_ms
                .unwrap_or(CheckpointSpec::DEFAULT_INTERVAL.as_millis() as u64),
        );
        if interval.is_zero() {
            return Err(self.invalid("[checkpoints] interval_ms", "must be at least 1"));
        }
        let timeout = file
            .timeout_ms
            .map_or(CheckpointSpec::DEFAULT_TIMEOUT, Duration::from_millis);
        if timeout.is_zero() {
            return Err(self.invalid("[checkpoints] timeout_ms", "must be at least 1"));
        }
        let retain = file.retain.unwrap_or(CheckpointSpec::DEFAULT_RETAIN);
        if retain == 0 {
            return Err(self.invalid(
                "[checkpoints] retain",
                "must be at least 1: a job always keeps its latest checkpoint",
            ));
        }
        let max_chain = file.max_chain.unwrap_or(CheckpointSpec::DEFAULT_MAX_CHAIN);
        if max_chain < 2 {
            return Err(self.invalid(
                "[checkpoints] max_chain",
                "must be at least 2 (the newest increment and one being drained)",
            ));
        }
        if file.full_snapshot_every == Some(0) {
            return Err(self.invalid("[checkpoints] full_snapshot_every", "must be at least 1"));
        }
        Ok(CheckpointSpec {
            store,
            interval,
            timeout,
            tolerable_failures: file
                .tolerable_failures
                .unwrap_or(CheckpointSpec::DEFAULT_TOLERABLE_FAILURES),
            retain,
            chains: ChainPolicy {
                max_chain,
                rewrite_budget: file
                    .rewrite_budget
                    .unwrap_or(CheckpointSpec::DEFAULT_REWRITE_BUDGET),
                full_snapshot_every: file.full_snapshot_every,
            },
            restart_attempts: file
                .restart_attempts
                .unwrap_or(CheckpointSpec::DEFAULT_RESTART_ATTEMPTS),
            on_limit: file.on_limit.unwrap_or_default(),
        })
    }

    fn check_source(&self, source: SourceSpec) -> Result<SourceSpec, SpecError> {
        let (SourceSpec::TextLines { watermark, .. }
        | SourceSpec::JsonLines { watermark, .. }
        | SourceSpec::Kafka(KafkaSourceSpec { watermark, .. })
        | SourceSpec::Generator { watermark, .. }) = &source;
        if watermark.is_some_and(|w| w.idle_ms == Some(0)) {
            return Err(self.invalid(
                "[source] watermark.idle_ms",
                "must be at least 1: an input idle at once would never hold the watermark back",
            ));
        }
        let (SourceSpec::JsonLines {
            timestamp,
            on_bad_timestamp,
            ..
        }
        | SourceSpec::Kafka(KafkaSourceSpec {
            timestamp,
            on_bad_timestamp,
            ..
        })) = &source
        else {
            return self.check_source_kind(source);
        };
        if timestamp.is_none() && *on_bad_timestamp != TimestampPolicy::default() {
            return Err(self.invalid(
                "[source] on_bad_timestamp",
                "applies to the timestamps `timestamp` reads, and the source has no timestamp",
            ));
        }
        self.check_source_kind(source)
    }

    fn check_source_kind(&self, source: SourceSpec) -> Result<SourceSpec, SpecError> {
        Ok(match source {
            SourceSpec::TextLines { path, watermark } => SourceSpec::TextLines {
                path: self
                    .existing_file("[source] path", &path, "input file", |_| String::new())?,
                watermark,
            },
            SourceSpec::JsonLines {
                path,
                key_pointer,
                on_bad_record,
                timestamp,
                on_bad_timestamp,
                watermark,
            } => {
                if watermark.is_some() && timestamp.is_none() {
                    return Err(self.invalid(
                        "[source] watermark",
                        "json-lines records have no event time without a timestamp: add \
                         timestamp = { json_pointer = \"/ts\", format = \"ms\" } (where each \
                         line's time is), or remove the watermark",
                    ));
                }
                let pointers = [
                    ("[source] key_pointer", key_pointer.as_ref()),
                    (
                        "[source] timestamp.json_pointer",
                        timestamp.as_ref().map(|t| &t.json_pointer),
                    ),
                ];
                for (at, pointer) in pointers {
                    if let Some(p) = pointer
                        && !(p.is_empty() || p.starts_with('/'))
                    {
                        return Err(self.invalid(
                            at,
                            format!(
                                "{p:?} is not a JSON pointer: it must be empty or start with '/'"
                            ),
                        ));
                    }
                }
                SourceSpec::JsonLines {
                    path: self
                        .existing_file("[source] path", &path, "input file", |_| String::new())?,
                    key_pointer,
                    on_bad_record: self.check_policy("[source] on_bad_record", on_bad_record)?,
                    timestamp,
                    on_bad_timestamp,
                    watermark,
                }
            }
            SourceSpec::Kafka(mut kafka) => {
                for (field, value) in [
                    ("brokers", &kafka.brokers),
                    ("topic", &kafka.topic),
                    ("group_id", &kafka.group_id),
                ] {
                    if value.trim().is_empty() {
                        return Err(self.invalid(format!("[source] {field}"), "must not be empty"));
                    }
                }
                let pointers = [
                    ("[source] key_pointer", kafka.key_pointer.as_ref()),
                    (
                        "[source] timestamp.json_pointer",
                        kafka.timestamp.as_ref().map(|t| &t.json_pointer),
                    ),
                ];
                for (at, pointer) in pointers {
                    if let Some(p) = pointer {
                        if kafka.format != ValueFormat::Json {
                            return Err(self.invalid(
                                at,
                                "reads JSON: add format = \"json\" (the default, \"raw\", \
                                 takes key and time from the Kafka message)",
                            ));
                        }
                        if !(p.is_empty() || p.starts_with('/')) {
                            return Err(self.invalid(
                                at,
                                format!(
                                    "{p:?} is not a JSON pointer: it must be empty or start with '/'"
                                ),
                            ));
                        }
                    }
                }
                kafka.on_bad_record =
                    self.check_policy("[source] on_bad_record", kafka.on_bad_record)?;
                SourceSpec::Kafka(kafka)
            }
            SourceSpec::Generator {
                records,
                keys,
                records_per_second,
                clock,
                watermark,
            } => {
                if keys == 0 {
                    return Err(self.invalid("[source] keys", "must be at least 1"));
                }
                if records_per_second == Some(0) {
                    return Err(self.invalid("[source] records_per_second", "must be at least 1"));
                }
                if clock.events_per_second == 0 {
                    return Err(
                        self.invalid("[source] clock.events_per_second", "must be at least 1")
                    );
                }
                if !(0.0..=1.0).contains(&clock.disorder) {
                    return Err(self.invalid(
                        "[source] clock.disorder",
                        "is the fraction of records that come late: between 0 and 1",
                    ));
                }
                SourceSpec::Generator {
                    records,
                    keys,
                    records_per_second,
                    clock,
                    watermark,
                }
            }
        })
    }

    fn check_operator(
        &self,
        at: &str,
        op: OperatorFile,
        max: u32,
    ) -> Result<OperatorSpec, SpecError> {
        if !(1..=max).contains(&op.parallelism) {
            return Err(self.invalid(
                format!("{at} parallelism"),
                format!(
                    "{} is out of range: use 1 to max_parallelism ({max})",
                    op.parallelism
                ),
            ));
        }
        let component = self.existing_file(
            &format!("{at} component"),
            &op.component,
            "component",
            crate::build::missing_component_hint,
        )?;
        let key_by = match op.key_by {
            None => None,
            Some(KeyByFile::Named(name)) if name == "key" => Some(KeyBy::RecordKey),
            Some(KeyByFile::Named(other)) => {
                return Err(self.invalid(
                    format!("{at} key_by"),
                    format!(
                        "unknown key_by {other:?}: use \"key\" or {{ json_pointer = \"/field\" }}"
                    ),
                ));
            }
            Some(KeyByFile::Pointer { json_pointer }) => {
                if !(json_pointer.is_empty() || json_pointer.starts_with('/')) {
                    return Err(self.invalid(
                        format!("{at} key_by.json_pointer"),
                        format!("{json_pointer:?} is not a JSON pointer: it must be empty or start with '/'"),
                    ));
                }
                Some(KeyBy::JsonPointer(json_pointer))
            }
        };
        let config_json = serde_json::to_string(&op.config).map_err(|e| {
            self.invalid(
                format!("{at} config"),
                format!("cannot be expressed as JSON: {e}"),
            )
        })?;
        let defaults = GuestLimits::default();
        // In bytes; a shift would wrap a number of MiB too large (2^44 MiB became 0 bytes).
        let bytes = |field: &str, mb: usize| {
            mb.checked_mul(1 << 20).ok_or_else(|| {
                self.invalid(
                    format!("{at} limits.{field}"),
                    format!("{mb} MiB is more than can be addressed"),
                )
            })
        };
        let memory_mb = op.limits.memory_mb.map(|mb| bytes("memory_mb", mb));
        let state_mb = op.limits.state_mb.map(|mb| bytes("state_mb", mb));
        let limits = GuestLimits {
            memory_bytes: memory_mb.transpose()?.unwrap_or(defaults.memory_bytes),
            cpu_time_per_call: op
                .limits
                .cpu_ms_per_call
                .map_or(defaults.cpu_time_per_call, Duration::from_millis),
            state_bytes: state_mb.transpose()?.or(defaults.state_bytes),
        };
        if limits.memory_bytes < 1 << 20 {
            return Err(self.invalid(format!("{at} limits.memory_mb"), "must be at least 1"));
        }
        if limits.cpu_time_per_call.is_zero() {
            return Err(self.invalid(
                format!("{at} limits.cpu_ms_per_call"),
                "must be at least 1: every call would be stopped at once",
            ));
        }
        if limits.state_bytes == Some(0) {
            return Err(self.invalid(
                format!("{at} limits.state_mb"),
                "must be at least 1: no state could be written",
            ));
        }
        if key_by.is_none() && op.on_bad_record != RecordPolicy::Fail {
            return Err(self.invalid(
                format!("{at} on_bad_record"),
                "applies to records this operator's key_by cannot key, and it has no key_by",
            ));
        }
        Ok(OperatorSpec {
            name: op.name,
            component,
            parallelism: op.parallelism,
            key_by,
            config_json,
            limits,
            on_error: self.check_policy(&format!("{at} on_error"), op.on_error)?,
            on_bad_record: self.check_policy(&format!("{at} on_bad_record"), op.on_bad_record)?,
        })
    }
}

/// Whether two paths name one file: the same path, or the same file through links.
fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || std::fs::canonicalize(a)
            .ok()
            .zip(std::fs::canonicalize(b).ok())
            .is_some_and(|(a, b)| a == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_lose_their_dot_segments_but_not_through_a_link() {
        let clean = |p: &str| without_dot_segments(Path::new(p));
        assert_eq!(
            clean("/a/jobs/../data/./in.txt"),
            Path::new("/a/data/in.txt")
        );
        assert_eq!(clean("jobs/../../in.txt"), Path::new("../in.txt"));
        assert_eq!(clean("/../in.txt"), Path::new("/in.txt"));
        assert_eq!(clean("./in.txt"), Path::new("in.txt"));
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("deep/target");
        std::fs::create_dir_all(&target).expect("dirs");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        // `link/..` is `deep`, not the temporary folder: the `..` stays.
        let through = without_dot_segments(&link.join("../in.txt"));
        assert_eq!(through, link.join("../in.txt"));
    }

    fn parse(text: &str, dir: &Path) -> Result<JobSpec, String> {
        JobSpec::parse(text, Path::new("job.toml"), dir).map_err(|e| e.to_string())
    }

    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("in.txt"), "a b\n").expect("write");
        std::fs::write(dir.path().join("op.wasm"), b"").expect("write");
        dir
    }

    const GOOD: &str = r#"
        [job]
        name = "wc"
        [source]
        kind = "text-lines"
        path = "in.txt"
        [[operators]]
        name = "count"
        component = "op.wasm"
        parallelism = 3
        key_by = "key"
        config = { a = 1, b = "x" }
        [sink]
        kind = "file"
        path = "out.txt"
    "#;

    #[test]
    fn a_good_file_resolves_paths_and_defaults() {
        let dir = fixture();
        let spec = parse(GOOD, dir.path()).expect("valid");
        assert_eq!(spec.key_groups.count(), 128);
        assert_eq!(spec.batch_size, DEFAULT_BATCH_SIZE);
        assert_eq!(
            spec.source,
            SourceSpec::TextLines {
                path: dir.path().join("in.txt"),
                watermark: None,
            }
        );
        let op = &spec.operators[0];
        assert_eq!(
            (op.parallelism, op.key_by.clone()),
            (3, Some(KeyBy::RecordKey))
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&op.config_json).expect("json"),
            serde_json::json!({"a": 1, "b": "x"})
        );
        assert_eq!(
            spec.sink,
            SinkSpec::File {
                path: dir.path().join("out.txt")
            }
        );
    }

    #[test]
    fn limits_too_large_to_address_are_errors_not_wrapped() {
        let dir = fixture();
        let with = |limits: &str| {
            let text = GOOD.replace("key_by = \"key\"", &format!("key_by = \"key\"\n{limits}"));
            parse(&text, dir.path())
        };
        // 2^44 MiB is 2^64 bytes: shifted, it wrapped to 0 bytes (and 2^44 + 1 to one MiB).
        for limits in [
            "limits = { memory_mb = 17592186044416 }",
            "limits = { memory_mb = 17592186044417 }",
            "limits = { state_mb = 17592186044416 }",
        ] {
            let e = with(limits).expect_err(limits);
            assert!(e.contains("MiB is more than can be addressed"), "{e}");
        }
        let spec = with("limits = { memory_mb = 64, state_mb = 2 }").expect("valid");
        let limits = spec.operators[0].limits;
        assert_eq!(
            (limits.memory_bytes, limits.state_bytes),
            (64 << 20, Some(2 << 20))
        );
    }

    #[test]
    fn kafka_sections_are_checked() {
        let dir = fixture();
        let kafka = GOOD
            .replace(
                "kind = \"text-lines\"\n        path = \"in.txt\"",
                "kind = \"kafka\"\n        brokers = \"b:9092\"\n        topic = \"t\"\n        \
                 group_id = \"g\"\n        start = { timestamp_ms = 5 }",
            )
            .replace(
                "kind = \"file\"\n        path = \"out.txt\"",
                "kind = \"kafka\"\n        brokers = \"b:9092\"\n        topic = \"out\"",
            );
        let with_checkpoints = format!("{kafka}\n[checkpoints]\n");
        let spec = parse(&with_checkpoints, dir.path()).expect("valid");
        let SourceSpec::Kafka(source) = &spec.source else {
            panic!("not a Kafka source: {:?}", spec.source);
        };
        assert_eq!(
            source.start,
            crate::kafka::settings::StartPosition::Timestamp { timestamp_ms: 5 }
        );
        assert!(matches!(&spec.sink, SinkSpec::Kafka(k) if k.guarantee == Guarantee::ExactlyOnce));
        let err = parse(&kafka, dir.path()).expect_err("no checkpoints");
        assert!(err.contains("[sink] guarantee"), "{err}");
        let at_least_once = kafka.replace(
            "topic = \"out\"",
            "topic = \"out\"\nguarantee = \"at-least-once\"",
        );
        let err = parse(&at_least_once, dir.path()).expect_err("no checkpoints");
        assert!(
            err.contains("a Kafka source keeps its offsets in checkpoints"),
            "{err}"
        );
        let raw_pointer =
            with_checkpoints.replace("group_id = \"g\"", "group_id = \"g\"\nkey_pointer = \"/u\"");
        let err = parse(&raw_pointer, dir.path()).expect_err("raw values have no pointer");
        assert!(err.contains("[source] key_pointer: reads JSON"), "{err}");
        let no_group = with_checkpoints.replace("group_id = \"g\"", "group_id = \" \"");
        let err = parse(&no_group, dir.path()).expect_err("empty group");
        assert!(
            err.contains("[source] group_id: must not be empty"),
            "{err}"
        );
    }

    #[test]
    fn a_dead_letter_topic_goes_to_the_jobs_kafka_brokers() {
        let dir = fixture();
        let letters = "key_by = \"key\"\n        on_error = { dead_letter_topic = \"bad\" }";
        // A job without Kafka has no brokers to send them to.
        let plain = GOOD.replace("key_by = \"key\"", letters);
        let err = parse(&plain, dir.path()).expect_err("no brokers");
        assert!(
            err.contains("operator `count` on_error: dead_letter_topic goes to the brokers"),
            "{err}"
        );
        // With a Kafka sink: its brokers and guarantee.
        let sink = "kind = \"kafka\"\n        brokers = \"b:9092\"\n        topic = \"out\"\n        \
                    guarantee = \"at-least-once\"";
        let kafka_sink = plain.replace("kind = \"file\"\n        path = \"out.txt\"", sink);
        let spec = parse(&kafka_sink, dir.path()).expect("valid");
        assert_eq!(
            spec.dead_letter_targets(),
            [RecordPolicy::DeadLetterTopic("bad".into())]
        );
        let letters_sink = spec.dead_letter_topic_sink("bad").expect("a sink");
        assert_eq!(
            (letters_sink.brokers.as_str(), letters_sink.topic.as_str()),
            ("b:9092", "bad")
        );
        assert_eq!(letters_sink.guarantee, Guarantee::AtLeastOnce);
        assert!(spec.dead_letter_files().is_empty());
        // Not into the output.
        let into_output =
            kafka_sink.replace("dead_letter_topic = \"bad\"", "dead_letter_topic = \"out\"");
        let err = parse(&into_output, dir.path()).expect_err("the output topic");
        assert!(err.contains("is the sink's output topic"), "{err}");
        let table = plain.replace("dead_letter_topic = \"bad\"", "dead_letter_topic = 3");
        let err = parse(&table, dir.path()).expect_err("not a topic");
        assert!(err.contains("{ dead_letter_topic = \"topic\" }"), "{err}");
    }

    #[test]
    fn an_unknown_field_is_reported_with_its_line() {
        let dir = fixture();
        let err = parse(
            &GOOD.replace("parallelism = 3", "paralelism = 3"),
            dir.path(),
        )
        .expect_err("bad");
        assert!(err.contains("unknown field `paralelism`"), "{err}");
        assert!(err.contains("line 10"), "{err}");
        let err = parse(
            &GOOD.replace("kind = \"file\"", "kind = \"file\"\nmode = 1"),
            dir.path(),
        )
        .expect_err("bad");
        assert!(err.contains("unknown field `mode`"), "{err}");
    }

    #[test]
    fn a_missing_component_names_the_operator_and_the_path() {
        let dir = fixture();
        let err = parse(&GOOD.replace("op.wasm", "nope.wasm"), dir.path()).expect_err("bad");
        assert!(err.contains("operators[0] (`count`) component"), "{err}");
        assert!(err.contains("nope.wasm does not exist"), "{err}");
    }

    #[test]
    fn semantic_errors_say_where() {
        let dir = fixture();
        let cases = [
            ("parallelism = 3", "parallelism = 0", "parallelism"),
            ("key_by = \"key\"", "key_by = \"value\"", "unknown key_by"),
            (
                "path = \"in.txt\"",
                "path = \"missing.txt\"",
                "[source] path",
            ),
            (
                "name = \"wc\"",
                "name = \"wc\"\nmax_parallelism = 0",
                "max_parallelism",
            ),
            (
                "kind = \"text-lines\"",
                "kind = \"pulsar\"",
                "unknown variant `pulsar`",
            ),
        ];
        for (from, to, expected) in cases {
            let err = parse(&GOOD.replace(from, to), dir.path()).expect_err(to);
            assert!(err.contains(expected), "{to}: {err}");
        }
    }

    /// Settings that parse but would make the job silently wrong are refused where they are
    /// written.
    #[test]
    fn settings_that_would_make_the_job_silently_wrong_are_refused() {
        let dir = fixture();
        std::fs::write(dir.path().join("in.jsonl"), "{}\n").expect("write");
        let json = |source_lines: &str| {
            GOOD.replace(
                "kind = \"text-lines\"\n        path = \"in.txt\"",
                &format!("kind = \"json-lines\"\n        path = \"in.jsonl\"\n{source_lines}"),
            )
        };
        let cases = [
            (
                json("watermark = { max_out_of_order_ms = 100 }"),
                "[source] watermark: json-lines records have no event time without a timestamp",
            ),
            (
                json("on_bad_timestamp = \"skip\""),
                "[source] on_bad_timestamp: applies to the timestamps",
            ),
            (
                GOOD.replace(
                    "path = \"in.txt\"",
                    "path = \"in.txt\"\nwatermark = { idle_ms = 0 }",
                ),
                "[source] watermark.idle_ms: must be at least 1",
            ),
            (
                GOOD.replace("path = \"out.txt\"", "path = \"in.txt\""),
                "[sink] path",
            ),
            (
                GOOD.replace(
                    "key_by = \"key\"",
                    "key_by = \"key\"\nlimits = { cpu_ms_per_call = 0 }",
                ),
                "limits.cpu_ms_per_call: must be at least 1",
            ),
            (
                GOOD.replace(
                    "key_by = \"key\"",
                    "key_by = \"key\"\nlimits = { state_mb = 0 }",
                ),
                "limits.state_mb: must be at least 1",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(&text, dir.path()).expect_err(expected);
            assert!(err.contains(expected), "{expected}: {err}");
        }
        let err = parse(
            &GOOD.replace("path = \"out.txt\"", "path = \"in.txt\""),
            dir.path(),
        )
        .expect_err("output over input");
        assert!(err.contains("the output would overwrite it"), "{err}");
        // With a timestamp, a watermark is what it should be.
        let timed = json(
            "timestamp = { json_pointer = \"/ts\" }\nwatermark = { max_out_of_order_ms = 100 }",
        );
        parse(&timed, dir.path()).expect("valid");
    }
}
