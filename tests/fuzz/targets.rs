//! The fuzz targets: each takes bytes it did not write, decodes them as the host does, does
//! what the host does next with what decoded, and checks what must hold whatever the bytes.
//!
//! A target returns `Err` when an invariant broke (a round trip that does not round-trip, a
//! timer that fires forever, a file written outside a job's folder); a decoder that refuses
//! its input is fine. A panic is a failure too; the harness (`tests/fuzz.rs`) catches it.
//!
//! Each target also has seeds (valid inputs made with the host's own encoders, or real
//! example files) and a structure-aware mutation that keeps much of the input valid so that
//! mutated cases reach past the first check (fixing up checksums, lengths and offsets).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use xxhash_rust::xxh3::xxh3_64;

use weir_host::bindings::weir::operator::state::Host as _;
use weir_host::bindings::weir::operator::types::Batch;
use weir_host::checkpoint::checkpoint_store::parse_metadata;
use weir_host::checkpoint::format::{self, ArtifactIndex, GroupEntry};
use weir_host::checkpoint::metadata::{
    ArtifactRef, BarrierTiming, CheckpointMetadata, CheckpointTiming, METADATA_VERSION,
    OperatorHandles, RecordCounts, SubtaskHandle, TaskCounts,
};
use weir_host::checkpoint::ownership::Ownership;
use weir_host::connectors::Source;
use weir_host::connectors::generator::GeneratorSource;
use weir_host::connectors::lines::{JsonLinesSource, TextLinesSource};
use weir_host::guest::{GuestState, KeySlots, LogContext};
use weir_host::ids::{CheckpointId, OperatorName, SubtaskIndex};
use weir_host::job::KeyBy;
use weir_host::job::bad_records::{DeadLetter, describe_record};
use weir_host::job::router::Router;
use weir_host::job::spec::{JobSpec, SourceSpec};
use weir_host::operator::GuestLimits;
use weir_host::partition::MAX_KEY_GROUPS;
use weir_host::partition::{KeyGroupRange, KeyGroups, hash_key};
use weir_host::record::{Numbers, RecordBatch, RecordRef};
use weir_host::serve::api::{CancelOptions, LogOptions, RestartOptions};
use weir_host::serve::job_checkpoints::{Which, distinct_artifacts, summary};
use weir_host::serve::protocol::{CheckpointDetail, SubmitRequest};
use weir_host::state::{
    Change, GroupIncrement, Increment, KeyRef, KeyedStateBackend, StateBytes, StateKind,
    TIMERS_STATE, TimeDomain, Timer,
};

use super::mutate::{Rng, havoc, mutate_json, mutate_toml};

/// What a target found wrong with an input.
pub type Found = Result<(), String>;

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    /// Decodes `input` and checks invariants.
    pub run: fn(&[u8]) -> Found,
    /// A mutation that knows the input's structure; `None` when it cannot apply.
    pub mutate: fn(&mut Rng, &[u8]) -> Option<Vec<u8>>,
    /// Seeds: valid inputs, by name.
    pub seeds: fn() -> Vec<(String, Vec<u8>)>,
    /// Mutated inputs are cut to this length.
    pub max_len: usize,
}

pub const TARGETS: &[Target] = &[
    Target {
        name: "job_file",
        run: job_file,
        mutate: mutate_job_file,
        seeds: job_file_seeds,
        max_len: 64 << 10,
    },
    Target {
        name: "checkpoint_metadata",
        run: checkpoint_metadata,
        mutate: mutate_metadata,
        seeds: metadata_seeds,
        max_len: 256 << 10,
    },
    Target {
        name: "artifact",
        run: artifact,
        mutate: mutate_artifact,
        seeds: artifact_seeds,
        max_len: 512 << 10,
    },
    Target {
        name: "guest_apply",
        run: guest_apply,
        mutate: mutate_guest_apply,
        seeds: guest_apply_seeds,
        max_len: 64 << 10,
    },
    Target {
        name: "guest_batch",
        run: guest_batch,
        mutate: mutate_guest_batch,
        seeds: guest_batch_seeds,
        max_len: 64 << 10,
    },
    Target {
        name: "state_encoding",
        run: state_encoding,
        mutate: mutate_state_encoding,
        seeds: state_encoding_seeds,
        max_len: 4 << 10,
    },
    Target {
        name: "serve_submit",
        run: serve_submit,
        mutate: mutate_submit,
        seeds: submit_seeds,
        max_len: 64 << 10,
    },
    Target {
        name: "serve_query",
        run: serve_query,
        mutate: mutate_query,
        seeds: query_seeds,
        max_len: 4 << 10,
    },
];

thread_local! {
    /// Whether the current case got past its decoder: the run reports how many did, which
    /// says how deep the mutated cases reach.
    pub static ACCEPTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn accepted() {
    ACCEPTED.with(|a| a.set(true));
}

fn check(condition: bool, what: impl FnOnce() -> String) -> Found {
    if condition { Ok(()) } else { Err(what()) }
}

/// The scratch folders made, by name (each name starts with its target's).
static SCRATCH: std::sync::Mutex<BTreeMap<String, &'static Path>> =
    std::sync::Mutex::new(BTreeMap::new());

/// A scratch folder for a target's files, `name` starting with the target's name; it stays
/// until [`remove_scratch`] at the end of the target's run.
fn scratch_dir(name: &str) -> &'static Path {
    let mut dirs = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    dirs.entry(name.to_owned()).or_insert_with(|| {
        let dir = tempfile::Builder::new()
            .prefix(&format!("weir-fuzz-{name}-"))
            .tempdir()
            .expect("temporary folder")
            .keep();
        Box::leak(dir.into_boxed_path())
    })
}

/// Removes the scratch folders of `target`, whose run is over.
pub fn remove_scratch(target: &str) {
    let mut dirs = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    dirs.retain(|name, dir| {
        let keep = !name.starts_with(target);
        if !keep {
            let _ = std::fs::remove_dir_all(dir);
        }
        keep
    });
}

// ----- the job file --------------------------------------------------------------------------

/// The folder job files are checked against: `a/b/` inside a scratch folder, holding every
/// file the example job files name (relative to the examples' own folders).
fn job_base() -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let root = scratch_dir("job_file");
        let base = root.join("a/b");
        let files = [
            "input.txt",
            "in.txt",
            "events.jsonl",
            "clicks.jsonl",
            "tokenizer.wasm",
            "counter.wasm",
            "parse/operator.wasm",
            "filter/operator.wasm",
            "format/operator.wasm",
            "sessions/operator.wasm",
            "../../target/wasm32-wasip2/guest/weir_example_tokenizer.wasm",
            "../../target/wasm32-wasip2/guest/weir_example_counter.wasm",
            "../../target/wasm32-wasip2/guest/weir_example_aggregate.wasm",
            "../../target/wasm32-wasip2/guest/weir_example_page_counts.wasm",
        ];
        for file in files {
            let path = base.join(file);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("folder");
            std::fs::write(&path, b"\0asm").expect("file");
        }
        base
    })
}

/// Parses and checks a job file, then does what `weir run` and `weir serve` do with a
/// checked spec short of compiling its components.
fn job_file(input: &[u8]) -> Found {
    let text = String::from_utf8_lossy(input);
    let base = job_base();
    let mut spec = match JobSpec::parse(&text, Path::new("fuzz.toml"), base) {
        Ok(spec) => spec,
        Err(e) => {
            let _ = e.to_string();
            return Ok(());
        }
    };
    accepted();
    check_spec(&spec)?;
    let _ = spec.dead_letter_files();
    for target in spec.dead_letter_targets() {
        if let weir_host::job::spec::RecordPolicy::DeadLetterTopic(topic) = target {
            let _ = spec.dead_letter_topic_sink(&topic);
        }
    }
    if matches!(spec.source, SourceSpec::Kafka(_)) {
        check_spec(&weir_host::group::one_partition(&spec))?;
    }
    let first = spec.operators.first().map(|o| o.name.clone());
    for (operator, parallelism) in [(None, 2), (first.as_deref(), 1), (None, u32::MAX)] {
        let _ = spec.set_parallelism(operator, parallelism);
    }
    check_spec(&spec)
}

