//! One behavioural test, passed by the word counter of every language: Rust
//! (`examples/wordcount/counter`), Python, JavaScript and C (`examples/languages/*-counter`),
//! each built with `weir build`.
//!
//! The same input through tokenizer -> counter (two subtasks) -> file, with checkpoints, must
//! give the same output (every word with its running count) and leave the same state: the
//! last checkpoint, restored, holds for every word exactly its count, stored as CBOR whatever
//! the language (the Python, JavaScript and C SDKs speak JSON text, which the host converts).
//! So a Python counter's savepoint restores into the Rust, JavaScript and C counters, whose
//! counts go on from where the Python one left them.
//!
//! And a counter that fails (on a record without key) tells the host which record of the
//! batch it failed on, with its traceback or stack where the language has one, and keeps
//! nothing of the failed batch.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use object_store::{ObjectStoreExt, PutPayload};
use support::crash::{committed, running_counts};
use support::{built_operator, repo, stderr, tokenize_then, weir};
use weir_host::checkpoint::CheckpointStore;
use weir_host::checkpoint::format;
use weir_host::checkpoint::storage::read_increment;
use weir_host::engine::{Engine, EngineOptions};
use weir_host::guest::WasmOperator;
use weir_host::operator::{FailureKind, OperatorInstance, SubtaskContext};
use weir_host::partition::{KeyGroupRange, KeyGroups, hash_key};
use weir_host::record::{RecordBatch, RecordRef};
use weir_host::state::{Change, KeyRef, KeyedStateBackend, StateBytes, StateKind};

/// Text with repeated words, punctuation and non-ASCII words.
fn input() -> String {
    let words = [
        "stream",
        "state",
        "Weir",
        "café",
        "naïve",
        "über",
        "x",
        "checkpoint",
        "wasm",
        "日本",
    ];
    let mut text = String::new();
    for i in 0..3_000usize {
        for j in 0..(1 + i % 7) {
            text.push_str(words[(i * 7 + j * 3) % words.len()]);
            text.push_str(if j % 3 == 0 { ", " } else { " " });
        }
        text.push('\n');
    }
    text
}

/// A count as the host stores it: CBOR, whatever the language of the counter that wrote it.
fn decode(bytes: &[u8]) -> u64 {
    ciborium::from_reader(bytes).unwrap_or_else(|e| panic!("not a CBOR count ({e}): {bytes:?}"))
}

