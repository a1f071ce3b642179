//! [`Pipeline`]: a job ready to run.

use crate::job::watermarks::WatermarkPolicy;
use std::sync::Arc;

use super::runtime::Checkpointing;
use super::spec::{
    JobSpec, KeyBy, OperatorSpec, RecordPolicy, SinkSpec, SourceSpec, source_policy,
};
use crate::checkpoint::CheckpointStore;
use crate::checkpoint::lease::LeaseCheck;
use crate::checkpoint::storage::StorageError;
use crate::connectors::kafka::{KafkaSink, PartitionSource};
use crate::connectors::{
    ConnectorError, DiscardSink, FileSink, GeneratorSource, JsonLinesSource, LeasedSink, Sink,
    Source, StdoutSink, TextLinesSource,
};
use crate::engine::component_digest::component_digest;
use crate::engine::{Engine, LoadError, OperatorComponent};
use crate::guest::WasmOperatorFactory;
use crate::operator::{GuestLimits, OperatorFactory};
use crate::partition::KeyGroups;

/// One operator of the chain.
#[derive(Clone)]
pub struct Stage {
    pub name: String,
    /// What its state is kept under in checkpoints ([`crate::job::OperatorSpec::uid`]).
    pub uid: String,
    /// The digest of its component, which checkpoints record; `None` for an operator
    /// built in code.
    pub component: Option<String>,
    pub factory: Arc<dyn OperatorFactory>,
    pub parallelism: u32,
    /// How the stage's input is partitioned; `None` spreads batches round robin.
    pub key_by: Option<KeyBy>,
    pub config_json: String,
    pub limits: GuestLimits,
    /// What happens to a record the operator fails on.
    pub on_error: RecordPolicy,
    /// What happens to a record `key_by` cannot key.
    pub on_bad_record: RecordPolicy,
}

/// A place dead letters go to: a file or a topic, with its sink.
pub struct DeadLetterOutput {
    /// The policy that names it (`RecordPolicy::DeadLetter` or `DeadLetterTopic`).
    pub target: RecordPolicy,
    /// What a checkpoint records its position under: the file's path, or `kafka:<topic>`.
    pub name: String,
    pub sink: Box<dyn Sink>,
}

/// A source, a chain of stages and a sink.
pub struct Pipeline {
    pub name: String,
    pub key_groups: KeyGroups,
    pub batch_size: usize,
    pub source: Box<dyn Source>,
    /// What happens to a line the source cannot read.
    pub source_on_bad_record: RecordPolicy,
    pub stages: Vec<Stage>,
    pub sink: Box<dyn Sink>,
    /// The job's dead-letter files and topics (every one its policies name, once each).
    pub dead_letters: Vec<DeadLetterOutput>,
    /// `None`: the job keeps no checkpoints (only its last one, in memory, to end it).
    pub checkpointing: Option<Checkpointing>,
    /// How the source makes watermarks; `None`: only the end of input's.
    pub watermarks: Option<WatermarkPolicy>,
    /// The leases the run holds (`crate::checkpoint::lease`), checked before every commit;
    /// empty for a pipeline run without them (benchmarks, tests).
    pub leases: Vec<LeaseCheck>,
}

/// Why a job could not be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    #[error("operator `{operator}`: {source}")]
    Load { operator: String, source: LoadError },
    #[error("source: {0}")]
    Source(ConnectorError),
    #[error("sink: {0}")]
    Sink(ConnectorError),
    #[error("[checkpoints] store: {0}")]
    Store(StorageError),
}

