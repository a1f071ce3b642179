//! Event-time windows: tumbling, sliding (hopping) and session windows per record key, with
//! allowed lateness and an incremental aggregate, built on keyed state and event-time timers
//! (nothing runs in the host: every language's SDK has the same library).
//!
//! ```no_run
//! use weir_guest::windows::{Count, Window, Windows};
//! use weir_guest::{Emitter, OpenContext, Operator, Record, Result, Timer};
//!
//! /// Per-page counts in tumbling one-minute windows.
//! struct PageCounts {
//!     windows: Windows<Count>,
//! }
//!
//! fn emit(window: Window<'_, u64>, out: &mut Emitter) -> Result<()> {
//!     let page = String::from_utf8_lossy(window.key);
//!     let line = serde_json::json!({
//!         "page": page, "start": window.start, "end": window.end, "count": window.result,
//!     });
//!     out.emit_json(Some(window.key), &line)
//! }
//!
//! impl Operator for PageCounts {
//!     fn open(ctx: &mut OpenContext) -> Result<Self> {
//!         let windows = Windows::tumbling(ctx, "per-page", 60_000, Count)?.allowed_lateness(5_000);
//!         Ok(Self { windows })
//!     }
//!
//!     fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
//!         self.windows.add(record, (), out, emit)?;
//!         Ok(())
//!     }
//!
//!     fn on_timer(&mut self, timer: &Timer<'_>, out: &mut Emitter) -> Result<()> {
//!         self.windows.on_timer(timer, out, emit)?;
//!         Ok(())
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! Semantics (those of Flink's event-time windows, as in the Python and JavaScript SDKs):
//!
//! - A window is the interval `[start, end)` of event time, in milliseconds.
//!   [`Windows::tumbling`]: the window of a record at `ts` starts at `ts` rounded down to a
//!   multiple of the size. [`Windows::sliding`]: every window of the size whose start is a
//!   multiple of the slide and that contains `ts`. [`Windows::session`]: a record opens
//!   `[ts, ts + gap)`; sessions of a key that intersect or touch merge, their accumulators
//!   merged.
//! - A window fires when the watermark reaches `end - 1`: the function given to
//!   [`Windows::on_timer`] receives its key, bounds and aggregate.
//! - [`Windows::allowed_lateness`] keeps a window's state until the watermark reaches
//!   `end - 1 + lateness`. A record that comes after its window fired but within the lateness
//!   updates the window, which fires again at once (from [`Windows::add`]). A record late for
//!   all its windows is dropped and counted: in [`Windows::dropped_late`] (in memory only) and
//!   in the host's count ([`crate::metrics`]), which the run summary and `/metrics` show.
//!
//! State and timers: a window set named `name` keeps its open windows in the map state
//! `window:{name}` (as the Python and JavaScript libraries do), one entry per window under
//! its start, and registers event-time timers tagged `0xFFFF_0000 | hash15(name) << 1` (at
//! `end - 1`) and that tag `| 1` (at `end - 1 + lateness`, when the lateness is not 0), where
//! `hash15` folds the 32-bit FNV-1a hash of the name to 15 bits. Keep the operator's own tags
//! below `0xFFFF_0000`; [`Windows::on_timer`] returns `false` for timers that are not the
//! set's.
//!
//! Cost: tumbling and sliding windows read the entries of every window a batch's records (or
//! its fired timers) reach in one host call (`map-get-many`), at the set's first use in the
//! batch, and keep them up to date with their own writes; a session reads all the key's
//! sessions, one host call per record. Writes go out with the batch's other writes, in one
//! call per batch. Each window costs one timer (two with lateness).

use std::ops::Add;

use serde::{Serialize, de::DeserializeOwned};

use crate::state::batch::{self, ColumnsOf};
use crate::{Emitter, Error, MapState, OpenContext, Record, Result, TimeDomain, Timer, Timers};

/// The lowest timer tag the windows library uses.
pub const TAG_BASE: u32 = 0xFFFF_0000;

/// An incremental aggregate: a window keeps one accumulator, never its records.
pub trait Aggregate {
    /// What each record adds.
    type Input;
    /// What a window keeps, and what it fires with.
    type Acc: Serialize + DeserializeOwned + Clone + 'static;
    /// The accumulator after `input` (`acc` is `None` for a window's first record).
    fn add(&self, acc: Option<Self::Acc>, input: Self::Input) -> Self::Acc;
    /// Two accumulators of sessions that merge, the earlier first.
    fn merge(&self, earlier: Self::Acc, later: Self::Acc) -> Self::Acc;
}

/// Counts records (input `()`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Count;

impl Aggregate for Count {
    type Input = ();
    type Acc = u64;
    fn add(&self, acc: Option<u64>, (): ()) -> u64 {
        acc.unwrap_or(0) + 1
    }
    fn merge(&self, earlier: u64, later: u64) -> u64 {
        earlier + later
    }
}

/// Sums the inputs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sum<T>(std::marker::PhantomData<T>);

impl<T> Sum<T> {
    /// A sum of `T`s.
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T> Aggregate for Sum<T>
where
    T: Add<Output = T> + Serialize + DeserializeOwned + Clone + 'static,
{
    type Input = T;
    type Acc = T;
    fn add(&self, acc: Option<T>, input: T) -> T {
        match acc {
            Some(acc) => acc + input,
            None => input,
        }
    }
    fn merge(&self, earlier: T, later: T) -> T {
        earlier + later
    }
}

/// The least input.
#[derive(Clone, Copy, Debug, Default)]
pub struct Min<T>(std::marker::PhantomData<T>);

impl<T> Min<T> {
    /// The least of `T`s.
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T: PartialOrd + Serialize + DeserializeOwned + Clone + 'static> Aggregate for Min<T> {
    type Input = T;
    type Acc = T;
    fn add(&self, acc: Option<T>, input: T) -> T {
        match acc {
            Some(acc) if acc <= input => acc,
            _ => input,
        }
    }
    fn merge(&self, earlier: T, later: T) -> T {
        self.add(Some(earlier), later)
    }
}

/// The greatest input.
#[derive(Clone, Copy, Debug, Default)]
pub struct Max<T>(std::marker::PhantomData<T>);

impl<T> Max<T> {
    /// The greatest of `T`s.
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T: PartialOrd + Serialize + DeserializeOwned + Clone + 'static> Aggregate for Max<T> {
    type Input = T;
    type Acc = T;
    fn add(&self, acc: Option<T>, input: T) -> T {
        match acc {
            Some(acc) if acc >= input => acc,
            _ => input,
        }
    }
    fn merge(&self, earlier: T, later: T) -> T {
        self.add(Some(earlier), later)
    }
}

/// Reduces the inputs with a function `f(acc, input) -> acc`, the first input being the first
/// accumulator. It also merges sessions (`f(earlier, later)`), so it must be associative.
#[derive(Clone, Copy, Debug)]
pub struct Reduce<T, F>(pub F, std::marker::PhantomData<T>);

impl<T, F: Fn(T, T) -> T> Reduce<T, F> {
    /// A reduction with `f`.
    pub fn new(f: F) -> Self {
        Self(f, std::marker::PhantomData)
    }
}

impl<T, F> Aggregate for Reduce<T, F>
where
    T: Serialize + DeserializeOwned + Clone + 'static,
    F: Fn(T, T) -> T,
{
    type Input = T;
    type Acc = T;
    fn add(&self, acc: Option<T>, input: T) -> T {
        match acc {
            Some(acc) => (self.0)(acc, input),
            None => input,
        }
    }
    fn merge(&self, earlier: T, later: T) -> T {
        (self.0)(earlier, later)
    }
}

/// A window that fires: its key, bounds and aggregate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window<'a, R> {
    /// The key whose window it is.
    pub key: &'a [u8],
    /// The first millisecond of the window.
    pub start: i64,
    /// The millisecond after its last.
    pub end: i64,
    /// The aggregate of its records.
    pub result: &'a R,
}

/// Which windows a record belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // The fields are the constructors' arguments.
pub enum WindowKind {
    /// [`Windows::tumbling`].
    Tumbling { size_ms: i64 },
    /// [`Windows::sliding`].
    Sliding { size_ms: i64, slide_ms: i64 },
    /// [`Windows::session`].
    Session { gap_ms: i64 },
}

/// One open window of a key.
#[derive(Clone, Debug)]
struct Open<A> {
    start: i64,
    end: i64,
    acc: A,
    /// It fired already: a late record within the lateness fires it again at once.
    fired: bool,
}

/// A window as its map entry holds it, under its start: `[end, acc, fired]` (a CBOR array,
/// shorter than a map with field names).
type Entry<A> = (i64, A, bool);

/// A set of windows per key, over keyed state and timers. See the [module docs](self).
pub struct Windows<A: Aggregate> {
    kind: WindowKind,
    aggregate: A,
    lateness_ms: i64,
    open: MapState<i64, Entry<A::Acc>>,
    timers: Timers,
    fire_tag: u32,
    dropped_late: u64,
    ahead: ReadAhead<A::Acc>,
}

/// The stored entries of the windows a batch's records (or its fired timers) reach: read for
/// the whole batch in one host call (`map-get-many`) at the set's first use in the batch, and
/// kept up to date with the set's own writes, so a record costs no host call to read its
/// windows. The map state `window:{name}` is the set's alone, so nothing else writes there.
/// Sessions read a key's whole map and do not read ahead.
struct ReadAhead<A> {
    /// The batch they were read for ([`batch::generation`]); 0 before the first.
    generation: u64,
    /// `((slot, start), entry)`, sorted; `None` where the key has no window at that start.
    entries: Vec<(WindowAt, Option<Entry<A>>)>,
    /// Where each slot's entries begin in `entries` (and, one past the last slot, where they
    /// end): a slot's few windows are found without a search through the whole batch's.
    slot_starts: Vec<u32>,
}

/// A window of a batch's key: its key slot and its start.
type WindowAt = (u32, i64);

impl<A> ReadAhead<A> {
    fn new() -> Self {
        Self {
            generation: 0,
            entries: Vec::new(),
            slot_starts: Vec::new(),
        }
    }

    /// Keeps `entries` (sorted by window) as the batch's read-ahead.
    fn fill(&mut self, entries: Vec<(WindowAt, Option<Entry<A>>)>) {
        self.slot_starts.clear();
        for (index, ((slot, _), _)) in entries.iter().enumerate() {
            while self.slot_starts.len() <= *slot as usize {
                self.slot_starts.push(index as u32);
            }
        }
        self.slot_starts.push(entries.len() as u32);
        self.entries = entries;
    }

    /// The entry of the window of `slot` at `start`, if it was read ahead.
    fn get_mut(&mut self, slot: u32, start: i64) -> Option<&mut Option<Entry<A>>> {
        if self.generation != batch::generation() {
            return None;
        }
        let from = *self.slot_starts.get(slot as usize)? as usize;
        let to = *self.slot_starts.get(slot as usize + 1)? as usize;
        self.entries[from..to]
            .iter_mut()
            .find(|((_, at), _)| *at == start)
            .map(|(_, entry)| entry)
    }
}

/// Whether the window ending at `end` is due to fire at watermark `wm`.
fn is_due(end: i64, wm: Option<i64>) -> bool {
    wm.is_some_and(|wm| end - 1 <= wm)
}

/// The 32-bit FNV-1a hash of `name`, folded to 15 bits.
fn hash15(name: &str) -> u32 {
    let mut h: u32 = 0x811C_9DC5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h ^ (h >> 15) ^ (h >> 30)) & 0x7FFF
}

