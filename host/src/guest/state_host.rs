//! The `state` import: keyed state calls from a guest, served by the subtask's backend.
//!
//! Every call names keys by slot of the current batch (see [`super::KeySlots`]); every
//! failure is a message the guest receives as a WIT error, never a trap.
//!
//! The backend stores every state as CBOR. A state declared with the `json` encoding (the
//! Python, JavaScript and C SDKs) is converted here, on its way in and on its way out
//! ([`crate::state::encoding`]): values, map keys, the cursor of a map's pages and list items.

use std::borrow::Cow;

use super::GuestState;
use crate::bindings::weir::operator::state::{self as wit, OpKind};
use crate::bindings::weir::operator::types::Blobs;
use crate::record::Numbers;
use crate::state::encoding::{EncodingError, cbor_to_json, json_to_cbor};
use crate::state::undo::Write;
use crate::state::{StateEncoding, StateError, StateId, StateKind, TimeDomain, Timer};

/// Most entries one `map-entries` call returns, whatever the guest asks for (stated in the WIT).
const MAX_PAGE: u32 = 4096;

/// Bytes per operation of an `apply` log: five little-endian u32 words (stated in the WIT).
const OP_BYTES: usize = 20;

/// The `op-kind` whose ordinal is `kind`.
fn op_kind(kind: u32) -> Option<OpKind> {
    Some(match kind {
        0 => OpKind::ValueSet,
        1 => OpKind::ValueRemove,
        2 => OpKind::MapPut,
        3 => OpKind::MapRemove,
        4 => OpKind::MapClear,
        5 => OpKind::ListAppend,
        6 => OpKind::ListClear,
        7 => OpKind::TimerRegister,
        8 => OpKind::TimerDelete,
        _ => return None,
    })
}

impl GuestState {
    /// The state a guest call names by id: one the operator declared, never one of the
    /// host's own (the timers' state, which a guest reaches only through timer operations: a
    /// value written there directly would bypass the index of pending timers).
    fn guest_state(&self, state: u32) -> Result<StateId, String> {
        match self.backend.state_name(StateId(state)) {
            Some(name) if name.starts_with('@') => Err(StateError::UnknownState(state).to_string()),
            _ => Ok(StateId(state)),
        }
    }

    fn describe(&self, state: u32, e: impl std::fmt::Display) -> String {
        match self.backend.state_name(StateId(state)) {
            Some(name) => format!("state `{name}`: {e}"),
            None => e.to_string(),
        }
    }

    fn is_json(&self, state: u32) -> bool {
        self.backend.encoding(StateId(state)) == StateEncoding::Json
    }

    /// `stored` as the guest reads it, appended to `out`.
    fn guest_form(&self, state: u32, stored: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        if self.is_json(state) {
            cbor_to_json(stored, out).map_err(|e| self.describe(state, stored_error(e)))
        } else {
            out.extend_from_slice(stored);
            Ok(())
        }
    }

    /// What the guest sent for `state`, as stored: its own bytes, or their CBOR.
    fn stored_form<'a>(&self, state: u32, sent: &'a [u8]) -> Result<Cow<'a, [u8]>, String> {
        if self.is_json(state) {
            let mut cbor = Vec::with_capacity(sent.len() + 4);
            json_to_cbor(sent, &mut cbor).map_err(|e| self.describe(state, e))?;
            Ok(Cow::Owned(cbor))
        } else {
            Ok(Cow::Borrowed(sent))
        }
    }

    /// Every item of `blobs` as the guest of `state` reads it.
    fn blobs_to_guest<'a>(
        &self,
        state: u32,
        items: impl Iterator<Item = &'a [u8]>,
    ) -> Result<Blobs, String> {
        let mut blobs = BlobsBuilder::default();
        for item in items {
            self.guest_form(state, item, &mut blobs.data)?;
            blobs.ends.push(blobs.data.len() as u32);
        }
        Ok(blobs.build())
    }
}

/// What a stored value that will not convert means: state written by a CBOR guest that a JSON
/// guest cannot read.
fn stored_error(e: EncodingError) -> String {
    format!(
        "a stored value has no JSON form for this operator ({e}); it was written as CBOR \
         that JSON cannot say"
    )
}

