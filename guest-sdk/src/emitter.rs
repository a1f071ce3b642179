//! Output records, appended to flat buffers laid out exactly as the WIT `batch`.

use std::fmt;

use serde::Serialize;

use crate::bindings::weir::operator::types::Batch;
use crate::numbers::{Number, S64s, U32s};
use crate::record::{HAS_KEY, HAS_TIMESTAMP};
use crate::{Error, Record, Result};

/// Where an operator writes its output records.
///
/// Records are appended to the five columns of the WIT `batch` as they are emitted (the number
/// columns as the little-endian bytes the WIT carries), and the columns are handed to the host
/// as they are when the call returns: emitting copies the key and value once and allocates
/// nothing in the steady state (the buffers of the next batch are allocated once, with the
/// sizes of the last one).
///
/// Output records are returned in emit order. If `process` or `close` returns an error, the
/// records emitted during that call are discarded.
#[derive(Debug, Default)]
pub struct Emitter {
    data: Vec<u8>,
    /// `u32s`: where each record's key ends in `data`.
    key_ends: Vec<u8>,
    /// `u32s`: where each record's value ends in `data`.
    value_ends: Vec<u8>,
    /// One byte per record: its `HAS_KEY` and `HAS_TIMESTAMP` bits.
    flags: Vec<u8>,
    /// `s64s`: each record's timestamp, 0 where it has none.
    timestamps: Vec<u8>,
    /// Set when `data` outgrew the `u32` offsets of the WIT batch; reported by `take_batch`.
    overflowed: bool,
}

impl Emitter {
    /// An empty emitter. Operators receive theirs from the SDK; this is for native tests.
    pub fn new() -> Self {
        Self::default()
    }

    /// Emits a record without timestamp.
    pub fn emit(&mut self, key: Option<&[u8]>, value: &[u8]) {
        self.emit_with_timestamp(key, value, None);
    }

    /// Emits a record with an optional timestamp (milliseconds since the Unix epoch).
    pub fn emit_with_timestamp(
        &mut self,
        key: Option<&[u8]>,
        value: &[u8],
        timestamp: Option<i64>,
    ) {
        self.begin(key);
        self.data.extend_from_slice(value);
        self.end(key.is_some(), timestamp);
    }

    /// Emits a record whose value is `args` formatted straight into the output buffer, without
    /// an intermediate `String`: `out.emit_fmt(key, format_args!("{word}\t{count}"))`.
    ///
    /// Fails only if a `Display` (or other formatting) implementation returns an error; the
    /// record is then not emitted.
    pub fn emit_fmt(&mut self, key: Option<&[u8]>, args: fmt::Arguments<'_>) -> Result<()> {
        self.emit_with(key, None, |data| {
            fmt::Write::write_fmt(&mut ByteWriter(data), args)?;
            Ok(())
        })
    }

    /// Emits a record whose value is `value` serialized as JSON straight into the output buffer.
    pub fn emit_json<T: Serialize + ?Sized>(
        &mut self,
        key: Option<&[u8]>,
        value: &T,
    ) -> Result<()> {
        self.emit_with(key, None, |data| Ok(serde_json::to_writer(data, value)?))
    }

    /// Emits a record whose value `write` appends to the output buffer. If `write` fails, the
    /// record is not emitted and the buffer is as before.
    pub fn emit_with(
        &mut self,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        write: impl FnOnce(&mut Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        let (start, key_ends) = (self.data.len(), self.key_ends.len());
        self.begin(key);
        match write(&mut self.data) {
            Ok(()) => {
                self.end(key.is_some(), timestamp);
                Ok(())
            }
            Err(error) => {
                self.data.truncate(start);
                self.key_ends.truncate(key_ends);
                Err(error)
            }
        }
    }

    /// How many records were emitted since the last batch was taken.
    pub fn len(&self) -> usize {
        self.flags.len()
    }

    /// Whether no record was emitted since the last batch was taken.
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    /// The records emitted since the last batch was taken, in order.
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> + '_ {
        let mut start = 0;
        let key_ends = U32s::whole(&self.key_ends).iter();
        let value_ends = U32s::whole(&self.value_ends).iter();
        let timestamps = S64s::whole(&self.timestamps).iter();
        key_ends
            .zip(value_ends)
            .zip(&self.flags)
            .zip(timestamps)
            .map(move |(((key_end, value_end), &flags), timestamp)| {
                // Offsets were written by `begin`/`end` in increasing order within `data`.
                let (key_end, value_end) = (key_end as usize, value_end as usize);
                let record = Record {
                    key: (flags & HAS_KEY != 0).then(|| &self.data[start..key_end]),
                    value: &self.data[key_end..value_end],
                    timestamp: (flags & HAS_TIMESTAMP != 0).then_some(timestamp),
                };
                start = value_end;
                record
            })
    }

    /// Writes the key and records where it ends.
    fn begin(&mut self, key: Option<&[u8]>) {
        if let Some(key) = key {
            self.data.extend_from_slice(key);
        }
        let key_end = self.offset();
        key_end.push_le(&mut self.key_ends);
    }

    /// Records where the value ends and the record's flags and timestamp.
    fn end(&mut self, has_key: bool, timestamp: Option<i64>) {
        let value_end = self.offset();
        value_end.push_le(&mut self.value_ends);
        let mut flags = if has_key { HAS_KEY } else { 0 };
        if timestamp.is_some() {
            flags |= HAS_TIMESTAMP;
        }
        self.flags.push(flags);
        timestamp.unwrap_or(0).push_le(&mut self.timestamps);
    }

