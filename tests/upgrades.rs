//! Upgrading a job and keeping its state (DESIGN.md §8.1, §8.4).
//!
//! Restoring a checkpoint into a job whose operators changed: a checkpoint keeps each
//! operator's state under its uid (its name unless the job file sets `uid`), so a renamed
//! operator that keeps its uid keeps its state; an operator the checkpoint has no state for
//! starts empty; and a restore that would leave state without an operator to take it is
//! refused, naming it, unless `--allow-dropped-state` says to drop it.
//!
//! Savepoints: a checkpoint copied out of the chain under a name outlives retention and
//! `--fresh`, restores, and restores from another store it was copied to.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::crash::{committed, running_counts};
use support::host::{Host, TOKEN};
use support::{assert_clean_failure, cache_dir, stderr, tokenize_then};

/// The job `changes`: a word count of `dir/in.txt` (tokenize, then `count`) into
/// `dir/out.txt`, checkpointing into `dir/store`, paced.
fn word_count(dir: &Path) -> PathBuf {
    let job = tokenize_then(
        dir,
        "name = \"changes\"\nbatch_size = 16",
        "count",
        "weir-example-counter",
        "",
        &format!(
            "[checkpoints]\nstore = \"file://{}\"\ninterval_ms = 20",
            dir.join("store").display()
        ),
    );
    // 200 000 lines take at least 2 s: the run is still running when the test acts on it.
    support::pace_source(&job, 100_000);
    job
}

/// [`word_count`] run until it has completed a checkpoint, and killed.
fn word_count_killed_after_a_checkpoint(dir: &Path) -> PathBuf {
    let job = word_count(dir);
    let mut run = support::spawn_run(&[path(&job), "-q"]);
    let checkpoints = dir.join("store").join("changes").join("checkpoints");
    support::wait_while_running(&mut run, "a checkpoint", || {
        !support::checkpoint_ids(&checkpoints).is_empty()
    });
    run.kill().expect("SIGKILL");
    run.wait().expect("wait");
    job
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

/// Rewrites the job file, replacing `from` (which it must hold once) with `to`.
fn edit(job: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(job).expect("job file");
    assert_eq!(text.matches(from).count(), 1, "{from:?} in {text}");
    std::fs::write(job, text.replace(from, to)).expect("job file");
}

#[test]
fn a_renamed_operator_keeps_its_state_under_its_uid_and_a_restore_that_would_drop_it_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), 200_000);
    let job = word_count_killed_after_a_checkpoint(dir.path());

    // Renamed: the checkpoint's state of `count` would have no operator.
    edit(&job, "name = \"count\"", "name = \"counter\"");
    let refused = support::weir(&["run", path(&job), "--restore", "latest"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert_clean_failure(
        &refused,
        &[
            "holds state of operator `count`",
            "that job `changes` has no operator for",
            "uid = \"count\"",
            "--allow-dropped-state count",
        ],
    );

    // With the old name as its uid, the renamed operator takes the state over: the output
    // is an uninterrupted run's. The tokenizer, renamed too, held no state: nothing to
    // drop.
    edit(
        &job,
        "name = \"counter\"",
        "name = \"counter\"\nuid = \"count\"",
    );
    edit(&job, "name = \"tokenize\"", "name = \"split\"");
    let restored = support::weir(&["run", path(&job), "--restore", "latest", "-q"]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert!(
        committed(dir.path()) == running_counts(words.iter().map(String::as_str)),
        "the output differs from an uninterrupted run's"
    );

    // Each checkpoint records which component wrote each operator's state.
    let shown = stdout_of(&support::weir(&[
        "checkpoints",
        "show",
        "latest",
        "--store",
        path(&job),
        "--json",
    ]));
    let metadata: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
    let counter = std::fs::read(support::component("weir-example-counter")).expect("read");
    let digest: String =
        sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(&counter))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
    let count = metadata["operators"]
        .as_array()
        .expect("operators")
        .iter()
        .find(|o| o["name"] == "count")
        .expect("count");
    assert_eq!(count["component"], format!("sha256:{digest}"), "{shown}");
}

#[test]
fn with_allow_dropped_state_the_old_state_goes_and_the_new_operator_starts_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), 200_000);
    let job = word_count_killed_after_a_checkpoint(dir.path());
    edit(&job, "name = \"count\"", "name = \"counter\"");

    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", path(&job), "--restore", "latest", "-q"])
        .args(["--allow-dropped-state", "count"])
        .env("WEIR_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "info")
        .output()
        .expect("weir runs");
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("dropping the state of an operator the job no longer has")
            && log.contains("operator=count"),
        "{log}"
    );
    assert!(
        log.contains("the checkpoint holds no state of this operator: it starts empty")
            && log.contains("operator=counter"),
        "{log}"
    );

    // Every word counted once, by the first run up to its checkpoint and by the new
    // operator after it, which counted from zero: some word's count began again at 1.
    let got = committed(dir.path());
    assert_eq!(got.len(), words.len(), "a line per word, once");
    let ones = got.iter().filter(|l| l.ends_with("\t1")).count();
    let distinct = running_counts(words.iter().map(String::as_str))
        .iter()
        .filter(|l| l.ends_with("\t1"))
        .count();
    assert!(
        ones > distinct,
        "{ones} first counts for {distinct} words: no count began again"
    );

    // The dropped state's artifacts went once no retained checkpoint referenced them.
    let state = dir.path().join("store").join("changes").join("state");
    assert!(
        files_under(&state.join("counter")) > 0,
        "the new operator's state is stored"
    );
    assert_eq!(
        files_under(&state.join("count")),
        0,
        "the dropped operator's artifacts are left in the store"
    );
}

