//! The value, map and list states of the Python and JavaScript SDKs, through the host: the
//! same "state tour" operator in both languages (`tests/guests/state-tour-*`, built with
//! `weir build`) must give the output computed here.
//!
//! The tour writes values of two encodings (integers and text), removes them, counts in a
//! map, removes map entries and clears the map, appends to and clears a list, and reads each
//! of them back after writing in the same batch (read your writes) and in later batches; it
//! also reads the map's size (Python `len(map)`, JavaScript `map.size`).
//!
//! The batch tour (`tests/guests/batch-tour-*`) does the same for the batch API: a running sum
//! per key read and written for the whole batch at once, records emitted many at a time, and
//! map, list and timer state on the key `batch.focus` chose, the map read for the whole batch
//! in one call (`get_many`).

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use support::crash::committed;
use support::{built_operator, repo, stderr, toml_path, weir, write_job};

const VALUES: [&str; 12] = [
    "a", "b", "c", "café", "17", "42", "del", "forget", "-a", "-café", "reset", "b",
];

/// `KEY VALUE` lines over five keys.
fn input() -> String {
    let mut text = String::new();
    for i in 0..2_000usize {
        let value = VALUES[(i * 7 + i / 13) % VALUES.len()];
        writeln!(text, "k{} {value}", (i * 3 + i / 5) % 5).expect("write");
    }
    text
}

#[derive(Default)]
struct KeyState {
    last: Option<String>,
    seen: BTreeMap<String, u64>,
    history: usize,
}

/// The tour's output lines, sorted (the docstring of the Python tour says what it does).
fn expected(text: &str) -> Vec<String> {
    let mut states: HashMap<&str, KeyState> = HashMap::new();
    let mut lines = Vec::new();
    for line in text.lines() {
        let (key, v) = line.split_once(' ').expect("KEY VALUE");
        let state = states.entry(key).or_default();
        let prev = state.last.clone().unwrap_or_else(|| "-".into());
        state.last = (v != "del").then(|| v.to_owned());
        let mut target = v;
        if v == "forget" {
            state.seen.clear();
        } else if let Some(x) = v.strip_prefix('-') {
            target = x;
            state.seen.remove(x);
        } else {
            *state.seen.entry(v.to_owned()).or_default() += 1;
        }
        state.history = if v == "reset" { 0 } else { state.history + 1 };
        // A map state iterates in the order of its keys' CBOR, as every state is stored
        // whatever the language: text by its length in bytes, then by its bytes.
        let mut keys: Vec<&str> = state.seen.keys().map(String::as_str).collect();
        keys.sort_by_key(|k| (k.len(), *k));
        let count = state.seen.get(target).copied().unwrap_or(0);
        lines.push(format!(
            "{key}|{prev}|{count}|{}|{}|{}",
            state.history,
            keys.join(","),
            state.seen.len()
        ));
    }
    lines.sort();
    lines
}

/// Runs the tour operator of `project` (a split stage, then the tour keyed by key over two
/// subtasks, with checkpoints) over `text` and checks its output against `expected`'s.
fn tour_gives_the_expected_output(project: &Path, text: &str, expected: fn(&str) -> Vec<String>) {
    let component = toml_path(&built_operator(project));
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), text).expect("input");
    let job = write_job(
        dir.path(),
        &format!(
            r#"
            [job]
            name = "tour"
            batch_size = 16
            [source]
            kind = "text-lines"
            path = "in.txt"
            [[operators]]
            name = "split"
            component = {component}
            config = {{ role = "split" }}
            [[operators]]
            name = "tour"
            component = {component}
            parallelism = 2
            key_by = "key"
            [sink]
            kind = "file"
            path = "out.txt"
            [checkpoints]
            store = "file://{store}"
            interval_ms = 20
            "#,
            store = dir.path().join("store").display(),
        ),
    );
    let out = weir(&["run", job.to_str().expect("utf-8"), "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let want = expected(text);
    let got = committed(dir.path());
    assert_eq!(got.len(), want.len(), "line count differs");
    if let Some((g, w)) = got.iter().zip(&want).find(|(g, w)| g != w) {
        panic!("output differs: got {g:?}, expected {w:?}");
    }
}

#[test]
fn the_python_sdk_state_tour_gives_the_expected_output() {
    tour_gives_the_expected_output(
        &repo().join("tests/guests/state-tour-python"),
        &input(),
        expected,
    );
}

#[test]
fn the_javascript_sdk_state_tour_gives_the_expected_output() {
    tour_gives_the_expected_output(
        &repo().join("tests/guests/state-tour-js"),
        &input(),
        expected,
    );
}

/// `KEY NUMBER` lines over seven keys, with zeros among the numbers.
fn numbers_input() -> String {
    let mut text = String::new();
    for i in 0..3_000i64 {
        writeln!(text, "k{} {}", (i * 3 + i / 7) % 7, (i * 13) % 21 - 10).expect("write");
    }
    text
}

/// The batch tour's output lines, sorted: `KEY|sum before|sum after|records of this NUMBER
/// before|length of the history` per record (`-` for the last unless NUMBER is 0), then
/// `KEY|end|final sum` per key, from its timer.
fn batch_expected(text: &str) -> Vec<String> {
    let mut sums: HashMap<&str, i64> = HashMap::new();
    let mut seen: HashMap<(&str, i64), u64> = HashMap::new();
    let mut history: HashMap<&str, usize> = HashMap::new();
    let mut lines: Vec<String> = text
        .lines()
        .map(|line| {
            let (key, number) = line.split_once(' ').expect("KEY NUMBER");
            let number = number.parse::<i64>().expect("a number");
            let sum = sums.entry(key).or_default();
            let before = *sum;
            *sum += number;
            let count = seen.entry((key, number)).or_default();
            let prior = *count;
            *count += 1;
            let length = history.entry(key).or_default();
            *length += 1;
            let length = if number == 0 {
                length.to_string()
            } else {
                "-".into()
            };
            format!("{key}|{before}|{sum}|{prior}|{length}")
        })
        .collect();
    lines.extend(sums.iter().map(|(key, sum)| format!("{key}|end|{sum}")));
    lines.sort();
    lines
}

#[test]
fn the_python_sdk_batch_api_gives_the_expected_output() {
    tour_gives_the_expected_output(
        &repo().join("tests/guests/batch-tour-python"),
        &numbers_input(),
        batch_expected,
    );
}

#[test]
fn the_javascript_sdk_batch_api_gives_the_expected_output() {
    tour_gives_the_expected_output(
        &repo().join("tests/guests/batch-tour-js"),
        &numbers_input(),
        batch_expected,
    );
}
