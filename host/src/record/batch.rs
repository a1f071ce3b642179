//! [`RecordBatch`]: the host's form of the WIT `batch` record.
//!
//! The layout is the WIT one (see `wit/operator.wit`): all keys and values back to back in one
//! buffer, plus per-record end offsets, flags and timestamps. A batch moves into a guest call
//! by moving its vectors, with no per-record work. Two more columns stay in the host, the
//! guest never sees them: each record's [`KeyHash`], computed once where the record is
//! routed, and each record's origin (its place in the source's input), set by the source and
//! kept until a guest's output replaces the records, so that an operator failing on a record
//! straight from the source can say where it came from.

use super::Numbers;
use crate::bindings::weir::operator::types::Batch;
use crate::partition::KeyHash;

/// Bit 0 of a record's flags: the record has a key.
pub const FLAG_HAS_KEY: u8 = 1;
/// Bit 1 of a record's flags: the record has a timestamp.
pub const FLAG_HAS_TIMESTAMP: u8 = 2;

/// A batch of records in flat columns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordBatch {
    data: Vec<u8>,
    key_ends: Numbers<u32>,
    value_ends: Numbers<u32>,
    flags: Vec<u8>,
    timestamps: Numbers<i64>,
    /// Key hashes, one per record, when the batch went through a keyed edge; empty otherwise.
    hashes: Vec<KeyHash>,
    /// Origins, one per record, when the records came from the source (see
    /// [`crate::connectors::SourceOrigin`]); empty otherwise.
    origins: Vec<u64>,
}

/// The columns of a batch that stay in the host while its records are lent to a guest.
#[derive(Debug, Default)]
pub struct HostColumns {
    hashes: Vec<KeyHash>,
    origins: Vec<u64>,
}

impl HostColumns {
    /// The records' key hashes (empty if the batch came through no keyed edge).
    pub fn hashes(&self) -> &[KeyHash] {
        &self.hashes
    }
}

/// One record of a batch, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
    pub timestamp: Option<i64>,
}

impl<'a> RecordRef<'a> {
    pub fn keyed(key: &'a [u8], value: &'a [u8]) -> Self {
        Self {
            key: Some(key),
            value,
            timestamp: None,
        }
    }

    pub fn unkeyed(value: &'a [u8]) -> Self {
        Self {
            key: None,
            value,
            timestamp: None,
        }
    }
}

