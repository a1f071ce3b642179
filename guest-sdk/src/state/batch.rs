//! The per-batch machinery behind every state handle: the current key slot, the typed value
//! caches, the log of pending writes, and the flush at the end of a batch.
//!
//! A batch costs at most one `read-values` crossing per value state it reads and one `apply`
//! crossing for all its writes, however many records it has:
//!
//! - Value states are cached per batch, typed and indexed by key slot. The first read of a
//!   slot whose value is unknown fetches the values of *all* slots of the batch at once;
//!   each slot is decoded on its first read. Writes only touch the cache and mark the slot
//!   dirty.
//! - Map and list writes are appended to one shared [`OpLog`]. A map or list read first sends
//!   the pending log (read-your-writes), then reads.
//! - At the end of the batch, every dirty value slot is appended to the log as a `value-set`
//!   or `value-remove`, and the whole log goes to the host in one `apply`. Value states are
//!   disjoint from map and list states, so their writes commute with the logged ones.

use std::any::{Any, TypeId};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::bindings::weir::operator::state::{StateId, StateKind, Values};
use crate::numbers::Number;
use crate::state::host::{self, StateHost, WitHost};
use crate::state::op_log::OpLog;
use crate::{Error, Result};

/// The key slot of a record without key, and the slot outside of `process`.
pub(crate) const NO_SLOT: u32 = u32::MAX;

thread_local! {
    /// The key slot of the record being processed; `NO_SLOT` outside of `process` and for a
    /// record without key. A `Cell` of its own (not in `RUNTIME`) because it is set once per
    /// record.
    static CURRENT_SLOT: Cell<u32> = const { Cell::new(NO_SLOT) };
    /// Whether a batch is being processed, to tell a keyless record from a state call in
    /// `open` or `close`.
    static IN_BATCH: Cell<bool> = const { Cell::new(false) };
    /// Counts batches, so that a value cache can tell cheaply whether it holds the current
    /// batch's values.
    static GENERATION: Cell<u64> = const { Cell::new(0) };
    /// Everything else. A component instance is single-threaded, so this is the one runtime
    /// of the instance. It is borrowed only inside SDK functions that never call user code,
    /// so a borrow never overlaps another.
    static RUNTIME: RefCell<Runtime> = RefCell::new(Runtime::new(Box::new(WitHost)));
}

/// A value state's typed cache, with its type erased so that one runtime holds all of them.
pub(crate) trait ValueSlots: Any {
    /// Appends the dirty slots' writes to `log` and forgets the batch's values.
    fn flush_into(&mut self, state: StateId, log: &mut OpLog) -> Result<()>;
    /// Forgets the batch's values without writing anything.
    fn reset(&mut self);
}

struct ValueEntry {
    id: StateId,
    type_id: TypeId,
    /// The typed cache (a `RefCell<C>`), to hand out again to a second declaration.
    typed: Rc<dyn Any>,
    /// The same cache, for the flush.
    cache: Rc<RefCell<dyn ValueSlots>>,
    /// Whether the cache holds anything of the current batch (it is then in `touched`).
    touched: bool,
}

pub(crate) struct Runtime {
    pub(crate) host: Box<dyn StateHost>,
    /// Pending map and list writes; value writes join them at the end of the batch.
    pub(crate) log: OpLog,
    /// Encoding buffer for the map key of a read, reused.
    pub(crate) scratch: Vec<u8>,
    values: Vec<ValueEntry>,
    /// Indices into `values` of the caches used in the current batch.
    touched: Vec<usize>,
    /// `0 .. slot_count` as the WIT's `u32s`: the `slots` argument of `read-values`, kept
    /// across batches.
    all_slots: Vec<u8>,
    slot_count: u32,
    /// The watermark, read at most once per batch (a batch of timers brings it along).
    pub(crate) watermark: Option<Option<i64>>,
    /// The batch's key slots and timestamps, for the libraries that read ahead.
    pub(crate) columns: Columns,
}

/// The key slots and timestamps of the batch being processed, or of the timers firing, kept
/// once some library asked for them in `open` ([`crate::windows`], which reads the entries
/// of a whole batch's windows in one host call); an operator without one keeps nothing.
#[derive(Debug, Default)]
pub(crate) struct Columns {
    /// Whether a library asked for them.
    pub(crate) wanted: bool,
    /// The current call: records, or the timers of one clock.
    pub(crate) of: ColumnsOf,
    /// Per record (or timer), its key slot.
    pub(crate) slots: Vec<u32>,
    /// Per record, its timestamp if it has one; per timer, its timestamp.
    pub(crate) timestamps: Vec<Option<i64>>,
    /// Per timer, its tag (empty for records).
    pub(crate) tags: Vec<u32>,
}

