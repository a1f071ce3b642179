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
//!
//! `weir upgrade` of a served job (DESIGN.md §8.8): a checked swap of its code that keeps its
//! state, a version that fails before its first checkpoint rolled back by the host, refusals
//! that change nothing, and a host killed in the middle that resumes one version, with the
//! output exactly once throughout.

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

/// The new version of [`word_count`]'s job file `job`, written beside it as `file`: `count`
/// renamed `tally`, keeping its state under its uid, and `extra` appended.
fn renamed_version(job: &Path, file: &str, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(job).expect("job file");
    let renamed = text.replace("name = \"count\"", "name = \"tally\"\nuid = \"count\"");
    assert_ne!(renamed, text);
    let path = job.with_file_name(file);
    std::fs::write(&path, format!("{renamed}\n{extra}")).expect("job file");
    path
}

/// An operator appended to a job that fails as it opens, in every version.
fn failing_operator() -> String {
    format!(
        "[[operators]]\nname = \"check\"\ncomponent = {}\nconfig = {{ mode = \"no-such-mode\" }}\n",
        support::toml_path(&support::component("weir-test-faulty"))
    )
}

/// A served [`word_count`] of 200 000 lines, stopped mid-input: cancelled once a checkpoint
/// covering records completed, so its state has something for a restore to place.
struct StoppedJob {
    dir: tempfile::TempDir,
    words: Vec<String>,
    job: PathBuf,
    id: String,
}

fn served_word_count_stopped_mid_input(host: &Host) -> StoppedJob {
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), 200_000);
    let job = word_count(dir.path());
    let id = host.submit(&job).expect("submitted");
    cancelled_after_a_checkpoint(host, &id, dir.path());
    StoppedJob {
        dir,
        words,
        job,
        id,
    }
}

/// Waits until job `id` of `host` has completed a checkpoint that covers records (it
/// committed output into `dir`), then cancels it (no last one).
fn cancelled_after_a_checkpoint(host: &Host, id: &str, dir: &Path) {
    let output = dir.join("out.txt");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let info = host.job(id);
        assert_eq!(
            info["status"], "running",
            "it ended before a checkpoint: {info}"
        );
        if info["last_checkpoint"].as_u64().is_some()
            && std::fs::metadata(&output).is_ok_and(|m| m.len() > 0)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint: {info}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let cancelled = host.weir(&["cancel", id], Some(TOKEN));
    assert!(cancelled.status.success(), "{}", stderr(&cancelled));
    assert_eq!(host.wait(id)["status"], "cancelled");
}