impl wit::Host for GuestState {
    #[tracing::instrument(level = "trace", skip(self))]
    fn declare(
        &mut self,
        name: String,
        kind: wit::StateKind,
        encoding: wit::Encoding,
    ) -> Result<wit::StateId, String> {
        let kind = match kind {
            wit::StateKind::Value => StateKind::Value,
            wit::StateKind::Map => StateKind::Map,
            wit::StateKind::List => StateKind::List,
        };
        let encoding = match encoding {
            wit::Encoding::Cbor => StateEncoding::Cbor,
            wit::Encoding::Json => StateEncoding::Json,
        };
        self.backend
            .declare_as(&name, kind, encoding)
            .map(|id| id.0)
            .map_err(|e| e.to_string())
    }

    #[tracing::instrument(level = "trace", skip(self, slots), fields(slots = slots.len()))]
    fn read_values(&mut self, state: wit::StateId, slots: Vec<u8>) -> Result<wit::Values, String> {
        self.guest_state(state)?;
        let slots = whole_u32s(slots, "the slots")?;
        for slot in slots.iter() {
            self.slots.key(slot)?;
        }
        let mut data = Vec::new();
        let mut ends = Numbers::<u32>::with_capacity(slots.len());
        let mut present = Vec::with_capacity(slots.len());
        let mut hints = Vec::with_capacity(slots.len());
        let json = self.is_json(state);
        let mut unreadable = None;
        // Every slot was checked above, so none is skipped here.
        let keys = slots.iter().filter_map(|slot| self.slots.key(slot).ok());
        let result = self
            .backend
            .value_get_many(StateId(state), keys, |_, value, hint| {
                match value {
                    Some(value) if json => {
                        if let Err(e) = cbor_to_json(value, &mut data) {
                            unreadable.get_or_insert(e);
                        }
                    }
                    Some(value) => data.extend_from_slice(value),
                    None => {}
                }
                present.push(u8::from(value.is_some()));
                ends.push(data.len() as u32);
                hints.push(hint);
            });
        result.map_err(|e| self.describe(state, e))?;
        if let Some(e) = unreadable {
            return Err(self.describe(state, stored_error(e)));
        }
        self.slots.set_hints(StateId(state), slots.iter(), &hints);
        Ok(wit::Values {
            items: Blobs {
                data,
                ends: ends.into_bytes(),
            },
            present,
        })
    }

