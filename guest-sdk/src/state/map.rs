//! Map state: a typed map per key, kept by the host.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Serialize, de::DeserializeOwned};

use crate::bindings::weir::operator::state::{OpKind, StateId, StateKind};
use crate::bindings::weir::operator::types::Blobs;
use crate::codec;
use crate::state::batch::{self, Runtime};
use crate::state::host;
use crate::state::op_log::WriteBytes;
use crate::state::version::{Migration, Versioning, write_head};
use crate::{Error, Result};

/// How many entries one `map-entries` call returns at most.
const PAGE: u32 = 1024;

/// A map from `K` to `V` per key, declared with
/// [`OpenContext::map_state`](crate::OpenContext::map_state).
///
/// Every call acts on the map of the record's key. Map keys and values are stored
/// CBOR-encoded, and the host orders entries by the bytes of the encoded key: unsigned
/// integers sort numerically, strings by length first, then bytewise.
///
/// A map declared with [`OpenContext::versioned_map_state`](crate::OpenContext::versioned_map_state)
/// stores its values with a version, as a versioned value state does: a value of an older
/// version is migrated as it is read and written back in the current version.
///
/// Writes (`insert`, `remove`, `clear`) are queued and sent in one host call with the other
/// writes of the batch. A read (`get`, `contains_key`, `len`, `entries`, `keys`) calls the
/// host, one crossing each (plus one per 1024 entries for `entries` and `keys`); if writes to
/// this map of this key are queued, it sends them first, so it sees them.
pub struct MapState<K, V> {
    id: StateId,
    name: Arc<str>,
    versioning: Versioning<V>,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for MapState<K, V> {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            name: self.name.clone(),
            versioning: self.versioning,
            _types: PhantomData,
        }
    }
}

