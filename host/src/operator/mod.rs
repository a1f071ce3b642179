//! What the runtime runs in a subtask: an [`OperatorInstance`], made by an
//! [`OperatorFactory`] once per subtask.
//!
//! Wasm components ([`crate::guest::WasmOperatorFactory`]) are the real thing; the trait also
//! lets benchmarks and tests run an operator compiled into the host over the same runtime and
//! state backend, which is how Wasm is compared with native code.

mod error;
pub(crate) mod log_file;

use std::sync::Arc;
use std::time::Duration;

pub use error::{FailureKind, OperatorError};
pub use log_file::{GuestLogFile, LogLine};

use crate::ids::{CheckpointId, OperatorName, SubtaskIndex};
use crate::partition::{KeyGroupRange, KeyGroups};
use crate::record::RecordBatch;
use crate::state::{FiredTimer, KeyedStateBackend, TimeDomain};

/// Resource bounds of one guest instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestLimits {
    /// Linear memory of the instance, all memories together.
    pub memory_bytes: usize,
    /// CPU time one call into the guest may take before it is interrupted.
    pub cpu_time_per_call: Duration,
    /// Bytes of keyed state (live keys and values) the subtask may hold; `None`: no limit.
    pub state_bytes: Option<usize>,
}

impl Default for GuestLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 512 << 20,
            cpu_time_per_call: Duration::from_secs(10),
            state_bytes: None,
        }
    }
}

/// Everything a subtask's operator instance is told about where it runs.
#[derive(Clone, Debug)]
pub struct SubtaskContext {
    pub job: Arc<str>,
    pub operator: OperatorName,
    pub subtask: SubtaskIndex,
    pub parallelism: u32,
    pub key_groups: KeyGroups,
    /// The key groups this subtask owns.
    pub range: KeyGroupRange,
    /// The operator's configuration, as a JSON object.
    pub config_json: String,
    pub limits: GuestLimits,
    /// Where the job keeps its guest log lines besides the host's log, if anywhere.
    pub guest_log: Option<Arc<GuestLogFile>>,
    /// The run's first checkpoint, to which the subtask's first writes (and log lines)
    /// belong: 1 for a new job, the one after the newest in the store otherwise.
    pub first_checkpoint: CheckpointId,
}

impl SubtaskContext {
    /// Subtask `subtask` of `parallelism` of operator `operator` in job `job`, owning its
    /// share of `key_groups`: configured with `{}`, default limits, no guest log file, in the
    /// first run of the job. The runtime sets every field; tests and benchmarks start here.
    pub fn new(
        job: &str,
        operator: &str,
        subtask: u32,
        parallelism: u32,
        key_groups: KeyGroups,
    ) -> Self {
        Self {
            job: Arc::from(job),
            operator: OperatorName(operator.into()),
            subtask: SubtaskIndex(subtask),
            parallelism,
            key_groups,
            range: key_groups.range_of(SubtaskIndex(subtask), parallelism),
            config_json: "{}".into(),
            limits: GuestLimits::default(),
            guest_log: None,
            first_checkpoint: CheckpointId(1),
        }
    }

    /// An error of this subtask.
    pub fn error(&self, kind: FailureKind, message: impl Into<String>) -> OperatorError {
        OperatorError {
            operator: self.operator.clone(),
            subtask: self.subtask,
            kind,
            message: message.into(),
            record: None,
            on: None,
        }
    }
}

/// One running instance of an operator, owned by one subtask task.
pub trait OperatorInstance: Send {
    /// Processes a batch and returns the records it emits. The batch is lent: when the call
    /// fails, `batch` holds the records it held, so that the failure can name its record and
    /// a retry can leave it out (after a success, the caller has no more use for it).
    fn process(&mut self, batch: &mut RecordBatch) -> Result<RecordBatch, OperatorError>;

    /// Keeps the state changes of each `process` call until the next one, so that
    /// [`OperatorInstance::roll_back`] can take a failed call back (it costs a read and a
    /// copy per write). Operators that cannot roll back ignore it.
    fn keep_undo_log(&mut self) {}

    /// Takes back the state changes of the last `process` call, after it failed; an error
    /// when the instance keeps no undo log.
    fn roll_back(&mut self) -> Result<(), String> {
        Err("this operator cannot take back a failed call".into())
    }

    /// Tells the instance its subtask's watermark (what the guest's `time.watermark` says).
    fn set_watermark(&mut self, watermark: Option<i64>) {
        let _ = watermark;
    }

    /// Hands the instance `timers` of `domain` that fired (taken from its state, in firing
    /// order); returns the records it emits. Operators without timers never get any.
    fn on_timers(
        &mut self,
        domain: TimeDomain,
        timers: &[FiredTimer],
    ) -> Result<RecordBatch, OperatorError> {
        let _ = (domain, timers);
        Ok(RecordBatch::new())
    }

    /// Ends the input; returns the records emitted at the end.
    fn close(&mut self) -> Result<RecordBatch, OperatorError>;

    /// The records the instance dropped as too late for event time since the last call (its
    /// windows count them); 0 for operators that drop none.
    fn take_dropped_late(&mut self) -> u64 {
        0
    }

    /// The instance's keyed state.
    fn state(&self) -> &KeyedStateBackend;

    /// The instance's keyed state, to snapshot or restore it between batches.
    fn state_mut(&mut self) -> &mut KeyedStateBackend;
}

/// Makes one [`OperatorInstance`] per subtask.
pub trait OperatorFactory: Send + Sync {
    fn instantiate(&self, ctx: &SubtaskContext)
    -> Result<Box<dyn OperatorInstance>, OperatorError>;
}
