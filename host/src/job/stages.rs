//! A Kafka job's stages: where the job must re-partition its records by a new key
//! (DESIGN.md §12.1).
//!
//! A Kafka job runs a pipeline per input partition, so keyed state is per partition: it is
//! whole only when every record of a key arrives on one partition. The input topic is
//! partitioned by its message key; an operator whose `key_by` is any other key (a field of the
//! value, or the key an upstream operator set, which may be anything) needs its records
//! partitioned anew. The job is cut into stages there: a stage's output toward the next
//! goes through a *repartition topic* keyed by the next stage's key, and the next stage reads
//! that topic as its input, a pipeline per partition (Kafka Streams' repartition topics).
//!
//! [`StagePlan::of`] finds the cuts; `weir plan` prints them. Jobs that read files have one
//! stage: within one process, key groups already bring each key to one subtask.

use std::fmt;
use std::ops::Range;

use crate::connectors::kafka::settings::{
    Guarantee, KafkaSinkSpec, KafkaSourceSpec, RepartitionInput, RepartitionWrite, StartPosition,
    ValueFormat,
};
use crate::job::spec::{JobSpec, KeyBy, RecordPolicy, SinkSpec, SourceSpec};

/// The stages of a job, in order: stage 0 reads the job's source, the last writes its sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagePlan {
    pub stages: Vec<JobStage>,
}

/// One stage: a run of the job's operators with one input partitioning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobStage {
    /// The job's operators this stage runs, by index.
    pub operators: Range<usize>,
    /// Where its records come from: the job's source for stage 0, else the topic the
    /// stage before writes.
    pub input: StageInput,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StageInput {
    Source,
    Repartition(RepartitionTopic),
}

/// A topic between two stages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepartitionTopic {
    pub topic: String,
    /// Its partition count; `None`: as many as the job's input topic.
    pub partitions: Option<u32>,
    /// Its `retention.ms` when Weir creates it; `None`: the brokers' default.
    pub retention_ms: Option<u64>,
    /// The operator that reads it first, whose key partitions it.
    pub operator: String,
    pub key_by: KeyBy,
}

impl StagePlan {
    /// The stages of `spec`: one unless it reads Kafka and re-keys.
    pub fn of(spec: &JobSpec) -> Self {
        let all = 0..spec.operators.len();
        let SourceSpec::Kafka(kafka) = &spec.source else {
            return Self {
                stages: vec![JobStage {
                    operators: all,
                    input: StageInput::Source,
                }],
            };
        };
        let mut stages = vec![JobStage {
            operators: 0..0,
            input: StageInput::Source,
        }];
        // Whether the current stage's records arrive partitioned by their record key: the
        // message key, unless the source takes the key from the value.
        let mut keyed_input = kafka.key_pointer.is_none();
        for (index, op) in spec.operators.iter().enumerate() {
            let stage = stages.last_mut().expect("one stage at least");
            let first = stage.operators.is_empty();
            let rekeys = match &op.key_by {
                None => false,
                Some(KeyBy::RecordKey) => !(first && keyed_input),
                Some(KeyBy::JsonPointer(_)) => true,
            };
            if rekeys {
                stages.push(JobStage {
                    operators: index..index + 1,
                    input: StageInput::Repartition(RepartitionTopic {
                        topic: op
                            .repartition
                            .topic
                            .clone()
                            .unwrap_or_else(|| default_topic(&spec.name, &op.uid)),
                        partitions: op.repartition.partitions,
                        retention_ms: op.repartition.retention_ms,
                        operator: op.name.clone(),
                        key_by: op.key_by.clone().expect("re-keys"),
                    }),
                });
                // The topic is keyed by the key this operator groups by.
                keyed_input = true;
            } else {
                stage.operators.end = index + 1;
            }
        }
        Self { stages }
    }

    /// Whether the job re-keys, and so needs repartition topics.
    pub fn rekeys(&self) -> bool {
        self.stages.len() > 1
    }

    /// The topics between stages, in order.
    pub fn topics(&self) -> impl Iterator<Item = &RepartitionTopic> {
        self.stages.iter().filter_map(|s| match &s.input {
            StageInput::Repartition(topic) => Some(topic),
            StageInput::Source => None,
        })
    }

