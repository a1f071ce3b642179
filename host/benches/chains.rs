//! Bounded chains by re-writing the oldest entries, against a full snapshot every K
//! checkpoints, in one run.
//!
//! One subtask's state of 1 M keys with ~100-byte values, written once, then 200 checkpoints
//! while 1 % of the keys (at random) change before each. For each scheme: bytes written per
//! checkpoint against the pure dirty volume, space amplification (bytes of the chain's
//! artifacts ÷ bytes of a full snapshot of the same state), chain length, and the time to
//! restore the last checkpoint from `file://`. Steady-state figures average the last 100
//! checkpoints.
//!
//! `cargo bench -p weir-host --bench chains [-- KEYS]`

mod host_allocator;

mod profiles;

use std::time::Instant;

use profiles::write;
use tokio::sync::mpsc;
use weir_host::checkpoint::metadata::SubtaskHandle;
use weir_host::checkpoint::protocol::Ack;
use weir_host::checkpoint::storage::{open_store, restore_chain};
use weir_host::checkpoint::subtask_checkpoints::{SubtaskCheckpoints, SubtaskIdentity};
use weir_host::checkpoint::{ChainPolicy, CheckpointStore};
use weir_host::ids::{CheckpointId, SubtaskIndex};
use weir_host::partition::KeyGroups;
use weir_host::state::{KeyedStateBackend, StateKind};

const CHECKPOINTS: u64 = 200;
const STEADY_FROM: u64 = 101;
const FULL_EVERY: usize = 50;

struct Figures {
    bytes_per_checkpoint_over_dirty: f64,
    space_amplification: f64,
    max_chain_length: usize,
    restore_ms: f64,
}

fn run(keys: u64, label: &str, policy: ChainPolicy) -> Figures {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}/store", dir.path().display());
    let (store, prefix) = open_store(&url).expect("store");
    let store = CheckpointStore::new(store, &prefix, "chains");
    let groups = KeyGroups::default();
    let range = groups.range_of(SubtaskIndex(0), 1);
    let (acks_tx, mut acks) = mpsc::unbounded_channel();
    let mut checkpoints = SubtaskCheckpoints::new(
        store.clone(),
        runtime.handle().clone(),
        acks_tx,
        SubtaskIdentity {
            operator: "op".into(),
            operator_index: 0,
            subtask: SubtaskIndex(0),
            parallelism: 1,
            key_groups: groups,
            range,
        },
        label.into(),
        policy,
    );
    let mut backend = KeyedStateBackend::new(groups, range);
    let state = backend
        .declare("profile", StateKind::Value)
        .expect("declare");
    backend.seal_declarations();
    for i in 0..keys {
        write(&mut backend, state, i, 0);
    }
    let mut snapshot = |backend: &mut KeyedStateBackend, c: u64| -> SubtaskHandle {
        let id = CheckpointId(c);
        checkpoints.snapshot(backend, id, Default::default());
        checkpoints.settle(backend);
        let handle = match acks.blocking_recv().expect("ack") {
            Ack::Subtask {
                checkpoint, result, ..
            } if checkpoint == id => result.expect("uploaded"),
            other => panic!("unexpected {other:?}"),
        };
        // Retain only the latest: cleanup follows the chain.
        checkpoints.complete(id, id);
        handle
    };
    let first = snapshot(&mut backend, 1);
    let full_bytes = first.bytes();
    let dirty_keys = keys / 100;
    let dirty_bytes = full_bytes as f64 * dirty_keys as f64 / keys as f64;
    let (mut written, mut stored, mut steady) = (0u64, 0u64, 0u64);
    let mut max_chain_length = 0;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut last = first;
    for c in 2..=CHECKPOINTS {
        for _ in 0..dirty_keys {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            write(&mut backend, state, rng % keys, c);
        }
        let handle = snapshot(&mut backend, c);
        let newest = handle
            .chain
            .last()
            .filter(|a| a.checkpoint == CheckpointId(c))
            .map_or(0, |a| a.bytes);
        max_chain_length = max_chain_length.max(handle.chain.len());
        if c >= STEADY_FROM {
            written += newest;
            stored += handle.bytes();
            steady += 1;
        }
        last = handle;
    }
    checkpoints.finish();
    let started = Instant::now();
    let mut restored = KeyedStateBackend::new(groups, range);
    let paths: Vec<_> = last.chain.iter().map(|a| store.resolve(&a.path)).collect();
    runtime
        .block_on(restore_chain(
            store.object_store().as_ref(),
            &paths,
            range,
            &mut restored,
        ))
        .expect("restore");
    let restore_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(restored.stats().entries as u64, keys, "every key restored");
    // The live state's size: a full snapshot of the state as it is now.
    let live_bytes = weir_host::checkpoint::format::encode(
        &backend.snapshot_full(CheckpointId(CHECKPOINTS + 1)),
    )
    .expect("encode")
    .len() as f64;
    let figures = Figures {
        bytes_per_checkpoint_over_dirty: written as f64 / steady as f64 / dirty_bytes,
        space_amplification: stored as f64 / steady as f64 / live_bytes,
        max_chain_length,
        restore_ms,
    };
    eprintln!(
        "{label}: full {full_bytes} B, dirty volume {dirty_bytes:.0} B/checkpoint, \
         written {:.0} B/checkpoint, stored {:.0} B, live {live_bytes:.0} B, \
         chain of {} at the end (max {max_chain_length}), restore {restore_ms:.0} ms",
        written as f64 / steady as f64,
        stored as f64 / steady as f64,
        last.chain.len(),
    );
    figures
}

fn main() {
    weir_host::disable_huge_pages();
    let keys: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let rewrite = run(
        keys,
        "re-write oldest",
        ChainPolicy {
            max_chain: 150,
            rewrite_budget: (keys / 125) as usize,
            full_snapshot_every: None,
        },
    );
    let full = run(
        keys,
        "full every 50",
        ChainPolicy {
            max_chain: usize::MAX,
            rewrite_budget: 0,
            full_snapshot_every: Some(FULL_EVERY),
        },
    );
    println!(
        "bench: space_amplification = {:.3} ratio",
        rewrite.space_amplification
    );
    println!(
        "bench: bytes_per_checkpoint_over_dirty = {:.3} ratio",
        rewrite.bytes_per_checkpoint_over_dirty
    );
    println!(
        "bench: max_chain_length = {} increments",
        rewrite.max_chain_length
    );
    println!("bench: restore_ms = {:.0} ms", rewrite.restore_ms);
    println!(
        "bench: full_every_{FULL_EVERY}_space_amplification = {:.3} ratio",
        full.space_amplification
    );
    println!(
        "bench: full_every_{FULL_EVERY}_bytes_per_checkpoint_over_dirty = {:.3} ratio",
        full.bytes_per_checkpoint_over_dirty
    );
    println!(
        "bench: full_every_{FULL_EVERY}_max_chain_length = {} increments",
        full.max_chain_length
    );
    println!(
        "bench: full_every_{FULL_EVERY}_restore_ms = {:.0} ms",
        full.restore_ms
    );
}
