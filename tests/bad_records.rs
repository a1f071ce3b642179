//! Bad records: a line the source cannot read, a record `key_by` cannot key, a record an
//! operator fails on. By default each fails the job naming the record; `on_bad_record` and
//! `on_error` can skip them (counted in the summary) or write them to a dead-letter file,
//! exactly once across crashes, like the job's output.

use crate::support;

use std::path::{Path, PathBuf};

use support::crash::{Rng, extra_lines, kill_until_finished, seed};
use support::{assert_clean_failure, component, stderr, toml_path, weir, write_job};

/// What `write_events` wrote: the expected output and the expected dead letters (as
/// `(origin line, value)`), both sorted.
struct Events {
    good: Vec<String>,
    bad_json: Vec<(u64, String)>,
    no_user: Vec<(u64, String)>,
}

/// Writes `events.jsonl`: `n` events, among them lines that are not JSON (every 97th) and
/// events without a `/user` (every 89th).
fn write_events(dir: &Path, n: u64) -> Events {
    let mut text = String::new();
    let mut events = Events {
        good: Vec::new(),
        bad_json: Vec::new(),
        no_user: Vec::new(),
    };
    for i in 1..=n {
        let line = if i % 97 == 0 {
            let line = format!("{{\"user\": \"u{i}\", oops");
            events.bad_json.push((i, line.clone()));
            line
        } else if i % 89 == 0 {
            let line = format!("{{\"id\":{i}}}");
            events.no_user.push((i, line.clone()));
            line
        } else {
            let line = format!("{{\"user\":\"u{}\",\"id\":{i}}}", i % 13);
            events.good.push(line.clone());
            line
        };
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(dir.join("events.jsonl"), text).expect("write events");
    events.good.sort();
    events
}

/// JSON lines -> `pass` (the faulty test guest passing records through), keyed by `/user`
/// -> `out.txt`, with `source_lines` in `[source]`, `operator_lines` in the operator and
/// `tail` after the sink.
fn job(dir: &Path, source_lines: &str, operator_lines: &str, tail: &str) -> PathBuf {
    write_job(
        dir,
        &format!(
            r#"
            [job]
            name = "bad-records"
            batch_size = 16
            [source]
            kind = "json-lines"
            path = "events.jsonl"
            {source_lines}
            [[operators]]
            name = "pass"
            component = {component}
            parallelism = 2
            key_by = {{ json_pointer = "/user" }}
            {operator_lines}
            [sink]
            kind = "file"
            path = "out.txt"
            {tail}
            "#,
            component = toml_path(&component("weir-test-faulty")),
        ),
    )
}

fn lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// The dead letters of `path` as `(origin line, value, error)`, sorted; each letter names
/// `operator` (`None`: the source) and `events.jsonl` as its origin.
fn letters(path: &Path, operator: Option<&str>) -> Vec<(u64, String, String)> {
    let mut letters: Vec<(u64, String, String)> = lines(path)
        .iter()
        .map(|line| {
            let letter: serde_json::Value = serde_json::from_str(line).expect("a JSON letter");
            assert_eq!(letter["operator"].as_str(), operator, "{letter}");
            let origin = letter["origin"].as_str().expect("an origin");
            let (file, number) = origin.rsplit_once(" line ").expect("FILE line N");
            assert!(file.ends_with("events.jsonl"), "{origin}");
            (
                number.parse().expect("a line number"),
                letter["value"].as_str().expect("a value").to_owned(),
                letter["error"].as_str().expect("an error").to_owned(),
            )
        })
        .collect();
    letters.sort();
    letters
}

fn without_errors(letters: Vec<(u64, String, String)>) -> Vec<(u64, String)> {
    letters.into_iter().map(|(n, v, _)| (n, v)).collect()
}

#[test]
fn by_default_a_bad_line_fails_the_job_naming_its_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let events = write_events(dir.path(), 200);
    let job = job(dir.path(), "", "", "");
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    let first = events.no_user[0].0.min(events.bad_json[0].0);
    assert_clean_failure(&out, &[&format!("events.jsonl line {first}")]);
}

#[test]
fn skipped_lines_and_records_are_counted_and_the_rest_goes_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let events = write_events(dir.path(), 2_000);
    let job = job(
        dir.path(),
        "on_bad_record = \"skip\"",
        "on_bad_record = \"skip\"",
        "",
    );
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(lines(&dir.path().join("out.txt")), events.good);
    assert!(
        err.contains(&format!(
            "bad records at the source: {} skipped, 0 dead-lettered",
            events.bad_json.len()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "bad records at pass: {} skipped, 0 dead-lettered",
            events.no_user.len()
        )),
        "{err}"
    );
}

