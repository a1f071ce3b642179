//! An in-memory host for native tests: keeps state per (state, key slot) and counts calls.
//!
//! Key slots stand for keys: tests number their keys consistently across batches.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use crate::bindings::weir::operator::state::{Entries, OpKind, StateId, StateKind, Values};
use crate::bindings::weir::operator::types::Blobs;
use crate::numbers::{Number, U32s};
use crate::state::host::StateHost;
use crate::state::op_log;

/// How many times each host function was called.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Calls {
    pub(crate) declare: usize,
    pub(crate) read_values: usize,
    pub(crate) apply: usize,
    pub(crate) map_get: usize,
    pub(crate) map_get_many: usize,
    pub(crate) map_size: usize,
    pub(crate) map_entries: usize,
    pub(crate) list_read: usize,
}

#[derive(Debug, Default)]
pub(crate) struct FakeStore {
    pub(crate) calls: Calls,
    pub(crate) declared: Vec<(String, StateKind)>,
    pub(crate) values: BTreeMap<(StateId, u32), Vec<u8>>,
    pub(crate) maps: BTreeMap<(StateId, u32), BTreeMap<Vec<u8>, Vec<u8>>>,
    pub(crate) lists: BTreeMap<(StateId, u32), Vec<Vec<u8>>>,
    /// The `slots` argument of every `read-values` call.
    pub(crate) read_slots: Vec<Vec<u32>>,
    /// The operations of every `apply` call.
    pub(crate) applied: Vec<Vec<(OpKind, StateId, u32)>>,
    /// Registered timers: (slot, domain, timestamp, tag).
    pub(crate) timers: std::collections::BTreeSet<(u32, u32, i64, u32)>,
    pub(crate) watermark: Option<i64>,
    pub(crate) now: i64,
}

/// The fake host; clones share one store.
#[derive(Clone, Default)]
pub(crate) struct FakeHost(pub(crate) Rc<RefCell<FakeStore>>);

fn blobs<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Blobs {
    let mut blobs = Blobs {
        data: Vec::new(),
        ends: Vec::new(),
    };
    for item in items {
        blobs.data.extend_from_slice(item);
        (blobs.data.len() as u32).push_le(&mut blobs.ends);
    }
    blobs
}

impl StateHost for FakeHost {
    fn declare(&mut self, name: &str, kind: StateKind) -> Result<StateId, String> {
        let mut store = self.0.borrow_mut();
        store.calls.declare += 1;
        if let Some(id) = store.declared.iter().position(|(n, _)| n == name) {
            return if store.declared[id].1 == kind {
                Ok(id as u32)
            } else {
                Err(format!("`{name}` has another kind"))
            };
        }
        store.declared.push((name.to_owned(), kind));
        Ok(store.declared.len() as u32 - 1)
    }

    fn read_values(&mut self, state: StateId, slots: &[u8]) -> Result<Values, String> {
        let slots: Vec<u32> = U32s::new(slots, "slots")
            .map_err(String::from)?
            .iter()
            .collect();
        let mut store = self.0.borrow_mut();
        store.calls.read_values += 1;
        let found: Vec<Option<&Vec<u8>>> = slots
            .iter()
            .map(|&slot| store.values.get(&(state, slot)))
            .collect();
        let values = Values {
            items: blobs(found.iter().map(|v| v.map_or(&[][..], Vec::as_slice))),
            present: found.iter().map(|v| u8::from(v.is_some())).collect(),
        };
        store.read_slots.push(slots);
        Ok(values)
    }