#[test]
fn a_served_job_is_upgraded_keeping_its_state_and_a_version_that_fails_rolls_back() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let StoppedJob {
        dir,
        words,
        job,
        id,
    } = served_word_count_stopped_mid_input(&host);

    // A check changes nothing, and says what would become of each operator's state.
    let renamed = renamed_version(&job, "renamed.toml", "");
    let checked = host.weir(&["upgrade", &id, path(&renamed), "--check"], Some(TOKEN));
    let said = stdout_of(&checked);
    assert!(
        said.contains(", checked against checkpoint ")
            && said.contains(
                "`tally` (uid `count`): restores its state (states count) into the same component"
            )
            && !said.contains("from checkpoint")
            && said.contains("`count`: every subtask opened with its restored state (")
            && said.contains("`tokenize`: restores its state"),
        "{said}"
    );
    // Renamed without a uid, the counter's state would have no place: refused, naming it.
    let unkept = job.with_file_name("unkept.toml");
    std::fs::write(
        &unkept,
        std::fs::read_to_string(&job)
            .expect("job file")
            .replace("name = \"count\"", "name = \"tally\""),
    )
    .expect("job file");
    let refused = host.weir(&["upgrade", &id, path(&unkept), "--check"], Some(TOKEN));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    for part in ["`count`", "--allow-dropped-state count"] {
        assert!(stderr(&refused).contains(part), "{}", stderr(&refused));
    }
    let refused = host.weir(&["upgrade", &id, path(&unkept)], Some(TOKEN));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    // A check opens every subtask, offline, with the state it would restore: a `count` whose
    // new component no longer declares the counter's state, an operator that fails to open,
    // and state that does not read, are found.
    let stateless = job.with_file_name("stateless.toml");
    let text = std::fs::read_to_string(&job).expect("job file");
    assert!(text.contains("weir_example_counter.wasm"), "{text}");
    std::fs::write(
        &stateless,
        text.replace("weir_example_counter.wasm", "weir_test_faulty.wasm"),
    )
    .expect("job file");
    let refused = host.weir(&["upgrade", &id, path(&stateless), "--check"], Some(TOKEN));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    for part in [
        "holds state `count` of operator `count`",
        "--allow-dropped-state count.count",
    ] {
        assert!(stderr(&refused).contains(part), "{}", stderr(&refused));
    }
    // An artifact the latest checkpoint restores `count` from, cut short (a served job
    // checkpoints into the host's data folder).
    let latest = files_named(data.path(), ".json")
        .into_iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("checkpoints")))
        .max()
        .expect("a checkpoint");
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&latest).expect("metadata")).expect("JSON");
    let count = metadata["operators"]
        .as_array()
        .and_then(|ops| ops.iter().find(|o| o["name"] == "count"))
        .expect("the counter's state");
    let artifact = count["subtasks"][0]["chain"][0]["path"]
        .as_str()
        .expect("an artifact");
    let store_root = latest
        .parent()
        .and_then(Path::parent)
        .expect("the job's store");
    let damaged = &store_root.join(artifact);
    let bytes = std::fs::read(damaged).expect("artifact");
    let mut torn = bytes.clone();
    torn.truncate(bytes.len() / 2);
    std::fs::write(damaged, &torn).expect("artifact");
    let refused = host.weir(&["upgrade", &id, path(&renamed), "--check"], Some(TOKEN));
    std::fs::write(damaged, &bytes).expect("artifact");
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("does not restore checkpoint"),
        "{}",
        stderr(&refused)
    );
    let failing = renamed_version(&job, "failing.toml", &failing_operator());
    let refused = host.weir(&["upgrade", &id, path(&failing), "--check"], Some(TOKEN));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    for part in ["operator `check` subtask 0 fails to open", "no-such-mode"] {
        assert!(stderr(&refused).contains(part), "{}", stderr(&refused));
    }
    let info = host.job(&id);
    assert_eq!(info["version"], 1, "{info}");
    assert_eq!(info["upgrades"], serde_json::json!([]), "{info}");
    assert_eq!(info["status"], "cancelled", "{info}");

    // The same version, without --check: it fails before its first checkpoint, and the host
    // rolls back by itself.
    let failed = host.weir(&["upgrade", &id, path(&failing)], Some(TOKEN));
    assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
    for part in ["rolled back", "no-such-mode", "version 1 runs again"] {
        assert!(stderr(&failed).contains(part), "{}", stderr(&failed));
    }
    let info = host.job(&id);
    assert_eq!(info["version"], 1, "{info}");
    assert_eq!(info["upgrades"][0]["to"], 2, "{info}");
    assert_eq!(info["upgrades"][0]["status"], "rolled-back", "{info}");

    // The good version: it takes over the counts where the old one left them.
    let upgraded = host.weir(&["upgrade", &id, path(&renamed)], Some(TOKEN));
    assert!(upgraded.status.success(), "{}", stderr(&upgraded));
    assert!(
        stderr(&upgraded).contains("from version 1 to 3"),
        "{}",
        stderr(&upgraded)
    );
    let ended = host.wait(&id);
    assert_eq!(ended["status"], "finished", "{ended}");
    assert_eq!(ended["version"], 3, "{ended}");
    assert_eq!(ended["upgrades"][1]["status"], "done", "{ended}");
    assert_eq!(ended["operators"][1]["name"], "tally", "{ended}");
    let expected = running_counts(words.iter().map(String::as_str));
    assert!(
        committed(dir.path()) == expected,
        "the output across two upgrades differs from an uninterrupted run's"
    );
    // The savepoints the upgrades took stay, for a way back by hand.
    let listed = stdout_of(&host.weir(&["checkpoints", "list", &id], Some(TOKEN)));
    for name in ["savepoint:upgrade-2", "savepoint:upgrade-3"] {
        assert!(listed.contains(name), "{listed}");
    }
}

