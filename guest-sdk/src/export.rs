//! The `weir:operator/processor` export: drives an [`Operator`] through the WIT calls.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;

use crate::bindings::exports::weir::operator::processor::{
    Batch, Context, Failure, FiredTimers, Guest,
};
use crate::bindings::weir::operator::types::TimeDomain as WitDomain;
use crate::numbers::{S64s, U32s};
use crate::record::{BatchRecords, HAS_TIMESTAMP};
use crate::state::batch::{self, ColumnsOf, NO_SLOT};
use crate::state::host::blob;
use crate::{Emitter, Error, OpenContext, Operator, Result, TimeDomain, Timer};

thread_local! {
    /// The operator of this component instance, from `open` until `close`. Borrowed for the
    /// whole of a WIT call; user code cannot reach it, so the borrow never overlaps another.
    static INSTANCE: RefCell<Option<Instance>> = const { RefCell::new(None) };
}

struct Instance {
    /// The user's operator; its type is the `T` of `Exports<T>`.
    operator: Box<dyn Any>,
    emitter: Emitter,
}

/// The type `export_operator!` exports: implements the generated `Guest` trait for `T`.
pub struct Exports<T>(PhantomData<T>);

impl<T: Operator> Guest for Exports<T> {
    fn open(ctx: Context) -> Result<(), String> {
        open::<T>(ctx).map_err(String::from)
    }

    fn process(batch: Batch, key_slots: Vec<u8>) -> Result<Batch, Failure> {
        with_instance::<T, _>(|operator, emitter| {
            Ok(process(operator, emitter, &batch, &key_slots))
        })
        .map_err(Failed::outside_records)
        .and_then(|result| result)
        .map_err(Failure::from)
    }

    fn on_timers(timers: FiredTimers) -> Result<Batch, Failure> {
        with_instance::<T, _>(|operator, emitter| Ok(on_timers(operator, emitter, &timers)))
            .map_err(Failed::outside_records)
            .and_then(|result| result)
            .map_err(Failure::from)
    }

    fn close() -> Result<Batch, Failure> {
        close::<T>().map_err(|error| Failed::outside_records(error).into())
    }
}

/// A failed `process` or `close`: the error, and the index of the record being processed
/// when it happened, if it happened in one.
#[derive(Debug, PartialEq)]
struct Failed {
    error: Error,
    record: Option<u32>,
}

impl Failed {
    fn outside_records(error: Error) -> Self {
        Self {
            error,
            record: None,
        }
    }
}

impl From<Failed> for Failure {
    fn from(failed: Failed) -> Self {
        Failure {
            message: failed.error.into(),
            record: failed.record,
        }
    }
}

fn open<T: Operator>(ctx: Context) -> Result<()> {
    if INSTANCE.with(|cell| {
        cell.try_borrow()
            .map_or(true, |instance| instance.is_some())
    }) {
        return Err(Error::new(
            "open called on an operator instance that is already open",
        ));
    }
    batch::reset_declarations()?;
    let operator = T::open(&mut OpenContext::new(ctx))?;
    INSTANCE.with(|cell| {
        let mut instance = cell
            .try_borrow_mut()
            .map_err(|_| Error::new("internal: operator instance in use"))?;
        *instance = Some(Instance {
            operator: Box::new(operator),
            emitter: Emitter::new(),
        });
        Ok(())
    })
}

fn with_instance<T: Operator, R>(f: impl FnOnce(&mut T, &mut Emitter) -> Result<R>) -> Result<R> {
    INSTANCE.with(|cell| {
        let mut instance = cell
            .try_borrow_mut()
            .map_err(|_| Error::new("internal: operator instance in use"))?;
        let Instance { operator, emitter } = instance.as_mut().ok_or_else(|| {
            Error::new("the operator is not open: process called before open or after close")
        })?;
        let operator = operator
            .downcast_mut::<T>()
            .ok_or_else(|| Error::new("internal: operator instance of another type"))?;
        f(operator, emitter)
    })
}

