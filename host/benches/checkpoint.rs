//! Incremental snapshots against full ones, in one run.
//!
//! A subtask's state of 1 M keys with ~100-byte values. One full snapshot, then, for 1 %,
//! 10 % and 100 % of the keys rewritten, one incremental snapshot each: bytes written and
//! their ratio to the full snapshot, the synchronous pause (freezing the dirty keys), and the
//! end-to-end duration (pause, pinning, encoding, writing to `file://`).
//! Last, the restore of the full artifact into an empty backend, as a job restores
//! (`restore_chain`: ranged reads through `object_store`, a window at a time, decoded and
//! applied on every core): its throughput, and its peak memory over the memory of the state
//! it rebuilt (allocator-counted).
//!
//! Between the two, the synchronous pause at a quarter of a state four times as large dirty
//! (`sync_pause_ms_1m_dirty` at the default size: 1 M dirty keys of 4 M) and the pinning it
//! leaves to be done beside processing (`pin_ms_1m_dirty`), and the rate of writes to that
//! state while a checkpoint of every two million writes (one million keys) is frozen, pinned
//! between batches of writes, encoded and written beside them, against the same writes
//! without checkpoints (issue 32, point 3).
//!
//! `cargo bench -p weir-host --bench checkpoint [-- KEYS [restore]]` (`restore`: only the
//! full snapshot, then its restore five times, for profiling it)

mod counting;
mod profiles;

use std::time::{Duration, Instant};

use profiles::{VALUE_LEN, write};
use weir_host::checkpoint::storage::{open_store, put_increment, restore_chain};
use weir_host::ids::SubtaskIndex;
use weir_host::partition::KeyGroups;
use weir_host::state::{KeyedStateBackend, PIN_STEP, StateId, StateKind};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    weir_host::disable_huge_pages();
    let keys: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let restore_only = std::env::args().skip(1).any(|a| a == "restore");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, prefix) =
        open_store(&format!("file://{}/store", dir.path().display())).expect("store");
    let (mut backend, state) = profiles(keys);
    eprintln!("checkpoint: {keys} keys, {VALUE_LEN}-byte values, one subtask, file:// store");

    let started = Instant::now();
    let full = backend.snapshot();
    let full_pause = started.elapsed();
    let full_path = prefix.clone().join("full");
    let full_bytes = runtime
        .block_on(put_increment(store.as_ref(), &full_path, &full))
        .expect("put full");
    let full_total = started.elapsed();
    if restore_only {
        drop((backend, full));
        for _ in 0..RESTORE_ROUNDS {
            restore(&runtime, store.as_ref(), &full_path, full_bytes, keys);
        }
        return;
    }
    drop(full);
    eprintln!(
        "full snapshot: {full_bytes} bytes, pause {:.1} ms, total {:.1} ms",
        ms(full_pause),
        ms(full_total)
    );

    for (label, fraction) in [("1pct", 0.01), ("10pct", 0.10), ("100pct", 1.0)] {
        let dirty = ((keys as f64) * fraction) as u64;
        // Spread the rewritten keys over the whole key space.
        let stride = (keys / dirty.max(1)).max(1);
        for n in 0..dirty {
            write(&mut backend, state, (n * stride) % keys, 1);
        }
        let started = Instant::now();
        backend.freeze(backend.epoch());
        let pause = started.elapsed();
        let increment = backend.pin_frozen(usize::MAX).expect("pinned");
        let path = prefix.clone().join(format!("inc-{label}"));
        let bytes = runtime
            .block_on(put_increment(store.as_ref(), &path, &increment))
            .expect("put increment");
        let total = started.elapsed();
        eprintln!(
            "{label}: {} dirty keys, {bytes} bytes, pause {:.2} ms, total {:.1} ms",
            increment.changes(),
            ms(pause),
            ms(total)
        );
        println!(
            "bench: bytes_ratio_{label} = {:.4} ratio",
            bytes as f64 / full_bytes as f64
        );
        println!("bench: checkpoint_ms_{label} = {:.1} ms", ms(total));
        match label {
            "1pct" if dirty == 10_000 => {
                println!("bench: sync_pause_ms_10k_dirty = {:.2} ms", ms(pause))
            }
            "10pct" if dirty == 100_000 => {
                println!("bench: sync_pause_ms_100k_dirty = {:.2} ms", ms(pause))
            }
            _ => println!("bench: sync_pause_ms_{label} = {:.2} ms", ms(pause)),
        }
    }

    drop(backend);
    pause_at_scale(&runtime, &store, &prefix, keys);

    restore(&runtime, store.as_ref(), &full_path, full_bytes, keys);
}

