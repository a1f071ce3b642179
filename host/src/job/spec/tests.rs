//! The job file's checks, file to spec.

use super::check::without_dot_segments;
use super::*;

#[test]
fn paths_lose_their_dot_segments_but_not_through_a_link() {
    let clean = |p: &str| without_dot_segments(Path::new(p));
    assert_eq!(
        clean("/a/jobs/../data/./in.txt"),
        Path::new("/a/data/in.txt")
    );
    assert_eq!(clean("jobs/../../in.txt"), Path::new("../in.txt"));
    assert_eq!(clean("/../in.txt"), Path::new("/in.txt"));
    assert_eq!(clean("./in.txt"), Path::new("in.txt"));
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("deep/target");
    std::fs::create_dir_all(&target).expect("dirs");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    // `link/..` is `deep`, not the temporary folder: the `..` stays.
    let through = without_dot_segments(&link.join("../in.txt"));
    assert_eq!(through, link.join("../in.txt"));
}

fn parse(text: &str, dir: &Path) -> Result<JobSpec, String> {
    JobSpec::parse(text, Path::new("job.toml"), dir).map_err(|e| e.to_string())
}

fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), "a b\n").expect("write");
    std::fs::write(dir.path().join("op.wasm"), b"").expect("write");
    dir
}

const GOOD: &str = r#"
        [job]
        name = "wc"
        [source]
        kind = "text-lines"
        path = "in.txt"
        [[operators]]
        name = "count"
        component = "op.wasm"
        parallelism = 3
        key_by = "key"
        config = { a = 1, b = "x" }
        [sink]
        kind = "file"
        path = "out.txt"
    "#;

#[test]
fn a_good_file_resolves_paths_and_defaults() {
    let dir = fixture();
    let spec = parse(GOOD, dir.path()).expect("valid");
    assert_eq!(spec.key_groups.count(), 128);
    assert_eq!(spec.batch_size, DEFAULT_BATCH_SIZE);
    assert_eq!(
        spec.source,
        SourceSpec::TextLines {
            path: dir.path().join("in.txt"),
            records_per_second: None,
            watermark: None,
        }
    );
    let op = &spec.operators[0];
    assert_eq!(
        (op.parallelism, op.key_by.clone()),
        (3, Some(KeyBy::RecordKey))
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&op.config_json).expect("json"),
        serde_json::json!({"a": 1, "b": "x"})
    );
    assert_eq!(
        spec.sink,
        SinkSpec::File {
            path: dir.path().join("out.txt")
        }
    );
}

#[test]
fn limits_too_large_to_address_are_errors_not_wrapped() {
    let dir = fixture();
    let with = |limits: &str| {
        let text = GOOD.replace("key_by = \"key\"", &format!("key_by = \"key\"\n{limits}"));
        parse(&text, dir.path())
    };
    // 2^44 MiB is 2^64 bytes: shifted, it wrapped to 0 bytes (and 2^44 + 1 to one MiB).
    for limits in [
        "limits = { memory_mb = 17592186044416 }",
        "limits = { memory_mb = 17592186044417 }",
        "limits = { state_mb = 17592186044416 }",
    ] {
        let e = with(limits).expect_err(limits);
        assert!(e.contains("MiB is more than can be addressed"), "{e}");
    }
    let spec = with("limits = { memory_mb = 64, state_mb = 2 }").expect("valid");
    let limits = spec.operators[0].limits;
    assert_eq!(
        (limits.memory_bytes, limits.state_bytes),
        (64 << 20, Some(2 << 20))
    );
}

