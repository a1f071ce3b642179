//! Timers: callbacks at an event time or a processing time, per key.
//!
//! [`Timers`], declared in `open` with [`OpenContext::timers`](crate::OpenContext::timers),
//! registers and deletes timers for the key of the record being processed (in
//! [`Operator::process`](crate::Operator::process)) or of the timer being handled (in
//! [`Operator::on_timer`](crate::Operator::on_timer)). A timer is keyed state: the host
//! checkpoints it with the key's other state, so it survives restarts and rescales.
//!
//! - An **event-time** timer at `t` fires once the subtask's watermark reaches `t`: no record
//!   with a timestamp at or before `t` is expected any more. At the end of the input the
//!   watermark goes to the end of time, so every event-time timer fires before `close`.
//! - A **processing-time** timer at `t` fires once the host's clock reaches `t`; those that
//!   came due while the job was down fire right after it restores.
//!
//! One timer exists per (key, clock, timestamp, tag): registering it again changes nothing.
//! The tag is the operator's to choose, to tell its timers apart; the windows library
//! ([`crate::windows`]) uses tags from `0xFFFF_0000` up. A fired timer is gone; register it
//! again to fire again. Registrations travel with the batch's other state writes, in one
//! host call.
//!
//! ```no_run
//! use weir_guest::{Emitter, OpenContext, Operator, Record, Result, Timer, Timers, ValueState};
//!
//! /// Emits each key's count once a minute of event time has passed without a record.
//! struct Expiring {
//!     count: ValueState<u64>,
//!     last: ValueState<i64>,
//!     timers: Timers,
//! }
//!
//! impl Operator for Expiring {
//!     fn open(ctx: &mut OpenContext) -> Result<Self> {
//!         Ok(Self {
//!             count: ctx.value_state("count")?,
//!             last: ctx.value_state("last")?,
//!             timers: ctx.timers(),
//!         })
//!     }
//!
//!     fn process(&mut self, record: &Record<'_>, _out: &mut Emitter) -> Result<()> {
//!         let ts = record.timestamp.ok_or("records need a timestamp")?;
//!         if let Some(previous) = self.last.get()? {
//!             self.timers.delete_event_time(previous + 60_000, 0)?;
//!         }
//!         self.count.update(|n| Some(n.unwrap_or(0) + 1))?;
//!         self.last.set(&ts)?;
//!         self.timers.register_event_time(ts + 60_000, 0)
//!     }
//!
//!     fn on_timer(&mut self, timer: &Timer<'_>, out: &mut Emitter) -> Result<()> {
//!         let count = self.count.get()?.unwrap_or(0);
//!         self.count.remove()?;
//!         self.last.remove()?;
//!         out.emit_fmt(Some(timer.key), format_args!("{count}"))
//!     }
//! }
//! # fn main() {}
//! ```

use crate::Result;
use crate::bindings::weir::operator::state::OpKind;
use crate::state::batch;

/// The clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// The watermark: event time.
    EventTime,
    /// The host's wall clock.
    ProcessingTime,
}

/// A timer that fired, handed to [`Operator::on_timer`](crate::Operator::on_timer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer<'a> {
    /// The key it was registered for; state handles act on this key while it is handled.
    pub key: &'a [u8],
    /// When it was due, in milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// The tag it was registered with.
    pub tag: u32,
    /// The clock it followed.
    pub domain: TimeDomain,
}

/// Registers and deletes timers of the current key, and reads the clocks.
#[derive(Clone, Copy, Debug)]
pub struct Timers {
    _declared: (),
}

impl Timers {
    pub(crate) fn new() -> Self {
        Self { _declared: () }
    }

    /// Registers an event-time timer at `at` (milliseconds) with `tag` for the current key.
    pub fn register_event_time(&self, at: i64, tag: u32) -> Result<()> {
        write(OpKind::TimerRegister, TimeDomain::EventTime, at, tag)
    }

    /// Deletes the event-time timer at `at` with `tag` of the current key, if there is one.
    pub fn delete_event_time(&self, at: i64, tag: u32) -> Result<()> {
        write(OpKind::TimerDelete, TimeDomain::EventTime, at, tag)
    }

    /// Registers a processing-time timer at `at` (milliseconds since the Unix epoch, by the
    /// host's clock) with `tag` for the current key.
    pub fn register_processing_time(&self, at: i64, tag: u32) -> Result<()> {
        write(OpKind::TimerRegister, TimeDomain::ProcessingTime, at, tag)
    }

    /// Deletes the processing-time timer at `at` with `tag` of the current key, if any.
    pub fn delete_processing_time(&self, at: i64, tag: u32) -> Result<()> {
        write(OpKind::TimerDelete, TimeDomain::ProcessingTime, at, tag)
    }

    /// The subtask's watermark (milliseconds since the Unix epoch): records with a timestamp
    /// at or before it are late. `None` before the first watermark.
    pub fn watermark(&self) -> Option<i64> {
        watermark()
    }

    /// The host's clock, in milliseconds since the Unix epoch.
    pub fn processing_time(&self) -> i64 {
        batch::with_runtime(|runtime| Ok(runtime.host.processing_time())).unwrap_or(0)
    }
}

/// The subtask's watermark, read from the host once per batch.
pub(crate) fn watermark() -> Option<i64> {
    batch::with_runtime(|runtime| {
        Ok(match runtime.watermark {
            Some(w) => w,
            None => {
                let w = runtime.host.watermark();
                runtime.watermark = Some(w);
                w
            }
        })
    })
    .ok()
    .flatten()
}

fn write(kind: OpKind, domain: TimeDomain, at: i64, tag: u32) -> Result<()> {
    let slot = batch::current_slot("timers")?;
    let domain = match domain {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    };
    batch::with_runtime(|runtime| {
        runtime.log.push(
            kind,
            domain,
            slot,
            None,
            Some(&mut |data: &mut Vec<u8>| {
                data.extend_from_slice(&at.to_le_bytes());
                data.extend_from_slice(&tag.to_le_bytes());
                Ok(())
            }),
        )
    })
}
