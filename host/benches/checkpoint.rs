//! Incremental snapshots against full ones, in one run.
//!
//! A subtask's state of 1 M keys with ~100-byte values. One full snapshot, then, for 1 %,
//! 10 % and 100 % of the keys rewritten, one incremental snapshot each: bytes written and
//! their ratio to the full snapshot, the synchronous pause (taking the dirty keys and pinning
//! their values), and the end-to-end duration (pause, encoding, writing to `file://`).
//! Last, the restore of the full artifact into an empty backend, as a job restores
//! (`restore_chain`: ranged reads through `object_store`, a window at a time, decoded and
//! applied on every core): its throughput, and its peak memory over the memory of the state
//! it rebuilt (allocator-counted).
//!
//! `cargo bench -p weir-host --bench checkpoint [-- KEYS]`

mod counting;
mod profiles;

use std::time::{Duration, Instant};

use profiles::{VALUE_LEN, write};
use weir_host::checkpoint::storage::{open_store, put_increment, restore_chain};
use weir_host::ids::SubtaskIndex;
use weir_host::partition::KeyGroups;
use weir_host::state::{KeyedStateBackend, StateKind};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let keys: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, prefix) =
        open_store(&format!("file://{}/store", dir.path().display())).expect("store");
    let groups = KeyGroups::default();
    let range = groups.range_of(SubtaskIndex(0), 1);
    let mut backend = KeyedStateBackend::new(groups, range);
    let state = backend
        .declare("profile", StateKind::Value)
        .expect("declare");
    for i in 0..keys {
        write(&mut backend, state, i, 0);
    }
    eprintln!("checkpoint: {keys} keys, {VALUE_LEN}-byte values, one subtask, file:// store");

    let started = Instant::now();
    let full = backend.snapshot();
    let full_pause = started.elapsed();
    let full_path = prefix.clone().join("full");
    let full_bytes = runtime
        .block_on(put_increment(store.as_ref(), &full_path, &full))
        .expect("put full");
    let full_total = started.elapsed();
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
        let increment = backend.snapshot();
        let pause = started.elapsed();
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

    let before = counting::live();
    counting::reset_peak();
    let started = Instant::now();
    let mut restored = KeyedStateBackend::new(groups, range);
    runtime
        .block_on(restore_chain(
            store.as_ref(),
            std::slice::from_ref(&full_path),
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
        full_bytes as f64 / 1e6 / elapsed.as_secs_f64()
    );
    println!(
        "bench: restore_peak_over_state_ratio = {:.3} ratio",
        peak as f64 / state as f64
    );
}