/// What a checked spec promises the rest of the host.
fn check_spec(spec: &JobSpec) -> Found {
    let groups = spec.key_groups.count();
    check((1..=MAX_KEY_GROUPS).contains(&groups), || {
        format!("a checked job has {groups} key groups")
    })?;
    check(!spec.operators.is_empty(), || {
        "a checked job has no operator".into()
    })?;
    check(!spec.name.trim().is_empty(), || {
        "a checked job has no name".into()
    })?;
    check((1..=1 << 20).contains(&spec.batch_size), || {
        format!("batch size {}", spec.batch_size)
    })?;
    for op in &spec.operators {
        check((1..=groups).contains(&op.parallelism), || {
            format!("operator `{}` has parallelism {}", op.name, op.parallelism)
        })?;
        check(op.limits.memory_bytes >= 1 << 20, || {
            format!(
                "operator `{}` may use {} bytes",
                op.name, op.limits.memory_bytes
            )
        })?;
        serde_json::from_str::<serde_json::Value>(&op.config_json).map_err(|e| {
            format!(
                "operator `{}` has config {:?}: {e}",
                op.name, op.config_json
            )
        })?;
        // What the runtime derives from the limits.
        let _ = op.limits.cpu_time_per_call.as_millis() / 10;
    }
    if let Some(c) = &spec.checkpoints {
        check(c.retain >= 1 && !c.interval.is_zero(), || {
            format!("checkpoints {c:?}")
        })?;
        url::Url::parse(&c.store).map_err(|e| format!("store {:?}: {e}", c.store))?;
        let _ = std::time::Instant::now().checked_add(c.interval);
    }
    Ok(())
}

fn mutate_job_file(rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(input).ok()?;
    Some(mutate_toml(rng, text).into_bytes())
}

fn job_file_seeds() -> Vec<(String, Vec<u8>)> {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seeds: Vec<(String, Vec<u8>)> = [
        ("wordcount", "wordcount/job.toml"),
        ("pipeline", "pipeline/job.toml"),
        ("kafka", "kafka/job.toml"),
        ("windows-pages", "windows/pages.toml"),
        ("windows-sessions", "windows/sessions.toml"),
    ]
    .iter()
    .filter_map(|(name, path)| Some((name.to_string(), std::fs::read(examples.join(path)).ok()?)))
    .collect();
    seeds.push((
        "every-field".into(),
        br#"[job]
name = "every-field"
max_parallelism = 64
batch_size = 512

[source]
kind = "json-lines"
path = "events.jsonl"
key_pointer = "/user"
on_bad_record = { dead_letter = "bad-input.jsonl" }
timestamp = { json_pointer = "/ts", format = "ms" }
on_bad_timestamp = "drop"
watermark = { max_out_of_order_ms = 5000, idle_ms = 1000 }

[[operators]]
name = "parse"
component = "parse/operator.wasm"
on_error = "skip"

[[operators]]
name = "count"
component = "counter.wasm"
parallelism = 4
key_by = { json_pointer = "/page" }
config = { min = 1, names = ["a", "b"], nested = { deep = true, at = 1979-05-27T07:32:00Z } }
limits = { memory_mb = 64, cpu_ms_per_call = 500, state_mb = 16 }
on_error = { dead_letter = "failed.jsonl" }
on_bad_record = "skip"

[sink]
kind = "file"
path = "out.txt"

[checkpoints]
store = "memory:///"
interval_ms = 200
timeout_ms = 60000
retain = 3
max_chain = 8
rewrite_budget = 100
restart_attempts = 2
on_limit = "restart"
"#
        .to_vec(),
    ));
    seeds.push((
        "generator".into(),
        br#"[job]
name = "generated"

[source]
kind = "generator"
records = 1000000
keys = 1000
clock = { events_per_second = 1000, disorder = 0.1 }
watermark = { max_out_of_order_ms = 100 }

[[operators]]
name = "count"
component = "counter.wasm"
key_by = "key"
parallelism = 2

[sink]
kind = "discard"

[checkpoints]
full_snapshot_every = 5
"#
        .to_vec(),
    ));
    seeds
}

// ----- checkpoint metadata -----------------------------------------------------------------

/// A small text file for the line sources to seek in.
fn lines_file() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = scratch_dir("checkpoint_metadata").join("input.jsonl");
        std::fs::write(&path, b"{\"user\": \"a\"}\n{\"user\": \"b\"}\nnot json\n").expect("file");
        path
    })
}

/// Parses metadata as a restore does, then does what readers do with it: list it, show it,
/// plan ownership, size each subtask's backend as `verify` does, seek the sources.
fn checkpoint_metadata(input: &[u8]) -> Found {
    plan_start(input)?;
    let metadata = match parse_metadata(input, "fuzz/checkpoints/chk-1.json") {
        Ok(m) => m,
        Err(e) => {
            let _ = e.to_string();
            return Ok(());
        }
    };
    accepted();
    let _ = summary(&metadata);
    let _ = distinct_artifacts(&metadata);
    let stored: BTreeMap<String, u64> = metadata
        .artifacts()
        .map(|a| (a.path.clone(), a.bytes))
        .collect();
    let detail = CheckpointDetail {
        metadata: metadata.clone(),
        stored,
    };
    let _ = weir_host::cli::checkpoints::describe(&detail);
    // What `GET /v1/jobs/{id}/checkpoints/{id}` answers, and the client reads back.
    let json = serde_json::to_vec(&detail).map_err(|e| format!("detail: {e}"))?;
    let back: CheckpointDetail =
        serde_json::from_slice(&json).map_err(|e| format!("detail does not read back: {e}"))?;
    if !has_float(&detail.metadata.source) {
        check(back == detail, || "detail reads back different".into())?;
    }
    let groups = KeyGroups::new(metadata.key_groups);
    for op in &metadata.operators {
        for parallelism in [1, 3, op.parallelism.clamp(1, 256)] {
            let plan = Ownership::plan(&op.name, parallelism, groups, [&metadata]);
            for a in metadata.artifacts() {
                let _ = plan.owns(SubtaskIndex(0), &a.path);
            }
        }
        for handle in &op.subtasks {
            let _ = (
                handle.bytes(),
                handle.space_amplification(),
                handle.oldest(),
            );
            // `verify` gives each subtask a backend of its key groups.
            let range = handle.range();
            check(
                range.start <= range.end && range.end <= groups.count(),
                || format!("subtask range {range} passed the check"),
            )?;
            let mut backend = KeyedStateBackend::new(groups, range);
            let _ = backend.declare("state", StateKind::Map);
        }
    }
    let mut generator = GeneratorSource::new(1000, 10);
    let _ = generator.seek(&metadata.source);
    if let Ok(mut lines) = TextLinesSource::open(lines_file()) {
        let _ = lines.seek(&metadata.source);
    }
    if let Ok(mut json) = JsonLinesSource::open(lines_file(), Some("/user".into())) {
        let _ = json.seek(&metadata.source);
    }
    // What the coordinator writes reads back the same.
    let written = serde_json::to_vec_pretty(&metadata).map_err(|e| format!("write: {e}"))?;
    let reread = parse_metadata(&written, "rewritten")
        .map_err(|e| format!("metadata written from read metadata does not parse: {e}"))?;
    if !has_float(&metadata.source) {
        check(reread == metadata, || "metadata does not round-trip".into())?;
    }
    Ok(())
}

/// Plans runs of a job (`JobStart::plan`) from a store holding a whole checkpoint 3 and
/// `input` as checkpoint 7 (and as the checkpoint it names, if it names one).
fn plan_start(input: &[u8]) -> Found {
    use object_store::ObjectStoreExt as _;
    use weir_host::checkpoint::{CheckpointStore, JobStart, RestoreFrom, RunLineage, StartFrom};
    let memory: Arc<dyn object_store::ObjectStore> =
        Arc::new(object_store::memory::InMemory::new());
    let store = CheckpointStore::new(
        memory.clone(),
        &object_store::path::Path::from("store"),
        "wordcount",
    );
    static WHOLE: OnceLock<CheckpointMetadata> = OnceLock::new();
    let whole = WHOLE.get_or_init(|| {
        let seed = &metadata_seeds()[2].1;
        CheckpointMetadata {
            id: CheckpointId(3),
            job: "wordcount".into(),
            ..serde_json::from_slice(seed).expect("a seed")
        }
    });
    let named = serde_json::from_slice::<serde_json::Value>(input)
        .ok()
        .and_then(|v| v.get("id")?.as_u64());
    runtime().block_on(async {
        store
            .write_metadata(whole)
            .await
            .map_err(|e| e.to_string())?;
        for id in [Some(7), named].into_iter().flatten() {
            memory
                .put(
                    &store.metadata_path(CheckpointId(id)),
                    bytes::Bytes::copy_from_slice(input).into(),
                )
                .await
                .map_err(|e| e.to_string())?;
        }
        let lineage = RunLineage {
            first: CheckpointId(4),
            origin: Some(RestoreFrom::Id(CheckpointId(3))),
        };
        for from in [
            StartFrom::New,
            StartFrom::Restore(RestoreFrom::Latest),
            StartFrom::Restore(RestoreFrom::Id(CheckpointId(7))),
            StartFrom::Restart(lineage),
        ] {
            if let Ok(start) = JobStart::plan(&store, "wordcount", &from, &[]).await {
                let _ = (
                    start.lineage(&from),
                    start.assignment(&["count"], &[]),
                    start.check_state_kept("wordcount", &["count"], &[]),
                );
                check(start.next_checkpoint > CheckpointId(3), || {
                    format!(
                        "a run after checkpoint 3 numbers its first {}",
                        start.next_checkpoint
                    )
                })?;
            }
        }
        Ok(())
    })
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
    })
}

