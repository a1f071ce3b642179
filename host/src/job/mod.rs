//! Jobs: the job file, the pipeline it describes, and the runtime that runs it.
//!
//! - [`spec`]: the TOML job file and its checks ([`JobSpec`]); `docs_job_files` (a test)
//!   reads the job files of the README and docs/ with it.
//! - [`pipeline`]: [`Pipeline`], a runnable job: a source, a chain of [`Stage`]s, a sink.
//! - [`stages`]: [`stages::StagePlan`], where a Kafka job re-keys and so is cut into stages
//!   joined by repartition topics.
//! - [`router`]: [`router::Router`], how one task's output is split among the next stage's
//!   subtasks (by key group, or round robin).
//! - [`runtime`]: [`run`], the wiring of a run: one tokio task per subtask, bounded channels
//!   between them, and the checkpoint coordinator.
//! - `run_options`: [`RunOptions`] and [`Checkpointing`], what a run is given besides its
//!   pipeline; `job_error`: [`JobError`], why a job failed.
//! - `source_task`, `subtask_task`, `sink_task`: the tasks of a run: the source, one
//!   operator subtask, and the sink with the outputs it stages and commits.
//! - `finished_sweep`: a job that had finished: its last output committed and its orphans
//!   swept, without running.
//! - [`input_gate`]: how a task reads its inputs, aligning checkpoint barriers.
//! - [`bad_records`]: records that cannot be read, keyed or processed: failed on, skipped or
//!   dead-lettered, as the job file says.
//! - [`in_flight`]: the channels between tasks, and how each consumer bounds the records
//!   queued in front of it by its pace (buffer debloating).
//! - [`watermarks`]: event time between tasks: the source's watermarks from the timestamps it
//!   reads, and each consumer's watermark over its inputs.
//! - [`restore_latch`]: the sink rolls its output back only once every subtask has restored.
//! - `retained_positions`: which input no restore reads again, for the source to release.
//! - [`supervisor`]: [`run_job`], a job from its spec, restarted from its latest checkpoint
//!   when it fails.
//! - [`metrics`]: counters per operator and subtask, and the end-of-run [`RunSummary`];
//!   [`latency_histogram`], the batch latencies among them.
//! - [`progress`]: the progress line on a terminal.

pub mod bad_records;
#[cfg(test)]
mod docs_job_files;
mod downstream;
mod finished_sweep;
pub(crate) mod in_flight;
pub(crate) mod input_gate;
mod job_error;
pub(crate) mod latency_histogram;
pub(crate) mod metrics;
pub(crate) mod pipeline;
pub(crate) mod progress;
mod restore_latch;
mod retained_positions;
pub mod router;
mod run_leases;
mod run_options;
pub(crate) mod runtime;
mod sink_task;
mod source_task;
pub mod spec;
pub mod stages;
mod subtask_task;
pub(crate) mod supervisor;
pub mod watermarks;

pub use metrics::{JobMetrics, RunSummary, SubtaskMetrics};
pub use pipeline::{Pipeline, Stage};
pub use runtime::{
    CheckpointRequest, Checkpointing, InFlight, JobError, RunOptions, StartedSignal, StopSignal,
    run,
};
pub use spec::{CheckpointSpec, JobSpec, KeyBy, SpecError};
pub use supervisor::{SupervisorError, run_job, run_job_in};
