//! Value state: one typed value per key.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

use serde::{Serialize, de::DeserializeOwned};

use crate::bindings::weir::operator::state::{OpKind, StateId, Values};
use crate::codec;
use crate::state::batch::{self, ValueSlots};
use crate::state::host;
use crate::state::op_log::OpLog;
use crate::state::version::{Migration, Versioning, write_head};
use crate::{Error, Result};

/// One value of type `T` per key, declared with
/// [`OpenContext::value_state`](crate::OpenContext::value_state).
///
/// Every call acts on the key of the record being processed. Within a batch, values live in
/// a typed cache: the first read fetches the values of every key of the batch in one host
/// call, `get` clones from the cache, and writes are sent once per key at the end of the
/// batch, CBOR-encoded. Reading and writing the same key many times in a batch is therefore
/// cheap.
pub struct ValueState<T> {
    index: usize,
    name: Arc<str>,
    /// The typed cache, shared with the runtime (which flushes it at the end of a batch), so
    /// that a read or write reaches it without going through the runtime.
    cache: Rc<RefCell<ValueCache<T>>>,
}

impl<T> Clone for ValueState<T> {
    fn clone(&self) -> Self {
        Self {
            index: self.index,
            name: self.name.clone(),
            cache: self.cache.clone(),
        }
    }
}

impl<T> fmt::Debug for ValueState<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueState")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<T: Serialize + DeserializeOwned + Clone + 'static> ValueState<T> {
    pub(crate) fn declare(name: &str) -> Result<Self> {
        Self::declare_versioned(name, 1, None)
    }

    /// Declares the state with values of `version`, read from older versions by `migrate`
    /// (`crate::state::version`).
    pub(crate) fn declare_versioned(
        name: &str,
        version: u32,
        migrate: Option<Migration<T>>,
    ) -> Result<Self> {
        let versioning = Versioning::new("value", name, version, migrate)?;
        let name: Arc<str> = name.into();
        let (index, cache) = batch::with_runtime(|runtime| {
            runtime.declare_value(&name, |id| {
                ValueCache::<T>::new(name.clone(), id, versioning)
            })
        })?;
        let declared = cache.borrow().versioning.version;
        if declared != version {
            return Err(Error::new(format!(
                "value state `{name}` is already declared with version {declared}"
            )));
        }
        Ok(Self { index, name, cache })
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current key's value, if it has one.
    pub fn get(&self) -> Result<Option<T>> {
        self.with_cache(|cache, slot| Ok(cache.load(slot)?.cloned()))
    }

    /// Sets the current key's value.
    pub fn set(&self, value: &T) -> Result<()> {
        self.with_cache(|cache, slot| cache.store(slot, Some(value.clone())))
    }

    /// Removes the current key's value.
    pub fn remove(&self) -> Result<()> {
        self.with_cache(|cache, slot| cache.store(slot, None))
    }

    /// Replaces the current key's value with `f(current)`; `None` removes it. The value is
    /// moved out of the cache and back, not cloned.
    pub fn update(&self, f: impl FnOnce(Option<T>) -> Option<T>) -> Result<()> {
        let current = self.with_cache(|cache, slot| cache.take(slot))?;
        // `f` runs outside of the runtime, so it may use other state handles.
        let new = f(current);
        self.with_cache(|cache, slot| cache.store(slot, new))
    }

    /// Runs `f` on this state's cache for the current record's slot. The cache is joined to
    /// the batch (registered for the flush, sized for its slots) on first use in a batch.
    fn with_cache<R>(&self, f: impl FnOnce(&mut ValueCache<T>, u32) -> Result<R>) -> Result<R> {
        let slot = batch::current_slot(&self.name)?;
        let mut cache = self.cache.try_borrow_mut().map_err(|_| {
            Error::new(format!(
                "value state `{}` used while it is being updated",
                self.name
            ))
        })?;
        let generation = batch::generation();
        if cache.generation != generation {
            let slot_count = batch::with_runtime(|runtime| runtime.join_batch(self.index))?;
            cache.start_batch(generation, slot_count);
        }
        f(&mut cache, slot).map_err(|e| e.context(format_args!("value state `{}`", self.name)))
    }
}

/// What the cache knows of a slot's value.
enum Cached<T> {
    /// Not read yet: in the fetched values if they were fetched, else at the host.
    Unknown,
    Absent,
    Present(T),
}