impl RecordBatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(records: usize, bytes: usize) -> Self {
        Self {
            data: Vec::with_capacity(bytes),
            key_ends: Numbers::with_capacity(records),
            value_ends: Numbers::with_capacity(records),
            flags: Vec::with_capacity(records),
            timestamps: Numbers::with_capacity(records),
            hashes: Vec::new(),
            origins: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.flags.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    /// The latest timestamp of the batch's records, if any has one.
    pub fn max_timestamp(&self) -> Option<i64> {
        self.flags
            .iter()
            .zip(self.timestamps.iter())
            .filter(|(f, _)| **f & FLAG_HAS_TIMESTAMP != 0)
            .map(|(_, t)| t)
            .max()
    }

    /// Records with a timestamp at or before `watermark`: late ones, behind a watermark.
    pub fn count_at_or_before(&self, watermark: i64) -> usize {
        self.flags
            .iter()
            .zip(self.timestamps.iter())
            .filter(|(f, t)| **f & FLAG_HAS_TIMESTAMP != 0 && *t <= watermark)
            .count()
    }

    /// Bytes of keys and values held.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// Appends a record.
    ///
    /// # Panics
    /// If the batch would exceed 4 GiB of data, which the producers' batch size limits rule out.
    #[inline]
    pub fn push(&mut self, record: RecordRef<'_>) {
        self.push_parts(record, None);
    }

    /// Appends a record whose key hash is already known (keyed edges).
    #[inline]
    pub fn push_hashed(&mut self, record: RecordRef<'_>, hash: KeyHash) {
        self.push_parts(record, Some(hash));
    }

    /// Appends a record read by a source at `origin` in its input. A batch holds either no
    /// origins or one per record.
    #[inline]
    pub fn push_from_source(&mut self, record: RecordRef<'_>, origin: u64) {
        self.push_parts(record, None);
        self.origins.push(origin);
    }

    /// Appends record `index` of `from` with its key hash, and its origin if `from` has them.
    #[inline]
    pub fn push_routed(
        &mut self,
        from: &RecordBatch,
        index: usize,
        record: RecordRef<'_>,
        hash: KeyHash,
    ) {
        self.push_parts(record, Some(hash));
        if let Some(&origin) = from.origins.get(index) {
            self.origins.push(origin);
        }
    }

    #[inline]
    fn push_parts(&mut self, record: RecordRef<'_>, hash: Option<KeyHash>) {
        let mut flags = 0;
        if let Some(key) = record.key {
            self.data.extend_from_slice(key);
            flags |= FLAG_HAS_KEY;
        }
        self.key_ends.push(offset(self.data.len()));
        self.data.extend_from_slice(record.value);
        self.value_ends.push(offset(self.data.len()));
        if record.timestamp.is_some() {
            flags |= FLAG_HAS_TIMESTAMP;
        }
        self.flags.push(flags);
        self.timestamps.push(record.timestamp.unwrap_or(0));
        if let Some(hash) = hash {
            self.hashes.push(hash);
        }
    }

    /// The record at `index`; `index < len()`.
    #[inline]
    pub fn get(&self, index: usize) -> RecordRef<'_> {
        let start = if index == 0 {
            0
        } else {
            self.value_ends.get(index - 1) as usize
        };
        let key_end = self.key_ends.get(index) as usize;
        let value_end = self.value_ends.get(index) as usize;
        let flags = self.flags[index];
        RecordRef {
            key: (flags & FLAG_HAS_KEY != 0).then(|| &self.data[start..key_end]),
            value: &self.data[key_end..value_end],
            timestamp: (flags & FLAG_HAS_TIMESTAMP != 0).then(|| self.timestamps.get(index)),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = RecordRef<'_>> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The key hashes of a batch that went through a keyed edge (one per record), else empty.
    pub fn hashes(&self) -> &[KeyHash] {
        &self.hashes
    }

    /// Where record `index` came from in the source's input, if the batch came from the source.
    pub fn origin(&self, index: usize) -> Option<u64> {
        self.origins.get(index).copied()
    }

    /// Appends record `index` of `from` with its key hash and origin, if `from` has them.
    #[inline]
    pub fn push_from(&mut self, from: &RecordBatch, index: usize) {
        self.push_parts(from.get(index), from.hashes.get(index).copied());
        if let Some(&origin) = from.origins.get(index) {
            self.origins.push(origin);
        }
    }

    /// The batch without record `index` (hashes and origins kept in step).
    pub fn without(&self, index: usize) -> RecordBatch {
        let mut out = RecordBatch::with_capacity(self.len(), self.data.len());
        for i in (0..self.len()).filter(|&i| i != index) {
            out.push_from(self, i);
        }
        out
    }

    /// Attaches the key hashes of the records (one per record), computed by a keyed edge.
    pub fn set_hashes(&mut self, hashes: Vec<KeyHash>) {
        debug_assert_eq!(hashes.len(), self.len());
        self.hashes = hashes;
    }

    /// Empties the batch, keeping its allocations.
    pub fn clear(&mut self) {
        self.data.clear();
        self.key_ends.clear();
        self.value_ends.clear();
        self.flags.clear();
        self.timestamps.clear();
        self.hashes.clear();
        self.origins.clear();
    }

    /// Checks that a batch built by a guest is well formed: equal column lengths and offsets
    /// that stay inside the data and never go backwards. The error says what is wrong, about
    /// which record.
    pub fn validate(&self) -> Result<(), String> {
        let columns = [
            ("key ends", self.key_ends.as_bytes().len(), 4),
            ("value ends", self.value_ends.as_bytes().len(), 4),
            ("timestamps", self.timestamps.as_bytes().len(), 8),
        ];
        for (column, bytes, size) in columns {
            if !bytes.is_multiple_of(size) {
                return Err(format!(
                    "its {column} are {bytes} bytes, not a whole number of {size}-byte items"
                ));
            }
        }
        let n = self.value_ends.len();
        if self.key_ends.len() != n || self.flags.len() != n || self.timestamps.len() != n {
            return Err(format!(
                "its columns differ in length: {} key ends, {} value ends, {} flags, {} timestamps",
                self.key_ends.len(),
                n,
                self.flags.len(),
                self.timestamps.len()
            ));
        }
        let mut start = 0u32;
        for i in 0..n {
            let (k, v) = (self.key_ends.get(i), self.value_ends.get(i));
            let len = self.data.len();
            if k < start {
                return Err(format!(
                    "record {i}: its key ends at byte {k}, before it starts at byte {start} \
                     (where record {} ends)",
                    i.saturating_sub(1)
                ));
            }
            if v < k {
                return Err(format!(
                    "record {i}: its value ends at byte {v}, before its key ends at byte {k}"
                ));
            }
            if v as usize > len {
                return Err(format!(
                    "record {i}: its value ends at byte {v}, past the {len} bytes of data"
                ));
            }
            start = v;
        }
        Ok(())
    }

    /// Splits into the WIT batch and the hash column (origins are dropped: a guest's output
    /// replaces its input's records).
    pub fn into_wit(self) -> (Batch, Vec<KeyHash>) {
        (
            Batch {
                data: self.data,
                key_ends: self.key_ends.into_bytes(),
                value_ends: self.value_ends.into_bytes(),
                flags: self.flags,
                timestamps: self.timestamps.into_bytes(),
            },
            self.hashes,
        )
    }

    /// Splits into the WIT batch, to lend to a guest call, and the columns the guest never
    /// sees; [`RecordBatch::returned`] puts them back together.
    pub fn lend(self) -> (Batch, HostColumns) {
        let columns = HostColumns {
            hashes: self.hashes,
            origins: self.origins,
        };
        let (batch, _) = Self {
            hashes: Vec::new(),
            origins: Vec::new(),
            ..self
        }
        .into_wit();
        (batch, columns)
    }

    /// The batch [`RecordBatch::lend`] lent, whole again.
    pub fn returned(batch: Batch, columns: HostColumns) -> Self {
        Self {
            hashes: columns.hashes,
            origins: columns.origins,
            ..Self::from_wit(batch)
        }
    }

    /// A batch produced by a guest; call [`RecordBatch::validate`] before reading it.
    pub fn from_wit(batch: Batch) -> Self {
        Self {
            data: batch.data,
            key_ends: Numbers::from_bytes(batch.key_ends),
            value_ends: Numbers::from_bytes(batch.value_ends),
            flags: batch.flags,
            timestamps: Numbers::from_bytes(batch.timestamps),
            hashes: Vec::new(),
            origins: Vec::new(),
        }
    }
}

#[inline]
fn offset(len: usize) -> u32 {
    // Producers cut batches far below 4 GiB; a larger one is a bug in the producer.
    u32::try_from(len).unwrap_or_else(|_| panic!("record batch exceeds 4 GiB ({len} bytes)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_records_with_and_without_keys_and_timestamps() {
        let mut batch = RecordBatch::new();
        batch.push(RecordRef::keyed(b"k1", b"v1"));
        batch.push(RecordRef::unkeyed(b"v2"));
        batch.push(RecordRef {
            key: Some(b""),
            value: b"",
            timestamp: Some(-5),
        });
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.get(0), RecordRef::keyed(b"k1", b"v1"));
        assert_eq!(batch.get(1), RecordRef::unkeyed(b"v2"));
        assert_eq!(batch.get(2).key, Some(&b""[..]));
        assert_eq!(batch.get(2).timestamp, Some(-5));
        batch.validate().expect("well formed");
        let (wit, _) = batch.clone().into_wit();
        assert_eq!(RecordBatch::from_wit(wit), batch);
    }

    #[test]
    fn validate_says_which_record_is_wrong_and_how() {
        let mut batch = RecordBatch::new();
        batch.push(RecordRef::keyed(b"k", b"v"));
        batch.push(RecordRef::keyed(b"k2", b"v2"));
        // Sets item `i` of a `u32s` column.
        fn set(column: &mut [u8], i: usize, value: u32) {
            column[4 * i..4 * i + 4].copy_from_slice(&value.to_le_bytes());
        }
        let broken = |edit: fn(&mut Batch)| {
            let (mut wit, _) = batch.clone().into_wit();
            edit(&mut wit);
            RecordBatch::from_wit(wit)
                .validate()
                .expect_err("malformed")
        };
        assert_eq!(
            broken(|b| set(&mut b.value_ends, 1, 99)),
            "record 1: its value ends at byte 99, past the 6 bytes of data"
        );
        assert_eq!(
            broken(|b| set(&mut b.key_ends, 0, 3)),
            "record 0: its value ends at byte 2, before its key ends at byte 3"
        );
        assert_eq!(
            broken(|b| set(&mut b.key_ends, 1, 1)),
            "record 1: its key ends at byte 1, before it starts at byte 2 (where record 0 ends)"
        );
        assert_eq!(
            broken(|b| b.flags.push(0)),
            "its columns differ in length: 2 key ends, 2 value ends, 3 flags, 2 timestamps"
        );
        assert_eq!(
            broken(|b| b.timestamps.pop().map_or((), drop)),
            "its timestamps are 15 bytes, not a whole number of 8-byte items"
        );
    }

    #[test]
    fn without_drops_one_record_and_keeps_hashes_and_origins_in_step() {
        let mut source = RecordBatch::new();
        for (i, word) in ["a", "b", "c"].iter().enumerate() {
            source.push_from_source(RecordRef::keyed(word.as_bytes(), b"v"), 10 + i as u64);
        }
        let mut routed = RecordBatch::new();
        for (i, record) in source.iter().enumerate() {
            routed.push_routed(&source, i, record, KeyHash(i as u64));
        }
        let rest = routed.without(1);
        assert_eq!(rest.len(), 2);
        assert_eq!(rest.get(1).key, Some(&b"c"[..]));
        assert_eq!(rest.hashes(), &[KeyHash(0), KeyHash(2)]);
        assert_eq!((rest.origin(0), rest.origin(1)), (Some(10), Some(12)));
        assert_eq!(RecordBatch::from_wit(rest.into_wit().0).origin(0), None);
    }

    #[test]
    fn a_lent_batch_comes_back_whole() {
        let mut batch = RecordBatch::new();
        batch.push_from_source(RecordRef::keyed(b"k", b"v"), 7);
        let mut routed = RecordBatch::new();
        routed.push_routed(&batch, 0, batch.get(0), KeyHash(3));
        let (wit, columns) = routed.clone().lend();
        assert_eq!(columns.hashes(), &[KeyHash(3)]);
        assert_eq!(RecordBatch::returned(wit, columns), routed);
    }
}