#[test]
fn kafka_sections_are_checked() {
    let dir = fixture();
    let kafka = GOOD
        .replace(
            "kind = \"text-lines\"\n        path = \"in.txt\"",
            "kind = \"kafka\"\n        brokers = \"b:9092\"\n        topic = \"t\"\n        \
                 group_id = \"g\"\n        start = { timestamp_ms = 5 }",
        )
        .replace(
            "kind = \"file\"\n        path = \"out.txt\"",
            "kind = \"kafka\"\n        brokers = \"b:9092\"\n        topic = \"out\"",
        );
    let with_checkpoints = format!("{kafka}\n[checkpoints]\n");
    let spec = parse(&with_checkpoints, dir.path()).expect("valid");
    let SourceSpec::Kafka(source) = &spec.source else {
        panic!("not a Kafka source: {:?}", spec.source);
    };
    assert_eq!(
        source.start,
        crate::connectors::kafka::settings::StartPosition::Timestamp { timestamp_ms: 5 }
    );
    assert!(matches!(&spec.sink, SinkSpec::Kafka(k) if k.guarantee == Guarantee::ExactlyOnce));
    let err = parse(&kafka, dir.path()).expect_err("no checkpoints");
    assert!(err.contains("[sink] guarantee"), "{err}");
    let at_least_once = kafka.replace(
        "topic = \"out\"",
        "topic = \"out\"\nguarantee = \"at-least-once\"",
    );
    let err = parse(&at_least_once, dir.path()).expect_err("no checkpoints");
    assert!(
        err.contains("a Kafka source keeps its offsets in checkpoints"),
        "{err}"
    );
    let raw_pointer =
        with_checkpoints.replace("group_id = \"g\"", "group_id = \"g\"\nkey_pointer = \"/u\"");
    let err = parse(&raw_pointer, dir.path()).expect_err("raw values have no pointer");
    assert!(err.contains("[source] key_pointer: reads JSON"), "{err}");
    let no_group = with_checkpoints.replace("group_id = \"g\"", "group_id = \" \"");
    let err = parse(&no_group, dir.path()).expect_err("empty group");
    assert!(
        err.contains("[source] group_id: must not be empty"),
        "{err}"
    );
}

#[test]
fn a_dead_letter_topic_goes_to_the_jobs_kafka_brokers() {
    let dir = fixture();
    let letters = "key_by = \"key\"\n        on_error = { dead_letter_topic = \"bad\" }";
    // A job without Kafka has no brokers to send them to.
    let plain = GOOD.replace("key_by = \"key\"", letters);
    let err = parse(&plain, dir.path()).expect_err("no brokers");
    assert!(
        err.contains("operator `count` on_error: dead_letter_topic goes to the brokers"),
        "{err}"
    );
    // With a Kafka sink: its brokers and guarantee.
    let sink = "kind = \"kafka\"\n        brokers = \"b:9092\"\n        topic = \"out\"\n        \
                    guarantee = \"at-least-once\"";
    let kafka_sink = plain.replace("kind = \"file\"\n        path = \"out.txt\"", sink);
    let spec = parse(&kafka_sink, dir.path()).expect("valid");
    assert_eq!(
        spec.dead_letter_targets(),
        [RecordPolicy::DeadLetterTopic("bad".into())]
    );
    let letters_sink = spec.dead_letter_topic_sink("bad").expect("a sink");
    assert_eq!(
        (letters_sink.brokers.as_str(), letters_sink.topic.as_str()),
        ("b:9092", "bad")
    );
    assert_eq!(letters_sink.guarantee, Guarantee::AtLeastOnce);
    assert!(spec.dead_letter_files().is_empty());
    // Not into the output.
    let into_output =
        kafka_sink.replace("dead_letter_topic = \"bad\"", "dead_letter_topic = \"out\"");
    let err = parse(&into_output, dir.path()).expect_err("the output topic");
    assert!(err.contains("is the sink's output topic"), "{err}");
    let table = plain.replace("dead_letter_topic = \"bad\"", "dead_letter_topic = 3");
    let err = parse(&table, dir.path()).expect_err("not a topic");
    assert!(err.contains("{ dead_letter_topic = \"topic\" }"), "{err}");
}

#[test]
fn an_unknown_field_is_reported_with_its_line() {
    let dir = fixture();
    let err = parse(
        &GOOD.replace("parallelism = 3", "paralelism = 3"),
        dir.path(),
    )
    .expect_err("bad");
    assert!(err.contains("unknown field `paralelism`"), "{err}");
    assert!(err.contains("line 10"), "{err}");
    let err = parse(
        &GOOD.replace("kind = \"file\"", "kind = \"file\"\nmode = 1"),
        dir.path(),
    )
    .expect_err("bad");
    assert!(err.contains("unknown field `mode`"), "{err}");
}

#[test]
fn a_missing_component_names_the_operator_and_the_path() {
    let dir = fixture();
    let err = parse(&GOOD.replace("op.wasm", "nope.wasm"), dir.path()).expect_err("bad");
    assert!(err.contains("operators[0] (`count`) component"), "{err}");
    assert!(err.contains("nope.wasm does not exist"), "{err}");
}