fn positive(what: &str, ms: i64) -> Result<i64> {
    if ms > 0 {
        Ok(ms)
    } else {
        Err(Error::new(format!(
            "{what} is a positive number of milliseconds, not {ms}"
        )))
    }
}

impl<A: Aggregate> Windows<A> {
    /// Tumbling windows of `size_ms`, named `name` (the name of their state).
    pub fn tumbling(ctx: &mut OpenContext, name: &str, size_ms: i64, aggregate: A) -> Result<Self> {
        let size_ms = positive("a tumbling window's size", size_ms)?;
        Self::new(ctx, name, WindowKind::Tumbling { size_ms }, aggregate)
    }

    /// Windows of `size_ms` starting every `slide_ms`.
    pub fn sliding(
        ctx: &mut OpenContext,
        name: &str,
        size_ms: i64,
        slide_ms: i64,
        aggregate: A,
    ) -> Result<Self> {
        let size_ms = positive("a sliding window's size", size_ms)?;
        let slide_ms = positive("a sliding window's slide", slide_ms)?;
        Self::new(
            ctx,
            name,
            WindowKind::Sliding { size_ms, slide_ms },
            aggregate,
        )
    }

    /// Sessions that close after `gap_ms` without a record of their key.
    pub fn session(ctx: &mut OpenContext, name: &str, gap_ms: i64, aggregate: A) -> Result<Self> {
        let gap_ms = positive("a session's gap", gap_ms)?;
        Self::new(ctx, name, WindowKind::Session { gap_ms }, aggregate)
    }

