//! The checker: a [`JobFile`] as written into a [`JobSpec`], paths resolved against the job
//! file's folder, every setting checked on its own and against the others (a watermark needs
//! a timestamp, a sink may not write the source's file, a dead letter needs somewhere to go),
//! each error naming its section and field.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::file::{
    CheckpointsFile, JobFile, KeyByFile, LimitsFile, OperatorFile, PointerFile, RepartitionFile,
    SinkSpec, SourceSpec,
};
use super::{
    CheckpointSpec, DEFAULT_BATCH_SIZE, JobSpec, KeyBy, OperatorSpec, SpecError, source_policy,
};
use crate::checkpoint::ChainPolicy;
use crate::connectors::kafka::settings::{Guarantee, KafkaSourceSpec, ValueFormat};
use crate::connectors::timestamps::TimestampPolicy;
use crate::job::stages::{StagePlan, is_topic_char};
use crate::job::watermarks::WatermarkPolicy;
use crate::operator::GuestLimits;
use crate::partition::{KeyGroups, MAX_KEY_GROUPS};
use crate::vocabulary::RecordPolicy;

pub(super) struct Checker<'a> {
    pub(super) path: &'a Path,
    pub(super) base: &'a Path,
}

/// `path` without `.` segments, and without `..` ones where the folder before is not a
/// symbolic link (there `..` leads out of the link's target, which only the file system
/// knows): `jobs/../data/in.txt` reads `data/in.txt`, as users see it in errors, summaries and
/// the console.
pub(super) fn without_dot_segments(path: &Path) -> PathBuf {
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

    pub(super) fn check(&self, file: JobFile) -> Result<JobSpec, SpecError> {
        let (max, batch_size) = self.check_job_section(&file)?;
        if file.operators.is_empty() {
            return Err(self.invalid("[[operators]]", "a job needs at least one operator"));
        }
        let source = self.check_source(file.source)?;
        let operators = self.check_operators(file.operators, max)?;
        let sink = self.check_sink(file.sink, file.checkpoints.is_some())?;
        self.check_source_and_sink(&source, &sink, file.checkpoints.is_some())?;
        self.check_dead_letters(&source, &operators, &sink)?;
        let checkpoints = file
            .checkpoints
            .map(|c| self.check_checkpoints(c))
            .transpose()?;
        let watermark = watermark_policy(&source);
        let spec = JobSpec {
            name: file.job.name,
            key_groups: KeyGroups::new(max),
            batch_size,
            source,
            operators,
            sink,
            checkpoints,
            watermark,
            input_partition: None,
        };
        self.check_repartitions_used(&spec)?;
        Ok(spec)
    }

    /// `[job]`: its name, and the key groups and batch size it sets; returns those two.
    fn check_job_section(&self, file: &JobFile) -> Result<(u32, usize), SpecError> {
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
        Ok((max, batch_size))
    }

    /// `[[operators]]`, each named once, and each with a `uid` of its own.
    fn check_operators(
        &self,
        operators: Vec<OperatorFile>,
        max: u32,
    ) -> Result<Vec<OperatorSpec>, SpecError> {
        let mut names = HashSet::new();
        let mut uids = HashSet::new();
        let mut checked = Vec::new();
        for (i, op) in operators.into_iter().enumerate() {
            let at = format!("operators[{i}] (`{}`)", op.name);
            if op.name.trim().is_empty() {
                return Err(self.invalid(format!("operators[{i}] name"), "must not be empty"));
            }
            if !names.insert(op.name.clone()) {
                return Err(
                    self.invalid(format!("{at} name"), "another operator has the same name")
                );
            }
            let op = self.check_operator(&at, op, max)?;
            if !uids.insert(op.uid.clone()) {
                return Err(self.invalid(
                    format!("{at} uid"),
                    format!(
                        "another operator's state is kept under `{}` (its uid, or its name \
                         when it has none)",
                        op.uid
                    ),
                ));
            }
            checked.push(op);
        }
        Ok(checked)
    }

    /// `[sink]`, its path resolved; `checkpointed`: whether the job has `[checkpoints]`.
    fn check_sink(&self, sink: SinkSpec, checkpointed: bool) -> Result<SinkSpec, SpecError> {
        Ok(match sink {
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
                if kafka.guarantee == Guarantee::ExactlyOnce && !checkpointed {
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
        })
    }

    /// What the source and sink need of each other and of `[checkpoints]`.
    fn check_source_and_sink(
        &self,
        source: &SourceSpec,
        sink: &SinkSpec,
        checkpointed: bool,
    ) -> Result<(), SpecError> {
        if matches!(source, SourceSpec::Kafka(_)) && !checkpointed {
            return Err(self.invalid(
                "[checkpoints]",
                "a Kafka source keeps its offsets in checkpoints: add a [checkpoints] section",
            ));
        }
        if let (SinkSpec::File { path: output }, SourceSpec::TextLines { path: input, .. })
        | (SinkSpec::File { path: output }, SourceSpec::JsonLines { path: input, .. }) =
            (sink, source)
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
        Ok(())
    }

    /// A `repartition` setting only on an operator that a repartition topic comes before.
    fn check_repartitions_used(&self, spec: &JobSpec) -> Result<(), SpecError> {
        let plan = StagePlan::of(spec);
        let starts: HashSet<&str> = plan.topics().map(|t| t.operator.as_str()).collect();
        for (i, op) in spec.operators.iter().enumerate() {
            if op.repartition != RepartitionFile::default() && !starts.contains(op.name.as_str()) {
                return Err(self.invalid(
                    format!("operators[{i}] (`{}`) repartition", op.name),
                    "no repartition topic comes before this operator: only a Kafka job's \
                     operator whose key_by re-keys its input has one (`weir plan` shows them)",
                ));
            }
        }
        Ok(())
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
            SourceSpec::TextLines {
                path,
                records_per_second,
                watermark,
            } => SourceSpec::TextLines {
                path: self.input_file(&path)?,
                records_per_second: self.check_pace(records_per_second)?,
                watermark,
            },
            SourceSpec::JsonLines {
                path,
                key_pointer,
                on_bad_record,
                timestamp,
                on_bad_timestamp,
                records_per_second,
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
                if let Some(p) = &key_pointer {
                    self.check_json_pointer("[source] key_pointer", p)?;
                }
                if let Some(t) = &timestamp {
                    self.check_json_pointer("[source] timestamp.json_pointer", &t.json_pointer)?;
                }
                SourceSpec::JsonLines {
                    path: self.input_file(&path)?,
                    key_pointer,
                    on_bad_record: self.check_policy("[source] on_bad_record", on_bad_record)?,
                    timestamp,
                    on_bad_timestamp,
                    records_per_second: self.check_pace(records_per_second)?,
                    watermark,
                }
            }
            SourceSpec::Kafka(kafka) => SourceSpec::Kafka(self.check_kafka_source(kafka)?),
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
                let records_per_second = self.check_pace(records_per_second)?;
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

    /// A source's `records_per_second`, if any: at least 1.
    fn check_pace(&self, records_per_second: Option<u64>) -> Result<Option<u64>, SpecError> {
        if records_per_second == Some(0) {
            return Err(self.invalid("[source] records_per_second", "must be at least 1"));
        }
        Ok(records_per_second)
    }

    /// A file source's input, which must exist.
    fn input_file(&self, path: &Path) -> Result<PathBuf, SpecError> {
        self.existing_file("[source] path", path, "input file", |_| String::new())
    }

    /// `[source] kind = "kafka"`: brokers, topic and group named; pointers only into JSON.
    fn check_kafka_source(&self, mut kafka: KafkaSourceSpec) -> Result<KafkaSourceSpec, SpecError> {
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
                self.check_json_pointer(at, p)?;
            }
        }
        kafka.on_bad_record = self.check_policy("[source] on_bad_record", kafka.on_bad_record)?;
        Ok(kafka)
    }

    /// A JSON pointer: empty (the whole value) or starting with `/`.
    fn check_json_pointer(&self, at: &str, pointer: &str) -> Result<(), SpecError> {
        if pointer.is_empty() || pointer.starts_with('/') {
            return Ok(());
        }
        Err(self.invalid(
            at,
            format!("{pointer:?} is not a JSON pointer: it must be empty or start with '/'"),
        ))
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
        let key_by = self.check_key_by(at, op.key_by)?;
        let config_json = serde_json::to_string(&op.config).map_err(|e| {
            self.invalid(
                format!("{at} config"),
                format!("cannot be expressed as JSON: {e}"),
            )
        })?;
        let limits = self.check_limits(at, &op.limits)?;
        if key_by.is_none() && op.on_bad_record != RecordPolicy::Fail {
            return Err(self.invalid(
                format!("{at} on_bad_record"),
                "applies to records this operator's key_by cannot key, and it has no key_by",
            ));
        }
        self.check_repartition(at, &op.repartition)?;
        let uid = match op.uid {
            Some(uid) if uid.trim().is_empty() => {
                return Err(self.invalid(format!("{at} uid"), "must not be empty"));
            }
            Some(uid) => uid,
            None => op.name.clone(),
        };
        Ok(OperatorSpec {
            repartition: op.repartition,
            uid,
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

impl Checker<'_> {
    /// An operator's `key_by`.
    fn check_key_by(
        &self,
        at: &str,
        key_by: Option<KeyByFile>,
    ) -> Result<Option<KeyBy>, SpecError> {
        Ok(match key_by {
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
            Some(KeyByFile::Pointer(PointerFile { json_pointer })) => {
                self.check_json_pointer(&format!("{at} key_by.json_pointer"), &json_pointer)?;
                Some(KeyBy::JsonPointer(json_pointer))
            }
            Some(KeyByFile::Other(other)) => {
                let found = match &other {
                    toml::Value::Table(table) => format!(
                        "a table of {}",
                        table
                            .keys()
                            .map(|k| format!("{k:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    other => format!("a value of type {}", other.type_str()),
                };
                return Err(self.invalid(
                    format!("{at} key_by"),
                    format!(
                        "{found} is not a key_by: use \"key\" or {{ json_pointer = \"/field\" }}"
                    ),
                ));
            }
        })
    }

    /// An operator's `limits`, in bytes and durations, defaults filled in.
    fn check_limits(&self, at: &str, limits: &LimitsFile) -> Result<GuestLimits, SpecError> {
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
        let memory_mb = limits.memory_mb.map(|mb| bytes("memory_mb", mb));
        let state_mb = limits.state_mb.map(|mb| bytes("state_mb", mb));
        let checked = GuestLimits {
            memory_bytes: memory_mb.transpose()?.unwrap_or(defaults.memory_bytes),
            cpu_time_per_call: limits
                .cpu_ms_per_call
                .map_or(defaults.cpu_time_per_call, Duration::from_millis),
            state_bytes: state_mb.transpose()?.or(defaults.state_bytes),
        };
        if checked.memory_bytes < 1 << 20 {
            return Err(self.invalid(format!("{at} limits.memory_mb"), "must be at least 1"));
        }
        if checked.cpu_time_per_call.is_zero() {
            return Err(self.invalid(
                format!("{at} limits.cpu_ms_per_call"),
                "must be at least 1: every call would be stopped at once",
            ));
        }
        if checked.state_bytes == Some(0) {
            return Err(self.invalid(
                format!("{at} limits.state_mb"),
                "must be at least 1: no state could be written",
            ));
        }
        Ok(checked)
    }

    /// An operator's `repartition` settings, on their own (whether the operator has a topic
    /// before it is checked on the whole job).
    fn check_repartition(&self, at: &str, repartition: &RepartitionFile) -> Result<(), SpecError> {
        if let Some(topic) = &repartition.topic
            && (topic.is_empty() || topic.len() > 249 || !topic.chars().all(is_topic_char))
        {
            return Err(self.invalid(
                format!("{at} repartition.topic"),
                format!(
                    "{topic:?} is not a Kafka topic name: 1 to 249 of a-z, A-Z, 0-9, '.', '_', '-'"
                ),
            ));
        }
        if repartition.partitions == Some(0) {
            return Err(self.invalid(format!("{at} repartition.partitions"), "must be at least 1"));
        }
        if repartition.retention_ms == Some(0) {
            return Err(self.invalid(
                format!("{at} repartition.retention_ms"),
                "must be at least 1: the brokers would delete records before the next stage \
                 read them",
            ));
        }
        Ok(())
    }
}

/// How the source makes watermarks, from its `watermark` setting.
fn watermark_policy(source: &SourceSpec) -> Option<WatermarkPolicy> {
    match source {
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