struct Slot<T> {
    value: Cached<T>,
    /// Written in this batch: sent at the end of the batch.
    dirty: bool,
}

/// The typed values of one value state for the slots of the current batch.
pub(crate) struct ValueCache<T> {
    /// The state's name, for errors at the end of the batch.
    name: Arc<str>,
    id: StateId,
    /// The batch the slots belong to (see [`batch::generation`]).
    generation: u64,
    slots: Vec<Slot<T>>,
    /// The encoded values of every slot, once fetched in this batch.
    fetched: Option<Values>,
    /// The version its values are written in, and how older ones are read.
    versioning: Versioning<T>,
}

impl<T: Serialize + DeserializeOwned + 'static> ValueCache<T> {
    fn new(name: Arc<str>, id: StateId, versioning: Versioning<T>) -> Self {
        Self {
            name,
            id,
            generation: 0,
            slots: Vec::new(),
            fetched: None,
            versioning,
        }
    }

    /// Forgets the previous batch and makes room for `slot_count` slots.
    fn start_batch(&mut self, generation: u64, slot_count: u32) {
        self.reset();
        self.generation = generation;
        self.ensure_slots(slot_count);
    }

    fn ensure_slots(&mut self, slot_count: u32) {
        let slot_count = slot_count as usize;
        if self.slots.len() < slot_count {
            self.slots.resize_with(slot_count, || Slot {
                value: Cached::Unknown,
                dirty: false,
            });
        }
    }

    fn slot(&mut self, slot: u32) -> Result<&mut Slot<T>> {
        let count = self.slots.len();
        self.slots.get_mut(slot as usize).ok_or_else(|| {
            Error::new(format!(
                "internal: key slot {slot} outside the batch's {count} slots"
            ))
        })
    }

    /// The slot's value, fetching the batch's values and decoding this slot's if needed.
    fn load(&mut self, slot: u32) -> Result<Option<&T>> {
        if matches!(self.slot(slot)?.value, Cached::Unknown) {
            let (value, migrated) = self.decode_fetched(slot)?;
            let slot = self.slot(slot)?;
            slot.value = value;
            // A migrated value is written back in this version, once.
            slot.dirty |= migrated;
        }
        Ok(match &self.slot(slot)?.value {
            Cached::Present(value) => Some(value),
            Cached::Absent | Cached::Unknown => None,
        })
    }

    /// Moves the slot's value out; the caller stores the new one.
    fn take(&mut self, slot: u32) -> Result<Option<T>> {
        self.load(slot)?;
        Ok(
            match std::mem::replace(&mut self.slot(slot)?.value, Cached::Absent) {
                Cached::Present(value) => Some(value),
                Cached::Absent | Cached::Unknown => None,
            },
        )
    }

    /// Sets (`Some`) or removes (`None`) the slot's value, to be written at the end of the batch.
    fn store(&mut self, slot: u32, value: Option<T>) -> Result<()> {
        let slot = self.slot(slot)?;
        slot.value = value.map_or(Cached::Absent, Cached::Present);
        slot.dirty = true;
        Ok(())
    }

    /// The slot's stored value, decoded; `true` with it when it was migrated.
    fn decode_fetched(&mut self, slot: u32) -> Result<(Cached<T>, bool)> {
        let fetched = match &mut self.fetched {
            Some(fetched) => fetched,
            none => {
                let id = self.id;
                none.insert(batch::with_runtime(|runtime| runtime.read_values(id))?)
            }
        };
        let index = slot as usize;
        // `present` is one byte per slot: 1 where the key has a value, 0 where it has none.
        if fetched
            .present
            .get(index)
            .is_none_or(|&present| present == 0)
        {
            return Ok((Cached::Absent, false));
        }
        let bytes = host::blob(&fetched.items, index)?;
        let (value, migrated) = self
            .versioning
            .decode(bytes)
            .map_err(|e| e.context("decoding the stored value"))?;
        Ok((Cached::Present(value), migrated))
    }
}