/// JSON floats may not round-trip exactly (serde_json parses them best-effort).
fn has_float(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Number(n) => n.is_f64(),
        serde_json::Value::Array(items) => items.iter().any(has_float),
        serde_json::Value::Object(fields) => fields.values().any(has_float),
        _ => false,
    }
}

fn mutate_metadata(rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
    let mut value: serde_json::Value = serde_json::from_slice(input).ok()?;
    for _ in 0..1 + rng.below(3) {
        mutate_json(rng, &mut value);
    }
    if rng.one_in(4) {
        // Keep the version right so that the checks past it run.
        if let Some(v) = value.get_mut("version") {
            *v = serde_json::json!(METADATA_VERSION);
        }
    }
    serde_json::to_vec_pretty(&value).ok()
}

fn handle(subtask: u32, range: (u32, u32), chain: &[(u64, bool, u32)], op: &str) -> SubtaskHandle {
    SubtaskHandle {
        subtask,
        key_groups: range,
        chain: chain
            .iter()
            .map(|&(checkpoint, full, owner)| ArtifactRef {
                path: format!("state/{op}/{owner}/chk-{checkpoint:020}-run{owner}.inc"),
                checkpoint: CheckpointId(checkpoint),
                bytes: 1000 + checkpoint * 10,
                full,
                owner,
            })
            .collect(),
        live_bytes: 4000,
        watermark: Some(1_700_000_000_000 + u64::from(subtask) as i64),
        timers: u64::from(subtask),
        states: Vec::new(),
    }
}

fn metadata_seeds() -> Vec<(String, Vec<u8>)> {
    let groups = KeyGroups::new(128);
    let range = |s: u32, p: u32| {
        let r = groups.range_of(SubtaskIndex(s), p);
        (r.start, r.end)
    };
    let full = CheckpointMetadata {
        version: METADATA_VERSION,
        job: "wordcount".into(),
        id: CheckpointId(7),
        completed_at_ms: 1_700_000_000_000,
        finished: false,
        key_groups: 128,
        source: serde_json::json!({"offset": 1234, "line": 56}),
        sink: Some(serde_json::json!({"output_len": 4321})),
        dead_letters: BTreeMap::from([(
            "/tmp/dead.jsonl".to_owned(),
            serde_json::json!({"output_len": 12}),
        )]),
        operators: vec![
            OperatorHandles {
                name: "tokenize".into(),
                parallelism: 1,
                component: None,
                wit: None,
                state_encoding: Some("cbor".into()),
                subtasks: vec![SubtaskHandle {
                    chain: Vec::new(),
                    ..handle(0, range(0, 1), &[], "tokenize")
                }],
            },
            OperatorHandles {
                name: "count".into(),
                parallelism: 3,
                component: None,
                wit: None,
                state_encoding: Some("cbor".into()),
                subtasks: (0..3)
                    .map(|s| {
                        handle(
                            s,
                            range(s, 3),
                            &[(5, true, s), (6, false, s), (7, false, s)],
                            "count",
                        )
                    })
                    .collect(),
            },
        ],
        source_max_timestamp: Some(1_700_000_000_000),
        timing: Some(CheckpointTiming::new(
            12_000,
            vec![
                vec![BarrierTiming {
                    start_delay_us: 10,
                    alignment_us: 0,
                    sync_pause_us: 5,
                }],
                vec![BarrierTiming::default(); 3],
            ],
            BarrierTiming::default(),
        )),
        counts: Some(RecordCounts {
            source_records: 1000,
            sink_records: 900,
            operators: vec![vec![TaskCounts::default()], vec![TaskCounts::default(); 3]],
        }),
    };
    // After a rescale from 2 to 3: chains inherited from other owners.
    let rescaled = CheckpointMetadata {
        id: CheckpointId(9),
        finished: true,
        source: serde_json::json!({"records": 500}),
        sink: None,
        dead_letters: BTreeMap::new(),
        operators: vec![OperatorHandles {
            name: "count".into(),
            parallelism: 3,
            component: None,
            wit: None,
            state_encoding: Some("cbor".into()),
            subtasks: (0..3)
                .map(|s| {
                    handle(
                        s,
                        range(s, 3),
                        &[(4, true, s.min(1)), (9, false, s)],
                        "count",
                    )
                })
                .collect(),
        }],
        timing: None,
        counts: None,
        ..full.clone()
    };
    let minimal = CheckpointMetadata {
        id: CheckpointId(1),
        key_groups: 1,
        source: serde_json::Value::Null,
        sink: None,
        dead_letters: BTreeMap::new(),
        operators: Vec::new(),
        source_max_timestamp: None,
        timing: None,
        counts: None,
        ..full.clone()
    };
    [("full", full), ("rescaled", rescaled), ("minimal", minimal)]
        .into_iter()
        .map(|(name, m)| {
            // As the coordinator writes it (`CheckpointStore::write_metadata`).
            let json = serde_json::to_vec_pretty(&m).expect("metadata");
            (name.to_owned(), json)
        })
        .collect()
}

// ----- increment artifacts -----------------------------------------------------------------

/// Decodes an artifact as `verify` does (whole) and as a restore does (ranged reads from an
/// object store), then restores it into a backend, fires its timers, takes a full snapshot
/// and checks that encoding round-trips.
fn artifact(input: &[u8]) -> Found {
    let whole = format::decode(input, None);
    let ranged = read_ranged(
        input,
        KeyGroupRange {
            start: 0,
            end: u32::MAX,
        },
    );
    if let (Ok(whole), Ok(ranged)) = (&whole, &ranged) {
        // (The range leaves out key group u32::MAX.)
        let in_range = whole.groups.iter().filter(|g| g.group.0 < u32::MAX);
        check(
            in_range.eq(&ranged.groups) && whole.checkpoint == ranged.checkpoint,
            || "the whole and the ranged reader disagree on one artifact".into(),
        )?;
    }
    let Ok(increment) = whole else {
        return Ok(());
    };
    accepted();
    if let Err(e) = ranged {
        return Err(format!(
            "a restore refuses an artifact that `verify` reads whole: {e}"
        ));
    }
    let encoded = format::encode(&increment).map_err(|e| format!("re-encode: {e}"))?;
    let decoded =
        format::decode(&encoded, None).map_err(|e| format!("re-encoded artifact: {e}"))?;
    check(decoded == increment, || {
        "an artifact does not round-trip".into()
    })?;
    // A subtask owning the increment's groups, out of as many as fit.
    let last = increment
        .groups
        .iter()
        .map(|g| g.group.0)
        .max()
        .unwrap_or(0);
    let first = increment
        .groups
        .iter()
        .map(|g| g.group.0)
        .min()
        .unwrap_or(0);
    let groups = KeyGroups::new(last.saturating_add(1).clamp(1, MAX_KEY_GROUPS));
    let range = KeyGroupRange {
        start: first.min(groups.count()),
        end: groups.count(),
    };
    let part =
        read_ranged(input, range).map_err(|e| format!("ranged read of a whole artifact: {e}"))?;
    check(part.groups.iter().all(|g| range.contains(g.group)), || {
        "a ranged read returned groups outside its range".into()
    })?;
    let mut backend = KeyedStateBackend::new(groups, range);
    if backend.restore(&increment).is_err() {
        return Ok(());
    }
    // A chain applies the same increment again, as a later one.
    let _ = backend.restore(&Increment {
        checkpoint: CheckpointId(increment.checkpoint.0.saturating_add(1)),
        ..increment.clone()
    });
    let _ = (backend.stats(), backend.live_bytes());
    for domain in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
        fire_all(&mut backend, domain)?;
    }
    // The coordinator numbers checkpoints after every id in the store (the artifact's
    // included, through its metadata): none follows the largest.
    let epoch = backend.epoch().0;
    if epoch >= u64::MAX - 1 {
        return Ok(());
    }
    let next = CheckpointId(epoch + 1);
    let full = backend.snapshot_full(next);
    let bytes = format::encode(&full).map_err(|e| format!("encode a restored backend: {e}"))?;
    let back =
        format::decode(&bytes, None).map_err(|e| format!("decode a restored backend: {e}"))?;
    check(back == full, || {
        "a restored backend's snapshot does not round-trip".into()
    })
}

/// Fires every due timer of `domain`, as the runtime does (until none is due): each pending
/// timer fires at most once.
fn fire_all(backend: &mut KeyedStateBackend, domain: TimeDomain) -> Found {
    let Ok(pending) = backend.timers_pending() else {
        return Ok(());
    };
    let pending = pending.0 + pending.1;
    let _ = backend.next_timer(domain);
    let mut fired = 0;
    loop {
        match backend.take_due_timers(domain, i64::MAX, 64) {
            Ok(due) if due.is_empty() => return Ok(()),
            Ok(due) => fired += due.len(),
            Err(_) => return Ok(()),
        }
        check(fired <= pending, || {
            format!("{fired} timers fired of the {pending} pending: a timer fires forever")
        })?;
    }
}

