//! The limits of one guest instance (`limits` in the job file) and the one place that tells
//! whether a failed call went past one of them.
//!
//! [`Limiter`] is the store's wasmtime resource limiter: it refuses a memory growth past
//! `memory_mb` and remembers that it did (and the size asked), and it remembers when a state
//! write took the keyed state past `state_mb`. [`Limiter::exceeded`] turns what it remembers,
//! and an epoch interrupt (`cpu_ms_per_call`), into an [`ExceededLimit`], whatever error the
//! guest or wasmtime made of it afterwards: a trap at instantiation, an abort in `process`,
//! a Python `MemoryError` returned as a failure. Nothing here reads an error's text.

use std::time::Duration;

use wasmtime::{ResourceLimiter, Trap};

use crate::operator::{FailureKind, GuestLimits, OperatorError, SubtaskContext};

/// A limit a call went past, with what it measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExceededLimit {
    /// A memory of the instance asked to grow to `asked` bytes, past `limit`.
    Memory { limit: usize, asked: usize },
    /// One call ran longer than `per_call`.
    Cpu { per_call: Duration },
    /// The subtask's keyed state grew to `held` bytes, past `limit`.
    State { limit: usize, held: usize },
}

impl ExceededLimit {
    pub fn kind(self) -> FailureKind {
        match self {
            Self::Memory { .. } => FailureKind::MemoryLimit,
            Self::Cpu { .. } => FailureKind::CpuLimit,
            Self::State { .. } => FailureKind::StateLimit,
        }
    }

    /// The rest of the sentence that the kind begins ("exceeded its memory limit ..."): the
    /// limit, the setting that sets it, what went past it, and what to do.
    pub fn message(self) -> String {
        match self {
            Self::Memory { limit, asked } => format!(
                "of {} (limits.memory_mb): the instance asked for a memory of {asked} bytes \
                 ({}); raise `memory_mb` in the operator's `limits` if it needs that much",
                mib(limit),
                mib(asked)
            ),
            Self::Cpu { per_call } => format!(
                "of {} ms per call (limits.cpu_ms_per_call): a call ran longer and was \
                 interrupted; raise `cpu_ms_per_call` in the operator's `limits` if the work \
                 of one batch takes that long",
                per_call.as_millis()
            ),
            Self::State { limit, held } => format!(
                "of {} (limits.state_mb): its keyed state grew to {held} bytes; raise \
                 `state_mb` in the operator's `limits` if it needs that much",
                mib(limit)
            ),
        }
    }

    /// The error of the subtask `ctx`.
    pub fn error(self, ctx: &SubtaskContext) -> OperatorError {
        ctx.error(self.kind(), self.message())
    }
}

/// Bytes in MiB, whole where they are (the job file sets limits in whole MiB).
fn mib(bytes: usize) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    }
}

/// The limits of one instance, and what went past them during the current call.
#[derive(Debug)]
pub struct Limiter {
    limits: GuestLimits,
    /// The size a memory asked to grow to when it was refused, during the current call.
    refused_memory: Option<usize>,
    /// The bytes of keyed state held when a write went past the state limit, during the
    /// current call: the call then fails whatever the guest does with the error it got.
    over_state: Option<usize>,
}

impl Limiter {
    pub fn new(limits: GuestLimits) -> Self {
        Self {
            limits,
            refused_memory: None,
            over_state: None,
        }
    }

    pub fn limits(&self) -> &GuestLimits {
        &self.limits
    }

    /// Forgets the previous call: what went past a limit then is that call's failure.
    pub fn start_call(&mut self) {
        self.refused_memory = None;
        self.over_state = None;
    }

    /// Checks the keyed state's size after a write; an error is the message the guest gets.
    pub fn check_state(&mut self, held: usize) -> Result<(), String> {
        match self.limits.state_bytes {
            Some(limit) if held > limit => {
                self.over_state = Some(held);
                Err(format!(
                    "the operator's keyed state holds {held} bytes, over its limit of {} \
                     (limits.state_mb)",
                    mib(limit)
                ))
            }
            _ => Ok(()),
        }
    }