/// What [`Columns`] describe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum ColumnsOf {
    #[default]
    Records,
    Timers(crate::TimeDomain),
}

impl Columns {
    /// Empties the columns for a call of `of`.
    pub(crate) fn start(&mut self, of: ColumnsOf) {
        self.of = of;
        self.slots.clear();
        self.timestamps.clear();
        self.tags.clear();
    }
}

impl Runtime {
    fn new(host: Box<dyn StateHost>) -> Self {
        Self {
            host,
            log: OpLog::default(),
            scratch: Vec::new(),
            values: Vec::new(),
            touched: Vec::new(),
            all_slots: Vec::new(),
            slot_count: 0,
            watermark: None,
            columns: Columns::default(),
        }
    }

    /// Declares a state with the host.
    pub(crate) fn declare(&mut self, name: &str, kind: StateKind) -> Result<StateId> {
        self.host
            .declare(name, kind)
            .map_err(|e| Error::new(format!("declaring {} state `{name}`: {e}", kind_name(kind))))
    }

    /// Declares a value state and returns the index and the typed cache of it. Declaring the
    /// same name again with the same type shares the cache; with another type, it is an error.
    pub(crate) fn declare_value<C: ValueSlots>(
        &mut self,
        name: &str,
        new_cache: impl FnOnce(StateId) -> C,
    ) -> Result<(usize, Rc<RefCell<C>>)> {
        let id = self.declare(name, StateKind::Value)?;
        let type_id = TypeId::of::<C>();
        if let Some(index) = self.values.iter().position(|entry| entry.id == id) {
            let entry = &self.values[index];
            return match entry.typed.clone().downcast::<RefCell<C>>() {
                Ok(cache) if entry.type_id == type_id => Ok((index, cache)),
                _ => Err(Error::new(format!(
                    "value state `{name}` is already declared with another value type"
                ))),
            };
        }
        let cache = Rc::new(RefCell::new(new_cache(id)));
        self.values.push(ValueEntry {
            id,
            type_id,
            typed: cache.clone(),
            cache: cache.clone(),
            touched: false,
        });
        Ok((self.values.len() - 1, cache))
    }

    /// Registers the value cache at `index` for the end of the current batch; returns the
    /// batch's number of slots.
    pub(crate) fn join_batch(&mut self, index: usize) -> Result<u32> {
        let entry = self
            .values
            .get_mut(index)
            .ok_or_else(|| Error::new("internal: unknown value state handle"))?;
        if !entry.touched {
            entry.touched = true;
            self.touched.push(index);
        }
        Ok(self.slot_count)
    }

    /// The values of value state `state` for every slot of the batch: one `read-values`.
    pub(crate) fn read_values(&mut self, state: StateId) -> Result<Values> {
        // Slot `i` is item `i`, so the slots of a smaller batch are a prefix of a larger one's.
        let count = self.slot_count as usize;
        let have = self.all_slots.len() / u32::SIZE;
        if have > count {
            self.all_slots.truncate(count * u32::SIZE);
        }
        for slot in have..count {
            // `count` came from a `u32`.
            (slot as u32).push_le(&mut self.all_slots);
        }
        let values = self
            .host
            .read_values(state, &self.all_slots)
            .map_err(|e| Error::new(format!("reading values: {e}")))?;
        let items = host::blob_count(&values.items)?;
        if values.present.len() != count || items != count {
            return Err(Error::new(format!(
                "malformed reply from the host: {items} values and {} presence flags for \
                 {count} keys",
                values.present.len()
            )));
        }
        Ok(values)
    }

    /// Sends the pending writes if some are to `state` for `slot`, so that a read of that
    /// map or list sees them (other writes wait for the end of the batch).
    pub(crate) fn flush_log_for(&mut self, state: StateId, slot: u32) -> Result<()> {
        if self.log.writes_to(state, slot) {
            self.log.flush(self.host.as_mut())?;
        }
        Ok(())
    }

