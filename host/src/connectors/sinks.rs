//! Sinks: one record value per line to a file or stdout, or nowhere.
//!
//! [`FileSink`] is exactly-once across restores; [`StdoutSink`] is at-least-once, since it
//! cannot take back what it printed; [`DiscardSink`] keeps nothing.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{ConnectorError, Sink, SinkPosition, SinkRestore};
use crate::ids::CheckpointId;
use crate::record::RecordBatch;

fn write_values(out: &mut impl Write, batch: &RecordBatch) -> std::io::Result<()> {
    for record in batch.iter() {
        out.write_all(record.value)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Wraps an I/O error with the path it concerns.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ConnectorError {
    let path = path.to_owned();
    move |source| ConnectorError::Io { path, source }
}

/// A file whose content is not what the sink left there.
fn invalid(path: &Path, message: String) -> ConnectorError {
    io(path)(std::io::Error::new(ErrorKind::InvalidData, message))
}

/// Makes the creations, renames and removals in a directory durable.
fn sync_dir(dir: &Path) -> Result<(), ConnectorError> {
    // Only Unix opens a directory as a file; elsewhere the filesystem decides.
    if cfg!(unix) {
        File::open(dir)
            .and_then(|dir| dir.sync_all())
            .map_err(io(dir))?;
    }
    Ok(())
}

fn remove_if_exists(path: &Path) -> Result<(), ConnectorError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(io(path)(e)),
        _ => Ok(()),
    }
}

/// Writes each record's value and a newline to standard output as it comes. At-least-once:
/// a restored job prints again what was printed after its checkpoint.
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

    /// Flushes: the checkpoint's output has been printed, which is as durable as stdout gets.
    fn stage(&mut self, _checkpoint: CheckpointId) -> Result<Option<SinkPosition>, ConnectorError> {
        self.out.flush().map_err(Self::io)?;
        Ok(None)
    }

    /// Nothing to do: the output is visible since `stage`.
    fn commit(&mut self, _checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Nothing to do: printed output cannot be taken back, so it is repeated after a restore.
    fn recover(&mut self, _restored: Option<SinkRestore<'_>>) -> Result<(), ConnectorError> {
        Ok(())
    }
}

/// Writes each record's value and a newline to a file, exactly once across restores.
///
/// What is written between two checkpoints goes to `open.part` in a staging directory next to
/// the output, `.<name>.weir-staging/`; `stage` renames it to the checkpoint's part, and
/// `commit` appends parts to the output in checkpoint order. The `committed` marker (the last
/// appended checkpoint and the output's length after it) makes appending idempotent: a part
/// at or below the marker is in the output already, and whatever an append cut short by a
/// crash left past the marker's length is truncated before the next append. Checkpoint ids
/// start at 1, so the marker of an empty output names checkpoint 0.
///
/// Each checkpoint also records the output's length once it is committed ([`Position`]). A
/// restore checks the output against it: an output cut short or replaced since (by a run from
/// the beginning, or by hand, staging folder included) fails the restore instead of resuming
/// into a file that lost committed records, and the output of checkpoints after the restored
/// one, committed already, is cut off.
pub struct FileSink {
    path: PathBuf,
    staging: PathBuf,
    /// `open.part`, opened by the first write after a stage.
    open: Option<BufWriter<File>>,
    /// The output's length once everything staged so far is committed: what the next
    /// checkpoint records.
    staged_len: u64,
}

/// What a checkpoint records of a file sink's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    /// The output's length once the checkpoint is committed.
    output_len: u64,
}

/// The content of the `committed` marker file.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Marker {
    /// The last checkpoint whose part is in the output.
    checkpoint: u64,
    /// The output's length just after that part.
    len: u64,
}

const OPEN_PART: &str = "open.part";
const MARKER: &str = "committed";
/// The output's lease folder (`crate::checkpoint::lease`), in the staging folder.
const LEASE: &str = "lease";