/// Runs the word count with the counter built from `project` and checks its output and state.
fn behaves_like_the_word_counter(project: &Path) {
    let component = built_operator(project);
    let dir = tempfile::tempdir().expect("tempdir");
    let text = input();
    std::fs::write(dir.path().join("in.txt"), &text).expect("input");
    let store = dir.path().join("store");
    let job = tokenize_then(
        dir.path(),
        "name = \"wc\"\nbatch_size = 100",
        "count",
        "weir-example-counter",
        "parallelism = 2",
        &format!(
            "[checkpoints]\nstore = \"file://{}\"\ninterval_ms = 10",
            store.display()
        ),
    );
    // The counter under test instead of the Rust one the helper names.
    let job_text = std::fs::read_to_string(&job).expect("job");
    let rust = support::toml_path(&support::component("weir-example-counter"));
    assert!(job_text.contains(&rust));
    std::fs::write(
        &job,
        job_text.replace(&rust, &support::toml_path(&component)),
    )
    .expect("job");
    let out = weir(&["run", job.to_str().expect("utf-8"), "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // Output: the tokenizer lowercases each line and splits it on anything that is not
    // alphanumeric (see examples/wordcount/tokenizer).
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let expected = running_counts(words.iter().copied());
    let got = committed(dir.path());
    assert_eq!(got.len(), expected.len(), "line count differs");
    assert!(got == expected, "output differs");
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for word in words {
        *counts.entry(word.to_owned()).or_default() += 1;
    }

    // State: the last checkpoint, restored subtask by subtask.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let store = CheckpointStore::open(&format!("file://{}", store.display()), "wc").expect("store");
    let last = *runtime
        .block_on(store.completed())
        .expect("list")
        .last()
        .expect("a checkpoint");
    let metadata = runtime
        .block_on(store.read_metadata(last))
        .expect("metadata");
    assert!(
        metadata.finished,
        "the last checkpoint holds the final state"
    );
    let groups = KeyGroups::new(metadata.key_groups);
    let operator = metadata
        .operators
        .iter()
        .find(|o| o.name == "count")
        .expect("the counter's state");
    let mut found: BTreeMap<String, u64> = BTreeMap::new();
    for subtask in &operator.subtasks {
        let range = KeyGroupRange {
            start: subtask.key_groups.0,
            end: subtask.key_groups.1,
        };
        let mut backend = KeyedStateBackend::new(groups, range);
        let state = backend.declare("count", StateKind::Value).expect("declare");
        backend.seal_declarations();
        for artifact in &subtask.chain {
            let increment = runtime
                .block_on(read_increment(
                    store.object_store().as_ref(),
                    &store.resolve(&artifact.path),
                    range,
                ))
                .expect("read");
            backend.restore(&increment).expect("restore");
        }
        for word in counts.keys() {
            let key = KeyRef::new(word.as_bytes(), hash_key(word.as_bytes()));
            if !range.contains(groups.of(key.hash)) {
                continue;
            }
            if let Some(bytes) = backend.value_get(state, key).expect("get") {
                found.insert(word.clone(), decode(bytes));
            }
        }
        assert_eq!(
            backend.stats().entries,
            found
                .keys()
                .filter(|w| range.contains(groups.of(hash_key(w.as_bytes()))))
                .count(),
            "subtask {} holds state for keys that are not words",
            subtask.subtask
        );
    }
    assert_eq!(found, counts, "the restored state differs from the counts");
}

#[test]
fn the_rust_counter_behaves_like_the_word_counter() {
    behaves_like_the_word_counter(&repo().join("examples/wordcount/counter"));
}

#[test]
fn the_python_counter_behaves_like_the_word_counter() {
    behaves_like_the_word_counter(&repo().join("examples/languages/python-counter"));
}

#[test]
fn the_javascript_counter_behaves_like_the_word_counter() {
    behaves_like_the_word_counter(&repo().join("examples/languages/js-counter"));
}

#[test]
fn the_c_counter_behaves_like_the_word_counter() {
    behaves_like_the_word_counter(&repo().join("examples/languages/c-counter"));
}

/// The input lines of the tests that kill a counter after a checkpoint.
const LINES: usize = 50_000;

/// A word count (tokenizer, then a counter over two subtasks) in `dir`, checkpointing into
/// `dir/store` and paced to run for seconds, with its counter swapped for each counter in turn.
struct CounterJob {
    job: PathBuf,
    /// The job file as written, naming the Rust counter.
    written: String,
    rust: String,
}

impl CounterJob {
    fn new(dir: &Path, rust: &Path) -> Self {
        let job = tokenize_then(
            dir,
            "name = \"wc\"\nbatch_size = 16",
            "count",
            "weir-example-counter",
            "parallelism = 2",
            &format!(
                "[checkpoints]\nstore = \"file://{}\"\ninterval_ms = 20",
                dir.join("store").display()
            ),
        );
        // LINES take at least 2 s: the run is still running when a test kills it.
        support::pace_source(&job, LINES as u64 / 2);
        let written = std::fs::read_to_string(&job).expect("job");
        let rust = support::toml_path(rust);
        assert!(written.contains(&rust), "the job names the Rust counter");
        Self { job, written, rust }
    }

    fn path(&self) -> &str {
        self.job.to_str().expect("utf-8")
    }

    /// The job file, with `component` as its counter.
    fn with_counter(&self, component: &Path) {
        let text = self
            .written
            .replace(&self.rust, &support::toml_path(component));
        std::fs::write(&self.job, text).expect("job");
    }

    /// Runs the job with `component` as its counter until it completed a checkpoint, and
    /// kills it.
    fn killed_after_a_checkpoint(&self, dir: &Path, component: &Path) {
        self.with_counter(component);
        let mut run = support::spawn_run(&[self.path(), "-q"]);
        let checkpoints = dir.join("store").join("wc").join("checkpoints");
        support::wait_while_running(&mut run, "a checkpoint", || {
            !support::checkpoint_ids(&checkpoints).is_empty()
        });
        run.kill().expect("SIGKILL");
        run.wait().expect("wait");
    }
}

#[test]
fn a_python_counters_savepoint_restores_into_the_rust_javascript_and_c_counters() {
    let [rust, python, javascript, c] = counters();
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), LINES);
    let job = CounterJob::new(dir.path(), &rust.1);
    job.killed_after_a_checkpoint(dir.path(), &python.1);
    let saved = weir(&["savepoint", job.path(), "--name", "python"]);
    assert!(saved.status.success(), "{}", stderr(&saved));

    let expected = running_counts(words.iter().map(String::as_str));
    for (language, component) in [rust, javascript, c] {
        job.with_counter(&component);
        let out = weir(&["run", job.path(), "--restore", "savepoint:python", "-q"]);
        assert!(out.status.success(), "{language}: {}", stderr(&out));
        // Each restore cuts the output back to the savepoint's and goes on from there.
        assert!(
            committed(dir.path()) == expected,
            "{language}: the counts did not go on from the Python counter's"
        );
    }
}

