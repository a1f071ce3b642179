//! Line-oriented file sources: one record per line.

use super::json_records::{Decoded, JsonDecoder};
use super::pace::Pace;
use super::timestamps::{TimestampPolicy, TimestampSpec};
use crate::clock;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::Deserialize;

use super::{ConnectorError, Rejected, Source, SourceOrigin, SourcePosition, SourceProgress};
use crate::record::{RecordBatch, RecordRef};

/// Reads lines of a file, without their line terminator.
struct LineReader {
    path: PathBuf,
    reader: BufReader<File>,
    line: Vec<u8>,
    /// 1-based number of the line in `line`: lines consumed so far.
    number: u64,
    /// Bytes consumed so far: where the next line starts.
    offset: u64,
    progress: Arc<SourceProgress>,
    /// At most so many lines per second; none: as fast as the file reads.
    pace: Option<Pace>,
}

/// The checkpointed position of a line source, `{"offset": .., "line": ..}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinePosition {
    offset: u64,
    line: u64,
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
            offset: 0,
            progress,
            pace: None,
        })
    }

    /// The number of the last line a batch of at most `max` records may read now: waits
    /// until a batch is due (`Pace::due`) when paced; no limit when not.
    fn last_due(&self, max: usize) -> u64 {
        match &self.pace {
            Some(pace) => self.number + pace.due(self.number, max) as u64,
            None => u64::MAX,
        }
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
        self.offset += n as u64;
        self.progress.done.store(self.offset, Ordering::Relaxed);
        let mut end = self.line.len();
        if self.line[..end].ends_with(b"\n") {
            end -= 1;
        }
        if self.line[..end].ends_with(b"\r") {
            end -= 1;
        }
        Ok(Some(&self.line[..end]))
    }

    fn position(&self) -> SourcePosition {
        serde_json::json!({ "offset": self.offset, "line": self.number })
    }

    /// Continues at a position from [`LineReader::position`]. The offset must be within the
    /// file and at the start of a line, which catches most inputs that changed since.
    fn seek(&mut self, position: &SourcePosition) -> Result<(), ConnectorError> {
        let bad = |message: String| ConnectorError::BadPosition {
            source_name: self.path.display().to_string(),
            message,
        };
        let LinePosition { offset, line } = LinePosition::deserialize(position)
            .map_err(|e| bad(format!("{position} is not a line position: {e}")))?;
        let io = |source| ConnectorError::Io {
            path: self.path.clone(),
            source,
        };
        let len = self.reader.get_ref().metadata().map_err(io)?.len();
        if offset > len {
            return Err(bad(format!(
                "offset {offset} is beyond the end of the file ({len} bytes)"
            )));
        }
        if line > offset {
            return Err(bad(format!(
                "{line} lines cannot end within {offset} bytes"
            )));
        }
        // Every line but the file's last ends in a newline, so the byte before a line start is
        // one (or the offset is 0, or the end of a file without a final newline).
        let start_of_line = if offset == 0 {
            self.reader.seek(SeekFrom::Start(0)).map_err(io)?;
            true
        } else {
            self.reader.seek(SeekFrom::Start(offset - 1)).map_err(io)?;
            let mut before = [0u8];
            self.reader.read_exact(&mut before).map_err(io)?;
            before[0] == b'\n' || offset == len
        };
        if !start_of_line {
            return Err(bad(format!(
                "offset {offset} is not at the start of a line"
            )));
        }
        self.number = line;
        self.offset = offset;
        if let Some(pace) = &mut self.pace {
            pace.restart(line);
        }
        self.progress.total.store(len, Ordering::Relaxed);
        self.progress.done.store(offset, Ordering::Relaxed);
        Ok(())
    }
}

/// A text file, one record per line: no key, the line as value, and the time it was read as
/// its timestamp (ingestion time).
pub struct TextLinesSource {
    lines: LineReader,
}