/// Runs one batch through the operator: every record with its key slot set, then one flush
/// of the batch's state writes, then the emitted records. A failure in `process` names the
/// record's index in the batch. `key_slots` is the WIT's `u32s`, read in place.
fn process<T: Operator>(
    operator: &mut T,
    out: &mut Emitter,
    batch: &Batch,
    key_slots: &[u8],
) -> Result<Batch, Failed> {
    let records = BatchRecords::new(batch).map_err(Failed::outside_records)?;
    let key_slots = U32s::new(key_slots, "key slots")
        .map_err(|error| Failed::outside_records(error.context("malformed batch")))?;
    let slot_count = slot_count(key_slots, records.len()).map_err(Failed::outside_records)?;
    let scope = batch::begin(slot_count).map_err(Failed::outside_records)?;
    keep_record_columns(batch, key_slots).map_err(Failed::outside_records)?;
    for (index, (record, slot)) in (0u32..).zip(records.zip(key_slots.iter())) {
        batch::set_current_slot(slot);
        let record = match record {
            Ok(record) => record,
            Err(error) => {
                out.discard();
                return Err(Failed::outside_records(error));
            }
        };
        if let Err(error) = operator.process(&record, out) {
            out.discard();
            return Err(Failed {
                error,
                record: Some(index),
            });
        }
    }
    if let Err(error) = scope.finish() {
        out.discard();
        return Err(Failed::outside_records(error));
    }
    out.take_batch().map_err(Failed::outside_records)
}

/// Hands every fired timer to the operator, its key's slot set, then sends the state writes
/// in one flush, like a batch of records. A failure names the timer's index.
fn on_timers<T: Operator>(
    operator: &mut T,
    out: &mut Emitter,
    timers: &FiredTimers,
) -> Result<Batch, Failed> {
    let malformed = |error: Error| Failed::outside_records(error.context("malformed timers"));
    let key_slots = U32s::new(&timers.key_slots, "key slots").map_err(malformed)?;
    let timestamps = S64s::new(&timers.timestamps, "timestamps").map_err(malformed)?;
    let tags = U32s::new(&timers.tags, "tags").map_err(malformed)?;
    let key_ends = U32s::new(&timers.keys.ends, "key ends").map_err(malformed)?;
    let n = key_slots.len();
    if key_ends.len() != n || timestamps.len() != n || tags.len() != n {
        return Err(Failed::outside_records(Error::new(
            "malformed timers: their lists differ in length",
        )));
    }
    let slot_count = slot_count(key_slots, n).map_err(Failed::outside_records)?;
    let scope = batch::begin(slot_count).map_err(Failed::outside_records)?;
    batch::with_runtime(|runtime| {
        runtime.watermark = Some(timers.watermark);
        Ok(())
    })
    .map_err(Failed::outside_records)?;
    let domain = match timers.domain {
        WitDomain::EventTime => TimeDomain::EventTime,
        WitDomain::ProcessingTime => TimeDomain::ProcessingTime,
    };
    batch::with_runtime(|runtime| {
        let columns = &mut runtime.columns;
        if columns.wanted {
            columns.start(ColumnsOf::Timers(domain));
            columns.slots.extend(key_slots.iter());
            columns.timestamps.extend(timestamps.iter().map(Some));
            columns.tags.extend(tags.iter());
        }
        Ok(())
    })
    .map_err(Failed::outside_records)?;
    let columns = key_slots.iter().zip(timestamps.iter()).zip(tags.iter());
    for (index, ((slot, timestamp), tag)) in columns.enumerate() {
        batch::set_current_slot(slot);
        let timer = blob(&timers.keys, index).map(|key| Timer {
            key,
            timestamp,
            tag,
            domain,
        });
        let result = timer.and_then(|timer| operator.on_timer(&timer, out));
        if let Err(error) = result {
            out.discard();
            return Err(Failed {
                error,
                record: Some(index as u32),
            });
        }
    }
    if let Err(error) = scope.finish() {
        out.discard();
        return Err(Failed::outside_records(error));
    }
    out.take_batch().map_err(Failed::outside_records)
}