/// Restores the full artifact at `path` (`bytes` long, `keys` keys) into an empty backend and
/// prints the throughput and the peak memory over the restored state's.
fn restore(
    runtime: &tokio::runtime::Runtime,
    store: &dyn object_store::ObjectStore,
    path: &object_store::path::Path,
    bytes: u64,
    keys: u64,
) {
    let groups = KeyGroups::default();
    let range = groups.range_of(SubtaskIndex(0), 1);
    let before = counting::live();
    counting::reset_peak();
    let started = Instant::now();
    let mut restored = KeyedStateBackend::new(groups, range);
    runtime
        .block_on(restore_chain(
            store,
            std::slice::from_ref(path),
            range,
            &mut restored,
        ))
        .expect("restore");
    let elapsed = started.elapsed();
    let state = counting::live() - before;
    let peak = counting::peak() - before;
    assert_eq!(restored.stats().entries as u64, keys, "every key restored");
    eprintln!(
        "restore: {:.1} ms, state {:.1} MB, peak {:.1} MB above what was there before",
        ms(elapsed),
        state as f64 / 1e6,
        peak as f64 / 1e6
    );
    println!(
        "bench: restore_mb_per_sec = {:.0} MB/s",
        bytes as f64 / 1e6 / elapsed.as_secs_f64()
    );
    println!(
        "bench: restore_peak_over_state_ratio = {:.3} ratio",
        peak as f64 / state as f64
    );
}

/// Restores `-- KEYS restore` runs, for profiling the restore alone.
const RESTORE_ROUNDS: usize = 5;

/// One subtask's backend (every key group) holding `keys` profiles, written once.
fn profiles(keys: u64) -> (KeyedStateBackend, StateId) {
    let groups = KeyGroups::default();
    let mut backend = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
    let state = backend
        .declare("profile", StateKind::Value)
        .expect("declare");
    for i in 0..keys {
        write(&mut backend, state, i, 0);
    }
    (backend, state)
}

/// Writes `dirty` keys spread over the whole key space of `keys`, marked with `round`, in
/// batches of [`BATCH`] writes; between two, as a subtask does between batches, pins up to
/// [`PIN_STEP`] entries of a frozen snapshot if there is one, handing the increment to
/// `pinned` once every entry is.
fn rewrite_spread(
    backend: &mut KeyedStateBackend,
    state: StateId,
    keys: u64,
    dirty: u64,
    round: u64,
    mut pinned: impl FnMut(weir_host::state::Increment),
) {
    let stride = (keys / dirty.max(1)).max(1);
    for n in 0..dirty {
        // Shifted by the round, so that successive rounds dirty other keys.
        write(backend, state, (n * stride + round) % keys, round);
        if (n + 1).is_multiple_of(BATCH)
            && backend.is_pinning()
            && let Some(increment) = backend.pin_frozen(PIN_STEP)
        {
            pinned(increment);
        }
    }
}

/// Writes per batch, in [`rewrite_spread`].
const BATCH: u64 = 1024;