    fn offset(&mut self) -> u32 {
        u32::try_from(self.data.len()).unwrap_or_else(|_| {
            self.overflowed = true;
            u32::MAX
        })
    }

    /// Hands the emitted records over as a WIT batch and starts a new one, with buffers of the
    /// same capacities as this one's lengths so that the next batch does not grow them.
    pub(crate) fn take_batch(&mut self) -> Result<Batch> {
        if self.overflowed {
            self.discard();
            return Err(Error::new(
                "the records emitted in one call exceed 4 GiB; emit less per batch",
            ));
        }
        let batch = Batch {
            data: take_sized(&mut self.data),
            key_ends: take_sized(&mut self.key_ends),
            value_ends: take_sized(&mut self.value_ends),
            flags: take_sized(&mut self.flags),
            timestamps: take_sized(&mut self.timestamps),
        };
        Ok(batch)
    }

    /// Drops the records emitted since the last batch was taken, keeping the buffers.
    pub(crate) fn discard(&mut self) {
        self.data.clear();
        self.key_ends.clear();
        self.value_ends.clear();
        self.flags.clear();
        self.timestamps.clear();
        self.overflowed = false;
    }
}

/// Takes `buffer`, leaving an empty one with room for as many bytes as it held.
fn take_sized(buffer: &mut Vec<u8>) -> Vec<u8> {
    let len = buffer.len();
    std::mem::replace(buffer, Vec::with_capacity(len))
}

/// `fmt::Write` into a byte buffer (formatting output is always UTF-8).
struct ByteWriter<'a>(&'a mut Vec<u8>);

impl fmt::Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::items;
    use crate::record::BatchRecords;

    #[test]
    fn lays_records_out_as_the_wit_batch() -> Result<()> {
        let mut out = Emitter::new();
        out.emit(Some(b"k"), b"v1");
        out.emit(None, b"v2");
        out.emit_with_timestamp(Some(b""), b"", Some(-3));
        out.emit_fmt(Some(b"w"), format_args!("{}\t{}", "w", 42))?;
        out.emit_json(None, &serde_json::json!({"a": 1}))?;
        let batch = out.take_batch()?;
        assert_eq!(batch.data, b"kv1v2ww\t42{\"a\":1}");
        assert_eq!(items::<u32>(&batch.key_ends), [1, 3, 5, 6, 10]);
        assert_eq!(items::<u32>(&batch.value_ends), [3, 5, 5, 10, 17]);
        assert_eq!(
            batch.flags,
            [HAS_KEY, 0, HAS_KEY | HAS_TIMESTAMP, HAS_KEY, 0]
        );
        assert_eq!(items::<i64>(&batch.timestamps), [0, 0, -3, 0, 0]);
        assert_eq!((batch.key_ends.len(), batch.timestamps.len()), (20, 40));

        // What the emitter writes, the batch reader reads back.
        let read = BatchRecords::new(&batch)?.collect::<Result<Vec<_>>>()?;
        assert_eq!(
            read[2],
            Record {
                key: Some(b""),
                value: b"",
                timestamp: Some(-3)
            }
        );
        assert_eq!(read[3].value_str()?, "w\t42");
        Ok(())
    }

    #[test]
    fn records_reads_back_what_was_emitted() {
        let mut out = Emitter::new();
        out.emit(Some(b"a"), b"1");
        out.emit_with_timestamp(None, b"2", Some(9));
        let records: Vec<_> = out.records().collect();
        assert_eq!(
            records,
            [
                Record {
                    key: Some(b"a"),
                    value: b"1",
                    timestamp: None
                },
                Record {
                    key: None,
                    value: b"2",
                    timestamp: Some(9)
                },
            ]
        );
    }

    #[test]
    fn taking_a_batch_starts_an_empty_one_with_the_same_capacity() -> Result<()> {
        let mut out = Emitter::new();
        for i in 0..100 {
            out.emit(Some(b"key"), format!("value {i}").as_bytes());
        }
        let first = out.take_batch()?;
        assert!(out.is_empty());
        assert!(out.data.capacity() >= first.data.len());
        assert!(out.value_ends.capacity() >= 4 * 100);
        assert!(out.timestamps.capacity() >= 8 * 100);
        let data_ptr = out.data.as_ptr();
        for i in 0..100 {
            out.emit(Some(b"key"), format!("value {i}").as_bytes());
        }
        assert_eq!(
            out.data.as_ptr(),
            data_ptr,
            "the second batch of the same size must not grow"
        );
        Ok(())
    }

    #[test]
    fn a_failed_write_emits_nothing() {
        struct Failing;
        impl fmt::Display for Failing {
            fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
                Err(fmt::Error)
            }
        }
        let mut out = Emitter::new();
        out.emit(Some(b"k"), b"v");
        assert!(
            out.emit_fmt(Some(b"key"), format_args!("partial {}", Failing))
                .is_err()
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out.data, b"kv");
        assert_eq!(items::<u32>(&out.key_ends), [1]);
        assert_eq!(out.key_ends.len(), 4, "no partial item left behind");
    }

    #[test]
    fn discard_drops_everything_emitted() -> Result<()> {
        let mut out = Emitter::new();
        out.emit(Some(b"k"), b"v");
        out.discard();
        let batch = out.take_batch()?;
        assert!(batch.data.is_empty() && batch.key_ends.is_empty() && batch.timestamps.is_empty());
        Ok(())
    }
}
