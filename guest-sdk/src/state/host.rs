//! The host's state functions, behind a trait so that the batch machinery can be unit-tested
//! natively against an in-memory fake.

use crate::bindings::weir::operator::state::{self as wit, Entries, StateId, StateKind, Values};
use crate::bindings::weir::operator::types::Blobs;
use crate::numbers::U32s;
use crate::{Error, Result};

/// The imported `weir:operator/state` interface, one method per WIT function.
///
/// Errors are the host's messages; callers add which state failed.
pub(crate) trait StateHost {
    fn declare(&mut self, name: &str, kind: StateKind) -> Result<StateId, String>;
    /// `slots` is the WIT's `u32s`: the slots' little-endian bytes.
    fn read_values(&mut self, state: StateId, slots: &[u8]) -> Result<Values, String>;
    /// `ops` is the encoded operation log (see [`super::op_log`]).
    fn apply(&mut self, ops: &[u8], data: &[u8]) -> Result<(), String>;
    fn map_get(
        &mut self,
        state: StateId,
        slot: u32,
        map_key: &[u8],
    ) -> Result<Option<Vec<u8>>, String>;
    /// `slots` is the WIT's `u32s`; `map_keys` one map key per slot.
    fn map_get_many(
        &mut self,
        state: StateId,
        slots: &[u8],
        map_keys: &Blobs,
    ) -> Result<Values, String>;
    fn map_size(&mut self, state: StateId, slot: u32) -> Result<u32, String>;
    fn map_entries(
        &mut self,
        state: StateId,
        slot: u32,
        after: Option<&[u8]>,
        limit: u32,
    ) -> Result<Entries, String>;
    fn list_read(&mut self, state: StateId, slot: u32) -> Result<Blobs, String>;
    /// The imported `weir:operator/time` interface.
    fn watermark(&mut self) -> Option<i64>;
    fn processing_time(&mut self) -> i64;
}

/// The real host, through the generated imports.
pub(crate) struct WitHost;

impl StateHost for WitHost {
    fn declare(&mut self, name: &str, kind: StateKind) -> Result<StateId, String> {
        // The SDK encodes every value, map key and list item as CBOR, the encoding the host
        // stores (`codec`).
        wit::declare(name, kind, wit::Encoding::Cbor)
    }

    fn read_values(&mut self, state: StateId, slots: &[u8]) -> Result<Values, String> {
        wit::read_values(state, slots)
    }

    fn apply(&mut self, ops: &[u8], data: &[u8]) -> Result<(), String> {
        wit::apply(ops, data)
    }

    fn map_get(
        &mut self,
        state: StateId,
        slot: u32,
        map_key: &[u8],
    ) -> Result<Option<Vec<u8>>, String> {
        wit::map_get(state, slot, map_key)
    }

    fn map_get_many(
        &mut self,
        state: StateId,
        slots: &[u8],
        map_keys: &Blobs,
    ) -> Result<Values, String> {
        wit::map_get_many(state, slots, map_keys)
    }

    fn map_size(&mut self, state: StateId, slot: u32) -> Result<u32, String> {
        wit::map_size(state, slot)
    }

    fn map_entries(
        &mut self,
        state: StateId,
        slot: u32,
        after: Option<&[u8]>,
        limit: u32,
    ) -> Result<Entries, String> {
        wit::map_entries(state, slot, after, limit)
    }

    fn list_read(&mut self, state: StateId, slot: u32) -> Result<Blobs, String> {
        wit::list_read(state, slot)
    }

    fn watermark(&mut self) -> Option<i64> {
        crate::bindings::weir::operator::time::watermark()
    }

    fn processing_time(&mut self) -> i64 {
        crate::bindings::weir::operator::time::processing_time()
    }
}

/// The number of items of `blobs`, or an error if its `ends` has a partial item.
pub(crate) fn blob_count(blobs: &Blobs) -> Result<usize> {
    Ok(ends(blobs)?.len())
}

/// Item `index` of `blobs`, or an error naming the malformed reply.
#[inline]
pub(crate) fn blob(blobs: &Blobs, index: usize) -> Result<&[u8]> {
    let ends = ends(blobs)?;
    let start = match index {
        0 => Some(0),
        _ => ends.get(index - 1).map(|end| end as usize),
    };
    let end = ends.get(index).map(|end| end as usize);
    start
        .zip(end)
        .and_then(|(start, end)| blobs.data.get(start..end))
        .ok_or_else(|| {
            Error::new(format!(
                "malformed reply from the host: item {index} of {} is outside its {} bytes",
                ends.len(),
                blobs.data.len()
            ))
        })
}

/// The `ends` of `blobs`, read in place.
#[inline]
fn ends(blobs: &Blobs) -> Result<U32s<'_>> {
    U32s::new(&blobs.ends, "ends").map_err(|e| e.context("malformed reply from the host"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::column;

    #[test]
    fn blob_slices_items_back_to_back() -> Result<()> {
        let blobs = Blobs {
            data: b"abcdef".to_vec(),
            ends: column([1u32, 1, 6]),
        };
        assert_eq!(blob_count(&blobs)?, 3);
        assert_eq!(blob(&blobs, 0)?, b"a");
        assert_eq!(blob(&blobs, 1)?, b"");
        assert_eq!(blob(&blobs, 2)?, b"bcdef");
        assert!(blob(&blobs, 3).is_err());
        let broken = Blobs {
            data: b"ab".to_vec(),
            ends: column([2u32, 1]),
        };
        assert!(blob(&broken, 1).is_err());
        let partial = Blobs {
            data: b"ab".to_vec(),
            ends: vec![2, 0, 0],
        };
        assert!(blob(&partial, 0).is_err_and(|e| e.message().contains("3 bytes")));
        assert!(blob_count(&partial).is_err());
        Ok(())
    }
}
