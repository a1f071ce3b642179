//! A run from the beginning beside the checkpoints of an earlier run of the same job, and
//! automatic restarts: no run may exit 0 with committed output gone.
//!
//! The scenario a new user hit: a word count with checkpoints ran (to its end, or until it was
//! killed); then one operator was changed so that it fails on some record, and the job was
//! run again without `--restore`. That run started the output afresh, failed before its first
//! checkpoint, and its automatic restart restored the *earlier* run's latest checkpoint: "the
//! job had finished; committing its output", exit 0, an empty output. Now such a run is
//! refused (exit 2, output untouched) unless the user continues (`--restore latest`) or starts
//! over (`--fresh`), and a restart restores only what its own run began from or completed.

use crate::support;

use std::path::{Path, PathBuf};

use support::crash::{committed, running_counts};
use support::{assert_clean_failure, stderr, tokenize_then};

/// The word that makes the changed operator fail.
const BOOM: &str = "boom";

/// Writes `in.txt`: `lines` lines of words, `boom` among the first ones; returns the word
/// count's expected output.
fn write_input(dir: &Path, lines: usize) -> Vec<String> {
    let mut text = String::new();
    let mut words = Vec::new();
    for i in 0..lines {
        let line = if i == 3 {
            format!("w1 {BOOM} w2")
        } else {
            format!("w{} w{} w{}", i % 97, i % 31, i % 7)
        };
        words.extend(line.split(' ').map(str::to_owned));
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(dir.join("in.txt"), text).expect("write input");
    running_counts(words.iter().map(String::as_str))
}

/// Two job files of the same job (`name`, store, sink): the word count `good.toml`, and
/// `bad.toml`, whose counter was replaced by one that fails on the word `fail_on`.
fn jobs(dir: &Path, name: &str, fail_on: &str) -> (PathBuf, PathBuf) {
    let store = dir.join("store");
    let head = format!("name = \"{name}\"\nbatch_size = 16");
    let checkpoints = format!(
        "[checkpoints]\nstore = \"file://{}\"\ninterval_ms = 5\nretain = 4",
        store.display()
    );
    let good = tokenize_then(
        dir,
        &head,
        "count",
        "weir-example-counter",
        "",
        &checkpoints,
    );
    let good_path = dir.join("good.toml");
    std::fs::rename(good, &good_path).expect("rename");
    let bad = tokenize_then(
        dir,
        &head,
        "count",
        "weir-test-faulty",
        &format!("config = {{ mode = \"error-on\", word = \"{fail_on}\" }}"),
        &format!("{checkpoints}\nrestart_attempts = 2"),
    );
    let bad_path = dir.join("bad.toml");
    std::fs::rename(bad, &bad_path).expect("rename");
    (good_path, bad_path)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

/// The ids of the job's completed checkpoints in `dir/store`, ascending.
fn checkpoint_ids(dir: &Path, name: &str) -> Vec<u64> {
    support::checkpoint_ids(&dir.join("store").join(name).join("checkpoints"))
}

/// The changed job, run without `--restore`, is refused and leaves the output alone; with
/// `--fresh`, it starts over and fails, never exiting 0.
fn assert_a_fresh_failing_run_never_reports_success(dir: &Path, bad: &Path, before: &[String]) {
    let out = support::weir(&["run", path(bad)]);
    assert_eq!(out.status.code(), Some(2), "refused: {}", stderr(&out));
    assert_clean_failure(&out, &["already holds", "--restore latest", "--fresh"]);
    assert!(
        committed(dir) == before,
        "a refused run must leave the committed output as it was"
    );

    let out = support::weir(&["run", path(bad), "--fresh"]);
    assert_clean_failure(&out, &["operator `count`", BOOM, "after 2 restarts"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[test]
fn a_fresh_run_beside_a_finished_run_is_refused_or_fails_but_never_loses_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(dir.path(), 3_000);
    let (good, bad) = jobs(dir.path(), "finished", BOOM);
    let out = support::weir(&["run", path(&good), "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(committed(dir.path()) == expected, "the first run's output");

    assert_a_fresh_failing_run_never_reports_success(dir.path(), &bad, &expected);

    // Starting over with the good job gives the whole output again.
    let out = support::weir(&["run", path(&good), "--fresh", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        committed(dir.path()) == expected,
        "the output after --fresh"
    );
}

#[test]
fn a_fresh_run_beside_a_killed_run_is_refused_or_fails_but_never_loses_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(dir.path(), 200_000);
    let (good, bad) = jobs(dir.path(), "killed", BOOM);

    // Run the word count until it has completed a few checkpoints, then SIGKILL it.
    let mut child = support::spawn_run(&[path(&good), "-q"]);
    support::wait_while_running(&mut child, "two checkpoints", || {
        checkpoint_ids(dir.path(), "killed").len() >= 2
    });
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let partial = committed(dir.path());
    assert!(
        partial.len() < expected.len(),
        "the killed run must not have finished"
    );

    assert_a_fresh_failing_run_never_reports_success(dir.path(), &bad, &partial);
}

#[test]
fn a_restart_restores_the_checkpoint_its_run_began_from_not_a_newer_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Long enough for several checkpoints 5 ms apart on a fast machine too.
    write_input(dir.path(), 30_000);
    // `w5` ends every seventh line: any batch of 16 lines holds it.
    let (good, bad) = jobs(dir.path(), "lineage", "w5");
    let out = support::weir(&["run", path(&good), "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ids = checkpoint_ids(dir.path(), "lineage");
    assert!(ids.len() >= 3, "retained checkpoints: {ids:?}");
    let (older, newest) = (ids[0], ids[ids.len() - 1]);

    // The changed job restored from an older checkpoint fails on every attempt. Each restart
    // must restore that checkpoint again (or one of its own run), never a newer checkpoint of
    // the earlier run: restoring its end would only commit its output and exit 0.
    // Its `count` is another component, without the counter's state: dropped on purpose.
    let older_arg = older.to_string();
    let out = support::weir_logging(
        &[
            "run",
            path(&bad),
            "--restore",
            &older_arg,
            "--allow-dropped-state",
            "count.count",
        ],
        "weir=info",
    );
    assert_clean_failure(&out, &["operator `count`", "w5", "after 2 restarts"]);
    let err = stderr(&out);
    let restored: Vec<u64> = err
        .lines()
        .filter(|l| l.contains("restoring"))
        .filter_map(|l| {
            l.split("checkpoint=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(restored.len(), 3, "the run and its two restarts:\n{err}");
    assert_eq!(restored[0], older, "{err}");
    assert!(
        restored.iter().all(|&id| id == older || id > newest),
        "restored {restored:?}: a checkpoint of the earlier run other than {older} (its newest: {newest})\n{err}"
    );
    assert!(!err.contains("the job had finished"), "{err}");
}
