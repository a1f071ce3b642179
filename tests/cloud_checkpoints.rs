//! Jobs checkpointing to the cloud stores' emulators (`tests/support/emulators.rs`), configured
//! the way a user configures them: a store URL in the job file and the store's environment
//! variables for the `weir` process.
//!
//! On Azure (Azurite) a word count is SIGKILLed at random instants and restored until it
//! finishes; its output must be exactly the uninterrupted one, computed here independently of
//! Weir (for a word seen `n` times, the lines `word\t1` to `word\tn`), and the store must hold
//! exactly the retained checkpoints' objects.
//!
//! GCS has no such test: fake-gcs-server refuses object_store's uploads (see
//! `tests/storage_conformance.rs`), so no checkpoint can be written to it. What is tested is
//! that a job's `gs://` store reaches the server through the environment and that the refusal
//! fails the run with the store's own words.

use crate::support;

use std::path::{Path, PathBuf};

use support::crash::{
    Rng, assert_store_holds_exactly_the_retained, crash_then_finish_with_env, running_counts, seed,
};
use support::emulators::{Cloud, StoreServer};
use support::{stderr, tokenize_then, weir_with_env};
use weir_host::checkpoint::CheckpointStore;
use weir_host::checkpoint::storage::open_store_with;

/// Writes `lines` lines of five words over `vocabulary` words to `path`; returns the
/// word count's expected output, sorted.
fn write_words(path: &Path, lines: usize, vocabulary: u64, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed | 1);
    let words: Vec<String> = (0..lines * 5)
        .map(|_| format!("w{}", rng.below(vocabulary)))
        .collect();
    let text: String = words.chunks(5).map(|line| line.join(" ") + "\n").collect();
    std::fs::write(path, text).expect("write input");
    running_counts(words.iter().map(String::as_str))
}

/// A word count in `dir` (input `in.txt`, output `out.txt`) checkpointing to `store`.
fn word_count_job(dir: &Path, name: &str, store: &str, checkpoints: &str) -> PathBuf {
    tokenize_then(
        dir,
        &format!("name = \"{name}\"\nbatch_size = 32"),
        "count",
        "weir-example-counter",
        "parallelism = 2",
        &format!("[checkpoints]\nstore = \"{store}\"\n{checkpoints}"),
    )
}

#[test]
fn azure_sigkill_at_random_instants_then_restore_gives_exactly_the_uninterrupted_output() {
    let server = StoreServer::start(Cloud::Azure);
    let seed = seed();
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_words(&dir.path().join("in.txt"), 120_000, 3_000, seed);
    let store = server.url("jobs");
    let job = word_count_job(
        dir.path(),
        "crash",
        &store,
        "interval_ms = 50\nretain = 2\nmax_chain = 4\nrestart_attempts = 0",
    );
    let job = job.to_str().expect("utf-8");

    crash_then_finish_with_env(
        job,
        dir.path(),
        &expected,
        (seed, &mut rng),
        (50, 250),
        3,
        &server.env(),
    );

    let (objects, prefix) = open_store_with(&store, server.settings()).expect("open the store");
    let checkpoints = CheckpointStore::new(objects, &prefix, "crash");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(assert_store_holds_exactly_the_retained(&checkpoints));
}

#[test]
fn gcs_a_job_reaches_the_emulator_whose_refusal_of_uploads_fails_the_run() {
    let server = StoreServer::start(Cloud::Gcs);
    let dir = tempfile::tempdir().expect("tempdir");
    write_words(&dir.path().join("in.txt"), 1_000, 100, 1);
    let job = word_count_job(
        dir.path(),
        "refused",
        &server.url("jobs"),
        "interval_ms = 50\ntimeout_ms = 5000\nrestart_attempts = 0",
    );
    let out = weir_with_env(&["run", job.to_str().expect("utf-8"), "-q"], &server.env());
    let err = stderr(&out);
    assert!(!out.status.success(), "the run succeeded:\n{err}");
    // The server's own answer to object_store's upload, so the request reached it.
    assert!(
        err.contains("invalid uploadType") && err.contains("PUT"),
        "the run failed otherwise:\n{err}"
    );
}