impl FileSink {
    /// A sink writing to `path`. Touches nothing on disk until `recover` or the first write.
    pub fn create(path: &Path) -> Result<Self, ConnectorError> {
        let Some(name) = path.file_name() else {
            let message = "an output path must end in a file name";
            return Err(io(path)(std::io::Error::new(
                ErrorKind::InvalidInput,
                message,
            )));
        };
        Ok(Self {
            path: path.to_owned(),
            staging: Self::staging_folder(path, name),
            open: None,
            staged_len: 0,
        })
    }

    /// `.<name>.weir-staging/` beside the output `path` named `name`: what the sink stages,
    /// and the output's lease (`crate::checkpoint::lease`), which outlives a start from scratch.
    fn staging_folder(path: &Path, name: &std::ffi::OsStr) -> PathBuf {
        let mut staging = OsString::from(".");
        staging.push(name);
        staging.push(".weir-staging");
        path.with_file_name(staging)
    }

    /// The folder of the output `path`'s lease, the staging folder.
    pub fn lease_folder(path: &Path) -> Option<PathBuf> {
        Some(Self::staging_folder(path, path.file_name()?))
    }

    fn part_path(&self, checkpoint: u64) -> PathBuf {
        self.staging.join(format!("{checkpoint:020}.part"))
    }