#[test]
fn dead_letters_say_why_and_where_and_are_exactly_once_across_kills() {
    let seed = seed();
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().expect("tempdir");
    // Enough input that a run outlives two kills, however fast a start is.
    let events = write_events(dir.path(), 200_000);
    let job = job(
        dir.path(),
        "on_bad_record = { dead_letter = \"unreadable.jsonl\" }",
        "on_bad_record = { dead_letter = \"unkeyed.jsonl\" }",
        "[checkpoints]\ninterval_ms = 10",
    );
    let job = job.to_str().expect("utf-8");
    let good = events.good.clone();
    let kills = kill_until_finished(job, dir.path(), &good, &mut rng, (80, 250));
    eprintln!("{kills} runs killed");
    assert!(
        kills >= 2,
        "too few runs were killed ({kills}) to test anything"
    );
    let out = weir(&["run", job, "--restore", "latest"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        lines(&dir.path().join("out.txt")) == good,
        "output differs (seed {seed})"
    );

    let unreadable = letters(&dir.path().join("unreadable.jsonl"), None);
    assert!(
        unreadable
            .iter()
            .all(|(_, _, e)| e.contains("not valid JSON")),
        "{unreadable:?}"
    );
    let expected_unreadable: Vec<(u64, String)> = events.bad_json.clone();
    let got = without_errors(unreadable);
    let extra = extra_lines(
        &got.iter().map(|l| format!("{l:?}")).collect::<Vec<_>>(),
        &expected_unreadable
            .iter()
            .map(|l| format!("{l:?}"))
            .collect::<Vec<_>>(),
    );
    assert!(
        extra.is_empty(),
        "duplicated dead letters (seed {seed}): {extra:?}"
    );
    assert_eq!(got, expected_unreadable, "seed {seed}");

    let unkeyed = letters(&dir.path().join("unkeyed.jsonl"), Some("pass"));
    assert!(
        unkeyed
            .iter()
            .all(|(_, _, e)| e.contains("JSON pointer \"/user\"")),
        "{unkeyed:?}"
    );
    assert_eq!(without_errors(unkeyed), events.no_user, "seed {seed}");
}

#[test]
fn a_dead_letter_file_cannot_be_the_output_and_a_policy_must_be_known() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_events(dir.path(), 10);
    let job = job(
        dir.path(),
        "on_bad_record = { dead_letter = \"out.txt\" }",
        "",
        "",
    );
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_clean_failure(&out, &["[source] on_bad_record", "is the sink's output"]);

    let job = self::job(dir.path(), "", "on_error = \"ignore\"", "");
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_clean_failure(&out, &["unknown policy \"ignore\"", "dead_letter"]);
}

/// Writes `in.txt`: lines of words over a small vocabulary, `boom` among them now and then;
/// returns the words in order.
fn write_words(dir: &Path, lines: usize) -> Vec<String> {
    let mut words = Vec::new();
    let mut text = String::new();
    for i in 0..lines {
        let line: Vec<String> = (0..4)
            .map(|j| {
                if (i * 4 + j) % 53 == 17 {
                    "boom".to_owned()
                } else {
                    format!("w{}", (i * 7 + j * 3) % 23)
                }
            })
            .collect();
        text.push_str(&line.join(" "));
        text.push('\n');
        words.extend(line);
    }
    std::fs::write(dir.join("in.txt"), text).expect("write input");
    words
}

#[test]
fn an_operator_error_names_the_record_and_its_source_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), "a\nb\nboom\nc\n").expect("input");
    let job = write_job(
        dir.path(),
        &format!(
            r#"
            [job]
            name = "named"
            [source]
            kind = "text-lines"
            path = "in.txt"
            [[operators]]
            name = "victim"
            component = {component}
            config = {{ mode = "error-on", word = "boom" }}
            [sink]
            kind = "file"
            path = "out.txt"
            "#,
            component = toml_path(&component("weir-test-faulty")),
        ),
    );
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    assert_clean_failure(
        &out,
        &[
            "error: faulty operator: error on value `boom`\nin operator `victim` subtask 0, which \
             returned an error on the record without key and with value \"boom\" (",
            "in.txt line 3)",
        ],
    );
}

#[test]
fn records_an_operator_fails_on_are_set_aside_and_the_failed_calls_writes_taken_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let words = write_words(dir.path(), 1_000);
    let booms = words.iter().filter(|w| *w == "boom").count();
    assert!(booms > 50, "{booms}");
    let counter =
        support::built_operator(&support::repo().join("tests/guests/count-or-fail-python"));
    let job = |on_error: &str| {
        support::tokenize_then_component(
            dir.path(),
            "name = \"set-aside\"\nbatch_size = 64",
            "count",
            &counter,
            &format!("parallelism = 2\nconfig = {{ word = \"boom\" }}\non_error = {on_error}"),
            "",
        )
    };
    // The counts of every word but `boom`: a failed call's writes, taken back, count nothing.
    let expected =
        support::crash::running_counts(words.iter().map(String::as_str).filter(|w| *w != "boom"));

    let skip = job("\"skip\"");
    let out = weir(&["run", skip.to_str().expect("utf-8")]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        lines(&dir.path().join("out.txt")) == expected,
        "the output of a run that skipped {booms} records differs"
    );
    assert!(
        err.contains(&format!(
            "bad records at count: {booms} skipped, 0 dead-lettered"
        )),
        "{err}"
    );

    let letters_at = dir.path().join("failed.jsonl");
    let dead = job("{ dead_letter = \"failed.jsonl\" }");
    let out = weir(&["run", dead.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(lines(&dir.path().join("out.txt")) == expected);
    let letters = lines(&letters_at);
    assert_eq!(letters.len(), booms);
    for line in &letters {
        let letter: serde_json::Value = serde_json::from_str(line).expect("a JSON letter");
        assert_eq!(letter["operator"], "count", "{letter}");
        assert_eq!(letter["value"], "boom", "{letter}");
        let error = letter["error"].as_str().expect("an error");
        assert!(
            error.contains("ValueError: boom is the word this operator fails on"),
            "{error}"
        );
    }
}