impl<K, V> fmt::Debug for MapState<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapState")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<K: Serialize + DeserializeOwned, V: Serialize + DeserializeOwned> MapState<K, V> {
    pub(crate) fn declare(name: &str) -> Result<Self> {
        Self::declare_versioned(name, 1, None)
    }

    pub(crate) fn declare_versioned(
        name: &str,
        version: u32,
        migrate: Option<Migration<V>>,
    ) -> Result<Self> {
        let versioning = Versioning::new("map", name, version, migrate)?;
        let id = batch::with_runtime(|runtime| runtime.declare(name, StateKind::Map))?;
        Ok(Self {
            id,
            name: name.into(),
            versioning,
            _types: PhantomData,
        })
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        let found = self.read(|runtime, slot| {
            Self::get_raw(runtime, self.id, slot, key)?
                .map(|bytes| self.decode(&bytes))
                .transpose()
        })?;
        match found {
            Some((value, true)) => {
                self.insert(key, &value)?;
                Ok(Some(value))
            }
            other => Ok(other.map(|(value, _)| value)),
        }
    }

    /// A stored value, and whether it was migrated from an older version.
    fn decode(&self, stored: &[u8]) -> Result<(V, bool)> {
        self.versioning
            .decode(stored)
            .map_err(|e| e.context(format_args!("map state `{}`", self.name)))
    }

    /// Whether the map has an entry under `key`.
    pub fn contains_key(&self, key: &K) -> Result<bool> {
        self.read(|runtime, slot| Ok(Self::get_raw(runtime, self.id, slot, key)?.is_some()))
    }

    /// The number of entries (the host counts them as they are written: one crossing,
    /// whatever the size of the map).
    pub fn len(&self) -> Result<usize> {
        self.read(|runtime, slot| {
            let size = runtime
                .host
                .map_size(self.id, slot)
                .map_err(|e| Error::new(format!("reading its size: {e}")))?;
            Ok(size as usize)
        })
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Puts `value` under `key`, replacing any previous value.
    pub fn insert(&self, key: &K, value: &V) -> Result<()> {
        self.write(
            OpKind::MapPut,
            Some(&mut |data: &mut Vec<u8>| codec::encode_into(key, data)),
            Some(&mut |data: &mut Vec<u8>| {
                write_head(self.versioning.version, data);
                codec::encode_into(value, data)
            }),
        )
    }

    /// Removes the entry under `key`, if any.
    pub fn remove(&self, key: &K) -> Result<()> {
        self.write(
            OpKind::MapRemove,
            Some(&mut |data: &mut Vec<u8>| codec::encode_into(key, data)),
            None,
        )
    }

    /// Removes every entry.
    pub fn clear(&self) -> Result<()> {
        self.write(OpKind::MapClear, None, None)
    }

    /// Every entry, in the order of the encoded keys.
    pub fn entries(&self) -> Result<Vec<(K, V)>> {
        let mut entries = Vec::new();
        let mut migrated = Vec::new();
        self.pages(|keys, values, index| {
            let (value, old) = self.decode(host::blob(values, index)?)?;
            if old {
                migrated.push(entries.len());
            }
            entries.push((codec::decode(host::blob(keys, index)?)?, value));
            Ok(())
        })?;
        for i in migrated {
            let (key, value) = &entries[i];
            self.insert(key, value)?;
        }
        Ok(entries)
    }

    /// Every key, in the order of their encodings.
    pub fn keys(&self) -> Result<Vec<K>> {
        let mut keys = Vec::new();
        self.pages(|page_keys, _, index| {
            keys.push(codec::decode(host::blob(page_keys, index)?)?);
            Ok(())
        })?;
        Ok(keys)
    }

    /// The values under `key` in the map of slot `slot`'s key, for every `(slot, key)` of
    /// `reads`, in one host call: the reads of a whole batch. Sends the queued writes first
    /// if some are to this map of one of those keys, as [`Self::get`] does. A value of an
    /// older version is migrated and written back, as [`Self::get`] does.
    pub(crate) fn get_many(&self, reads: &[(u32, K)]) -> Result<Vec<Option<V>>> {
        let values = batch::with_runtime(|runtime| {
            if reads
                .iter()
                .any(|(slot, _)| runtime.log.writes_to(self.id, *slot))
            {
                runtime.log.flush(runtime.host.as_mut())?;
            }
            let mut slots = Vec::with_capacity(reads.len() * 4);
            let mut keys = Blobs {
                data: Vec::with_capacity(reads.len() * 8),
                ends: Vec::with_capacity(reads.len() * 4),
            };
            for (slot, key) in reads {
                slots.extend_from_slice(&slot.to_le_bytes());
                codec::encode_into(key, &mut keys.data)?;
                keys.ends
                    .extend_from_slice(&(keys.data.len() as u32).to_le_bytes());
            }
            runtime
                .host
                .map_get_many(self.id, &slots, &keys)
                .map_err(|e| Error::new(format!("reading: {e}")))
        })
        .map_err(|e| e.context(format_args!("map state `{}`", self.name)))?;
        if host::blob_count(&values.items)? != reads.len() || values.present.len() != reads.len() {
            return Err(Error::new(format!(
                "map state `{}`: malformed reply from the host: not one value per read",
                self.name
            )));
        }
        let mut found = Vec::with_capacity(reads.len());
        for (index, (slot, key)) in reads.iter().enumerate() {
            if values.present[index] == 0 {
                found.push(None);
                continue;
            }
            let (value, migrated) = self.decode(host::blob(&values.items, index)?)?;
            if migrated {
                self.insert_at(*slot, key, &value)?;
            }
            found.push(Some(value));
        }
        Ok(found)
    }

    /// [`Self::insert`] into the map of slot `slot`'s key.
    fn insert_at(&self, slot: u32, key: &K, value: &V) -> Result<()> {
        self.write_at(
            slot,
            OpKind::MapPut,
            Some(&mut |data: &mut Vec<u8>| codec::encode_into(key, data)),
            Some(&mut |data: &mut Vec<u8>| {
                write_head(self.versioning.version, data);
                codec::encode_into(value, data)
            }),
        )
    }

    fn get_raw(runtime: &mut Runtime, id: StateId, slot: u32, key: &K) -> Result<Option<Vec<u8>>> {
        runtime.scratch.clear();
        codec::encode_into(key, &mut runtime.scratch)?;
        runtime
            .host
            .map_get(id, slot, &runtime.scratch)
            .map_err(|e| Error::new(format!("reading: {e}")))
    }

    /// Calls `item(keys, values, index)` for every entry, page by page.
    fn pages(&self, mut item: impl FnMut(&Blobs, &Blobs, usize) -> Result<()>) -> Result<()> {
        self.read(|runtime, slot| {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = runtime
                    .host
                    .map_entries(self.id, slot, after.as_deref(), PAGE)
                    .map_err(|e| Error::new(format!("reading entries: {e}")))?;
                let count = host::blob_count(&page.keys)?;
                let values = host::blob_count(&page.values)?;
                if values != count || count > PAGE as usize {
                    return Err(Error::new(format!(
                        "malformed reply from the host: {count} keys and {values} values for a \
                         page of {PAGE}"
                    )));
                }
                for index in 0..count {
                    item(&page.keys, &page.values, index)?;
                }
                if count < PAGE as usize {
                    return Ok(());
                }
                after = Some(host::blob(&page.keys, count - 1)?.to_vec());
            }
        })
    }

    /// Sends the queued writes if some are to this map of the record's key, then runs `f`
    /// with the key's slot.
    fn read<R>(&self, f: impl FnOnce(&mut Runtime, u32) -> Result<R>) -> Result<R> {
        let slot = batch::current_slot(&self.name)?;
        batch::with_runtime(|runtime| {
            runtime.flush_log_for(self.id, slot)?;
            f(runtime, slot)
        })
        .map_err(|e| e.context(format_args!("map state `{}`", self.name)))
    }

    fn write(
        &self,
        kind: OpKind,
        key: Option<WriteBytes<'_>>,
        value: Option<WriteBytes<'_>>,
    ) -> Result<()> {
        let slot = batch::current_slot(&self.name)?;
        self.write_at(slot, kind, key, value)
    }

    fn write_at(
        &self,
        slot: u32,
        kind: OpKind,
        key: Option<WriteBytes<'_>>,
        value: Option<WriteBytes<'_>>,
    ) -> Result<()> {
        batch::with_runtime(|runtime| runtime.log.push(kind, self.id, slot, key, value))
            .map_err(|e| e.context(format_args!("map state `{}`", self.name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::batch::{begin, set_current_slot};
    use crate::state::fake::FakeHost;

    #[test]
    fn reads_see_the_batch_own_writes() -> Result<()> {
        let host = FakeHost::install();
        let map = MapState::<String, u64>::declare("m")?;
        let scope = begin(2)?;
        set_current_slot(0);
        map.insert(&"a".to_owned(), &1)?;
        map.insert(&"b".to_owned(), &2)?;
        assert_eq!(host.calls().apply, 0, "writes are queued");
        assert_eq!(map.get(&"a".to_owned())?, Some(1));
        assert_eq!(
            host.calls().apply,
            1,
            "a read sends the queued writes first"
        );
        map.remove(&"a".to_owned())?;
        assert!(!map.contains_key(&"a".to_owned())?);
        assert_eq!(map.entries()?, [("b".to_owned(), 2)]);
        assert_eq!(
            host.calls().apply,
            2,
            "nothing new to send before `entries`"
        );
        map.insert(&"c".to_owned(), &3)?;
        assert_eq!(map.len()?, 2, "b and c, with the queued write");
        assert_eq!((host.calls().apply, host.calls().map_size), (3, 1));

        map.insert(&"d".to_owned(), &4)?;
        set_current_slot(1);
        assert_eq!(map.keys()?, Vec::<String>::new(), "maps are per key");
        assert_eq!(
            host.calls().apply,
            3,
            "the queued write is to another key's map: it waits"
        );
        assert!(map.is_empty()?);
        map.insert(&"z".to_owned(), &26)?;
        map.clear()?;
        scope.finish()?;
        assert!(!host.0.borrow().maps.contains_key(&(0, 1)));
        assert_eq!(host.0.borrow().maps[&(0, 0)].len(), 3, "b, c and d");
        Ok(())
    }

    #[test]
    fn entries_pages_through_large_maps() -> Result<()> {
        let host = FakeHost::install();
        let map = MapState::<u32, u32>::declare("big")?;
        let scope = begin(1)?;
        set_current_slot(0);
        for i in 0..2500 {
            map.insert(&i, &(i * 2))?;
        }
        let entries = map.entries()?;
        assert_eq!(entries.len(), 2500);
        assert!(
            entries
                .iter()
                .enumerate()
                .all(|(i, &(k, v))| k == i as u32 && v == k * 2)
        );
        assert_eq!(host.calls().map_entries, 3);
        assert_eq!(map.keys()?.len(), 2500);
        scope.finish()
    }

    #[test]
    fn keyless_records_are_errors() -> Result<()> {
        FakeHost::install();
        let map = MapState::<String, u64>::declare("m")?;
        let scope = begin(0)?;
        set_current_slot(batch::NO_SLOT);
        assert!(map.insert(&"a".into(), &1).is_err());
        assert!(
            map.get(&"a".into())
                .is_err_and(|e| e.message().contains("keyed record"))
        );
        scope.finish()
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Seen {
        total: u64,
        last_seen: String,
    }

    #[derive(serde::Deserialize)]
    struct SeenV1 {
        count: u64,
    }

    fn seen_from_v1(_from: u32, old: crate::state::version::OldValue<'_>) -> Result<Seen> {
        let v1: SeenV1 = old.decode()?;
        Ok(Seen {
            total: v1.count,
            last_seen: String::new(),
        })
    }

    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct CountV1 {
        count: u64,
    }

    #[test]
    fn a_versioned_map_migrates_older_values_as_it_reads_them_and_writes_them_back() -> Result<()> {
        let host = FakeHost::install();
        let old = MapState::<String, CountV1>::declare("m")?;
        let scope = begin(1)?;
        set_current_slot(0);
        old.insert(&"a".to_owned(), &CountV1 { count: 3 })?;
        old.insert(&"b".to_owned(), &CountV1 { count: 5 })?;
        assert_eq!(old.len()?, 2, "a read sends the writes");
        drop(scope);

        let map = MapState::<String, Seen>::declare_versioned("m", 2, Some(seen_from_v1))?;
        let _scope = begin(1)?;
        set_current_slot(0);
        let a = Seen {
            total: 3,
            last_seen: String::new(),
        };
        assert_eq!(map.get(&"a".to_owned())?, Some(a.clone()));
        let entries = map.entries()?;
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].1.total, 5);
        // Both were written back in version 2: a map of version 1 can no longer read them,
        // and reading them again migrates nothing.
        let applied = host.calls().apply;
        assert_eq!(map.get(&"a".to_owned())?, Some(a));
        assert_eq!(
            host.calls().apply,
            applied + 1,
            "the write-back of `entries` was sent"
        );
        let e = old.get(&"a".to_owned()).expect_err("newer than version 1");
        assert!(e.to_string().contains("version 2, newer"), "{e}");
        Ok(())
    }
}
