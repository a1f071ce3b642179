//! Line-oriented file sources: one record per line.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{ConnectorError, Source, SourceProgress};
use crate::record::{RecordBatch, RecordRef};

/// Reads lines of a file, without their line terminator.
struct LineReader {
    path: PathBuf,
    reader: BufReader<File>,
    line: Vec<u8>,
    /// 1-based number of the line in `line`.
    number: u64,
    progress: Arc<SourceProgress>,
}

impl LineReader {
    fn open(path: &Path) -> Result<Self, ConnectorError> {
        let io = |source| ConnectorError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let progress = Arc::new(SourceProgress::default());
        progress
            .total
            .store(file.metadata().map_err(io)?.len(), Ordering::Relaxed);
        Ok(Self {
            path: path.to_owned(),
            reader: BufReader::with_capacity(256 << 10, file),
            line: Vec::new(),
            number: 0,
            progress,
        })
    }

    /// The next line, or `None` at the end of the file.
    fn next_line(&mut self) -> Result<Option<&[u8]>, ConnectorError> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|source| ConnectorError::Io {
                path: self.path.clone(),
                source,
            })?;
        if n == 0 {
            return Ok(None);
        }
        self.number += 1;
        self.progress.done.fetch_add(n as u64, Ordering::Relaxed);
        let mut end = self.line.len();
        if self.line[..end].ends_with(b"\n") {
            end -= 1;
        }
        if self.line[..end].ends_with(b"\r") {
            end -= 1;
        }
        Ok(Some(&self.line[..end]))
    }
}

/// A text file, one record per line: no key, the line as value.
pub struct TextLinesSource {
    lines: LineReader,
}

impl TextLinesSource {
    pub fn open(path: &Path) -> Result<Self, ConnectorError> {
        Ok(Self {
            lines: LineReader::open(path)?,
        })
    }
}

impl Source for TextLinesSource {
    fn read_batch(&mut self, max: usize, out: &mut RecordBatch) -> Result<bool, ConnectorError> {
        for _ in 0..max {
            match self.lines.next_line()? {
                Some(line) => out.push(RecordRef::unkeyed(line)),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    fn progress(&self) -> Arc<SourceProgress> {
        self.lines.progress.clone()
    }
}

/// A JSON-lines file: one JSON value per line (blank lines skipped), the line as value, and
/// optionally the value at a JSON pointer as key (strings by their text, other values by
/// their JSON form).
pub struct JsonLinesSource {
    lines: LineReader,
    key_pointer: Option<String>,
    key: Vec<u8>,
}

impl JsonLinesSource {
    pub fn open(path: &Path, key_pointer: Option<String>) -> Result<Self, ConnectorError> {
        Ok(Self {
            lines: LineReader::open(path)?,
            key_pointer,
            key: Vec::new(),
        })
    }
}

/// Writes the key form of a JSON value: a string's text, or any other value's JSON text.
pub(crate) fn json_key(value: &serde_json::Value, out: &mut Vec<u8>) {
    out.clear();
    match value {
        serde_json::Value::String(s) => out.extend_from_slice(s.as_bytes()),
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

impl Source for JsonLinesSource {
    fn read_batch(&mut self, max: usize, out: &mut RecordBatch) -> Result<bool, ConnectorError> {
        let mut read = 0;
        while read < max {
            let number = self.lines.number + 1;
            let path = self.lines.path.clone();
            let Some(line) = self.lines.next_line()? else {
                return Ok(false);
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let bad = |message: String| ConnectorError::BadRecord {
                path: path.clone(),
                line: number,
                message,
            };
            let value: serde_json::Value =
                serde_json::from_slice(line).map_err(|e| bad(format!("not valid JSON: {e}")))?;
            match &self.key_pointer {
                Some(pointer) => {
                    let key = value
                        .pointer(pointer)
                        .ok_or_else(|| bad(format!("no value at key_pointer {pointer:?}")))?;
                    json_key(key, &mut self.key);
                    out.push(RecordRef::keyed(&self.key, line));
                }
                None => out.push(RecordRef::unkeyed(line)),
            }
            read += 1;
        }
        Ok(true)
    }

    fn progress(&self) -> Arc<SourceProgress> {
        self.lines.progress.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as owned (key, value).
    type Owned = (Option<Vec<u8>>, Vec<u8>);

    fn read_all(source: &mut dyn Source) -> Result<Vec<Owned>, ConnectorError> {
        let mut batch = RecordBatch::new();
        while source.read_batch(2, &mut batch)? {}
        Ok(batch
            .iter()
            .map(|r| (r.key.map(<[u8]>::to_vec), r.value.to_vec()))
            .collect())
    }

    #[test]
    fn text_lines_strip_terminators_and_keep_empty_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("in.txt");
        std::fs::write(&path, "a b\r\n\nlast").expect("write");
        let records = read_all(&mut TextLinesSource::open(&path).expect("open")).expect("read");
        let values: Vec<_> = records.iter().map(|(_, v)| v.as_slice()).collect();
        assert_eq!(values, vec![&b"a b"[..], b"", b"last"]);
        assert!(records.iter().all(|(k, _)| k.is_none()));
    }

    #[test]
    fn json_lines_take_keys_from_a_pointer_and_report_bad_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"u\":\"ann\"}\n\n{\"u\":7}\n").expect("write");
        let mut source = JsonLinesSource::open(&path, Some("/u".into())).expect("open");
        let records = read_all(&mut source).expect("read");
        assert_eq!(records[0].0.as_deref(), Some(&b"ann"[..]));
        assert_eq!(records[1].0.as_deref(), Some(&b"7"[..]));
        std::fs::write(&path, "{\"u\":1}\n{oops\n").expect("write");
        let err =
            read_all(&mut JsonLinesSource::open(&path, None).expect("open")).expect_err("bad");
        assert!(err.to_string().contains("line 2: not valid JSON"), "{err}");
    }
}
