//! Weir's host: runs stateful stream operators compiled to WebAssembly components.
//!
//! A job is a source, a chain of operators and a sink. Each operator runs as `parallelism`
//! subtasks; each subtask is one instance of the operator's component with its own keyed
//! state, and owns a contiguous range of the job's key groups. Records travel between tasks
//! in flat batches over bounded channels; a keyed edge sends each record to the subtask that
//! owns its key's group.
//!
//! Jobs with a `[checkpoints]` section take periodic, incremental checkpoints to an object
//! store and restart from the latest one when they fail; file sinks commit output only with
//! the checkpoint that covers it, so results are exactly-once across crashes.
//!
//! An embedder starts from the items re-exported here, at the crate root; the modules below
//! are public for the end-to-end tests, benchmarks and fuzzers that drive their parts (the
//! rest of the crate is crate-private, and the lint `unreachable_pub` keeps it so).
//!
//! ```no_run
//! use weir_host::{ComponentCache, Engine, EngineOptions, JobSpec, RestoreFrom, RunOptions, run_job};
//!
//! # async fn example() -> anyhow::Result<()> {
//! let spec = JobSpec::load("examples/wordcount/job.toml".as_ref())?;
//! let engine = Engine::new(EngineOptions { cache: ComponentCache::default_location() })?;
//! let restore = Some(RestoreFrom::Latest);
//! let summary = run_job(&spec, &engine, restore, RunOptions::default()).await?;
//! println!("{summary}");
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! The modules form layers, listed here from the bottom up: each imports only modules listed
//! before it (a test, `module_layers`, keeps it so), but for `engine` and `guest`, two halves
//! of one concept.
//!
//! - [`ids`], [`clock`], [`vocabulary`], [`http`]: identifier newtypes, the wall clock, the
//!   words the job file shares with the connectors (record policies, watermark settings), and
//!   HTTP clients with their TLS crypto.
//! - [`partition`]: key hashing, key groups and their ranges per subtask.
//! - [`bindings`]: the one `bindgen!` over `wit/`, the single source of the interface.
//! - [`record`]: [`record::RecordBatch`], the flat batch that crosses tasks and the boundary.
//! - [`state`]: the in-memory keyed state backend: per state and key group, dirty keys
//!   tracked; snapshots (increments) and restore; timers as keyed state ([`state::timers`]).
//! - [`checkpoint`]: the coordinator and the messages it exchanges with tasks, each subtask's
//!   uploads, chain and cleanup, checkpoint metadata, the artifact format, stores chosen by
//!   URL through `object_store`, and [`checkpoint::lease`]: one run at a time per job and per
//!   output.
//! - [`operator`]: the [`operator::OperatorInstance`] trait the runtime drives, for Wasm and
//!   for native operators (benchmarks), operator errors, and the guest log file.
//! - [`engine`] and [`guest`]: wasmtime set up once (components, epoch interruption), the
//!   on-disk cache of precompiled components; a component instance as an operator (the
//!   store's data, the `state`, `log`, `metrics` and `bundle` imports, key slots).
//! - [`connectors`]: replayable sources (text lines, JSON lines, generator, a Kafka
//!   partition) that stamp records with their event time, and two-phase sinks (file, Kafka;
//!   stdout and discard write through).
//! - [`job`]: the job file ([`job::spec`]), the runnable [`job::Pipeline`], routing between
//!   stages ([`job::router`]), the task runtime with barrier alignment ([`job::runtime`],
//!   [`job::input_gate`]), event time between tasks ([`job::watermarks`]), restarts
//!   ([`job::supervisor`]), metrics and progress.
//! - [`group`]: a Kafka job as a member of its consumer group: a pipeline per partition the
//!   group gives this process ([`group::run_group`]).
//! - [`build`]: `weir build` and `weir new`: operator projects in Rust, Python, JavaScript and
//!   C compiled into components (the SDKs and the WIT embedded) and checked against the
//!   world; [`build::toolchains`]: `weir toolchain install` and `list`.
//! - [`serve`]: `weir serve`, a long-running host running many jobs submitted over HTTP, and
//!   its web console (rates, backpressure, checkpoint history, logs; DESIGN.md §15).
//! - [`cli`]: the `weir` command line (`run`, `validate`, `checkpoints`, `build`, `new`,
//!   `toolchain`, the `serve` host and its clients).
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
//!   O(dirty keys) and squashes repeated writes. Its pause does not: the dirty keys are
//!   frozen, and pinned between batches (copy-on-write, `state::frozen`).
//! - **Failures name their place.** An operator error says which operator and subtask failed
//!   and why (an error it returned, a trap, the CPU or memory limit); a failed run never
//!   publishes output that no completed checkpoint covers.
//! - **The end of the input is a checkpoint.** When the source ends, the coordinator takes a
//!   last checkpoint whose barrier closes the operators; the sink commits the final output only
//!   when it completes. So a crash at any instant leaves either that checkpoint (restoring it
//!   only commits) or an earlier one (restoring it replays), never committed output without a
//!   checkpoint that covers it.
//! - **Timers are keyed state.** A key's timers are one value of a reserved state, so they are
//!   checkpointed, squashed, restored and rescaled by the code that does it for every value;
//!   only the index that fires them by time is their own, and it is rebuilt from the state.
//!   Watermarks travel in line with records and barriers, at fixed places in the input, and
//!   checkpoints keep them (DESIGN.md §11).
//! - **Chains are bounded without full snapshots.** The backend remembers the keys each
//!   increment of its chain wrote; before a snapshot it re-writes, within a budget, the
//!   entries whose latest version still lives in the oldest increments, and an increment
//!   leaves the chain once drained (`state::aging`). Dropping only from the oldest end keeps
//!   tombstones and clear events correct: nothing older remains for them to cancel. The budget
//!   grows with the state so the whole of it is re-written within `max_chain` checkpoints.
//! - **One owner per artifact, agreed without messages.** After a restore with any
//!   parallelism, every subtask computes the same ownership plan from all retained
//!   checkpoints (`checkpoint::ownership`): an inherited artifact belongs to the new subtask
//!   holding the first key group of its old owner. DESIGN.md has the coordinator hand out the
//!   assignment; a deterministic plan over the same picture gives the same answer and stays
//!   correct if a subtask restarts alone.
//! - **Artifact names carry the run.** A run restored from an older checkpoint, or started
//!   fresh beside old checkpoints, writes artifacts under new names and continues checkpoint
//!   ids after the newest, so it never overwrites an object a retained checkpoint references.
//! - **A failed metadata write is checked.** A store may report a failed `put` that in fact
//!   succeeded; the coordinator then looks for the object and completes the checkpoint if it
//!   is there. If the store cannot say, the job fails and restarts from what the store holds,
//!   since aborting could free artifacts of a checkpoint that exists.

