//! [`OperatorError`]: a failed operator, named by operator and subtask.

use std::fmt;

use crate::ids::{OperatorName, SubtaskIndex};

/// How an operator failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The component could not be instantiated.
    Instantiate,
    /// `open` returned an error.
    Open,
    /// `process` or `close` returned an error.
    Returned,
    /// The guest trapped (a panic, an unreachable, a bad memory access).
    Trap,
    /// One call ran longer than the CPU-time limit.
    CpuLimit,
    /// The guest tried to grow its memory past the limit.
    MemoryLimit,
    /// The guest returned a malformed batch: a fault of the operator (or of the SDK or
    /// bindings it was built with), never of the host.
    BadOutput,
    /// Its keyed state grew past the limit.
    StateLimit,
    /// Its timers could not be read from its state.
    Timers,
}

impl FailureKind {
    /// The guest went past one of the limits the job file sets.
    pub fn is_limit(self) -> bool {
        matches!(
            self,
            FailureKind::CpuLimit | FailureKind::MemoryLimit | FailureKind::StateLimit
        )
    }

    /// The message is the guest's own words (its error, traceback, stack or panic message),
    /// which a failure shows first.
    pub fn is_guests_message(self) -> bool {
        matches!(
            self,
            FailureKind::Open | FailureKind::Returned | FailureKind::Trap
        )
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureKind::Instantiate => "could not be instantiated",
            FailureKind::Open => "failed to open",
            FailureKind::Returned => "returned an error",
            FailureKind::Trap => "trapped",
            FailureKind::CpuLimit => "exceeded its CPU time limit",
            FailureKind::MemoryLimit => "exceeded its memory limit",
            FailureKind::BadOutput => "returned a malformed batch",
            FailureKind::StateLimit => "exceeded its state limit",
            FailureKind::Timers => "could not read its timers",
        })
    }
}

/// An operator subtask failed; the job fails with this error.
///
/// When the message is the guest's own ([`FailureKind::is_guests_message`]), it comes first,
/// as the guest's language shows it, and the operator and subtask follow on a line of their
/// own: `<message>\nin operator `NAME` subtask N, which <kind>[ on <record>]`. Otherwise the
/// failure is one sentence, `operator `NAME` subtask N <kind>: <message>`; for a limit, the
/// message goes on with the kind's sentence: `... exceeded its memory limit of 8 MiB
/// (limits.memory_mb): ...`.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub struct OperatorError {
    pub operator: OperatorName,
    pub subtask: SubtaskIndex,
    pub kind: FailureKind,
    /// What went wrong: for an error the guest returned, its message with the guest's
    /// traceback or stack where its language has one; for a limit, the limit, the setting
    /// that sets it and what went past it.
    pub message: String,
    /// The index in the batch given to `process` of the record being processed when the
    /// operator failed, as the guest reported it; `None` when the failure concerns no one
    /// record (`open`, `close`, a trap, a limit, the SDK's own handling of the batch).
    pub record: Option<u32>,
    /// That record, described by the runtime (key, value, origin in the input), when known.
    pub on: Option<String>,
}

impl OperatorError {
    /// The same error, about the record at index `record` of the batch given to `process`.
    #[must_use]
    pub fn with_record(mut self, record: Option<u32>) -> Self {
        self.record = record;
        self
    }
}

impl fmt::Display for OperatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            operator,
            subtask,
            kind,
            message,
            record: _,
            on,
        } = self;
        let on = on
            .as_ref()
            .map(|on| format!(" on {on}"))
            .unwrap_or_default();
        if kind.is_guests_message() {
            write!(
                f,
                "{message}\nin operator `{operator}` subtask {subtask}, which {kind}{on}"
            )
        } else if kind.is_limit() {
            write!(
                f,
                "operator `{operator}` subtask {subtask} {kind}{on} {message}"
            )
        } else {
            write!(
                f,
                "operator `{operator}` subtask {subtask} {kind}{on}: {message}"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: FailureKind, message: &str) -> OperatorError {
        OperatorError {
            operator: OperatorName("count".into()),
            subtask: SubtaskIndex(1),
            kind,
            message: message.into(),
            record: None,
            on: None,
        }
    }

    #[test]
    fn a_limit_reads_as_one_sentence_and_a_guests_message_comes_first() {
        assert_eq!(
            error(FailureKind::MemoryLimit, "of 8 MiB (limits.memory_mb)").to_string(),
            "operator `count` subtask 1 exceeded its memory limit of 8 MiB (limits.memory_mb)"
        );
        assert_eq!(
            error(FailureKind::Returned, "ValueError: boom\nTraceback ...").to_string(),
            "ValueError: boom\nTraceback ...\nin operator `count` subtask 1, which returned an error"
        );
        let mut on_record = error(FailureKind::Returned, "boom");
        on_record.on = Some("the record with key \"k\"".into());
        assert_eq!(
            on_record.to_string(),
            "boom\nin operator `count` subtask 1, which returned an error on the record with key \"k\""
        );
    }
}