/// A checkpoint an older host wrote (WIT 0.5.0 and earlier) holds a Python counter's JSON text
/// as it was, and its metadata names no `state_encoding`: restored into the Python counter, the
/// host converts it to CBOR and the counts go on. The old checkpoint is made from a new one,
/// its values turned back into the JSON text an older host stored.
#[test]
fn a_python_counters_checkpoint_from_an_older_weir_restores_as_its_json_text() {
    let [rust, python, ..] = counters();
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), LINES);
    let job = CounterJob::new(dir.path(), &rust.1);
    job.killed_after_a_checkpoint(dir.path(), &python.1);
    let store = dir.path().join("store");

    // Every checkpoint, as an older host would have written it.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let store = CheckpointStore::open(&format!("file://{}", store.display()), "wc").expect("store");
    let mut converted = 0;
    let mut rewritten = std::collections::HashMap::new();
    for id in runtime.block_on(store.completed()).expect("list") {
        let mut metadata = runtime.block_on(store.read_metadata(id)).expect("metadata");
        for operator in &mut metadata.operators {
            operator.wit = None;
            operator.state_encoding = None;
            for subtask in &mut operator.subtasks {
                for artifact in &mut subtask.chain {
                    // Chains share artifacts: each is turned back once.
                    if let Some(&bytes) = rewritten.get(&artifact.path) {
                        artifact.bytes = bytes;
                        continue;
                    }
                    let path = store.resolve(&artifact.path);
                    let bytes = runtime
                        .block_on(async { store.object_store().get(&path).await?.bytes().await })
                        .expect("read artifact");
                    let mut increment = format::decode(&bytes, None).expect("decode");
                    for group in &mut increment.groups {
                        for state in group.states.iter_mut().filter(|s| s.name == "count") {
                            for change in &mut state.changes {
                                if let Change::Value {
                                    value: Some(value), ..
                                } = change
                                {
                                    let json = decode(value).to_string();
                                    *value = StateBytes::copy_from_slice(json.as_bytes());
                                    converted += 1;
                                }
                            }
                        }
                    }
                    let bytes = format::encode(&increment).expect("encode");
                    artifact.bytes = bytes.len() as u64;
                    rewritten.insert(artifact.path.clone(), artifact.bytes);
                    runtime
                        .block_on(store.object_store().put(&path, PutPayload::from(bytes)))
                        .expect("write artifact");
                }
            }
        }
        runtime
            .block_on(store.write_metadata(&metadata))
            .expect("metadata");
    }
    assert!(converted > 0, "the checkpoints hold counts");

    let out = weir(&["run", job.path(), "--restore", "latest", "-q"]);
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        committed(dir.path()) == running_counts(words.iter().map(String::as_str)),
        "the counts did not go on from the older checkpoint's"
    );
    // The first checkpoint after the conversion is whole: the chain no longer holds text.
    let last = *runtime
        .block_on(store.completed())
        .expect("list")
        .last()
        .expect("one");
    let metadata = runtime
        .block_on(store.read_metadata(last))
        .expect("metadata");
    let operator = metadata.operator("count").expect("count");
    assert_eq!(operator.state_encoding.as_deref(), Some("cbor"));
    for subtask in &operator.subtasks {
        let increments: Vec<_> = subtask
            .chain
            .iter()
            .map(|a| {
                let path = store.resolve(&a.path);
                let bytes = runtime
                    .block_on(async { store.object_store().get(&path).await?.bytes().await })
                    .expect("read artifact");
                format::decode(&bytes, None).expect("decode")
            })
            .collect();
        for change in increments
            .iter()
            .flat_map(|i| &i.groups)
            .flat_map(|g| &g.states)
            .filter(|s| s.name == "count")
            .flat_map(|s| &s.changes)
        {
            if let Change::Value {
                value: Some(value), ..
            } = change
            {
                decode(value);
            }
        }
    }
}

