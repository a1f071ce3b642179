//! [`WasmOperator`]: an operator instance backed by a component instance.

use wasmtime::{Store, StoreLimitsBuilder, Trap};

use super::{GuestState, LogContext};
use crate::bindings::Operator;
use crate::bindings::weir::operator::types::{Batch, Context, Failure};
use crate::engine::{EPOCH_TICK, Engine, OperatorComponent};
use crate::operator::{
    FailureKind, OperatorError, OperatorFactory, OperatorInstance, SubtaskContext,
};
use crate::record::RecordBatch;
use crate::state::KeyedStateBackend;

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
    record_slots: Vec<u32>,
}

impl WasmOperator {
    /// Instantiates the component and calls its `open`.
    pub fn open(
        engine: &Engine,
        component: &OperatorComponent,
        ctx: &SubtaskContext,
    ) -> Result<Self, OperatorError> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(ctx.limits.memory_bytes)
            .trap_on_grow_failure(true)
            .build();
        let backend = KeyedStateBackend::new(ctx.key_groups, ctx.range);
        let log = LogContext {
            job: ctx.job.clone(),
            operator: ctx.operator.clone(),
            subtask: ctx.subtask,
            file: ctx.guest_log.clone(),
        };
        let mut state = GuestState::new(backend, limits, log);
        state.state_limit = ctx.limits.state_bytes;
        let mut store = Store::new(engine.wasmtime(), state);
        store.limiter(|s| &mut s.limits);
        let deadline_ticks =
            (ctx.limits.cpu_time_per_call.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64;
        store.set_epoch_deadline(deadline_ticks);
        let bindings = component
            .pre()
            .instantiate(&mut store)
            .map_err(|e| ctx.error(FailureKind::Instantiate, format!("{e:#}")))?;
        let mut op = Self {
            store,
            bindings,
            ctx: ctx.clone(),
            deadline_ticks,
            record_slots: Vec::new(),
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
            Ok(Err(message)) => return Err(ctx.error(FailureKind::Open, message)),
            Err(trap) => return Err(op.trap_error(trap)),
        }
        op.store.data_mut().backend.seal_declarations();
        Ok(op)
    }

    /// Turns a wasmtime error (a trap, an interrupt, a failed memory growth) into an operator
    /// error that says which limit was hit.
    fn trap_error(&self, error: wasmtime::Error) -> OperatorError {
        let (kind, message) = match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => (
                FailureKind::CpuLimit,
                format!(
                    "one call ran longer than {:?}; raise `cpu_ms_per_call` in the operator's `limits` if this is expected",
                    self.ctx.limits.cpu_time_per_call
                ),
            ),
            _ if format!("{error:#}").contains("forcing trap when growing memory") => (
                FailureKind::MemoryLimit,
                format!(
                    "the instance tried to grow its memory past {} MiB; raise `memory_mb` in the operator's `limits` if this is expected",
                    self.ctx.limits.memory_bytes >> 20
                ),
            ),
            _ => {
                // What the guest printed last (a Rust panic message), then the trap itself.
                let printed = self.store.data().stderr.tail();
                let printed = printed.lines().rev().take(8).collect::<Vec<_>>();
                let printed: String = printed.into_iter().rev().collect::<Vec<_>>().join("\n");
                let trap = format!("{error:?}");
                if printed.is_empty() {
                    (FailureKind::Trap, trap)
                } else {
                    (FailureKind::Trap, format!("{printed}\n{trap}"))
                }
            }
        };
        self.ctx.error(kind, message)
    }

    /// The output of a `process` or `close` call (named by `call`), or its failure.
    fn finish_call(
        &mut self,
        call: &str,
        result: wasmtime::Result<Result<Batch, Failure>>,
    ) -> Result<RecordBatch, OperatorError> {
        let state = self.store.data();
        if state.over_state_limit {
            return Err(self.ctx.error(
                FailureKind::StateLimit,
                format!(
                    "its keyed state grew to {} bytes, past its limit of {} MiB; raise `state_mb` in the operator's `limits` if this is expected",
                    state.backend.live_bytes(),
                    state.state_limit.unwrap_or(0) >> 20
                ),
            ));
        }
        match result {
            Ok(Ok(out)) => {
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
            Ok(Err(Failure { message, record })) => Err(self
                .ctx
                .error(FailureKind::Returned, message)
                .with_record(record)),
            Err(trap) => Err(self.trap_error(trap)),
        }
    }
}

impl OperatorInstance for WasmOperator {
    fn process(&mut self, batch: RecordBatch) -> Result<RecordBatch, OperatorError> {
        let (batch, hashes) = batch.into_wit();
        let data = self.store.data_mut();
        data.slots.assign(&batch, &hashes, &mut self.record_slots);
        self.store.set_epoch_deadline(self.deadline_ticks);
        let processor = self.bindings.weir_operator_processor();
        let result = processor.call_process(&mut self.store, &batch, &self.record_slots);
        self.finish_call("process", result)
    }

    fn close(&mut self) -> Result<RecordBatch, OperatorError> {
        self.store.set_epoch_deadline(self.deadline_ticks);
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
