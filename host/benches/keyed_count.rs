//! Keyed count, Wasm against native, in one run.
//!
//! The same pipeline twice: generator (10 M records over 1 M keys) -> key-by -> counter
//! (parallelism 1) -> discard. Once the counter is the example component
//! (`examples/wordcount/counter`), once the same logic compiled into the host, over the same
//! runtime and the same state backend, following the same per-batch algorithm as the SDK.
//! Prints the median records/s of three interleaved runs of each and their ratio, and the
//! rate of the pipeline with an operator that forwards batches untouched (the ceiling set by
//! source, routing, channels and sink).
//!
//! Last, what the state backend holds per key, counted by the allocator: MEMORY_KEYS
//! (10 M) keys of 8 bytes written once into a value state, with 8-byte values (a u64 count)
//! and with 100-byte values.
//!
//! `cargo bench -p weir-host --bench keyed_count [-- RECORDS KEYS [MEMORY_KEYS]]`

mod counting;
mod keyed;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::sync::Arc;

use keyed::{measure, median};
use weir_host::engine::{ComponentCache, Engine, EngineOptions};
use weir_host::guest::{KeySlots, WasmOperatorFactory};
use weir_host::ids::SubtaskIndex;
use weir_host::operator::{
    FailureKind, OperatorError, OperatorFactory, OperatorInstance, SubtaskContext,
};
use weir_host::partition::{KeyGroups, hash_key};
use weir_host::record::{Numbers, RecordBatch, RecordRef};
use weir_host::state::{EntryHint, KeyRef, KeyedStateBackend, StateId, StateKind};

/// The counter compiled into the host, doing what the component does per batch (the SDK's
/// algorithm): number the batch's keys (slots), read every slot's CBOR count once, keep
/// typed counts per slot while processing the records, write each changed slot once at the
/// end, and emit `key<TAB>count` per record.
struct NativeCounter {
    state: KeyedStateBackend,
    count: StateId,
    ctx: SubtaskContext,
    slots: KeySlots,
    record_slots: Numbers<u32>,
    /// Per slot: the count, once read.
    counts: Vec<Option<u64>>,
    /// Per slot: where its entry was found, to write it back without a lookup.
    hints: Vec<Option<EntryHint>>,
    encoded: Vec<u8>,
    /// Decoding buffer, reused as the SDK does (ciborium would zero 4 KiB per value).
    scratch: Vec<u8>,
}

impl NativeCounter {
    fn fail(&self, message: impl ToString) -> OperatorError {
        self.ctx.error(FailureKind::Returned, message.to_string())
    }
}

impl OperatorInstance for NativeCounter {
    fn process(&mut self, batch: &mut RecordBatch) -> Result<RecordBatch, OperatorError> {
        // The slots are assigned from the WIT columns, as for a guest.
        let (columns, host) = std::mem::take(batch).lend();
        self.slots
            .assign(&columns, host.hashes(), &mut self.record_slots);
        *batch = RecordBatch::returned(columns, host);
        let batch = &*batch;
        // Read phase: every slot's current count, in one batched lookup.
        self.counts.clear();
        self.hints.clear();
        let (state, count, scratch) = (&self.state, self.count, &mut self.scratch);
        let keys = (0..self.slots.len() as u32).filter_map(|slot| self.slots.key(slot).ok());
        let mut decode_error = None;
        state
            .value_get_many(count, keys, |_, value, hint| {
                self.hints.push(hint);
                let value = match value {
                    Some(bytes) => ciborium::de::from_reader_with_buffer::<u64, _>(bytes, scratch)
                        .map_err(|e| decode_error = Some(e.to_string()))
                        .unwrap_or(0),
                    None => 0,
                };
                self.counts.push(Some(value));
            })
            .map_err(|e| self.fail(e))?;
        if let Some(e) = decode_error {
            return Err(self.fail(e));
        }
        // Process phase.
        let mut out = RecordBatch::with_capacity(batch.len(), batch.data_len() * 2);
        let mut value = Vec::with_capacity(32);
        for (i, record) in batch.iter().enumerate() {
            let key = record.key.ok_or_else(|| self.fail("no key"))?;
            let count = &mut self.counts[self.record_slots.get(i) as usize];
            let next = count.unwrap_or(0) + 1;
            *count = Some(next);
            value.clear();
            value.extend_from_slice(key);
            value.push(b'\t');
            value.extend_from_slice(itoa::Buffer::new().format(next).as_bytes());
            out.push(RecordRef::keyed(key, &value));
        }
        // Write phase: each slot once.
        for slot in 0..self.slots.len() {
            let Some(count) = self.counts[slot] else {
                continue;
            };
            self.encoded.clear();
            ciborium::into_writer(&count, &mut self.encoded).map_err(|e| self.fail(e))?;
            let key = self.slots.key(slot as u32).map_err(|e| self.fail(e))?;
            self.state
                .value_set_hinted(self.count, key, self.hints[slot], &self.encoded)
                .map_err(|e| self.fail(e))?;
        }
        Ok(out)
    }

    fn close(&mut self) -> Result<RecordBatch, OperatorError> {
        Ok(RecordBatch::new())
    }

    fn state(&self) -> &KeyedStateBackend {
        &self.state
    }