/// The four counters: the language and its component.
fn counters() -> [(&'static str, PathBuf); 4] {
    let examples = repo().join("examples/languages");
    [
        ("Rust", support::component("weir-example-counter")),
        ("Python", built_operator(&examples.join("python-counter"))),
        ("JavaScript", built_operator(&examples.join("js-counter"))),
        ("C", built_operator(&examples.join("c-counter"))),
    ]
}

/// The only subtask of the counter `component`, opened.
fn open_counter(engine: &Engine, component: &Path) -> WasmOperator {
    let ctx = SubtaskContext::new("languages", "count", 0, 1, KeyGroups::default());
    let component = engine.load(component).expect("load");
    WasmOperator::open(engine, &component, &ctx).expect("open")
}

/// Records with these keys (None: without key), each with the value "v".
fn batch(keys: &[Option<&str>]) -> RecordBatch {
    let mut batch = RecordBatch::new();
    for key in keys {
        batch.push(match key {
            Some(key) => RecordRef::keyed(key.as_bytes(), b"v"),
            None => RecordRef::unkeyed(b"v"),
        });
    }
    batch
}

#[test]
fn a_failure_names_its_record_and_leaves_nothing_behind_in_every_language() {
    let engine = Engine::new(EngineOptions {
        cache: Some(weir_host::engine::ComponentCache::new(support::cache_dir())),
    })
    .expect("engine");
    for (language, component) in counters() {
        let mut counter = open_counter(&engine, &component);
        let mut failing = batch(&[Some("a"), Some("b"), Some("a"), None, Some("c")]);
        let error = counter
            .process(&mut failing)
            .expect_err("a record without key");
        assert_eq!(error.kind, FailureKind::Returned, "{language}: {error}");
        assert_eq!(
            error.record,
            Some(3),
            "{language}: the record without key; {error}"
        );
        assert!(
            error
                .message
                .contains("the word counter needs records keyed by word"),
            "{language}: {error}"
        );
        let trace = match language {
            "Python" => "Traceback (most recent call last):\n  File \"operator.py\", line ",
            "JavaScript" => "\n    at processBatch (operator.js:",
            _ => "",
        };
        assert!(error.message.contains(trace), "{language}: {error}");
        // What the failed call counted is gone: the host may process the batch again
        // without the failing record.
        let out = counter
            .process(&mut batch(&[Some("a"), Some("b"), Some("a")]))
            .unwrap_or_else(|e| panic!("{language}: {e}"));
        let values: Vec<_> = out
            .iter()
            .map(|r| String::from_utf8_lossy(r.value).into_owned())
            .collect();
        assert_eq!(values, ["a\t1", "b\t1", "a\t2"], "{language}");
    }
}