    /// The job each stage runs, as a Kafka job of its own (DESIGN.md §12.1), for `spec` (the
    /// job the plan was made of, which reads Kafka). `partitions[k]` is the partition count
    /// of stage k's input: the job's topic, then each repartition topic.
    ///
    /// Stage 0 is the job itself, up to the first cut. Stage k reads the topic before it in
    /// the consumer group `<group>.stage-<k>`, as the job `<job>.stage-<k>` (so its
    /// checkpoints have a folder of their own), from the earliest offset, and takes its
    /// event time from its writers' markers. Every stage but the last writes the next topic,
    /// with the guarantee of the job's Kafka sink (exactly once if the job's sink is not
    /// Kafka), on the brokers and client properties of the job's source.
    pub fn stage_jobs(&self, spec: &JobSpec, partitions: &[u32]) -> Vec<JobSpec> {
        let SourceSpec::Kafka(kafka) = &spec.source else {
            return vec![spec.clone()];
        };
        let (guarantee, transactions) = match &spec.sink {
            SinkSpec::Kafka(sink) => (sink.guarantee, sink.transactions),
            _ => (Guarantee::ExactlyOnce, false),
        };
        let mut jobs = Vec::with_capacity(self.stages.len());
        for (k, stage) in self.stages.iter().enumerate() {
            let mut job = spec.clone();
            job.operators = spec.operators[stage.operators.clone()].to_vec();
            if let StageInput::Repartition(topic) = &stage.input {
                job.name = format!("{}.stage-{k}", spec.name);
                job.source = SourceSpec::Kafka(KafkaSourceSpec {
                    topic: topic.topic.clone(),
                    group_id: format!("{}.stage-{k}", kafka.group_id),
                    start: StartPosition::Earliest,
                    format: ValueFormat::Raw,
                    key_pointer: None,
                    timestamp: None,
                    on_bad_timestamp: Default::default(),
                    on_bad_record: RecordPolicy::Fail,
                    watermark: None,
                    repartition_input: Some(RepartitionInput {
                        partitions: partitions[k],
                        origin: Vec::new(),
                    }),
                    ..kafka.clone()
                });
                job.watermark = None;
            }
            if let Some(JobStage {
                input: StageInput::Repartition(next),
                ..
            }) = self.stages.get(k + 1)
            {
                job.sink = SinkSpec::Kafka(KafkaSinkSpec {
                    brokers: kafka.brokers.clone(),
                    topic: next.topic.clone(),
                    guarantee,
                    transactions,
                    connect_timeout_ms: kafka.connect_timeout_ms,
                    properties: kafka.properties.clone(),
                    repartition: Some(RepartitionWrite {
                        key_by: next.key_by.clone(),
                        partitions: partitions[k + 1],
                        writers: partitions[k],
                        writer: 0,
                    }),
                });
            }
            jobs.push(job);
        }
        jobs
    }

    /// The plan as `weir plan` prints it, for `spec` (the job it was made of).
    pub fn describe<'a>(&'a self, spec: &'a JobSpec) -> impl fmt::Display + 'a {
        Described { plan: self, spec }
    }
}

/// Whether a Kafka topic name may hold `c`.
pub fn is_topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// `weir.<job>.<uid>.repartition` for the operator of that uid, with any character a topic
/// name cannot hold as `_`.
pub fn default_topic(job: &str, operator: &str) -> String {
    let clean = |name: &str| -> String {
        name.chars()
            .map(|c| if is_topic_char(c) { c } else { '_' })
            .collect()
    };
    format!("weir.{}.{}.repartition", clean(job), clean(operator))
}

struct Described<'a> {
    plan: &'a StagePlan,
    spec: &'a JobSpec,
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spec = self.spec;
        let count = self.plan.stages.len();
        writeln!(
            f,
            "job `{}`: {count} stage{}",
            spec.name,
            if count == 1 { "" } else { "s" }
        )?;
        for (n, stage) in self.plan.stages.iter().enumerate() {
            let input = match (&stage.input, &spec.source) {
                (StageInput::Source, SourceSpec::Kafka(kafka)) => source_kafka(kafka),
                (StageInput::Source, source) => format!("source {}", source.kind()),
                (StageInput::Repartition(topic), _) => format!(
                    "topic `{}` ({} partitions, keyed by {}{})",
                    topic.topic,
                    topic
                        .partitions
                        .map_or_else(|| "as many as the input's".to_owned(), |p| p.to_string()),
                    key_by(&topic.key_by),
                    topic
                        .retention_ms
                        .map_or_else(String::new, |ms| format!(", retention {ms} ms")),
                ),
            };
            // Numbered as their folders and groups are: stage 0 is the job's own.
            write!(f, "  stage {n}: {input}")?;
            for op in &spec.operators[stage.operators.clone()] {
                write!(f, " -> {} (x{})", op.name, op.parallelism)?;
            }
            match self.plan.stages.get(n + 1).map(|s| &s.input) {
                Some(StageInput::Repartition(next)) => {
                    writeln!(f, " -> topic `{}`", next.topic)?;
                }
                _ => writeln!(f, " -> sink {}", sink(&spec.sink))?,
            }
        }
        if !self.plan.rekeys() && matches!(spec.source, SourceSpec::Kafka(_)) {
            writeln!(
                f,
                "  no operator re-keys: each input partition's pipeline holds all of its keys"
            )?;
        }
        Ok(())
    }
}

fn source_kafka(kafka: &KafkaSourceSpec) -> String {
    let keyed = match &kafka.key_pointer {
        None => "keyed by the message key".to_owned(),
        Some(pointer) => format!("record key from {pointer:?}, not the message key"),
    };
    format!("source kafka topic `{}` ({keyed})", kafka.topic)
}

fn key_by(key_by: &KeyBy) -> String {
    match key_by {
        KeyBy::RecordKey => "the record key".to_owned(),
        KeyBy::JsonPointer(pointer) => format!("the value at {pointer:?}"),
    }
}

fn sink(sink: &SinkSpec) -> String {
    match sink {
        SinkSpec::Kafka(kafka) => format!("kafka topic `{}`", kafka.topic),
        other => other.kind().to_owned(),
    }
}

#[cfg(test)]
mod tests;
