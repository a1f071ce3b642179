//! End-to-end checkpoint tests: exactly-once output across SIGKILLs and restores, retried
//! checkpoints under store faults and a hung store, and worker-side cleanup over many
//! checkpoints.
//!
//! Every job is word count over generated text (tokenizer, then a keyed counter emitting
//! `word<TAB>running count`), so every output line is distinct and a lost or repeated record
//! shows as a missing or duplicated line. The expected output is computed here, independently
//! of Weir: for a word seen `n` times, the lines `word\t1` to `word\tn`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path as StorePath;
use support::crash::{
    OutputCheck, Rng, assert_store_holds_exactly_the_retained, committed, crash_then_finish, seed,
};
use support::{cache_dir, stderr, tokenize_then, write_job};
use weir_host::checkpoint::actor::Actor;
use weir_host::checkpoint::instrumented_store::{Faults, InstrumentedStore};
use weir_host::checkpoint::{CheckpointMetadata, CheckpointStore};
use weir_host::engine::{ComponentCache, Engine, EngineOptions};
use weir_host::job::{JobSpec, RunOptions, RunSummary, run_job_in};

/// Writes `lines` lines of five words each over `vocabulary` words; returns the expected
/// output, sorted.
fn write_input(path: &Path, lines: usize, vocabulary: u64, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed | 1);
    let mut text = String::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..lines {
        for i in 0..5 {
            let word = format!("w{}", rng.below(vocabulary));
            if i > 0 {
                text.push(' ');
            }
            text.push_str(&word);
            *counts.entry(word).or_default() += 1;
        }
        text.push('\n');
    }
    std::fs::write(path, text).expect("write input");
    let mut expected: Vec<String> = counts
        .iter()
        .flat_map(|(w, &n)| (1..=n).map(move |k| format!("{w}\t{k}")))
        .collect();
    expected.sort();
    expected
}

/// A word-count job file in `dir` with a file sink and the given `[checkpoints]` lines.
fn job_file(dir: &Path, name: &str, batch_size: usize, checkpoints: &str) -> PathBuf {
    tokenize_then(
        dir,
        &format!("name = \"{name}\"\nbatch_size = {batch_size}"),
        "count",
        "weir-example-counter",
        "parallelism = 2",
        &format!("[checkpoints]\n{checkpoints}"),
    )
}

fn engine() -> Engine {
    Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(cache_dir())),
    })
    .expect("engine")
}

#[test]
fn sigkill_at_random_instants_then_restore_gives_exactly_the_uninterrupted_output() {
    let seed = seed();
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(&dir.path().join("in.txt"), 200_000, 3_000, seed);
    let store = dir.path().join("store");
    let job = job_file(
        dir.path(),
        "crash",
        32,
        &format!(
            "store = \"file://{}\"\ninterval_ms = 20\nretain = 2\nmax_chain = 4\nrestart_attempts = 0",
            store.display()
        ),
    );
    let job = job.to_str().expect("utf-8");

    // Run, kill, restore, again, until a run gets to the end by itself.
    crash_then_finish(job, dir.path(), &expected, (seed, &mut rng), (10, 90), 5);

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let checkpoints =
        CheckpointStore::open(&format!("file://{}", store.display()), "crash").expect("open store");
    runtime.block_on(assert_store_holds_exactly_the_retained(&checkpoints));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_fail_under_store_faults_are_retried_and_leave_no_orphans() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(&dir.path().join("in.txt"), 40_000, 2_000, 7);
    let job = job_file(
        dir.path(),
        "faults",
        128,
        "interval_ms = 10\nretain = 2\nmax_chain = 3\nrestart_attempts = 20",
    );
    let spec = JobSpec::load(&job).expect("job file");
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = InstrumentedStore::new(
        memory.clone(),
        Faults {
            error_rate: 0.1,
            latency: Duration::from_millis(1),
            seed: 11,
        },
    );
    let stats = faulty.stats();
    let store = CheckpointStore::new(Arc::new(faulty), &StorePath::from("root"), "faults");
    let summary = run_job_in(&spec, &engine(), None, RunOptions::default(), Some(store))
        .await
        .expect("the job finishes despite the faults");
    assert!(committed(dir.path()) == expected, "output differs");
    assert!(stats.injected_errors.load(Ordering::Relaxed) > 0);
    assert!(
        summary.checkpoints_aborted > 0 || summary.restarts > 0,
        "faults should have failed some checkpoints: {summary:?}"
    );
    // Checked through the store without faults.
    let clean = CheckpointStore::new(memory, &StorePath::from("root"), "faults");
    assert_store_holds_exactly_the_retained(&clean).await;
}