impl TextLinesSource {
    pub fn open(path: &Path) -> Result<Self, ConnectorError> {
        Ok(Self {
            lines: LineReader::open(path)?,
        })
    }

    /// The source reading at most `per_second` lines per second (`None`: no limit).
    pub fn paced(mut self, per_second: Option<u64>) -> Self {
        self.lines.pace = per_second.map(|per_second| Pace::new(per_second, self.lines.number));
        self
    }
}

impl Source for TextLinesSource {
    fn read_batch(&mut self, max: usize, out: &mut RecordBatch) -> Result<bool, ConnectorError> {
        let last = self.lines.last_due(max);
        let now = clock::now_ms();
        for _ in 0..max {
            if self.lines.number == last {
                break;
            }
            let number = self.lines.number + 1;
            match self.lines.next_line()? {
                Some(line) => {
                    let record = RecordRef {
                        timestamp: Some(now),
                        ..RecordRef::unkeyed(line)
                    };
                    out.push_from_source(record, number)
                }
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    fn position(&self) -> SourcePosition {
        self.lines.position()
    }

    fn seek(&mut self, position: &SourcePosition) -> Result<(), ConnectorError> {
        self.lines.seek(position)
    }

    fn progress(&self) -> Arc<SourceProgress> {
        self.lines.progress.clone()
    }

    fn origin(&self) -> SourceOrigin {
        SourceOrigin::Lines(self.lines.path.clone())
    }
}

/// A JSON-lines file: one JSON value per line (blank lines skipped), the line as value, and
/// optionally the value at a JSON pointer as key (strings by their text, other values by
/// their JSON form). A line that is not JSON, or has no value at the key pointer, fails the
/// source, or is set aside ([`Source::drain_rejected`]) when it was opened to set bad lines
/// aside.
pub struct JsonLinesSource {
    lines: LineReader,
    decoder: JsonDecoder,
    /// Lines dropped for want of a usable timestamp.
    skipped_for_timestamp: u64,
    /// Bad lines set aside since the last drain; `None`: a bad line fails the source.
    rejected: Option<Vec<Rejected>>,
}

impl JsonLinesSource {
    pub fn open(path: &Path, key_pointer: Option<String>) -> Result<Self, ConnectorError> {
        Ok(Self {
            lines: LineReader::open(path)?,
            decoder: JsonDecoder::new(key_pointer, None, TimestampPolicy::Fail),
            skipped_for_timestamp: 0,
            rejected: None,
        })
    }

    /// Reads each line's event time as `timestamp` says (none: records have no timestamp); a
    /// line without a usable one fails the source or is dropped, as `on_bad` says.
    pub fn with_timestamps(
        mut self,
        timestamp: Option<TimestampSpec>,
        on_bad: TimestampPolicy,
    ) -> Self {
        self.decoder.timestamp = timestamp;
        self.decoder.on_bad_timestamp = on_bad;
        self
    }

    /// Sets bad lines aside instead of failing.
    pub fn setting_bad_lines_aside(mut self) -> Self {
        self.rejected = Some(Vec::new());
        self
    }

    /// The source reading at most `per_second` lines per second (`None`: no limit); blank
    /// and set-aside lines count.
    pub fn paced(mut self, per_second: Option<u64>) -> Self {
        self.lines.pace = per_second.map(|per_second| Pace::new(per_second, self.lines.number));
        self
    }
}

impl Source for JsonLinesSource {
    fn read_batch(&mut self, max: usize, out: &mut RecordBatch) -> Result<bool, ConnectorError> {
        let mut read = 0;
        let last = self.lines.last_due(max);
        while read < max && self.lines.number < last {
            let number = self.lines.number + 1;
            let Some(line) = self.lines.next_line()? else {
                return Ok(false);
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let problem = match self.decoder.decode(line) {
                Decoded::Record { key, timestamp } => {
                    let record = RecordRef {
                        key,
                        value: line,
                        timestamp,
                    };
                    out.push_from_source(record, number);
                    read += 1;
                    continue;
                }
                Decoded::SkippedForTimestamp => {
                    self.skipped_for_timestamp += 1;
                    continue;
                }
                Decoded::Bad(problem) => problem,
                Decoded::Misconfigured(message) => {
                    return Err(ConnectorError::BadRecord {
                        path: self.lines.path.clone(),
                        line: number,
                        message,
                    });
                }
            };
            match &mut self.rejected {
                Some(rejected) => rejected.push(Rejected {
                    origin: number,
                    raw: line.to_vec(),
                    reason: problem,
                }),
                None => {
                    return Err(ConnectorError::BadRecord {
                        path: self.lines.path.clone(),
                        line: number,
                        message: problem,
                    });
                }
            }
        }
        Ok(true)
    }

    fn position(&self) -> SourcePosition {
        self.lines.position()
    }

    fn seek(&mut self, position: &SourcePosition) -> Result<(), ConnectorError> {
        self.lines.seek(position)
    }

    fn progress(&self) -> Arc<SourceProgress> {
        self.lines.progress.clone()
    }

    fn origin(&self) -> SourceOrigin {
        SourceOrigin::Lines(self.lines.path.clone())
    }

    fn drain_rejected(&mut self, into: &mut Vec<Rejected>) {
        if let Some(rejected) = &mut self.rejected {
            into.append(rejected);
        }
    }

    fn skipped_for_timestamp(&self) -> u64 {
        self.skipped_for_timestamp
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
    fn paced_line_sources_read_no_faster_than_their_pace_from_where_they_are_sought() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"k\": 1}\n".repeat(300)).expect("write");
        let sources: [Box<dyn Fn() -> Box<dyn Source>>; 2] = [
            Box::new(|| {
                Box::new(
                    TextLinesSource::open(&path)
                        .expect("open")
                        .paced(Some(2_000)),
                )
            }),
            Box::new(|| {
                Box::new(
                    JsonLinesSource::open(&path, Some("/k".into()))
                        .expect("open")
                        .paced(Some(2_000)),
                )
            }),
        ];
        for open in &sources {
            let started = std::time::Instant::now();
            assert_eq!(read_all(&mut *open()).expect("read").len(), 300);
            // Line 300 was due 150 ms after the first.
            assert!(started.elapsed() >= std::time::Duration::from_millis(149));

            // Sought to line 200: the last hundred at the pace, from then on.
            let mut source = open();
            let mut batch = RecordBatch::new();
            for _ in 0..100 {
                source.read_batch(2, &mut batch).expect("read");
            }
            let position = source.position();
            let mut resumed = open();
            let sought = std::time::Instant::now();
            resumed.seek(&position).expect("seek");
            assert_eq!(read_all(&mut *resumed).expect("read").len(), 100);
            assert!(sought.elapsed() >= std::time::Duration::from_millis(49));
        }
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

    #[test]
    fn json_lines_take_timestamps_and_fail_or_skip_lines_without_one() {
        use crate::connectors::timestamps::{TimestampFormat, TimestampPolicy, TimestampSpec};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"t\":5}\n{\"t\":\"x\"}\n{}\n{\"t\":7}\n").expect("write");
        let spec = TimestampSpec {
            json_pointer: "/t".into(),
            format: TimestampFormat::S,
        };
        let open = |policy| {
            JsonLinesSource::open(&path, None)
                .expect("open")
                .with_timestamps(Some(spec.clone()), policy)
        };
        let mut skipping = open(TimestampPolicy::Skip);
        let mut batch = RecordBatch::new();
        while skipping.read_batch(2, &mut batch).expect("read") {}
        let stamps: Vec<_> = batch.iter().map(|r| r.timestamp).collect();
        assert_eq!(stamps, [Some(5_000), Some(7_000)]);
        assert_eq!(skipping.skipped_for_timestamp(), 2);
        let err = read_all(&mut open(TimestampPolicy::Fail)).expect_err("fails");
        assert!(
            err.to_string()
                .contains("line 2: the timestamp at \"/t\" is \"x\", not a number of seconds"),
            "{err}"
        );
    }

    /// For every split point: reads that many records and takes the position, reads the rest,
    /// then checks that a fresh source seeked to the position reads exactly the same rest.
    fn check_resume(open: impl Fn() -> Box<dyn Source>, records: usize) {
        for first in 0..=records {
            let mut source = open();
            let mut batch = RecordBatch::new();
            source.read_batch(first, &mut batch).expect("read");
            assert_eq!(batch.len(), first);
            let position = source.position();
            let rest = read_all(source.as_mut()).expect("read rest");
            assert_eq!(rest.len(), records - first);

            let mut resumed = open();
            resumed.seek(&position).expect("seek");
            assert_eq!(read_all(resumed.as_mut()).expect("read resumed"), rest);
            assert_eq!(resumed.position(), source.position(), "after {first}");
            let (done, total) = (&resumed.progress().done, &resumed.progress().total);
            assert_eq!(done.load(Ordering::Relaxed), total.load(Ordering::Relaxed));
        }
    }

    #[test]
    fn a_source_seeked_to_a_position_reads_exactly_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = dir.path().join("in.txt");
        std::fs::write(&text, "one\r\n\ntwo\nthree\nfour").expect("write");
        check_resume(|| Box::new(TextLinesSource::open(&text).expect("open")), 5);
        let json = dir.path().join("in.jsonl");
        std::fs::write(&json, "{\"n\":1}\n\n{\"n\":2}\n{\"n\":3}\r\n{\"n\":4}").expect("write");
        check_resume(
            || Box::new(JsonLinesSource::open(&json, Some("/n".into())).expect("open")),
            4,
        );

        let mut source = JsonLinesSource::open(&json, None).expect("open");
        source.read_batch(2, &mut RecordBatch::new()).expect("read");
        assert_eq!(
            source.position(),
            serde_json::json!({ "offset": 17, "line": 3 }),
            "the blank line before the second record is consumed"
        );
    }

    #[test]
    fn a_seeked_source_reports_line_numbers_of_the_whole_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"u\":1}\n{oops\n").expect("write");
        let mut source = JsonLinesSource::open(&path, None).expect("open");
        source
            .seek(&serde_json::json!({ "offset": 8, "line": 1 }))
            .expect("seek");
        let err = read_all(&mut source).expect_err("bad");
        assert!(err.to_string().contains("line 2: not valid JSON"), "{err}");
    }