impl Pipeline {
    /// Loads every component (once per operator, shared by its subtasks) and opens the
    /// source and sink.
    pub fn from_spec(spec: &JobSpec, engine: &Engine) -> Result<Self, PrepareError> {
        let stages = spec
            .operators
            .iter()
            .map(|op| stage(op, engine))
            .collect::<Result<Vec<_>, _>>()?;
        let checkpointing = checkpointing(spec)?;
        let store = checkpointing.as_ref().map(|c| c.store.clone());
        // Names the output in the Kafka sink's record ids: the job and its input partition.
        let lineage = match &spec.input_partition {
            Some(input) => format!("{}/{}", spec.name, input.partition),
            None => spec.name.clone(),
        };
        Ok(Self {
            source: source(spec)?,
            sink: sink(spec, &lineage, store.as_ref())?,
            dead_letters: dead_letters(spec, &lineage, store.as_ref())?,
            checkpointing,
            watermarks: spec.watermark,
            name: spec.name.clone(),
            key_groups: spec.key_groups,
            batch_size: spec.batch_size,
            source_on_bad_record: source_policy(&spec.source).cloned().unwrap_or_default(),
            stages,
            leases: Vec::new(),
        })
    }

    /// Lets the pipeline commit only while `leases` allow it: its coordinator checks them
    /// before it writes a checkpoint's metadata, its sinks before they stage or commit.
    pub fn guarded_by(&mut self, leases: Vec<LeaseCheck>) {
        let sink = std::mem::replace(&mut self.sink, Box::new(DiscardSink));
        self.sink = Box::new(LeasedSink::new(sink, leases.clone()));
        for output in &mut self.dead_letters {
            let sink = std::mem::replace(&mut output.sink, Box::new(DiscardSink));
            output.sink = Box::new(LeasedSink::new(sink, leases.clone()));
        }
        self.leases = leases;
    }
}

/// Where the job's checkpoints live: the job file's store, and in it the job's folder (a
/// Kafka partition's pipeline: its partition's folder). `None` for a job that keeps none.
pub(crate) fn checkpoint_store(spec: &JobSpec) -> Result<Option<CheckpointStore>, StorageError> {
    let Some(checkpoints) = &spec.checkpoints else {
        return Ok(None);
    };
    let store = CheckpointStore::open(&checkpoints.store, &spec.name)?;
    Ok(Some(match &spec.input_partition {
        Some(input) => store.partition(input.partition),
        None => store,
    }))
}

/// The files the job writes, its output's and its dead letters', each of which one run at a
/// time may own.
pub(crate) fn file_outputs(spec: &JobSpec) -> Vec<std::path::PathBuf> {
    let sink = match &spec.sink {
        SinkSpec::File { path } => Some(path.clone()),
        _ => None,
    };
    sink.into_iter().chain(spec.dead_letter_files()).collect()
}

/// The component of an operator of the job file, loaded (compiled or from the cache) and
/// checked against Weir's world; a failure names the operator.
pub(crate) fn load_operator(
    op: &OperatorSpec,
    engine: &Engine,
) -> Result<OperatorComponent, PrepareError> {
    engine
        .load(&op.component)
        .map_err(|source| PrepareError::Load {
            operator: op.name.clone(),
            source,
        })
}

/// An operator of the job file as a stage: its component loaded (compiled or from the cache).
fn stage(op: &OperatorSpec, engine: &Engine) -> Result<Stage, PrepareError> {
    let component = load_operator(op, engine)?;
    let digest = component_digest(&op.component).map_err(|e| PrepareError::Load {
        operator: op.name.clone(),
        source: LoadError::Read {
            path: op.component.clone(),
            source: e,
        },
    })?;
    Ok(Stage {
        name: op.name.clone(),
        uid: op.uid.clone(),
        component: Some(digest),
        factory: Arc::new(WasmOperatorFactory::new(engine.clone(), component)),
        parallelism: op.parallelism,
        key_by: op.key_by.clone(),
        config_json: op.config_json.clone(),
        limits: op.limits,
        on_error: op.on_error.clone(),
        on_bad_record: op.on_bad_record.clone(),
    })
}

/// How the job checkpoints, its store opened; `None` without `[checkpoints]`.
fn checkpointing(spec: &JobSpec) -> Result<Option<Checkpointing>, PrepareError> {
    let store = checkpoint_store(spec).map_err(PrepareError::Store)?;
    Ok(spec
        .checkpoints
        .as_ref()
        .zip(store)
        .map(|(c, store)| Checkpointing {
            store,
            interval: c.interval,
            timeout: c.timeout,
            tolerable_failures: c.tolerable_failures,
            retain: c.retain,
            chains: c.chains,
        }))
}