/// Runs a word count whose store holds back writes to paths ending with `suffix` until the held
/// paths satisfy `release` (a later checkpoint's write held too, or one write made again),
/// with a checkpoint timeout of `timeout_ms`; checks the output and that the store holds
/// exactly the retained checkpoints' objects in the end.
async fn run_with_a_hung_store(
    name: &str,
    suffix: &str,
    timeout_ms: u64,
    release: fn(&[String]) -> bool,
) -> RunSummary {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(&dir.path().join("in.txt"), 20_000, 2_000, 5);
    let job = job_file(
        dir.path(),
        name,
        64,
        &format!("interval_ms = 10\ntimeout_ms = {timeout_ms}\nretain = 2\nrestart_attempts = 50"),
    );
    let spec = JobSpec::load(&job).expect("job file");
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let instrumented = InstrumentedStore::new(memory.clone(), Faults::default());
    let hold = instrumented.write_hold();
    hold.hold(suffix);
    let release = tokio::spawn(async move {
        hold.held_until(release).await;
        hold.release();
    });
    let store = CheckpointStore::new(Arc::new(instrumented), &StorePath::from("root"), name);
    let summary = run_job_in(&spec, &engine(), None, RunOptions::default(), Some(store))
        .await
        .expect("the job finishes once the store answers again");
    release.await.expect("release");
    assert!(committed(dir.path()) == expected, "output differs");
    let clean = CheckpointStore::new(memory, &StorePath::from("root"), name);
    assert_store_holds_exactly_the_retained(&clean).await;
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_waiting_on_hung_uploads_time_out_and_the_job_still_finishes_exactly_once() {
    // Without a timeout, the first checkpoint would wait for the uploads, then complete.
    // Held until a second checkpoint's upload is: the first one timed out by then.
    // A short timeout: a slow machine only adds the aborts this test expects.
    let summary = run_with_a_hung_store("hung-uploads", ".inc", 100, |held| {
        fn checkpoint(path: &str) -> Option<&str> {
            path.rsplit('/').next().and_then(|f| f.get(..24))
        }
        held.iter().any(|p| checkpoint(p) != checkpoint(&held[0]))
    })
    .await;
    assert!(
        summary.checkpoints_aborted > 0,
        "checkpoints waiting on hung uploads should have timed out: {summary:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_metadata_write_is_made_again_until_the_store_takes_it_and_the_run_goes_on() {
    // The write may still land, so the checkpoint can be neither completed nor aborted: the
    // coordinator writes it again until the store takes it (held until one is written
    // again), while the job goes on; nothing fails, and that checkpoint completes.
    // A timeout no checkpoint but the held one reaches, however slow the machine: this test
    // asserts that none is aborted. The held write is made again only past it.
    let summary = run_with_a_hung_store("hung-metadata", ".json", 2_000, |held| {
        held.iter()
            .enumerate()
            .any(|(i, p)| p.contains("/checkpoints/") && held[..i].contains(p))
    })
    .await;
    assert_eq!(summary.restarts, 0, "{summary:?}");
    assert_eq!(
        summary.checkpoints_aborted, 0,
        "a checkpoint whose metadata may land must not be aborted: {summary:?}"
    );
    assert!(summary.checkpoints_completed >= 2, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_hundred_checkpoints_cleanup_keeps_the_store_bounded_and_never_deletes_what_is_referenced()
 {
    const RETAIN: usize = 3;
    const MAX_CHAIN: usize = 4;
    const SUBTASKS: usize = 3; // tokenize (stateless, no artifacts) and count × 2
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(&dir.path().join("in.txt"), 60_000, 5_000, 3);
    let job = job_file(
        dir.path(),
        "cleanup",
        16,
        &format!("interval_ms = 2\nretain = {RETAIN}\nmax_chain = {MAX_CHAIN}"),
    );
    // At least 3 s, for a hundred checkpoints however fast the machine.
    support::pace_source(&job, 20_000);
    let spec = JobSpec::load(&job).expect("job file");
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let counted = InstrumentedStore::new(memory.clone(), Faults::default());
    let stats = counted.stats();
    let store = CheckpointStore::new(Arc::new(counted), &StorePath::from("root"), "cleanup");
    let clean = CheckpointStore::new(memory, &StorePath::from("root"), "cleanup");

    // While the job runs, watch the store: how many objects it holds, and whether every
    // retained checkpoint can still be restored.
    let done = Arc::new(AtomicBool::new(false));
    let most_objects = Arc::new(AtomicUsize::new(0));
    let watcher = tokio::spawn({
        let (done, most_objects, clean) = (done.clone(), most_objects.clone(), clean.clone());
        async move {
            let mut checked = 0;
            while !done.load(Ordering::Relaxed) {
                checked += check_retained_are_whole(&clean, &most_objects).await;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            checked
        }
    });
    let summary = run_job_in(&spec, &engine(), None, RunOptions::default(), Some(store))
        .await
        .expect("job");
    done.store(true, Ordering::Relaxed);
    let checked = watcher.await.expect("watcher");
    assert!(committed(dir.path()) == expected, "output differs");
    assert!(
        summary.checkpoints_completed >= 100,
        "only {} checkpoints completed",
        summary.checkpoints_completed
    );
    assert!(checked > 10, "the watcher checked only {checked} times");

    // Bounded: per stateful subtask, the chains of the retained checkpoints and the one in
    // flight share at most (RETAIN + 1) × MAX_CHAIN artifacts; plus the metadata.
    let bound = SUBTASKS * (RETAIN + 1) * MAX_CHAIN + RETAIN + 1;
    let most = most_objects.load(Ordering::Relaxed);
    assert!(
        most <= bound,
        "the store held {most} objects, bound {bound}"
    );

    // Who deleted what: artifacts only by the subtask that owns them (their prefix), once;
    // the coordinator only metadata, the lease only its own objects.
    let log = stats.delete_log();
    let mut per_path: HashMap<String, u32> = HashMap::new();
    for (path, actor) in &log {
        let path = path.to_string();
        *per_path.entry(path.clone()).or_default() += 1;
        let relative = path.strip_prefix("root/cleanup/").expect("job prefix");
        match actor {
            Some(Actor::Subtask { operator, subtask }) => assert!(
                relative.starts_with(&format!("state/{operator}/{subtask}/")),
                "{operator}/{subtask} deleted {relative}, which it does not own"
            ),
            Some(Actor::Coordinator) => assert!(
                relative.starts_with("checkpoints/"),
                "the coordinator deleted {relative}"
            ),
            // A run's lease deletes its own older generations.
            Some(Actor::Lease) => assert!(
                relative.starts_with("lease/"),
                "the lease deleted {relative}"
            ),
            None => panic!("{relative} was deleted by an unknown task"),
        }
    }
    assert!(
        per_path.values().all(|&n| n == 1),
        "some object was deleted twice"
    );
    let artifact_deletes = per_path.keys().filter(|p| p.contains("/state/")).count();
    assert!(
        artifact_deletes > 100,
        "only {artifact_deletes} artifacts deleted"
    );
    assert_store_holds_exactly_the_retained(&clean).await;
}

/// Checks that every checkpoint retained throughout one listing of the store has all its
/// artifacts there; records the number of objects. Returns 1 if a check was made.
///
/// Metadata leaves the store before the subtasks learn of the new earliest retained
/// checkpoint, so a checkpoint whose metadata is still there after the listing was retained
/// during it: each of its artifacts must have been listed.
async fn check_retained_are_whole(store: &CheckpointStore, most_objects: &AtomicUsize) -> usize {
    let Ok(before) = store.completed().await else {
        return 0;
    };
    let mut metadata: Vec<CheckpointMetadata> = Vec::new();
    for id in before {
        // A checkpoint may leave retention while we read.
        if let Ok(m) = store.read_metadata(id).await {
            metadata.push(m);
        }
    }
    let Ok(listing) = store.list_all().await else {
        return 0;
    };
    most_objects.fetch_max(listing.len(), Ordering::Relaxed);
    let present: BTreeSet<String> = listing.iter().map(ToString::to_string).collect();
    let Ok(after) = store.completed().await else {
        return 0;
    };
    for m in metadata.iter().filter(|m| after.contains(&m.id)) {
        for artifact in m.artifacts() {
            let path = store.resolve(&artifact.path).to_string();
            assert!(
                present.contains(&path),
                "checkpoint {} is retained but its artifact {path} was deleted",
                m.id
            );
        }
    }
    1
}

#[test]
fn restore_by_id_or_metadata_file_and_clear_errors_for_unusable_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(&dir.path().join("in.txt"), 2_000, 100, 5);
    let store = dir.path().join("store");
    let job = job_file(
        dir.path(),
        "restores",
        64,
        &format!(
            "store = \"file://{}\"\ninterval_ms = 5\nretain = 3",
            store.display()
        ),
    );
    let job = job.to_str().expect("utf-8");
    let out = support::weir(&["run", job, "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(committed(dir.path()) == expected);

    let metadata_dir = store.join("restores/checkpoints");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&metadata_dir)
        .expect("metadata folder")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let newest = files.last().expect("a checkpoint");
    // The newest checkpoint is the finished job: restoring it commits and changes nothing.
    let out = support::weir(&["run", job, "--restore", newest.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(committed(dir.path()) == expected);

    let out = support::weir(&["run", job, "--restore", "latest", "--parallelism", "nope=2"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("has no operator `nope`"),
        "{}",
        stderr(&out)
    );
    let out = support::weir(&["run", job, "--parallelism", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("out of range"), "{}", stderr(&out));

    let out = support::weir(&["run", job, "--restore", "999"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("checkpoint 999 does not exist"),
        "{}",
        stderr(&out)
    );

    let plain = write_job(
        dir.path(),
        std::fs::read_to_string(job)
            .expect("job")
            .split("[checkpoints]")
            .next()
            .expect("head"),
    );
    let out = support::weir(&["run", plain.to_str().expect("utf-8"), "--restore", "latest"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("keeps no checkpoints"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_failing_job_is_restarted_from_its_latest_checkpoint_as_often_as_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut input = String::new();
    // Long enough that checkpoints complete before the failing record comes.
    for i in 0..50_000 {
        input.push_str(&format!("w{}\n", i % 30));
    }
    input.push_str("boom\n");
    std::fs::write(dir.path().join("in.txt"), input).expect("write");
    let job = tokenize_then(
        dir.path(),
        "name = \"restarts\"\nbatch_size = 32",
        "victim",
        "weir-test-faulty",
        "config = { mode = \"error-on\", word = \"boom\" }",
        "[checkpoints]\ninterval_ms = 2\nrestart_attempts = 2",
    );
    // And at least a second long, however fast the machine.
    support::pace_source(&job, 50_000);
    let out = support::weir_logging(&["run", job.to_str().expect("utf-8")], "weir=info");
    support::assert_clean_failure(&out, &["operator `victim` subtask 0", "after 2 restarts"]);
    let err = stderr(&out);
    assert_eq!(
        err.matches("restarting from its latest checkpoint").count(),
        2,
        "{err}"
    );
    assert!(
        err.contains("restoring"),
        "restarts restore a checkpoint:\n{err}"
    );
}

#[test]
fn an_operator_that_cannot_open_fails_the_job_at_once_without_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), "a b\n").expect("write");
    // A mode the operator does not know: its `open` fails on the config, as it would again on
    // every restart.
    let job = tokenize_then(
        dir.path(),
        "name = \"bad-config\"",
        "victim",
        "weir-test-faulty",
        "config = { mode = \"no-such-mode\" }",
        "[checkpoints]\ninterval_ms = 2\nrestart_attempts = 3",
    );
    let out = support::weir_logging(&["run", job.to_str().expect("utf-8")], "weir=info");
    support::assert_clean_failure(
        &out,
        &[
            "operator `victim` subtask",
            "failed to open",
            "no-such-mode",
        ],
    );
    let err = stderr(&out);
    assert_eq!(
        err.matches("restarting from its latest checkpoint").count(),
        0,
        "{err}"
    );
    assert!(!err.contains("after 1 restart"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescaling_2_3_1_4_across_restores_gives_the_uninterrupted_output_with_one_deleter_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_input(&dir.path().join("in.txt"), 120_000, 4_000, 13);
    let job = job_file(
        dir.path(),
        "rescale",
        32,
        "interval_ms = 5\nretain = 2\nmax_chain = 6\nrewrite_budget = 200\nrestart_attempts = 0",
    );
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let counted = InstrumentedStore::new(memory.clone(), Faults::default());
    let stats = counted.stats();
    let store = CheckpointStore::new(Arc::new(counted), &StorePath::from("root"), "rescale");
    let clean = CheckpointStore::new(memory, &StorePath::from("root"), "rescale");
    let engine = engine();
    let steps = [2u32, 3, 1, 4];
    for (step, &parallelism) in steps.iter().enumerate() {
        let mut spec = JobSpec::load(&job).expect("job file");
        spec.set_parallelism(None, parallelism)
            .expect("parallelism");
        let before = clean.completed().await.expect("list");
        let restored = match before.last() {
            Some(&id) => Some(clean.read_metadata(id).await.expect("metadata")),
            None => None,
        };
        let options = RunOptions::default();
        let last = step + 1 == steps.len();
        // Stop the run once it has completed a few checkpoints of its own; check that the
        // first of them the watcher sees (the very first, unless the watcher was slow and
        // retention dropped it) holds nothing written before the rescale: every subtask's
        // chain starts with a full snapshot of this run.
        let watcher = (!last).then(|| {
            let (stop, clean) = (options.stop.clone(), clean.clone());
            let newest = before.last().copied();
            tokio::spawn(async move {
                let mut first_checked = newest.is_none();
                loop {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let ids = clean.completed().await.unwrap_or_default();
                    let new: Vec<_> = ids.iter().filter(|&&id| Some(id) > newest).collect();
                    if let (false, Some(&&first)) = (first_checked, new.first())
                        && let Ok(m) = clean.read_metadata(first).await
                    {
                        let count = m.operator("count").expect("count");
                        assert_eq!(count.parallelism, parallelism);
                        for handle in &count.subtasks {
                            assert!(
                                handle.chain.first().is_some_and(|a| a.full)
                                    && handle.chain.iter().all(|a| Some(a.checkpoint) > newest),
                                "the first checkpoint after a rescale writes each range afresh: {handle:?}"
                            );
                        }
                        first_checked = true;
                    }
                    // Retention keeps two: count by ids.
                    let since = newest.map_or(0, |n| n.0);
                    if new.last().is_some_and(|&&id| id.0 >= since + 4) {
                        stop.stop();
                        return first_checked;
                    }
                }
            })
        });
        let restore = (step > 0).then_some(weir_host::checkpoint::RestoreFrom::Latest);
        let result = run_job_in(&spec, &engine, restore, options, Some(store.clone())).await;
        let reads = stats.take_reads_by();
        match watcher {
            Some(watcher) => {
                let error = result.expect_err("stopped");
                assert!(error.to_string().contains("stopped"), "{error}");
                assert!(
                    watcher.await.expect("watcher"),
                    "first checkpoint not checked"
                );
            }
            None => {
                result.expect("the last run finishes");
            }
        }
        if let Some(restored) = &restored {
            // Each subtask read about its share of the restored chains, not everything.
            let total: u64 = restored.artifacts().map(|a| a.bytes).sum();
            let groups = weir_host::partition::KeyGroups::new(128);
            for subtask in 0..parallelism {
                let actor = Actor::Subtask {
                    operator: "count".into(),
                    subtask,
                };
                let read = reads.get(&actor).copied().unwrap_or(0);
                let share = groups
                    .range_of(weir_host::ids::SubtaskIndex(subtask), parallelism)
                    .len() as u64;
                let fair = total * share / 128;
                let overhead = 16_384 * restored.artifacts().count() as u64;
                assert!(
                    read > 0 && read <= fair + fair / 4 + overhead,
                    "step {step}: subtask {subtask} of {parallelism} read {read} bytes; its share of {total} is {fair}"
                );
            }
        }
    }
    assert!(committed(dir.path()) == expected, "output differs");
    let deletes = stats.deletes();
    assert!(deletes.len() > 10, "only {} objects deleted", deletes.len());
    let twice: Vec<_> = deletes.iter().filter(|&(_, &n)| n != 1).collect();
    assert!(twice.is_empty(), "deleted more than once: {twice:?}");
    for (path, actor) in stats.delete_log() {
        if let Some(Actor::Subtask { operator, .. }) = &actor {
            assert_eq!(operator, "count", "{path}");
        }
        assert!(actor.is_some(), "{path} deleted by an unknown task");
    }
    assert_store_holds_exactly_the_retained(&clean).await;
}

/// The output check of the kill loops (`support::crash::OutputCheck`), which the tests above
/// trust to find duplicates.
fn checked_lines() -> Vec<String> {
    ["a\t1", "a\t2", "b\t1", "c\t1"].map(str::to_owned).to_vec()
}

#[test]
fn the_kill_loops_check_passes_a_torn_line_and_a_truncated_append_made_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.txt");
    let expected = checked_lines();
    let mut check = OutputCheck::new(&expected);
    check.check(dir.path());
    std::fs::write(&out, "a\t1\nb\t1\na\t").expect("write");
    check.check(dir.path());
    // The next run truncates to the committed length and appends again, in another order.
    std::fs::write(&out, "a\t1\nc\t1\nb\t1\na\t2\n").expect("write");
    check.check(dir.path());
}

#[test]
#[should_panic(expected = "should not be there")]
fn the_kill_loops_check_fails_a_line_committed_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.txt");
    let expected = checked_lines();
    let mut check = OutputCheck::new(&expected);
    std::fs::write(&out, "a\t1\nb\t1\n").expect("write");
    check.check(dir.path());
    std::fs::write(&out, "a\t1\nb\t1\nb\t1\n").expect("write");
    check.check(dir.path());
}
