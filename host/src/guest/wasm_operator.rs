//! [`WasmOperator`]: an operator instance backed by a component instance.

use std::sync::Arc;

use wasmtime::Store;

use super::state_host::BlobsBuilder;
use super::{GuestState, LogContext};
use crate::bindings::Operator;
use crate::bindings::weir::operator::types::{
    Batch, Context, Failure, FiredTimers, TimeDomain as WitTimeDomain,
};
use crate::engine::{EPOCH_TICK, Engine, OperatorComponent};
use crate::ids::{OperatorName, SubtaskIndex};
use crate::operator::{
    FailureKind, GuestLimits, OperatorError, OperatorFactory, OperatorInstance, SubtaskContext,
};
use crate::record::{Numbers, RecordBatch};
use crate::state::{FiredTimer, KeyedStateBackend, TimeDomain};

/// Instantiates one component per subtask.
#[derive(Clone, Debug)]
pub struct WasmOperatorFactory {
    engine: Engine,
    component: OperatorComponent,
}

impl WasmOperatorFactory {
    pub fn new(engine: Engine, component: OperatorComponent) -> Self {
        Self { engine, component }
    }
}

impl OperatorFactory for WasmOperatorFactory {
    fn instantiate(
        &self,
        ctx: &SubtaskContext,
    ) -> Result<Box<dyn OperatorInstance>, OperatorError> {
        Ok(Box::new(WasmOperator::open(
            &self.engine,
            &self.component,
            ctx,
        )?))
    }
}

/// One component instance running one subtask.
pub struct WasmOperator {
    store: Store<GuestState>,
    bindings: Operator,
    ctx: SubtaskContext,
    /// Epoch ticks one call may take.
    deadline_ticks: u64,
    /// Each record's key slot for the current batch; kept to reuse its allocation.
    record_slots: Numbers<u32>,
}

