//! The `state` import: keyed state calls from a guest, served by the subtask's backend.
//!
//! Every call names keys by slot of the current batch (see [`super::KeySlots`]); every
//! failure is a message the guest receives as a WIT error, never a trap.

use super::GuestState;
use crate::bindings::weir::operator::state::{self as wit, OpKind};
use crate::bindings::weir::operator::types::Blobs;
use crate::state::{StateError, StateId, StateKind};

/// Most entries one `map-entries` call returns, whatever the guest asks for (stated in the WIT).
const MAX_PAGE: u32 = 4096;

impl GuestState {
    fn describe(&self, state: u32, e: StateError) -> String {
        match self.backend.state_name(StateId(state)) {
            Some(name) => format!("state `{name}`: {e}"),
            None => e.to_string(),
        }
    }
}

impl wit::Host for GuestState {
    fn declare(&mut self, name: String, kind: wit::StateKind) -> Result<wit::StateId, String> {
        let kind = match kind {
            wit::StateKind::Value => StateKind::Value,
            wit::StateKind::Map => StateKind::Map,
            wit::StateKind::List => StateKind::List,
        };
        self.backend
            .declare(&name, kind)
            .map(|id| id.0)
            .map_err(|e| e.to_string())
    }

    fn read_values(&mut self, state: wit::StateId, slots: Vec<u32>) -> Result<wit::Values, String> {
        for &slot in &slots {
            self.slots.key(slot)?;
        }
        let mut data = Vec::new();
        let mut ends = Vec::with_capacity(slots.len());
        let mut present = Vec::with_capacity(slots.len());
        let mut hints = Vec::with_capacity(slots.len());
        // Every slot was checked above, so none is skipped here.
        let keys = slots.iter().filter_map(|&slot| self.slots.key(slot).ok());
        let result = self
            .backend
            .value_get_many(StateId(state), keys, |_, value, hint| {
                if let Some(value) = value {
                    data.extend_from_slice(value);
                }
                present.push(value.is_some());
                ends.push(data.len() as u32);
                hints.push(hint);
            });
        result.map_err(|e| self.describe(state, e))?;
        self.slots.set_hints(StateId(state), &slots, &hints);
        Ok(wit::Values {
            items: Blobs { data, ends },
            present,
        })
    }

    fn apply(&mut self, ops: Vec<wit::Op>, data: Vec<u8>) -> Result<(), String> {
        let mut start = 0usize;
        for (i, op) in ops.iter().enumerate() {
            let (key_end, value_end) = (op.key_end as usize, op.value_end as usize);
            if key_end < start || value_end < key_end || value_end > data.len() {
                return Err(format!(
                    "state operation {i}: byte range {start}..{key_end}..{value_end} is outside the {} bytes sent",
                    data.len()
                ));
            }
            let map_key = &data[start..key_end];
            let value = &data[key_end..value_end];
            start = value_end;
            let key = self
                .slots
                .key(op.slot)
                .map_err(|e| format!("state operation {i}: {e}"))?;
            let id = StateId(op.state);
            let b = &mut self.backend;
            let result = match op.kind {
                OpKind::ValueSet => {
                    b.value_set_hinted(id, key, self.slots.hint(id, op.slot), value)
                }
                OpKind::ValueRemove => b.value_remove(id, key),
                OpKind::MapPut => b.map_put(id, key, map_key, value),
                OpKind::MapRemove => b.map_remove(id, key, map_key),
                OpKind::MapClear => b.map_clear(id, key),
                OpKind::ListAppend => b.list_append(id, key, value),
                OpKind::ListClear => b.list_clear(id, key),
            };
            if let Err(e) = result {
                return Err(format!(
                    "state operation {i}: {}",
                    self.describe(op.state, e)
                ));
            }
        }
        if let Some(limit) = self.state_limit
            && self.backend.live_bytes() > limit
        {
            self.over_state_limit = true;
            return Err(format!(
                "the operator's state holds {} bytes, over its limit of {limit}",
                self.backend.live_bytes()
            ));
        }
        Ok(())
    }

    fn map_get(
        &mut self,
        state: wit::StateId,
        slot: u32,
        map_key: Vec<u8>,
    ) -> Result<Option<Vec<u8>>, String> {
        let key = self.slots.key(slot)?;
        match self.backend.map_get(StateId(state), key, &map_key) {
            Ok(v) => Ok(v.map(|v| v.to_vec())),
            Err(e) => Err(self.describe(state, e)),
        }
    }

    fn map_entries(
        &mut self,
        state: wit::StateId,
        slot: u32,
        after: Option<Vec<u8>>,
        limit: u32,
    ) -> Result<wit::Entries, String> {
        let key = self.slots.key(slot)?;
        let map = match self.backend.map(StateId(state), key) {
            Ok(map) => map,
            Err(e) => return Err(self.describe(state, e)),
        };
        let mut keys = Blobs {
            data: Vec::new(),
            ends: Vec::new(),
        };
        let mut values = Blobs {
            data: Vec::new(),
            ends: Vec::new(),
        };
        if let Some(map) = map {
            for (k, v) in map
                .range_after(after.as_deref())
                .take(limit.min(MAX_PAGE) as usize)
            {
                keys.data.extend_from_slice(k);
                keys.ends.push(keys.data.len() as u32);
                values.data.extend_from_slice(v);
                values.ends.push(values.data.len() as u32);
            }
        }
        Ok(wit::Entries { keys, values })
    }

    fn list_read(&mut self, state: wit::StateId, slot: u32) -> Result<Blobs, String> {
        let key = self.slots.key(slot)?;
        let items = match self.backend.list_items(StateId(state), key) {
            Ok(items) => items,
            Err(e) => return Err(self.describe(state, e)),
        };
        let mut blobs = Blobs {
            data: Vec::with_capacity(items.iter().map(|i| i.len()).sum()),
            ends: Vec::with_capacity(items.len()),
        };
        for item in items {
            blobs.data.extend_from_slice(item);
            blobs.ends.push(blobs.data.len() as u32);
        }
        Ok(blobs)
    }
}

impl crate::bindings::weir::operator::types::Host for GuestState {}
