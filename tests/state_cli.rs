//! `weir state get|scan` on the checkpoints of a real run: the example word count (tokenizer,
//! then the Rust counter, whose `count` state is a CBOR integer per word) runs to the end of
//! its input with a local store, and the state read back offline must agree with the counts
//! in the job's output.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use support::{assert_clean_failure, checkpoint_ids, tokenize_then, weir};
use weir_host::partition::{KeyGroups, hash_key};

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "weir failed ({:?}):\n{}",
        out.status.code(),
        support::stderr(out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the word count over the example input (ten times, so that counts pass 23, the
/// largest CBOR integer of one byte) with 3 counter subtasks; returns the job file and each
/// word's final count from the output (`word<TAB>running count` lines: the largest).
fn run_wordcount(dir: &Path) -> (String, BTreeMap<String, u64>) {
    let text = std::fs::read_to_string(support::repo().join("examples/wordcount/input.txt"))
        .expect("example input");
    std::fs::write(dir.join("in.txt"), text.repeat(10)).expect("input");
    let store = url::Url::from_directory_path(dir.join("store")).expect("absolute");
    let job = tokenize_then(
        dir,
        "name = \"wordcount\"",
        "count",
        "weir-example-counter",
        "parallelism = 3",
        &format!("[checkpoints]\nstore = \"{store}\""),
    );
    let job = job.to_str().expect("utf-8").to_owned();
    stdout(&weir(&["run", &job]));
    let output = std::fs::read_to_string(dir.join("out.txt")).expect("output");
    let mut counts = BTreeMap::new();
    for line in output.lines() {
        let (word, n) = line.split_once('\t').expect("word<TAB>count");
        let n: u64 = n.parse().expect("a count");
        let most = counts.entry(word.to_owned()).or_insert(0);
        *most = (*most).max(n);
    }
    assert!(counts.len() > 50, "{counts:?}");
    (job, counts)
}

/// The JSON rows `weir state ... --json` printed.
fn json_rows(out: &Output) -> Vec<serde_json::Value> {
    let text = stdout(out);
    let parsed: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"));
    parsed.as_array().expect("a JSON array").clone()
}

#[test]
fn state_read_offline_agrees_with_the_jobs_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (job, counts) = run_wordcount(dir.path());
    let ids = checkpoint_ids(&dir.path().join("store/wordcount/checkpoints"));
    let latest = ids.last().expect("a completed checkpoint").to_string();

    // `get`: the most frequent word and a rare one, by `latest` and by id.
    let (frequent, most) = counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(w, n)| (w.clone(), *n))
        .expect("words");
    assert!(most > 23, "{frequent}: {most}");
    let (rare, few) = counts
        .iter()
        .min_by_key(|(_, n)| **n)
        .map(|(w, n)| (w.clone(), *n))
        .expect("words");
    for (word, count) in [(&frequent, most), (&rare, few)] {
        for checkpoint in ["latest", latest.as_str()] {
            let table = stdout(&weir(&[
                "state",
                "get",
                "--key",
                word,
                "--operator",
                "count",
                "--store",
                &job,
                "--checkpoint",
                checkpoint,
            ]));
            let lines: Vec<&str> = table.lines().collect();
            let group = KeyGroups::new(128).of(hash_key(word.as_bytes()));
            assert_eq!(
                lines[0],
                format!(
                    "checkpoint {latest} of job `wordcount`, operator `count`, key group {}",
                    group.0
                ),
                "{table}"
            );
            assert_eq!(
                lines[1].split_whitespace().collect::<Vec<_>>(),
                ["KEY", "STATE", "VALUE"],
                "{table}"
            );
            assert_eq!(
                lines[2..]
                    .iter()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>())
                    .collect::<Vec<_>>(),
                [[word.as_str(), "count", &count.to_string()]],
                "{table}"
            );
        }
        let rows = json_rows(&weir(&[
            "state",
            "get",
            "--key",
            word,
            "--operator",
            "count",
            "--store",
            &job,
            "--json",
        ]));
        assert_eq!(rows.len(), 1, "{rows:?}");
        let row = &rows[0];
        assert_eq!(row["key"], word.as_str());
        assert_eq!(row["state"], "count");
        assert_eq!(row["kind"], "value");
        assert_eq!(row["value"], count, "{row}");
        assert_eq!(
            row["key_group"],
            KeyGroups::new(128).of(hash_key(word.as_bytes())).0
        );
        // The Rust SDK's CBOR of the count.
        let mut cbor = Vec::new();
        ciborium::into_writer(&count, &mut cbor).expect("cbor");
        let hex: String = cbor.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(row["raw_hex"], format!("0x{hex}"));
    }

    // A key that never occurred: no rows, no failure.
    let out = stdout(&weir(&[
        "state",
        "get",
        "--key",
        "zzz-not-a-word",
        "--operator",
        "count",
        "--store",
        &job,
    ]));
    assert!(out.contains("key `zzz-not-a-word` has no state"), "{out}");
    let rows = json_rows(&weir(&[
        "state",
        "get",
        "--key",
        "zzz-not-a-word",
        "--operator",
        "count",
        "--store",
        &job,
        "--json",
    ]));
    assert!(rows.is_empty());

    // `scan --prefix`: exactly the output's words with that prefix, with their counts.
    for prefix in ["s", "st", "wei"] {
        let expected: BTreeMap<String, u64> = counts
            .iter()
            .filter(|(w, _)| w.starts_with(prefix))
            .map(|(w, n)| (w.clone(), *n))
            .collect();
        assert!(!expected.is_empty(), "no word starts with {prefix}");
        let rows = json_rows(&weir(&[
            "state",
            "scan",
            "--prefix",
            prefix,
            "--limit",
            "0",
            "--operator",
            "count",
            "--store",
            &job,
            "--state",
            "count",
            "--json",
        ]));
        let found: BTreeMap<String, u64> = rows
            .iter()
            .map(|r| {
                (
                    r["key"].as_str().expect("text key").to_owned(),
                    r["value"].as_u64().expect("a count"),
                )
            })
            .collect();
        assert_eq!(found.len(), rows.len(), "each key once");
        assert_eq!(found, expected, "prefix {prefix}");

        let table = stdout(&weir(&[
            "state",
            "scan",
            "--prefix",
            prefix,
            "--operator",
            "count",
            "--store",
            &job,
        ]));
        let words: BTreeMap<String, u64> = table
            .lines()
            .skip(2)
            .map(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(cells.len(), 3, "{l}");
                assert_eq!(cells[1], "count", "{l}");
                (cells[0].to_owned(), cells[2].parse().expect("a count"))
            })
            .collect();
        assert_eq!(words, expected, "{table}");
    }

    // The limit: said so when there are more.
    let table = stdout(&weir(&[
        "state",
        "scan",
        "--limit",
        "5",
        "--operator",
        "count",
        "--store",
        &job,
    ]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2 + 5 + 1, "{table}");
    assert!(lines[7].contains("more entries not shown"), "{table}");
    let all = json_rows(&weir(&[
        "state",
        "scan",
        "--limit",
        "0",
        "--operator",
        "count",
        "--store",
        &job,
        "--json",
    ]));
    assert_eq!(all.len(), counts.len());

    // The store as a URL and as a folder name the same state.
    let url = url::Url::from_directory_path(dir.path().join("store"))
        .expect("absolute")
        .to_string();
    let folder = dir.path().join("store/wordcount");
    for store in [url.as_str(), folder.to_str().expect("utf-8")] {
        let rows = json_rows(&weir(&[
            "state",
            "get",
            "--key",
            &frequent,
            "--operator",
            "count",
            "--store",
            store,
            "--json",
        ]));
        assert_eq!(rows[0]["value"], most, "{store}");
    }
}

#[test]
fn wrong_operators_checkpoints_and_arguments_are_input_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (job, _) = run_wordcount(dir.path());
    let ids = checkpoint_ids(&dir.path().join("store/wordcount/checkpoints"));
    let listed: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let listed = listed.join(", ");

    let out = weir(&[
        "state",
        "get",
        "--key",
        "weir",
        "--operator",
        "cuont",
        "--store",
        &job,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(
        &out,
        &["no operator `cuont`", "its operators: tokenize, count"],
    );

    let out = weir(&[
        "state",
        "scan",
        "--operator",
        "count",
        "--store",
        &job,
        "--checkpoint",
        "9999",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(&out, &["checkpoint 9999", &listed]);

    let out = weir(&["state", "get", "--operator", "count", "--store", &job]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert!(support::stderr(&out).contains("--key"));

    let missing = dir.path().join("nowhere");
    let out = weir(&[
        "state",
        "scan",
        "--operator",
        "count",
        "--store",
        missing.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(&out, &["nowhere"]);
}