/// Reads `bytes` as a restore does: through an object store, footer, index, then only the
/// sections of `range`.
fn read_ranged(bytes: &[u8], range: KeyGroupRange) -> Result<Increment, String> {
    use object_store::ObjectStoreExt as _;
    let store = object_store::memory::InMemory::new();
    let path = object_store::path::Path::from("state/op/0/chk-1.inc");
    runtime().block_on(async {
        store
            .put(&path, bytes::Bytes::copy_from_slice(bytes).into())
            .await
            .map_err(|e| e.to_string())?;
        weir_host::checkpoint::storage::read_increment(&store, &path, range)
            .await
            .map_err(|e| e.to_string())
    })
}

/// An artifact taken apart: its sections (with their index entries) and index checkpoint.
struct Parts {
    checkpoint: CheckpointId,
    sections: Vec<(GroupEntry, Vec<u8>)>,
}

fn from_cbor<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    let mut scratch = vec![0u8; bytes.len()];
    ciborium::de::from_reader_with_buffer(bytes, &mut scratch).ok()
}

fn take_apart(bytes: &[u8]) -> Option<Parts> {
    let footer = format::read_footer(bytes).ok()?;
    let start = usize::try_from(footer.index_offset).ok()?;
    let index_bytes = bytes.get(start..start.checked_add(footer.index_len as usize)?)?;
    let index: ArtifactIndex = from_cbor(index_bytes)?;
    let sections = index
        .groups
        .iter()
        .map(|e| {
            let from = usize::try_from(e.offset).ok()?;
            let to = from.checked_add(usize::try_from(e.len).ok()?)?;
            Some((e.clone(), bytes.get(from..to)?.to_vec()))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Parts {
        checkpoint: index.checkpoint,
        sections,
    })
}

/// Lays out `parts` as an artifact with every offset, length and checksum right.
fn put_together(parts: &Parts) -> Vec<u8> {
    let mut out = b"WEIRINC\0".to_vec();
    out.extend_from_slice(&format::VERSION.to_le_bytes());
    let mut entries = Vec::new();
    for (entry, section) in &parts.sections {
        entries.push(GroupEntry {
            group: entry.group,
            offset: out.len() as u64,
            len: section.len() as u64,
            checksum: xxh3_64(section),
        });
        out.extend_from_slice(section);
    }
    let index = ArtifactIndex {
        checkpoint: parts.checkpoint,
        groups: entries,
    };
    finish(out, &index)
}

/// Appends `index` and the footer to `out`.
fn finish(mut out: Vec<u8>, index: &ArtifactIndex) -> Vec<u8> {
    let index_offset = out.len();
    ciborium::into_writer(index, &mut out).expect("encode an index");
    let index_len = out.len() - index_offset;
    let checksum = xxh3_64(&out[index_offset..]);
    out.extend_from_slice(&(index_offset as u64).to_le_bytes());
    out.extend_from_slice(&(index_len as u32).to_le_bytes());
    out.extend_from_slice(&checksum.to_le_bytes());
    out.extend_from_slice(b"WEIRINC\0");
    out
}

fn mutate_artifact(rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
    match rng.below(5) {
        // Bytes of one section changed, the container made right around them: the CBOR
        // decoder sees them.
        0 => {
            let mut parts = take_apart(input)?;
            if parts.sections.is_empty() {
                return None;
            }
            let i = rng.below(parts.sections.len());
            havoc(rng, &mut parts.sections[i].1, None);
            Some(put_together(&parts))
        }
        // A section's CBOR changed as a tree: types, numbers, lengths.
        1 => {
            let mut parts = take_apart(input)?;
            if parts.sections.is_empty() {
                return None;
            }
            let i = rng.below(parts.sections.len());
            let mut value: ciborium::Value = from_cbor(&parts.sections[i].1)?;
            for _ in 0..1 + rng.below(3) {
                mutate_cbor(rng, &mut value);
            }
            let mut section = Vec::new();
            ciborium::into_writer(&value, &mut section).ok()?;
            parts.sections[i].1 = section;
            Some(put_together(&parts))
        }
        // The increment changed in meaning, encoded by the host's own encoder.
        2 => {
            let mut increment = format::decode(input, None).ok()?;
            mutate_increment(rng, &mut increment);
            format::encode(&increment).ok()
        }
        // The index changed (entries moved, swapped, overlapping), its checksum right.
        3 => {
            let parts = take_apart(input)?;
            let footer = format::read_footer(input).ok()?;
            let mut index = ArtifactIndex {
                checkpoint: parts.checkpoint,
                groups: parts.sections.into_iter().map(|(e, _)| e).collect(),
            };
            mutate_index(rng, &mut index);
            let body = input
                .get(..usize::try_from(footer.index_offset).ok()?)?
                .to_vec();
            Some(finish(body, &index))
        }
        // Raw bytes, then the checksums made right where the structure still holds.
        _ => {
            let mut bytes = input.to_vec();
            havoc(rng, &mut bytes, None);
            Some(match take_apart(&bytes) {
                Some(parts) if rng.one_in(2) => put_together(&parts),
                _ => bytes,
            })
        }
    }
}

/// A node of a CBOR tree, `depth` steps down at most.
fn random_node<'a>(
    rng: &mut Rng,
    node: &'a mut ciborium::Value,
    depth: usize,
) -> &'a mut ciborium::Value {
    use ciborium::Value;
    let len = match node {
        Value::Array(items) => items.len(),
        Value::Map(entries) => entries.len(),
        Value::Tag(..) => 1,
        _ => 0,
    };
    if depth == 0 || len == 0 || rng.one_in(4) {
        return node;
    }
    let i = rng.below(len);
    match node {
        Value::Array(items) => random_node(rng, &mut items[i], depth - 1),
        Value::Map(entries) => random_node(rng, &mut entries[i].1, depth - 1),
        Value::Tag(_, inner) => random_node(rng, inner, depth - 1),
        _ => unreachable!("a node with children"),
    }
}

fn mutate_cbor(rng: &mut Rng, value: &mut ciborium::Value) {
    use ciborium::Value;
    let depth = rng.below(12);
    let node = random_node(rng, value, depth);
    *node = match rng.below(14) {
        0 => Value::Integer((*rng.pick(super::mutate::INTERESTING)).into()),
        1 => Value::Integer((-1).into()),
        2 => Value::Bytes(Vec::new()),
        3 => Value::Bytes(vec![0xab; *rng.pick(&[13usize, 26, 4097, 70_000])]),
        4 => Value::Text(String::new()),
        5 => Value::Text(TIMERS_STATE.into()),
        6 => Value::Text("x".repeat(*rng.pick(&[129usize, 5000]))),
        7 => Value::Null,
        8 => Value::Bool(true),
        9 => Value::Array(Vec::new()),
        10 => Value::Map(Vec::new()),
        11 => Value::Float(f64::NAN),
        12 => Value::Tag(55799, Box::new(node.clone())),
        _ => match node {
            Value::Array(items) if !items.is_empty() => {
                let copy = items[rng.below(items.len())].clone();
                items.push(copy);
                return;
            }
            _ => Value::Text("Value".into()),
        },
    };
}

fn mutate_index(rng: &mut Rng, index: &mut ArtifactIndex) {
    let n = index.groups.len();
    match rng.below(6) {
        0 if n > 1 => {
            let (i, j) = (rng.below(n), rng.below(n));
            index.groups.swap(i, j);
        }
        1 if n > 0 => {
            let copy = index.groups[rng.below(n)].clone();
            index.groups.push(copy);
        }
        2 if n > 0 => {
            let i = rng.below(n);
            index.groups[i].offset = *rng.pick(super::mutate::INTERESTING);
        }
        3 if n > 0 => {
            let i = rng.below(n);
            index.groups[i].len = *rng.pick(super::mutate::INTERESTING);
        }
        4 if n > 0 => {
            let i = rng.below(n);
            index.groups[i].group.0 = *rng.pick(&[0, 1, 127, 128, 32767, 32768, u32::MAX]);
        }
        _ => index.checkpoint = CheckpointId(*rng.pick(super::mutate::INTERESTING)),
    }
}

