//! Sources and sinks: where records come from and where they go.
//!
//! - [`Source`]: reads batches of records; [`lines`] (text and JSON lines) and [`generator`],
//!   either at most so many per second ([`pace`]).
//! - [`Sink`]: writes the values of the records it receives; [`sinks`] (stdout, file, discard).
//!   [`LeasedSink`] lets any sink stage and commit only while the run holds its leases.
//! - [`kafka`]: a topic partition as a source, a topic as a sink; the scale-out over a
//!   topic's partitions is [`crate::group`]'s.
//!
//! Both are synchronous: the runtime runs each on a blocking thread, so file I/O never stalls
//! the tasks that run operators.

pub mod generator;
pub(crate) mod json_records;
pub mod kafka;
pub(crate) mod leased_sink;
pub mod lines;
pub(crate) mod pace;
pub(crate) mod sinks;
pub(crate) mod timestamps;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

pub use generator::GeneratorSource;
pub use leased_sink::LeasedSink;
pub use lines::{JsonLinesSource, TextLinesSource};
pub use sinks::{DiscardSink, FileSink, StdoutSink};

pub use crate::checkpoint::{SinkPosition, SourcePosition};
use crate::ids::CheckpointId;
use crate::record::RecordBatch;

/// A source or sink failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectorError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} line {line}: {message}")]
    BadRecord {
        path: PathBuf,
        line: u64,
        message: String,
    },
    /// A restored checkpoint covers output that the sink's output no longer holds.
    #[error(
        "{path}: holds {found} bytes of committed output, but checkpoint {checkpoint} covers \
         {expected}: the output was cut short or replaced after that checkpoint was taken (by a \
         run from the beginning, or outside weir). Restore a checkpoint taken since, or start \
         over with `--fresh`"
    )]
    OutputLost {
        path: PathBuf,
        checkpoint: CheckpointId,
        expected: u64,
        found: u64,
    },
    /// A Kafka client failed (unreachable brokers, a missing topic, a failed produce).
    #[error("Kafka at {brokers}: {message}")]
    Kafka { brokers: String, message: String },
    /// Another process took over the output this sink writes (a Kafka partition moved while
    /// this one still ran): it must stop, not retry.
    #[error("{what}: another process took it over; this one lets go")]
    TakenOver { what: String },
    /// The run may not commit to the output: another run holds or took its lease, or the
    /// lease was not renewed lately.
    #[error(transparent)]
    Lease(#[from] crate::checkpoint::lease::LeaseError),
    /// A restored position does not fit the source: a corrupt checkpoint, or an input that
    /// changed since the checkpoint was taken.
    #[error("{source_name}: cannot resume from the checkpointed position: {message}")]
    BadPosition {
        source_name: String,
        message: String,
    },
}

impl ConnectorError {
    /// Another run writes the output now: this one must let go, not retry.
    pub fn is_taken_over(&self) -> bool {
        match self {
            ConnectorError::TakenOver { .. } => true,
            ConnectorError::Lease(e) => e.is_other_run(),
            _ => false,
        }
    }
}

/// How far a source has read, for progress display.
#[derive(Debug, Default)]
pub struct SourceProgress {
    /// Units (bytes for files, records for generators) read so far.
    pub done: AtomicU64,
    /// Total units, if known.
    pub total: AtomicU64,
}

/// Where a source's records come from, to name a record's origin (the number a source gives
/// each record it reads, kept in [`RecordBatch::origin`]) in errors and dead letters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceOrigin {
    /// Origins are line numbers (1-based) in this file.
    Lines(PathBuf),
    /// Origins are record indexes (0-based) of the generator.
    Generator,
    /// Origins are offsets in this partition of a Kafka topic.
    Kafka { topic: String, partition: i32 },
}

impl SourceOrigin {
    /// `input.txt line 42`, `generator record 7`.
    pub fn describe(&self, origin: u64) -> String {
        match self {
            Self::Lines(path) => format!("{} line {origin}", path.display()),
            Self::Generator => format!("generator record {origin}"),
            Self::Kafka { topic, partition } => {
                format!("kafka topic {topic} partition {partition} offset {origin}")
            }
        }
    }
}

/// A line a source could not make into a record (not JSON, no key where the source takes
/// it), set aside instead of failing the job when the source's `on_bad_record` says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// Its origin, as a record's (see [`SourceOrigin`]).
    pub origin: u64,
    /// Its bytes as read.
    pub raw: Vec<u8>,
    /// Why it is not a record.
    pub reason: String,
}