impl WasmOperator {
    /// Instantiates the component and calls its `open`.
    pub fn open(
        engine: &Engine,
        component: &OperatorComponent,
        ctx: &SubtaskContext,
    ) -> Result<Self, OperatorError> {
        let mut backend = KeyedStateBackend::new(ctx.key_groups, ctx.range);
        // Log lines name the checkpoint their writes belong to, from `open` on.
        backend.begin_at(ctx.first_checkpoint);
        let log = LogContext {
            job: ctx.job.clone(),
            operator: ctx.operator.clone(),
            subtask: ctx.subtask,
            file: ctx.guest_log.clone(),
        };
        let state =
            GuestState::new(backend, ctx.limits, log).with_bundle(component.bundle().clone());
        let mut store = Store::new(engine.wasmtime(), state);
        store.limiter(|s| &mut s.limiter);
        let deadline_ticks =
            (ctx.limits.cpu_time_per_call.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64;
        store.set_epoch_deadline(deadline_ticks);
        let bindings = match component.pre().instantiate(&mut store) {
            Ok(bindings) => bindings,
            Err(error) => {
                return Err(match store.data().limiter.exceeded(Some(&error)) {
                    Some(limit) => limit.error(ctx),
                    None => ctx.error(FailureKind::Instantiate, format!("{error:#}")),
                });
            }
        };
        let mut op = Self {
            store,
            bindings,
            ctx: ctx.clone(),
            deadline_ticks,
            record_slots: Numbers::default(),
        };
        let context = Context {
            operator_name: ctx.operator.0.clone(),
            subtask: ctx.subtask.0,
            parallelism: ctx.parallelism,
            config: ctx.config_json.clone(),
        };
        let result = op
            .bindings
            .weir_operator_processor()
            .call_open(&mut op.store, &context);
        match result {
            Ok(Ok(())) => {}
            Ok(Err(message)) => return Err(op.returned_error(FailureKind::Open, message, None)),
            Err(trap) => return Err(op.trap_error(trap)),
        }
        op.store.data_mut().backend.seal_declarations();
        Ok(op)
    }

    /// Instantiates `component` apart from any job and calls its `close` without `open`; the
    /// failure it returns, as its message (a component of the SDKs answers that it is not
    /// open). `weir build` checks a Python component so: its runner imports the operator's
    /// packed modules at the first call, and a module that fails to import says so here.
    pub fn close_unopened(
        engine: &Engine,
        component: &OperatorComponent,
    ) -> anyhow::Result<Option<String>> {
        let groups = crate::partition::KeyGroups::default();
        let backend = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let log = LogContext {
            job: Arc::from("weir build"),
            operator: OperatorName("operator".into()),
            subtask: SubtaskIndex(0),
            file: None,
        };
        let state = GuestState::new(backend, GuestLimits::default(), log)
            .with_bundle(component.bundle().clone());
        let mut store = Store::new(engine.wasmtime(), state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(
            (GuestLimits::default().cpu_time_per_call.as_millis() / EPOCH_TICK.as_millis()).max(1)
                as u64,
        );
        let bindings = component.pre().instantiate(&mut store)?;
        let result = bindings.weir_operator_processor().call_close(&mut store)?;
        Ok(result.err().map(|failure| failure.message))
    }

    /// Readies the store for a call into the guest: a fresh CPU deadline, no limit passed.
    fn start_call(&mut self) {
        self.store.set_epoch_deadline(self.deadline_ticks);
        self.store.data_mut().limiter.start_call();
    }

    /// An error the guest returned, unless the call went past a limit on the way (the guest's
    /// error then is only what it made of it: a `MemoryError`, a refused state write).
    fn returned_error(
        &self,
        kind: FailureKind,
        message: String,
        record: Option<u32>,
    ) -> OperatorError {
        match self.store.data().limiter.exceeded(None) {
            Some(limit) => limit.error(&self.ctx),
            None => self.ctx.error(kind, message).with_record(record),
        }
    }

    /// Turns a wasmtime error (a trap, an interrupt, a refused memory growth) into an operator
    /// error that says which limit was hit, or what the guest printed before it trapped.
    fn trap_error(&self, error: wasmtime::Error) -> OperatorError {
        if let Some(limit) = self.store.data().limiter.exceeded(Some(&error)) {
            return limit.error(&self.ctx);
        }
        // What the guest printed last (a Rust panic message), then the trap itself.
        let printed = self.store.data().stderr.tail();
        // Rust's panic hook suggests RUST_BACKTRACE, which no guest can see (its environment
        // is empty): that line is left out.
        let printed = printed
            .lines()
            .rev()
            .filter(|line| !line.starts_with("note: run with `RUST_BACKTRACE=1`"))
            .take(8)
            .collect::<Vec<_>>();
        let printed: String = printed.into_iter().rev().collect::<Vec<_>>().join("\n");
        // The trap itself; its wasm backtrace (frames of the guest's compiled code, which
        // mean something with a debugger at hand, not in a job's error) only when debugging.
        let trap = if tracing::enabled!(target: "weir::guest", tracing::Level::DEBUG) {
            format!("{error:?}")
        } else {
            error.root_cause().to_string()
        };
        let message = if printed.is_empty() {
            trap
        } else {
            format!("{printed}\n{trap}")
        };
        self.ctx.error(FailureKind::Trap, message)
    }

    /// The output of a `process` or `close` call (named by `call`), or its failure.
    fn finish_call(
        &mut self,
        call: &str,
        result: wasmtime::Result<Result<Batch, Failure>>,
    ) -> Result<RecordBatch, OperatorError> {
        match result {
            Ok(Ok(out)) => {
                if let Some(limit) = self.store.data().limiter.exceeded(None) {
                    // A refused state write fails the call, whatever the guest made of it.
                    return Err(limit.error(&self.ctx));
                }
                let out = RecordBatch::from_wit(out);
                out.validate().map_err(|reason| {
                    self.ctx.error(
                        FailureKind::BadOutput,
                        format!(
                            "the batch its `{call}` returned is malformed ({reason}); the \
                             operator made that batch, with its SDK or bindings, not the host"
                        ),
                    )
                })?;
                Ok(out)
            }
            Ok(Err(Failure { message, record })) => {
                Err(self.returned_error(FailureKind::Returned, message, record))
            }
            Err(trap) => Err(self.trap_error(trap)),
        }
    }
}

impl OperatorInstance for WasmOperator {
    fn process(&mut self, batch: &mut RecordBatch) -> Result<RecordBatch, OperatorError> {
        let (wit, columns) = std::mem::take(batch).lend();
        self.store
            .data_mut()
            .begin_batch(&wit, columns.hashes(), &mut self.record_slots);
        self.start_call();
        let processor = self.bindings.weir_operator_processor();
        let result = processor.call_process(&mut self.store, &wit, self.record_slots.as_wit());
        *batch = RecordBatch::returned(wit, columns);
        self.finish_call("process", result)
    }

    fn set_watermark(&mut self, watermark: Option<i64>) {
        self.store.data_mut().watermark = watermark;
    }

    fn take_dropped_late(&mut self) -> u64 {
        std::mem::take(&mut self.store.data_mut().dropped_late)
    }

    fn on_timers(
        &mut self,
        domain: TimeDomain,
        timers: &[FiredTimer],
    ) -> Result<RecordBatch, OperatorError> {
        let data = self.store.data_mut();
        data.slots
            .assign_keys(timers.iter().map(|t| &t.key[..]), &mut self.record_slots);
        data.backend.warm(data.slots.keys());
        let mut keys = BlobsBuilder {
            data: Vec::with_capacity(timers.iter().map(|t| t.key.len()).sum()),
            ends: Numbers::with_capacity(timers.len()),
        };
        for timer in timers {
            keys.push(&timer.key);
        }
        let fired = FiredTimers {
            domain: match domain {
                TimeDomain::EventTime => WitTimeDomain::EventTime,
                TimeDomain::ProcessingTime => WitTimeDomain::ProcessingTime,
            },
            keys: keys.build(),
            key_slots: std::mem::take(&mut self.record_slots).into_bytes(),
            timestamps: timers
                .iter()
                .map(|t| t.at)
                .collect::<Numbers<i64>>()
                .into_bytes(),
            tags: timers
                .iter()
                .map(|t| t.tag)
                .collect::<Numbers<u32>>()
                .into_bytes(),
            watermark: data.watermark,
        };
        if let Some(undo) = &mut data.undo {
            undo.clear();
        }
        self.start_call();
        let processor = self.bindings.weir_operator_processor();
        let result = processor.call_on_timers(&mut self.store, &fired);
        self.record_slots = Numbers::from_bytes(fired.key_slots);
        self.finish_call("on-timers", result)
    }

    fn keep_undo_log(&mut self) {
        self.store.data_mut().keep_undo_log();
    }

    fn roll_back(&mut self) -> Result<(), String> {
        self.store.data_mut().roll_back()
    }

    fn close(&mut self) -> Result<RecordBatch, OperatorError> {
        self.start_call();
        let processor = self.bindings.weir_operator_processor();
        let result = processor.call_close(&mut self.store);
        self.finish_call("close", result)
    }

    fn state(&self) -> &KeyedStateBackend {
        self.store.data().backend()
    }

    fn state_mut(&mut self) -> &mut KeyedStateBackend {
        self.store.data_mut().backend_mut()
    }
}