/// Changes an increment's meaning: groups, names, kinds, keys, timer sets.
fn mutate_increment(rng: &mut Rng, increment: &mut Increment) {
    let bytes = |rng: &mut Rng| {
        let len = *rng.pick(&[0usize, 1, 13, 23, 24, 4096, 4097, 20_000]);
        StateBytes::copy_from_slice(&rng.bytes(len))
    };
    let n = increment.groups.len();
    match rng.below(10) {
        0 if n > 0 => {
            let i = rng.below(n);
            increment.groups[i].group.0 = *rng.pick(&[0, 1, 127, 128, 32767, 32768, u32::MAX]);
        }
        1 if n > 1 => {
            let (i, j) = (rng.below(n), rng.below(n));
            increment.groups.swap(i, j);
        }
        2 if n > 0 => {
            let copy = increment.groups[rng.below(n)].clone();
            increment.groups.push(copy);
        }
        3 => increment.checkpoint = CheckpointId(*rng.pick(super::mutate::INTERESTING)),
        _ => {
            let Some(group) = (n > 0)
                .then(|| rng.below(n))
                .map(|i| &mut increment.groups[i])
            else {
                return;
            };
            let Some(states) = (!group.states.is_empty()).then(|| rng.below(group.states.len()))
            else {
                return;
            };
            let state = &mut group.states[states];
            match rng.below(8) {
                0 => {
                    state.name = rng
                        .pick(&["", TIMERS_STATE, "@other", "count", "x"])
                        .to_string()
                }
                1 => state.name = "é".repeat(129),
                2 => state.kind = *rng.pick(&[StateKind::Value, StateKind::Map, StateKind::List]),
                3 => {
                    let key = bytes(rng);
                    state.changes.push(match state.kind {
                        StateKind::Value => Change::Value {
                            key,
                            value: Some(bytes(rng)),
                        },
                        StateKind::Map => Change::Map {
                            key,
                            cleared: rng.one_in(2),
                            entries: vec![(bytes(rng), Some(bytes(rng))), (bytes(rng), None)],
                        },
                        StateKind::List => Change::List {
                            key,
                            cleared: rng.one_in(2),
                            appended: vec![bytes(rng)],
                        },
                    });
                }
                4 if state.changes.len() > 1 => {
                    let i = rng.below(state.changes.len());
                    let copy = state.changes[i].clone();
                    state.changes.push(copy);
                }
                _ => {
                    // A timer set (or any value) taken apart and put back in another order,
                    // cut, or grown.
                    for change in &mut state.changes {
                        if let Change::Value { value: Some(v), .. } = change {
                            let mut raw = v.to_vec();
                            match rng.below(3) {
                                0 if raw.len() >= 26 => {
                                    let (a, b) = raw.split_at(13);
                                    raw = [b, a].concat();
                                }
                                1 if !raw.is_empty() => raw.truncate(raw.len() - 1),
                                _ => raw.extend_from_slice(&raw.clone()),
                            }
                            *v = StateBytes::copy_from_slice(&raw);
                            break;
                        }
                    }
                }
            }
        }
    }
}

fn key(k: &[u8]) -> KeyRef<'_> {
    KeyRef::new(k, hash_key(k))
}

fn artifact_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    let groups = KeyGroups::new(16);
    let new_backend = || KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));

    // Values, maps, lists and timers over many keys; tombstones in a second increment.
    let mut b = new_backend();
    let v = b.declare("count", StateKind::Value).expect("declare");
    let m = b.declare("seen", StateKind::Map).expect("declare");
    let l = b.declare("events", StateKind::List).expect("declare");
    for i in 0..60u32 {
        let k = format!("key-{i}");
        b.value_set(v, key(k.as_bytes()), &i.to_le_bytes())
            .expect("set");
        if i % 3 == 0 {
            b.map_put(m, key(k.as_bytes()), b"page", &[i as u8; 30])
                .expect("put");
        }
        if i % 4 == 0 {
            b.list_append(l, key(k.as_bytes()), b"e1").expect("append");
            b.list_append(l, key(k.as_bytes()), b"e2").expect("append");
        }
        if i % 5 == 0 {
            for (at, tag) in [(100, 0), (50, 1), (100, 2)] {
                let timer = Timer {
                    domain: if i % 10 == 0 {
                        TimeDomain::EventTime
                    } else {
                        TimeDomain::ProcessingTime
                    },
                    at: at + i64::from(i),
                    tag,
                };
                b.timer_register(key(k.as_bytes()), timer).expect("timer");
            }
        }
    }
    seeds.push(("values-maps-lists-timers".to_owned(), b.snapshot()));
    b.begin_at(CheckpointId(2));
    for i in (0..60u32).step_by(7) {
        let k = format!("key-{i}");
        b.value_remove(v, key(k.as_bytes())).expect("remove");
        b.map_clear(m, key(k.as_bytes())).expect("clear");
        b.list_clear(l, key(k.as_bytes())).expect("clear");
    }
    seeds.push(("tombstones-and-clears".to_owned(), b.snapshot()));
    seeds.push(("full".to_owned(), b.snapshot_full(CheckpointId(3))));

    // Keys and values longer than 4 KiB.
    let mut b = new_backend();
    let v = b.declare("blob", StateKind::Value).expect("declare");
    b.value_set(v, key(&[b'k'; 5000]), &[7; 9000]).expect("set");
    b.value_set(v, key(b"small"), &[1; 4097]).expect("set");
    seeds.push(("long-keys-and-values".to_owned(), b.snapshot()));

    // Nothing but timers.
    let mut b = new_backend();
    for i in 0..8i64 {
        let timer = Timer {
            domain: TimeDomain::EventTime,
            at: i64::MAX - i,
            tag: i as u32,
        };
        b.timer_register(key(b"t"), timer).expect("timer");
        b.timer_register(
            key(&i.to_le_bytes()),
            Timer {
                at: i64::MIN + i,
                ..timer
            },
        )
        .expect("timer");
    }
    seeds.push(("timers-only".to_owned(), b.snapshot()));

    // An empty increment.
    seeds.push((
        "empty".to_owned(),
        Increment {
            checkpoint: CheckpointId(1),
            groups: Vec::new(),
        },
    ));
    // One group of one empty state, as restores of odd subtasks see.
    seeds.push((
        "empty-state".to_owned(),
        Increment {
            checkpoint: CheckpointId(4),
            groups: vec![GroupIncrement {
                group: weir_host::partition::KeyGroup(3),
                states: vec![weir_host::state::StateChanges {
                    name: "count".into(),
                    kind: StateKind::Value,
                    changes: Vec::new(),
                }],
            }],
        },
    ));
    seeds
        .into_iter()
        .map(|(name, increment)| (name, format::encode(&increment).expect("encode")))
        .collect()
}

// ----- state values between JSON text and CBOR -----------------------------------------------

/// Input: a byte saying which way (0: JSON text from a guest, else: CBOR from the store), then
/// the value. JSON that converts must read back as JSON that converts to the same CBOR; CBOR
/// that reads as JSON must read as the same JSON once converted (integer map keys become
/// text, so the CBOR itself may change), unless it held an integer beyond 64 bits.
fn state_encoding(input: &[u8]) -> Found {
    use weir_host::state::encoding::{EncodingError, cbor_to_json, converted, json_to_cbor};
    let Some((&way, value)) = input.split_first() else {
        return Ok(());
    };
    if way == 0 {
        let Ok(cbor) = converted(value, json_to_cbor) else {
            return Ok(());
        };
        accepted();
        let json = converted(&cbor, cbor_to_json)
            .map_err(|e| format!("CBOR converted from JSON does not read back: {e}"))?;
        let again = converted(&json, json_to_cbor)
            .map_err(|e| format!("JSON read back does not convert again: {e}"))?;
        check(again == cbor, || {
            format!(
                "JSON -> CBOR -> JSON -> CBOR changed the value: {:?}",
                String::from_utf8_lossy(&json)
            )
        })
    } else {
        let Ok(json) = converted(value, cbor_to_json) else {
            return Ok(());
        };
        accepted();
        let cbor = match converted(&json, json_to_cbor) {
            Ok(cbor) => cbor,
            Err(EncodingError::IntegerTooLarge(_)) => return Ok(()),
            Err(e) => {
                return Err(format!(
                    "JSON read from CBOR does not convert back ({e}): {:?}",
                    String::from_utf8_lossy(&json)
                ));
            }
        };
        let again = converted(&cbor, cbor_to_json)
            .map_err(|e| format!("converted CBOR does not read back: {e}"))?;
        check(again == json, || {
            format!(
                "CBOR -> JSON -> CBOR -> JSON changed the value: {:?} then {:?}",
                String::from_utf8_lossy(&json),
                String::from_utf8_lossy(&again)
            )
        })
    }
}

fn mutate_state_encoding(rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
    let (&way, value) = input.split_first()?;
    if way != 0 {
        return None;
    }
    let mut tree: serde_json::Value = serde_json::from_slice(value).ok()?;
    mutate_json(rng, &mut tree);
    let mut out = vec![0];
    out.extend(serde_json::to_vec(&tree).ok()?);
    Some(out)
}

