//! Write Weir stream operators in Rust and compile them to WebAssembly components.
//!
//! An operator is a type implementing [`Operator`]: [`open`](Operator::open) reads its
//! configuration and declares its keyed state, [`process`](Operator::process) turns each input
//! [`Record`] into any number of output records written to an [`Emitter`], and
//! [`close`](Operator::close) may emit final records at the end of input.
//! [`export_operator!`] exports the type as the component's `weir:operator/processor`, and
//! `cargo build --target wasm32-wasip2` of a `cdylib` crate produces the component.
//!
//! The SDK is built around the cost of the component boundary, which is paid per crossing and
//! per allocation, not per byte:
//!
//! - Records arrive as a batch of flat columns and are handed to `process` as slices of it:
//!   reading a record allocates nothing. The number columns (offsets, timestamps, key slots)
//!   cross as little-endian bytes (the WIT's `u32s` and `s64s`) and are read in place.
//! - Output records are appended to flat buffers laid out as the WIT `batch` and returned
//!   as they are; their capacity is carried over from batch to batch.
//! - State ([`ValueState`], [`MapState`], [`ListState`]) is typed (serde, stored as CBOR) and
//!   batched: value states are read once per batch for all keys of the batch and cached, and
//!   all writes of a batch reach the host in one call. See [`state`] for the details.
//!
//! # Layout
//!
//! - `operator.rs`: the [`Operator`] trait and [`export_operator!`].
//! - `context.rs`: [`OpenContext`], what `open` receives.
//! - `record.rs`: [`Record`], and reading records out of a WIT batch.
//! - `emitter.rs`: [`Emitter`], writing records into a WIT batch.
//! - `numbers`: the WIT's number columns (`u32s`, `s64s`:
//!   little-endian bytes), viewed in place and appended to.
//! - `state/`: the state handles (`value.rs`, `map.rs`, `list.rs`); `batch.rs` holds the
//!   per-batch machinery (current key slot, value caches, flush), `op_log.rs` the log of
//!   writes, `host.rs` the host's state functions (and `fake.rs` an in-memory host for unit
//!   tests).
//! - `export.rs`: the `processor` export that drives an operator through open, process and
//!   close.
//! - `codec.rs`: CBOR encoding of state; `error.rs`: [`Error`]; `log.rs`: logging to the host.
//! - `bindings.rs`: the bindings of `wit/operator.wit` (`bindings/operator.rs`, written by
//!   `scripts/guest-bindings`: what `wit_bindgen::generate!` would expand to).
//!
//! # Example
//!
//! A word counter: the input is keyed by word, and for every occurrence the operator emits
//! the word with its running count.
//!
//! ```no_run
//! use weir_guest::{Emitter, OpenContext, Operator, Record, Result, ValueState, export_operator};
//!
//! struct WordCount {
//!     count: ValueState<u64>,
//!     separator: char,
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct Config {
//!     #[serde(default = "tab")]
//!     separator: char,
//! }
//!
//! fn tab() -> char {
//!     '\t'
//! }
//!
//! impl Operator for WordCount {
//!     fn open(ctx: &mut OpenContext) -> Result<Self> {
//!         let config: Config = ctx.config()?;
//!         weir_guest::info!("word count {} of {} opened", ctx.subtask(), ctx.parallelism());
//!         Ok(Self { count: ctx.value_state("count")?, separator: config.separator })
//!     }
//!
//!     fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
//!         let word = record.key_str()?.ok_or("word count needs records keyed by word")?;
//!         let count = self.count.get()?.unwrap_or(0) + 1;
//!         self.count.set(&count)?;
//!         out.emit_fmt(record.key, format_args!("{word}{}{count}", self.separator))
//!     }
//! }
//!
//! export_operator!(WordCount);
//! # fn main() {}
//! ```
#![warn(missing_docs)]

pub mod bindings;
pub mod codec;
mod context;
mod emitter;
mod error;
mod export;
pub mod log;
pub mod metrics;
mod numbers;
mod operator;
mod record;
pub mod state;
pub mod timers;
pub mod windows;

pub use context::OpenContext;
pub use emitter::Emitter;
pub use error::{Error, Result};
pub use operator::Operator;
pub use record::Record;
pub use state::{ListState, MapState, ValueState};
pub use timers::{TimeDomain, Timer, Timers};

/// Used by [`export_operator!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::export::Exports;

    /// Compiles only if `T` is an operator (what `export_operator!` checks off `wasm32`).
    pub const fn assert_operator<T: crate::Operator>() {}
}
