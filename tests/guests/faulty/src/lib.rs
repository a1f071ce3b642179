//! A test operator that misbehaves, or exercises state, on demand.
//!
//! Its behaviour is chosen by the config JSON `{"mode": "...", "word": "..."}`:
//!
//! - `passthrough` (the default): emits every record unchanged.
//! - `error-on`: passes records through, and returns an error naming the value when a record's
//!   value is `word`.
//! - `trap-on`: panics (a trap) on `word`.
//! - `loop-on`: spins forever on `word` (for CPU limit tests).
//! - `alloc-on`: allocates without bound on `word` (for memory limit tests).
//! - `isolation`: keyed; keeps value states `a` and `b`, map state `m` and list state `l`,
//!   and per record does `a += 1`, `b += 10`, `m[value] += 1`, `l.push(value)`, then emits
//!   `key\ta\tb\t<m as k=v joined by ;>\t<l joined by |>` so that a test can check that state
//!   is isolated per key and per operator. Map entries come in the host's order of their
//!   CBOR-encoded keys: shorter strings first, then bytewise (alphabetical for equal lengths).
//! - `count-v1` and `count-v2`: two versions of a keyed counter, for upgrade tests. Version 1
//!   keeps `{count}` per key and emits `key\tcount`; version 2 keeps `{total, last_seen}`
//!   (the state's version 2, migrated from version 1's values as they are read) and emits
//!   `key\ttotal\tlast_seen`, `last_seen` being the record's value.
//! - `map-count-v1` and `map-count-v2`: the same, with the count kept in a map state
//!   (`counts`, under the map key `n`) whose values gain a version; `list-count-v1` and
//!   `list-count-v2` with it as the one item of a list state whose items gain a version.
//!
//! Any other mode fails `open` with an error naming it. Every mode logs one info line when it
//! opens, so tests can check where guest log lines land, and with `"log": "text"` in the
//! config one warn line of that text too (the console's test logs HTML with it).

use std::hint::black_box;

use serde::{Deserialize, Serialize};
use weir_guest::state::OldValue;
use weir_guest::{
    Emitter, Error, ListState, MapState, OpenContext, Operator, Record, Result, ValueState,
    export_operator,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "passthrough")]
    mode: String,
    word: Option<String>,
    log: Option<String>,
}

fn passthrough() -> String {
    "passthrough".to_owned()
}

enum Faulty {
    Passthrough,
    ErrorOn(String),
    TrapOn(String),
    LoopOn(String),
    AllocOn(String),
    Isolation(Isolation),
    CountV1(ValueState<CountV1>),
    CountV2(ValueState<CountV2>),
    /// `count-v1` and `count-v2` with the count in a map state, under the map key `n`.
    MapCountV1(MapState<String, CountV1>),
    MapCountV2(MapState<String, CountV2>),
    /// `count-v1` and `count-v2` with the count as the one item of a list state.
    ListCountV1(ListState<CountV1>),
    ListCountV2(ListState<CountV2>),
}

#[derive(Clone, Serialize, Deserialize)]
struct CountV1 {
    count: u64,
}

#[derive(Clone, Serialize, Deserialize)]
struct CountV2 {
    total: u64,
    last_seen: String,
}

/// Reads version 1's `{count}` as version 2.
fn count_from_v1(from: u32, old: OldValue<'_>) -> Result<CountV2> {
    if from != 1 {
        return Err(Error::new(format!("no migration from version {from}")));
    }
    let v1: CountV1 = old.decode()?;
    Ok(CountV2 {
        total: v1.count,
        last_seen: String::new(),
    })
}

struct Isolation {
    a: ValueState<u64>,
    b: ValueState<u64>,
    m: MapState<String, u64>,
    l: ListState<String>,
}