fn state_encoding_seeds() -> Vec<(String, Vec<u8>)> {
    let json: [(&str, &str); 5] = [
        ("counter", "42"),
        (
            "seen",
            r#"{"count":3,"last_seen":-17,"ratio":0.5,"tags":["a","é\n"],"p":null}"#,
        ),
        ("bytes", r#"{"$bytes":"AAH/"}"#),
        ("versioned", r#"{"$version":2,"$value":{"count":1}}"#),
        (
            "nested",
            r#"[[1,[2.5e-7,[true,false]]],{"a":{"b":[]}},NaN,-Infinity]"#,
        ),
    ];
    let mut seeds: Vec<(String, Vec<u8>)> = json
        .into_iter()
        .map(|(name, text)| {
            (
                format!("json-{name}"),
                [&[0u8][..], text.as_bytes()].concat(),
            )
        })
        .collect();
    let mut cbor = |name: &str, value: &dyn erased::Cbor| {
        seeds.push((format!("cbor-{name}"), [&[1u8][..], &value.cbor()].concat()));
    };
    cbor("struct", &(3u64, "page", 0.25f64, vec![Some(1i32), None]));
    cbor("int-keys", &BTreeMap::from([(1u32, "a"), (2, "b")]));
    cbor("bignum", &u128::MAX);
    seeds
}

/// Seeds of several types in one list.
mod erased {
    pub trait Cbor {
        fn cbor(&self) -> Vec<u8>;
    }

    impl<T: serde::Serialize> Cbor for T {
        fn cbor(&self) -> Vec<u8> {
            let mut out = Vec::new();
            ciborium::into_writer(self, &mut out).expect("CBOR");
            out
        }
    }
}

// ----- the guest's `apply` log --------------------------------------------------------------

/// The keys a guest's batch may hold (equal ones share a slot).
const BATCH_KEYS: &[&[u8]] = &[b"a", b"b", b"", b"a", &[b'k'; 40], &[0xff, 0], b"b", b"c"];

/// Input: flags (bit 0: keep an undo log; bit 1: roll back after the call; bit 2: the batch
/// came through a keyed edge; bit 3: an unkeyed record too; bit 4: the states are declared
/// as JSON, so every write and read goes through the host's conversion), the number of records (of
/// [`BATCH_KEYS`]), the operation log's length (u16 LE), the log, then the data.
fn guest_apply(input: &[u8]) -> Found {
    let (head, rest) = input.split_at(input.len().min(4));
    let [flags, records, len_lo, len_hi] = <[u8; 4]>::try_from(head).unwrap_or([0; 4]);
    let ops_len = usize::from(u16::from_le_bytes([len_lo, len_hi])).min(rest.len());
    let (ops, data) = rest.split_at(ops_len);

    let groups = KeyGroups::new(32);
    let backend = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
    let log = LogContext {
        job: Arc::from("fuzz"),
        operator: OperatorName("op".into()),
        subtask: SubtaskIndex(0),
        file: None,
    };
    let limits = GuestLimits {
        state_bytes: Some(1 << 20),
        ..GuestLimits::default()
    };
    let mut guest = GuestState::new(backend, limits, log);
    use weir_host::bindings::weir::operator::state::Encoding;
    let encoding = if flags & 16 != 0 {
        Encoding::Json
    } else {
        Encoding::Cbor
    };
    for (name, kind) in [
        (
            "v",
            weir_host::bindings::weir::operator::state::StateKind::Value,
        ),
        (
            "m",
            weir_host::bindings::weir::operator::state::StateKind::Map,
        ),
        (
            "l",
            weir_host::bindings::weir::operator::state::StateKind::List,
        ),
    ] {
        guest
            .declare(name.into(), kind, encoding)
            .map_err(|e| format!("declare: {e}"))?;
    }
    guest.backend_mut().seal_declarations();
    let mut batch = RecordBatch::new();
    for k in BATCH_KEYS
        .iter()
        .take(usize::from(records) % (BATCH_KEYS.len() + 1))
    {
        batch.push(RecordRef::keyed(k, b"v"));
    }
    if flags & 8 != 0 {
        batch.push(RecordRef::unkeyed(b"v"));
    }
    let (wit, _) = batch.into_wit();
    let hashes: Vec<_> = if flags & 4 != 0 {
        BATCH_KEYS.iter().map(|k| hash_key(k)).collect()
    } else {
        Vec::new()
    };
    let hashes = &hashes[..hashes.len().min(wit.flags.len())];
    let mut slots = Numbers::default();
    if flags & 1 != 0 {
        guest.keep_undo_log();
    }
    guest.begin_batch(&wit, hashes, &mut slots);
    if guest.apply(ops.to_vec(), data.to_vec()).is_ok() {
        accepted();
    }

    // The other state calls, with the words of the log as their arguments.
    let words: Vec<u32> = ops
        .chunks_exact(4)
        .take(16)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    let word = |i: usize| words.get(i).copied().unwrap_or(0);
    for state in 0..5u32 {
        let mut read_slots = slots.clone();
        read_slots.push(word(0) % 10);
        let mut read_slots = read_slots.into_bytes();
        if word(1) % 7 == 0 {
            // A partial item: the `u32s` of the slots cut short.
            read_slots.pop();
        }
        let _ = guest.read_values(state, read_slots);
        let slot = word(2) % 9;
        let _ = guest.map_get(
            state,
            slot,
            data.get(..data.len().min(8)).unwrap_or_default().to_vec(),
        );
        let _ = guest.map_size(state, slot);
        let after = (word(3) & 1 != 0).then(|| b"k".to_vec());
        let _ = guest.map_entries(state, slot, after, word(4));
        let _ = guest.list_read(state, slot);
    }
    if flags & 2 != 0 && flags & 1 != 0 {
        guest
            .roll_back()
            .map_err(|e| format!("rolling back a call's writes: {e}"))?;
    }
    let backend = guest.backend_mut();
    for domain in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
        fire_all(backend, domain)?;
    }
    // What a checkpoint does with the state the guest wrote.
    let increment = backend.snapshot();
    let bytes = format::encode(&increment).map_err(|e| format!("encode: {e}"))?;
    let back =
        format::decode(&bytes, None).map_err(|e| format!("decode what the guest wrote: {e}"))?;
    check(back == increment, || {
        "the guest's writes do not round-trip".into()
    })?;
    let mut restored = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
    restored
        .restore(&back)
        .map_err(|e| format!("restore what the guest wrote: {e}"))?;
    for domain in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
        fire_all(&mut restored, domain)?;
    }
    Ok(())
}

fn apply_input(flags: u8, records: u8, ops: &[[u32; 5]], data: &[u8]) -> Vec<u8> {
    let log: Vec<u8> = ops.iter().flatten().flat_map(|w| w.to_le_bytes()).collect();
    let mut out = vec![flags, records];
    out.extend_from_slice(&(log.len() as u16).to_le_bytes());
    out.extend_from_slice(&log);
    out.extend_from_slice(data);
    out
}

fn timer_bytes(at: i64, tag: u32) -> Vec<u8> {
    let mut out = at.to_le_bytes().to_vec();
    out.extend_from_slice(&tag.to_le_bytes());
    out
}

/// A log of well-formed operations, mostly: kinds, states and slots that exist, byte ranges
/// inside the data.
fn mutate_guest_apply(rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
    let flags = input.first().copied().unwrap_or(0) ^ (1 << rng.below(4));
    let records = if rng.one_in(6) {
        rng.below(BATCH_KEYS.len() + 1)
    } else {
        5 + rng.below(4)
    } as u8;
    let mut data = Vec::new();
    let mut ops = Vec::new();
    for _ in 0..1 + rng.below(12) {
        let kind = if rng.one_in(16) {
            rng.below(12) as u32
        } else {
            rng.below(9) as u32
        };
        let start = data.len() as u32;
        let (state, map_key, value): (u32, Vec<u8>, Vec<u8>) = match kind {
            7 | 8 => {
                let at = *rng.pick(&[0i64, 1, -1, 100, i64::MAX, i64::MIN, 1_700_000_000_000]);
                let value = if rng.one_in(8) {
                    let n = rng.below(20);
                    rng.bytes(n)
                } else {
                    timer_bytes(at, rng.below(3) as u32)
                };
                (rng.below(3) as u32, Vec::new(), value)
            }
            _ => {
                let len = *rng.pick(&[0usize, 1, 3, 13, 24, 100, 4097]);
                let state = if rng.one_in(8) {
                    rng.below(6) as u32
                } else {
                    kind_state(kind)
                };
                let n = rng.below(4);
                let value = if rng.one_in(6) {
                    // A timer set as the host stores it (13 bytes a timer, sorted), for a
                    // write to the timers' state.
                    let mut timers: Vec<[u8; 13]> = (0..1 + rng.below(3))
                        .map(|_| {
                            let mut t = [0u8; 13];
                            t[0] = rng.below(2) as u8;
                            let at = *rng.pick(&[0i64, 5, -3, i64::MAX]);
                            t[1..9].copy_from_slice(&((at as u64) ^ (1 << 63)).to_be_bytes());
                            t[9..].copy_from_slice(&(rng.below(3) as u32).to_be_bytes());
                            t
                        })
                        .collect();
                    timers.sort_unstable();
                    timers.concat()
                } else {
                    rng.bytes(len)
                };
                (state, rng.bytes(n), value)
            }
        };
        data.extend_from_slice(&map_key);
        let key_end = data.len() as u32;
        data.extend_from_slice(&value);
        let mut value_end = data.len() as u32;
        let slot = if rng.one_in(10) {
            *rng.pick(&[u32::MAX, 8, 100])
        } else {
            rng.below(4) as u32
        };
        if rng.one_in(20) {
            value_end = *rng.pick(&[0, start.saturating_sub(1), u32::MAX, value_end + 1]);
        }
        ops.push([kind, state, slot, key_end, value_end]);
    }
    let mut out = apply_input(flags, records, &ops, &data);
    if rng.one_in(4) {
        havoc(rng, &mut out, None);
    }
    Some(out)
}

