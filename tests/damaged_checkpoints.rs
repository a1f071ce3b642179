//! Restoring past damaged checkpoints (DESIGN.md §8): a flipped byte, a missing artifact or
//! a torn metadata object in the newest checkpoint makes `--restore latest` fall back to the
//! newest whole one, with a warning naming the object, and the output stays exactly-once;
//! with no whole checkpoint left, the run fails at once (exit 2) listing each, retries
//! nothing and leaves the output as it was.
//!
//! Each test runs a word count to its end, then plays a crash after its last checkpoints by
//! removing the final (finished) checkpoint's metadata, then damages what it says.

use crate::support;

use std::path::{Path, PathBuf};

use support::crash::{committed, running_counts};
use support::{checkpoint_ids, stderr, tokenize_then, weir};

/// A finished word count in `dir` whose final checkpoint is gone, as after a crash: returns
/// the job file, the output it must end with, and the remaining checkpoint ids.
fn crashed_run(dir: &Path) -> (PathBuf, Vec<String>, Vec<u64>) {
    let mut text = String::new();
    let mut words = Vec::new();
    for i in 0..20_000 {
        let line = format!("w{} w{} w{}", i % 97, i % 31, i % 7);
        words.extend(line.split(' ').map(str::to_owned));
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(dir.join("in.txt"), text).expect("write input");
    let expected = running_counts(words.iter().map(String::as_str));
    let job = tokenize_then(
        dir,
        "name = \"wc\"\nbatch_size = 16",
        "count",
        "weir-example-counter",
        "parallelism = 2",
        &format!(
            "[checkpoints]\nstore = \"file://{}\"\ninterval_ms = 2\nretain = 5",
            dir.join("store").display()
        ),
    );
    let out = weir(&["run", path(&job), "--quiet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(committed(dir), expected);
    let folder = dir.join("store/wc/checkpoints");
    let mut ids = checkpoint_ids(&folder);
    let finished = ids.pop().expect("a final checkpoint");
    std::fs::remove_file(metadata_path(dir, finished)).expect("remove the final checkpoint");
    assert!(
        ids.len() >= 3,
        "the run completed too few checkpoints to damage: {ids:?}"
    );
    (job, expected, ids)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

fn metadata_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("store/wc/checkpoints/chk-{id:020}.json"))
}

/// The artifacts checkpoint `id` wrote itself (not those of older ones in its chains).
fn own_artifacts(dir: &Path, id: u64) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(metadata_path(dir, id)).expect("read metadata");
    let metadata: serde_json::Value = serde_json::from_str(&text).expect("metadata is JSON");
    let mut paths: Vec<PathBuf> = metadata["operators"]
        .as_array()
        .expect("operators")
        .iter()
        .flat_map(|o| o["subtasks"].as_array().expect("subtasks"))
        .flat_map(|s| s["chain"].as_array().expect("chain"))
        .filter(|a| a["checkpoint"].as_u64() == Some(id))
        .map(|a| dir.join("store/wc").join(a["path"].as_str().expect("path")))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "checkpoint {id} wrote no artifact");
    paths
}

fn flip_a_byte(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read artifact");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(path, bytes).expect("write artifact");
}

