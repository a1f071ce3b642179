//! Kafka in and out, on the test broker (`weir-test-broker`, in memory, on this machine).
//!
//! - Throughput: JSON events keyed by word, Kafka -> keyed count -> Kafka, every partition in
//!   this process (`assignment = "all"`), with the exactly-once sink, the same with broker
//!   transactions, and the at-least-once one; and the same job from a JSON-lines file to a
//!   file. Rounds alternate the four; each figure is the median. `kafka_vs_file_ratio` is
//!   exactly-once (without transactions) over file.
//! - Re-keying: the same count keyed by the value's word instead of the message key, so the
//!   job runs as two stages through a repartition topic (exactly once both ways), in the
//!   same rounds. `kafka_rekey_vs_single_stage_ratio` is its rate over the exactly-once one.
//! - `rebalance_recovery_ms`: two `weir run` processes share a topic on one consumer group
//!   while input keeps coming; one is SIGKILLed, and the time is taken from the kill to the
//!   first output of one of its partitions published by the other (which includes the group
//!   session timeout, 3 s here, and the first checkpoint after the restore).
//!
//! `cargo bench -p weir-host --bench kafka`

mod host_allocator;

#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use support::kafka::Broker;
use weir_host::engine::{ComponentCache, Engine, EngineOptions};
use weir_host::job::{JobSpec, RunOptions, run_job};

/// Input partitions. The test broker keeps the newest 5 MB of each partition: a partition of
/// the repartition topic gets up to 1.06 times its share of 64-byte messages (id header
/// included), and each output topic has twice the partitions, so that nothing is dropped
/// before it is read and the check after each run sees every count.
const PARTITIONS: i32 = 8;
const PER_PARTITION: usize = 60_000;
const OUTPUT_PARTITIONS: i32 = 2 * PARTITIONS;
const WORDS: usize = 5_000;
const ROUNDS: usize = 3;

fn word_index(i: usize) -> usize {
    (i * 7919) % WORDS
}

fn word(i: usize) -> String {
    format!("w{}", word_index(i))
}

/// The partition of the `i`th event: its word's, so that each word is in one partition (the
/// job groups by the message key), and every partition gets the same share.
fn partition_of(i: usize, partitions: i32) -> i32 {
    (word_index(i) % partitions as usize) as i32
}

fn job_text(source: &str, sink: &str, store: &Path) -> String {
    format!(
        r#"
[job]
name = "kafka-bench"

{source}

[[operators]]
name = "count"
component = {counter}
parallelism = 2
key_by = "key"

{sink}

[checkpoints]
store = "{store}"
interval_ms = 500
"#,
        counter = support::toml_path(&support::component("weir-example-counter")),
        store = url::Url::from_directory_path(store).expect("absolute"),
    )
}

fn kafka_source(brokers: &str, topic: &str, extra: &str) -> String {
    format!(
        "[source]\nkind = \"kafka\"\nbrokers = \"{brokers}\"\ntopic = \"{topic}\"\n\
         group_id = \"bench\"\nformat = \"json\"\n{extra}\n\
         [source.properties]\n\"session.timeout.ms\" = \"3000\"\n\"heartbeat.interval.ms\" = \"300\"\n"
    )
}

/// A Kafka sink with `settings` (`guarantee = "…"`, `transactions = true`).
fn kafka_sink(brokers: &str, topic: &str, settings: &str) -> String {
    format!("[sink]\nkind = \"kafka\"\nbrokers = \"{brokers}\"\ntopic = \"{topic}\"\n{settings}\n")
}

/// Records per second of one run of `text`.
fn measure(runtime: &tokio::runtime::Runtime, engine: &Engine, text: &str, records: u64) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = JobSpec::parse(text, &dir.path().join("job.toml"), dir.path()).expect("job");
    let started = Instant::now();
    let out = if matches!(spec.source, weir_host::job::spec::SourceSpec::Kafka(_)) {
        let summary = runtime
            .block_on(weir_host::group::run_group(
                &spec,
                engine,
                RunOptions::default(),
            ))
            .unwrap_or_else(|e| panic!("benchmark job failed: {e}"));
        // A job that re-keys writes its sink from its last stage.
        let last = summary
            .stages
            .last()
            .map_or(&summary.partitions, |stage| &stage.partitions);
        last.values().map(|s| s.sink_records).sum()
    } else {
        runtime
            .block_on(run_job(&spec, engine, None, RunOptions::default()))
            .unwrap_or_else(|e| panic!("benchmark job failed: {e}"))
            .sink_records
    };
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(out, records, "every record reached the sink");
    records as f64 / secs
}

/// Each word's number of events, sorted: what every count ends at.
fn word_totals(records: usize) -> Vec<u64> {
    let mut totals = vec![0u64; WORDS];
    for i in 0..records {
        totals[word_index(i)] += 1;
    }
    let mut totals: Vec<u64> = totals.into_iter().filter(|n| *n > 0).collect();
    totals.sort_unstable();
    totals
}

