//! Per-page click counts in tumbling one-minute windows of event time (the windows example).
//!
//! Input: click events keyed by page (the source's `key_pointer = "/page"`), stamped with
//! their event time (`timestamp = { json_pointer = "/ts" }`). Each window emits
//! `{"page": .., "start": .., "end": .., "clicks": ..}` when the watermark passes its end, and
//! again, with the updated count, for each click that comes late but within the allowed
//! lateness. Clicks later than that are dropped (and counted in the host's late records).
//!
//! Configuration (the job file's `config`): `size_ms` (default 60 000) and
//! `allowed_lateness_ms` (default 0).

use weir_guest::windows::{Count, Window, Windows};
use weir_guest::{Emitter, OpenContext, Operator, Record, Result, Timer, export_operator};

struct PageCounts {
    windows: Windows<Count>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "minute")]
    size_ms: i64,
    #[serde(default)]
    allowed_lateness_ms: i64,
}

fn minute() -> i64 {
    60_000
}

/// What a window that fires emits: one JSON object, its fields in this order.
fn emit(window: Window<'_, u64>, out: &mut Emitter) -> Result<()> {
    let page = serde_json::to_string(std::str::from_utf8(window.key)?)?;
    out.emit_fmt(
        Some(window.key),
        format_args!(
            r#"{{"page":{page},"start":{},"end":{},"clicks":{}}}"#,
            window.start, window.end, window.result
        ),
    )
}

impl Operator for PageCounts {
    fn open(ctx: &mut OpenContext) -> Result<Self> {
        let config: Config = ctx.config()?;
        let windows = Windows::tumbling(ctx, "per-page", config.size_ms, Count)?
            .allowed_lateness(config.allowed_lateness_ms);
        Ok(Self { windows })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
        self.windows.add(record, (), out, emit)?;
        Ok(())
    }

    fn on_timer(&mut self, timer: &Timer<'_>, out: &mut Emitter) -> Result<()> {
        self.windows.on_timer(timer, out, emit)?;
        Ok(())
    }
}

export_operator!(PageCounts);