#[test]
fn semantic_errors_say_where() {
    let dir = fixture();
    let cases = [
        ("parallelism = 3", "parallelism = 0", "parallelism"),
        ("key_by = \"key\"", "key_by = \"value\"", "unknown key_by"),
        (
            "key_by = \"key\"",
            "key_by = { json_pointr = \"/user\" }",
            "operators[0] (`count`) key_by: a table of \"json_pointr\" is not a key_by: use",
        ),
        (
            "key_by = \"key\"",
            "key_by = { json_pointer = \"/user\", also = 1 }",
            "a table of \"also\", \"json_pointer\" is not a key_by",
        ),
        (
            "key_by = \"key\"",
            "key_by = 7",
            "a value of type integer is not a key_by",
        ),
        (
            "path = \"in.txt\"",
            "path = \"missing.txt\"",
            "[source] path",
        ),
        (
            "name = \"wc\"",
            "name = \"wc\"\nmax_parallelism = 0",
            "max_parallelism",
        ),
        (
            "kind = \"text-lines\"",
            "kind = \"pulsar\"",
            "unknown variant `pulsar`",
        ),
    ];
    for (from, to, expected) in cases {
        let err = parse(&GOOD.replace(from, to), dir.path()).expect_err(to);
        assert!(err.contains(expected), "{to}: {err}");
    }
}

/// Settings that parse but would make the job silently wrong are refused where they are
/// written.
#[test]
fn settings_that_would_make_the_job_silently_wrong_are_refused() {
    let dir = fixture();
    std::fs::write(dir.path().join("in.jsonl"), "{}\n").expect("write");
    let json = |source_lines: &str| {
        GOOD.replace(
            "kind = \"text-lines\"\n        path = \"in.txt\"",
            &format!("kind = \"json-lines\"\n        path = \"in.jsonl\"\n{source_lines}"),
        )
    };
    let cases = [
        (
            json("watermark = { max_out_of_order_ms = 100 }"),
            "[source] watermark: json-lines records have no event time without a timestamp",
        ),
        (
            json("on_bad_timestamp = \"skip\""),
            "[source] on_bad_timestamp: applies to the timestamps",
        ),
        (
            GOOD.replace(
                "path = \"in.txt\"",
                "path = \"in.txt\"\nwatermark = { idle_ms = 0 }",
            ),
            "[source] watermark.idle_ms: must be at least 1",
        ),
        (
            json("records_per_second = 0"),
            "[source] records_per_second: must be at least 1",
        ),
        (
            GOOD.replace("path = \"out.txt\"", "path = \"in.txt\""),
            "[sink] path",
        ),
        (
            GOOD.replace(
                "key_by = \"key\"",
                "key_by = \"key\"\nlimits = { cpu_ms_per_call = 0 }",
            ),
            "limits.cpu_ms_per_call: must be at least 1",
        ),
        (
            GOOD.replace(
                "key_by = \"key\"",
                "key_by = \"key\"\nlimits = { state_mb = 0 }",
            ),
            "limits.state_mb: must be at least 1",
        ),
    ];
    for (text, expected) in cases {
        let err = parse(&text, dir.path()).expect_err(expected);
        assert!(err.contains(expected), "{expected}: {err}");
    }
    let err = parse(
        &GOOD.replace("path = \"out.txt\"", "path = \"in.txt\""),
        dir.path(),
    )
    .expect_err("output over input");
    assert!(err.contains("the output would overwrite it"), "{err}");
    // With a timestamp, a watermark is what it should be.
    let timed =
        json("timestamp = { json_pointer = \"/ts\" }\nwatermark = { max_out_of_order_ms = 100 }");
    parse(&timed, dir.path()).expect("valid");
}

#[test]
fn an_operators_state_goes_by_its_uid_its_name_by_default_and_each_uid_is_its_own() {
    let dir = fixture();
    let spec = parse(GOOD, dir.path()).expect("valid");
    assert_eq!(spec.operators[0].uid, "count");
    let renamed = GOOD.replace("name = \"count\"", "name = \"counter\"\nuid = \"count\"");
    let spec = parse(&renamed, dir.path()).expect("valid");
    assert_eq!(
        (
            spec.operators[0].name.as_str(),
            spec.operators[0].uid.as_str()
        ),
        ("counter", "count")
    );

    let empty = parse(&GOOD.replace("parallelism = 3", "uid = \" \""), dir.path())
        .expect_err("an empty uid");
    assert!(
        empty.contains("operators[0] (`count`) uid") && empty.contains("must not be empty"),
        "{empty}"
    );
    // A second operator whose name is the first one's uid would share its state.
    let shared = renamed.replace(
        "[sink]",
        "[[operators]]\nname = \"count\"\ncomponent = \"op.wasm\"\n[sink]",
    );
    let err = parse(&shared, dir.path()).expect_err("a shared uid");
    assert!(
        err.contains("operators[1] (`count`) uid")
            && err.contains("another operator's state is kept under `count`"),
        "{err}"
    );
}
