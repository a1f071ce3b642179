//! Input records, read straight out of the flat columns of a WIT `batch`.

use serde::de::DeserializeOwned;

use crate::bindings::weir::operator::types::Batch;
use crate::numbers::{S64s, U32s};
use crate::{Error, Result};

/// Bit 0 of a record's flags: the record has a key.
pub(crate) const HAS_KEY: u8 = 1;
/// Bit 1 of a record's flags: the record has a timestamp.
pub(crate) const HAS_TIMESTAMP: u8 = 2;

/// One record, borrowed from the batch being processed.
///
/// The key and value are slices of the batch's buffer: reading a record allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record<'a> {
    /// The record's key, if it has one (an empty key is still a key).
    pub key: Option<&'a [u8]>,
    /// The record's value.
    pub value: &'a [u8],
    /// Event time in milliseconds since the Unix epoch, if the record has one.
    pub timestamp: Option<i64>,
}

impl<'a> Record<'a> {
    /// The key as UTF-8 text, `None` if the record has no key.
    pub fn key_str(&self) -> Result<Option<&'a str>> {
        self.key
            .map(|key| {
                std::str::from_utf8(key)
                    .map_err(|e| Error::new(format!("record key is not UTF-8: {e}")))
            })
            .transpose()
    }

    /// The value as UTF-8 text.
    pub fn value_str(&self) -> Result<&'a str> {
        std::str::from_utf8(self.value)
            .map_err(|e| Error::new(format!("record value is not UTF-8: {e}")))
    }

    /// The value parsed as JSON.
    pub fn value_json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(self.value).map_err(|e| {
            Error::new(format!(
                "record value is not valid JSON for the expected type: {e}"
            ))
        })
    }
}

/// The records of a batch, in order, validated against the batch's own offsets.
///
/// A malformed batch (columns of different lengths or with a partial item, offsets out of
/// order or past the data) yields an error instead of a panic: it is a host bug, and the job
/// should fail with a message. The number columns are read in place, not copied.
pub(crate) struct BatchRecords<'a> {
    data: &'a [u8],
    key_ends: U32s<'a>,
    value_ends: U32s<'a>,
    flags: &'a [u8],
    timestamps: S64s<'a>,
    next: usize,
    start: usize,
}

impl<'a> BatchRecords<'a> {
    pub(crate) fn new(batch: &'a Batch) -> Result<Self> {
        let malformed = |error: Error| error.context("malformed batch");
        let key_ends = U32s::new(&batch.key_ends, "key ends").map_err(malformed)?;
        let value_ends = U32s::new(&batch.value_ends, "value ends").map_err(malformed)?;
        let timestamps = S64s::new(&batch.timestamps, "timestamps").map_err(malformed)?;
        let len = key_ends.len();
        if value_ends.len() != len || batch.flags.len() != len || timestamps.len() != len {
            return Err(Error::new(format!(
                "malformed batch: {len} key ends, {} value ends, {} flags, {} timestamps",
                value_ends.len(),
                batch.flags.len(),
                timestamps.len()
            )));
        }
        Ok(Self {
            data: &batch.data,
            key_ends,
            value_ends,
            flags: &batch.flags,
            timestamps,
            next: 0,
            start: 0,
        })
    }

    /// How many records the batch holds.
    pub(crate) fn len(&self) -> usize {
        self.flags.len()
    }

    fn record(&mut self, index: usize) -> Result<Record<'a>> {
        // `new` checked that every column has `len()` items, so none of these is `None`.
        let (Some(key_end), Some(value_end), Some(&flags), Some(timestamp)) = (
            self.key_ends.get(index),
            self.value_ends.get(index),
            self.flags.get(index),
            self.timestamps.get(index),
        ) else {
            return Err(Error::new(format!(
                "malformed batch: no record {index} in its columns"
            )));
        };
        let (key_end, value_end) = (key_end as usize, value_end as usize);
        let (Some(key), Some(value)) = (
            self.data.get(self.start..key_end),
            self.data.get(key_end..value_end),
        ) else {
            return Err(Error::new(format!(
                "malformed batch: record {index} spans {}..{key_end}..{value_end} of {} bytes",
                self.start,
                self.data.len()
            )));
        };
        self.start = value_end;
        Ok(Record {
            key: (flags & HAS_KEY != 0).then_some(key),
            value,
            timestamp: (flags & HAS_TIMESTAMP != 0).then_some(timestamp),
        })
    }
}

