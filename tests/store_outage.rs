//! A checkpoint store that stops answering while a job runs (DESIGN.md §5.6): the moto server
//! is stopped (SIGSTOP) and started again (SIGCONT).
//!
//! While it is stopped the job goes on processing; checkpoints fail with a clear message and
//! are retried with a pause that doubles; the increments that could not be uploaded ride in
//! the next one. Once the store is back the next checkpoint completes, cleanup catches up, and
//! the store ends holding exactly what the retained checkpoints reference. Past
//! `tolerable_failures` failures in a row, the job fails, saying so.
//!
//! The job reads a paced generator (`records_per_second`), so that it runs for a while, and
//! writes to stdout, whose lines show the records flowing while the store is down.

use crate::support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::crash::assert_store_holds_exactly_the_retained;
use support::emulators::{Cloud, StoreServer};
use support::{component, toml_path, weir_command, weir_with_env, write_job};
use weir_host::checkpoint::CheckpointStore;
use weir_host::checkpoint::storage::open_store_with;

const RECORDS: u64 = 60_000;

/// A keyed count over a paced generator, checkpointing to `store`, written to stdout.
fn job(dir: &std::path::Path, store: &str, per_second: u64, checkpoints: &str) -> String {
    let path = write_job(
        dir,
        &format!(
            r#"
            [job]
            name = "outage"
            batch_size = 64
            [source]
            kind = "generator"
            records = {RECORDS}
            keys = 20000
            records_per_second = {per_second}
            [[operators]]
            name = "count"
            component = {counter}
            parallelism = 2
            key_by = "key"
            [sink]
            kind = "stdout"
            [checkpoints]
            store = "{store}"
            interval_ms = 200
            timeout_ms = 1000
            retain = 2
            restart_attempts = 0
            # Chains drain slowly, so that an increment that was not stored is still in
            # the chain at the next checkpoint (else re-writing would take it out).
            max_chain = 1000
            rewrite_budget = 1
            {checkpoints}
            "#,
            counter = toml_path(&component("weir-example-counter")),
        ),
    );
    path.to_str().expect("utf-8").to_owned()
}