/// Produces the job's input. Sources are replayable: a checkpoint records
/// [`Source::position`], and a restored job resumes with [`Source::seek`]. Each record a
/// source reads carries its origin ([`RecordBatch::push_from_source`]).
pub trait Source: Send {
    /// Appends up to `max` records to `out`. Returns `false` once the input is exhausted
    /// (possibly after appending the last records).
    fn read_batch(&mut self, max: usize, out: &mut RecordBatch) -> Result<bool, ConnectorError>;

    /// The position just after the last record returned by `read_batch`.
    fn position(&self) -> SourcePosition;

    /// Continues from a position returned by `position` (in an earlier run, on the same
    /// input). A position this source cannot have produced is an error, not a guess.
    fn seek(&mut self, position: &SourcePosition) -> Result<(), ConnectorError>;

    /// Progress counters, updated as the source reads.
    fn progress(&self) -> Arc<SourceProgress>;

    /// What the origins of its records are.
    fn origin(&self) -> SourceOrigin;

    /// Moves the lines set aside since the last call into `into` (sources that can meet bad
    /// input, made to set it aside rather than fail). A line is set aside when it is read:
    /// it belongs to the checkpoint whose barrier follows the batch it was read with.
    fn drain_rejected(&mut self, _into: &mut Vec<Rejected>) {}

    /// Records dropped so far for want of a usable timestamp (`on_bad_timestamp = "skip"`).
    fn skipped_for_timestamp(&self) -> u64 {
        0
    }

    /// The watermark its input carries, for a source whose input says how far event time has
    /// come (a repartition topic's writers, DESIGN.md §12.1): it replaces the one the job
    /// would make from timestamps. `None` for others, or before the input has said.
    fn watermark(&self) -> Option<i64> {
        None
    }

    /// The checkpoint whose barrier followed `position` (a position this source returned)
    /// completed. A source that tells its input how far the job got (Kafka commits the
    /// offset to its consumer group) does it here; a restore never relies on it.
    fn checkpoint_completed(&mut self, _position: &SourcePosition) {}

    /// Every checkpoint still retained resumes at or after `position` (a position this
    /// source returned): no restore, not even a fallback past a damaged checkpoint, reads
    /// the input before it again. A source whose input is the job's own (a repartition
    /// topic) may delete it here.
    fn input_released(&mut self, _position: &SourcePosition) {}
}

/// The checkpoint a job restores, as its sink sees it.
#[derive(Clone, Copy, Debug)]
pub struct SinkRestore<'a> {
    pub checkpoint: CheckpointId,
    /// What the sink's `stage` returned for that checkpoint; `None` for a sink that records
    /// nothing, or a checkpoint written before sinks recorded positions.
    pub position: Option<&'a SinkPosition>,
}

/// Consumes the job's output, in two phases so that a restored job neither loses nor repeats
/// output: what is written between two checkpoints is *staged* when the later checkpoint's
/// barrier reaches the sink, and *committed* (made visible) only once that checkpoint is
/// complete. Sinks that cannot hold output back (stdout) write through and say so.
pub trait Sink: Send {
    /// Writes records; they belong to the checkpoint whose barrier comes next.
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError>;

    /// The job's event time reached the sink: nothing it writes from now on is at or before
    /// `at` (`i64::MAX`: the input has ended). A sink that passes event time on (into a
    /// repartition topic, DESIGN.md §12.1) keeps it for its next `stage`; others ignore it.
    fn watermark(&mut self, _at: i64) {}

    /// Every input of the sink went idle (`true`: no event time comes until one is active
    /// again) or one is active again (`false`). A sink that passes event time on says so;
    /// others ignore it.
    fn idle(&mut self, _idle: bool) {}

    /// Makes everything written since the previous `stage` durable as the output of
    /// `checkpoint`, without making it visible. Returns what the checkpoint records of the
    /// output it covers, if the sink keeps anything.
    fn stage(&mut self, checkpoint: CheckpointId) -> Result<Option<SinkPosition>, ConnectorError>;

    /// Makes the staged output of every checkpoint up to `checkpoint` visible, in checkpoint
    /// order. Idempotent: committing again, or after a crash in the middle of a commit, makes
    /// each staged part visible exactly once.
    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError>;

    /// Called once before the first write. A restored job passes the restored checkpoint: its
    /// staged output (and that of earlier checkpoints) is committed, output staged or
    /// written after it is discarded, and a sink that recorded a position checks that the
    /// output holds what the checkpoint covers, failing rather than resuming into an output
    /// that lost it. A fresh job passes `None`: the sink starts empty.
    fn recover(&mut self, restored: Option<SinkRestore<'_>>) -> Result<(), ConnectorError>;
}
