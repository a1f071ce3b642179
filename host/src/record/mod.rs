//! Records as they travel between tasks: flat, column-wise batches.

mod batch;
mod numbers;

pub use batch::{FLAG_HAS_KEY, FLAG_HAS_TIMESTAMP, RecordBatch, RecordRef};
pub use numbers::{Number, Numbers};