    fn new(ctx: &mut OpenContext, name: &str, kind: WindowKind, aggregate: A) -> Result<Self> {
        if !matches!(kind, WindowKind::Session { .. }) {
            batch::with_runtime(|runtime| {
                runtime.columns.wanted = true;
                Ok(())
            })?;
        }
        Ok(Self {
            kind,
            aggregate,
            lateness_ms: 0,
            open: ctx.map_state(&format!("window:{name}"))?,
            timers: ctx.timers(),
            fire_tag: TAG_BASE | (hash15(name) << 1),
            dropped_late: 0,
            ahead: ReadAhead::new(),
        })
    }

    /// Keeps windows `ms` past their end for late records (default 0).
    pub fn allowed_lateness(mut self, ms: i64) -> Self {
        self.lateness_ms = ms.max(0);
        self
    }

    /// Records dropped as too late for all their windows, by this instance.
    pub fn dropped_late(&self) -> u64 {
        self.dropped_late
    }

    /// The windows' kind.
    pub fn kind(&self) -> WindowKind {
        self.kind
    }

    fn cleanup_tag(&self) -> u32 {
        self.fire_tag | 1
    }

    /// Whether the window ending at `end` can take no more records at watermark `wm`.
    fn is_late(&self, end: i64, wm: Option<i64>) -> bool {
        wm.is_some_and(|wm| end - 1 + self.lateness_ms <= wm)
    }

