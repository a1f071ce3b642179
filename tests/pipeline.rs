//! The cross-language example pipeline (`examples/pipeline`): JSON-lines events parsed in
//! Python, filtered in C, aggregated per page in Rust (map state), formatted in JavaScript.
//!
//! Its output is compared with an expectation computed here from the input, independently of
//! Weir, once for an uninterrupted run and once for a run SIGKILLed at random instants and
//! restored from its latest checkpoint until it finishes.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use support::crash::{Rng, committed, crash_then_finish, seed};
use support::{built_operator, component, stderr, toml_path, write_job};

/// Pages, actions and users of generated events.
const PAGES: [&str; 9] = [
    "/",
    "/docs",
    "/docs/install",
    "/pricing",
    "/blog/wasm",
    "/login",
    "/ünïcode",
    "/a\"b",
    "/x y",
];
const ACTIONS: [&str; 5] = ["view", "click", "buy", "heartbeat", "view"];

/// Writes `events` JSON lines (with some that are not events) to `path`; returns the expected
/// output lines, sorted.
fn write_events(path: &Path, events: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed | 1);
    let mut text = String::new();
    for i in 0..events {
        let line = match rng.below(50) {
            0 => r#"{"user": "u1", "page": "/docs""#.to_owned(), // cut short
            1 => r#"{"user": "u2", "page": "/", "action": "view", "ms": "fast"}"#.to_owned(),
            2 => format!(r#"{{"user": "u3", "page": "/", "action": "view", "ms": {i}.5}}"#),
            _ => {
                let ms = match rng.below(10) {
                    0 => 30_000 + rng.below(3), // at and just above the filter's bound
                    _ => rng.below(1000),
                };
                serde_json::json!({
                    "user": format!("u{}", rng.below(50)),
                    "page": PAGES[rng.below(PAGES.len() as u64) as usize],
                    "action": ACTIONS[rng.below(ACTIONS.len() as u64) as usize],
                    "ms": ms,
                })
                .to_string()
            }
        };
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(path, &text).expect("write events");
    expected_output(&text)
}

/// What the pipeline must write for `input`, computed without Weir: the events that parse,
/// minus heartbeats and those slower than 30 s, aggregated per page in input order.
fn expected_output(input: &str) -> Vec<String> {
    #[derive(Default)]
    struct Page {
        actions: BTreeMap<String, u64>,
        ms_total: u64,
    }
    let mut pages: HashMap<String, Page> = HashMap::new();
    let mut out = Vec::new();
    for line in input.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let field = |name: &str| event.get(name).and_then(|v| v.as_str());
        let (Some(page), Some(action), Some(_user), Some(ms)) = (
            field("page"),
            field("action"),
            field("user"),
            event.get("ms").and_then(|v| v.as_u64()),
        ) else {
            continue;
        };
        if action == "heartbeat" || ms > 30_000 {
            continue;
        }
        let state = pages.entry(page.to_owned()).or_default();
        let count = state.actions.entry(action.to_owned()).or_default();
        *count += 1;
        let count = *count;
        state.ms_total += ms;
        out.push(format!(
            "page={page} action={action} count={count} actions={} total_ms={}",
            state.actions.len(),
            state.ms_total
        ));
    }
    out.sort();
    out
}

/// The example's job file, rewritten into `dir`: components by absolute path, input
/// `events.jsonl` and output `out.txt` in `dir`, and `checkpoints` lines.
fn pipeline_job(dir: &Path, batch_size: usize, checkpoints: &str) -> PathBuf {
    let example = support::repo().join("examples/pipeline");
    write_job(
        dir,
        &format!(
            r#"
            [job]
            name = "pipeline"
            batch_size = {batch_size}
            [source]
            kind = "text-lines"
            path = "events.jsonl"
            [[operators]]
            name = "parse"
            component = {parse}
            [[operators]]
            name = "filter"
            component = {filter}
            parallelism = 2
            key_by = "key"
            config = {{ max_ms = 30000 }}
            [[operators]]
            name = "aggregate"
            component = {aggregate}
            parallelism = 2
            key_by = "key"
            [[operators]]
            name = "format"
            component = {format}
            [sink]
            kind = "file"
            path = "out.txt"
            [checkpoints]
            {checkpoints}
            "#,
            parse = toml_path(&built_operator(&example.join("parse"))),
            filter = toml_path(&built_operator(&example.join("filter"))),
            aggregate = toml_path(&component("weir-example-aggregate")),
            format = toml_path(&built_operator(&example.join("format"))),
        ),
    )
}

#[test]
fn the_four_language_pipeline_gives_the_expected_output() {
    let seed = seed();
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_events(&dir.path().join("events.jsonl"), 5_000, seed);
    let job = pipeline_job(dir.path(), 256, "interval_ms = 20");
    let out = support::weir_logging(
        &["run", job.to_str().expect("utf-8"), "-q"],
        "warn,weir::guest=warn",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let got = committed(dir.path());
    assert_eq!(
        got.len(),
        expected.len(),
        "line count differs (seed {seed})"
    );
    assert!(got == expected, "output differs (seed {seed})");
    // The Python parser said which lines it skipped, tagged with where it runs.
    let log = stderr(&out);
    assert!(
        log.lines()
            .any(|l| l.contains("skipping a line that is not an event")
                && l.contains("operator=\"parse\"")),
        "{log}"
    );
}

#[test]
fn the_pipeline_killed_at_random_instants_and_restored_gives_exactly_the_same_output() {
    let seed = seed();
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_events(&dir.path().join("events.jsonl"), 150_000, seed);
    let job = pipeline_job(
        dir.path(),
        64,
        "interval_ms = 20\nretain = 2\nrestart_attempts = 0",
    );
    let job = job.to_str().expect("utf-8");
    crash_then_finish(job, dir.path(), &expected, (seed, &mut rng), (30, 300), 3);
}