#![deny(unsafe_code)]
#![warn(unreachable_pub)]

pub mod bindings;
pub mod build;
pub mod checkpoint;
pub mod cli;
pub(crate) mod clock;
pub mod connectors;
pub mod engine;
pub mod group;
pub mod guest;
pub mod http;
pub mod ids;
pub mod job;
pub mod operator;
pub mod partition;
pub mod record;
pub mod serve;
pub mod state;
pub(crate) mod vocabulary;

#[cfg(test)]
mod module_layers;

pub use checkpoint::{CheckpointStore, RestoreFrom};
pub use engine::{ComponentCache, Engine, EngineOptions};
pub use job::{JobError, JobSpec, RunOptions, RunSummary, SpecError, run_job};
/// The allocator the `weir` binary runs on, and the benches that measure the host in their
/// own process (a library does not choose its users' allocator). The state backend allocates
/// a long key or value per entry, a window and a timer per fired window, and every value of
/// a restore: against glibc's malloc, restores, one-second windows and timer firing measured
/// a tenth to a quarter faster, for about 7 % more peak memory (docs/performance.md, "The
/// allocator").
pub use mimalloc::MiMalloc as HostAllocator;

/// Turns transparent huge pages off for this process (on Linux; elsewhere it does nothing).
/// Called first by `weir`, and by the benches that run the host in their own process.
///
/// [`HostAllocator`] asks the kernel for huge pages on its regions, and the kernel then zeroes
/// 2 MiB at the first touch of each, and again whenever the allocator has returned part of
/// one and touches it anew. A whole job counting 1 M keys with checkpoints every second spent
/// 44 % of its CPU time in the kernel zeroing pages; without huge pages it ran about a third
/// faster in less memory. Random access over a large state pays longer page walks instead
/// (docs/performance.md, "Huge pages", has both sides).
pub fn disable_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::debug!(%error, "transparent huge pages stay on");
    }
}
