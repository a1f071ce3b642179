//! `weir-test-broker`: a Kafka-protocol broker for tests and examples, no Docker needed.
//!
//! It is librdkafka's mock cluster (`rdkafka::mocking::MockCluster`), in memory, listening on
//! 127.0.0.1 at a free port. It speaks enough of the protocol for producers, consumers,
//! consumer groups and offset commits; its fetches do not hide aborted transactional records,
//! so Weir's tests use the exactly-once mode that needs no broker transactions. Like a broker
//! with a small retention, it keeps only the newest 100,000 messages (and 5 MB) of each
//! partition.
//!
//! ```text
//! weir-test-broker [--topic NAME:PARTITIONS]...
//! ```
//!
//! It prints its bootstrap address (`127.0.0.1:PORT`) as the first line on stdout, then reads
//! commands on stdin, one per line:
//! - `topic NAME PARTITIONS` creates a topic;
//! - `produce TOPIC FILE` sends each line of FILE as a message: `KEY<TAB>VALUE`, or a value
//!   alone (no key), partitioned by key as Java clients do;
//! - `dump TOPIC FILE` writes the value of every message the topic holds to FILE, a line each.
//!
//! It answers each command with `ok ...` or `error: ...`, and stops when its stdin closes (a
//! test that dies closes it) or on Ctrl-C.

use std::io::{BufRead, Write};

use rdkafka::mocking::MockCluster;

fn main() {
    if let Err(message) = run() {
        eprintln!("weir-test-broker: {message}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let cluster = MockCluster::new(1).map_err(|e| format!("cannot start the mock cluster: {e}"))?;
    let create = |spec: &str| -> Result<(), String> {
        let (name, partitions) = spec
            .rsplit_once(':')
            .or_else(|| spec.rsplit_once(' '))
            .ok_or_else(|| format!("{spec:?}: expected NAME:PARTITIONS"))?;
        let partitions: i32 = partitions
            .trim()
            .parse()
            .map_err(|_| format!("{spec:?}: the partition count is not a number"))?;
        cluster
            .create_topic(name.trim(), partitions, 1)
            .map_err(|e| format!("cannot create topic {name}: {e}"))
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--topic" => create(&args.next().ok_or("--topic needs NAME:PARTITIONS")?)?,
            "-h" | "--help" => {
                println!("usage: weir-test-broker [--topic NAME:PARTITIONS]...");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", cluster.bootstrap_servers()).map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        match line.trim().split_once(' ') {
            Some(("topic", spec)) => match create(spec) {
                Ok(()) => println!("ok"),
                Err(message) => println!("error: {message}"),
            },
            Some(("produce", args)) => match produce(&cluster.bootstrap_servers(), args) {
                Ok(sent) => println!("ok {sent} messages"),
                Err(message) => println!("error: {message}"),
            },
            Some(("dump", args)) => match dump(&cluster.bootstrap_servers(), args) {
                Ok(read) => println!("ok {read} messages"),
                Err(message) => println!("error: {message}"),
            },
            _ if line.trim().is_empty() => {}
            _ => println!(
                "error: unknown command {line:?}; use `topic NAME PARTITIONS`, `produce TOPIC FILE` or `dump TOPIC FILE`"
            ),
        }
        stdout.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `produce TOPIC FILE`: sends FILE's lines; returns how many.
fn produce(bootstrap: &str, args: &str) -> Result<usize, String> {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let (topic, path) = args
        .trim()
        .split_once(' ')
        .ok_or("expected `produce TOPIC FILE`")?;
    let text = std::fs::read_to_string(path.trim()).map_err(|e| format!("{path}: {e}"))?;
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        .create()
        .map_err(|e| e.to_string())?;
    let mut sent = 0;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut record = match line.split_once('\t') {
            Some((key, value)) => BaseRecord::<str, str>::to(topic).key(key).payload(value),
            None => BaseRecord::to(topic).payload(line),
        };
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    producer.poll(std::time::Duration::from_millis(10));
                    record = back;
                }
            }
        }
        sent += 1;
    }
    producer
        .flush(std::time::Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    Ok(sent)
}

/// `dump TOPIC FILE`: writes every value the topic holds; returns how many.
fn dump(bootstrap: &str, args: &str) -> Result<usize, String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::error::KafkaError;
    use rdkafka::message::Message;
    use std::time::Duration;
    let (topic, path) = args
        .trim()
        .split_once(' ')
        .ok_or("expected `dump TOPIC FILE`")?;
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "weir-test-broker-dump")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| e.to_string())?;
    let timeout = Duration::from_secs(10);
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| e.to_string())?;
    let mut assignment = rdkafka::TopicPartitionList::new();
    let mut open = 0;
    for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition.id(), timeout)
            .map_err(|e| e.to_string())?;
        if high > low {
            assignment
                .add_partition_offset(topic, partition.id(), rdkafka::Offset::Offset(low))
                .map_err(|e| e.to_string())?;
            open += 1;
        }
    }
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(path.trim()).map_err(|e| e.to_string())?);
    let mut read = 0;
    if open > 0 {
        consumer.assign(&assignment).map_err(|e| e.to_string())?;
    }
    while open > 0 {
        match consumer.poll(Duration::from_secs(10)) {
            None => return Err("no answer from the topic for 10 s".into()),
            Some(Err(KafkaError::PartitionEOF(_))) => open -= 1,
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(message)) => {
                out.write_all(message.payload().unwrap_or_default())
                    .and_then(|()| out.write_all(b"\n"))
                    .map_err(|e| e.to_string())?;
                read += 1;
            }
        }
    }
    out.flush().map_err(|e| e.to_string())?;
    Ok(read)
}