    /// Creates the staging directory if it is missing, durably.
    fn create_staging(&self) -> Result<(), ConnectorError> {
        match std::fs::create_dir(&self.staging) {
            Ok(()) => match self.staging.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
                _ => sync_dir(Path::new(".")),
            },
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(io(&self.staging)(e)),
        }
    }

    /// Starts `open.part`, replacing whatever a failed run left there.
    fn open_part(&self) -> Result<BufWriter<File>, ConnectorError> {
        self.create_staging()?;
        let path = self.staging.join(OPEN_PART);
        let file = File::create(&path).map_err(io(&path))?;
        Ok(BufWriter::with_capacity(256 << 10, file))
    }

    /// Staged parts, ascending by checkpoint.
    fn parts(&self) -> Result<Vec<(u64, PathBuf)>, ConnectorError> {
        let entries = match std::fs::read_dir(&self.staging) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.staging)(e)),
        };
        let mut parts = Vec::new();
        for entry in entries {
            let path = entry.map_err(io(&self.staging))?.path();
            let checkpoint = path
                .file_name()
                .and_then(|name| name.to_str()?.strip_suffix(".part")?.parse().ok());
            if let Some(checkpoint) = checkpoint {
                parts.push((checkpoint, path));
            }
        }
        parts.sort_unstable();
        Ok(parts)
    }

    /// The marker; without one (the staging directory was removed), the output as it is.
    fn read_marker(&self) -> Result<Marker, ConnectorError> {
        let path = self.staging.join(MARKER);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| invalid(&path, format!("not a commit marker: {e}"))),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let len = match std::fs::metadata(&self.path) {
                    Ok(metadata) => metadata.len(),
                    Err(e) if e.kind() == ErrorKind::NotFound => 0,
                    Err(e) => return Err(io(&self.path)(e)),
                };
                Ok(Marker { checkpoint: 0, len })
            }
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Replaces the marker atomically: a crash leaves either the old or the new one.
    fn write_marker(&self, marker: Marker) -> Result<(), ConnectorError> {
        let temp = self.staging.join(format!("{MARKER}.tmp"));
        let bytes = serde_json::to_vec(&marker).map_err(|e| io(&temp)(e.into()))?;
        let mut file = File::create(&temp).map_err(io(&temp))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(io(&temp))?;
        let path = self.staging.join(MARKER);
        std::fs::rename(&temp, &path).map_err(io(&path))?;
        sync_dir(&self.staging)
    }

    /// Opens the output (creating it) positioned at the marker's length, cutting off what an
    /// append that a crash interrupted left behind.
    fn open_output(&self, marker: Marker) -> Result<File, ConnectorError> {
        let mut output = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(io(&self.path))?;
        let len = output.metadata().map_err(io(&self.path))?.len();
        if len < marker.len {
            return Err(invalid(
                &self.path,
                format!(
                    "holds {len} bytes, fewer than the {} already committed: it was changed \
                     outside weir; remove it to start afresh",
                    marker.len
                ),
            ));
        }
        if len > marker.len {
            output.set_len(marker.len).map_err(io(&self.path))?;
        }
        output
            .seek(SeekFrom::Start(marker.len))
            .map_err(io(&self.path))?;
        Ok(output)
    }

    /// Appends one staged part to the output and records it in the marker.
    fn append_part(
        &self,
        checkpoint: u64,
        part: &Path,
        marker: Marker,
    ) -> Result<Marker, ConnectorError> {
        let mut output = self.open_output(marker)?;
        let mut input = File::open(part).map_err(io(part))?;
        let bytes = std::io::copy(&mut input, &mut output)
            .and_then(|bytes| output.sync_all().map(|()| bytes))
            .map_err(io(&self.path))?;
        let marker = Marker {
            checkpoint,
            len: marker.len + bytes,
        };
        self.write_marker(marker)?;
        tracing::debug!(checkpoint, bytes, path = %self.path.display(), "committed staged output");
        Ok(marker)
    }

    /// Appends the parts up to `checkpoint` that are not in the output yet, in order, and
    /// removes them. Returns the marker after.
    fn commit_up_to(&self, checkpoint: u64) -> Result<Marker, ConnectorError> {
        let mut marker = self.read_marker()?;
        for (id, part) in self.parts()? {
            if id > checkpoint {
                break;
            }
            if id > marker.checkpoint {
                marker = self.append_part(id, &part, marker)?;
            }
            // A removal lost in a crash is harmless: the marker says the part is appended.
            std::fs::remove_file(&part).map_err(io(&part))?;
        }
        Ok(marker)
    }

    /// A restored job: commits the parts up to `checkpoint`, discards everything after, and
    /// checks the output against the checkpoint's `position` when it has one. Returns the
    /// output's committed length.
    fn resume_after(
        &self,
        checkpoint: u64,
        position: Option<Position>,
    ) -> Result<u64, ConnectorError> {
        self.create_staging()?;
        let marker = self.read_marker()?;
        let marker = match position {
            _ if marker.checkpoint <= checkpoint => self.commit_up_to(checkpoint)?,
            // The output of later checkpoints is committed already: cut it off.
            Some(Position { output_len }) if output_len <= marker.len => {
                let marker = Marker {
                    checkpoint,
                    len: output_len,
                };
                self.open_output(marker)?;
                self.write_marker(marker)?;
                marker
            }
            _ => {
                return Err(invalid(
                    &self.path,
                    format!(
                        "holds the output of checkpoint {}, later than the restored checkpoint \
                         {checkpoint}: restore from the latest checkpoint, or write to a new file",
                        marker.checkpoint
                    ),
                ));
            }
        };
        remove_if_exists(&self.staging.join(OPEN_PART))?;
        for (_, part) in self.parts()? {
            std::fs::remove_file(&part).map_err(io(&part))?;
        }
        // Durably gone, so that a later stage of the same checkpoint is the only part by its name.
        sync_dir(&self.staging)?;
        if let Some(Position { output_len }) = position
            && output_len != marker.len
        {
            return Err(ConnectorError::OutputLost {
                path: self.path.clone(),
                checkpoint: CheckpointId(checkpoint),
                expected: output_len,
                found: marker.len,
            });
        }
        self.open_output(marker)?;
        Ok(marker.len)
    }

    /// A fresh job: nothing staged, nothing committed, an empty output.
    fn start_empty(&self) -> Result<(), ConnectorError> {
        let entries = match std::fs::read_dir(&self.staging) {
            Ok(entries) => entries.collect::<Result<Vec<_>, _>>(),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
        .map_err(io(&self.staging))?;
        // Everything but the lease this run holds.
        for entry in entries.iter().filter(|e| e.file_name() != LEASE) {
            let path = entry.path();
            let removed = match entry.file_type() {
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
            removed.map_err(io(&path))?;
        }
        File::create(&self.path).map_err(io(&self.path))?;
        self.create_staging()?;
        self.write_marker(Marker {
            checkpoint: 0,
            len: 0,
        })
    }
}

impl Sink for FileSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        let out = match self.open.take() {
            Some(out) => out,
            None => self.open_part()?,
        };
        let out = self.open.insert(out);
        write_values(out, batch).map_err(|source| ConnectorError::Io {
            path: self.staging.join(OPEN_PART),
            source,
        })
    }

    /// Renames `open.part` to the checkpoint's part. Nothing written since the last stage
    /// leaves no part, and commit has nothing to append for this checkpoint.
    fn stage(&mut self, checkpoint: CheckpointId) -> Result<Option<SinkPosition>, ConnectorError> {
        if let Some(out) = self.open.take() {
            let open = self.staging.join(OPEN_PART);
            let file = out.into_inner().map_err(|e| io(&open)(e.into_error()))?;
            file.sync_all().map_err(io(&open))?;
            self.staged_len += file.metadata().map_err(io(&open))?.len();
            let part = self.part_path(checkpoint.0);
            std::fs::rename(&open, &part).map_err(io(&part))?;
            sync_dir(&self.staging)?;
        }
        let position = Position {
            output_len: self.staged_len,
        };
        serde_json::to_value(position)
            .map(Some)
            .map_err(|e| io(&self.path)(e.into()))
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.commit_up_to(checkpoint.0).map(drop)
    }

    fn recover(&mut self, restored: Option<SinkRestore<'_>>) -> Result<(), ConnectorError> {
        self.open = None;
        self.staged_len = match restored {
            Some(SinkRestore {
                checkpoint,
                position,
            }) => {
                let position = position
                    .map(|p| serde_json::from_value::<Position>(p.clone()))
                    .transpose()
                    .map_err(|e| {
                        invalid(
                            &self.path,
                            format!("checkpoint {checkpoint} records no file sink position: {e}"),
                        )
                    })?;
                self.resume_after(checkpoint.0, position)?
            }
            None => {
                self.start_empty()?;
                0
            }
        };
        Ok(())
    }
}