/// How many files are under `dir`, at any depth (none if it does not exist).
fn files_under(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| e.expect("entry").path())
        .map(|p| if p.is_dir() { files_under(&p) } else { 1 })
        .sum()
}

/// Copies the folder `from` to `to`, whole.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("read") {
        let path = entry.expect("entry").path();
        let into = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_dir(&path, &into);
        } else {
            std::fs::copy(&path, &into).expect("copy");
        }
    }
}

fn stdout_of(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_savepoint_outlives_retention_and_fresh_and_restores_here_or_in_another_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), 200_000);
    let expected = running_counts(words.iter().map(String::as_str));
    let job = word_count_killed_after_a_checkpoint(dir.path());
    let checkpoints = dir.path().join("store").join("changes").join("checkpoints");

    let saved = stdout_of(&support::weir(&[
        "savepoint",
        path(&job),
        "--name",
        "before-upgrade",
    ]));
    let id: u64 = saved
        .split("checkpoint ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no checkpoint id in {saved:?}"));
    assert!(
        saved.contains("savepoint `before-upgrade` of job `changes`")
            && saved.contains("--restore savepoint:before-upgrade"),
        "{saved}"
    );
    let again = support::weir(&["savepoint", path(&job), "--name", "before-upgrade"]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert_clean_failure(&again, &["savepoint `before-upgrade` already exists"]);

    // The job runs on to its end, and retention lets the checkpoint go: not the savepoint.
    let finished = support::weir(&["run", path(&job), "--restore", "latest", "-q"]);
    assert!(finished.status.success(), "{}", stderr(&finished));
    assert!(committed(dir.path()) == expected);
    assert!(
        !support::checkpoint_ids(&checkpoints).contains(&id),
        "checkpoint {id} is still retained"
    );
    let listed = stdout_of(&support::weir(&["checkpoints", "list", path(&job)]));
    assert!(listed.contains("savepoint:before-upgrade"), "{listed}");

    // Restored, the output goes back to what the savepoint covered, and on from there.
    let restored = support::weir(&[
        "run",
        path(&job),
        "--restore",
        "savepoint:before-upgrade",
        "-q",
    ]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert!(
        committed(dir.path()) == expected,
        "the output restored from the savepoint differs from an uninterrupted run's"
    );

    // Copied to another store, under another job's name, it restores there.
    let other = dir.path().join("other-store");
    copy_dir(
        &dir.path().join("store/changes/savepoints"),
        &other.join("moved/savepoints"),
    );
    edit(&job, "name = \"changes\"", "name = \"moved\"");
    let elsewhere = support::weir(&[
        "run",
        path(&job),
        "--checkpoint-store",
        &format!("file://{}", other.display()),
        "--restore",
        "savepoint:before-upgrade",
        "-q",
    ]);
    assert!(elsewhere.status.success(), "{}", stderr(&elsewhere));
    assert!(committed(dir.path()) == expected);
    edit(&job, "name = \"moved\"", "name = \"changes\"");

    // `--fresh` deletes the checkpoints and keeps the savepoint; deleting it is explicit.
    let fresh = support::weir(&["run", path(&job), "--fresh", "-q"]);
    assert!(fresh.status.success(), "{}", stderr(&fresh));
    let listed = stdout_of(&support::weir(&["checkpoints", "list", path(&job)]));
    assert!(listed.contains("savepoint:before-upgrade"), "{listed}");
    let deleted = stdout_of(&support::weir(&[
        "checkpoints",
        "delete-savepoint",
        "before-upgrade",
        "--store",
        path(&job),
    ]));
    assert!(
        deleted.contains("deleted savepoint `before-upgrade`"),
        "{deleted}"
    );
    assert_eq!(files_under(&dir.path().join("store/changes/savepoints")), 0);
    let listed = stdout_of(&support::weir(&["checkpoints", "list", path(&job)]));
    assert!(!listed.contains("savepoint:"), "{listed}");
    let gone = support::weir(&["run", path(&job), "--restore", "savepoint:before-upgrade"]);
    assert_eq!(gone.status.code(), Some(2), "{}", stderr(&gone));
    assert_clean_failure(&gone, &["no savepoint `before-upgrade`"]);
}

#[test]
fn a_run_stopped_with_savepoint_on_exit_saves_its_latest_checkpoint_and_exits_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), 200_000);
    let job = word_count_killed_after_a_checkpoint(dir.path());
    // Checkpoints are whole at every instant: the savepoint is the latest, whatever the
    // moment of the stop.
    let mut run = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", path(&job), "--restore", "latest", "-q"])
        .args(["--savepoint-on-exit", "at-stop"])
        .env("WEIR_CACHE_DIR", cache_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir starts");
    let checkpoints = dir.path().join("store").join("changes").join("checkpoints");
    let before = support::checkpoint_ids(&checkpoints);
    support::wait_while_running(&mut run, "a new checkpoint", || {
        support::checkpoint_ids(&checkpoints) != before
    });
    let term = Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let out = run.wait_with_output().expect("wait");
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("savepoint `at-stop` holds checkpoint"),
        "{log}"
    );
    let listed = stdout_of(&support::weir(&["checkpoints", "list", path(&job)]));
    assert!(listed.contains("savepoint:at-stop"), "{listed}");

    // A second stop into the same name is refused before the run starts.
    let taken = support::weir(&[
        "run",
        path(&job),
        "--restore",
        "latest",
        "--savepoint-on-exit",
        "at-stop",
    ]);
    assert_eq!(taken.status.code(), Some(2), "{}", stderr(&taken));
    assert_clean_failure(&taken, &["savepoint `at-stop` already exists"]);

    let restored = support::weir(&["run", path(&job), "--restore", "savepoint:at-stop", "-q"]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert!(
        committed(dir.path()) == running_counts(words.iter().map(String::as_str)),
        "the output differs from an uninterrupted run's"
    );
}