/// The job's source, opened.
fn source(spec: &JobSpec) -> Result<Box<dyn Source>, PrepareError> {
    Ok(match &spec.source {
        SourceSpec::TextLines {
            path,
            records_per_second,
            ..
        } => Box::new(
            TextLinesSource::open(path)
                .map_err(PrepareError::Source)?
                .paced(*records_per_second),
        ),
        SourceSpec::JsonLines {
            path,
            key_pointer,
            on_bad_record,
            timestamp,
            on_bad_timestamp,
            records_per_second,
            ..
        } => {
            let source = JsonLinesSource::open(path, key_pointer.clone())
                .map_err(PrepareError::Source)?
                .with_timestamps(timestamp.clone(), *on_bad_timestamp)
                .paced(*records_per_second);
            Box::new(match on_bad_record {
                RecordPolicy::Fail => source,
                _ => source.setting_bad_lines_aside(),
            })
        }
        SourceSpec::Generator {
            records,
            keys,
            records_per_second,
            clock,
            ..
        } => Box::new(
            GeneratorSource::new(*records, *keys)
                .with_clock(*clock)
                .paced(*records_per_second),
        ),
        SourceSpec::Kafka(kafka) => {
            let input = spec.input_partition.as_ref().ok_or_else(|| {
                PrepareError::Source(ConnectorError::Kafka {
                    brokers: kafka.brokers.clone(),
                    message: "a Kafka job runs a pipeline per partition \
                              (`weir_host::group::run_group`), not as one pipeline"
                        .into(),
                })
            })?;
            Box::new(PartitionSource::new(kafka, input).map_err(PrepareError::Source)?)
        }
    })
}

/// The job's sink, opened; a Kafka sink names its records by `lineage` and keeps what it
/// stages in `store`.
fn sink(
    spec: &JobSpec,
    lineage: &str,
    store: Option<&CheckpointStore>,
) -> Result<Box<dyn Sink>, PrepareError> {
    Ok(match &spec.sink {
        SinkSpec::Stdout => Box::new(StdoutSink::new()),
        SinkSpec::File { path } => Box::new(FileSink::create(path).map_err(PrepareError::Sink)?),
        SinkSpec::Discard => Box::new(DiscardSink),
        SinkSpec::Kafka(kafka) => Box::new(
            KafkaSink::new(
                kafka,
                lineage.to_owned(),
                store.cloned(),
                KafkaSink::JOB_SINK,
            )
            .map_err(PrepareError::Sink)?,
        ),
    })
}

/// A sink for each place the job's policies send dead letters to, each once.
fn dead_letters(
    spec: &JobSpec,
    lineage: &str,
    store: Option<&CheckpointStore>,
) -> Result<Vec<DeadLetterOutput>, PrepareError> {
    spec.dead_letter_targets()
        .into_iter()
        .map(|target| {
            let (name, sink): (String, Box<dyn Sink>) = match &target {
                RecordPolicy::DeadLetterTopic(topic) => {
                    let kafka = spec.dead_letter_topic_sink(topic).ok_or_else(|| {
                        PrepareError::Sink(ConnectorError::Kafka {
                            brokers: String::new(),
                            message: format!(
                                "dead_letter_topic `{topic}` needs a Kafka source or sink"
                            ),
                        })
                    })?;
                    let sink = KafkaSink::new(
                        &kafka,
                        format!("{lineage}/dead-letters"),
                        store.cloned(),
                        &format!("dead-letters/{topic}"),
                    )
                    .map_err(PrepareError::Sink)?;
                    (format!("kafka:{topic}"), Box::new(sink))
                }
                other => {
                    let path = other.dead_letter().unwrap_or(std::path::Path::new(""));
                    let sink = FileSink::create(path).map_err(PrepareError::Sink)?;
                    (path.display().to_string(), Box::new(sink))
                }
            };
            Ok(DeadLetterOutput { target, name, sink })
        })
        .collect::<Result<_, PrepareError>>()
}
