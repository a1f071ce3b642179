//! A Kafka-protocol broker for the tests (`weir-test-broker`, librdkafka's mock cluster in a
//! process of its own, on 127.0.0.1), and clients to produce input and read output.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

/// A running test broker; stops when dropped (its stdin closes, and it is killed).
pub struct Broker {
    child: Child,
    stdin: Option<ChildStdin>,
    pub bootstrap: String,
}

impl Broker {
    /// Starts a broker with `topics` (name, partitions).
    pub fn start(topics: &[(&str, i32)]) -> Broker {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir-test-broker"));
        for (name, partitions) in topics {
            command.args(["--topic", &format!("{name}:{partitions}")]);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("weir-test-broker starts (built with the tests)");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the broker prints its address");
        let bootstrap = line.trim().to_owned();
        assert!(
            bootstrap.starts_with("127.0.0.1:"),
            "the broker printed {bootstrap:?}, not a loopback address"
        );
        let stdin = child.stdin.take();
        Broker {
            child,
            stdin,
            bootstrap,
        }
    }

    /// Creates a topic while the broker runs.
    pub fn create_topic(&mut self, name: &str, partitions: i32) {
        let stdin = self.stdin.as_mut().expect("broker stdin");
        writeln!(stdin, "topic {name} {partitions}").expect("send a command to the broker");
        stdin.flush().expect("flush");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Produces `(key, value)` records to `topic`, partitioned by key as Java clients do.
pub fn produce(bootstrap: &str, topic: &str, records: &[(Option<&str>, &str)]) {
    let timed: Vec<_> = records.iter().map(|&(k, v)| (k, v, None)).collect();
    produce_timed(bootstrap, topic, &timed);
}

/// Produces `(key, value, timestamp)` records: the timestamp, if any, is the message's.
pub fn produce_timed(bootstrap: &str, topic: &str, records: &[(Option<&str>, &str, Option<i64>)]) {
    send(bootstrap, topic, records, None);
}

/// The same, to partitions `0..partitions` in turn whatever the keys (some partitions of a
/// topic may then get nothing).
pub fn produce_round_robin(
    bootstrap: &str,
    topic: &str,
    records: &[(Option<&str>, &str, Option<i64>)],
    partitions: i32,
) {
    send(bootstrap, topic, records, Some(partitions));
}

/// Sends `records` (key, value, timestamp) to `topic`, partitioned by key, or `round_robin`
/// over that many partitions, and waits until the broker has them all.
fn send(
    bootstrap: &str,
    topic: &str,
    records: &[(Option<&str>, &str, Option<i64>)],
    round_robin: Option<i32>,
) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for (i, &(key, value, timestamp)) in records.iter().enumerate() {
        let mut record = BaseRecord::<str, str>::to(topic).payload(value);
        if let Some(partitions) = round_robin {
            record = record.partition(i as i32 % partitions);
        }
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(timestamp) = timestamp {
            record = record.timestamp(timestamp);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    producer.poll(Duration::from_millis(10));
                    record = back;
                }
            }
        }
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("every record acknowledged");
}

/// A record read back from a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumed {
    pub partition: i32,
    pub key: Option<String>,
    pub value: String,
    pub id: Option<String>,
}

/// Everything `topic` holds now, read by an independent consumer (no group).
pub fn consume_all(bootstrap: &str, topic: &str) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        // librdkafka assigns only with a group id; this reader never joins or commits.
        .set("group.id", "weir-test-reader")
        .create()
        .expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let partitions: Vec<i32> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    let mut assignment = TopicPartitionList::new();
    let mut open = HashMap::new();
    for p in &partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, *p, Duration::from_secs(10))
            .expect("watermarks");
        if high > low {
            assignment
                .add_partition_offset(topic, *p, Offset::Offset(low))
                .expect("add");
            open.insert(*p, ());
        }
    }
    let mut out = Vec::new();
    if open.is_empty() {
        return out;
    }
    consumer.assign(&assignment).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !open.is_empty() {
        assert!(
            Instant::now() < deadline,
            "reading {topic} took over a minute"
        );
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                open.remove(&p);
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            Some(Ok(m)) => {
                let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
                let id = m.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == "weir-id")
                        .and_then(|h| text(h.value))
                });
                out.push(Consumed {
                    partition: m.partition(),
                    key: text(m.key()),
                    value: text(m.payload()).unwrap_or_default(),
                    id,
                });
            }
        }
    }
    out
}

/// The values in `topic`, sorted.
pub fn sorted_values(bootstrap: &str, topic: &str) -> Vec<String> {
    let mut values: Vec<String> = consume_all(bootstrap, topic)
        .into_iter()
        .map(|c| c.value)
        .collect();
    values.sort();
    values
}

/// The offsets `group` has committed for each partition of `topic`, against each partition's
/// end: `(partition, committed, end)`.
pub fn committed_and_ends(bootstrap: &str, group: &str, topic: &str) -> Vec<(i32, i64, i64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let timeout = Duration::from_secs(10);
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .expect("metadata");
    let mut wanted = TopicPartitionList::new();
    for p in metadata.topics()[0].partitions() {
        wanted.add_partition(topic, p.id());
    }
    let committed = consumer
        .committed_offsets(wanted, timeout)
        .expect("committed offsets");
    committed
        .elements()
        .iter()
        .map(|e| {
            let (_, end) = consumer
                .fetch_watermarks(topic, e.partition(), timeout)
                .expect("watermarks");
            let at = match e.offset() {
                Offset::Offset(at) => at,
                _ => -1,
            };
            (e.partition(), at, end)
        })
        .collect()
}