    /// The limit the current call went past, if any. `error` is the call's wasmtime error,
    /// if it failed with one (an epoch interrupt is the CPU limit).
    pub fn exceeded(&self, error: Option<&wasmtime::Error>) -> Option<ExceededLimit> {
        if let Some(asked) = self.refused_memory {
            return Some(ExceededLimit::Memory {
                limit: self.limits.memory_bytes,
                asked,
            });
        }
        if let Some(held) = self.over_state {
            return Some(ExceededLimit::State {
                limit: self.limits.state_bytes.unwrap_or(0),
                held,
            });
        }
        match error.and_then(|e| e.downcast_ref::<Trap>()) {
            Some(Trap::Interrupt) => Some(ExceededLimit::Cpu {
                per_call: self.limits.cpu_time_per_call,
            }),
            _ => None,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.memory_bytes {
            self.refused_memory = Some(desired);
            // A trap, not a failed `memory.grow`: what a guest makes of a failed growth (an
            // abort, a `MemoryError`, a retry) would only hide the limit. `exceeded` names it.
            return Err(wasmtime::Error::msg(format!(
                "memory growth to {desired} bytes refused: over the limit of {} bytes",
                self.limits.memory_bytes
            )));
        }
        Ok(maximum.is_none_or(|max| desired <= max))
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(maximum.is_none_or(|max| desired <= max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(memory_mb: usize, state_mb: Option<usize>) -> Limiter {
        Limiter::new(GuestLimits {
            memory_bytes: memory_mb << 20,
            cpu_time_per_call: Duration::from_millis(300),
            state_bytes: state_mb.map(|mb| mb << 20),
        })
    }

    #[test]
    fn a_refused_growth_is_the_memory_limit_whatever_error_follows() {
        let mut limiter = limiter(8, None);
        assert!(limiter.memory_growing(0, 4 << 20, None).expect("allowed"));
        assert!(
            !limiter
                .memory_growing(0, 4 << 20, Some(1 << 20))
                .expect("its own maximum")
        );
        assert_eq!(limiter.exceeded(None), None);
        limiter
            .memory_growing(0, 13_107_200, None)
            .expect_err("refused");
        let other = wasmtime::Error::msg("wasm trap: unreachable");
        let exceeded = limiter.exceeded(Some(&other)).expect("the memory limit");
        assert_eq!(exceeded.kind(), FailureKind::MemoryLimit);
        assert_eq!(
            exceeded.message(),
            "of 8 MiB (limits.memory_mb): the instance asked for a memory of 13107200 bytes \
             (12.5 MiB); raise `memory_mb` in the operator's `limits` if it needs that much"
        );
        limiter.start_call();
        assert_eq!(
            limiter.exceeded(Some(&other)),
            None,
            "a new call starts clean"
        );
    }

    #[test]
    fn an_interrupt_is_the_cpu_limit() {
        let limiter = limiter(8, None);
        let interrupt = wasmtime::Error::from(Trap::Interrupt);
        let exceeded = limiter.exceeded(Some(&interrupt)).expect("the CPU limit");
        assert_eq!(exceeded.kind(), FailureKind::CpuLimit);
        assert!(
            exceeded
                .message()
                .starts_with("of 300 ms per call (limits.cpu_ms_per_call): "),
            "{}",
            exceeded.message()
        );
        let trap = wasmtime::Error::from(Trap::UnreachableCodeReached);
        assert_eq!(limiter.exceeded(Some(&trap)), None);
    }

    #[test]
    fn state_past_its_limit_is_the_state_limit() {
        let mut limiter = limiter(8, Some(1));
        assert_eq!(limiter.check_state(1 << 20), Ok(()));
        let told = limiter.check_state((1 << 20) + 1).expect_err("over");
        assert!(told.contains("limits.state_mb"), "{told}");
        let exceeded = limiter.exceeded(None).expect("the state limit");
        assert_eq!(exceeded.kind(), FailureKind::StateLimit);
        assert!(
            exceeded
                .message()
                .starts_with("of 1 MiB (limits.state_mb): its keyed state grew to 1048577 bytes"),
            "{}",
            exceeded.message()
        );
        assert_eq!(
            limiter.exceeded(None),
            Some(exceeded),
            "until the next call"
        );
    }
}