#[test]
fn a_flipped_byte_in_the_newest_checkpoint_falls_back_to_the_one_before_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (job, expected, ids) = crashed_run(dir.path());
    let newest = *ids.last().expect("ids");
    let damaged = own_artifacts(dir.path(), newest).remove(0);
    flip_a_byte(&damaged);

    // `verify` finds it, and only it.
    let out = weir(&[
        "checkpoints",
        "verify",
        "all",
        "--store",
        path(&job),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let reports = reports.as_array().expect("an array");
    assert_eq!(reports.len(), ids.len());
    for report in reports {
        let id = report["checkpoint"].as_u64().expect("id");
        let damage: Vec<&str> = report["artifacts"]
            .as_array()
            .expect("artifacts")
            .iter()
            .filter_map(|a| {
                assert!(a["sections"].as_u64().is_some(), "{a}");
                a.get("damage")
                    .map(|_| a["object"].as_str().expect("object"))
            })
            .collect();
        let expected: Vec<String> = if id == newest {
            vec![damaged.display().to_string()]
        } else {
            Vec::new()
        };
        assert_eq!(damage, expected, "checkpoint {id}: {report}");
    }
    let out = weir(&["checkpoints", "verify", "latest", "--store", path(&job)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("checkpoint {newest} of job `wc`: DAMAGED")),
        "{text}"
    );
    assert!(text.contains("checksum mismatch"), "{text}");
    let before = (newest - 1).to_string();
    let out = weir(&["checkpoints", "verify", &before, "--store", path(&job)]);
    assert!(out.status.success(), "{}", stderr(&out));

    let out = weir(&["run", path(&job), "--restore", "latest", "--quiet"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // The warning names the object by its full path, and why.
    for part in [
        format!("checkpoint {newest} is damaged: {}", damaged.display()),
        "checksum mismatch".to_owned(),
        format!("restoring checkpoint {} instead", newest - 1),
    ] {
        assert!(err.contains(&part), "stderr lacks {part:?}:\n{err}");
    }
    assert!(!err.contains("restarting"), "damage is not retried:\n{err}");
    assert_eq!(committed(dir.path()), expected, "exactly once");
    // The run's own final checkpoint is whole.
    let out = weir(&["checkpoints", "verify", "latest", "--store", path(&job)]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_missing_artifact_and_a_torn_metadata_object_are_both_passed_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (job, expected, ids) = crashed_run(dir.path());
    let (newest, before) = (ids[ids.len() - 1], ids[ids.len() - 2]);
    let missing = own_artifacts(dir.path(), newest).pop().expect("artifact");
    std::fs::remove_file(&missing).expect("remove artifact");
    let torn = metadata_path(dir.path(), before);
    let text = std::fs::read(&torn).expect("read metadata");
    std::fs::write(&torn, &text[..text.len() / 2]).expect("tear metadata");

    let out = weir(&["run", path(&job), "--restore", "latest", "--quiet"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    for part in [
        format!(
            "checkpoint {newest} is damaged: {}: the object is missing",
            missing.display()
        ),
        format!(
            "checkpoint {before} is damaged: {}: not checkpoint metadata",
            torn.display()
        ),
        format!("restoring checkpoint {} instead", before - 1),
    ] {
        assert!(err.contains(&part), "stderr lacks {part:?}:\n{err}");
    }
    assert_eq!(committed(dir.path()), expected, "exactly once");
}

#[test]
fn with_no_whole_checkpoint_the_run_fails_at_once_listing_each_and_leaves_the_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (job, _, ids) = crashed_run(dir.path());
    // Every retained checkpoint's chain holds its oldest artifacts: damage each checkpoint's
    // own, so that each is damaged on its own account.
    let mut damaged = Vec::new();
    for &id in &ids {
        let artifact = own_artifacts(dir.path(), id).remove(0);
        flip_a_byte(&artifact);
        damaged.push((id, artifact));
    }
    let output = std::fs::read(dir.path().join("out.txt")).expect("read output");

    let out = weir(&["run", path(&job), "--restore", "latest", "--quiet"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no retained checkpoint of job `wc` is whole"),
        "{err}"
    );
    for (id, artifact) in &damaged {
        let part = format!("checkpoint {id} is damaged: {}", artifact.display());
        assert!(err.contains(&part), "stderr lacks {part:?}:\n{err}");
    }
    assert!(!err.contains("restarting"), "damage is not retried:\n{err}");
    assert_eq!(
        std::fs::read(dir.path().join("out.txt")).expect("read output"),
        output,
        "a restore that failed must not roll the output back"
    );

    // Asked for by id, a damaged checkpoint fails without falling back.
    let (id, artifact) = &damaged[damaged.len() - 1];
    let out = weir(&["run", path(&job), "--restore", &id.to_string(), "--quiet"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let part = format!("checkpoint {id} is damaged: {}", artifact.display());
    assert!(err.contains(&part), "{err}");
    assert!(!err.contains("instead"), "no fallback:\n{err}");
}
