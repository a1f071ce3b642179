//! Running operator components: the store's data and the host side of Weir's imports.
//!
//! - [`GuestState`]: what a wasmtime `Store` holds for one subtask: WASI (no ambient
//!   authority), limits, the keyed state backend and the current batch's key slots.
//! - [`limits`]: [`Limiter`], the memory limiter and the one place that tells which limit a
//!   failed call went past.
//! - [`slots`]: [`KeySlots`], the distinct keys of the batch being processed; state calls name
//!   keys by slot.
//! - [`state_host`], [`log_host`], [`metrics_host`], [`bundle_host`]: the `state`, `log`,
//!   `metrics` and `bundle` imports.
//! - [`output`]: [`output::GuestOutput`], the guest's stdout and stderr, into the log.
//! - [`wasm_operator`]: [`WasmOperator`], an [`crate::operator::OperatorInstance`] backed by a
//!   component instance.
//!
//! The guest and [`crate::engine`] import each other on purpose; the engine's docs say why.
//! Where a guest's log lines are kept ([`crate::operator::GuestLogFile`]) is the operator's:
//! the runtime hands it to every subtask.

pub(crate) mod bundle_host;
pub(crate) mod limits;
pub(crate) mod log_host;
pub(crate) mod metrics_host;
pub(crate) mod output;
pub(crate) mod slots;
pub(crate) mod state_host;
pub(crate) mod wasm_operator;

use std::sync::Arc;

use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxView, WasiView};

pub use limits::{ExceededLimit, Limiter};
pub use output::{GuestOutput, Stream};
pub use slots::KeySlots;

use crate::operator::{GuestLogFile, LogLine};
pub use wasm_operator::{WasmOperator, WasmOperatorFactory};

use crate::bindings::weir::operator::types::Batch;
use crate::ids::{OperatorName, SubtaskIndex};
use crate::operator::GuestLimits;
use crate::partition::KeyHash;
use crate::record::Numbers;
use crate::state::KeyedStateBackend;
use crate::state::undo::UndoLog;

/// Who is logging, attached to every guest log line, and where the job keeps its lines.
#[derive(Clone, Debug)]
pub struct LogContext {
    pub job: Arc<str>,
    pub operator: OperatorName,
    pub subtask: SubtaskIndex,
    pub file: Option<Arc<GuestLogFile>>,
}

impl LogContext {
    /// Sends a line to the job's log file, if it keeps one.
    pub fn keep(&self, level: &str, checkpoint: Option<u64>, stream: &str, message: &str) {
        if let Some(file) = &self.file {
            file.append(LogLine {
                time: String::new(),
                level: level.to_owned(),
                operator: self.operator.0.clone(),
                subtask: self.subtask.0,
                checkpoint,
                stream: stream.to_owned(),
                message: message.to_owned(),
            });
        }
    }
}

/// The data of one subtask's wasmtime store.
pub struct GuestState {
    /// WASI with nothing granted: no preopened directories, no environment, no arguments, no
    /// sockets, no standard input; stdout and stderr go to the log. Clocks and random numbers
    /// are WASI's defaults, which Rust's std needs (hash map seeds).
    wasi: WasiCtx,
    /// The guest's standard error, kept to explain traps.
    pub(crate) stderr: GuestOutput,
    table: ResourceTable,
    /// The instance's limits, and which of them the current call went past.
    pub(crate) limiter: Limiter,
    pub(crate) backend: KeyedStateBackend,
    pub(crate) slots: KeySlots,
    pub(crate) log: LogContext,
    /// The state changes of the current `process` call, kept for operators whose failures
    /// are set aside (`on_error`), so that a failed call can be taken back.
    pub(crate) undo: Option<UndoLog>,
    /// The subtask's watermark, as the `time` import reports it.
    pub(crate) watermark: Option<i64>,
    /// Records the guest dropped as too late (the `metrics` import) since the task last took
    /// the count.
    pub(crate) dropped_late: u64,
    /// The files packed into the component, which the `bundle` import returns.
    pub(crate) bundle: Arc<[u8]>,
    /// The CBOR of a JSON guest's map key and value while `apply` writes them: kept to
    /// convert every operation of every batch without allocating.
    pub(crate) converted: (Vec<u8>, Vec<u8>),
}

impl GuestState {
    pub fn new(backend: KeyedStateBackend, limits: GuestLimits, log: LogContext) -> Self {
        let stderr = GuestOutput::new(Stream::Stderr, log.clone());
        let wasi = WasiCtx::builder()
            .stdout(GuestOutput::new(Stream::Stdout, log.clone()))
            .stderr(stderr.clone())
            .build();
        Self {
            wasi,
            stderr,
            table: ResourceTable::new(),
            limiter: Limiter::new(limits),
            backend,
            slots: KeySlots::default(),
            log,
            undo: None,
            watermark: None,
            dropped_late: 0,
            bundle: Arc::from([]),
            converted: (Vec::new(), Vec::new()),
        }
    }

    /// The same state, for an instance of a component that packs `bundle` (its files, in the
    /// encoding of the `bundle` import).
    pub fn with_bundle(mut self, bundle: Arc<[u8]>) -> Self {
        self.bundle = bundle;
        self
    }

    pub fn backend(&self) -> &KeyedStateBackend {
        &self.backend
    }

    pub fn backend_mut(&mut self) -> &mut KeyedStateBackend {
        &mut self.backend
    }

    /// Readies the state calls of a `process` call on `batch`: numbers its keys (each
    /// record's slot goes into `record_slots`; `hashes` are the records' key hashes, if the
    /// batch came through a keyed edge) and empties the undo log, if one is kept.
    pub fn begin_batch(
        &mut self,
        batch: &Batch,
        hashes: &[KeyHash],
        record_slots: &mut Numbers<u32>,
    ) {
        self.slots.assign(batch, hashes, record_slots);
        self.backend.warm(self.slots.keys());
        if let Some(undo) = &mut self.undo {
            undo.clear();
        }
    }

    /// Keeps the state changes of each call, so that a failed call can be taken back.
    pub fn keep_undo_log(&mut self) {
        self.undo = Some(UndoLog::default());
    }

    /// Takes back the state changes of the current call.
    pub fn roll_back(&mut self) -> Result<(), String> {
        let undo = self.undo.as_mut().ok_or("the operator keeps no undo log")?;
        undo.roll_back(&mut self.backend)
            .map_err(|e| format!("taking back the failed call's state writes: {e}"))
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
