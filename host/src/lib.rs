//! Weir's host: runs stateful stream operators compiled to WebAssembly components.
//!
//! A job is a source, a chain of operators and a sink. Each operator runs as `parallelism`
//! subtasks; each subtask is one instance of the operator's component with its own keyed
//! state, and owns a contiguous range of the job's key groups. Records travel between tasks
//! in flat batches over bounded channels; a keyed edge sends each record to the subtask that
//! owns its key's group.
//!
//! ```no_run
//! use weir_host::engine::{ComponentCache, Engine, EngineOptions};
//! use weir_host::job::{JobSpec, Pipeline, RunOptions, run};
//!
//! # async fn example() -> anyhow::Result<()> {
//! let spec = JobSpec::load("examples/wordcount/job.toml".as_ref())?;
//! let engine = Engine::new(EngineOptions { cache: ComponentCache::default_location() })?;
//! let summary = run(Pipeline::from_spec(&spec, &engine)?, RunOptions::default()).await?;
//! println!("{summary}");
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - [`cli`]: the `weir` command line (`run`, `validate`).
//! - [`job`]: the job file ([`job::spec`]), the runnable [`job::Pipeline`], routing between
//!   stages ([`job::router`]), the task runtime ([`job::runtime`]), metrics and progress.
//! - [`engine`]: wasmtime set up once (components, epoch interruption), the on-disk cache of
//!   precompiled components, loading and checking components against the world.
//! - [`bindings`]: the one `bindgen!` over `wit/`, the single source of the interface.
//! - [`guest`]: a component instance as an operator: the store's data, the `state` and `log`
//!   imports, and key slots (how a batch's keys are named in state calls).
//! - [`operator`]: the [`operator::OperatorInstance`] trait the runtime drives, for Wasm and
//!   for native operators (benchmarks), and operator errors.
//! - [`state`]: the in-memory keyed state backend: per state and key group, dirty keys
//!   tracked; snapshots (increments) and restore.
//! - [`checkpoint`]: how snapshots are stored (so far: the increment artifact format).
//! - [`partition`]: key hashing, key groups and their ranges per subtask.
//! - [`record`]: [`record::RecordBatch`], the flat batch that crosses tasks and the boundary.
//! - [`connectors`]: sources (text lines, JSON lines, generator) and sinks (stdout, file,
//!   discard).
//! - [`ids`]: identifier newtypes shared across modules.
//!
//! # Design notes
//!
//! - **The boundary is crossed per batch, not per record.** A batch enters the guest as five
//!   flat columns; the guest reads all values of a value state for the batch's keys in one
//!   call (`read-values`) and sends all writes in one call (`apply`). Keys are named by *slot*
//!   (a batch-local number the host assigns), so the guest never hashes keys and can only
//!   reach the keys it was given.
//! - **Hash once.** The stable key hash (XXH3) is computed where a record is routed and
//!   travels with it; the state tables reuse it.
//! - **Dirty keys, not values.** Each state entry remembers the checkpoint in which it was last
//!   written; a write marks the key dirty once per checkpoint, so the next snapshot costs
//!   O(dirty keys) and squashes repeated writes.
//! - **Failures name their place.** An operator error says which operator and subtask failed
//!   and why (an error it returned, a trap, the CPU or memory limit); a failed run never
//!   publishes partial output.

#![deny(unsafe_code)]

pub mod bindings;
pub mod checkpoint;
pub mod cli;
pub mod connectors;
pub mod engine;
pub mod guest;
pub mod ids;
pub mod job;
pub mod operator;
pub mod partition;
pub mod record;
pub mod state;