/// The state a kind of operation goes to: 0 value, 1 map, 2 list.
fn kind_state(kind: u32) -> u32 {
    match kind {
        0 | 1 => 0,
        2..=4 => 1,
        _ => 2,
    }
}

fn guest_apply_seeds() -> Vec<(String, Vec<u8>)> {
    let mut timers = timer_bytes(5, 1);
    timers.extend_from_slice(&timer_bytes(5, 1));
    timers.extend_from_slice(&timer_bytes(-3, 0));
    vec![
        (
            "values-and-maps".into(),
            apply_input(
                0,
                4,
                &[
                    [0, 0, 0, 0, 1],
                    [2, 1, 1, 2, 4],
                    [0, 0, 1, 4, 6],
                    [1, 0, 0, 6, 6],
                ],
                b"1kxy22",
            ),
        ),
        (
            "lists-and-clears".into(),
            apply_input(
                1,
                5,
                &[
                    [5, 2, 0, 0, 2],
                    [5, 2, 0, 2, 4],
                    [6, 2, 1, 4, 4],
                    [4, 1, 2, 4, 4],
                    [3, 1, 0, 4, 5],
                ],
                b"e1e2k",
            ),
        ),
        (
            "timers".into(),
            apply_input(
                3,
                3,
                &[
                    [7, 0, 0, 0, 12],
                    [7, 1, 1, 12, 24],
                    [8, 0, 0, 24, 36],
                    [7, 0, 2, 36, 48],
                ],
                &timers
                    .iter()
                    .chain(timer_bytes(9, 9).iter())
                    .copied()
                    .collect::<Vec<_>>(),
            ),
        ),
        (
            "long-value".into(),
            apply_input(
                4,
                2,
                &[[0, 0, 1, 0, 5000], [2, 1, 0, 5000, 10000]],
                &[0x5a; 10000],
            ),
        ),
    ]
}

// ----- the batches a guest returns -----------------------------------------------------------

/// Input: flags (bits 0-1: the next edge keys by nothing, the record key, the JSON pointer
/// `/user`, or the JSON pointer ``; bit 2: bad records set aside; bits 3-4: the key ends (1),
/// value ends (2) or timestamps (3) lose their last byte, leaving a partial item), the number
/// of targets, then the columns, each a u16 LE count and its items: key ends (u32 LE), value
/// ends (u32 LE), flags (u8), timestamps (i64 LE), data (bytes).
fn guest_batch(input: &[u8]) -> Found {
    let mut r = Reader(input);
    let flags = r.u8();
    let targets = u32::from(r.u8() % 5);
    let n = usize::from(r.u16());
    let mut key_ends = (0..n)
        .map(|_| r.u32())
        .collect::<Numbers<u32>>()
        .into_bytes();
    let n = usize::from(r.u16());
    let mut value_ends = (0..n)
        .map(|_| r.u32())
        .collect::<Numbers<u32>>()
        .into_bytes();
    let n = usize::from(r.u16());
    let record_flags = (0..n).map(|_| r.u8()).collect();
    let n = usize::from(r.u16());
    let mut timestamps = (0..n)
        .map(|_| r.u64() as i64)
        .collect::<Numbers<i64>>()
        .into_bytes();
    let data = r.0.to_vec();
    match (flags >> 3) & 3 {
        1 => key_ends.pop(),
        2 => value_ends.pop(),
        3 => timestamps.pop(),
        _ => None,
    };
    let batch = RecordBatch::from_wit(Batch {
        data,
        key_ends,
        value_ends,
        flags: record_flags,
        timestamps,
    });
    if batch.validate().is_err() {
        return Ok(());
    }
    accepted();
    // What the host does with a guest's output: count, describe, route, lend to the next
    // guest, set records aside.
    let _ = (
        batch.max_timestamp(),
        batch.count_at_or_before(0),
        batch.data_len(),
    );
    for (i, record) in batch.iter().enumerate() {
        let _ = describe_record(record, Some("fuzz line 1"));
        let letter = DeadLetter {
            operator: Some("op"),
            subtask: Some(0),
            error: "fuzz",
            origin: None,
            key: record.key,
            value: record.value,
            timestamp: record.timestamp,
        };
        serde_json::from_slice::<serde_json::Value>(&letter.to_json())
            .map_err(|e| format!("a dead letter is not JSON: {e}"))?;
        if i == 0 {
            let without = batch.without(0);
            without
                .validate()
                .map_err(|e| format!("a batch without a record is malformed: {e}"))?;
            check(without.len() + 1 == batch.len(), || {
                "without lost records".into()
            })?;
        }
    }
    let (lent, columns) = batch.clone().lend();
    let mut slots = KeySlots::default();
    let mut record_slots = Numbers::default();
    slots.assign(&lent, columns.hashes(), &mut record_slots);
    check(record_slots.len() == batch.len(), || {
        "a slot per record".into()
    })?;
    let returned = RecordBatch::returned(lent, columns);
    check(returned == batch, || {
        "a lent batch comes back different".into()
    })?;

    let key_by = match flags & 3 {
        0 => None,
        1 => Some(KeyBy::RecordKey),
        2 => Some(KeyBy::JsonPointer("/user".into())),
        _ => Some(KeyBy::JsonPointer(String::new())),
    };
    let mut router = Router::new(
        key_by,
        KeyGroups::new(64),
        targets,
        3,
        "op".into(),
        "next".into(),
    );
    if flags & 4 != 0 {
        router = router.setting_bad_records_aside();
    }
    let records = batch.len();
    if router.route(batch).is_ok() {
        let mut routed = 0;
        for (target, out) in router.drain() {
            check(target < targets.max(1) as usize, || {
                format!("routed to target {target}")
            })?;
            out.validate()
                .map_err(|e| format!("a routed batch is malformed: {e}"))?;
            routed += out.len();
        }
        let mut rejected = Vec::new();
        router.drain_rejected(&mut rejected);
        check(routed + rejected.len() <= records, || {
            format!(
                "{records} records in, {routed} routed and {} set aside",
                rejected.len()
            )
        })?;
    }
    Ok(())
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

/// The input of `guest_batch` for `batch`, whose number columns hold whole items (their
/// bytes are the input's items, so they are copied as they are).
fn batch_input(flags: u8, targets: u8, batch: Batch) -> Vec<u8> {
    let mut out = vec![flags, targets];
    for (column, size) in [(&batch.key_ends, 4), (&batch.value_ends, 4)] {
        out.extend_from_slice(&((column.len() / size) as u16).to_le_bytes());
        out.extend_from_slice(column);
    }
    out.extend_from_slice(&(batch.flags.len() as u16).to_le_bytes());
    out.extend_from_slice(&batch.flags);
    out.extend_from_slice(&((batch.timestamps.len() / 8) as u16).to_le_bytes());
    out.extend_from_slice(&batch.timestamps);
    out.extend_from_slice(&batch.data);
    out
}

/// Replaces item `i` of a `u32s` column with `f` of it.
fn edit_u32(column: &mut [u8], i: usize, f: impl FnOnce(u32) -> u32) {
    let item = &mut column[4 * i..4 * i + 4];
    let old = u32::from_le_bytes([item[0], item[1], item[2], item[3]]);
    item.copy_from_slice(&f(old).to_le_bytes());
}

const BATCH_VALUES: &[&[u8]] = &[
    b"",
    b"plain",
    br#"{"user": "u1", "page": "/a"}"#,
    br#"{"user": 42}"#,
    br#"{"user": {"id": [1, 2]}}"#,
    br#"{"page": "/b"}"#,
    b"[1, 2, 3]",
    b"{\"user\": \"\xff\xfe\"}",
    b"\xff\xfe\xfd",
    br#"{"user": null}"#,
];

/// A batch as a guest would build it, then maybe one column knocked out of shape.
fn mutate_guest_batch(rng: &mut Rng, _input: &[u8]) -> Option<Vec<u8>> {
    let mut batch = RecordBatch::new();
    for _ in 0..rng.below(10) {
        let value = *rng.pick(BATCH_VALUES);
        let key = (!rng.one_in(4)).then(|| *rng.pick(BATCH_KEYS));
        let timestamp =
            (!rng.one_in(3)).then(|| *rng.pick(&[0, -1, 1_700_000_000_000, i64::MAX, i64::MIN]));
        batch.push(RecordRef {
            key,
            value,
            timestamp,
        });
    }
    let (mut wit, _) = batch.into_wit();
    let mut flags = rng.below(8) as u8;
    if rng.one_in(3) && !wit.flags.is_empty() {
        let i = rng.below(wit.flags.len());
        match rng.below(7) {
            0 => edit_u32(&mut wit.key_ends, i, |end| end.wrapping_add(1)),
            1 => edit_u32(&mut wit.value_ends, i, |end| end.wrapping_sub(1)),
            2 => edit_u32(&mut wit.value_ends, i, |_| u32::MAX),
            3 => wit.flags[i] = 0xff,
            4 => wit.timestamps.truncate(wit.timestamps.len() - 8),
            // A partial item in one of the number columns (see `guest_batch`).
            5 => flags |= (1 + rng.below(3) as u8) << 3,
            _ => wit.data.truncate(rng.below(wit.data.len() + 1)),
        }
    }
    let mut out = batch_input(flags, rng.below(5) as u8, wit);
    if rng.one_in(5) {
        havoc(rng, &mut out, None);
    }
    Some(out)
}

fn guest_batch_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (name, flags) in [("unkeyed", 0u8), ("by-key", 1), ("by-json-pointer", 2 | 4)] {
        let mut batch = RecordBatch::new();
        for (i, value) in BATCH_VALUES.iter().enumerate() {
            batch.push(RecordRef {
                key: (i % 3 != 0).then(|| BATCH_KEYS[i % BATCH_KEYS.len()]),
                value,
                timestamp: (i % 2 == 0).then_some(1_700_000_000_000 + i as i64),
            });
        }
        seeds.push((name.to_owned(), batch_input(flags, 3, batch.into_wit().0)));
    }
    seeds
}