    #[test]
    fn positions_this_input_cannot_have_produced_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("in.txt");
        std::fs::write(&path, "one\ntwo\n").expect("write");
        let cases = [
            (serde_json::json!("offset 4"), "not a line position"),
            (serde_json::json!({ "offset": 4 }), "missing field `line`"),
            (
                serde_json::json!({ "offset": 4, "line": 1, "records": 1 }),
                "unknown field `records`",
            ),
            (
                serde_json::json!({ "offset": -1, "line": 0 }),
                "not a line position",
            ),
            (
                serde_json::json!({ "offset": 9, "line": 2 }),
                "beyond the end of the file (8 bytes)",
            ),
            (
                serde_json::json!({ "offset": 5, "line": 1 }),
                "not at the start of a line",
            ),
            (
                serde_json::json!({ "offset": 4, "line": 5 }),
                "5 lines cannot end within 4 bytes",
            ),
        ];
        for (position, expected) in cases {
            let mut source = TextLinesSource::open(&path).expect("open");
            let err = source.seek(&position).expect_err("bad position");
            assert!(matches!(err, ConnectorError::BadPosition { .. }), "{err:?}");
            assert!(err.to_string().contains(expected), "{position}: {err}");
        }
        let mut source = TextLinesSource::open(&path).expect("open");
        source
            .seek(&serde_json::json!({ "offset": 8, "line": 2 }))
            .expect("the end of the file is a position");
        assert!(read_all(&mut source).expect("read").is_empty());
    }
}