/// A running `weir run`: its output lines with when they came, its log, its resident memory.
struct Running {
    child: Child,
    started: Instant,
    lines: Arc<Mutex<Vec<(Duration, String)>>>,
    log: Arc<Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(job: &str, server: &StoreServer) -> Self {
        let mut child = weir_command()
            .args(["run", job, "--quiet"])
            .env("RUST_LOG", "info")
            .envs(server.env())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start weir");
        let started = Instant::now();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let readers = vec![
            std::thread::spawn({
                let lines = lines.clone();
                move || {
                    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                        let at = started.elapsed();
                        lines.lock().expect("lines").push((at, line));
                    }
                }
            }),
            std::thread::spawn({
                let log = log.clone();
                move || {
                    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                        log.lock().expect("log").push(line);
                    }
                }
            }),
        ];
        Self {
            child,
            started,
            lines,
            log,
            readers,
        }
    }

    fn log_has(&self, part: &str) -> bool {
        self.log
            .lock()
            .expect("log")
            .iter()
            .any(|l| l.contains(part))
    }

    /// How many lines the log has.
    fn log_len(&self) -> usize {
        self.log.lock().expect("log").len()
    }

    /// How many log lines after the first `from` contain `part`.
    fn log_count_since(&self, from: usize, part: &str) -> usize {
        let log = self.log.lock().expect("log");
        log.iter().skip(from).filter(|l| l.contains(part)).count()
    }

    fn log_text(&self) -> String {
        self.log.lock().expect("log").join("\n")
    }

    /// Waits until the log has a line containing `part`.
    fn wait_for_log(&self, part: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.log_has(part) {
            assert!(
                Instant::now() < deadline,
                "no log line with {part:?} within {within:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The resident memory of the `weir` process, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Samples the resident memory every 50 ms for `during`; returns the peak.
    fn peak_rss_kib(&self, during: Duration) -> u64 {
        let until = Instant::now() + during;
        let mut peak = self.rss_kib();
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
            peak = peak.max(self.rss_kib());
        }
        peak
    }

    fn wait(mut self) -> (std::process::ExitStatus, Vec<(Duration, String)>, String) {
        let status = self.child.wait().expect("wait for weir");
        for reader in self.readers.drain(..) {
            reader.join().expect("reader");
        }
        let lines = std::mem::take(&mut *self.lines.lock().expect("lines"));
        (status, lines, self.log_text())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The numbers logged as `field=N`, in order.
fn logged_numbers(log: &str, message: &str, field: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains(message))
        .filter_map(|l| {
            let at = l.find(&format!("{field}="))? + field.len() + 1;
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn while_the_store_is_stopped_the_job_goes_on_and_afterwards_the_store_holds_exactly_the_retained()
{
    let server = StoreServer::start(Cloud::S3);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = server.url("jobs");
    let job = job(dir.path(), &store, 6_000, "tolerable_failures = 100");
    let run = Running::start(&job, &server);

    run.wait_for_log("checkpoint complete", Duration::from_secs(30));
    let before = run.peak_rss_kib(Duration::from_millis(500));
    let logged_before = run.log_len();
    server.pause();
    let paused_at = run.started.elapsed();
    // The outage lasts until two checkpoints in a row have failed on it, however long that
    // takes on this machine; meanwhile the memory is sampled.
    let mut during = before;
    let mut first_failure_at = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let failures = run.log_count_since(logged_before, "failures_in_a_row");
        if failures >= 1 && first_failure_at.is_none() {
            first_failure_at = Some(run.started.elapsed());
        }
        if failures >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no two checkpoint failures within a minute of stopping the store:\n{}",
            run.log_text()
        );
        during = during.max(run.rss_kib());
        std::thread::sleep(Duration::from_millis(20));
    }
    let first_failure_at = first_failure_at.expect("a first failure");
    let resumed_at = run.started.elapsed();
    server.resume();
    let after = run.peak_rss_kib(Duration::from_millis(500));
    println!(
        "outage of {:?}: resident memory {before} KiB before, peak {during} KiB while the \
         store was stopped (+{} KiB), {after} KiB after",
        resumed_at - paused_at,
        during.saturating_sub(before)
    );
    let (status, lines, log) = run.wait();
    assert!(status.success(), "{status}:\n{log}");

    // Processing went on: records flowed out during the outage, between the first failed
    // checkpoint and the second (the pause of 200 ms and a timeout of a second: 7,000
    // records at the pace).
    let flowing = lines
        .iter()
        .filter(|(at, _)| *at > first_failure_at && *at < resumed_at)
        .count();
    assert!(
        flowing > 1_000,
        "only {flowing} records came out while the store was stopped"
    );
    // Every record once, each key's counts 1..n in order.
    assert_eq!(lines.len() as u64, RECORDS, "every record once");
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for (_, line) in &lines {
        let (key, count) = line.rsplit_once('\t').expect("key\tcount");
        let seen = counts.entry(key).or_default();
        *seen += 1;
        assert_eq!(count.parse::<u64>().ok(), Some(*seen), "{line}");
    }

    // Checkpoints failed, saying why, and were retried after a pause that doubles.
    assert!(
        log.contains("timed out after 1000 ms") || log.contains("did not take the upload"),
        "no clear failure:\n{log}"
    );
    // Read per line: a checkpoint that timed out before the outage (a loaded machine) starts
    // a run of failures of its own.
    let in_a_row = logged_numbers(&log, "failures_in_a_row", "failures_in_a_row");
    let pauses = logged_numbers(&log, "failures_in_a_row", "next_in_ms");
    assert_eq!(in_a_row.len(), pauses.len(), "{log}");
    assert!(
        in_a_row.iter().any(|&n| n >= 2),
        "no two failures in a row:\n{log}"
    );
    for (&n, &pause) in in_a_row.iter().zip(&pauses) {
        if n <= 5 {
            assert_eq!(pause, 200 << (n - 1), "failure {n} in a row:\n{log}");
        }
    }
    // What could not be uploaded rode in a later increment.
    assert!(
        log.contains("carrying increments that were not stored"),
        "{log}"
    );
    // And checkpoints completed again once the store was back.
    let failed = logged_numbers(&log, "failures_in_a_row", "checkpoint");
    let completed = logged_numbers(&log, "checkpoint complete", "checkpoint");
    assert!(
        completed
            .iter()
            .any(|c| c > failed.iter().max().expect("failed")),
        "no checkpoint completed after the failures:\n{log}"
    );

    // The final checkpoint, whose chains hold the carried increments, holds the counts the
    // output ended with, and is whole.
    let out = weir_with_env(
        &[
            "state",
            "scan",
            "--operator",
            "count",
            "--store",
            &store,
            "--job",
            "outage",
            "--limit",
            "0",
            "--json",
        ],
        &server.env(),
    );
    assert!(out.status.success(), "{}", support::stderr(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let state: HashMap<String, u64> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            let key = r["key"].as_str().expect("key").to_owned();
            (key, r["value"].as_u64().expect("a count"))
        })
        .collect();
    let output: HashMap<String, u64> = counts.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect();
    assert_eq!(
        state, output,
        "the checkpoint's state is the output's counts"
    );
    let out = weir_with_env(
        &[
            "checkpoints",
            "verify",
            "all",
            "--store",
            &store,
            "--job",
            "outage",
        ],
        &server.env(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let (objects, prefix) = open_store_with(&store, server.settings()).expect("open the store");
    let checkpoints = CheckpointStore::new(objects, &prefix, "outage");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(assert_store_holds_exactly_the_retained(&checkpoints));
}

#[test]
fn past_tolerable_failures_in_a_row_the_job_fails_saying_so() {
    let server = StoreServer::start(Cloud::S3);
    let dir = tempfile::tempdir().expect("tempdir");
    let job = job(
        dir.path(),
        &server.url("jobs"),
        6_000,
        "tolerable_failures = 2",
    );
    let run = Running::start(&job, &server);
    run.wait_for_log("checkpoint complete", Duration::from_secs(30));
    server.pause();
    let (status, _, log) = run.wait();
    server.resume();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("3 checkpoints failed in a row (tolerable_failures = 2)"),
        "{log}"
    );
    // The store is still stopped while the run ends: the run does not wait out its client's
    // retries (minutes) to release the job's lease, which expires by itself.
    assert!(log.contains("did not answer the lease's release"), "{log}");
}