    /// The key's open windows among those starting at `starts` (all of them if `None`),
    /// ordered by start.
    fn load(&mut self, starts: Option<&[i64]>) -> Result<Vec<Open<A::Acc>>> {
        let open = |(start, (end, acc, fired)): (i64, Entry<A::Acc>)| Open {
            start,
            end,
            acc,
            fired,
        };
        let mut windows: Vec<_> = match starts {
            None => self.open.entries()?.into_iter().map(open).collect(),
            Some(starts) => {
                self.read_ahead()?;
                let slot = batch::current_slot(self.open.name())?;
                let mut windows = Vec::with_capacity(starts.len());
                for &start in starts {
                    let entry = match self.ahead.get_mut(slot, start) {
                        Some(entry) => entry.clone(),
                        None => self.open.get(&start)?,
                    };
                    if let Some(entry) = entry {
                        windows.push(open((start, entry)));
                    }
                }
                windows
            }
        };
        windows.sort_unstable_by_key(|w| w.start);
        Ok(windows)
    }

    /// Reads the entries of every window the batch's records or fired timers reach, once per
    /// batch (see [`ReadAhead`]).
    fn read_ahead(&mut self) -> Result<()> {
        let generation = batch::generation();
        if self.ahead.generation == generation {
            return Ok(());
        }
        self.ahead.generation = generation;
        self.ahead.fill(Vec::new());
        let wm = self.timers.watermark();
        let mut reads = Vec::new();
        batch::with_runtime(|runtime| {
            let columns = &runtime.columns;
            let rows = columns.slots.iter().zip(&columns.timestamps);
            match columns.of {
                ColumnsOf::Records => {
                    for (&slot, &ts) in rows {
                        if let (true, Some(ts)) = (slot != batch::NO_SLOT, ts) {
                            self.each_start(ts, |start| {
                                if !self.is_late(start + self.size_ms(), wm) {
                                    reads.push((slot, start));
                                }
                            });
                        }
                    }
                }
                ColumnsOf::Timers(TimeDomain::EventTime) => {
                    for ((&slot, &ts), &tag) in rows.zip(&columns.tags) {
                        let start = ts.and_then(|ts| self.timer_window_start(tag, ts));
                        if let Some(start) = start {
                            reads.push((slot, start));
                        }
                    }
                }
                ColumnsOf::Timers(TimeDomain::ProcessingTime) => {}
            }
            Ok(())
        })?;
        reads.sort_unstable();
        reads.dedup();
        if reads.is_empty() {
            return Ok(());
        }
        let found = self.open.get_many(&reads)?;
        self.ahead.fill(reads.into_iter().zip(found).collect());
        Ok(())
    }

    /// Writes back the windows [`Self::load`] returned (`loaded`: their starts) as `open`
    /// holds them now: gone, changed or new.
    fn store(&mut self, loaded: &[i64], open: &[Open<A::Acc>]) -> Result<()> {
        let slot = batch::current_slot(self.open.name())?;
        for start in loaded {
            if !open.iter().any(|w| w.start == *start) {
                self.open.remove(start)?;
                if let Some(entry) = self.ahead.get_mut(slot, *start) {
                    *entry = None;
                }
            }
        }
        for w in open {
            let entry = (w.end, w.acc.clone(), w.fired);
            self.open.insert(&w.start, &entry)?;
            if let Some(ahead) = self.ahead.get_mut(slot, w.start) {
                *ahead = Some(entry);
            }
        }
        Ok(())
    }

    /// The size of tumbling and sliding windows (sessions have none: 0).
    fn size_ms(&self) -> i64 {
        match self.kind {
            WindowKind::Tumbling { size_ms } | WindowKind::Sliding { size_ms, .. } => size_ms,
            WindowKind::Session { .. } => 0,
        }
    }

    /// The starts of the windows `ts` belongs to, for tumbling and sliding windows.
    fn starts_of(&self, ts: i64) -> Vec<i64> {
        let mut starts = Vec::new();
        self.each_start(ts, |start| starts.push(start));
        starts
    }

