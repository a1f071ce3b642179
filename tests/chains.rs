//! Bounded chains with cold keys: 250 K keys written once, then 200 checkpoints while 1 % of
//! the keys change. Old increments must drain by re-writing, a bounded slice at a time: the
//! chain stays under its bound, no checkpoint writes the whole state, and every retained
//! checkpoint restores to exactly the state it was taken of.
//!
//! Drives one subtask's checkpointing (`SubtaskCheckpoints`) directly over an in-memory
//! store, as the runtime does, without operators around it.

use std::collections::VecDeque;
use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path as StorePath;
use tokio::sync::mpsc;
use weir_host::checkpoint::metadata::{
    CheckpointMetadata, METADATA_VERSION, OperatorHandles, SubtaskHandle,
};
use weir_host::checkpoint::protocol::Ack;
use weir_host::checkpoint::storage::read_increment;
use weir_host::checkpoint::subtask_checkpoints::{SubtaskCheckpoints, SubtaskIdentity};
use weir_host::checkpoint::{ChainPolicy, CheckpointStore};
use weir_host::ids::{CheckpointId, SubtaskIndex};
use weir_host::partition::{KeyGroups, hash_key};
use weir_host::state::{KeyRef, KeyedStateBackend, StateKind};

// Enough that the re-write budget is the chain's share of the state (a twelfth of it, above
// the configured 1,000 entries), as in a large state; more keys test nothing more.
const KEYS: u64 = 250_000;
const CHECKPOINTS: u64 = 200;
const RETAIN: usize = 3;
const MAX_CHAIN: usize = 12;

fn key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

#[test]
fn cold_keys_drain_from_old_increments_and_every_retained_checkpoint_restores() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let groups = KeyGroups::new(128);
    let range = groups.range_of(SubtaskIndex(0), 1);
    let store = CheckpointStore::new(Arc::new(InMemory::new()), &StorePath::from("r"), "cold");
    let (acks_tx, mut acks) = mpsc::unbounded_channel();
    let policy = ChainPolicy {
        max_chain: MAX_CHAIN,
        rewrite_budget: 1_000,
        full_snapshot_every: None,
    };
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
        "test".into(),
        policy,
    );
    let mut backend = KeyedStateBackend::new(groups, range);
    let state = backend.declare("v", StateKind::Value).expect("declare");
    backend.seal_declarations();
    // The oracle: every key's value is its number of writes.
    let mut oracle = vec![0u64; KEYS as usize];
    let write = |backend: &mut KeyedStateBackend, oracle: &mut [u64], i: u64| {
        oracle[i as usize] += 1;
        let k = key(i);
        backend
            .value_set(
                state,
                KeyRef::new(&k, hash_key(&k)),
                &oracle[i as usize].to_le_bytes(),
            )
            .expect("set");
    };
    for i in 0..KEYS {
        write(&mut backend, &mut oracle, i);
    }

    // The handle reports the live state's size: every key and its 8-byte value.
    let live: u64 = (0..KEYS).map(|i| key(i).len() as u64 + 8).sum();
    let mut retained: VecDeque<(CheckpointMetadata, Vec<u64>)> = VecDeque::new();
    let mut full_bytes = 0;
    let mut most_bytes = 0;
    let mut longest_chain = 0;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for c in 1..=CHECKPOINTS {
        if c > 1 {
            for _ in 0..KEYS / 100 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                write(&mut backend, &mut oracle, rng % KEYS);
            }
        }
        // As a subtask does between batches: part of the next checkpoint's re-writing.
        for _ in 0..3 {
            checkpoints.pin(&mut backend, 1_000);
        }
        let id = CheckpointId(c);
        checkpoints.snapshot(&mut backend, id, Default::default());
        // As a subtask does between batches, until the snapshot is pinned and uploading.
        checkpoints.settle(&mut backend);
        let handle = match acks.blocking_recv().expect("ack") {
            Ack::Subtask {
                checkpoint, result, ..
            } if checkpoint == id => result.expect("uploaded"),
            other => panic!("unexpected {other:?}"),
        };
        let newest = handle.chain.last().expect("a chain").bytes;
        if c == 1 {
            full_bytes = newest;
        } else {
            most_bytes = most_bytes.max(newest);
        }
        longest_chain = longest_chain.max(handle.chain.len());
        if c == 1 || c == CHECKPOINTS {
            assert_eq!(handle.live_bytes, live, "checkpoint {c}");
            let amplification = handle.space_amplification().expect("a live state");
            assert!(amplification < 3.0, "space amplification {amplification}");
        }
        retained.push_back((metadata(id, &handle), oracle.clone()));
        if retained.len() > RETAIN {
            retained.pop_front();
        }
        let earliest = retained.front().expect("retained").0.id;
        checkpoints.complete(id, earliest);
    }
    checkpoints.finish();
    eprintln!(
        "full {full_bytes} bytes, largest later checkpoint {most_bytes} bytes, longest chain {longest_chain}"
    );
    assert!(
        longest_chain <= MAX_CHAIN + 1,
        "the chain grew to {longest_chain}"
    );
    assert!(
        most_bytes < full_bytes / 4,
        "a checkpoint wrote {most_bytes} bytes, the whole state is {full_bytes}"
    );

    for (metadata, expected) in &retained {
        let mut restored = KeyedStateBackend::new(groups, range);
        let state = restored.declare("v", StateKind::Value).expect("declare");
        restored.seal_declarations();
        for artifact in &metadata.operators[0].subtasks[0].chain {
            let path = store.resolve(&artifact.path);
            let increment = runtime
                .block_on(read_increment(store.object_store().as_ref(), &path, range))
                .expect("read");
            restored.restore(&increment).expect("restore");
        }
        assert_eq!(restored.stats().entries as u64, KEYS);
        for i in (0..KEYS).step_by(997) {
            let k = key(i);
            let value = restored
                .value_get(state, KeyRef::new(&k, hash_key(&k)))
                .expect("get")
                .map(|v| u64::from_le_bytes(v.try_into().expect("8 bytes")));
            assert_eq!(
                value,
                Some(expected[i as usize]),
                "key {i} in checkpoint {}",
                metadata.id
            );
        }
    }
}

fn metadata(id: CheckpointId, handle: &SubtaskHandle) -> CheckpointMetadata {
    CheckpointMetadata {
        version: METADATA_VERSION,
        job: "cold".into(),
        id,
        completed_at_ms: 0,
        finished: false,
        key_groups: 128,
        source: serde_json::Value::Null,
        sink: None,
        dead_letters: Default::default(),
        source_max_timestamp: None,
        operators: vec![OperatorHandles {
            name: "op".into(),
            parallelism: 1,
            component: None,
            wit: None,
            state_encoding: Some("cbor".into()),
            subtasks: vec![handle.clone()],
        }],
        timing: None,
        counts: None,
    }
}