    fn apply(&mut self, ops: &[u8], data: &[u8]) -> Result<(), String> {
        let ops = op_log::decode(ops);
        let mut store = self.0.borrow_mut();
        store.calls.apply += 1;
        store
            .applied
            .push(ops.iter().map(|op| (op.kind, op.state, op.slot)).collect());
        let mut start = 0;
        for op in &ops {
            let (key_end, value_end) = (op.key_end as usize, op.value_end as usize);
            let key = data[start..key_end].to_vec();
            let value = data[key_end..value_end].to_vec();
            start = value_end;
            let at = (op.state, op.slot);
            match op.kind {
                OpKind::ValueSet => drop(store.values.insert(at, value)),
                OpKind::ValueRemove => drop(store.values.remove(&at)),
                OpKind::MapPut => drop(store.maps.entry(at).or_default().insert(key, value)),
                OpKind::MapRemove => drop(store.maps.entry(at).or_default().remove(&key)),
                OpKind::MapClear => drop(store.maps.remove(&at)),
                OpKind::ListAppend => store.lists.entry(at).or_default().push(value),
                OpKind::ListClear => drop(store.lists.remove(&at)),
                OpKind::TimerRegister | OpKind::TimerDelete => {
                    let ts = i64::from_le_bytes(value[..8].try_into().map_err(|_| "short")?);
                    let tag = u32::from_le_bytes(value[8..12].try_into().map_err(|_| "short")?);
                    let timer = (op.slot, op.state, ts, tag);
                    if op.kind == OpKind::TimerRegister {
                        store.timers.insert(timer);
                    } else {
                        store.timers.remove(&timer);
                    }
                }
            }
        }
        Ok(())
    }

    fn map_get_many(
        &mut self,
        state: StateId,
        slots: &[u8],
        map_keys: &Blobs,
    ) -> Result<Values, String> {
        let mut store = self.0.borrow_mut();
        store.calls.map_get_many += 1;
        let slots = U32s::new(slots, "slots").map_err(String::from)?;
        let ends = U32s::new(&map_keys.ends, "map key ends").map_err(String::from)?;
        if slots.len() != ends.len() {
            return Err(format!("{} slots and {} map keys", slots.len(), ends.len()));
        }
        let mut start = 0;
        let mut found = Vec::new();
        for (slot, end) in slots.iter().zip(ends.iter()) {
            let key = &map_keys.data[start..end as usize];
            start = end as usize;
            found.push(
                store
                    .maps
                    .get(&(state, slot))
                    .and_then(|map| map.get(key))
                    .cloned(),
            );
        }
        Ok(Values {
            present: found.iter().map(|v| u8::from(v.is_some())).collect(),
            items: blobs(found.iter().map(|v| v.as_deref().unwrap_or_default())),
        })
    }

    fn map_get(
        &mut self,
        state: StateId,
        slot: u32,
        map_key: &[u8],
    ) -> Result<Option<Vec<u8>>, String> {
        let mut store = self.0.borrow_mut();
        store.calls.map_get += 1;
        Ok(store
            .maps
            .get(&(state, slot))
            .and_then(|map| map.get(map_key))
            .cloned())
    }

    fn map_size(&mut self, state: StateId, slot: u32) -> Result<u32, String> {
        let mut store = self.0.borrow_mut();
        store.calls.map_size += 1;
        Ok(store
            .maps
            .get(&(state, slot))
            .map_or(0, |map| map.len() as u32))
    }

    fn map_entries(
        &mut self,
        state: StateId,
        slot: u32,
        after: Option<&[u8]>,
        limit: u32,
    ) -> Result<Entries, String> {
        let mut store = self.0.borrow_mut();
        store.calls.map_entries += 1;
        let empty = BTreeMap::new();
        let map = store.maps.get(&(state, slot)).unwrap_or(&empty);
        let page: Vec<_> = map
            .iter()
            .filter(|(key, _)| after.is_none_or(|after| key.as_slice() > after))
            .take(limit as usize)
            .collect();
        Ok(Entries {
            keys: blobs(page.iter().map(|(k, _)| k.as_slice())),
            values: blobs(page.iter().map(|(_, v)| v.as_slice())),
        })
    }

    fn list_read(&mut self, state: StateId, slot: u32) -> Result<Blobs, String> {
        let mut store = self.0.borrow_mut();
        store.calls.list_read += 1;
        Ok(blobs(
            store
                .lists
                .get(&(state, slot))
                .into_iter()
                .flatten()
                .map(Vec::as_slice),
        ))
    }

    fn watermark(&mut self) -> Option<i64> {
        self.0.borrow().watermark
    }

    fn processing_time(&mut self) -> i64 {
        self.0.borrow().now
    }
}

impl FakeHost {
    /// A fresh fake, installed as this thread's host (each test runs on its own thread).
    pub(crate) fn install() -> Self {
        let host = Self::default();
        crate::state::batch::install_host(Box::new(host.clone()));
        host
    }

    pub(crate) fn calls(&self) -> Calls {
        self.0.borrow().calls.clone()
    }
}
