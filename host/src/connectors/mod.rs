//! Sources and sinks: where records come from and where they go.
//!
//! - [`Source`]: reads batches of records; [`lines`] (text and JSON lines) and [`generator`].
//! - [`Sink`]: writes the values of the records it receives; [`sinks`] (stdout, file, discard).
//!
//! Both are synchronous: the runtime runs each on a blocking thread, so file I/O never stalls
//! the tasks that run operators.

pub mod generator;
pub mod lines;
pub mod sinks;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

pub use generator::GeneratorSource;
pub use lines::{JsonLinesSource, TextLinesSource};
pub use sinks::{DiscardSink, FileSink, StdoutSink};

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
}

/// How far a source has read, for progress display.
#[derive(Debug, Default)]
pub struct SourceProgress {
    /// Units (bytes for files, records for generators) read so far.
    pub done: AtomicU64,
    /// Total units, if known.
    pub total: AtomicU64,
}

/// Produces the job's input.
pub trait Source: Send {
    /// Appends up to `max` records to `out`. Returns `false` once the input is exhausted
    /// (possibly after appending the last records).
    fn read_batch(&mut self, max: usize, out: &mut RecordBatch) -> Result<bool, ConnectorError>;

    /// Progress counters, updated as the source reads.
    fn progress(&self) -> Arc<SourceProgress>;
}

/// Consumes the job's output.
pub trait Sink: Send {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError>;

    /// Called once after the last batch of a successful run; output becomes visible here.
    fn finish(&mut self) -> Result<(), ConnectorError>;
}
