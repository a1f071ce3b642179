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
pub(crate) const MAX_BYTES: u64 = 8 << 20;

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
        self.tail_matching(count, |_| true)
    }

    /// The last `count` lines that `keep` keeps, oldest first. Reads the files from their
    /// ends, only as far back as it takes: a console polling the log of a chatty guest every
    /// second reads kilobytes, not the megabytes the file may hold.
    pub fn tail_matching(
        &self,
        count: usize,
        keep: impl Fn(&LogLine) -> bool,
    ) -> std::io::Result<Vec<LogLine>> {
        let mut lines = last_lines(&self.path, count, &keep)?;
        if lines.len() < count {
            let mut older = last_lines(&self.rotated(), count - lines.len(), &keep)?;
            older.append(&mut lines);
            lines = older;
        }
        Ok(lines)
    }
}

/// How much of a log file's end is read first; doubled until enough lines are found.
const FIRST_READ: u64 = 64 << 10;

/// The last `count` lines of the file at `path` that `keep` keeps, oldest first; none if it
/// does not exist. A line cut short by a crash is skipped.
fn last_lines(
    path: &Path,
    count: usize,
    keep: &dyn Fn(&LogLine) -> bool,
) -> std::io::Result<Vec<LogLine>> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let mut window = FIRST_READ.min(len);
    loop {
        let start = len - window;
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::with_capacity(window as usize);
        (&mut file).take(window).read_to_end(&mut bytes)?;
        let mut pieces = bytes.split(|&b| b == b'\n');
        if start > 0 {
            // The window begins inside a line.
            pieces.next();
        }
        let mut lines: Vec<LogLine> = pieces
            .filter_map(|l| serde_json::from_slice(l).ok())
            .filter(|l| keep(l))
            .collect();
        if lines.len() >= count || start == 0 {
            let skip = lines.len().saturating_sub(count);
            return Ok(lines.split_off(skip));
        }
        window = (window * 2).min(len);
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

    #[test]
    fn a_filtered_tail_reads_back_as_far_as_it_takes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = GuestLogFile::new(dir.path().join("guest.log"));
        // Far more than the first read: the rare lines are all in the file's first part.
        for i in 0..3 {
            log.append(LogLine {
                operator: "rare".into(),
                level: "warn".into(),
                ..line(&format!("rare {i}"))
            });
        }
        for i in 0..5_000 {
            log.append(line(&format!("common {i}")));
        }
        let rare = log
            .tail_matching(2, |l| l.operator == "rare")
            .expect("tail");
        let messages: Vec<_> = rare.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(messages, ["rare 1", "rare 2"]);
        let all_rare = log.tail_matching(10, |l| l.level == "warn").expect("tail");
        assert_eq!(all_rare.len(), 3);
        let last = log.tail(2).expect("tail");
        assert_eq!(last[1].message, "common 4999");
    }
}