/// Fails unless the counts in `topic` (`KEY\tCOUNT` lines) end at `expected` (each key's
/// last count, sorted), and, `exactly_once`, the topic holds one count per event.
fn check_counts(bootstrap: &str, topic: &str, expected: &[u64], exactly_once: bool) {
    let consumed = support::kafka::consume_all(bootstrap, topic);
    let mut last: HashMap<String, u64> = HashMap::new();
    for record in &consumed {
        let (key, count) = record
            .value
            .rsplit_once('\t')
            .unwrap_or_else(|| panic!("`{}` in {topic} is not a count", record.value));
        let count: u64 = count.parse().expect("a count");
        let at = last.entry(key.to_owned()).or_default();
        *at = (*at).max(count);
    }
    let mut totals: Vec<u64> = last.into_values().collect();
    totals.sort_unstable();
    assert!(
        totals == expected,
        "the counts in {topic} do not end at each word's total ({} words, {} expected)",
        totals.len(),
        expected.len()
    );
    if exactly_once {
        let events: u64 = expected.iter().sum();
        assert_eq!(
            consumed.len() as u64,
            events,
            "{topic}: one count per event"
        );
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    weir_host::disable_huge_pages();
    // `RUST_LOG=weir_host=info` shows the group's rebalances and the pipelines' restores.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(support::cache_dir())),
    })
    .expect("engine");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let records = PARTITIONS as usize * PER_PARTITION;
    let expected = word_totals(records);
    let mut topics = vec![("events", PARTITIONS)];
    let outputs: Vec<String> = (0..ROUNDS * 4).map(|i| format!("out-{i}")).collect();
    topics.extend(outputs.iter().map(|t| (t.as_str(), OUTPUT_PARTITIONS)));
    // The test broker cannot create topics: each round's repartition topic is made here.
    let repartition: Vec<String> = (0..ROUNDS)
        .map(|round| format!("weir.kafka-bench-rekey-{round}.count.repartition"))
        .collect();
    topics.extend(repartition.iter().map(|t| (t.as_str(), PARTITIONS)));
    let broker = Broker::start(&topics);
    let work = tempfile::tempdir().expect("tempdir");
    let input = work.path().join("events.jsonl");
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&input).expect("input"));
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &broker.bootstrap)
            .set("linger.ms", "20")
            .create()
            .expect("producer");
        for i in 0..records {
            let w = word(i);
            let line = format!("{{\"w\":\"{w}\"}}");
            writeln!(file, "{line}").expect("write");
            let mut record = BaseRecord::<str, str>::to("events")
                .partition(partition_of(i, PARTITIONS))
                .key(&w)
                .payload(&line);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        producer.poll(Duration::from_millis(5));
                        record = back;
                    }
                }
            }
        }
        producer.flush(Duration::from_secs(60)).expect("flush");
    }
    eprintln!(
        "{records} JSON events over {WORDS} words in {PARTITIONS} partitions; counter \
         parallelism 2, checkpoints every 500 ms; {ROUNDS} rounds"
    );
    let file_job = job_text(
        &format!(
            "[source]\nkind = \"json-lines\"\npath = \"{}\"\nkey_pointer = \"/w\"\n",
            input.display()
        ),
        &format!(
            "[sink]\nkind = \"file\"\npath = \"{}\"\n",
            work.path().join("out.txt").display()
        ),
        &work.path().join("file-store"),
    );
    // Warm-up: load the component, page the code in.
    measure(&runtime, &engine, &file_job, records as u64);
    let (mut exactly, mut transactions, mut at_least, mut file, mut rekey) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let source = kafka_source(
            &broker.bootstrap,
            "events",
            "assignment = \"all\"\nstop_at_end = true",
        );
        for (mode, settings, into, topic) in [
            (
                "exactly-once",
                "guarantee = \"exactly-once\"",
                &mut exactly,
                &outputs[4 * round],
            ),
            (
                "transactions",
                "transactions = true",
                &mut transactions,
                &outputs[4 * round + 1],
            ),
            (
                "at-least-once",
                "guarantee = \"at-least-once\"",
                &mut at_least,
                &outputs[4 * round + 2],
            ),
        ] {
            let store = work.path().join(format!("store-{mode}-{round}"));
            let text = job_text(
                &source,
                &kafka_sink(&broker.bootstrap, topic, settings),
                &store,
            );
            let rate = measure(&runtime, &engine, &text, records as u64);
            eprintln!("round {round}: {mode} {rate:.0} records/s");
            into.push(rate);
            check_counts(&broker.bootstrap, topic, &expected, mode != "at-least-once");
        }
        // Keyed by the word in the value: the events cross a repartition topic to the count.
        let text = job_text(
            &source,
            &kafka_sink(&broker.bootstrap, &outputs[4 * round + 3], ""),
            &work.path().join(format!("store-rekey-{round}")),
        )
        .replace(
            "name = \"kafka-bench\"",
            &format!("name = \"kafka-bench-rekey-{round}\""),
        )
        .replace("key_by = \"key\"", "key_by = { json_pointer = \"/w\" }");
        let rate = measure(&runtime, &engine, &text, records as u64);
        eprintln!("round {round}: re-keyed (two stages) {rate:.0} records/s");
        rekey.push(rate);
        check_counts(&broker.bootstrap, &outputs[4 * round + 3], &expected, true);
        std::fs::remove_dir_all(work.path().join("file-store")).ok();
        let rate = measure(&runtime, &engine, &file_job, records as u64);
        eprintln!("round {round}: file {rate:.0} records/s");
        file.push(rate);
    }
    let (exactly, transactions, at_least, file, rekey) = (
        median(exactly),
        median(transactions),
        median(at_least),
        median(file),
        median(rekey),
    );
    println!("bench: kafka_exactly_once_records_per_sec = {exactly:.0} records/s");
    println!("bench: kafka_transactions_records_per_sec = {transactions:.0} records/s");
    println!("bench: kafka_at_least_once_records_per_sec = {at_least:.0} records/s");
    println!("bench: file_records_per_sec = {file:.0} records/s");
    println!("bench: kafka_vs_file_ratio = {:.3} ratio", exactly / file);
    println!("bench: kafka_rekey_records_per_sec = {rekey:.0} records/s");
    println!(
        "bench: kafka_rekey_vs_single_stage_ratio = {:.3} ratio",
        rekey / exactly
    );
    drop(broker);
    let recovery = rebalance_recovery(work.path());
    println!("bench: rebalance_recovery_ms = {recovery:.0} ms");
}

