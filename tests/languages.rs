//! One behavioural test, passed by the word counter of every language: Rust
//! (`examples/wordcount/counter`), Python, JavaScript and C (`examples/languages/*-counter`),
//! each built with `weir build`.
//!
//! The same input through tokenizer -> counter (two subtasks) -> file, with checkpoints, must
//! give the same output (every word with its running count) and leave the same state: the
//! last checkpoint, restored, holds for every word exactly its count. The SDKs encode state
//! differently (Rust: CBOR; Python, JavaScript, C: JSON text), so counts are compared decoded.
//!
//! And a counter that fails (on a record without key) tells the host which record of the
//! batch it failed on, with its traceback or stack where the language has one, and keeps
//! nothing of the failed batch.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use support::crash::{committed, running_counts};
use support::{built_operator, repo, stderr, tokenize_then, weir};
use weir_host::checkpoint::CheckpointStore;
use weir_host::checkpoint::storage::read_increment;
use weir_host::engine::{Engine, EngineOptions};
use weir_host::guest::WasmOperator;
use weir_host::operator::{FailureKind, OperatorInstance, SubtaskContext};
use weir_host::partition::{KeyGroupRange, KeyGroups, hash_key};
use weir_host::record::{RecordBatch, RecordRef};
use weir_host::state::{KeyRef, KeyedStateBackend, StateKind};

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

/// How the counter's SDK stores a count.
enum Encoding {
    Cbor,
    Json,
}

fn decode(bytes: &[u8], encoding: &Encoding) -> u64 {
    match encoding {
        Encoding::Cbor => ciborium::from_reader(bytes).expect("a CBOR count"),
        Encoding::Json => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not a JSON count: {bytes:?}")),
    }
}

/// Runs the word count with the counter built from `project` and checks its output and state.
fn behaves_like_the_word_counter(project: &Path, encoding: Encoding) {
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
                found.insert(word.clone(), decode(bytes, &encoding));
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
    behaves_like_the_word_counter(&repo().join("examples/wordcount/counter"), Encoding::Cbor);
}

#[test]
fn the_python_counter_behaves_like_the_word_counter() {
    behaves_like_the_word_counter(
        &repo().join("examples/languages/python-counter"),
        Encoding::Json,
    );
}

#[test]
fn the_javascript_counter_behaves_like_the_word_counter() {
    behaves_like_the_word_counter(
        &repo().join("examples/languages/js-counter"),
        Encoding::Json,
    );
}

#[test]
fn the_c_counter_behaves_like_the_word_counter() {
    behaves_like_the_word_counter(&repo().join("examples/languages/c-counter"), Encoding::Json);
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
