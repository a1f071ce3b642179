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
use crate::state::version::{Migration, Versioning, write_head};
use crate::{Error, Result};

/// A list of `T` per key, appended to; declared with
/// [`OpenContext::list_state`](crate::OpenContext::list_state).
///
/// Every call acts on the list of the record's key. Items are stored CBOR-encoded. `push`
/// and `clear` are queued and sent in one host call with the other writes of the batch; `get`
/// first sends the queued writes, so it sees them, then reads the whole list in one call.
///
/// A list declared with [`OpenContext::versioned_list_state`](crate::OpenContext::versioned_list_state)
/// stores its items with a version: a `get` that finds items of an older version migrates
/// them and writes the whole list back in the current version (a list is only ever cleared
/// and appended to).
pub struct ListState<T> {
    id: StateId,
    name: Arc<str>,
    versioning: Versioning<T>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for ListState<T> {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            name: self.name.clone(),
            versioning: self.versioning,
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
        Self::declare_versioned(name, 1, None)
    }

    pub(crate) fn declare_versioned(
        name: &str,
        version: u32,
        migrate: Option<Migration<T>>,
    ) -> Result<Self> {
        let versioning = Versioning::new("list", name, version, migrate)?;
        let id = batch::with_runtime(|runtime| runtime.declare(name, StateKind::List))?;
        Ok(Self {
            id,
            name: name.into(),
            versioning,
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
            Some(&mut |data: &mut Vec<u8>| {
                write_head(self.versioning.version, data);
                codec::encode_into(item, data)
            }),
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
            let mut migrated = false;
            let items = (0..host::blob_count(&blobs)?)
                .map(|index| {
                    let (item, old) = self.versioning.decode(host::blob(&blobs, index)?)?;
                    migrated |= old;
                    Ok(item)
                })
                .collect::<Result<Vec<T>>>()?;
            Ok((items, migrated))
        })
        .map_err(|e| e.context(format_args!("list state `{}`", self.name)))
        .and_then(|(items, migrated)| {
            if migrated {
                // Written back whole, in this version.
                self.clear()?;
                for item in &items {
                    self.push(item)?;
                }
            }
            Ok(items)
        })
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

    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct V1 {
        count: u64,
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct V2 {
        total: u64,
    }

    fn from_v1(_from: u32, old: crate::state::version::OldValue<'_>) -> Result<V2> {
        let v1: V1 = old.decode()?;
        Ok(V2 { total: v1.count })
    }

    #[test]
    fn a_versioned_list_migrates_older_items_and_writes_the_list_back() -> Result<()> {
        let _host = FakeHost::install();
        let old = ListState::<V1>::declare("l")?;
        let scope = begin(1)?;
        set_current_slot(0);
        old.push(&V1 { count: 1 })?;
        old.push(&V1 { count: 2 })?;
        assert_eq!(old.get()?.len(), 2, "a read sends the writes");
        drop(scope);

        let list = ListState::<V2>::declare_versioned("l", 2, Some(from_v1))?;
        let _scope = begin(1)?;
        set_current_slot(0);
        list.push(&V2 { total: 3 })?;
        let expected = [V2 { total: 1 }, V2 { total: 2 }, V2 { total: 3 }];
        assert_eq!(list.get()?, expected, "old and new items, in order");
        assert_eq!(list.get()?, expected, "written back whole, in order");
        let e = old.get().expect_err("newer than version 1");
        assert!(e.to_string().contains("version 2, newer"), "{e}");
        Ok(())
    }
}