impl<T: Serialize + DeserializeOwned + 'static> ValueSlots for ValueCache<T> {
    fn flush_into(&mut self, state: StateId, log: &mut OpLog) -> Result<()> {
        let version = self.versioning.version;
        let mut result = Ok(());
        for (index, slot) in self.slots.iter().enumerate().filter(|(_, slot)| slot.dirty) {
            // Slots are indexed by `u32` key slots, so the index fits in a `u32`.
            let slot_index = index as u32;
            result = match &slot.value {
                Cached::Present(value) => log.push(
                    OpKind::ValueSet,
                    state,
                    slot_index,
                    None,
                    Some(&mut |data: &mut Vec<u8>| {
                        write_head(version, data);
                        codec::encode_into(value, data)
                    }),
                ),
                Cached::Absent => log.push(OpKind::ValueRemove, state, slot_index, None, None),
                Cached::Unknown => Ok(()),
            };
            if result.is_err() {
                break;
            }
        }
        self.reset();
        result.map_err(|e| e.context(format_args!("value state `{}`", self.name)))
    }

    fn reset(&mut self) {
        self.slots.clear();
        self.fetched = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::batch::{begin, set_current_slot};
    use crate::state::fake::FakeHost;

    #[test]
    fn a_batch_reads_once_per_state_and_writes_once() -> Result<()> {
        let host = FakeHost::install();
        let count = ValueState::<u64>::declare("count")?;
        let other = ValueState::<String>::declare("other")?;

        for round in 1..=2u64 {
            let scope = begin(3)?;
            for slot in [0, 1, 0, 2, 0] {
                set_current_slot(slot);
                let n = count.get()?.unwrap_or(0) + 1;
                count.set(&n)?;
            }
            set_current_slot(1);
            other.set(&format!("round {round}"))?;
            scope.finish()?;
        }

        let calls = host.calls();
        // One read per batch for `count`; `other` is only written, so never read.
        assert_eq!((calls.read_values, calls.apply), (2, 2));
        let store = host.0.borrow();
        assert_eq!(store.read_slots, [vec![0, 1, 2], vec![0, 1, 2]]);
        // Each batch writes each dirty slot once.
        assert_eq!(store.applied[1].len(), 4);
        assert_eq!(codec::decode::<u64>(&store.values[&(0, 0)])?, 6);
        assert_eq!(codec::decode::<u64>(&store.values[&(0, 1)])?, 2);
        assert_eq!(codec::decode::<u64>(&store.values[&(0, 2)])?, 2);
        assert_eq!(codec::decode::<String>(&store.values[&(1, 1)])?, "round 2");
        Ok(())
    }

    #[test]
    fn remove_and_update_write_through_the_cache() -> Result<()> {
        let host = FakeHost::install();
        let state = ValueState::<Vec<u32>>::declare("items")?;
        let seen = ValueState::<u32>::declare("seen")?;
        let scope = begin(2)?;
        set_current_slot(0);
        state.update(|items| {
            // The closure may use other state.
            seen.set(&1).expect("seen is writable inside update");
            Some(items.unwrap_or_default().into_iter().chain([7]).collect())
        })?;
        state.update(|items| {
            items.map(|mut items| {
                items.push(8);
                items
            })
        })?;
        assert_eq!(state.get()?, Some(vec![7, 8]));
        set_current_slot(1);
        state.set(&vec![1])?;
        state.remove()?;
        assert_eq!(state.get()?, None);
        scope.finish()?;

        let store = host.0.borrow();
        assert_eq!(codec::decode::<Vec<u32>>(&store.values[&(0, 0)])?, [7, 8]);
        assert!(!store.values.contains_key(&(0, 1)));
        assert!(store.applied[0].contains(&(OpKind::ValueRemove, 0, 1)));
        Ok(())
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct CountV1 {
        count: u64,
    }

    /// Version 1 with a field added: old values read with its default.
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct CountV1Seen {
        count: u64,
        #[serde(default)]
        last_seen: String,
    }

    /// Version 2: `count` renamed.
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct CountV2 {
        total: u64,
        last_seen: String,
    }

    fn from_v1(from: u32, old: crate::state::OldValue<'_>) -> Result<CountV2> {
        assert_eq!(from, 1);
        let v1: CountV1Seen = old.decode()?;
        Ok(CountV2 {
            total: v1.count,
            last_seen: v1.last_seen,
        })
    }

    #[test]
    fn an_older_value_is_migrated_once_as_it_is_read_and_written_back_in_the_new_version()
    -> Result<()> {
        let host = FakeHost::install();
        host.0
            .borrow_mut()
            .values
            .insert((0, 0), codec::encode(&CountV1 { count: 5 })?);
        // A field with a default reads old values as they are.
        let added = ValueState::<CountV1Seen>::declare("count")?;
        let scope = begin(1)?;
        set_current_slot(0);
        let seen = added.get()?.expect("a value");
        assert_eq!((seen.count, seen.last_seen.as_str()), (5, ""));
        scope.finish()?;
        assert_eq!(host.calls().apply, 0, "nothing to write back");

        let host = FakeHost::install();
        let v1 = CountV1Seen {
            count: 5,
            last_seen: "a".into(),
        };
        host.0
            .borrow_mut()
            .values
            .insert((0, 0), codec::encode(&v1)?);
        let v2 = ValueState::<CountV2>::declare_versioned("count", 2, Some(from_v1))?;
        let scope = begin(2)?;
        set_current_slot(0);
        assert_eq!(v2.get()?.map(|c| c.total), Some(5));
        set_current_slot(1);
        v2.set(&CountV2 {
            total: 1,
            last_seen: "b".into(),
        })?;
        scope.finish()?;
        // Both written in version 2: the migrated one back, unchanged.
        let stored = host.0.borrow().values.clone();
        for (slot, total) in [(0, 5), (1, 1)] {
            let (version, bytes) = crate::state::version::split(&stored[&(0, slot)])?;
            assert_eq!(version, 2);
            assert_eq!(codec::decode::<CountV2>(bytes)?.total, total);
        }
        // Read again, a version-2 value needs no migration and is not written.
        let scope = begin(1)?;
        set_current_slot(0);
        assert_eq!(v2.get()?.map(|c| c.total), Some(5));
        scope.finish()?;
        assert_eq!(host.calls().apply, 1);
        Ok(())
    }

    #[test]
    fn a_value_of_a_newer_version_is_an_error_naming_both_versions() -> Result<()> {
        let host = FakeHost::install();
        let mut newer = Vec::new();
        crate::state::version::write_head(3, &mut newer);
        codec::encode_into(&CountV1 { count: 1 }, &mut newer)?;
        host.0.borrow_mut().values.insert((0, 0), newer);
        let state = ValueState::<CountV1>::declare("count")?;
        let scope = begin(1)?;
        set_current_slot(0);
        let error = state.get().expect_err("newer");
        let text = error.to_string();
        assert!(
            text.contains("version 3, newer than this operator's version 1"),
            "{text}"
        );
        drop(scope);
        Ok(())
    }

    #[test]
    fn a_failed_batch_writes_nothing() -> Result<()> {
        let host = FakeHost::install();
        let state = ValueState::<u64>::declare("count")?;
        let scope = begin(1)?;
        set_current_slot(0);
        state.set(&5)?;
        drop(scope);
        assert_eq!(host.calls().apply, 0);

        // The next batch starts from what the host holds.
        let scope = begin(1)?;
        set_current_slot(0);
        assert_eq!(state.get()?, None);
        scope.finish()?;
        Ok(())
    }

    #[test]
    fn keyless_records_and_calls_outside_process_are_errors() -> Result<()> {
        FakeHost::install();
        let state = ValueState::<u64>::declare("count")?;
        let outside = state.get().expect_err("no batch");
        assert!(
            outside.message().contains("not in open or close"),
            "{outside}"
        );

        let scope = begin(0)?;
        set_current_slot(batch::NO_SLOT);
        let keyless = state.set(&1).expect_err("keyless record");
        assert!(
            keyless
                .message()
                .contains("state access needs a keyed record; key the stream with key_by"),
            "{keyless}"
        );
        assert!(keyless.message().contains("`count`"), "{keyless}");
        scope.finish()
    }

    #[test]
    fn declaring_a_name_twice_needs_the_same_type() -> Result<()> {
        FakeHost::install();
        let first = ValueState::<u64>::declare("count")?;
        let again = ValueState::<u64>::declare("count")?;
        assert_eq!(first.index, again.index);
        let error = ValueState::<String>::declare("count").expect_err("another type");
        assert!(error.message().contains("another value type"), "{error}");
        Ok(())
    }

    #[test]
    fn undecodable_stored_values_are_errors_naming_the_state() -> Result<()> {
        let host = FakeHost::install();
        let state = ValueState::<String>::declare("name")?;
        host.0.borrow_mut().values.insert((0, 0), vec![0xff]);
        let scope = begin(1)?;
        set_current_slot(0);
        let error = state.get().expect_err("garbage");
        assert!(
            error
                .message()
                .starts_with("value state `name`: decoding the stored value"),
            "{error}"
        );
        drop(scope);
        Ok(())
    }
}
