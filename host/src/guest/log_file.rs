//! [`GuestLogFile`]: one job's guest log lines, kept as JSON lines in a file so that
//! `weir job ID --logs` can show them while the job runs, after it ended, and after the host
//! restarted.
//!
//! The file is bounded: past [`MAX_BYTES`] it is renamed to `<name>.1` (replacing the older
//! one) and a new file begins, so a chatty guest costs at most twice that on disk.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Size at which the file is rotated.
pub const MAX_BYTES: u64 = 8 << 20;

/// One line a guest logged or printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// When the host received it, RFC 3339 in UTC with milliseconds.
    pub time: String,
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: String,
    pub operator: String,
    pub subtask: u32,
    /// The checkpoint the subtask's writes belonged to when it logged (the next to complete);
    /// none for printed output.
    pub checkpoint: Option<u64>,
    /// `log` for the WIT logger, `stdout` or `stderr` for printed lines.
    pub stream: String,
    pub message: String,
}

impl std::fmt::Display for LogLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {:<5} {}[{}]",
            self.time,
            self.level.to_uppercase(),
            self.operator,
            self.subtask
        )?;
        match self.checkpoint {
            Some(c) => write!(f, " chk {c}")?,
            None => write!(f, " {}", self.stream)?,
        }
        write!(f, ": {}", self.message)
    }
}

/// Appends a job's guest log lines to a file; shared by all its subtasks.
#[derive(Debug)]
pub struct GuestLogFile {
    path: PathBuf,
    file: Mutex<Option<(File, u64)>>,
}

impl GuestLogFile {
    /// Logs into `path` (created on the first line, appended to if it exists).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            file: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends a line stamped now. Failing to log never fails the guest: the error is
    /// reported to the host's log instead.
    pub fn append(&self, mut line: LogLine) {
        if line.time.is_empty() {
            line.time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        }
        let Ok(mut text) = serde_json::to_vec(&line) else {
            return;
        };
        text.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = self.write(&mut file, &text) {
            *file = None;
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write a guest log line");
        }
    }

    fn write(&self, file: &mut Option<(File, u64)>, text: &[u8]) -> std::io::Result<()> {
        if file.as_ref().is_some_and(|(_, len)| *len >= MAX_BYTES) {
            *file = None;
            std::fs::rename(&self.path, self.rotated())?;
        }
        if file.is_none() {
            let opened = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            let len = opened.metadata()?.len();
            *file = Some((opened, len));
        }
        let (f, len) = file.as_mut().expect("opened above");
        // One write per line, so that readers see whole lines.
        f.write_all(text)?;
        *len += text.len() as u64;
        Ok(())
    }

    fn rotated(&self) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }

    /// The last `count` lines, oldest first (from the rotated file too, if needed).
    pub fn tail(&self, count: usize) -> std::io::Result<Vec<LogLine>> {
        let mut lines = read_lines(&self.path)?;
        if lines.len() < count {
            let mut older = read_lines(&self.rotated())?;
            older.append(&mut lines);
            lines = older;
        }
        let skip = lines.len().saturating_sub(count);
        Ok(lines.split_off(skip))
    }
}

/// The lines of a log file; none if it does not exist. A line cut short by a crash is
/// skipped.
fn read_lines(path: &Path) -> std::io::Result<Vec<LogLine>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(bytes
            .split(|&b| b == b'\n')
            .filter_map(|l| serde_json::from_slice(l).ok())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(message: &str) -> LogLine {
        LogLine {
            time: String::new(),
            level: "info".into(),
            operator: "count".into(),
            subtask: 1,
            checkpoint: Some(4),
            stream: "log".into(),
            message: message.into(),
        }
    }

    #[test]
    fn keeps_lines_across_reopening_and_rotation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("guest.log");
        let log = GuestLogFile::new(&path);
        assert!(log.tail(10).expect("tail").is_empty());
        log.append(line("first"));
        // A second writer (a restarted host) appends to the same file.
        GuestLogFile::new(&path).append(line("second"));
        let tail = log.tail(10).expect("tail");
        assert_eq!(
            tail.iter().map(|l| l.message.as_str()).collect::<Vec<_>>(),
            ["first", "second"]
        );
        assert!(tail[0].time.ends_with('Z'), "{}", tail[0].time);
        assert!(tail[0].to_string().contains("INFO  count[1] chk 4: first"));

        // Past the bound the file rotates, and the tail still spans both files.
        let big = "x".repeat(1 << 20);
        for _ in 0..9 {
            log.append(line(&big));
        }
        log.append(line("after rotation"));
        assert!(std::fs::metadata(&path).expect("log").len() < MAX_BYTES);
        let tail = log.tail(3).expect("tail");
        assert_eq!(tail.len(), 3);
        assert_eq!(tail[2].message, "after rotation");
        assert_eq!(tail[1].message, big);
    }
}