/// From a member's SIGKILL to the first output of one of its partitions published by the
/// other member.
fn rebalance_recovery(work: &Path) -> f64 {
    const LIVE: i32 = 4;
    let broker = Broker::start(&[("live", LIVE), ("live-out", LIVE)]);
    let brokers = broker.bootstrap.clone();
    let text = job_text(
        &kafka_source(&brokers, "live", ""),
        &kafka_sink(&brokers, "live-out", "guarantee = \"exactly-once\""),
        &work.join("live-store"),
    );
    let job = work.join("live.toml");
    std::fs::write(&job, text).expect("job file");
    // Input keeps coming on every partition.
    let stop = Arc::new(AtomicBool::new(false));
    let producing = {
        let stop = stop.clone();
        let brokers = brokers.clone();
        std::thread::spawn(move || {
            let producer: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .set("linger.ms", "2")
                .create()
                .expect("producer");
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..LIVE {
                    let w = word(i);
                    let line = format!("{{\"w\":\"{w}\"}}");
                    let _ = producer.send(
                        BaseRecord::<str, str>::to("live")
                            .partition(partition_of(i, LIVE))
                            .key(&w)
                            .payload(&line),
                    );
                    i += 1;
                }
                producer.poll(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(5));
            }
            producer.flush(Duration::from_secs(10)).ok();
        })
    };
    let start = |name: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", job.to_str().expect("utf-8"), "-q"])
            .env("WEIR_CACHE_DIR", support::cache_dir())
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let pipe = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        (child, rx)
    };
    let owned = |rx: &std::sync::mpsc::Receiver<String>, now: &mut Vec<i32>| {
        while let Ok(line) = rx.try_recv() {
            if let Some(list) = line.split("owns partitions [").nth(1) {
                *now = list
                    .split(']')
                    .next()
                    .unwrap_or_default()
                    .split(", ")
                    .filter_map(|p| p.parse().ok())
                    .collect();
            }
        }
    };
    let (mut a, a_rx) = start("a");
    let (mut b, b_rx) = start("b");
    let (mut a_owns, mut b_owns) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    while a_owns.len() + b_owns.len() < LIVE as usize || a_owns.is_empty() || b_owns.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the members did not share the partitions"
        );
        std::thread::sleep(Duration::from_millis(100));
        owned(&a_rx, &mut a_owns);
        owned(&b_rx, &mut b_owns);
    }
    // Let both run a while, then kill a.
    std::thread::sleep(Duration::from_secs(3));
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "bench-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("reader");
    let mut assignment = TopicPartitionList::new();
    for p in 0..LIVE {
        assignment
            .add_partition_offset("live-out", p, Offset::End)
            .expect("add");
    }
    reader.assign(&assignment).expect("assign");
    let _ = reader.poll(Duration::from_millis(500));
    a.kill().expect("SIGKILL");
    let killed = Instant::now();
    a.wait().ok();
    let lineages: Vec<String> = a_owns.iter().map(|p| format!("kafka-bench/{p}/")).collect();
    let recovered = loop {
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "the killed member's partitions produced nothing for two minutes"
        );
        let Some(Ok(message)) = reader.poll(Duration::from_millis(50)) else {
            continue;
        };
        let id = message.headers().and_then(|h| {
            h.iter()
                .find(|h| h.key == "weir-id")
                .and_then(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned()))
        });
        if id.is_some_and(|id| lineages.iter().any(|l| id.starts_with(l))) {
            break killed.elapsed();
        }
    };
    stop.store(true, Ordering::Relaxed);
    producing.join().ok();
    let _ = Command::new("kill")
        .args(["-TERM", &b.id().to_string()])
        .status();
    b.wait().ok();
    drop(b_rx);
    recovered.as_secs_f64() * 1000.0
}
