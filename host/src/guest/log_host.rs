//! The `log` import: guest log lines into the host's tracing, tagged with where they came from.

use super::GuestState;
use crate::bindings::weir::operator::log::{self as wit, Level};

/// Longest message kept; a guest cannot flood the log with one huge line.
const MAX_MESSAGE: usize = 4096;

impl wit::Host for GuestState {
    fn log(&mut self, level: Level, mut message: String) {
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let c = &self.log;
        let (job, operator, subtask, checkpoint) =
            (&*c.job, &c.operator.0, c.subtask.0, self.backend.epoch().0);
        macro_rules! emit {
            ($lvl:expr, $name:literal) => {{
                tracing::event!(target: "weir::guest", $lvl, job, operator, subtask, checkpoint, "{message}");
                $name
            }};
        }
        let name = match level {
            Level::Trace => emit!(tracing::Level::TRACE, "trace"),
            Level::Debug => emit!(tracing::Level::DEBUG, "debug"),
            Level::Info => emit!(tracing::Level::INFO, "info"),
            Level::Warn => emit!(tracing::Level::WARN, "warn"),
            Level::Error => emit!(tracing::Level::ERROR, "error"),
        };
        c.keep(name, Some(checkpoint), "log", &message);
    }
}
