//! Sinks: one record value per line to stdout or a file, or nowhere.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{ConnectorError, Sink};
use crate::record::RecordBatch;

fn write_values(out: &mut impl Write, batch: &RecordBatch) -> std::io::Result<()> {
    for record in batch.iter() {
        out.write_all(record.value)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Writes each record's value and a newline to standard output.
pub struct StdoutSink {
    out: BufWriter<std::io::Stdout>,
}

impl StdoutSink {
    pub fn new() -> Self {
        Self {
            out: BufWriter::with_capacity(64 << 10, std::io::stdout()),
        }
    }

    fn io(source: std::io::Error) -> ConnectorError {
        ConnectorError::Io {
            path: PathBuf::from("<stdout>"),
            source,
        }
    }
}

impl Default for StdoutSink {
    fn default() -> Self {
        Self::new()
    }
}

impl Sink for StdoutSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        write_values(&mut self.out, batch).map_err(Self::io)
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        self.out.flush().map_err(Self::io)
    }
}

/// Writes each record's value and a newline to a file. Output goes to a temporary file next
/// to it, renamed into place by `finish`, so a failed run never leaves a partial file where
/// a complete one is expected.
pub struct FileSink {
    path: PathBuf,
    temp: PathBuf,
    out: Option<BufWriter<File>>,
}

impl FileSink {
    pub fn create(path: &Path) -> Result<Self, ConnectorError> {
        let mut name = path.file_name().unwrap_or_default().to_owned();
        name.push(".weir-partial");
        let temp = path.with_file_name(name);
        let file = File::create(&temp).map_err(|source| ConnectorError::Io {
            path: temp.clone(),
            source,
        })?;
        Ok(Self {
            path: path.to_owned(),
            temp,
            out: Some(BufWriter::with_capacity(256 << 10, file)),
        })
    }

    fn io(&self, source: std::io::Error) -> ConnectorError {
        ConnectorError::Io {
            path: self.temp.clone(),
            source,
        }
    }
}

impl Sink for FileSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        write_values(out, batch).map_err(|e| self.io(e))
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        let Some(out) = self.out.take() else {
            return Ok(());
        };
        let file = out.into_inner().map_err(|e| self.io(e.into_error()))?;
        file.sync_all().map_err(|e| self.io(e))?;
        std::fs::rename(&self.temp, &self.path).map_err(|source| ConnectorError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        if self.out.is_some() {
            // The run failed before `finish`: leave no partial output behind.
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Drops everything (benchmarks).
#[derive(Default)]
pub struct DiscardSink;

impl Sink for DiscardSink {
    fn write(&mut self, _batch: &RecordBatch) -> Result<(), ConnectorError> {
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordRef;

    #[test]
    fn file_output_appears_only_when_finished() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.txt");
        let mut batch = RecordBatch::new();
        batch.push(RecordRef::keyed(b"k", b"one"));
        batch.push(RecordRef::unkeyed(b"two"));
        let mut sink = FileSink::create(&path).expect("create");
        sink.write(&batch).expect("write");
        assert!(!path.exists());
        sink.finish().expect("finish");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "one\ntwo\n");

        let failed = dir.path().join("failed.txt");
        let mut sink = FileSink::create(&failed).expect("create");
        sink.write(&batch).expect("write");
        drop(sink);
        assert!(!failed.exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("ls").count(),
            1,
            "no partial file left"
        );
    }
}
