//! List state: a typed list per key, appended to.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Serialize, de::DeserializeOwned};

use crate::bindings::weir::operator::state::{OpKind, StateId, StateKind};
use crate::codec;
use crate::state::batch;
use crate::state::host;
use crate::state::op_log::WriteBytes;
use crate::{Error, Result};

/// A list of `T` per key, appended to; declared with
/// [`OpenContext::list_state`](crate::OpenContext::list_state).
///
/// Every call acts on the list of the record's key. Items are stored CBOR-encoded. `push`
/// and `clear` are queued and sent in one host call with the other writes of the batch; `get`
/// first sends the queued writes, so it sees them, then reads the whole list in one call.
pub struct ListState<T> {
    id: StateId,
    name: Arc<str>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for ListState<T> {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            name: self.name.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> fmt::Debug for ListState<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListState")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<T: Serialize + DeserializeOwned> ListState<T> {
    pub(crate) fn declare(name: &str) -> Result<Self> {
        let id = batch::with_runtime(|runtime| runtime.declare(name, StateKind::List))?;
        Ok(Self {
            id,
            name: name.into(),
            _type: PhantomData,
        })
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Appends `item`.
    pub fn push(&self, item: &T) -> Result<()> {
        self.write(
            OpKind::ListAppend,
            Some(&mut |data: &mut Vec<u8>| codec::encode_into(item, data)),
        )
    }

    /// Removes every item.
    pub fn clear(&self) -> Result<()> {
        self.write(OpKind::ListClear, None)
    }

    /// Every item, oldest first.
    pub fn get(&self) -> Result<Vec<T>> {
        let slot = batch::current_slot(&self.name)?;
        batch::with_runtime(|runtime| {
            runtime.flush_log_for(self.id, slot)?;
            let blobs = runtime
                .host
                .list_read(self.id, slot)
                .map_err(|e| Error::new(format!("reading: {e}")))?;
            (0..host::blob_count(&blobs)?)
                .map(|index| codec::decode(host::blob(&blobs, index)?))
                .collect()
        })
        .map_err(|e| e.context(format_args!("list state `{}`", self.name)))
    }

    fn write(&self, kind: OpKind, value: Option<WriteBytes<'_>>) -> Result<()> {
        let slot = batch::current_slot(&self.name)?;
        batch::with_runtime(|runtime| runtime.log.push(kind, self.id, slot, None, value))
            .map_err(|e| e.context(format_args!("list state `{}`", self.name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::batch::{begin, set_current_slot};
    use crate::state::fake::FakeHost;

    #[test]
    fn pushes_reads_and_clears_per_key() -> Result<()> {
        let host = FakeHost::install();
        let list = ListState::<String>::declare("l")?;
        let scope = begin(2)?;
        set_current_slot(0);
        list.push(&"a".to_owned())?;
        list.push(&"b".to_owned())?;
        set_current_slot(1);
        list.push(&"c".to_owned())?;
        assert_eq!(list.get()?, ["c"]);
        set_current_slot(0);
        assert_eq!(list.get()?, ["a", "b"]);
        list.clear()?;
        list.push(&"d".to_owned())?;
        scope.finish()?;
        assert_eq!(host.calls().apply, 2);

        let scope = begin(1)?;
        set_current_slot(0);
        assert_eq!(list.get()?, ["d"]);
        scope.finish()
    }
}