#[test]
fn an_upgrade_of_a_finished_job_or_one_that_changes_the_output_is_refused_and_changes_nothing() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    // A job that read its input to the end has nothing left for a new version.
    let small = tempfile::tempdir().expect("tempdir");
    support::write_word_lines(small.path(), 10);
    let small_job = word_count(small.path());
    let finished = host.submit(&small_job).expect("submitted");
    assert_eq!(host.wait(&finished)["status"], "finished");
    let refused = host.weir(&["upgrade", &finished, path(&small_job)], Some(TOKEN));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains(&format!("job {finished} finished")),
        "{}",
        stderr(&refused)
    );

    let StoppedJob {
        dir: _dir, job, id, ..
    } = served_word_count_stopped_mid_input(&host);
    let elsewhere = job.with_file_name("elsewhere.toml");
    std::fs::write(
        &elsewhere,
        std::fs::read_to_string(&job)
            .expect("job file")
            .replace("path = \"out.txt\"", "path = \"other.txt\""),
    )
    .expect("job file");
    let refused = host.weir(&["upgrade", &id, path(&elsewhere)], Some(TOKEN));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("[sink] differs"),
        "{}",
        stderr(&refused)
    );
    let unknown = host.weir(&["upgrade", "job-99", path(&job)], Some(TOKEN));
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("no job job-99"),
        "{}",
        stderr(&unknown)
    );
    // Nothing of the refused versions stays in the jobs' folders.
    for job in [&finished, &id] {
        let versions = data.path().join("jobs").join(job).join("versions");
        assert_eq!(files_under(&versions), 0);
        let info = host.job(job);
        assert_eq!(info["version"], 1, "{info}");
        assert_eq!(info["upgrades"], serde_json::json!([]), "{info}");
    }
    assert_eq!(host.job(&id)["status"], "cancelled");
}

/// When the host is killed during an upgrade.
#[derive(Clone, Copy, Debug)]
enum KillPoint {
    /// As soon as the upgrade is recorded: the old version may still be stopping.
    Recorded,
    /// As soon as the new version is recorded as the one that runs.
    Swapped,
}

#[test]
fn a_host_killed_during_an_upgrade_resumes_one_version_and_the_output_stays_exactly_once() {
    for point in [KillPoint::Recorded, KillPoint::Swapped] {
        killed_during_an_upgrade(point);
    }
}

