//! Kafka in and out: a word count from a topic to a topic, exactly once across SIGKILLs, and
//! shared by several processes on one consumer group. The broker is `weir-test-broker`.

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::browser::Browser;
use support::crash::{Rng, running_counts, seed};
use support::host::{Host, TOKEN};
use support::kafka::{Broker, produce, sorted_values};
use support::{assert_clean_failure, cache_dir, component, stderr, toml_path, weir, write_job};
use weir_host::partition::{KeyGroups, hash_key};

/// Words keyed by themselves, so each word's records share a partition.
fn words(count: usize, distinct: usize, rng: &mut Rng) -> Vec<String> {
    (0..count)
        .map(|_| format!("w{}", rng.below(distinct as u64)))
        .collect()
}

fn produce_words(broker: &Broker, topic: &str, words: &[String]) {
    let records: Vec<(Option<&str>, &str)> = words
        .iter()
        .map(|w| (Some(w.as_str()), w.as_str()))
        .collect();
    produce(&broker.bootstrap, topic, &records);
}

/// A word count from `words` to `counts`, checkpointed in `dir/store`.
fn count_job(dir: &Path, broker: &Broker, stop_at_end: bool, extra_source: &str) -> String {
    let text = count_job_text(dir, &broker.bootstrap, stop_at_end, extra_source);
    write_job(dir, &text).to_str().expect("utf-8").to_owned()
}

fn count_job_text(dir: &Path, brokers: &str, stop_at_end: bool, extra_source: &str) -> String {
    format!(
        r#"
[job]
name = "kafka-count"

[source]
kind = "kafka"
brokers = "{brokers}"
topic = "words"
group_id = "counters"
stop_at_end = {stop_at_end}
{extra_source}

[source.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"

{count}
{tail}"#,
        count = count_operator(),
        tail = sink_and_checkpoints(brokers, dir),
    )
}

/// The job file `text` with a counter that fails as it opens (an unknown mode of the test
/// guest) instead of the tests' counter.
fn with_failing_counter(text: &str) -> String {
    let counter = toml_path(&component("weir-example-counter"));
    assert!(text.contains(&counter), "{text}");
    text.replace(
        &counter,
        &format!(
            "{}\nconfig = {{ mode = \"no-such-mode\" }}",
            toml_path(&component("weir-test-faulty"))
        ),
    )
}

/// The tests' counter: the running count of each key, in 2 subtasks.
fn count_operator() -> String {
    format!(
        "[[operators]]\nname = \"count\"\ncomponent = {}\nparallelism = 2\nkey_by = \"key\"\n",
        toml_path(&component("weir-example-counter"))
    )
}

/// The `[sink]` (the topic `counts`) and `[checkpoints]` (in `dir/store`) of the tests' jobs.
fn sink_and_checkpoints(brokers: &str, dir: &Path) -> String {
    format!(
        "[sink]\nkind = \"kafka\"\nbrokers = \"{brokers}\"\ntopic = \"counts\"\n\n\
         [checkpoints]\nstore = \"{}\"\ninterval_ms = 200\n",
        url::Url::from_directory_path(dir.join("store")).expect("absolute")
    )
}

/// A `weir run` process whose stderr is read as it comes: a pipe nobody reads blocks the
/// process once it is full. Killed when dropped; a failing test prints its log.
struct Member {
    child: Child,
    log: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Member {
    fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    /// Waits for the process to end: its status and its whole log.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().expect("wait");
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the log reader");
        }
        (status, self.log())
    }

    /// SIGKILL.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("wait");
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- weir run {} ---\n{}",
                self.child.id(),
                self.log.lock().map(|l| l.clone()).unwrap_or_default()
            );
        }
    }
}

fn weir_run(job: &str) -> Member {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", job, "-q"])
        .env("WEIR_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir starts");
    let log = Arc::new(Mutex::new(String::new()));
    let pipe = child.stderr.take().expect("piped stderr");
    let into = log.clone();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut log = into.lock().expect("log");
            log.push_str(&line);
            log.push('\n');
        }
    });
    Member {
        child,
        log,
        reader: Some(reader),
    }
}