/// Drops everything (benchmarks).
#[derive(Default)]
pub struct DiscardSink;

impl Sink for DiscardSink {
    fn write(&mut self, _batch: &RecordBatch) -> Result<(), ConnectorError> {
        Ok(())
    }

    fn stage(&mut self, _checkpoint: CheckpointId) -> Result<Option<SinkPosition>, ConnectorError> {
        Ok(None)
    }

    fn commit(&mut self, _checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        Ok(())
    }

    fn recover(&mut self, _restored: Option<SinkRestore<'_>>) -> Result<(), ConnectorError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordRef;

    fn batch(values: &[&str]) -> RecordBatch {
        let mut batch = RecordBatch::new();
        for value in values {
            batch.push(RecordRef::unkeyed(value.as_bytes()));
        }
        batch
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).expect("read output")
    }

    /// Writes `values` and stages them as `checkpoint`.
    fn stage(sink: &mut FileSink, values: &[&str], checkpoint: u64) {
        sink.write(&batch(values)).expect("write");
        sink.stage(CheckpointId(checkpoint)).expect("stage");
    }

    /// A sink on `path` after a recover, as a job (re)starts it.
    fn recovered(path: &Path, restored: Option<u64>) -> FileSink {
        let mut sink = FileSink::create(path).expect("create");
        sink.recover(restored.map(|id| SinkRestore {
            checkpoint: CheckpointId(id),
            position: None,
        }))
        .expect("recover");
        sink
    }

