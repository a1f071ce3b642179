//! One writer per job and per output (DESIGN.md §16): a second run of a running job, a
//! second job on a running job's output, and a served job beside a local run, each refused
//! at start (exit 2, naming the run that holds it), with the output exactly what one run
//! writes. A run that was killed does not block the next one.
//!
//! The scenario a new user hit: `weir run job.toml &`, then `weir run job.toml --restore
//! latest` 1.5 s later: both exited 0, and the output had lost records and held garbled
//! lines of two writers.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::crash::{committed, running_counts};
use support::host::Host;
use support::{
    assert_clean_failure, cache_dir, spawn_run, stderr, tokenize_then, wait_while_running,
};

/// Writes `in.txt` of `lines` lines; returns the word count's expected output, sorted.
fn write_input(dir: &Path, lines: usize) -> Vec<String> {
    let words = support::write_word_lines(dir, lines);
    running_counts(words.iter().map(String::as_str))
}

/// The word count `name` over `dir/in.txt` into `dir/out.txt`, its checkpoints in
/// `dir/<store>`, written to `dir/<name>.toml`.
fn word_count(dir: &Path, name: &str, store: &str) -> PathBuf {
    let job = tokenize_then(
        dir,
        &format!("name = \"{name}\"\nbatch_size = 16"),
        "count",
        "weir-example-counter",
        "",
        &format!(
            "[checkpoints]\nstore = \"file://{}\"\ninterval_ms = 20",
            dir.join(store).display()
        ),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::rename(job, &path).expect("rename");
    // 200 000 lines take at least 2 s: a run is still running when the test acts on it.
    support::pace_source(&path, 100_000);
    path
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

/// Whether the output `dir/out.txt` has a lease (a run writes it).
fn output_leased(dir: &Path) -> bool {
    std::fs::read_dir(dir.join(".out.txt.weir-staging/lease"))
        .is_ok_and(|mut entries| entries.next().is_some())
}

/// Whether job `name` has completed a checkpoint in `dir/store`.
fn checkpointed(dir: &Path, name: &str) -> bool {
    !support::checkpoint_ids(&dir.join("store").join(name).join("checkpoints")).is_empty()
}

#[test]
fn a_second_run_of_a_running_job_is_refused_naming_the_first_and_the_output_is_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(dir.path(), 200_000);
    let job = word_count(dir.path(), "twice", "store");
    let mut first = spawn_run(&[path(&job), "-q"]);
    wait_while_running(&mut first, "a checkpoint", || {
        checkpointed(dir.path(), "twice")
    });

    let second = support::weir(&["run", path(&job), "--restore", "latest"]);
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    assert_clean_failure(
        &second,
        &[
            "job `twice`",
            "in use by another run",
            &format!("pid {}", first.id()),
        ],
    );

    assert!(first.wait().expect("wait").success(), "the first run fails");
    assert!(
        committed(dir.path()) == expected,
        "the output must be exactly one run's"
    );
    // The first run let go of its leases as it ended: the next run starts at once (and,
    // the job having finished, only commits).
    let again = support::weir(&["run", path(&job), "--restore", "latest", "-q"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(committed(dir.path()) == expected);
}

#[test]
fn another_job_writing_a_running_jobs_output_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(dir.path(), 200_000);
    let first_job = word_count(dir.path(), "first", "store");
    let other_job = word_count(dir.path(), "other", "other-store");
    let mut first = spawn_run(&[path(&first_job), "-q"]);
    wait_while_running(&mut first, "a checkpoint", || {
        checkpointed(dir.path(), "first")
    });

    let other = support::weir(&["run", path(&other_job)]);
    assert_eq!(other.status.code(), Some(2), "{}", stderr(&other));
    let out = dir.path().join("out.txt");
    assert_clean_failure(
        &other,
        &[
            &format!("the output {}", out.display()),
            "in use by another run",
            &format!("pid {}", first.id()),
        ],
    );
    assert!(first.wait().expect("wait").success());
    assert!(committed(dir.path()) == expected);
}

#[test]
fn a_killed_run_does_not_block_the_restore_that_follows_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(dir.path(), 200_000);
    let job = word_count(dir.path(), "killed", "store");
    let mut run = spawn_run(&[path(&job), "-q"]);
    wait_while_running(&mut run, "a checkpoint", || {
        checkpointed(dir.path(), "killed")
    });
    run.kill().expect("SIGKILL");
    run.wait().expect("wait");
    // Its leases have not expired, but their holder is gone from this machine.
    assert!(output_leased(dir.path()));
    let restored = support::weir(&["run", path(&job), "--restore", "latest", "-q"]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert!(committed(dir.path()) == expected);
}

#[test]
fn a_served_job_and_a_local_run_never_write_one_output_together() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(dir.path(), 200_000);
    let job = word_count(dir.path(), "shared", "store");

    // Served first: the local run is refused, naming the output.
    let served = host.submit(&job).expect("submitted");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !output_leased(dir.path()) {
        assert!(
            Instant::now() < deadline,
            "the served job never took its output"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // And the host refuses a second job on the same output while the first runs.
    let twin = host.submit(&job).expect_err("a second writer of out.txt");
    assert!(twin.contains("out.txt") && twin.contains(&served), "{twin}");
    let local = support::weir(&["run", path(&job)]);
    assert_eq!(local.status.code(), Some(2), "{}", stderr(&local));
    assert_clean_failure(&local, &["out.txt", "in use by another run"]);
    let info = host.wait(&served);
    assert_eq!(info["status"], "finished", "{info}");
    assert!(committed(dir.path()) == expected);

    // Local first: the served job fails at start, naming the local run.
    std::fs::remove_dir_all(dir.path().join("store")).expect("clean store");
    let mut local = spawn_run(&[path(&job), "--fresh", "-q"]);
    wait_while_running(&mut local, "a checkpoint", || {
        checkpointed(dir.path(), "shared")
    });
    // Refused by `weir submit` itself, or failed as it started.
    let error = match host.submit(&job) {
        Err(refused) => refused,
        Ok(served) => {
            let info = host.wait(&served);
            assert_eq!(info["status"], "failed", "{info}");
            info.to_string()
        }
    };
    assert!(
        error.contains("in use by another run") && error.contains(&format!("pid {}", local.id())),
        "{error}"
    );
    assert!(local.wait().expect("wait").success());
    assert!(committed(dir.path()) == expected);
}

/// A run whose lease another run took over (it stalled past the lease's expiry) commits
/// nothing: its sink refuses to recover, and its coordinator to write a checkpoint's
/// metadata; the job fails saying why, and neither the store nor the output holds anything
/// of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_lost_its_lease_commits_nothing() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use weir_host::checkpoint::lease::{Clock, Lease, LeaseOptions};
    use weir_host::checkpoint::{CheckpointStore, JobStart, StartFrom};
    use weir_host::engine::{ComponentCache, Engine, EngineOptions};
    use weir_host::job::{JobError, JobSpec, Pipeline, RunOptions, run};

    let dir = tempfile::tempdir().expect("tempdir");
    write_input(dir.path(), 2_000);
    let spec = JobSpec::load(&word_count(dir.path(), "lost", "store")).expect("job");
    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(cache_dir())),
    })
    .expect("engine");
    let store = CheckpointStore::open(
        &spec.checkpoints.as_ref().expect("checkpoints").store,
        "lost",
    )
    .expect("store");
    let now = Arc::new(AtomicU64::new(1_000_000));
    let options = LeaseOptions {
        clock: Clock::Manual(now.clone()),
        ..LeaseOptions::default()
    };
    let take = || {
        Lease::acquire(
            store.object_store().clone(),
            store.folder(),
            "job `lost`",
            &options,
        )
    };
    let stalled = take().await.expect("the first run's lease");
    now.fetch_add(11_000, Ordering::SeqCst);
    let _other = take().await.expect("taken over after its expiry");
    stalled
        .renew()
        .await
        .expect_err("the stalled run finds it lost");

    for guard_the_sink in [true, false] {
        let mut pipeline = Pipeline::from_spec(&spec, &engine).expect("pipeline");
        if guard_the_sink {
            pipeline.guarded_by(vec![stalled.check()]);
        } else {
            pipeline.leases = vec![stalled.check()];
        }
        let start = JobStart::plan(&store, "lost", &StartFrom::New, &[])
            .await
            .expect("plan");
        let error = run(pipeline, start, RunOptions::default())
            .await
            .expect_err("a run without its lease fails");
        let message = error.to_string();
        assert!(message.contains("another run took it over"), "{message}");
        match error {
            JobError::Sink(e) => assert!(guard_the_sink && e.is_taken_over(), "{e}"),
            JobError::Checkpoint(e) => assert!(!guard_the_sink && e.is_deterministic(), "{e}"),
            other => panic!("not a lease failure: {other}"),
        }
        assert!(store.completed().await.expect("list").is_empty());
        let output = std::fs::read_to_string(dir.path().join("out.txt")).unwrap_or_default();
        assert!(
            output.is_empty(),
            "committed output: {} bytes",
            output.len()
        );
    }
}