#[test]
fn a_word_count_from_kafka_to_kafka_is_exactly_once() {
    let seed = seed();
    let mut rng = Rng(seed);
    let broker = Broker::start(&[("words", 3), ("counts", 3)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let input = words(20_000, 300, &mut rng);
    produce_words(&broker, "words", &input);
    let job = count_job(dir.path(), &broker, true, "");
    let (status, log) = weir_run(&job).finish();
    assert!(status.success(), "weir failed: {log}");
    let expected = running_counts(input.iter().map(String::as_str));
    let got = sorted_values(&broker.bootstrap, "counts");
    assert_eq!(got.len(), expected.len(), "seed {seed}");
    assert!(got == expected, "seed {seed}");
    // Lag tools see the whole input consumed.
    let offsets = support::kafka::committed_and_ends(&broker.bootstrap, "counters", "words");
    assert!(
        offsets.iter().all(|(_, committed, end)| committed == end),
        "committed offsets lag: {offsets:?} (partition, committed, end)"
    );
    // Each partition's checkpoints are listed as those of a job of its own.
    let out = weir(&[
        "checkpoints",
        "list",
        &dir.path().join("store").display().to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    for partition in 0..3 {
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with(&format!("kafka-count/partitions/{partition} "))),
            "{listed}"
        );
    }
}

/// `got` (sorted) holds nothing that `expected` (sorted) does not, counting repeats.
fn beyond(got: &[String], expected: &[String]) -> Vec<String> {
    let mut extra = Vec::new();
    let mut want = expected.iter().peekable();
    for line in got {
        while want.next_if(|w| *w < line).is_some() {}
        if want.next_if(|w| *w == line).is_none() {
            extra.push(line.clone());
        }
    }
    extra
}

/// Runs a word count from `words` to `counts` in one process (every partition, so a restart
/// need not wait for the group to forget the killed one), with `sink` settings, producing
/// input while runs are SIGKILLed at random instants; after each kill, `check` sees the
/// output (sorted) and the running counts of the input so far. Returns the whole input.
fn count_through_kills(
    sink: &str,
    check: impl Fn(&[String], &[String], usize),
) -> (Broker, Vec<String>) {
    const KILLS: usize = 8;
    let seed = seed();
    let mut rng = Rng(seed);
    let broker = Broker::start(&[("words", 4), ("counts", 4)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let text = count_job_text(dir.path(), &broker.bootstrap, false, "assignment = \"all\"")
        .replace("topic = \"counts\"", &format!("topic = \"counts\"\n{sink}"));
    let job = write_job(dir.path(), &text)
        .to_str()
        .expect("utf-8")
        .to_owned();
    let mut input = Vec::new();
    let mut child = weir_run(&job);
    for kill in 0..KILLS {
        let chunk = words(15_000, 2_000, &mut rng);
        produce_words(&broker, "words", &chunk);
        input.extend(chunk);
        std::thread::sleep(Duration::from_millis(200 + rng.below(1_200)));
        if child.child.try_wait().expect("poll").is_some() {
            let (status, log) = child.finish();
            panic!("a run ended by itself ({status}): {log}");
        }
        child.kill();
        let expected = running_counts(input.iter().map(String::as_str));
        check(&sorted_values(&broker.bootstrap, "counts"), &expected, kill);
        child = weir_run(&job);
    }
    // The last run goes on until the output is complete, then leaves.
    let expected = running_counts(input.iter().map(String::as_str));
    let started = Instant::now();
    loop {
        let mut got = sorted_values(&broker.bootstrap, "counts");
        got.dedup();
        if got == expected {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "after {KILLS} kills (seed {seed}): {} of {} distinct records after a minute",
            got.len(),
            expected.len()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    terminate(child);
    eprintln!("seed {seed}");
    (broker, input)
}

/// What is visible after each kill is a part of the expected output: never a duplicate,
/// never a record that should not be there.
fn nothing_beyond(got: &[String], expected: &[String], kill: usize) {
    let extra = beyond(got, expected);
    assert!(
        extra.is_empty(),
        "after kill {kill}, the output holds records it should not: {:?}",
        &extra[..extra.len().min(5)]
    );
}

#[test]
fn a_word_count_killed_at_random_instants_ends_exactly_once() {
    let (broker, input) = count_through_kills("guarantee = \"exactly-once\"", nothing_beyond);
    let expected = running_counts(input.iter().map(String::as_str));
    assert_eq!(sorted_values(&broker.bootstrap, "counts"), expected);
}

/// The same with broker transactions. The test broker neither hides aborted transactions
/// from `read_committed` readers nor fences a producer when another starts with its
/// `transactional.id` (it gives each a new producer id), so this checks the transactional
/// path through kills (each restart initialises the transactions and publishes what the
/// last run staged), not the hiding or the fencing.
#[test]
fn with_broker_transactions_a_word_count_killed_at_random_instants_ends_exactly_once() {
    let (broker, input) = count_through_kills("transactions = true", nothing_beyond);
    let expected = running_counts(input.iter().map(String::as_str));
    assert_eq!(sorted_values(&broker.bootstrap, "counts"), expected);
}

#[test]
fn at_least_once_output_may_repeat_but_loses_nothing() {
    let (broker, input) =
        count_through_kills("guarantee = \"at-least-once\"", |got, expected, kill| {
            let mut distinct = got.to_vec();
            distinct.dedup();
            let extra = beyond(&distinct, expected);
            assert!(
                extra.is_empty(),
                "after kill {kill}, the output holds records no input made: {:?}",
                &extra[..extra.len().min(5)]
            );
        });
    let expected = running_counts(input.iter().map(String::as_str));
    let mut got = sorted_values(&broker.bootstrap, "counts");
    got.dedup();
    assert_eq!(got, expected);
}

/// Page views stamped by the producer, counted in event-time windows of the Kafka timestamps.
#[test]
fn kafka_timestamps_are_event_time_and_windows_fire_on_watermarks() {
    let broker = Broker::start(&[("clicks", 3), ("counts", 3)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let pages = ["/", "/docs", "/blog", "/about", "/pricing"];
    let start = 1_764_633_600_000_i64;
    // In time order: a click every 700 ms for 20 minutes, pages in turn.
    let clicks: Vec<(String, String, i64)> = (0..1_700)
        .map(|i| {
            let page = pages[(i * 7) % pages.len()].to_owned();
            let ts = start + i as i64 * 700;
            let value = format!("{{\"page\":\"{page}\"}}");
            (page, value, ts)
        })
        .collect();
    let records: Vec<(Option<&str>, &str, Option<i64>)> = clicks
        .iter()
        .map(|(page, value, ts)| (Some(page.as_str()), value.as_str(), Some(*ts)))
        .collect();
    support::kafka::produce_timed(&broker.bootstrap, "clicks", &records);
    let text = format!(
        r#"
[job]
name = "kafka-windows"

[source]
kind = "kafka"
brokers = "{brokers}"
topic = "clicks"
group_id = "windows"
assignment = "all"
stop_at_end = true
watermark = {{ max_out_of_order_ms = 1000 }}

[[operators]]
name = "pages"
component = {pages}
parallelism = 2
key_by = "key"
config = {{ size_ms = 60000, allowed_lateness_ms = 0 }}

{tail}"#,
        brokers = broker.bootstrap,
        pages = toml_path(&component("weir-example-page-counts")),
        tail = sink_and_checkpoints(&broker.bootstrap, dir.path()),
    );
    let job = write_job(dir.path(), &text);
    let out = weir(&["run", job.to_str().expect("utf-8"), "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Each window fires once, with every click of its minute.
    let mut expected: Vec<(String, i64, u64)> = Vec::new();
    for (page, _, ts) in &clicks {
        let window = ts - ts.rem_euclid(60_000);
        match expected
            .iter_mut()
            .find(|(p, w, _)| p == page && *w == window)
        {
            Some(entry) => entry.2 += 1,
            None => expected.push((page.clone(), window, 1)),
        }
    }
    expected.sort();
    let mut got: Vec<(String, i64, u64)> = sorted_values(&broker.bootstrap, "counts")
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
            (
                v["page"].as_str().expect("page").to_owned(),
                v["start"].as_i64().expect("start"),
                v["clicks"].as_u64().expect("clicks"),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got, expected);
}

/// Waits until `topic` holds exactly `expected` (sorted), checking on the way that it never
/// holds anything beyond it.
fn await_output(broker: &Broker, expected: &[String], within: Duration, what: &str) {
    let started = Instant::now();
    loop {
        let got = sorted_values(&broker.bootstrap, "counts");
        let extra = beyond(&got, expected);
        assert!(
            extra.is_empty(),
            "{what}: the output holds records it should not: {:?}",
            &extra[..extra.len().min(5)]
        );
        if got.len() == expected.len() {
            return;
        }
        assert!(
            started.elapsed() < within,
            "{what}: {} of {} records after {within:?}",
            got.len(),
            expected.len()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Produces `count` more words (of `distinct`) into `words`, adds them to `input`, and
/// waits (90 s at most) until `counts` holds exactly the running counts of the whole input;
/// returns those.
fn more_words_then_await(
    broker: &Broker,
    rng: &mut Rng,
    input: &mut Vec<String>,
    (count, distinct): (usize, usize),
    what: &str,
) -> Vec<String> {
    let more = words(count, distinct, rng);
    produce_words(broker, "words", &more);
    input.extend(more);
    let expected = running_counts(input.iter().map(String::as_str));
    await_output(broker, &expected, Duration::from_secs(90), what);
    expected
}

/// Whether a member's log says it owns at least one partition now.
fn owns_some(log: &str) -> bool {
    log.lines()
        .rfind(|l| l.contains("owns partitions ["))
        .is_some_and(|l| !l.contains("owns partitions []"))
}

/// Stops a member cleanly (SIGTERM: it leaves the group) and returns its log.
fn terminate(member: Member) -> String {
    let status = Command::new("kill")
        .args(["-TERM", &member.child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let (status, log) = member.finish();
    assert!(status.success(), "a member failed: {log}");
    log
}

/// A word count for several members of a group: `words` and `counts` of `partitions`
/// partitions, and `count` words (of `distinct`) already in `words`.
struct GroupRun {
    seed: u64,
    rng: Rng,
    broker: Broker,
    dir: tempfile::TempDir,
    job: String,
    input: Vec<String>,
}

impl GroupRun {
    fn start(partitions: i32, count: usize, distinct: usize) -> Self {
        let seed = seed();
        let mut rng = Rng(seed);
        let broker = Broker::start(&[("words", partitions), ("counts", partitions)]);
        let dir = tempfile::tempdir().expect("tempdir");
        // The test broker gives members the session timeout less 1 s to rejoin a rebalance
        // (Kafka gives them `max.poll.interval.ms`, 5 minutes by default): 10 s lets a loaded
        // machine stop pipelines in time.
        let job = count_job(dir.path(), &broker, false, "").replace("\"6000\"", "\"10000\"");
        let input = words(count, distinct, &mut rng);
        produce_words(&broker, "words", &input);
        Self {
            seed,
            rng,
            broker,
            dir,
            job,
            input,
        }
    }
}

#[test]
fn members_of_a_group_share_partitions_take_over_from_a_killed_one_and_hand_over_to_a_new_one() {
    let GroupRun {
        seed,
        mut rng,
        broker,
        dir: _dir,
        job,
        mut input,
    } = GroupRun::start(6, 60_000, 600);
    let a = weir_run(&job);
    let b = weir_run(&job);
    let mut c = weir_run(&job);
    // Once part of the output is out, one member dies.
    let started = Instant::now();
    while sorted_values(&broker.bootstrap, "counts").len() < 5_000 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no output after a minute (seed {seed})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.kill();
    more_words_then_await(
        &broker,
        &mut rng,
        &mut input,
        (60_000, 600),
        &format!("after a member was killed (seed {seed})"),
    );
    // A fourth member joins: partitions move to it, and more input comes.
    let d = weir_run(&job);
    let joined = Instant::now();
    while !owns_some(&d.log()) {
        assert!(
            joined.elapsed() < Duration::from_secs(60),
            "the new member owns no partition after a minute (seed {seed})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let expected = more_words_then_await(
        &broker,
        &mut rng,
        &mut input,
        (60_000, 600),
        &format!("after a member joined (seed {seed})"),
    );
    // Lag tools see the group's progress: each partition's checkpointed offset is committed.
    let started = Instant::now();
    loop {
        let offsets = support::kafka::committed_and_ends(&broker.bootstrap, "counters", "words");
        if offsets.iter().all(|(_, committed, end)| committed == end) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the group's committed offsets lag: {offsets:?} (partition, committed, end)"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for member in [a, b, d] {
        terminate(member);
    }
    // Nothing more came out while the members left.
    assert_eq!(
        sorted_values(&broker.bootstrap, "counts"),
        expected,
        "seed {seed}"
    );
}

/// Two `weir serve` hosts, each running the job as a member of its group.
struct TwoHosts {
    /// Their data folders.
    data: (tempfile::TempDir, tempfile::TempDir),
    a: Host,
    b: Host,
    id_a: String,
    id_b: String,
}

impl TwoHosts {
    /// Two hosts that run `job`, once they share its 4 partitions and the output holds the
    /// counts of `input`.
    fn sharing(broker: &Broker, job: &str, input: &[String], seed: u64) -> Self {
        let data = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        );
        let (a, b) = (Host::start(data.0.path()), Host::start(data.1.path()));
        let submit = |host: &Host| {
            let out = host.weir(&["submit", job, "--json"], Some(TOKEN));
            assert!(out.status.success(), "submit failed: {}", stderr(&out));
            let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            jobs[0]["id"].as_str().expect("an id").to_owned()
        };
        let (id_a, id_b) = (submit(&a), submit(&b));
        let expected = running_counts(input.iter().map(String::as_str));
        await_output(
            broker,
            &expected,
            Duration::from_secs(90),
            &format!("two hosts (seed {seed})"),
        );
        await_partitions_shared(&[(&a, &id_a), (&b, &id_b)], 4, "two hosts");
        Self {
            data,
            a,
            b,
            id_a,
            id_b,
        }
    }
}

#[test]
fn a_kafka_job_upgraded_host_by_host_keeps_its_counts_exactly_once() {
    let GroupRun {
        seed,
        mut rng,
        broker,
        dir,
        job,
        mut input,
    } = GroupRun::start(4, 20_000, 200);
    let TwoHosts {
        data: _data,
        a,
        b,
        id_a,
        id_b,
    } = TwoHosts::sharing(&broker, &job, &input, seed);

    // The new version renames the counter and keeps its state under its uid. One host at a
    // time: while one restarts, the other takes its partitions, and gives them back.
    let text = std::fs::read_to_string(&job).expect("job file");
    let renamed = text.replace("name = \"count\"", "name = \"tally\"\nuid = \"count\"");
    assert_ne!(renamed, text);
    let v2 = dir.path().join("v2.toml");
    std::fs::write(&v2, renamed).expect("job file");
    let v2 = v2.to_str().expect("utf-8");
    // A check restores each partition's latest checkpoint into the new version, offline,
    // whichever host owns the partition, and changes nothing.
    let checked = a.weir(&["upgrade", &id_a, v2, "--check"], Some(TOKEN));
    assert!(checked.status.success(), "checking: {}", stderr(&checked));
    let said = String::from_utf8_lossy(&checked.stdout);
    for p in 0..4 {
        assert!(
            said.lines()
                .any(|l| l.contains(&format!("partition {p} (checkpoint "))
                    && l.contains("`count`: every subtask opened with its restored state (")),
            "partition {p}: {said}"
        );
    }
    assert_eq!(a.job(&id_a)["version"], 1);
    for (host, id, name) in [(&a, &id_a, "a"), (&b, &id_b, "b")] {
        let out = host.weir(&["upgrade", id, v2], Some(TOKEN));
        assert!(out.status.success(), "upgrading {name}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("from version 1 to 2"),
            "{}",
            stderr(&out)
        );
        more_words_then_await(
            &broker,
            &mut rng,
            &mut input,
            (5_000, 200),
            &format!("after upgrading host {name} (seed {seed})"),
        );
    }
    for (host, id) in [(&a, &id_a), (&b, &id_b)] {
        let info = host.job(id);
        assert_eq!(info["version"], 2, "{info}");
        let upgrades = info["upgrades"].as_array().expect("upgrades");
        assert_eq!(upgrades.last().expect("one")["status"], "done", "{info}");
        assert_eq!(info["operators"][0]["name"], "tally", "{info}");
    }
    await_partitions_shared(&[(&a, &id_a), (&b, &id_b)], 4, "two upgraded hosts");
}

#[test]
fn a_kafka_upgrade_whose_new_version_fails_rolls_back_and_keeps_its_counts_exactly_once() {
    let GroupRun {
        seed,
        mut rng,
        broker,
        dir,
        job,
        mut input,
    } = GroupRun::start(4, 20_000, 200);
    let TwoHosts {
        data: _data,
        a,
        b,
        id_a,
        id_b,
    } = TwoHosts::sharing(&broker, &job, &input, seed);

    // The new version's counter fails as it opens.
    let text = std::fs::read_to_string(&job).expect("job file");
    let v2 = dir.path().join("v2.toml");
    std::fs::write(&v2, with_failing_counter(&text)).expect("job file");
    // A check finds it, opening each partition's subtasks offline, and changes nothing.
    let checked = a.weir(
        &["upgrade", &id_a, v2.to_str().expect("utf-8"), "--check"],
        Some(TOKEN),
    );
    let log = stderr(&checked);
    assert_eq!(checked.status.code(), Some(2), "{log}");
    for part in [
        "partition 0: operator `count` subtask 0 fails to open",
        "no-such-mode",
    ] {
        assert!(log.contains(part), "{log}");
    }
    assert_eq!(a.job(&id_a)["upgrades"], serde_json::json!([]));
    let out = a.weir(
        &["upgrade", &id_a, v2.to_str().expect("utf-8")],
        Some(TOKEN),
    );
    let log = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("rolled back"), "{log}");
    assert!(log.contains("no-such-mode"), "{log}");
    let info = a.job(&id_a);
    assert_eq!(info["version"], 1, "{info}");
    let upgrades = info["upgrades"].as_array().expect("upgrades");
    assert_eq!(
        upgrades.last().expect("one")["status"],
        "rolled-back",
        "{info}"
    );
    more_words_then_await(
        &broker,
        &mut rng,
        &mut input,
        (5_000, 200),
        &format!("after the rollback (seed {seed})"),
    );
    await_partitions_shared(
        &[(&a, &id_a), (&b, &id_b)],
        4,
        "a rolled-back host and another",
    );
}

#[test]
fn an_unreachable_broker_fails_at_start_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Nothing listens on port 1.
    let broker_text = count_job_text(dir.path(), "127.0.0.1:1", true, "connect_timeout_ms = 1500");
    let job = write_job(dir.path(), &broker_text);
    let started = Instant::now();
    let out = weir(&["run", job.to_str().expect("utf-8"), "-q"]);
    assert_clean_failure(&out, &["127.0.0.1:1", "no broker answered within 1.5s"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the wait is not bounded: {:?}",
        started.elapsed()
    );
}

/// An operator that fails on a partition whose input is idle: the partition's pipeline ends
/// (its source used to read on alone, forever, waiting for records to send) and the run fails
/// naming the operator's error, at once (a failed `open` is not restarted: it would fail the
/// same way).
#[test]
fn an_operator_failing_on_an_idle_partition_fails_the_run_instead_of_hanging_it() {
    let broker = Broker::start(&[("words", 2), ("counts", 2)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let text = count_job_text(dir.path(), &broker.bootstrap, false, "");
    let job = write_job(dir.path(), &with_failing_counter(&text));
    let out = weir(&["run", job.to_str().expect("utf-8"), "-q"]);
    let log = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("unknown mode `no-such-mode`"), "{log}");
    assert!(log.contains("failed to open"), "{log}");
    assert!(!log.contains("restart"), "{log}");
}

#[test]
fn a_missing_topic_is_a_clear_error() {
    let broker = Broker::start(&[("counts", 1)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let job = count_job(dir.path(), &broker, true, "");
    let out = weir(&["run", &job, "-q"]);
    assert_clean_failure(&out, &["topic `words` does not exist", &broker.bootstrap]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// JSON events keyed by `/user`, one of them not JSON.
fn json_events(broker: &Broker) {
    let lines = [
        r#"{"user": "ann", "n": 1}"#,
        r#"{"user": "bob", "n": 2}"#,
        r#"{"user": "ann", "n"#,
        r#"{"user": "ann", "n": 3}"#,
    ];
    let records: Vec<(Option<&str>, &str)> = lines.iter().map(|l| (None, *l)).collect();
    produce(&broker.bootstrap, "words", &records);
}

#[test]
fn a_message_that_is_not_json_fails_the_job_or_is_skipped_or_dead_lettered_and_counted() {
    let broker = Broker::start(&[("words", 1), ("counts", 1), ("bad", 2)]);
    json_events(&broker);
    let dir = tempfile::tempdir().expect("tempdir");
    let json = "assignment = \"all\"\nformat = \"json\"\nkey_pointer = \"/user\"";
    let job = count_job(dir.path(), &broker, true, json);
    let out = weir(&["run", &job, "-q"]);
    assert_clean_failure(
        &out,
        &[
            "not valid JSON",
            "offset 2",
            "kafka topic words partition 0",
        ],
    );

    // A run with `on_bad_record = policy` that succeeds: its folder and its stderr.
    let run_with = |policy: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        let job = count_job(
            dir.path(),
            &broker,
            true,
            &format!("{json}\non_bad_record = {policy}"),
        );
        let out = weir(&["run", &job]);
        assert!(out.status.success(), "{}", stderr(&out));
        (dir, stderr(&out))
    };
    let (_dir, said) = run_with("\"skip\"");
    assert!(
        said.contains("bad records at the source: 1 skipped"),
        "the skip is not counted: {said}"
    );
    // The counter keys by the JSON's user: ann twice, bob once.
    let mut values = sorted_values(&broker.bootstrap, "counts");
    values.dedup();
    assert_eq!(values, ["ann\t1", "ann\t2", "bob\t1"]);

    // Dead letters go to a file per partition, each written by that partition's pipeline.
    let (dir, _) = run_with("{ dead_letter = \"bad.jsonl\" }");
    let file = dir.path().join("bad.partition-0.jsonl");
    let text = std::fs::read_to_string(&file).expect("the partition's dead-letter file");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("kafka topic words partition 0 offset 2") && text.contains("not valid JSON"),
        "{text}"
    );

    // Or to a topic, published as the checkpoint completes, once.
    let (_dir, said) = run_with("{ dead_letter_topic = \"bad\" }");
    assert!(
        said.contains("1 dead-lettered"),
        "the dead letter is not counted: {said}"
    );
    let letters = support::kafka::consume_all(&broker.bootstrap, "bad");
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter: serde_json::Value = serde_json::from_str(&letters[0].value).expect("JSON");
    assert_eq!(letter["origin"], "kafka topic words partition 0 offset 2");
    assert_eq!(letter["value"], r#"{"user": "ann", "n"#);
    assert!(
        letter["error"]
            .as_str()
            .is_some_and(|e| e.contains("not valid JSON")),
        "{letter}"
    );
    assert!(
        letters[0].id.is_some(),
        "published with its id: {letters:?}"
    );
}

#[test]
fn a_restored_sink_skips_the_staged_records_the_topic_already_holds() {
    use weir_host::checkpoint::CheckpointStore;
    use weir_host::connectors::kafka::KafkaSink;
    use weir_host::connectors::kafka::settings::KafkaSinkSpec;
    use weir_host::connectors::{Sink, SinkRestore};
    use weir_host::ids::CheckpointId;
    use weir_host::record::{RecordBatch, RecordRef};

    let broker = Broker::start(&[("counts", 3)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let url = url::Url::from_directory_path(dir.path()).expect("absolute");
    let store = CheckpointStore::open(url.as_str(), "job")
        .expect("store")
        .partition(0);
    let spec: KafkaSinkSpec = toml::from_str(&format!(
        "brokers = \"{}\"\ntopic = \"counts\"",
        broker.bootstrap
    ))
    .expect("spec");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // The file store names objects by their absolute path.
    let local = |path: &object_store::path::Path| Path::new("/").join(path.to_string());
    let sink = |store: &CheckpointStore| {
        let _inside = runtime.enter();
        KafkaSink::new(
            &spec,
            "job/0".into(),
            Some(store.clone()),
            KafkaSink::JOB_SINK,
        )
        .expect("sink")
    };
    let mut first = sink(&store);
    first.recover(None).expect("fresh");
    let mut batch = RecordBatch::new();
    let values: Vec<String> = (0..500).map(|i| format!("v{i}")).collect();
    for (i, value) in values.iter().enumerate() {
        let key = format!("k{}", i % 7);
        batch.push(RecordRef::keyed(key.as_bytes(), value.as_bytes()));
    }
    first.write(&batch).expect("write");
    let checkpoint = CheckpointId(1);
    first.stage(checkpoint).expect("stage");
    let staged = store.staging_path(KafkaSink::JOB_SINK, checkpoint);
    let object = std::fs::read(local(&staged)).expect("the staged object");
    assert!(
        sorted_values(&broker.bootstrap, "counts").is_empty(),
        "staged output is not visible"
    );
    // Published, then a crash before the staged object was deleted.
    first.commit(checkpoint).expect("publish");
    std::fs::write(local(&staged), &object).expect("put it back");
    let mut restored = sink(&store);
    restored
        .recover(Some(SinkRestore {
            checkpoint,
            position: None,
        }))
        .expect("recover");
    // The old run, still going (its revocation came late), may no longer stage or publish.
    first.write(&batch).expect("write");
    let refused = first.stage(CheckpointId(2)).expect_err("taken over");
    assert!(
        matches!(
            refused,
            weir_host::connectors::ConnectorError::TakenOver { .. }
        ),
        "{refused}"
    );
    drop(first);
    let mut expected = values.clone();
    expected.sort();
    assert_eq!(sorted_values(&broker.bootstrap, "counts"), expected);
    let ids: std::collections::HashSet<String> =
        support::kafka::consume_all(&broker.bootstrap, "counts")
            .into_iter()
            .map(|c| c.id.expect("every record has an id"))
            .collect();
    assert_eq!(ids.len(), values.len(), "ids are unique");
    assert!(
        !local(&staged).exists(),
        "the staged object is deleted once published"
    );
    // A staged object of a checkpoint after the restored one never completed: dropped.
    let later = local(&store.staging_path(KafkaSink::JOB_SINK, CheckpointId(2)));
    std::fs::create_dir_all(later.parent().expect("a folder")).expect("folder");
    std::fs::write(&later, &object).expect("a later staged object");
    let mut again = sink(&store);
    again
        .recover(Some(SinkRestore {
            checkpoint,
            position: None,
        }))
        .expect("recover");
    assert_eq!(sorted_values(&broker.bootstrap, "counts"), expected);
    assert!(!later.exists(), "the later staged object is deleted");
}

/// The partitions a `weir serve` host owns of job `id` (from `weir job --json`), with the
/// records each one read and its lag.
fn served_partitions(host: &Host, id: &str) -> Vec<(i64, u64, i64)> {
    let info = host.job(id);
    info["partitions"]
        .as_array()
        .unwrap_or_else(|| panic!("a Kafka job lists its partitions: {info}"))
        .iter()
        .map(|p| {
            (
                p["partition"].as_i64().expect("partition"),
                p["source_records"].as_u64().expect("records"),
                p["lag"].as_i64().expect("lag"),
            )
        })
        .collect()
}

/// Waits until `hosts` own the partitions `0..count` between them, each one once.
fn await_partitions_shared(hosts: &[(&Host, &str)], count: i64, what: &str) {
    let started = Instant::now();
    loop {
        let mut owned: Vec<i64> = hosts
            .iter()
            .flat_map(|(host, id)| served_partitions(host, id))
            .map(|(p, _, _)| p)
            .collect();
        owned.sort_unstable();
        if owned == (0..count).collect::<Vec<_>>() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: the hosts own partitions {owned:?} after a minute"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn jobs_on_serve_hosts_share_partitions_show_them_with_their_lag_and_take_over() {
    let GroupRun {
        seed,
        mut rng,
        broker,
        dir: _dir,
        job,
        mut input,
    } = GroupRun::start(4, 40_000, 400);
    let TwoHosts {
        data: _data,
        a,
        mut b,
        id_a,
        id_b,
    } = TwoHosts::sharing(&broker, &job, &input, seed);
    // Each host shows the partitions it owns: together they read the whole input, and
    // nothing is left to read.
    let (on_a, on_b) = (served_partitions(&a, &id_a), served_partitions(&b, &id_b));
    assert!(!on_a.is_empty() && !on_b.is_empty(), "{on_a:?} {on_b:?}");
    let read: u64 = on_a
        .iter()
        .chain(&on_b)
        .map(|(_, records, _)| records)
        .sum();
    assert_eq!(read, input.len() as u64, "{on_a:?} {on_b:?}");
    assert!(
        on_a.iter().chain(&on_b).all(|(_, _, lag)| *lag == 0),
        "{on_a:?} {on_b:?}"
    );
    let table = stdout_of(&a.weir(&["jobs"], Some(TOKEN)));
    let listed: Vec<String> = on_a.iter().map(|(p, _, _)| p.to_string()).collect();
    assert!(
        table.contains("PARTITIONS") && table.contains(&listed.join(",")),
        "{table}"
    );
    let (status, metrics) = a.get("/metrics", Some(&format!("Bearer {TOKEN}")));
    assert_eq!(status, 200);
    for (partition, records, _) in &on_a {
        let labels = format!("job_id=\"{id_a}\",job=\"kafka-count\",partition=\"{partition}\"");
        for line in [
            format!("weir_kafka_partition_lag{{{labels}}} 0"),
            format!("weir_source_records_total{{{labels}}} {records}"),
        ] {
            assert!(
                metrics.lines().any(|l| l == line),
                "no {line:?} in\n{metrics}"
            );
        }
    }
    // Its checkpoints are per partition, in the shared store: the host says where.
    let (status, body) = a.get(
        &format!("/v1/jobs/{id_a}/checkpoints"),
        Some(&format!("Bearer {TOKEN}")),
    );
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("kafka-count/partitions/<p>/") && body.contains("weir checkpoints list"),
        "{body}"
    );
    // A checkpoint asked of the job is taken by every partition the host owns.
    let said = stdout_of(&a.weir(&["checkpoint", &id_a], Some(TOKEN)));
    for (partition, _, _) in &on_a {
        assert!(
            said.contains(&format!("partition {partition}: checkpoint ")),
            "{said}"
        );
    }
    // One host dies: the other takes over its partitions and their state.
    b.child.kill().expect("SIGKILL");
    b.child.wait().expect("wait");
    let expected = more_words_then_await(
        &broker,
        &mut rng,
        &mut input,
        (40_000, 400),
        &format!("after a host was killed (seed {seed})"),
    );
    await_partitions_shared(&[(&a, &id_a)], 4, "one host");
    let read: u64 = served_partitions(&a, &id_a)
        .iter()
        .map(|(_, records, _)| records)
        .sum();
    assert_eq!(read, input.len() as u64, "seed {seed}");
    let shown = stdout_of(&a.weir(&["job", &id_a], Some(TOKEN)));
    assert!(
        shown.contains("partitions owned by this host: 0,1,2,3"),
        "{shown}"
    );
    // Cancelled, it leaves the group; nothing more comes out.
    let out = a.weir(&["cancel", &id_a], Some(TOKEN));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(a.wait(&id_a)["status"], "cancelled");
    assert_eq!(
        sorted_values(&broker.bootstrap, "counts"),
        expected,
        "seed {seed}"
    );
}

/// A served job that re-keys shows the partitions it owns of both stages, each under its
/// topic and with its lag, in `weir job` and `/metrics`; the job's totals count its input
/// once and its output once.
#[test]
fn a_served_job_that_re_keys_shows_each_stage_s_partitions_and_lag() {
    let mut rng = Rng(seed());
    let lines = lines_of_words(200, &mut rng);
    let expected = word_counts(&lines);
    let Rekeyed {
        broker,
        job,
        dir: _dir,
    } = Rekeyed::new(&lines);
    // Served, it runs until cancelled.
    edit_job(&job, &[("stop_at_end = true\n", "")]);
    let data = tempfile::tempdir().expect("data");
    let host = Host::start(data.path());
    let out = host.weir(&["submit", &job, "--json"], Some(TOKEN));
    assert!(out.status.success(), "submit failed: {}", stderr(&out));
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let id = jobs[0]["id"].as_str().expect("an id").to_owned();
    await_output(&broker, &expected, Duration::from_secs(90), "served");

    // Every partition of both topics, each read to its end.
    let started = Instant::now();
    let info = loop {
        let info = host.job(&id);
        let partitions = info["partitions"].as_array().cloned().unwrap_or_default();
        let done = partitions.len() == 8
            && partitions.iter().all(|p| p["lag"] == 0)
            && info["sink_records"] == expected.len() as u64;
        if done {
            break info;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the host shows {info}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let partitions = info["partitions"].as_array().expect("partitions");
    for (stage, topic) in [(0, "lines"), (1, REPARTITION_TOPIC)] {
        let numbers: Vec<i64> = partitions
            .iter()
            .filter(|p| p["stage"] == stage && p["topic"] == topic)
            .map(|p| p["partition"].as_i64().expect("a number"))
            .collect();
        assert_eq!(numbers, [0, 1, 2, 3], "stage {stage}: {info}");
    }
    // Each line read once, each count written once, though two stages read and write.
    assert_eq!(info["source_records"], lines.len() as u64, "{info}");
    let shown = stdout_of(&host.weir(&["job", &id], Some(TOKEN)));
    assert!(
        shown.contains("partitions owned by this host: 0,1,2,3; stage 1: 0,1,2,3")
            && shown.contains(REPARTITION_TOPIC),
        "{shown}"
    );
    let (status, metrics) = host.get("/metrics", Some(&format!("Bearer {TOKEN}")));
    assert_eq!(status, 200);
    let stage_1 = format!(
        "weir_kafka_partition_lag{{job_id=\"{id}\",job=\"rekeyed\",stage=\"1\",\
         topic=\"{REPARTITION_TOPIC}\",partition=\"2\"}} 0"
    );
    let stage_0 =
        format!("weir_kafka_partition_lag{{job_id=\"{id}\",job=\"rekeyed\",partition=\"2\"}} 0");
    for line in [stage_0, stage_1] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
    // The console's graph: the topic is a node between the tokenizer and the counter, with
    // what was written into it, read from it and is left to read; the nodes count the
    // pipelines of both stages, each once.
    let (status, graph) = host.get(
        &format!("/v1/jobs/{id}/graph"),
        Some(&format!("Bearer {TOKEN}")),
    );
    assert_eq!(status, 200, "{graph}");
    let graph: serde_json::Value = serde_json::from_str(&graph).expect("JSON");
    let kinds: Vec<&str> = graph["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["kind"].as_str().expect("a kind"))
        .collect();
    assert_eq!(
        kinds,
        ["source", "operator", "topic", "operator", "sink"],
        "{graph}"
    );
    let node = |node: usize, field: &str| graph["nodes"][node][field].clone();
    assert_eq!(node(2, "name"), REPARTITION_TOPIC, "{graph}");
    assert_eq!(
        node(3, "detail"),
        format!("keyed by the record key, through topic {REPARTITION_TOPIC}"),
        "{graph}"
    );
    let words = expected.len() as u64;
    assert_eq!(node(0, "records_out"), lines.len() as u64, "{graph}");
    assert_eq!(node(1, "records_out"), words, "{graph}");
    assert_eq!(
        (
            node(2, "records_in"),
            node(2, "records_out"),
            node(2, "lag")
        ),
        (words.into(), words.into(), 0.into()),
        "{graph}"
    );
    assert_eq!(node(3, "records_in"), words, "{graph}");
    // Each subtask of the counter reads the words of its key groups, of every partition: the
    // words of one partition reach both subtasks of the pipeline that reads it.
    let groups = KeyGroups::default();
    let mut expected_in = std::collections::BTreeMap::new();
    for word in lines.iter().flat_map(|l| l.split(' ')) {
        let hash = hash_key(word.as_bytes());
        let subtask = groups.subtask_of(groups.of(hash), 2).0;
        *expected_in
            .entry((hash.topic_partition(4), subtask))
            .or_insert(0) += 1;
    }
    let shown_in: std::collections::BTreeMap<(u32, u32), u64> = node(3, "subtasks")
        .as_array()
        .expect("subtasks")
        .iter()
        .filter(|s| s["records_in"] != 0)
        .map(|s| {
            let number = |field: &str| s[field].as_u64().expect("a number");
            (
                (number("partition") as u32, number("subtask") as u32),
                number("records_in"),
            )
        })
        .collect();
    assert_eq!(shown_in, expected_in, "{graph}");
    assert!(
        (0..4).any(|p| expected_in.contains_key(&(p, 0)) && expected_in.contains_key(&(p, 1))),
        "{expected_in:?}"
    );
    assert_eq!(node(4, "records_in"), words, "{graph}");
    assert_eq!(node(0, "lag"), 0, "{graph}");
    for n in [0, 2] {
        let partitions: Vec<(i64, i64)> = node(n, "subtasks")
            .as_array()
            .expect("subtasks")
            .iter()
            .map(|s| {
                (
                    s["partition"].as_i64().expect("a partition"),
                    s["lag"].as_i64().expect("a lag"),
                )
            })
            .collect();
        assert_eq!(partitions, [(0, 0), (1, 0), (2, 0), (3, 0)], "{graph}");
    }
    // A checkpoint asked of the job is taken by the partitions of both stages.
    let said = stdout_of(&host.weir(&["checkpoint", &id], Some(TOKEN)));
    for p in 0..4 {
        for stage in ["", "stage 1 "] {
            let line = format!("{stage}partition {p}: checkpoint ");
            assert!(said.lines().any(|l| l.starts_with(&line)), "{said}");
        }
    }
    // And as the console draws it: the topic between the two operators, with its partitions
    // and their lag, and what went through it.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let browser = Browser::start().await;
        browser.goto(&format!("{}/#/jobs/{id}", host.url)).await;
        browser.type_into("#token", TOKEN).await;
        browser.click("#login-button").await;
        let topic = format!(".node[data-kind=\"topic\"][data-node=\"{REPARTITION_TOPIC}\"]");
        browser
            .wait_text(&format!("{topic} .node-stats > .lag"), "a lag of 0", |t| {
                t == "0"
            })
            .await;
        let kinds = browser.attrs("#graph > .node", "data-kind").await;
        assert_eq!(kinds, ["source", "operator", "topic", "operator", "sink"]);
        let through = browser
            .text(&format!("{topic} .node-stats > .records-in"))
            .await;
        assert_eq!(through, words.to_string());
        let cells =
            serde_json::to_string(&format!("{topic} table.subtasks tbody td.lag")).expect("JSON");
        let lags: Vec<String> = serde_json::from_value(
            browser
                .eval(&format!(
                    "return [...document.querySelectorAll({cells})].map(e => e.textContent)"
                ))
                .await,
        )
        .expect("texts");
        assert_eq!(lags, ["0", "0", "0", "0"], "one row per partition");
        browser.screenshot("kafka-repartition-topic").await;
        browser.close().await;
    });

    let out = host.weir(&["cancel", &id], Some(TOKEN));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(host.wait(&id)["status"], "cancelled");
}

fn stdout_of(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A word count that re-keys: lines of `lines` (`partitions` of them, messages without a
/// key) tokenized into words, then counted by word, into `counts`.
fn rekeyed_word_count(dir: &Path, broker: &Broker) -> String {
    let text = format!(
        r#"
[job]
name = "rekeyed"

[source]
kind = "kafka"
brokers = "{brokers}"
topic = "lines"
group_id = "rekeyed"
stop_at_end = true

# The test broker waits the session timeout (less 1 s) for members to rejoin a group,
# even one whose members all left; stage 1 joins with the same settings.
[source.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"

[[operators]]
name = "tokenize"
component = {tokenizer}

{count}
{tail}"#,
        brokers = broker.bootstrap,
        tokenizer = toml_path(&component("weir-example-tokenizer")),
        count = count_operator(),
        tail = sink_and_checkpoints(&broker.bootstrap, dir),
    );
    write_job(dir, &text).to_str().expect("utf-8").to_owned()
}

/// A re-keyed word count on a broker of its own: the topic `lines` (4 partitions) holding
/// the given lines, `counts`, and the repartition topic between; the job file in `dir`.
struct Rekeyed {
    broker: Broker,
    dir: tempfile::TempDir,
    job: String,
}

impl Rekeyed {
    fn new(lines: &[String]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = Broker::start(&[("lines", 4), ("counts", 1), (REPARTITION_TOPIC, 4)]);
        produce_lines(&broker, lines);
        let job = rekeyed_word_count(dir.path(), &broker);
        Self { broker, dir, job }
    }
}

/// Rewrites the job file `job`, replacing each `from` with its `to` in turn.
fn edit_job(job: &str, edits: &[(&str, &str)]) {
    let mut text = std::fs::read_to_string(job).expect("job file");
    for (from, to) in edits {
        assert!(text.contains(from), "no {from:?} in the job file");
        text = text.replace(from, to);
    }
    std::fs::write(job, text).expect("job file");
}

/// The running count of every word of `lines`, in order: what a re-keyed word count writes.
fn word_counts(lines: &[String]) -> Vec<String> {
    running_counts(lines.iter().flat_map(|l| l.split(' ')))
}

/// Lines of words, unkeyed, so that the producer spreads them over the partitions.
fn lines_of_words(count: usize, rng: &mut Rng) -> Vec<String> {
    (0..count).map(|_| words(5, 40, rng).join(" ")).collect()
}

fn produce_lines(broker: &Broker, lines: &[String]) {
    let records: Vec<(Option<&str>, &str)> = lines.iter().map(|l| (None, l.as_str())).collect();
    produce(&broker.bootstrap, "lines", &records);
}

/// The test broker cannot create topics (librdkafka's mock cluster has no CreateTopics), as
/// some production clusters forbid it: the repartition topic is made beforehand there.
const REPARTITION_TOPIC: &str = "weir.rekeyed.count.repartition";

#[test]
fn a_job_that_re_keys_counts_each_word_whole_through_a_repartition_topic() {
    let mut rng = Rng(seed());
    let lines = lines_of_words(300, &mut rng);
    let expected = word_counts(&lines);

    // `weir plan` shows the cut: tokenize, then the topic keyed by word, then count.
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(&[("lines", 4), ("counts", 1), (REPARTITION_TOPIC, 4)]);
    let job = rekeyed_word_count(dir.path(), &broker);
    let plan = weir(&["plan", &job]);
    assert!(plan.status.success(), "{}", stderr(&plan));
    let printed = String::from_utf8_lossy(&plan.stdout);
    assert!(printed.contains("job `rekeyed`: 2 stages"), "{printed}");
    assert!(
        printed.contains("-> tokenize (x1) -> topic `weir.rekeyed.count.repartition`"),
        "{printed}"
    );

    // One process runs both stages: each word's count is over the whole topic, not per
    // partition of the input.
    produce_lines(&broker, &lines);
    let (status, log) = weir_run(&job).finish();
    assert!(status.success(), "weir failed: {log}");
    assert!(
        sorted_values(&broker.bootstrap, "counts") == expected,
        "the counts differ from the whole topic's"
    );
    // The stage after the cut checkpoints in a folder of its own.
    let store = dir.path().join("store");
    assert!(store.join("rekeyed.stage-1").is_dir(), "{log}");

    // Two processes, then three, share both stages' partitions, with the same answer.
    for processes in [2, 3] {
        let Rekeyed {
            broker,
            job,
            dir: _dir,
        } = Rekeyed::new(&lines);
        let members: Vec<Member> = (0..processes).map(|_| weir_run(&job)).collect();
        for member in members {
            let (status, log) = member.finish();
            assert!(status.success(), "weir failed: {log}");
        }
        assert!(
            sorted_values(&broker.bootstrap, "counts") == expected,
            "the counts of {processes} processes differ from the whole topic's"
        );
    }
}

/// Starting a re-keying job over (deleting its folders) leaves the repartition topic with
/// the earlier start's records: the new start counts only its own. Deleting only the job's
/// folder, which would mix the earlier start's later stages into this one, is refused.
#[test]
fn a_re_keying_job_started_over_counts_only_what_this_start_wrote_to_its_topic() {
    let mut rng = Rng(seed());
    let lines = lines_of_words(200, &mut rng);
    let expected = word_counts(&lines);
    let Rekeyed { broker, job, dir } = Rekeyed::new(&lines);
    let (status, log) = weir_run(&job).finish();
    assert!(status.success(), "weir failed: {log}");
    assert!(sorted_values(&broker.bootstrap, "counts") == expected);

    let store = dir.path().join("store");
    std::fs::remove_dir_all(store.join("rekeyed")).expect("delete the job's folder");
    let out = weir(&["run", &job, "-q"]);
    assert_clean_failure(
        &out,
        &[
            "rekeyed.stage-1 holds checkpoints of a stage of job `rekeyed` from an earlier start",
            "delete that folder too",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // The second start reads every line again, and more: its counts start from 1 again,
    // and none of the first start's records in the topic is counted twice.
    std::fs::remove_dir_all(store.join("rekeyed.stage-1")).expect("delete the stage's folder");
    let more = lines_of_words(100, &mut rng);
    produce_lines(&broker, &more);
    let (status, log) = weir_run(&job).finish();
    assert!(status.success(), "weir failed: {log}");
    let mut both = expected;
    both.extend(running_counts(
        lines.iter().chain(&more).flat_map(|l| l.split(' ')),
    ));
    both.sort();
    assert!(
        sorted_values(&broker.bootstrap, "counts") == both,
        "the second start's counts are not those of its input alone"
    );
}

/// Records a later stage has checkpointed past are deleted from its topic with Kafka's
/// DeleteRecords; the test broker has no such request, and the stage says once that the
/// topic is left to its retention, and goes on.
#[test]
fn a_stage_whose_brokers_cannot_delete_what_it_released_says_so_and_goes_on() {
    let mut rng = Rng(seed());
    let lines = lines_of_words(100, &mut rng);
    let expected = word_counts(&lines);
    let Rekeyed {
        broker,
        job,
        dir: _dir,
    } = Rekeyed::new(&lines);
    // It runs on after its input; each completed checkpoint is the only one retained, so
    // each releases the input before it.
    edit_job(
        &job,
        &[
            ("stop_at_end = true\n", ""),
            ("interval_ms = 200", "interval_ms = 200\nretain = 1"),
        ],
    );
    let mut member = weir_run(&job);
    await_output(&broker, &expected, Duration::from_secs(60), "re-keyed");
    let said = "cannot delete records the next stage has checkpointed past (DeleteRecords): \
                the repartition topic is bounded by its retention only";
    let started = Instant::now();
    while !member.log().contains(said) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no warning after a minute:\n{}",
            member.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Once: the brokers cannot, and the stage does not ask again.
    assert_eq!(member.log().matches(said).count(), 1, "{}", member.log());
    assert!(
        member.child.try_wait().expect("status").is_none(),
        "the job goes on"
    );
    member.kill();
    assert!(sorted_values(&broker.bootstrap, "counts") == expected);
}

#[test]
fn a_repartition_topic_the_brokers_will_not_create_is_a_clear_refusal() {
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(&[("lines", 3), ("counts", 1)]);
    produce_lines(&broker, &lines_of_words(20, &mut rng));
    let job = rekeyed_word_count(dir.path(), &broker);
    let out = weir(&["run", &job, "-q"]);
    assert_clean_failure(
        &out,
        &[
            "topic `weir.rekeyed.count.repartition` between the stages of job `rekeyed`",
            "did not create it with 3 partitions",
            "weir plan",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(sorted_values(&broker.bootstrap, "counts").is_empty());

    // One that exists with another partition count would split keys: refused too.
    let broker = Broker::start(&[("lines", 3), ("counts", 1), (REPARTITION_TOPIC, 2)]);
    let job = rekeyed_word_count(dir.path(), &broker);
    let out = weir(&["run", &job, "-q"]);
    assert_clean_failure(
        &out,
        &[
            "topic `weir.rekeyed.count.repartition` between the stages of job `rekeyed` has 2 \
             partitions where the job needs 3",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Windows of page views after a re-key: clicks keyed by user, counted in event-time windows
/// per page. The job's first operator groups by the page, so the clicks cross a repartition
/// topic, and so does event time, as the markers of every upstream pipeline.
#[test]
fn windows_after_a_re_key_fire_on_the_watermarks_that_cross_the_repartition_topic() {
    windows_after_a_re_key(false);
}

/// The same with a fourth input partition that never gets a click: its pipeline goes idle,
/// says so to the next stage, and holds no window back.
#[test]
fn windows_after_a_re_key_fire_while_an_upstream_partition_is_idle() {
    windows_after_a_re_key(true);
}

fn windows_after_a_re_key(idle_partition: bool) {
    const TOPIC: &str = "weir.rekeyed-windows.pages.repartition";
    let inputs = if idle_partition { 4 } else { 3 };
    let broker = Broker::start(&[("clicks", inputs), ("counts", 1), (TOPIC, inputs)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let pages = ["/", "/docs", "/blog", "/about", "/pricing"];
    let start = 1_764_633_600_000_i64;
    // In time order: a click every 700 ms for 20 minutes, by 37 users, pages in turn.
    let clicks: Vec<(String, String, i64)> = (0..1_700)
        .map(|i| {
            let page = pages[(i * 7) % pages.len()];
            let user = format!("user{}", i % 37);
            let value = format!("{{\"page\":\"{page}\",\"user\":\"{user}\"}}");
            (user, value, start + i as i64 * 700)
        })
        .collect();
    let records: Vec<(Option<&str>, &str, Option<i64>)> = clicks
        .iter()
        .map(|(user, value, ts)| (Some(user.as_str()), value.as_str(), Some(*ts)))
        .collect();
    if idle_partition {
        // Partitions 0 to 2 only.
        support::kafka::produce_round_robin(&broker.bootstrap, "clicks", &records, 3);
    } else {
        support::kafka::produce_timed(&broker.bootstrap, "clicks", &records);
    }
    let idle = if idle_partition {
        ", idle_ms = 1000"
    } else {
        ""
    };
    let text = format!(
        r#"
[job]
name = "rekeyed-windows"
# A watermark goes after every 100 records read: the input is all there from the start, so
# the interval between watermarks would not pass while records come.
batch_size = 100

[source]
kind = "kafka"
brokers = "{brokers}"
topic = "clicks"
group_id = "rekeyed-windows"
format = "json"
watermark = {{ max_out_of_order_ms = 1000{idle} }}

[[operators]]
name = "pages"
component = {pages}
parallelism = 2
key_by = {{ json_pointer = "/page" }}
config = {{ size_ms = 60000, allowed_lateness_ms = 0 }}

{tail}"#,
        brokers = broker.bootstrap,
        pages = toml_path(&component("weir-example-page-counts")),
        tail = sink_and_checkpoints(&broker.bootstrap, dir.path()),
    );
    let job = write_job(dir.path(), &text);
    // Each window, with every click of its minute.
    let mut windows: Vec<(String, i64, u64)> = Vec::new();
    for (_, value, ts) in &clicks {
        let v: serde_json::Value = serde_json::from_str(value).expect("JSON");
        let page = v["page"].as_str().expect("page");
        let window = ts - ts.rem_euclid(60_000);
        match windows
            .iter_mut()
            .find(|(p, w, _)| p == page && *w == window)
        {
            Some(entry) => entry.2 += 1,
            None => windows.push((page.to_owned(), window, 1)),
        }
    }
    // The input does not end (no `stop_at_end`): a window fires only when the watermark of
    // every upstream pipeline has passed it. Those that end two minutes before the last
    // click must all fire while the job runs, and whatever fires is a whole window.
    let last = clicks.last().expect("clicks").2;
    let due: Vec<&(String, i64, u64)> = windows
        .iter()
        .filter(|(_, w, _)| w + 60_000 <= last - 120_000)
        .collect();
    assert!(due.len() > 50, "most windows are due");
    let member = weir_run(job.to_str().expect("utf-8"));
    let started = Instant::now();
    loop {
        let got: Vec<(String, i64, u64)> = sorted_values(&broker.bootstrap, "counts")
            .iter()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
                (
                    v["page"].as_str().expect("page").to_owned(),
                    v["start"].as_i64().expect("start"),
                    v["clicks"].as_u64().expect("clicks"),
                )
            })
            .collect();
        for window in &got {
            assert!(
                windows.contains(window),
                "a window fired with clicks missing or twice: {window:?}\n{}",
                member.log()
            );
        }
        if due.iter().all(|window| got.contains(window)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{} of {} due windows fired after 2 minutes:\n{}",
            due.iter().filter(|w| got.contains(w)).count(),
            due.len(),
            member.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    terminate(member);
}

/// A one-partition input re-keyed into four partitions, on one process and then two: the
/// second gets none of the input but half of the repartition topic, moved to it from the
/// first by a rebalance while both run; each word's count stays whole and exactly once.
#[test]
fn a_process_given_only_later_stage_partitions_takes_them_over_in_a_rebalance() {
    let seed = seed();
    let mut rng = Rng(seed);
    let broker = Broker::start(&[("lines", 1), ("counts", 1), (REPARTITION_TOPIC, 4)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let job = rekeyed_word_count(dir.path(), &broker);
    edit_job(
        &job,
        &[
            ("stop_at_end = true\n", ""),
            (
                "parallelism = 2\nkey_by = \"key\"\n",
                "parallelism = 2\nkey_by = \"key\"\nrepartition = { partitions = 4 }\n",
            ),
        ],
    );
    let mut input = lines_of_words(300, &mut rng);
    produce_lines(&broker, &input);
    let first = weir_run(&job);
    let expected = word_counts(&input);
    await_output(&broker, &expected, Duration::from_secs(60), "one process");

    let second = weir_run(&job);
    let topic_line = |member: &Member, topic: &str| -> Option<Vec<i32>> {
        let prefix = "weir: this process owns partitions [";
        let suffix = format!("] of `{topic}`");
        member.log().lines().rev().find_map(|line| {
            let list = line.strip_prefix(prefix)?.strip_suffix(suffix.as_str())?;
            Some(
                list.split(", ")
                    .filter(|p| !p.is_empty())
                    .map(|p| p.parse().expect("a partition"))
                    .collect(),
            )
        })
    };
    let started = Instant::now();
    loop {
        let (a, b) = (
            topic_line(&first, REPARTITION_TOPIC).unwrap_or_default(),
            topic_line(&second, REPARTITION_TOPIC).unwrap_or_default(),
        );
        if !a.is_empty() && !b.is_empty() && a.len() + b.len() == 4 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the repartition topic is not shared after a minute (seed {seed}):\n{}\n---\n{}",
            first.log(),
            second.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        topic_line(&second, "lines"),
        Some(Vec::new()),
        "the second process owns no input partition:\n{}",
        second.log()
    );
    let more = lines_of_words(300, &mut rng);
    produce_lines(&broker, &more);
    input.extend(more);
    let expected = word_counts(&input);
    await_output(
        &broker,
        &expected,
        Duration::from_secs(60),
        &format!("two processes (seed {seed})"),
    );
    for member in [first, second] {
        terminate(member);
    }
}

/// The re-keyed word count (tokenize, a repartition topic, count) in one process that reads
/// every partition, SIGKILLed at random instants while lines come: a kill lands in either
/// stage, between a stage's checkpoint and its publishing, or in the middle of either. After
/// each kill the output holds nothing beyond the running counts of the input so far; in the
/// end exactly them, as one uninterrupted run gives.
#[test]
fn a_re_keyed_word_count_killed_at_random_instants_ends_exactly_once() {
    let one = KillLoop {
        processes: 1,
        kills: 6,
        lines: 2_000,
        pause_ms: (200, 1_200),
        // One process reads every partition, with no group to wait for.
        edit: ("stop_at_end = true", "assignment = \"all\""),
        within: Duration::from_secs(90),
    };
    one.run();
}

/// The same over three processes of one group, each running both stages on the partitions it
/// is given: one of them is SIGKILLed at a random instant and started again, four times, while
/// lines come; the others take its partitions of either stage over when its session ends.
#[test]
fn a_re_keyed_word_count_over_three_processes_killed_in_turn_ends_exactly_once() {
    let three = KillLoop {
        processes: 3,
        kills: 4,
        lines: 1_500,
        pause_ms: (500, 2_000),
        edit: ("stop_at_end = true\n", ""),
        within: Duration::from_secs(120),
    };
    three.run();
}

/// A re-keyed word count run by `processes` processes while lines come, `lines` at a time:
/// after each chunk, a pause of `pause_ms.0` plus up to `pause_ms.1` ms, then one process
/// chosen at random is SIGKILLed and started again, `kills` times. After each kill the
/// output holds nothing beyond the running counts of the input so far; in the end (within
/// `within`) exactly them.
struct KillLoop {
    processes: usize,
    kills: usize,
    lines: usize,
    pause_ms: (u64, u64),
    /// How the job file differs from the one that stops at the end of its input.
    edit: (&'static str, &'static str),
    within: Duration,
}

impl KillLoop {
    fn run(&self) {
        let seed = seed();
        let mut rng = Rng(seed);
        let Rekeyed {
            broker,
            job,
            dir: _dir,
        } = Rekeyed::new(&[]);
        edit_job(&job, &[self.edit]);
        let mut input: Vec<String> = Vec::new();
        let mut members: Vec<Member> = (0..self.processes).map(|_| weir_run(&job)).collect();
        for kill in 0..self.kills {
            let chunk = lines_of_words(self.lines, &mut rng);
            produce_lines(&broker, &chunk);
            input.extend(chunk);
            let pause = self.pause_ms.0 + rng.below(self.pause_ms.1);
            std::thread::sleep(Duration::from_millis(pause));
            for member in &mut members {
                if member.child.try_wait().expect("poll").is_some() {
                    panic!("a run ended by itself: {}", member.log());
                }
            }
            let victim = rng.below(self.processes as u64) as usize;
            members[victim].kill();
            let expected = word_counts(&input);
            nothing_beyond(&sorted_values(&broker.bootstrap, "counts"), &expected, kill);
            members[victim] = weir_run(&job);
        }
        let expected = word_counts(&input);
        await_output(
            &broker,
            &expected,
            self.within,
            &format!(
                "after {} kills over {} processes (seed {seed})",
                self.kills, self.processes
            ),
        );
        for member in members {
            terminate(member);
        }
    }
}