/// The pause of a snapshot with `keys` dirty keys in a state of 4 × `keys`, then the write
/// rate with and without a checkpoint every 2 × `keys` writes (each of `keys` keys written
/// twice: at one write per dirty key, encoding and writing an increment take longer than the
/// writes between checkpoints, and the rate would measure the upload instead).
fn pause_at_scale(
    runtime: &tokio::runtime::Runtime,
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    prefix: &object_store::path::Path,
    keys: u64,
) {
    let total = 4 * keys;
    let (mut backend, state) = profiles(total);
    drop(backend.snapshot());
    rewrite_spread(&mut backend, state, total, keys, 1, drop);
    let started = Instant::now();
    backend.freeze(backend.epoch());
    let pause = started.elapsed();
    let increment = backend.pin_frozen(usize::MAX).expect("pinned");
    let pinned = started.elapsed() - pause;
    eprintln!(
        "{} dirty keys of {total}: pause {:.2} ms, then pinned in {:.1} ms beside processing",
        increment.changes(),
        ms(pause),
        ms(pinned)
    );
    drop(increment);
    let label = if keys == 1_000_000 {
        "1m_dirty".to_string()
    } else {
        format!("{keys}_of_{total}")
    };
    println!("bench: sync_pause_ms_{label} = {:.2} ms", ms(pause));
    println!("bench: pin_ms_{label} = {:.1} ms", ms(pinned));

    let rounds = 4;
    let mut rate = |checkpoints: bool, first_round: u64| {
        let started = Instant::now();
        let mut upload: Option<tokio::task::JoinHandle<()>> = None;
        for round in first_round..first_round + rounds {
            for _ in 0..2 {
                rewrite_spread(&mut backend, state, total, keys, round, |increment| {
                    // Pinned: its encoding and writing run beside the next writes.
                    let path = prefix.clone().join(format!("r{round}"));
                    let store = store.clone();
                    upload = Some(runtime.spawn(async move {
                        put_increment(store.as_ref(), &path, &increment)
                            .await
                            .expect("put increment");
                    }));
                });
            }
            if checkpoints {
                // As a subtask does at a barrier: the previous snapshot's pinning ends (here it
                // always has), and its upload must have ended; then this one is frozen, to be
                // pinned between the next writes.
                if let Some(increment) = backend.pin_frozen(usize::MAX) {
                    runtime
                        .block_on(put_increment(
                            store.as_ref(),
                            &prefix.clone().join("late"),
                            &increment,
                        ))
                        .expect("put increment");
                }
                if let Some(previous) = upload.take() {
                    runtime.block_on(previous).expect("upload");
                }
                backend.freeze(backend.epoch());
            }
        }
        // The last snapshot's pinning counts, as the old synchronous one did; its upload,
        // like the last upload before, does not.
        let last = backend.pin_frozen(usize::MAX);
        let elapsed = started.elapsed();
        drop(last);
        if let Some(last) = upload {
            runtime.block_on(last).expect("upload");
        }
        // Untimed: without it, the next run's first checkpoint would take this run's writes.
        drop(backend.snapshot());
        (rounds * 2 * keys) as f64 / elapsed.as_secs_f64()
    };
    // A first run with checkpoints warms what they allocate (the first ones in a process
    // fault in fresh pages); then alternated, so that a slow phase of the machine hits both.
    rate(true, 2);
    let (without_1, with_1) = (rate(false, 2 + rounds), rate(true, 2 + 2 * rounds));
    let (with_2, without_2) = (rate(true, 2 + 3 * rounds), rate(false, 2 + 4 * rounds));
    let (with, without) = ((with_1 + with_2) / 2.0, (without_1 + without_2) / 2.0);
    eprintln!(
        "writes to {total} keys: {without_1:.0}, {without_2:.0} records/s without checkpoints, \
         {with_1:.0}, {with_2:.0} with one every {} writes",
        2 * keys
    );
    println!("bench: records_per_sec_without = {without:.0} records/s");
    println!("bench: records_per_sec_during_checkpoints = {with:.0} records/s");
    println!(
        "bench: during_checkpoints_ratio = {:.3} ratio",
        with / without
    );
}