    fn state_mut(&mut self) -> &mut KeyedStateBackend {
        &mut self.state
    }
}

struct NativeCounterFactory;

impl OperatorFactory for NativeCounterFactory {
    fn instantiate(
        &self,
        ctx: &SubtaskContext,
    ) -> Result<Box<dyn OperatorInstance>, OperatorError> {
        let mut state = KeyedStateBackend::new(ctx.key_groups, ctx.range);
        let count = state
            .declare("count", StateKind::Value)
            .map_err(|e| ctx.error(FailureKind::Open, e.to_string()))?;
        state.seal_declarations();
        Ok(Box::new(NativeCounter {
            state,
            count,
            ctx: ctx.clone(),
            slots: KeySlots::default(),
            record_slots: Numbers::default(),
            counts: Vec::new(),
            hints: Vec::new(),
            encoded: Vec::new(),
            scratch: vec![0; 4096],
        }))
    }
}

/// Forwards every batch: the pipeline's own cost (source, routing, channels, sink), the
/// ceiling for any operator.
struct Passthrough(KeyedStateBackend);

impl OperatorInstance for Passthrough {
    fn process(&mut self, batch: &mut RecordBatch) -> Result<RecordBatch, OperatorError> {
        Ok(std::mem::take(batch))
    }

    fn close(&mut self) -> Result<RecordBatch, OperatorError> {
        Ok(RecordBatch::new())
    }

    fn state(&self) -> &KeyedStateBackend {
        &self.0
    }

    fn state_mut(&mut self) -> &mut KeyedStateBackend {
        &mut self.0
    }
}

struct PassthroughFactory;

impl OperatorFactory for PassthroughFactory {
    fn instantiate(
        &self,
        ctx: &SubtaskContext,
    ) -> Result<Box<dyn OperatorInstance>, OperatorError> {
        Ok(Box::new(Passthrough(KeyedStateBackend::new(
            ctx.key_groups,
            ctx.range,
        ))))
    }
}

fn main() {
    weir_host::disable_huge_pages();
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let records = args.first().copied().unwrap_or(10_000_000);
    let keys = args.get(1).copied().unwrap_or(1_000_000);
    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(support::cache_dir())),
    })
    .expect("engine");
    let component = engine
        .load(&support::component("weir-example-counter"))
        .expect("counter component");
    let wasm: Arc<dyn OperatorFactory> =
        Arc::new(WasmOperatorFactory::new(engine.clone(), component));
    let native: Arc<dyn OperatorFactory> = Arc::new(NativeCounterFactory);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    eprintln!("keyed count: {records} records over {keys} keys, batch 1024, parallelism 1");
    // Warm-up: page in code and grow allocator arenas for both, so neither pays first.
    measure(&runtime, wasm.clone(), records / 10, keys / 10);
    measure(&runtime, native.clone(), records / 10, keys / 10);
    // Shared machines are noisy: run each variant ROUNDS times, interleaved so that a slow
    // phase of the machine hits both, and report medians.
    let (mut wasm_rates, mut native_rates) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let w = measure(&runtime, wasm.clone(), records, keys);
        let n = measure(&runtime, native.clone(), records, keys);
        eprintln!(
            "round {round}: wasm {w:.0} records/s, native {n:.0} records/s, ratio {:.3}",
            w / n
        );
        wasm_rates.push(w);
        native_rates.push(n);
    }
    let ceiling = measure(&runtime, Arc::new(PassthroughFactory), records, keys);
    let (wasm_rate, native_rate) = (median(wasm_rates), median(native_rates));
    println!("bench: pipeline_passthrough_records_per_sec = {ceiling:.0} records/s");
    println!("bench: wasm_records_per_sec = {wasm_rate:.0} records/s");
    println!("bench: native_records_per_sec = {native_rate:.0} records/s");
    println!(
        "bench: wasm_native_ratio = {:.3} ratio",
        wasm_rate / native_rate
    );
    let memory_keys = args.get(2).copied().unwrap_or(10_000_000);
    println!(
        "bench: bytes_per_key = {:.1} bytes",
        bytes_per_key(memory_keys, 8)
    );
    println!(
        "bench: bytes_per_key_100b = {:.1} bytes",
        bytes_per_key(memory_keys, 100)
    );
}

/// The bytes a backend holds per key (allocator-counted) once `keys` 8-byte keys hold a
/// value of `value_len` bytes each, written once (no snapshot taken).
fn bytes_per_key(keys: u64, value_len: usize) -> f64 {
    let groups = KeyGroups::default();
    let before = counting::live();
    let mut backend = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
    let state = backend.declare("count", StateKind::Value).expect("declare");
    let mut value = vec![0u8; value_len];
    for i in 0..keys {
        let key = i.to_le_bytes();
        value[..8].copy_from_slice(&i.to_le_bytes());
        backend
            .value_set(state, KeyRef::new(&key, hash_key(&key)), &value)
            .expect("set");
    }
    let held = counting::live() - before;
    assert_eq!(backend.stats().entries as u64, keys, "every key held");
    eprintln!(
        "memory: {keys} keys with {value_len}-byte values hold {:.1} MB",
        held as f64 / 1e6
    );
    held as f64 / keys as f64
}

/// Measured runs of each variant.
const ROUNDS: usize = 3;
