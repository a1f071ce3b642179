//! [`GuestOutput`]: where a guest's standard output and error go.
//!
//! Guests get no real stdout or stderr. What they print goes, line by line, into the host's
//! tracing (target `weir::guest`, tagged like guest log lines), and the last few KiB of
//! standard error are kept so that a trap can say what the guest printed last: a Rust guest
//! prints its panic message there just before it traps.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::LogContext;

/// Bytes of standard error kept for trap messages.
const TAIL_BYTES: usize = 2048;
/// Longest line logged; longer ones are cut.
const MAX_LINE: usize = 4096;

/// Which stream a [`GuestOutput`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Default)]
struct Buffers {
    /// The current, unfinished line.
    line: Vec<u8>,
    /// The last bytes written, for trap messages.
    tail: VecDeque<u8>,
}

/// One guest output stream; clones share their buffers.
#[derive(Clone)]
pub struct GuestOutput {
    stream: Stream,
    log: LogContext,
    /// The partial line of each stream: shared by the clones wasmtime makes of a stream, locked per
    /// write.
    buffers: Arc<Mutex<Buffers>>,
}

impl GuestOutput {
    pub fn new(stream: Stream, log: LogContext) -> Self {
        Self {
            stream,
            log,
            buffers: Arc::default(),
        }
    }

    /// The last bytes written (at most a few KiB), as text.
    pub fn tail(&self) -> String {
        let buffers = self.lock();
        let (a, b) = buffers.tail.as_slices();
        let mut bytes = a.to_vec();
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buffers> {
        // A panic while holding this lock cannot leave the buffers inconsistent in a way
        // that matters (they are diagnostics), so a poisoned lock is used as is.
        self.buffers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, bytes: &[u8]) {
        let mut buffers = self.lock();
        let buffers = &mut *buffers;
        buffers.tail.extend(bytes);
        let excess = buffers.tail.len().saturating_sub(TAIL_BYTES);
        buffers.tail.drain(..excess);
        for &byte in bytes {
            if byte == b'\n' {
                if !buffers.line.is_empty() {
                    self.emit(&buffers.line);
                }
                buffers.line.clear();
            } else if buffers.line.len() < MAX_LINE {
                buffers.line.push(byte);
            }
        }
    }

    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let c = &self.log;
        let (job, operator, subtask) = (&*c.job, &c.operator.0, c.subtask.0);
        match self.stream {
            Stream::Stdout => {
                tracing::info!(target: "weir::guest", job, operator, subtask, stream = "stdout", "{text}");
                c.keep("info", None, "stdout", &text);
            }
            Stream::Stderr => {
                tracing::warn!(target: "weir::guest", job, operator, subtask, stream = "stderr", "{text}");
                c.keep("warn", None, "stderr", &text);
            }
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

/// Never blocks: writes are taken whole, at once.
impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.record(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.record(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{OperatorName, SubtaskIndex};

    #[test]
    fn keeps_the_last_bytes_for_trap_messages() {
        let log = LogContext {
            job: Arc::from("j"),
            operator: OperatorName("op".into()),
            subtask: SubtaskIndex(0),
            file: None,
        };
        let mut out = GuestOutput::new(Stream::Stderr, log);
        out.write(Bytes::from(vec![b'x'; 3 * TAIL_BYTES]))
            .expect("write");
        out.write(Bytes::from_static(b"\npanicked at lib.rs:1: boom\n"))
            .expect("write");
        let tail = out.tail();
        assert!(tail.len() <= TAIL_BYTES);
        assert!(tail.ends_with("panicked at lib.rs:1: boom"), "{tail}");
    }
}