    /// Appends the dirty value slots to the log and sends it: the one `apply` of a batch.
    fn finish_batch(&mut self) -> Result<()> {
        let mut result = Ok(());
        for index in self.touched.drain(..) {
            let entry = &mut self.values[index];
            entry.touched = false;
            // No handle is borrowed between records, so the borrow cannot fail.
            let Ok(mut cache) = entry.cache.try_borrow_mut() else {
                result = Err(Error::new(
                    "internal: value cache borrowed at the end of a batch",
                ));
                continue;
            };
            if result.is_ok() {
                result = cache.flush_into(entry.id, &mut self.log);
            } else {
                cache.reset();
            }
        }
        match result {
            Ok(()) => self.log.flush(self.host.as_mut()),
            Err(error) => {
                self.log.clear();
                Err(error)
            }
        }
    }

    /// Drops everything the batch cached or logged.
    fn abort_batch(&mut self) {
        for index in self.touched.drain(..) {
            let entry = &mut self.values[index];
            entry.touched = false;
            if let Ok(mut cache) = entry.cache.try_borrow_mut() {
                cache.reset();
            }
        }
        self.log.clear();
    }
}

fn kind_name(kind: StateKind) -> &'static str {
    match kind {
        StateKind::Value => "value",
        StateKind::Map => "map",
        StateKind::List => "list",
    }
}

/// Runs `f` on the runtime. Fails instead of panicking should the runtime be borrowed already,
/// which the SDK never does (it never calls user code while borrowing).
pub(crate) fn with_runtime<R>(f: impl FnOnce(&mut Runtime) -> Result<R>) -> Result<R> {
    RUNTIME.with(|cell| {
        let mut runtime = cell
            .try_borrow_mut()
            .map_err(|_| Error::new("internal: state runtime used re-entrantly"))?;
        f(&mut runtime)
    })
}

/// The key slot of the record being processed, or the error explaining why there is none.
#[inline]
pub(crate) fn current_slot(state_name: &str) -> Result<u32> {
    let slot = CURRENT_SLOT.get();
    if slot != NO_SLOT {
        return Ok(slot);
    }
    Err(no_slot(state_name))
}

/// Why there is no current slot (kept out of line: every state call passes the check above).
#[cold]
fn no_slot(state_name: &str) -> Error {
    Error::new(if IN_BATCH.get() {
        format!(
            "state `{state_name}`: state access needs a keyed record; key the stream with key_by \
             before this operator (this record has no key)"
        )
    } else {
        format!(
            "state `{state_name}`: state can only be read or written while processing a record, \
             not in open or close"
        )
    })
}

/// The number of the current batch (see `GENERATION`).
#[inline]
pub(crate) fn generation() -> u64 {
    GENERATION.get()
}

/// Sets the key slot of the record about to be processed.
pub(crate) fn set_current_slot(slot: u32) {
    CURRENT_SLOT.set(slot);
}

/// A batch being processed. Ends with [`BatchScope::finish`]; dropped unfinished (an error
/// in `process`), it discards the batch's cached values and pending writes.
pub(crate) struct BatchScope {
    finished: bool,
}

/// Starts a batch whose key slots are `0 .. slot_count`.
pub(crate) fn begin(slot_count: u32) -> Result<BatchScope> {
    with_runtime(|runtime| {
        runtime.abort_batch();
        runtime.slot_count = slot_count;
        runtime.watermark = None;
        Ok(())
    })?;
    IN_BATCH.set(true);
    CURRENT_SLOT.set(NO_SLOT);
    GENERATION.set(GENERATION.get() + 1);
    Ok(BatchScope { finished: false })
}

impl BatchScope {
    /// Writes the batch's state changes to the host in one `apply`.
    pub(crate) fn finish(mut self) -> Result<()> {
        self.finished = true;
        end_records();
        with_runtime(Runtime::finish_batch)
    }
}

impl Drop for BatchScope {
    fn drop(&mut self) {
        if !self.finished {
            end_records();
            // Only fails if the runtime is borrowed, which cannot be the case between records.
            let _ = with_runtime(|runtime| {
                runtime.abort_batch();
                Ok(())
            });
        }
    }
}

fn end_records() {
    IN_BATCH.set(false);
    CURRENT_SLOT.set(NO_SLOT);
}

/// Forgets all declared states (a new `open`).
pub(crate) fn reset_declarations() -> Result<()> {
    with_runtime(|runtime| {
        runtime.abort_batch();
        runtime.values.clear();
        runtime.columns = Columns::default();
        Ok(())
    })
}

/// Replaces the host (native tests use an in-memory fake).
#[cfg(test)]
pub(crate) fn install_host(host: Box<dyn StateHost>) {
    RUNTIME.with(|cell| *cell.borrow_mut() = Runtime::new(host));
}