    /// Calls `f` with the start of every window `ts` belongs to (latest first), for tumbling
    /// and sliding windows.
    fn each_start(&self, ts: i64, mut f: impl FnMut(i64)) {
        match self.kind {
            WindowKind::Tumbling { size_ms } => f(ts - ts.rem_euclid(size_ms)),
            WindowKind::Sliding { size_ms, slide_ms } => {
                let mut start = ts - ts.rem_euclid(slide_ms);
                while start + size_ms > ts {
                    f(start);
                    start -= slide_ms;
                }
            }
            WindowKind::Session { .. } => {}
        }
    }

    /// The start of the window an event-time timer of this set at `ts` is for (its firing,
    /// or its end of lateness), for tumbling and sliding windows; `None` for other timers.
    fn timer_window_start(&self, tag: u32, ts: i64) -> Option<i64> {
        let end = if tag == self.fire_tag {
            ts + 1
        } else if tag == self.cleanup_tag() {
            ts + 1 - self.lateness_ms
        } else {
            return None;
        };
        match self.kind {
            WindowKind::Session { .. } => None,
            _ => Some(end - self.size_ms()),
        }
    }

    /// Registers the timers of a new window: the one that fires it, unless `fire` is false
    /// (it fires at once, the watermark being past its end already, as Flink's trigger
    /// does), and the one that drops it after the lateness.
    fn schedule(&self, window: &Open<A::Acc>, fire: bool) -> Result<()> {
        let fire_at = window.end - 1;
        if self.lateness_ms > 0 {
            self.timers
                .register_event_time(fire_at + self.lateness_ms, self.cleanup_tag())?;
        }
        if fire {
            self.timers.register_event_time(fire_at, self.fire_tag)?;
        }
        Ok(())
    }

    fn unschedule(&self, window: &Open<A::Acc>) -> Result<()> {
        let fire_at = window.end - 1;
        if self.lateness_ms > 0 {
            self.timers
                .delete_event_time(fire_at + self.lateness_ms, self.cleanup_tag())?;
        }
        self.timers.delete_event_time(fire_at, self.fire_tag)
    }