/// Keeps the batch's key slots and timestamps in the runtime, if a library asked for them.
fn keep_record_columns(batch: &Batch, key_slots: U32s<'_>) -> Result<()> {
    batch::with_runtime(|runtime| {
        let columns = &mut runtime.columns;
        if !columns.wanted {
            return Ok(());
        }
        columns.start(ColumnsOf::Records);
        columns.slots.extend(key_slots.iter());
        let timestamps = S64s::new(&batch.timestamps, "timestamps")?;
        let stamped = batch.flags.iter().map(|f| f & HAS_TIMESTAMP != 0);
        columns.timestamps.extend(
            timestamps
                .iter()
                .zip(stamped)
                .map(|(ts, stamped)| stamped.then_some(ts)),
        );
        Ok(())
    })
}

/// The number of distinct keys of a batch, checking that `key_slots` is what the WIT says:
/// one slot per record, numbered from 0 in order of first appearance (so below the record
/// count), `u32::MAX` for records without key.
fn slot_count(key_slots: U32s<'_>, records: usize) -> Result<u32> {
    if key_slots.len() != records {
        return Err(Error::new(format!(
            "malformed batch: {} key slots for {records} records",
            key_slots.len()
        )));
    }
    let mut count = 0;
    for slot in key_slots.iter() {
        if slot == NO_SLOT {
            continue;
        }
        if slot as usize >= records {
            return Err(Error::new(format!(
                "malformed batch: key slot {slot} in a batch of {records} records"
            )));
        }
        count = count.max(slot + 1);
    }
    Ok(count)
}

