//! Jobs: the job file, the pipeline it describes, and the runtime that runs it.
//!
//! - [`spec`]: the TOML job file and its checks ([`JobSpec`]).
//! - [`pipeline`]: [`Pipeline`], a runnable job: a source, a chain of [`Stage`]s, a sink.
//! - [`router`]: [`router::Router`], how one task's output is split among the next stage's
//!   subtasks (by key group, or round robin).
//! - [`runtime`]: [`run`], one tokio task per subtask, bounded channels between them.
//! - [`metrics`]: counters per operator and subtask, and the end-of-run [`RunSummary`].
//! - [`progress`]: the progress line on a terminal.

pub mod metrics;
pub mod pipeline;
pub mod progress;
pub mod router;
pub mod runtime;
pub mod spec;

pub use metrics::{JobMetrics, RunSummary};
pub use pipeline::{Pipeline, Stage};
pub use runtime::{JobError, RunOptions, run};
pub use spec::{JobSpec, KeyBy, SpecError};