fn killed_during_an_upgrade(point: KillPoint) {
    let data = tempfile::tempdir().expect("tempdir");
    let mut host = Host::start(data.path());
    // Stopped mid-input first, so that the upgrade finds it as it is whatever the machine's
    // speed (a running job could finish before it, and refuse it).
    let StoppedJob {
        dir,
        words,
        job,
        id,
    } = served_word_count_stopped_mid_input(&host);
    let record = data.path().join("jobs").join(&id).join("job.json");
    let renamed = renamed_version(&job, "renamed.toml", "");
    let mut upgrade = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["upgrade", &id, path(&renamed), "--host", &host.url])
        .env("WEIR_TOKEN", TOKEN)
        .env("WEIR_CACHE_DIR", cache_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir upgrade");
    let reached = |r: &str| match point {
        KillPoint::Recorded => r.contains("in-progress"),
        KillPoint::Swapped => r.contains("\"version\":2"),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&record).is_ok_and(|r| reached(&r)) {
        if let Some(status) = upgrade.try_wait().expect("weir upgrade") {
            let mut said = String::new();
            let _ = std::io::Read::read_to_string(
                &mut upgrade.stderr.take().expect("stderr"),
                &mut said,
            );
            assert!(
                status.success(),
                "{point:?}: weir upgrade failed before it was reached: {said}"
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{point:?} not reached"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    host.child.kill().expect("SIGKILL");
    host.child.wait().expect("wait");
    upgrade.wait().expect("weir upgrade ends");
    drop(host);

    let host = Host::start(data.path());
    let ended = host.wait(&id);
    assert_eq!(ended["status"], "finished", "{point:?}: {ended}");
    let upgrade = &ended["upgrades"][0];
    match (point, upgrade["status"].as_str()) {
        // The new version had started: it went on, and checkpointed.
        (_, Some("done")) => assert_eq!(ended["version"], 2, "{ended}"),
        // Killed before: the old version resumed, and the record says why.
        (KillPoint::Recorded, Some("failed")) => {
            assert_eq!(ended["version"], 1, "{ended}");
            let reason = upgrade["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("the host stopped"), "{ended}");
        }
        _ => panic!("{point:?}: the upgrade did not end as it should: {ended}"),
    }
    let expected = running_counts(words.iter().map(String::as_str));
    assert!(
        committed(dir.path()) == expected,
        "{point:?}: the output after a host killed mid-upgrade differs from an uninterrupted run's"
    );
}

/// The input lines of a counter whose state gains a version: paced to take 2 s, so that the
/// run at version 1 is still running when the test kills it.
const EVOLVING_LINES: usize = 50_000;

/// A counter (`component`, its versions chosen by `config_key = "count-v1"` or `"count-v2"`)
/// run at version 1, killed after a checkpoint, and restored at version 2, whose state has
/// another shape, declared as the state's version 2 with a migration from version 1: every
/// word's count goes on from where version 1 left it, exactly once.
///
/// `kind` is `count` for the count in a value state, `map-count` for it in a map state's entry
/// (the map's values gain the version), `list-count` for it as a list state's one item.
fn a_counter_whose_state_gains_a_version(component: &Path, config_key: &str, kind: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), EVOLVING_LINES);
    let version_1 = format!("config = {{ {config_key} = \"{kind}-v1\" }}");
    let job = counter_killed_at_version_1(dir.path(), component, &version_1);
    edit(&job, "count-v1", "count-v2");
    counts_went_on_at_version_2(dir.path(), &job, &words);
}

/// The job `evolving` of `dir`: a tokenizer, then `count` (`component` with the operator line
/// `config`) at version 1 of its state, over [`EVOLVING_LINES`] lines paced to take at least
/// 2 s, run
/// until a checkpoint that covers records (it committed output, so its state has values to
/// migrate) and killed.
fn counter_killed_at_version_1(dir: &Path, component: &Path, config: &str) -> PathBuf {
    let job = support::tokenize_then_component(
        dir,
        "name = \"evolving\"\nbatch_size = 16",
        "count",
        component,
        config,
        &format!(
            "[checkpoints]\nstore = \"file://{}\"\ninterval_ms = 20",
            dir.join("store").display()
        ),
    );
    support::pace_source(&job, EVOLVING_LINES as u64 / 2);
    let mut run = support::spawn_run(&[path(&job), "-q"]);
    let checkpoints = dir.join("store").join("evolving").join("checkpoints");
    let output = dir.join("out.txt");
    support::wait_while_running(&mut run, "a checkpoint of counts", || {
        !support::checkpoint_ids(&checkpoints).is_empty()
            && std::fs::metadata(&output).is_ok_and(|m| m.len() > 0)
    });
    run.kill().expect("SIGKILL");
    run.wait().expect("wait");
    job
}

/// Restores `job`, now at version 2 of its counter, and checks that the output has lines of
/// version 2 (`word, total, last_seen`) and counts equal to an uninterrupted run's.
fn counts_went_on_at_version_2(dir: &Path, job: &Path, words: &[String]) {
    let out = support::weir(&["run", path(job), "--restore", "latest", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = committed(dir);
    let migrated: Vec<&String> = lines
        .iter()
        .filter(|l| l.split('\t').count() == 3)
        .collect();
    assert!(!migrated.is_empty(), "no line of version 2");
    for line in &migrated {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields[0], fields[2], "last_seen is the word: {line}");
    }
    let counts: Vec<String> = lines
        .iter()
        .map(|l| l.split('\t').take(2).collect::<Vec<_>>().join("\t"))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let expected = running_counts(words.iter().map(String::as_str));
    assert_eq!(counts.len(), lines.len(), "a count written twice");
    assert!(
        counts == expected,
        "the counts across the state's versions differ from an uninterrupted run's"
    );
}

#[test]
fn a_rust_counter_whose_state_gains_a_version_migrates_the_old_values_and_counts_on() {
    a_counter_whose_state_gains_a_version(&support::component("weir-test-faulty"), "mode", "count");
}

#[test]
fn a_python_counter_whose_state_gains_a_version_migrates_the_old_values_and_counts_on() {
    let component =
        support::built_operator(&support::repo().join("tests/guests/state-tour-python"));
    a_counter_whose_state_gains_a_version(&component, "role", "count");
}

#[test]
fn a_javascript_counter_whose_state_gains_a_version_migrates_the_old_values_and_counts_on() {
    let component = support::built_operator(&support::repo().join("tests/guests/state-tour-js"));
    a_counter_whose_state_gains_a_version(&component, "role", "count");
}

#[test]
fn a_rust_map_whose_values_gain_a_version_migrates_them_and_counts_on() {
    a_counter_whose_state_gains_a_version(
        &support::component("weir-test-faulty"),
        "mode",
        "map-count",
    );
}

#[test]
fn a_python_map_whose_values_gain_a_version_migrates_them_and_counts_on() {
    let component =
        support::built_operator(&support::repo().join("tests/guests/state-tour-python"));
    a_counter_whose_state_gains_a_version(&component, "role", "map-count");
}

#[test]
fn a_javascript_map_whose_values_gain_a_version_migrates_them_and_counts_on() {
    let component = support::built_operator(&support::repo().join("tests/guests/state-tour-js"));
    a_counter_whose_state_gains_a_version(&component, "role", "map-count");
}

#[test]
fn a_rust_list_whose_items_gain_a_version_migrates_them_and_counts_on() {
    a_counter_whose_state_gains_a_version(
        &support::component("weir-test-faulty"),
        "mode",
        "list-count",
    );
}

#[test]
fn a_python_list_whose_items_gain_a_version_migrates_them_and_counts_on() {
    let component =
        support::built_operator(&support::repo().join("tests/guests/state-tour-python"));
    a_counter_whose_state_gains_a_version(&component, "role", "list-count");
}

#[test]
fn a_javascript_list_whose_items_gain_a_version_migrates_them_and_counts_on() {
    let component = support::built_operator(&support::repo().join("tests/guests/state-tour-js"));
    a_counter_whose_state_gains_a_version(&component, "role", "list-count");
}

#[test]
fn a_c_counter_whose_state_gains_a_version_migrates_the_old_values_and_counts_on() {
    let component =
        support::built_operator(&support::repo().join("tests/guests/counter-versions-c"));
    a_counter_whose_state_gains_a_version(&component, "role", "count");
}

/// A counter whose state gains a version in another language than the one that wrote its
/// first version: the Rust counter's version 1, then the Python counter's version 2, which
/// reads the Rust values (one state encoding for every language) and migrates them.
#[test]
fn a_rust_counters_state_migrates_into_a_python_counters_next_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let words = support::write_word_lines(dir.path(), EVOLVING_LINES);
    let rust = support::component("weir-test-faulty");
    let python = support::built_operator(&support::repo().join("tests/guests/state-tour-python"));
    let job = counter_killed_at_version_1(dir.path(), &rust, "config = { mode = \"count-v1\" }");
    edit(
        &job,
        &support::toml_path(&rust),
        &support::toml_path(&python),
    );
    edit(&job, "mode = \"count-v1\"", "role = \"count-v2\"");
    counts_went_on_at_version_2(dir.path(), &job, &words);
}

/// The job `states` of `dir`: a tokenizer, then `count` (the test guest, keyed by word) in
/// `mode`, checkpointing every 20 ms, paced to run for seconds.
fn faulty_counter(dir: &Path, mode: &str) -> PathBuf {
    let job = tokenize_then(
        dir,
        "name = \"states\"\nbatch_size = 16",
        "count",
        "weir-test-faulty",
        &format!("config = {{ mode = \"{mode}\" }}"),
        &format!(
            "[checkpoints]\nstore = \"file://{}\"\ninterval_ms = 20",
            dir.join("store").display()
        ),
    );
    support::pace_source(&job, 100_000);
    job
}

/// Runs `args` (a `weir run`) until a checkpoint newer than `after` completed in `dir`'s
/// store, one that covers records (it committed output), and kills it; returns the newest
/// checkpoint.
fn run_killed_after_a_checkpoint(dir: &Path, args: &[&str], after: u64) -> u64 {
    let mut run = support::spawn_run(args);
    let checkpoints = dir.join("store").join("states").join("checkpoints");
    let output = dir.join("out.txt");
    support::wait_while_running(&mut run, "a new checkpoint", || {
        support::checkpoint_ids(&checkpoints).last() > Some(&after)
            && std::fs::metadata(&output).is_ok_and(|m| m.len() > 0)
    });
    run.kill().expect("SIGKILL");
    run.wait().expect("wait");
    *support::checkpoint_ids(&checkpoints)
        .last()
        .expect("a checkpoint")
}

#[test]
fn a_state_the_new_version_no_longer_declares_is_refused_by_name_or_dropped_for_good() {
    let dir = tempfile::tempdir().expect("tempdir");
    support::write_word_lines(dir.path(), 200_000);
    // Version 1 keeps states `a`, `b`, `m` and `l`; version 2 only `count`.
    let job = faulty_counter(dir.path(), "isolation");
    let first = run_killed_after_a_checkpoint(dir.path(), &[path(&job), "-q"], 0);
    // The checkpoint says which states hold data, and what the component was linked with.
    let shown = support::weir(&["checkpoints", "show", "latest", "--store", path(&job)]);
    let shown = stdout_of(&shown);
    assert!(shown.contains("states    a, b, l, m"), "{shown}");
    assert!(shown.contains("wit       weir:operator@"), "{shown}");
    edit(&job, "isolation", "count-v1");

    let refused = support::weir(&["run", path(&job), "--restore", "latest"]);
    assert!(!refused.status.success());
    for part in [
        "operator `count`",
        "no longer declares",
        "`a` (",
        "`l` (",
        "--allow-dropped-state count.",
    ] {
        assert!(
            stderr(&refused).contains(part),
            "{part}: {}",
            stderr(&refused)
        );
    }
    // Some of the states allowed to go is not enough.
    let partly = support::weir(&[
        "run",
        path(&job),
        "--restore",
        "latest",
        "--allow-dropped-state",
        "count.a",
    ]);
    assert!(!partly.status.success());
    assert!(!stderr(&partly).contains("`a` ("), "{}", stderr(&partly));
    assert!(stderr(&partly).contains("`b` ("), "{}", stderr(&partly));

    // All of them: the run drops them, and its first checkpoint no longer holds them, so
    // the next restore needs no flag.
    let second = run_killed_after_a_checkpoint(
        dir.path(),
        &[
            path(&job),
            "-q",
            "--restore",
            "latest",
            "--allow-dropped-state",
            "count",
        ],
        first,
    );
    assert!(second > first);
    let out = support::weir(&["run", path(&job), "--restore", "latest", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_served_upgrade_or_restart_drops_state_only_when_told() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let StoppedJob {
        dir: _dir, job, id, ..
    } = served_word_count_stopped_mid_input(&host);

    // Version 2 renames the counter without its uid: its state goes, since we say so.
    let unkept = job.with_file_name("unkept.toml");
    let text = std::fs::read_to_string(&job).expect("job file");
    std::fs::write(
        &unkept,
        text.replace("name = \"count\"", "name = \"tally\""),
    )
    .expect("job");
    let upgraded = host.weir(
        &[
            "upgrade",
            &id,
            path(&unkept),
            "--allow-dropped-state",
            "count",
        ],
        Some(TOKEN),
    );
    assert!(upgraded.status.success(), "{}", stderr(&upgraded));
    assert_eq!(host.wait(&id)["version"], 2);

    // Back to the savepoint of version 1 with version 2's job file: refused, then told.
    let refused = host.weir(&["restart", &id, "--savepoint", "upgrade-2"], Some(TOKEN));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    for part in ["cannot restore", "`count`", "--allow-dropped-state count"] {
        assert!(stderr(&refused).contains(part), "{}", stderr(&refused));
    }
    let restarted = host.weir(
        &[
            "restart",
            &id,
            "--savepoint",
            "upgrade-2",
            "--allow-dropped-state",
            "count",
        ],
        Some(TOKEN),
    );
    assert!(restarted.status.success(), "{}", stderr(&restarted));
    assert_eq!(host.wait(&id)["status"], "finished");
}

/// Every file under `dir` whose name ends with `suffix`, in no particular order.
fn files_named(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_named(&path, suffix));
        } else if path.to_string_lossy().ends_with(suffix) {
            found.push(path);
        }
    }
    found
}