    #[tracing::instrument(
        level = "trace",
        skip_all,
        fields(ops_bytes = ops.len(), data_bytes = data.len())
    )]
    fn apply(&mut self, ops: Vec<u8>, data: Vec<u8>) -> Result<(), String> {
        if !ops.len().is_multiple_of(OP_BYTES) {
            return Err(format!(
                "the operation log holds {} bytes, not a multiple of {OP_BYTES} (five u32 words per operation)",
                ops.len()
            ));
        }
        let mut start = 0usize;
        for (i, op) in ops.chunks_exact(OP_BYTES).enumerate() {
            let mut words = [0u32; 5];
            for (word, b) in words.iter_mut().zip(op.chunks_exact(4)) {
                *word = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            let [kind, state, slot, key_end, value_end] = words;
            let (key_end, value_end) = (key_end as usize, value_end as usize);
            if key_end < start || value_end < key_end || value_end > data.len() {
                return Err(format!(
                    "state operation {i}: byte range {start}..{key_end}..{value_end} is outside the {} bytes sent",
                    data.len()
                ));
            }
            let (mut map_key, mut value) = (&data[start..key_end], &data[key_end..value_end]);
            start = value_end;
            let key = self
                .slots
                .key(slot)
                .map_err(|e| format!("state operation {i}: {e}"))?;
            let kind =
                op_kind(kind).ok_or_else(|| format!("state operation {i}: unknown kind {kind}"))?;
            if let OpKind::TimerRegister | OpKind::TimerDelete = kind {
                let timer = timer(state, value).map_err(|e| format!("state operation {i}: {e}"))?;
                let timers = self
                    .backend
                    .timers_state()
                    .map_err(|e| format!("state operation {i}: {e}"))?;
                if let Some(undo) = &mut self.undo
                    && let Err(e) = undo.record(&self.backend, timers, key, Write::Value)
                {
                    return Err(format!("state operation {i}: timers: {e}"));
                }
                let result = match kind {
                    OpKind::TimerRegister => self.backend.timer_register(key, timer),
                    _ => self.backend.timer_delete(key, timer),
                };
                if let Err(e) = result {
                    return Err(format!("state operation {i}: timers: {e}"));
                }
                continue;
            }
            let id = self
                .guest_state(state)
                .map_err(|e| format!("state operation {i}: {e}"))?;
            // A JSON guest's map key and value, as the CBOR the backend stores.
            if self.is_json(state) {
                let (has_key, has_value) = match kind {
                    OpKind::MapPut => (true, true),
                    OpKind::MapRemove => (true, false),
                    OpKind::ValueSet | OpKind::ListAppend => (false, true),
                    _ => (false, false),
                };
                let (key_cbor, value_cbor) = &mut self.converted;
                key_cbor.clear();
                value_cbor.clear();
                let converted = (if has_key {
                    json_to_cbor(map_key, key_cbor)
                } else {
                    Ok(())
                })
                .and_then(|()| {
                    if has_value {
                        json_to_cbor(value, value_cbor)
                    } else {
                        Ok(())
                    }
                });
                if let Err(e) = converted {
                    return Err(format!("state operation {i}: {}", self.describe(state, e)));
                }
                if has_key {
                    map_key = &self.converted.0;
                }
                if has_value {
                    value = &self.converted.1;
                }
            }
            if let Some(undo) = &mut self.undo {
                let write = match kind {
                    OpKind::ValueSet | OpKind::ValueRemove => Write::Value,
                    OpKind::MapPut | OpKind::MapRemove => Write::MapEntry(map_key),
                    OpKind::MapClear => Write::MapClear,
                    OpKind::ListAppend => Write::ListAppend,
                    OpKind::ListClear => Write::ListClear,
                    OpKind::TimerRegister | OpKind::TimerDelete => continue,
                };
                let recorded = undo.record(&self.backend, id, key, write);
                if let Err(e) = recorded {
                    return Err(format!("state operation {i}: {}", self.describe(state, e)));
                }
            }
            let b = &mut self.backend;
            let result = match kind {
                OpKind::ValueSet => b.value_set_hinted(id, key, self.slots.hint(id, slot), value),
                OpKind::ValueRemove => b.value_remove(id, key),
                OpKind::MapPut => b.map_put(id, key, map_key, value),
                OpKind::MapRemove => b.map_remove(id, key, map_key),
                OpKind::MapClear => b.map_clear(id, key),
                OpKind::ListAppend => b.list_append(id, key, value),
                OpKind::ListClear => b.list_clear(id, key),
                OpKind::TimerRegister | OpKind::TimerDelete => continue,
            };
            if let Err(e) = result {
                return Err(format!("state operation {i}: {}", self.describe(state, e)));
            }
        }
        self.limiter.check_state(self.backend.live_bytes())
    }

    #[tracing::instrument(level = "trace", skip(self, map_key))]
    fn map_get(
        &mut self,
        state: wit::StateId,
        slot: u32,
        map_key: Vec<u8>,
    ) -> Result<Option<Vec<u8>>, String> {
        self.guest_state(state)?;
        let key = self.slots.key(slot)?;
        let map_key = self.stored_form(state, &map_key)?;
        match self.backend.map_get(StateId(state), key, &map_key) {
            Ok(Some(v)) => {
                let mut out = Vec::with_capacity(v.len());
                self.guest_form(state, v, &mut out)?;
                Ok(Some(out))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(self.describe(state, e)),
        }
    }

    #[tracing::instrument(level = "trace", skip_all, fields(state, reads = slots.len() / 4))]
    fn map_get_many(
        &mut self,
        state: wit::StateId,
        slots: Vec<u8>,
        map_keys: Blobs,
    ) -> Result<wit::Values, String> {
        self.guest_state(state)?;
        let slots = whole_u32s(slots, "the slots")?;
        let key_ends = whole_u32s(map_keys.ends, "the map keys' ends")?;
        if key_ends.len() != slots.len() {
            return Err(format!(
                "{} slots and {} map keys: a read is one slot and one map key",
                slots.len(),
                key_ends.len()
            ));
        }
        let mut data = Vec::new();
        let mut ends = Numbers::<u32>::with_capacity(slots.len());
        let mut present = Vec::with_capacity(slots.len());
        let mut start = 0usize;
        for (i, (slot, end)) in slots.iter().zip(key_ends.iter()).enumerate() {
            let end = end as usize;
            let map_key = map_keys.data.get(start..end).ok_or_else(|| {
                format!(
                    "map key {i} spans bytes {start}..{end} of the {} the map keys hold",
                    map_keys.data.len()
                )
            })?;
            start = end;
            let key = self.slots.key(slot)?;
            let map_key = self.stored_form(state, map_key)?;
            let found = self
                .backend
                .map_get(StateId(state), key, &map_key)
                .map_err(|e| self.describe(state, e))?;
            if let Some(value) = found {
                self.guest_form(state, value, &mut data)?;
            }
            present.push(u8::from(found.is_some()));
            ends.push(data.len() as u32);
        }
        Ok(wit::Values {
            items: Blobs {
                data,
                ends: ends.into_bytes(),
            },
            present,
        })
    }

    #[tracing::instrument(level = "trace", skip(self))]
    fn map_size(&mut self, state: wit::StateId, slot: u32) -> Result<u32, String> {
        self.guest_state(state)?;
        let key = self.slots.key(slot)?;
        match self.backend.map(StateId(state), key) {
            // A map's entries are counted as they are written; more than u32::MAX of them
            // would not fit in memory.
            Ok(map) => Ok(map.map_or(0, |m| u32::try_from(m.live).unwrap_or(u32::MAX))),
            Err(e) => Err(self.describe(state, e)),
        }
    }

    #[tracing::instrument(level = "trace", skip(self, after))]
    fn map_entries(
        &mut self,
        state: wit::StateId,
        slot: u32,
        after: Option<Vec<u8>>,
        limit: u32,
    ) -> Result<wit::Entries, String> {
        self.guest_state(state)?;
        let key = self.slots.key(slot)?;
        let map = match self.backend.map(StateId(state), key) {
            Ok(map) => map,
            Err(e) => return Err(self.describe(state, e)),
        };
        let Some(map) = map else {
            return Ok(wit::Entries {
                keys: BlobsBuilder::default().build(),
                values: BlobsBuilder::default().build(),
            });
        };
        let after = match &after {
            Some(after) => Some(self.stored_form(state, after)?),
            None => None,
        };
        let page = || {
            map.range_after(after.as_deref())
                .take(limit.min(MAX_PAGE) as usize)
        };
        Ok(wit::Entries {
            keys: self.blobs_to_guest(state, page().map(|(k, _)| k))?,
            values: self.blobs_to_guest(state, page().map(|(_, v)| v))?,
        })
    }

    #[tracing::instrument(level = "trace", skip_all, fields(state, slots = slots.len() / 4))]
    fn list_read_many(
        &mut self,
        state: wit::StateId,
        slots: Vec<u8>,
    ) -> Result<wit::Lists, String> {
        self.guest_state(state)?;
        let slots = whole_u32s(slots, "the slots")?;
        let mut items = BlobsBuilder::default();
        let mut counts = Numbers::<u32>::with_capacity(slots.len());
        for slot in slots.iter() {
            let key = self.slots.key(slot)?;
            let list = self
                .backend
                .list_items(StateId(state), key)
                .map_err(|e| self.describe(state, e))?;
            for item in list.iter() {
                self.guest_form(state, item, &mut items.data)?;
                items.ends.push(items.data.len() as u32);
            }
            counts.push(list.len() as u32);
        }
        Ok(wit::Lists {
            items: items.build(),
            counts: counts.into_bytes(),
        })
    }

    #[tracing::instrument(level = "trace", skip(self))]
    fn list_read(&mut self, state: wit::StateId, slot: u32) -> Result<Blobs, String> {
        self.guest_state(state)?;
        let key = self.slots.key(slot)?;
        let items = match self.backend.list_items(StateId(state), key) {
            Ok(items) => items,
            Err(e) => return Err(self.describe(state, e)),
        };
        self.blobs_to_guest(state, items.iter().map(|i| &i[..]))
    }
}

/// The WIT's `u32s` in `bytes`, or an error naming `what` when they are not whole words.
fn whole_u32s(bytes: Vec<u8>, what: &str) -> Result<Numbers<u32>, String> {
    let numbers = Numbers::<u32>::from_bytes(bytes);
    if !numbers.is_whole() {
        return Err(format!(
            "{what} are {} bytes, not a whole number of 4-byte u32s",
            numbers.as_bytes().len()
        ));
    }
    Ok(numbers)
}

/// Byte strings gathered into the WIT's `blobs`.
#[derive(Default)]
pub(super) struct BlobsBuilder {
    pub(super) data: Vec<u8>,
    pub(super) ends: Numbers<u32>,
}

impl BlobsBuilder {
    pub(super) fn push(&mut self, item: &[u8]) {
        self.data.extend_from_slice(item);
        self.ends.push(self.data.len() as u32);
    }

    pub(super) fn build(self) -> Blobs {
        Blobs {
            data: self.data,
            ends: self.ends.into_bytes(),
        }
    }
}

/// The timer a `timer-register` or `timer-delete` operation names: its domain (the
/// operation's `state` word) and its 12 bytes of timestamp and tag.
fn timer(domain: u32, value: &[u8]) -> Result<Timer, String> {
    let domain = TimeDomain::from_ordinal(domain)
        .ok_or_else(|| format!("a timer's time domain is 0 or 1, not {domain}"))?;
    let bytes: &[u8; 12] = value.try_into().map_err(|_| {
        format!(
            "a timer is 12 bytes (timestamp, then tag), not {}",
            value.len()
        )
    })?;
    let (at, tag) = bytes.split_at(8);
    Ok(Timer {
        domain,
        at: i64::from_le_bytes(at.try_into().unwrap_or_default()),
        tag: u32::from_le_bytes(tag.try_into().unwrap_or_default()),
    })
}

impl crate::bindings::weir::operator::types::Host for GuestState {}

impl crate::bindings::weir::operator::time::Host for GuestState {
    fn watermark(&mut self) -> Option<i64> {
        self.watermark
    }

    fn processing_time(&mut self) -> i64 {
        crate::clock::now_ms()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::bindings::weir::operator::state::Host as _;
    use crate::guest::LogContext;
    use crate::ids::{OperatorName, SubtaskIndex};
    use crate::operator::GuestLimits;
    use crate::partition::KeyGroups;
    use crate::record::{RecordBatch, RecordRef};
    use crate::state::{KeyRef, KeyedStateBackend};

    /// A guest's state host in the middle of a batch with the keys `a` (slot 0), `b` (slot 1),
    /// with a value state (id 0) and a map state (id 1) declared.
    fn in_batch() -> GuestState {
        let groups = KeyGroups::default();
        let backend = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let log = LogContext {
            job: Arc::from("j"),
            operator: OperatorName("op".into()),
            subtask: SubtaskIndex(0),
            file: None,
        };
        let mut guest = GuestState::new(backend, GuestLimits::default(), log);
        assert_eq!(
            guest.declare("v".into(), wit::StateKind::Value, wit::Encoding::Cbor),
            Ok(0)
        );
        assert_eq!(
            guest.declare("m".into(), wit::StateKind::Map, wit::Encoding::Cbor),
            Ok(1)
        );
        let mut batch = RecordBatch::new();
        for key in ["a", "b"] {
            batch.push(RecordRef::keyed(key.as_bytes(), b""));
        }
        let (wit, hashes) = batch.into_wit();
        guest.begin_batch(&wit, &hashes, &mut Numbers::default());
        guest
    }

    fn log(ops: &[[u32; 5]]) -> Vec<u8> {
        ops.iter().flatten().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn value(guest: &GuestState, slot: u32) -> Option<Vec<u8>> {
        let key = guest.slots.key(slot).expect("slot");
        let value = guest
            .backend
            .value_get(StateId(0), key)
            .expect("value state");
        value.map(<[u8]>::to_vec)
    }

    #[test]
    fn op_kinds_are_numbered_in_wit_order() {
        let kinds = [
            OpKind::ValueSet,
            OpKind::ValueRemove,
            OpKind::MapPut,
            OpKind::MapRemove,
            OpKind::MapClear,
            OpKind::ListAppend,
            OpKind::ListClear,
            OpKind::TimerRegister,
            OpKind::TimerDelete,
        ];
        for (ordinal, kind) in kinds.into_iter().enumerate() {
            assert_eq!(op_kind(ordinal as u32), Some(kind));
        }
        assert_eq!(op_kind(9), None);
    }

    #[test]
    fn applies_an_encoded_log_in_order() {
        let mut guest = in_batch();
        // value(a) = "1", map(b)["k"] = "xy", value(b) = "22", value(a) removed.
        let ops = log(&[
            [0, 0, 0, 0, 1],
            [2, 1, 1, 2, 4],
            [0, 0, 1, 4, 6],
            [1, 0, 0, 6, 6],
        ]);
        guest.apply(ops, b"1kxy22".to_vec()).expect("apply");
        assert_eq!(value(&guest, 0), None);
        assert_eq!(value(&guest, 1), Some(b"22".to_vec()));
        let b = guest.slots.key(1).expect("slot");
        assert_eq!(
            guest.backend.map_get(StateId(1), b, b"k").expect("map"),
            Some(&b"xy"[..])
        );
    }

    #[test]
    fn a_json_guests_state_is_stored_as_cbor_and_read_back_as_json() {
        let mut guest = in_batch();
        let count = guest_declare_json(&mut guest, "count", wit::StateKind::Value);
        let seen = guest_declare_json(&mut guest, "seen", wit::StateKind::Map);
        // value(a) = 300, map(a)[10] = "x", map(a)[9] = {"n":[1.5]}.
        let ops = log(&[[0, count, 0, 0, 3], [2, seen, 0, 5, 8], [2, seen, 0, 9, 20]]);
        guest
            .apply(ops, b"30010\"x\"9{\"n\":[1.5]}".to_vec())
            .expect("apply");
        let a = guest.slots.key(0).expect("slot");
        let a = (a.bytes.to_vec(), a.hash);
        let a = || KeyRef::new(&a.0, a.1);
        let stored = guest.backend.value_get(StateId(count), a()).expect("get");
        assert_eq!(stored, Some(&[0x19, 0x01, 0x2c][..]), "300 as CBOR");
        let read = guest.read_values(count, vec![0; 4]).expect("read");
        assert_eq!(read.items.data, b"300");
        assert_eq!(
            guest.map_get(seen, 0, b"9".to_vec()),
            Ok(Some(br#"{"n":[1.5]}"#.to_vec()))
        );
        // CBOR orders integers by value, where their JSON text would put "10" before "9".
        let page = guest.map_entries(seen, 0, None, 10).expect("entries");
        assert_eq!(page.keys.data, b"910");
        let page = guest
            .map_entries(seen, 0, Some(b"9".to_vec()), 10)
            .expect("entries");
        assert_eq!(page.values.data, br#""x""#);

        let e = guest
            .apply(log(&[[0, count, 0, 0, 4]]), b"oops".to_vec())
            .expect_err("not JSON");
        assert!(
            e.starts_with("state operation 0: state `count`: not JSON text"),
            "{e}"
        );
        // CBOR a Rust operator wrote that JSON cannot say (a map with a float key).
        guest
            .backend
            .value_set(StateId(count), a(), &[0xa1, 0xf9, 0x3c, 0x00, 0x01])
            .expect("set");
        let e = guest
            .read_values(count, vec![0; 4])
            .expect_err("no JSON form");
        assert!(
            e.contains("state `count`: a stored value has no JSON form"),
            "{e}"
        );
    }

    fn guest_declare_json(guest: &mut GuestState, name: &str, kind: wit::StateKind) -> u32 {
        guest
            .declare(name.into(), kind, wit::Encoding::Json)
            .expect("declare")
    }

    #[test]
    fn map_size_counts_live_entries_of_the_slots_key() {
        let mut guest = in_batch();
        assert_eq!(guest.map_size(1, 0), Ok(0), "no map yet");
        // map(a) gets "k" and "l", then loses "k"; map(b) gets "k".
        let ops = log(&[
            [2, 1, 0, 1, 2],
            [2, 1, 0, 3, 4],
            [3, 1, 0, 5, 5],
            [2, 1, 1, 6, 7],
        ]);
        guest.apply(ops, b"kxlykkz".to_vec()).expect("apply");
        assert_eq!(guest.map_size(1, 0), Ok(1));
        assert_eq!(guest.map_size(1, 1), Ok(1));
        assert!(guest.map_size(0, 0).is_err(), "a value state has no size");
        assert!(guest.map_size(1, 7).is_err(), "no such slot");
    }

    /// `blobs` of `items`, as a guest sends them.
    fn blobs(items: &[&[u8]]) -> Blobs {
        let mut blobs = BlobsBuilder::default();
        for item in items {
            blobs.push(item);
        }
        blobs.build()
    }

    fn slots(slots: &[u32]) -> Vec<u8> {
        slots.iter().flat_map(|s| s.to_le_bytes()).collect()
    }

    #[test]
    fn map_get_many_reads_each_slots_map_at_its_map_key() {
        let mut guest = in_batch();
        // map(a) = {k: x, l: yy}, map(b) = {k: zzz}.
        let ops = log(&[[2, 1, 0, 1, 2], [2, 1, 0, 3, 5], [2, 1, 1, 6, 9]]);
        guest.apply(ops, b"kxlyykzzz".to_vec()).expect("apply");
        let read = guest
            .map_get_many(
                1,
                slots(&[1, 0, 0, 0, 1]),
                blobs(&[b"k", b"l", b"k", b"m", b"l"]),
            )
            .expect("read");
        assert_eq!(read.present, [1, 1, 1, 0, 0]);
        assert_eq!(read.items.data, b"zzzyyx");
        assert_eq!(read.items.ends, slots(&[3, 5, 6, 6, 6]));
        let none = guest.map_get_many(1, vec![], blobs(&[])).expect("no reads");
        assert!(none.present.is_empty() && none.items.data.is_empty());

        // A JSON guest's keys and values are converted both ways.
        let seen = guest_declare_json(&mut guest, "seen", wit::StateKind::Map);
        guest
            .apply(log(&[[2, seen, 1, 2, 5]]), b"10\"x\"".to_vec())
            .expect("apply");
        let read = guest
            .map_get_many(seen, slots(&[1, 0]), blobs(&[b"10", b"10"]))
            .expect("read");
        assert_eq!(
            (read.present, read.items.data),
            (vec![1, 0], b"\"x\"".to_vec())
        );

        let err = |guest: &mut GuestState, state, s: &[u32], keys: Blobs| {
            guest
                .map_get_many(state, slots(s), keys)
                .expect_err("refused")
        };
        let e = err(&mut guest, 1, &[0, 1], blobs(&[b"k"]));
        assert_eq!(
            e,
            "2 slots and 1 map keys: a read is one slot and one map key"
        );
        let e = err(&mut guest, 1, &[0, 7], blobs(&[b"k", b"k"]));
        assert!(e.contains("key slot 7 does not exist"), "{e}");
        let torn = Blobs {
            data: b"k".to_vec(),
            ends: slots(&[5]),
        };
        let e = err(&mut guest, 1, &[0], torn);
        assert_eq!(e, "map key 0 spans bytes 0..5 of the 1 the map keys hold");
        let e = guest
            .map_get_many(1, vec![0; 3], blobs(&[b"k"]))
            .expect_err("torn slots");
        assert!(e.contains("3 bytes, not a whole number"), "{e}");
        let e = err(&mut guest, seen, &[0], blobs(&[b"{oops"]));
        assert!(e.starts_with("state `seen`: not JSON text"), "{e}");
        assert!(err(&mut guest, 0, &[0], blobs(&[b"k"])).contains("state `v`"));
    }

    #[test]
    fn list_read_many_reads_the_lists_of_the_slots_one_after_the_other() {
        let mut guest = in_batch();
        let list = guest
            .declare("l".into(), wit::StateKind::List, wit::Encoding::Cbor)
            .expect("declare");
        // list(a) = [x, yy], list(b) = [].
        let ops = log(&[[5, list, 0, 0, 1], [5, list, 0, 1, 3]]);
        guest.apply(ops, b"xyy".to_vec()).expect("apply");
        let read = guest.list_read_many(list, slots(&[1, 0, 0])).expect("read");
        assert_eq!(read.counts, slots(&[0, 2, 2]));
        assert_eq!(read.items.data, b"xyyxyy");
        assert_eq!(read.items.ends, slots(&[1, 3, 4, 6]));

        let json = guest_declare_json(&mut guest, "j", wit::StateKind::List);
        guest
            .apply(log(&[[5, json, 1, 0, 3]]), b"\"z\"".to_vec())
            .expect("apply");
        let read = guest.list_read_many(json, slots(&[1])).expect("read");
        assert_eq!(
            (read.counts, read.items.data),
            (slots(&[1]), b"\"z\"".to_vec())
        );

        let e = guest
            .list_read_many(list, slots(&[2]))
            .expect_err("no slot 2");
        assert!(e.contains("key slot 2 does not exist"), "{e}");
        let e = guest.list_read_many(list, vec![0; 5]).expect_err("torn");
        assert!(e.contains("5 bytes, not a whole number"), "{e}");
        let e = guest.list_read_many(1, slots(&[0])).expect_err("a map");
        assert!(e.starts_with("state `m`"), "{e}");
    }

    #[test]
    fn the_timers_state_is_reached_only_through_timer_operations() {
        let mut guest = in_batch();
        // timer-register (event time, at 5, tag 1) for key `a`: declares the host's timers
        // state, id 2.
        let mut timer = 5i64.to_le_bytes().to_vec();
        timer.extend_from_slice(&1u32.to_le_bytes());
        guest
            .apply(log(&[[7, 0, 0, 0, 12]]), timer)
            .expect("register");
        // A value written there directly would bypass the index of pending timers.
        let e = guest
            .apply(log(&[[0, 2, 0, 0, 13]]), vec![0; 13])
            .expect_err("value-set on the timers' state");
        assert_eq!(e, "state operation 0: no state with id 2 was declared");
        assert!(guest.read_values(2, vec![0; 4]).is_err());
        assert!(guest.map_get(2, 0, b"k".to_vec()).is_err());
        assert_eq!(guest.backend.timers_pending(), Ok((1, 0)));
    }

    #[test]
    fn a_malformed_log_is_an_error_naming_the_operation() {
        let mut guest = in_batch();
        let mut torn = log(&[[0, 0, 0, 0, 1]]);
        torn.pop();
        let e = guest.apply(torn, b"1".to_vec()).expect_err("torn");
        assert!(e.contains("19 bytes, not a multiple of 20"), "{e}");

        let e = guest
            .apply(log(&[[0, 0, 0, 0, 1], [9, 0, 1, 1, 1]]), b"1".to_vec())
            .expect_err("unknown kind");
        assert_eq!(e, "state operation 1: unknown kind 9");
        assert_eq!(value(&guest, 0), Some(b"1".to_vec()), "the prefix applies");

        let e = guest
            .apply(log(&[[0, 0, 1, 0, 5]]), b"1".to_vec())
            .expect_err("range");
        assert!(e.contains("state operation 0: byte range 0..0..5"), "{e}");

        let e = guest
            .apply(log(&[[0, 0, 2, 0, 1]]), b"1".to_vec())
            .expect_err("slot");
        assert!(e.starts_with("state operation 0: "), "{e}");
    }
}