#[test]
fn a_served_job_checkpoints_into_a_savepoint_through_its_host() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), 200_000);
    let job = word_count(dir.path());
    let id = host.submit(&job).expect("submitted");

    let saved = host.weir(&["savepoint", &id, "--name", "served"], Some(TOKEN));
    let said = stdout_of(&saved);
    assert!(
        said.contains("savepoint `served` of job `changes`: checkpoint"),
        "{said}"
    );
    let listed = stdout_of(&host.weir(&["checkpoints", "list", &id], Some(TOKEN)));
    assert!(listed.contains("savepoint:served"), "{listed}");

    // The name is taken now; the host says so.
    let again = host.weir(&["savepoint", &id, "--name", "served"], Some(TOKEN));
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("savepoint `served` already exists"),
        "{}",
        stderr(&again)
    );
    let ended = host.wait(&id);
    assert_eq!(ended["status"], "finished", "{ended}");
    let expected = running_counts(words.iter().map(String::as_str));
    assert!(committed(dir.path()) == expected);

    // Run again from the savepoint: the output goes back to it, and on from there.
    let restarted = host.weir(&["restart", &id, "--savepoint", "served"], Some(TOKEN));
    assert!(restarted.status.success(), "{}", stderr(&restarted));
    let ended = host.wait(&id);
    assert_eq!(ended["status"], "finished", "{ended}");
    // It ran from there (a finished job's restore only commits, and reads nothing).
    assert!(ended["checkpoints_completed"].as_u64() > Some(0), "{ended}");
    assert!(
        committed(dir.path()) == expected,
        "the output restored from the savepoint differs from an uninterrupted run's"
    );
    let unknown = host.weir(&["restart", &id, "--savepoint", "nope"], Some(TOKEN));
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains("no savepoint `nope`"),
        "{}",
        stderr(&unknown)
    );
}