impl Operator for Faulty {
    fn open(ctx: &mut OpenContext) -> Result<Self> {
        let config: Config = ctx.config()?;
        let word = || {
            config.word.clone().ok_or_else(|| {
                Error::new(format!(
                    "mode `{}` needs a `word` in the config",
                    config.mode
                ))
            })
        };
        weir_guest::info!(
            "faulty operator opened in mode {} (subtask {} of {})",
            config.mode,
            ctx.subtask(),
            ctx.parallelism()
        );
        if let Some(line) = &config.log {
            weir_guest::warn!("{line}");
        }
        Ok(match config.mode.as_str() {
            "passthrough" => Self::Passthrough,
            "error-on" => Self::ErrorOn(word()?),
            "trap-on" => Self::TrapOn(word()?),
            "loop-on" => Self::LoopOn(word()?),
            "alloc-on" => Self::AllocOn(word()?),
            "isolation" => Self::Isolation(Isolation {
                a: ctx.value_state("a")?,
                b: ctx.value_state("b")?,
                m: ctx.map_state("m")?,
                l: ctx.list_state("l")?,
            }),
            "count-v1" => Self::CountV1(ctx.value_state("count")?),
            "count-v2" => Self::CountV2(ctx.versioned_value_state("count", 2, count_from_v1)?),
            "map-count-v1" => Self::MapCountV1(ctx.map_state("counts")?),
            "map-count-v2" => {
                Self::MapCountV2(ctx.versioned_map_state("counts", 2, count_from_v1)?)
            }
            "list-count-v1" => Self::ListCountV1(ctx.list_state("counts")?),
            "list-count-v2" => {
                Self::ListCountV2(ctx.versioned_list_state("counts", 2, count_from_v1)?)
            }
            other => {
                return Err(Error::new(format!(
                    "unknown mode `{other}`; expected passthrough, error-on, trap-on, loop-on, \
                     alloc-on, isolation, count-v1, count-v2, map-count-v1, map-count-v2, list-count-v1 \
                     or list-count-v2"
                )));
            }
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
        let is = |word: &str| record.value == word.as_bytes();
        match self {
            Self::Passthrough => {}
            Self::ErrorOn(word) if is(word) => {
                return Err(Error::new(format!(
                    "faulty operator: error on value `{word}`"
                )));
            }
            Self::TrapOn(word) if is(word) => panic!("faulty operator: trap on value `{word}`"),
            Self::LoopOn(word) if is(word) => spin(),
            Self::AllocOn(word) if is(word) => allocate_forever(),
            Self::Isolation(state) => return state.process(record, out),
            Self::CountV1(state) => {
                let count = state.get()?.map_or(0, |c| c.count) + 1;
                state.set(&CountV1 { count })?;
                let key = record.key_str()?.unwrap_or_default();
                return out.emit_fmt(record.key, format_args!("{key}\t{count}"));
            }
            Self::CountV2(state) => {
                let total = state.get()?.map_or(0, |c| c.total) + 1;
                let last_seen = record.value_str()?.to_owned();
                let key = record.key_str()?.unwrap_or_default();
                out.emit_fmt(record.key, format_args!("{key}\t{total}\t{last_seen}"))?;
                return state.set(&CountV2 { total, last_seen });
            }
            Self::MapCountV1(map) => {
                let n = "n".to_owned();
                let count = map.get(&n)?.map_or(0, |c| c.count) + 1;
                map.insert(&n, &CountV1 { count })?;
                let key = record.key_str()?.unwrap_or_default();
                return out.emit_fmt(record.key, format_args!("{key}\t{count}"));
            }
            Self::ListCountV1(list) => {
                let count = list.get()?.pop().map_or(0, |c| c.count) + 1;
                list.clear()?;
                list.push(&CountV1 { count })?;
                let key = record.key_str()?.unwrap_or_default();
                return out.emit_fmt(record.key, format_args!("{key}\t{count}"));
            }
            Self::ListCountV2(list) => {
                let total = list.get()?.pop().map_or(0, |c| c.total) + 1;
                let last_seen = record.value_str()?.to_owned();
                let key = record.key_str()?.unwrap_or_default();
                out.emit_fmt(record.key, format_args!("{key}\t{total}\t{last_seen}"))?;
                list.clear()?;
                return list.push(&CountV2 { total, last_seen });
            }
            Self::MapCountV2(map) => {
                let n = "n".to_owned();
                let total = map.get(&n)?.map_or(0, |c| c.total) + 1;
                let last_seen = record.value_str()?.to_owned();
                let key = record.key_str()?.unwrap_or_default();
                out.emit_fmt(record.key, format_args!("{key}\t{total}\t{last_seen}"))?;
                return map.insert(&n, &CountV2 { total, last_seen });
            }
            Self::ErrorOn(_) | Self::TrapOn(_) | Self::LoopOn(_) | Self::AllocOn(_) => {}
        }
        out.emit_with_timestamp(record.key, record.value, record.timestamp);
        Ok(())
    }
}

impl Isolation {
    fn process(&self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
        let key = record
            .key_str()?
            .ok_or("isolation mode needs keyed records")?;
        let value = record.value_str()?.to_owned();

        let a = self.a.get()?.unwrap_or(0) + 1;
        self.a.set(&a)?;
        let b = self.b.get()?.unwrap_or(0) + 10;
        self.b.set(&b)?;
        let seen = self.m.get(&value)?.unwrap_or(0) + 1;
        self.m.insert(&value, &seen)?;
        self.l.push(&value)?;

        let map = self
            .m
            .entries()?
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";");
        let list = self.l.get()?.join("|");
        out.emit_fmt(record.key, format_args!("{key}\t{a}\t{b}\t{map}\t{list}"))
    }
}

/// Never returns: a busy loop the optimizer cannot remove.
fn spin() -> ! {
    let mut n = 0u64;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

/// Never returns: allocates and touches 1 MiB after 1 MiB until allocation fails (an abort,
/// which is a trap).
fn allocate_forever() -> ! {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        blocks.push(vec![1; 1 << 20]);
        black_box(&mut blocks);
    }
}

export_operator!(Faulty);