    /// Adds `record` (with `input` for the aggregate) to its windows; returns `false` if it
    /// was too late for all of them (dropped and counted). A window that had fired fires
    /// again at once with `on_fire`. The record needs a key and a timestamp.
    pub fn add(
        &mut self,
        record: &Record<'_>,
        input: A::Input,
        out: &mut Emitter,
        mut on_fire: impl FnMut(Window<'_, A::Acc>, &mut Emitter) -> Result<()>,
    ) -> Result<bool>
    where
        A::Input: Clone,
    {
        let key = record
            .key
            .ok_or("windows are per key: key the stream with key_by before this operator")?;
        let ts = record.timestamp.ok_or(
            "windows need records with a timestamp: set the source's timestamp (json-lines) or use a source that stamps records",
        )?;
        let wm = self.timers.watermark();
        let added = if let WindowKind::Session { gap_ms } = self.kind {
            let mut open = self.load(None)?;
            let loaded: Vec<i64> = open.iter().map(|w| w.start).collect();
            let added = self.add_session(
                &mut open,
                key,
                ts,
                ts + gap_ms,
                wm,
                input,
                out,
                &mut on_fire,
            )?;
            if added {
                self.store(&loaded, &open)?;
            }
            added
        } else {
            let size_ms = self.size_ms();
            let mut starts = self.starts_of(ts);
            // A window past its lateness takes no record: its entry is not even read.
            starts.retain(|start| !self.is_late(start + size_ms, wm));
            let mut open = self.load(Some(&starts))?;
            for &start in &starts {
                self.add_to(
                    &mut open,
                    key,
                    start,
                    start + size_ms,
                    wm,
                    input.clone(),
                    out,
                    &mut on_fire,
                )?;
            }
            self.store(&starts, &open)?;
            !starts.is_empty()
        };
        if !added {
            self.dropped_late += 1;
            crate::metrics::count_dropped_late(1);
        }
        Ok(added)
    }

    /// Adds to the window `[start, end)` of a tumbling or sliding set.
    #[allow(clippy::too_many_arguments)]
    fn add_to(
        &self,
        open: &mut Vec<Open<A::Acc>>,
        key: &[u8],
        start: i64,
        end: i64,
        wm: Option<i64>,
        input: A::Input,
        out: &mut Emitter,
        on_fire: &mut impl FnMut(Window<'_, A::Acc>, &mut Emitter) -> Result<()>,
    ) -> Result<bool> {
        if self.is_late(end, wm) {
            return Ok(false);
        }
        let index = match open.binary_search_by_key(&start, |w| w.start) {
            Ok(index) => {
                let window = &mut open[index];
                let acc = window.acc.clone();
                window.acc = self.aggregate.add(Some(acc), input);
                index
            }
            Err(index) => {
                let window = Open {
                    start,
                    end,
                    acc: self.aggregate.add(None, input),
                    fired: false,
                };
                self.schedule(&window, !is_due(end, wm))?;
                open.insert(index, window);
                index
            }
        };
        let window = &mut open[index];
        if window.fired || is_due(end, wm) {
            window.fired = true;
            on_fire(
                Window {
                    key,
                    start,
                    end,
                    result: &window.acc,
                },
                out,
            )?;
        }
        Ok(true)
    }

    /// Adds the session `[start, end)`, merged with the key's sessions it meets.
    #[allow(clippy::too_many_arguments)]
    fn add_session(
        &self,
        open: &mut Vec<Open<A::Acc>>,
        key: &[u8],
        start: i64,
        end: i64,
        wm: Option<i64>,
        input: A::Input,
        out: &mut Emitter,
        on_fire: &mut impl FnMut(Window<'_, A::Acc>, &mut Emitter) -> Result<()>,
    ) -> Result<bool> {
        let meets = |w: &Open<A::Acc>| w.start <= end && start <= w.end;
        // Late or not is the merged session's (as in Flink: a record late for a session of
        // its own still joins a live one it meets).
        let merged_end = open
            .iter()
            .filter(|w| meets(w))
            .map(|w| w.end)
            .fold(end, i64::max);
        if self.is_late(merged_end, wm) {
            return Ok(false);
        }
        let (meeting, rest): (Vec<_>, Vec<_>) =
            std::mem::take(open).into_iter().partition(|w| meets(w));
        *open = rest;
        let mut merged = Open {
            start,
            end,
            acc: self.aggregate.add(None, input),
            fired: false,
        };
        // The record falls inside one session: that session takes it as it is.
        let unchanged = meeting.len() == 1 && meeting[0].start <= start && end <= meeting[0].end;
        for window in meeting {
            merged.acc = if window.start <= merged.start {
                self.aggregate.merge(window.acc.clone(), merged.acc)
            } else {
                self.aggregate.merge(merged.acc, window.acc.clone())
            };
            merged.start = merged.start.min(window.start);
            merged.end = merged.end.max(window.end);
            if unchanged {
                merged.fired = window.fired;
            } else {
                self.unschedule(&window)?;
            }
        }
        if !unchanged {
            self.schedule(&merged, !is_due(merged.end, wm))?;
        }
        if merged.fired || is_due(merged.end, wm) {
            merged.fired = true;
            let window = Window {
                key,
                start: merged.start,
                end: merged.end,
                result: &merged.acc,
            };
            on_fire(window, out)?;
        }
        let index = open.partition_point(|w| w.start < merged.start);
        open.insert(index, merged);
        Ok(true)
    }

    /// Handles `timer` if it is one of this set's: fires the window it closes with
    /// `on_fire`, or drops a window past its lateness. Returns `false` for other timers.
    pub fn on_timer(
        &mut self,
        timer: &Timer<'_>,
        out: &mut Emitter,
        mut on_fire: impl FnMut(Window<'_, A::Acc>, &mut Emitter) -> Result<()>,
    ) -> Result<bool> {
        if timer.domain != TimeDomain::EventTime
            || (timer.tag != self.fire_tag && timer.tag != self.cleanup_tag())
        {
            return Ok(false);
        }
        let fire = timer.tag == self.fire_tag;
        // The window the timer is for: known by its start, but for sessions.
        let starts = self
            .timer_window_start(timer.tag, timer.timestamp)
            .map(|start| [start]);
        let mut open = self.load(starts.as_ref().map(|s| &s[..]))?;
        let loaded: Vec<i64> = open.iter().map(|w| w.start).collect();
        if fire {
            if let Some(index) = open.iter().position(|w| w.end - 1 == timer.timestamp) {
                let window = &mut open[index];
                window.fired = true;
                let fired = Window {
                    key: timer.key,
                    start: window.start,
                    end: window.end,
                    result: &window.acc,
                };
                on_fire(fired, out)?;
                if self.lateness_ms == 0 {
                    open.remove(index);
                }
            }
        } else {
            open.retain(|w| w.end - 1 + self.lateness_ms != timer.timestamp);
        }
        self.store(&loaded, &open)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::bindings::exports::weir::operator::processor::Context;
    use crate::state::batch;
    use crate::state::fake::FakeHost;

    #[test]
    fn tags_match_the_python_and_javascript_libraries() {
        // As `weir_sdk.windows._name_hash15` computes them.
        assert_eq!(
            [hash15("per-page"), hash15("per-user"), hash15("")],
            [5661, 18006, 8190]
        );
    }

    /// Drives a window set over the fake host: records of one key in the order given, the
    /// watermark set before each, and every due timer fired (in timestamp order) as the
    /// watermark moves. Returns what fired: (start, end, count).
    struct Harness {
        host: FakeHost,
        windows: Windows<Count>,
        fired: Vec<(i64, i64, u64)>,
    }

    impl Harness {
        fn new(kind: &str, lateness: i64) -> Self {
            let host = FakeHost::install();
            let mut ctx = OpenContext::new(Context {
                operator_name: "w".into(),
                subtask: 0,
                parallelism: 1,
                config: "{}".into(),
            });
            let windows = match kind {
                "tumbling" => Windows::tumbling(&mut ctx, "t", 10, Count),
                "sliding" => Windows::sliding(&mut ctx, "s", 10, 5, Count),
                _ => Windows::session(&mut ctx, "g", 5, Count),
            }
            .expect("declare")
            .allowed_lateness(lateness);
            Self {
                host,
                windows,
                fired: Vec::new(),
            }
        }

        fn record(&mut self, ts: i64, watermark: Option<i64>) -> bool {
            self.advance(watermark);
            let scope = batch::begin(1).expect("batch");
            batch::set_current_slot(0);
            let mut out = Emitter::new();
            let record = Record {
                key: Some(b"k"),
                value: b"",
                timestamp: Some(ts),
            };
            let fired = &mut self.fired;
            let added = self
                .windows
                .add(&record, (), &mut out, |w, _| {
                    fired.push((w.start, w.end, *w.result));
                    Ok(())
                })
                .expect("add");
            scope.finish().expect("flush");
            added
        }

        /// Moves the watermark and fires the timers due.
        fn advance(&mut self, watermark: Option<i64>) {
            self.host.0.borrow_mut().watermark = watermark;
            let Some(wm) = watermark else { return };
            loop {
                let due = {
                    let store = self.host.0.borrow();
                    store.timers.iter().find(|t| t.1 == 0 && t.2 <= wm).copied()
                };
                let Some(due) = due else { break };
                self.host.0.borrow_mut().timers.remove(&due);
                let scope = batch::begin(1).expect("batch");
                batch::set_current_slot(0);
                let timer = Timer {
                    key: b"k",
                    timestamp: due.2,
                    tag: due.3,
                    domain: TimeDomain::EventTime,
                };
                let fired = &mut self.fired;
                let mut out = Emitter::new();
                let ours = self
                    .windows
                    .on_timer(&timer, &mut out, |w, _| {
                        fired.push((w.start, w.end, *w.result));
                        Ok(())
                    })
                    .expect("timer");
                assert!(ours);
                scope.finish().expect("flush");
            }
        }

        fn pending(&self) -> usize {
            self.host.0.borrow().timers.len()
        }
    }

    #[test]
    fn tumbling_windows_fire_once_the_watermark_passes_and_drop_late_records() {
        let mut h = Harness::new("tumbling", 0);
        assert!(h.record(3, None));
        assert!(h.record(12, Some(2)));
        assert!(h.record(7, Some(2)));
        h.advance(Some(9));
        assert_eq!(h.fired, [(0, 10, 2)]);
        assert!(!h.record(8, Some(9)), "its window fired and is gone");
        assert_eq!(h.windows.dropped_late(), 1);
        h.advance(Some(i64::MAX));
        assert_eq!(h.fired, [(0, 10, 2), (10, 20, 1)]);
        assert_eq!(h.pending(), 0);
    }

    #[test]
    fn lateness_fires_again_for_each_late_record_then_cleans_up() {
        let mut h = Harness::new("tumbling", 5);
        h.record(1, None);
        h.advance(Some(9));
        assert!(h.record(2, Some(9)));
        assert!(h.record(4, Some(13)));
        assert_eq!(h.fired, [(0, 10, 1), (0, 10, 2), (0, 10, 3)]);
        assert!(!h.record(5, Some(14)), "past end - 1 + lateness");
        h.advance(Some(14));
        assert_eq!(h.pending(), 0);
        // A new window already due (within the lateness) fires at once, and only then.
        assert!(h.record(15, Some(20)));
        h.advance(Some(i64::MAX));
        assert_eq!(h.fired[3..], [(10, 20, 1)]);
        assert_eq!(h.pending(), 0);
    }

    #[test]
    fn sliding_windows_count_a_record_in_each_window_that_holds_it() {
        let mut h = Harness::new("sliding", 0);
        h.record(7, None);
        h.record(12, None);
        h.advance(Some(i64::MAX));
        let by_start: BTreeMap<i64, u64> = h.fired.iter().map(|&(s, _, c)| (s, c)).collect();
        assert_eq!(by_start, BTreeMap::from([(0, 1), (5, 2), (10, 1)]));
    }

    #[test]
    fn sessions_merge_when_they_meet_and_move_their_timer() {
        let mut h = Harness::new("session", 0);
        h.record(0, None);
        h.record(20, None);
        h.record(4, None); // [4, 9) meets [0, 5): [0, 9)
        h.record(9, None); // touches [0, 9): [0, 14)
        h.advance(Some(i64::MAX));
        assert_eq!(h.fired, [(0, 14, 3), (20, 25, 1)]);
        assert_eq!(h.pending(), 0);
    }

    /// Sliding windows of 10 ms every 5 ms per key, emitting `start:count` when one fires.
    struct SlidingCounts {
        windows: Windows<Count>,
    }

    fn emit_count(w: Window<'_, u64>, out: &mut Emitter) -> Result<()> {
        out.emit(Some(w.key), format!("{}:{}", w.start, w.result).as_bytes());
        Ok(())
    }

    impl crate::Operator for SlidingCounts {
        fn open(ctx: &mut OpenContext) -> Result<Self> {
            Ok(Self {
                windows: Windows::sliding(ctx, "s", 10, 5, Count)?,
            })
        }

        fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
            self.windows.add(record, (), out, emit_count).map(drop)
        }

        fn on_timer(&mut self, timer: &Timer<'_>, out: &mut Emitter) -> Result<()> {
            self.windows.on_timer(timer, out, emit_count).map(drop)
        }
    }

    #[test]
    fn a_batch_reads_its_windows_in_one_host_call_and_sees_its_own_writes() {
        use crate::bindings::exports::weir::operator::processor::{FiredTimers, Guest};
        use crate::bindings::weir::operator::types::{Blobs, TimeDomain as WitDomain};
        use crate::numbers::column;
        type Exported = crate::export::Exports<SlidingCounts>;

        let host = FakeHost::install();
        let context = Context {
            operator_name: "w".into(),
            subtask: 0,
            parallelism: 1,
            config: "{}".into(),
        };
        Exported::open(context).expect("open");
        // Keys a (slot 0) and b (slot 1); a's records at 1 and 3 share both their windows.
        let records = |records: &[(&str, i64)]| {
            let mut out = Emitter::new();
            for &(key, ts) in records {
                out.emit_with_timestamp(Some(key.as_bytes()), b"", Some(ts));
            }
            let slots = records.iter().map(|(key, _)| u32::from(*key == "b"));
            (out.take_batch().expect("batch"), column(slots))
        };
        let (batch, slots) = records(&[("a", 1), ("b", 2), ("a", 3), ("a", 12)]);
        Exported::process(batch, slots).expect("process");
        let calls = host.calls();
        assert_eq!((calls.map_get_many, calls.map_get), (1, 0));
        let (batch, slots) = records(&[("a", 4), ("b", 7)]);
        Exported::process(batch, slots).expect("process");
        assert_eq!((host.calls().map_get_many, host.calls().map_get), (2, 0));

        // The watermark passes 9: the windows [-5, 5) and [0, 10) of both keys fire.
        let due: Vec<(u32, i64, u32)> = (host.0.borrow().timers.iter())
            .filter(|t| t.2 <= 9)
            .map(|&(slot, _, ts, tag)| (slot, ts, tag))
            .collect();
        assert_eq!(due.len(), 4);
        let mut keys = Emitter::new();
        for (slot, _, _) in &due {
            keys.emit(None, if *slot == 0 { b"a" } else { b"b" });
        }
        let keys = keys.take_batch().expect("keys");
        let timers = FiredTimers {
            domain: WitDomain::EventTime,
            keys: Blobs {
                data: keys.data,
                ends: keys.value_ends,
            },
            key_slots: column(due.iter().map(|t| t.0)),
            timestamps: column(due.iter().map(|t| t.1)),
            tags: column(due.iter().map(|t| t.2)),
            watermark: Some(9),
        };
        let fired = Exported::on_timers(timers).expect("timers");
        let mut fired: Vec<&[u8]> = crate::record::BatchRecords::new(&fired)
            .expect("batch")
            .map(|r| r.expect("record").value)
            .collect();
        fired.sort();
        // a: 1, 3, 4 in [-5, 5) and [0, 10); b: 2 in [-5, 5), 2 and 7 in [0, 10).
        assert_eq!(fired, [&b"-5:1"[..], b"-5:3", b"0:2", b"0:3"]);
        assert_eq!((host.calls().map_get_many, host.calls().map_get), (3, 0));
    }
}
