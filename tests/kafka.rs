//! Kafka in and out: a word count from a topic to a topic, exactly once across SIGKILLs, and
//! shared by several processes on one consumer group. The broker is `weir-test-broker`.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::crash::{Rng, running_counts, seed};
use support::kafka::{Broker, produce, sorted_values};
use support::{cache_dir, component, stderr, toml_path, write_job};

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

/// A word count from `input` to `output`, checkpointed in `dir/store`.
fn count_job(dir: &Path, broker: &Broker, stop_at_end: bool, extra_source: &str) -> String {
    let text = format!(
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

[[operators]]
name = "count"
component = {counter}
parallelism = 2
key_by = "key"

[sink]
kind = "kafka"
brokers = "{brokers}"
topic = "counts"

[checkpoints]
store = "{store}"
interval_ms = 200
"#,
        brokers = broker.bootstrap,
        counter = toml_path(&component("weir-example-counter")),
        store = url::Url::from_directory_path(dir.join("store"))
            .expect("absolute")
            .as_str(),
    );
    write_job(dir, &text).to_str().expect("utf-8").to_owned()
}

fn weir_run(job: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", job, "-q"])
        .env("WEIR_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir starts")
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
    let out = weir_run(&job).wait_with_output().expect("wait");
    assert!(out.status.success(), "weir failed: {}", stderr(&out));
    let expected = running_counts(input.iter().map(String::as_str));
    let got = sorted_values(&broker.bootstrap, "counts");
    assert_eq!(got.len(), expected.len(), "seed {seed}");
    assert!(got == expected, "seed {seed}");
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

#[test]
fn a_word_count_killed_at_random_instants_ends_exactly_once() {
    let seed = seed();
    let mut rng = Rng(seed);
    // The test broker keeps the newest 100,000 messages of each partition: 80,000 each here.
    let broker = Broker::start(&[("words", 8), ("counts", 8)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let input = words(640_000, 4_000, &mut rng);
    produce_words(&broker, "words", &input);
    // One process reads every partition: a restart need not wait for the group to forget
    // the killed one.
    let job = count_job(dir.path(), &broker, true, "assignment = \"all\"");
    let expected = running_counts(input.iter().map(String::as_str));
    let mut kills = 0;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "not done after 4 minutes and {kills} kills (seed {seed})"
        );
        let mut child = weir_run(&job);
        let deadline = Instant::now() + Duration::from_millis(150 + rng.below(700));
        let finished = loop {
            if let Some(status) = child.try_wait().expect("poll") {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let got = sorted_values(&broker.bootstrap, "counts");
        let extra = beyond(&got, &expected);
        assert!(
            extra.is_empty(),
            "the output holds records it should not (seed {seed}, {kills} kills): {:?}",
            &extra[..extra.len().min(5)]
        );
        match finished {
            Some(status) => {
                let out = child.wait_with_output().expect("wait");
                assert!(status.success(), "weir failed: {}", stderr(&out));
                break;
            }
            None => {
                child.kill().expect("SIGKILL");
                child.wait().expect("wait");
                kills += 1;
            }
        }
    }
    eprintln!("{kills} runs killed");
    assert!(kills >= 2, "too few kills ({kills}) to test anything");
    let got = sorted_values(&broker.bootstrap, "counts");
    assert_eq!(got.len(), expected.len(), "seed {seed}, {kills} kills");
    assert!(got == expected, "seed {seed}, {kills} kills");
}
