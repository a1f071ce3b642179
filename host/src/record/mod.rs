//! Records as they travel between tasks: flat, column-wise batches.

mod batch;

pub use batch::{FLAG_HAS_KEY, FLAG_HAS_TIMESTAMP, RecordBatch, RecordRef};