    /// Recovers a sink on `path` from `checkpoint` with the position its stage recorded.
    fn recover_at(
        path: &Path,
        checkpoint: u64,
        position: &SinkPosition,
    ) -> Result<FileSink, ConnectorError> {
        let mut sink = FileSink::create(path).expect("create");
        sink.recover(Some(SinkRestore {
            checkpoint: CheckpointId(checkpoint),
            position: Some(position),
        }))
        .map(|()| sink)
    }

    /// Writes `values`, stages them as `checkpoint` and returns the recorded position.
    fn stage_at(sink: &mut FileSink, values: &[&str], checkpoint: u64) -> SinkPosition {
        sink.write(&batch(values)).expect("write");
        sink.stage(CheckpointId(checkpoint))
            .expect("stage")
            .expect("a file sink records its position")
    }

    /// The names in the staging directory, sorted.
    fn staged(sink: &FileSink) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(&sink.staging)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn output_appears_at_commit_in_checkpoint_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.txt");
        let mut sink = FileSink::create(&path).expect("create");
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 0);
        sink.recover(None).expect("recover");
        assert_eq!(read(&path), "");

        stage(&mut sink, &["a", "b"], 1);
        stage(&mut sink, &["c"], 2);
        stage(&mut sink, &["d"], 3);
        sink.write(&batch(&["e"])).expect("write");
        assert_eq!(read(&path), "", "staged output is invisible");

        sink.commit(CheckpointId(2)).expect("commit");
        assert_eq!(read(&path), "a\nb\nc\n");
        sink.commit(CheckpointId(2)).expect("commit again");
        sink.commit(CheckpointId(1)).expect("commit earlier");
        assert_eq!(read(&path), "a\nb\nc\n", "commit is idempotent");

        sink.stage(CheckpointId(4)).expect("stage");
        sink.stage(CheckpointId(5)).expect("stage nothing");
        sink.commit(CheckpointId(5)).expect("commit");
        assert_eq!(read(&path), "a\nb\nc\nd\ne\n");
        assert_eq!(staged(&sink), vec!["committed"]);
    }

    #[test]
    fn a_crash_in_the_middle_of_a_commit_leaves_each_part_in_the_output_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.txt");
        let mut sink = recovered(&path, None);
        stage(&mut sink, &["a"], 1);
        sink.commit(CheckpointId(1)).expect("commit");
        stage(&mut sink, &["b"], 2);
        stage(&mut sink, &["c"], 3);
        // The commit of 2 crashed after appending part of its bytes, before the marker.
        let mut output = OpenOptions::new().append(true).open(&path).expect("open");
        output.write_all(b"b").expect("append");
        drop(sink);

        let mut sink = recovered(&path, Some(2));
        assert_eq!(read(&path), "a\nb\n");
        assert_eq!(staged(&sink), vec!["committed"], "part 3 is discarded");
        sink.commit(CheckpointId(3)).expect("commit");
        assert_eq!(read(&path), "a\nb\n");

        // The commit of 4 crashed after the marker, before removing the part.
        stage(&mut sink, &["d"], 4);
        let part = sink.part_path(4);
        let bytes = std::fs::read(&part).expect("read part");
        sink.commit(CheckpointId(4)).expect("commit");
        std::fs::write(&part, bytes).expect("restore part");
        drop(sink);
        recovered(&path, Some(4));
        assert_eq!(read(&path), "a\nb\nd\n");
    }

    #[test]
    fn recovering_a_checkpoint_discards_the_output_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.txt");
        let mut sink = recovered(&path, None);
        stage(&mut sink, &["a"], 1);
        stage(&mut sink, &["b"], 2);
        sink.write(&batch(&["c"])).expect("write");
        drop(sink);

        let mut sink = recovered(&path, Some(1));
        assert_eq!(read(&path), "a\n");
        assert_eq!(
            staged(&sink),
            vec!["committed"],
            "part 2 and open.part are gone"
        );
        stage(&mut sink, &["x"], 2);
        sink.commit(CheckpointId(2)).expect("commit");
        assert_eq!(read(&path), "a\nx\n");

        let err = FileSink::create(&path)
            .expect("create")
            .recover(Some(SinkRestore {
                checkpoint: CheckpointId(1),
                position: None,
            }))
            .expect_err("checkpoint 2 is committed already");
        assert!(err.to_string().contains("later than the restored"), "{err}");
    }

    #[test]
    fn a_fresh_job_starts_with_an_empty_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.txt");
        std::fs::write(&path, "old\n").expect("write");
        let mut sink = recovered(&path, Some(1));
        assert_eq!(read(&path), "old\n", "a restore keeps committed output");
        stage(&mut sink, &["a"], 1);
        sink.write(&batch(&["b"])).expect("write");
        drop(sink);

        let mut sink = recovered(&path, None);
        assert_eq!(read(&path), "");
        assert_eq!(staged(&sink), vec!["committed"]);
        sink.commit(CheckpointId(1)).expect("commit");
        assert_eq!(read(&path), "");
    }

    #[test]
    fn each_checkpoint_records_the_length_its_output_will_have() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.txt");
        let mut sink = recovered(&path, None);
        let first = stage_at(&mut sink, &["a", "bb"], 1);
        let empty = sink
            .stage(CheckpointId(2))
            .expect("stage")
            .expect("position");
        let third = stage_at(&mut sink, &["c"], 3);
        assert_eq!(first, serde_json::json!({"output_len": 5}));
        assert_eq!(empty, first, "nothing written, the same length");
        assert_eq!(third, serde_json::json!({"output_len": 7}));

        sink.commit(CheckpointId(3)).expect("commit");
        drop(sink);
        let mut sink = recover_at(&path, 3, &third).expect("the output holds checkpoint 3");
        assert_eq!(
            stage_at(&mut sink, &["d"], 4),
            serde_json::json!({"output_len": 9}),
            "a restored sink counts from the committed output"
        );
    }

    #[test]
    fn restoring_an_earlier_checkpoint_cuts_off_the_output_committed_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.txt");
        let mut sink = recovered(&path, None);
        let first = stage_at(&mut sink, &["a"], 1);
        stage_at(&mut sink, &["b"], 2);
        sink.commit(CheckpointId(2)).expect("commit");
        assert_eq!(read(&path), "a\nb\n");
        drop(sink);

        let mut sink = recover_at(&path, 1, &first).expect("restore 1");
        assert_eq!(read(&path), "a\n");
        stage_at(&mut sink, &["x"], 2);
        sink.commit(CheckpointId(2)).expect("commit");
        assert_eq!(read(&path), "a\nx\n");
    }

    #[test]
    fn a_restore_into_an_output_that_lost_committed_records_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.txt");
        let mut sink = recovered(&path, None);
        let position = stage_at(&mut sink, &["a", "b"], 1);
        sink.commit(CheckpointId(1)).expect("commit");
        drop(sink);

        // A run from the beginning started the output afresh, then failed before its first
        // checkpoint; restoring the earlier run's checkpoint must not resume into it.
        drop(recovered(&path, None));
        let err = recover_at(&path, 1, &position).err().expect("output lost");
        assert!(
            matches!(
                err,
                ConnectorError::OutputLost {
                    expected: 4,
                    found: 0,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("--fresh"), "{err}");

        // The same when the output and the staging folder were removed by hand.
        let mut sink = recovered(&path, None);
        let position = stage_at(&mut sink, &["a"], 1);
        sink.commit(CheckpointId(1)).expect("commit");
        drop(sink);
        std::fs::remove_file(&path).expect("rm output");
        std::fs::remove_dir_all(dir.path().join(".out.txt.weir-staging")).expect("rm staging");
        let err = recover_at(&path, 1, &position).err().expect("output lost");
        assert!(matches!(err, ConnectorError::OutputLost { .. }), "{err}");
    }
}