fn close<T: Operator>() -> Result<Batch> {
    let result = with_instance::<T, _>(|operator, out| match operator.close(out) {
        Ok(()) => out.take_batch(),
        Err(error) => {
            out.discard();
            Err(error)
        }
    });
    // The instance is done: drop the operator (running its `Drop`, if any).
    INSTANCE.with(|cell| {
        cell.try_borrow_mut()
            .map(|mut instance| instance.take())
            .ok()
    });
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::{column, items};
    use crate::record::{HAS_KEY, HAS_TIMESTAMP};
    use crate::state::fake::FakeHost;
    use crate::{Record, ValueState};

    /// Counts per key; fails on the value "fail"; emits a final record on close.
    struct Counter {
        count: ValueState<u64>,
    }

    impl Operator for Counter {
        fn open(ctx: &mut OpenContext) -> Result<Self> {
            Ok(Self {
                count: ctx.value_state("count")?,
            })
        }

        fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
            if record.value == b"fail" {
                return Err(Error::new("saw fail"));
            }
            let n = self.count.get()?.unwrap_or(0) + 1;
            self.count.set(&n)?;
            let value = record.value_str()?;
            out.emit_with(record.key, record.timestamp, |data| {
                data.extend_from_slice(format!("{value}={n}").as_bytes());
                Ok(())
            })
        }

        fn close(&mut self, out: &mut Emitter) -> Result<()> {
            out.emit(None, b"closed");
            Ok(())
        }
    }

    type Exported = Exports<Counter>;

    fn context() -> Context {
        Context {
            operator_name: "counter".into(),
            subtask: 0,
            parallelism: 1,
            config: "{}".into(),
        }
    }

    /// A batch of keyed records `(key, value)`, and its key slots (as the WIT's `u32s`).
    fn batch(records: &[(Option<&str>, &str)]) -> (Batch, Vec<u8>) {
        let mut out = Emitter::new();
        let mut keys: Vec<&str> = Vec::new();
        let mut slots = Vec::new();
        for &(key, value) in records {
            out.emit(key.map(str::as_bytes), value.as_bytes());
            slots.push(key.map_or(NO_SLOT, |key| {
                let slot = keys.iter().position(|k| *k == key).unwrap_or_else(|| {
                    keys.push(key);
                    keys.len() - 1
                });
                slot as u32
            }));
        }
        (out.take_batch().expect("a small batch"), column(slots))
    }

    /// `process` through the export, with its failure's message as the error.
    fn call_process(batch: Batch, slots: Vec<u8>) -> Result<Batch, String> {
        Exported::process(batch, slots).map_err(|failure| failure.message)
    }

    /// `close` through the export, with its failure's message as the error.
    fn call_close() -> Result<Batch, String> {
        Exported::close().map_err(|failure| failure.message)
    }

    fn values(batch: &Batch) -> Vec<String> {
        BatchRecords::new(batch)
            .expect("a valid batch")
            .map(|record| {
                record
                    .expect("a valid record")
                    .value_str()
                    .expect("UTF-8")
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn drives_an_operator_through_open_process_and_close() -> Result<(), String> {
        let host = FakeHost::install();
        Exported::open(context())?;
        let (input, slots) = batch(&[(Some("a"), "x"), (Some("b"), "y"), (Some("a"), "z")]);
        let output = call_process(input, slots)?;
        assert_eq!(values(&output), ["x=1", "y=1", "z=2"]);
        assert_eq!(output.flags, [HAS_KEY; 3]);
        assert_eq!(host.calls().read_values, 1);
        assert_eq!(host.calls().apply, 1);

        let (input, slots) = batch(&[(Some("a"), "w")]);
        assert_eq!(values(&call_process(input, slots)?), ["w=3"]);
        assert_eq!((host.calls().read_values, host.calls().apply), (2, 2));

        let closed = call_close()?;
        assert_eq!(values(&closed), ["closed"]);
        assert_eq!(closed.flags, [0]);
        let after = call_process(batch(&[]).0, Vec::new()).expect_err("closed");
        assert!(after.contains("not open"), "{after}");
        Ok(())
    }

    #[test]
    fn errors_discard_the_batch() -> Result<(), String> {
        let host = FakeHost::install();
        Exported::open(context())?;
        let (input, slots) = batch(&[(Some("a"), "x"), (Some("b"), "fail")]);
        let failure = Exported::process(input, slots).expect_err("fails on `fail`");
        assert_eq!(failure.message, "saw fail");
        assert_eq!(failure.record, Some(1), "the index of the failing record");
        assert_eq!(host.calls().apply, 0);
        let (input, slots) = batch(&[(Some("a"), "x")]);
        assert_eq!(
            values(&call_process(input, slots)?),
            ["x=1"],
            "no output or state left over"
        );
        Ok(())
    }

    fn empty_batch() -> Batch {
        Batch {
            data: Vec::new(),
            key_ends: Vec::new(),
            value_ends: Vec::new(),
            flags: Vec::new(),
            timestamps: Vec::new(),
        }
    }

    #[test]
    fn keyless_records_get_a_clear_error() -> Result<(), String> {
        FakeHost::install();
        Exported::open(context())?;
        let (input, slots) = batch(&[(Some("a"), "x"), (None, "x")]);
        let failure = Exported::process(input, slots).expect_err("keyless");
        assert!(
            failure
                .message
                .contains("state access needs a keyed record; key the stream with key_by"),
            "{}",
            failure.message
        );
        assert_eq!(failure.record, Some(1));
        Ok(())
    }

    #[test]
    fn lifecycle_mistakes_are_errors_not_traps() -> Result<(), String> {
        FakeHost::install();
        let (input, slots) = batch(&[(Some("a"), "x")]);
        let error = call_process(input, slots).expect_err("not open");
        assert!(error.contains("process called before open"), "{error}");
        Exported::open(context())?;
        assert!(Exported::open(context()).is_err_and(|e| e.contains("already open")));
        Ok(())
    }

    #[test]
    fn malformed_key_slots_are_errors() -> Result<(), String> {
        FakeHost::install();
        Exported::open(context())?;
        let (input, _) = batch(&[(Some("a"), "x")]);
        let failure = Exported::process(input.clone(), vec![]).expect_err("no slots");
        assert!(failure.message.contains("1 records"), "{}", failure.message);
        assert_eq!(
            failure.record, None,
            "the SDK's handling of the batch, no one record's"
        );
        assert!(
            call_process(input.clone(), column([7u32])).is_err_and(|e| e.contains("key slot 7"))
        );
        let failure = Exported::process(input, vec![0, 0, 0]).expect_err("a partial slot");
        assert_eq!(
            failure.message,
            "malformed batch: its key slots are 3 bytes, not a whole number of 4-byte items"
        );
        assert_eq!(failure.record, None);
        let slots = |slots: &[u32]| column(slots.iter().copied());
        let count = |slots: &[u8], records| slot_count(U32s::whole(slots), records);
        assert_eq!(count(&slots(&[0, NO_SLOT, 1, 0]), 4), Ok(2));
        assert_eq!(count(&slots(&[NO_SLOT]), 1), Ok(0));
        Ok(())
    }

    /// Fired timers `(slot, key, timestamp, tag)`, as the host sends them.
    fn fired(timers: &[(u32, &str, i64, u32)]) -> FiredTimers {
        let mut keys = Emitter::new();
        for &(_, key, _, _) in timers {
            keys.emit(None, key.as_bytes());
        }
        let keys = keys.take_batch().expect("a small batch");
        FiredTimers {
            domain: WitDomain::EventTime,
            keys: crate::bindings::weir::operator::types::Blobs {
                data: keys.data,
                ends: keys.value_ends,
            },
            key_slots: column(timers.iter().map(|t| t.0)),
            timestamps: column(timers.iter().map(|t| t.2)),
            tags: column(timers.iter().map(|t| t.3)),
            watermark: Some(10),
        }
    }

    #[test]
    fn fired_timers_are_read_from_their_columns() -> Result<(), String> {
        FakeHost::install();
        Exported::open(context())?;
        let failure = Exported::on_timers(fired(&[(0, "a", -5, 3)])).expect_err("no on_timer");
        assert_eq!(
            (failure.message.as_str(), failure.record),
            (
                "a timer fired (tag 3, at -5) but the operator does not implement on_timer",
                Some(0)
            )
        );

        let mut partial = fired(&[(0, "a", 1, 2), (1, "b", 3, 4)]);
        partial.tags.pop();
        let failure = Exported::on_timers(partial).expect_err("a partial tag");
        assert_eq!(
            (failure.message.as_str(), failure.record),
            (
                "malformed timers: its tags are 7 bytes, not a whole number of 4-byte items",
                None
            )
        );
        let mut short = fired(&[(0, "a", 1, 2), (1, "b", 3, 4)]);
        short.timestamps.truncate(8);
        let failure = Exported::on_timers(short).expect_err("a timestamp short");
        assert!(
            failure.message.contains("differ in length"),
            "{}",
            failure.message
        );
        Ok(())
    }

    #[test]
    fn timestamps_pass_through_the_record() -> Result<(), String> {
        FakeHost::install();
        Exported::open(context())?;
        let mut input = empty_batch();
        input.data = b"kv".to_vec();
        input.key_ends = column([1u32]);
        input.value_ends = column([2u32]);
        input.flags = vec![HAS_KEY | HAS_TIMESTAMP];
        input.timestamps = column([42i64]);
        let output = call_process(input, column([0u32]))?;
        assert_eq!(values(&output), ["v=1"]);
        assert_eq!(
            (output.flags[0], items::<i64>(&output.timestamps)),
            (HAS_KEY | HAS_TIMESTAMP, vec![42])
        );
        Ok(())
    }
}