// ----- the serve API -------------------------------------------------------------------------

/// A submission's body as `POST /v1/jobs` decodes it, then what the host does before it
/// compiles the components: writes them and the job file into the job's folder, and checks
/// the job file.
fn serve_submit(input: &[u8]) -> Found {
    let Ok(request) = serde_json::from_slice::<SubmitRequest>(input) else {
        return Ok(());
    };
    let root = scratch_dir(&format!("serve_submit-{:?}", std::thread::current().id()));
    let dir = root.join("job");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("job folder: {e}"))?;
    // The sources the seeds name, beside the job file.
    std::fs::write(dir.join("input.txt"), b"a b\n").map_err(|e| e.to_string())?;
    let prepared = weir_host::serve::registry::prepare(&dir, &dir.join("checkpoints"), &request);
    let result = (|| {
        let entries: Vec<_> = std::fs::read_dir(root)
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        check(entries == [std::ffi::OsString::from("job")], || {
            format!("a submission wrote outside its job's folder: {entries:?}")
        })?;
        let Ok(spec) = prepared else {
            return Ok(());
        };
        accepted();
        check_spec(&spec)?;
        let components =
            std::fs::canonicalize(dir.join("components")).map_err(|e| e.to_string())?;
        for op in &spec.operators {
            let component = std::fs::canonicalize(&op.component).map_err(|e| e.to_string())?;
            check(component.starts_with(&components), || {
                format!(
                    "operator `{}` runs {}, outside the job's components",
                    op.name,
                    component.display()
                )
            })?;
        }
        if let (Some(c), false) = (
            &spec.checkpoints,
            matches!(spec.source, SourceSpec::Kafka(_)),
        ) {
            let store = url::Url::parse(&c.store).map_err(|e| e.to_string())?;
            let path = store
                .to_file_path()
                .map_err(|()| format!("store {} is not the job's folder", c.store))?;
            check(path.starts_with(&dir), || {
                format!("store {} is not in the job's folder", c.store)
            })?;
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn mutate_submit(rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
    let mut request: SubmitRequest = serde_json::from_slice(input).ok()?;
    match rng.below(4) {
        0 | 1 => request.job = mutate_toml(rng, &request.job),
        2 => {
            let name = rng
                .pick(&[
                    "count", "", ".", "..", "../x", "a/b", "a\\b", ".hidden", "x\0y", "é",
                    "tokenize",
                ])
                .to_string();
            let body = match rng.below(3) {
                0 => "not base64!".to_owned(),
                1 => String::new(),
                _ => {
                    let n = rng.below(64);
                    base64::engine::general_purpose::STANDARD.encode(rng.bytes(n))
                }
            };
            request.components.insert(name, body);
        }
        _ => {
            let mut value = serde_json::to_value(&request).ok()?;
            mutate_json(rng, &mut value);
            return serde_json::to_vec(&value).ok();
        }
    }
    serde_json::to_vec(&request).ok()
}

fn submit_seeds() -> Vec<(String, Vec<u8>)> {
    let component = base64::engine::general_purpose::STANDARD.encode(b"\0asm\x0d\0\x01\0");
    let jobs = [
        (
            "text-lines",
            "[job]\nname = \"wc\"\n\n[source]\nkind = \"text-lines\"\npath = \"input.txt\"\n\n\
             [[operators]]\nname = \"tokenize\"\ncomponent = \"tokenizer.wasm\"\n\n\
             [[operators]]\nname = \"count\"\ncomponent = \"counter.wasm\"\nparallelism = 2\nkey_by = \"key\"\n\n\
             [sink]\nkind = \"stdout\"\n\n[checkpoints]\ninterval_ms = 100\n",
            &["tokenize", "count"][..],
        ),
        (
            "generator",
            "[job]\nname = \"gen\"\n\n[source]\nkind = \"generator\"\nrecords = 10\nkeys = 2\n\n\
             [[operators]]\nname = \"count\"\ncomponent = \"whatever.wasm\"\nkey_by = \"key\"\n\n\
             [sink]\nkind = \"discard\"\n",
            &["count"][..],
        ),
    ];
    jobs.iter()
        .map(|(name, job, ops)| {
            let request = SubmitRequest {
                job: (*job).to_owned(),
                components: ops
                    .iter()
                    .map(|op| (op.to_string(), component.clone()))
                    .collect(),
            };
            (
                name.to_string(),
                serde_json::to_vec_pretty(&request).expect("json"),
            )
        })
        .collect()
}

/// A checkpoint named in a path (`{ID|latest}`) and the query strings of `cancel`,
/// `restart` and `logs`, as the API's extractors decode them: the first line is the path
/// segment, the rest the query.
fn serve_query(input: &[u8]) -> Found {
    let text = String::from_utf8_lossy(input);
    let (segment, query) = text.split_once('\n').unwrap_or((&text, ""));
    if let Ok(which) = segment.parse::<Which>() {
        accepted();
        check(which.to_string().parse::<Which>() == Ok(which), || {
            format!("{which} does not read back")
        })?;
    }
    let Ok(uri) = format!("/v1/jobs/job-1/cancel?{query}").parse::<axum::http::Uri>() else {
        return Ok(());
    };
    use axum::extract::Query;
    if let Ok(Query(options)) = Query::<CancelOptions>::try_from_uri(&uri) {
        let _ = options.checkpoint;
    }
    if let Ok(Query(options)) = Query::<RestartOptions>::try_from_uri(&uri) {
        let _ = options.checkpoint.map(CheckpointId);
    }
    if let Ok(Query(options)) = Query::<LogOptions>::try_from_uri(&uri) {
        // `tail` lines of an empty log: no allocation by the number asked for.
        let log =
            weir_host::operator::GuestLogFile::new(scratch_dir("serve_query").join("guest.log"));
        let lines = log.tail(options.tail).map_err(|e| e.to_string())?;
        check(lines.is_empty(), || "lines from an empty log".into())?;
    }
    Ok(())
}

fn mutate_query(rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(input);
    let (segment, query) = text.split_once('\n').unwrap_or((&text, ""));
    let segment = if rng.one_in(3) {
        rng.pick(&[
            "latest",
            "0",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "+5",
            " 5",
            "",
            "LATEST",
            "%6c",
        ])
        .to_string()
    } else {
        segment.to_owned()
    };
    let field = rng.pick(&["checkpoint", "tail", "x", "checkpoint[]", ""]);
    let value = rng.pick(&[
        "true",
        "false",
        "1",
        "0",
        "-1",
        "18446744073709551615",
        "18446744073709551616",
        "%ff",
        "%",
        "yes",
        "",
        "1e3",
    ]);
    let query = match rng.below(3) {
        0 => format!("{field}={value}"),
        1 => format!("{query}&{field}={value}"),
        _ => {
            let mut bytes = query.as_bytes().to_vec();
            havoc(rng, &mut bytes, None);
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    Some(format!("{segment}\n{query}").into_bytes())
}

fn query_seeds() -> Vec<(String, Vec<u8>)> {
    [
        ("latest-cancel", "latest\ncheckpoint=true"),
        ("id-restart", "42\ncheckpoint=7"),
        ("logs", "1\ntail=5"),
        ("empty", "\n"),
    ]
    .iter()
    .map(|(name, text)| (name.to_string(), text.as_bytes().to_vec()))
    .collect()
}
