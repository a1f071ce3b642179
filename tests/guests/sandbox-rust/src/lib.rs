//! A Rust operator that reaches for everything a sandbox grants or refuses, for
//! tests/sandbox.rs.
//!
//! For each record it prints to stdout and stderr and logs through the SDK, and emits one
//! record per check, `check=result`:
//!
//! - `wall_clock=SECONDS` (`SystemTime::now`), `monotonic=ok` (`Instant` does not go back);
//! - `random=HEX` (a hash of std's `RandomState`, whose keys std draws from WASI's random
//!   numbers: without them, std panics);
//! - `file=`, `env=`, `socket=`: `refused: ErrorKind` when opening `/etc/passwd`, reading
//!   `WEIR_PROBE_SECRET` and connecting to `127.0.0.1:PORT` (config `port`) fail, or what
//!   was read if they do not.

use std::hash::BuildHasher;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use weir_guest::{Emitter, OpenContext, Operator, Record, Result, export_operator, log};

struct Probe {
    port: u16,
}

fn refused<T: std::fmt::Debug, E: std::fmt::Debug>(attempt: std::result::Result<T, E>) -> String {
    match attempt {
        Ok(value) => format!("granted: {value:?}"),
        Err(e) => format!("refused: {e:?}"),
    }
}

impl Operator for Probe {
    fn open(ctx: &mut OpenContext) -> Result<Self> {
        let config: std::collections::HashMap<String, u16> = ctx.config()?;
        Ok(Self {
            port: config.get("port").copied().unwrap_or(9),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
        println!("probe: println");
        eprintln!("probe: eprintln");
        log::info("probe: log::info");
        let mut emit = |text: String| out.emit(record.key, text.as_bytes());

        let before = Instant::now();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs());
        emit(format!("wall_clock={}", now.unwrap_or(0)));
        emit(format!("monotonic={}", if Instant::now() >= before { "ok" } else { "went back" }));
        let random = std::collections::hash_map::RandomState::new().hash_one(42u64);
        emit(format!("random={random:016x}"));

        emit(format!("file={}", refused(std::fs::read_to_string("/etc/passwd").map_err(|e| e.kind()))));
        emit(format!("env={}", refused(std::env::var("WEIR_PROBE_SECRET"))));
        let socket = std::net::TcpStream::connect(("127.0.0.1", self.port));
        emit(format!("socket={}", refused(socket.map(|_| ()).map_err(|e| e.kind()))));
        Ok(())
    }
}

export_operator!(Probe);