impl<'a> Iterator for BatchRecords<'a> {
    type Item = Result<Record<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let index = self.next;
        (index < self.len()).then(|| {
            self.next += 1;
            self.record(index)
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.len() - self.next;
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::column;

    fn batch() -> Batch {
        // "k1" -> "v1" with ts 5, no key -> "", "" (empty key) -> "xyz"
        Batch {
            data: b"k1v1xyz".to_vec(),
            key_ends: column([2u32, 4, 4]),
            value_ends: column([4u32, 4, 7]),
            flags: vec![HAS_KEY | HAS_TIMESTAMP, 0, HAS_KEY],
            timestamps: column([5i64, 0, 0]),
        }
    }

    #[test]
    fn iterates_keys_values_and_timestamps_in_place() -> Result<()> {
        let batch = batch();
        let records = BatchRecords::new(&batch)?.collect::<Result<Vec<_>>>()?;
        assert_eq!(
            records,
            [
                Record {
                    key: Some(b"k1"),
                    value: b"v1",
                    timestamp: Some(5)
                },
                Record {
                    key: None,
                    value: b"",
                    timestamp: None
                },
                Record {
                    key: Some(b""),
                    value: b"xyz",
                    timestamp: None
                },
            ]
        );
        assert_eq!(
            records[0].key.map(<[u8]>::as_ptr),
            Some(batch.data.as_ptr())
        );
        Ok(())
    }

    #[test]
    fn rejects_malformed_batches() -> Result<()> {
        let mut short = batch();
        short.flags.pop();
        assert!(BatchRecords::new(&short).is_err());

        let mut past_end = batch();
        past_end.value_ends = column([4u32, 4, 8]);
        let results: Vec<_> = BatchRecords::new(&past_end)?.collect();
        assert!(results[..2].iter().all(Result::is_ok));
        assert!(
            results[2]
                .as_ref()
                .is_err_and(|e| e.message().contains("malformed batch"))
        );

        let mut backwards = batch();
        backwards.key_ends = column([3u32, 4, 4]);
        backwards.value_ends = column([1u32, 4, 7]);
        assert!(
            BatchRecords::new(&backwards)?
                .next()
                .is_some_and(|r| r.is_err())
        );
        Ok(())
    }

    #[test]
    fn a_column_with_a_partial_item_is_a_malformed_batch() {
        let error = |edit: fn(&mut Batch)| {
            let mut batch = batch();
            edit(&mut batch);
            BatchRecords::new(&batch)
                .err()
                .map(|e| e.message().to_owned())
        };
        assert_eq!(
            error(|b| {
                b.key_ends.pop();
            })
            .as_deref(),
            Some("malformed batch: its key ends are 11 bytes, not a whole number of 4-byte items")
        );
        assert_eq!(
            error(|b| b.value_ends.push(0)).as_deref(),
            Some(
                "malformed batch: its value ends are 13 bytes, not a whole number of 4-byte items"
            )
        );
        assert_eq!(
            error(|b| b.timestamps.truncate(20)).as_deref(),
            Some(
                "malformed batch: its timestamps are 20 bytes, not a whole number of 8-byte items"
            )
        );
        // A whole item too many or too few is a length mismatch.
        assert!(error(|b| b.timestamps.truncate(16)).is_some_and(|e| e.contains("2 timestamps")));
    }

    #[test]
    fn helpers_decode_text_and_json() -> Result<()> {
        let record = Record {
            key: Some(b"w"),
            value: br#"{"n": 3}"#,
            timestamp: None,
        };
        assert_eq!(record.key_str()?, Some("w"));
        assert_eq!(record.value_str()?, r#"{"n": 3}"#);
        let value: serde_json::Value = record.value_json()?;
        assert_eq!(value["n"], 3);
        let keyless = Record {
            key: None,
            value: &[0xff],
            timestamp: None,
        };
        assert_eq!(keyless.key_str()?, None);
        assert!(keyless.value_str().is_err());
        assert!(keyless.value_json::<u32>().is_err());
        Ok(())
    }
}
