//! Where a job is cut into stages, from job files.

use std::path::Path;

use super::*;

/// A Kafka job reading `lines` (with `source_extra` in its `[source]`), with `operators` as
/// `(name, key_by and other settings)`, writing the topic `out`.
fn kafka_job(source_extra: &str, operators: &[(&str, &str)]) -> Result<JobSpec, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("op.wasm"), b"").expect("write");
    let ops: String = operators
        .iter()
        .map(|(name, extra)| {
            format!("[[operators]]\nname = \"{name}\"\ncomponent = \"op.wasm\"\n{extra}\n")
        })
        .collect();
    let text = format!(
        r#"
        [job]
        name = "wc"
        [source]
        kind = "kafka"
        brokers = "127.0.0.1:9"
        topic = "lines"
        group_id = "wc"
        {source_extra}
        {ops}
        [sink]
        kind = "kafka"
        brokers = "127.0.0.1:9"
        topic = "out"
        [checkpoints]
        store = "file:///tmp/weir-stages-test"
        "#
    );
    JobSpec::parse(&text, Path::new("job.toml"), dir.path()).map_err(|e| e.to_string())
}

fn shape(spec: &JobSpec) -> Vec<(Vec<&str>, Option<String>)> {
    StagePlan::of(spec)
        .stages
        .iter()
        .map(|stage| {
            let names = spec.operators[stage.operators.clone()]
                .iter()
                .map(|o| o.name.as_str())
                .collect();
            let topic = match &stage.input {
                StageInput::Source => None,
                StageInput::Repartition(t) => Some(t.topic.clone()),
            };
            (names, topic)
        })
        .collect()
}

#[test]
fn an_operator_keyed_by_the_message_key_right_after_the_source_needs_no_topic() {
    let spec = kafka_job("", &[("count", "key_by = \"key\""), ("format", "")]).expect("valid");
    assert_eq!(shape(&spec), [(vec!["count", "format"], None)]);
    assert!(!StagePlan::of(&spec).rekeys());
}

#[test]
fn keying_by_what_an_operator_emitted_cuts_the_job_before_that_operator() {
    let spec = kafka_job(
        "",
        &[
            ("tokenize", ""),
            ("count", "key_by = \"key\""),
            ("format", ""),
        ],
    )
    .expect("valid");
    assert_eq!(
        shape(&spec),
        [
            (vec!["tokenize"], None),
            (
                vec!["count", "format"],
                Some("weir.wc.count.repartition".to_owned())
            )
        ]
    );
}

#[test]
fn a_field_of_the_value_or_a_source_key_from_the_value_is_a_new_key() {
    let by_field = kafka_job(
        "format = \"json\"",
        &[("count", "key_by = { json_pointer = \"/page\" }")],
    )
    .expect("valid");
    assert_eq!(
        shape(&by_field),
        [
            (vec![], None),
            (vec!["count"], Some("weir.wc.count.repartition".to_owned()))
        ]
    );
    let key_from_value = kafka_job(
        "format = \"json\"\nkey_pointer = \"/user\"",
        &[("count", "key_by = \"key\"")],
    )
    .expect("valid");
    assert_eq!(StagePlan::of(&key_from_value).stages.len(), 2);
}

#[test]
fn every_re_key_is_a_stage_and_the_topics_settings_are_kept() {
    let spec = kafka_job(
        "",
        &[
            ("tokenize", ""),
            (
                "count",
                "key_by = \"key\"\nrepartition = { topic = \"words\", partitions = 8, retention_ms = 3600000 }",
            ),
            ("top", "key_by = \"key\""),
        ],
    )
    .expect("valid");
    let plan = StagePlan::of(&spec);
    let topics: Vec<_> = plan
        .topics()
        .map(|t| {
            (
                t.topic.as_str(),
                t.partitions,
                t.retention_ms,
                t.operator.as_str(),
            )
        })
        .collect();
    assert_eq!(
        topics,
        [
            ("words", Some(8), Some(3_600_000), "count"),
            ("weir.wc.top.repartition", None, None, "top")
        ]
    );
    let printed = plan.describe(&spec).to_string();
    assert!(printed.starts_with("job `wc`: 3 stages\n"), "{printed}");
    assert!(
        printed.contains(
            "stage 0: source kafka topic `lines` (keyed by the message key) -> tokenize (x1) -> topic `words`"
        ),
        "{printed}"
    );
    assert!(
        printed.contains(
            "stage 1: topic `words` (8 partitions, keyed by the record key, retention 3600000 ms) -> count (x1) -> topic `weir.wc.top.repartition`"
        ),
        "{printed}"
    );
    assert!(
        printed.contains("stage 2: topic `weir.wc.top.repartition` (as many as the input's partitions, keyed by the record key) -> top (x1) -> sink kafka topic `out`"),
        "{printed}"
    );
}

#[test]
fn a_repartition_setting_where_no_topic_comes_is_refused_and_a_bad_topic_name_too() {
    let unused = kafka_job(
        "",
        &[(
            "count",
            "key_by = \"key\"\nrepartition = { partitions = 4 }",
        )],
    )
    .expect_err("count does not re-key");
    assert!(
        unused.contains("operators[0] (`count`) repartition")
            && unused.contains("no repartition topic comes before this operator"),
        "{unused}"
    );
    let bad = kafka_job(
        "",
        &[
            ("tokenize", ""),
            (
                "count",
                "key_by = \"key\"\nrepartition = { topic = \"a b\" }",
            ),
        ],
    )
    .expect_err("a space");
    assert!(bad.contains("is not a Kafka topic name"), "{bad}");
    let zero = kafka_job(
        "",
        &[
            ("tokenize", ""),
            (
                "count",
                "key_by = \"key\"\nrepartition = { partitions = 0 }",
            ),
        ],
    )
    .expect_err("zero");
    assert!(zero.contains("repartition.partitions"), "{zero}");
    let no_retention = kafka_job(
        "",
        &[
            ("tokenize", ""),
            (
                "count",
                "key_by = \"key\"\nrepartition = { retention_ms = 0 }",
            ),
        ],
    )
    .expect_err("zero");
    assert!(
        no_retention.contains("repartition.retention_ms") && no_retention.contains("at least 1"),
        "{no_retention}"
    );
}

#[test]
fn a_job_that_reads_a_file_has_one_stage_whatever_it_keys_by() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("op.wasm"), b"").expect("write");
    std::fs::write(dir.path().join("in.txt"), "a\n").expect("write");
    let text = r#"
        [job]
        name = "wc"
        [source]
        kind = "text-lines"
        path = "in.txt"
        [[operators]]
        name = "tokenize"
        component = "op.wasm"
        [[operators]]
        name = "count"
        component = "op.wasm"
        key_by = "key"
        [sink]
        kind = "stdout"
    "#;
    let spec = JobSpec::parse(text, Path::new("job.toml"), dir.path()).expect("valid");
    assert_eq!(shape(&spec), [(vec!["tokenize", "count"], None)]);
    assert!(default_topic("my job", "count/2") == "weir.my_job.count_2.repartition");
}

#[test]
fn each_stage_runs_as_a_kafka_job_of_its_own_between_the_topics() {
    let spec = kafka_job(
        "stop_at_end = true",
        &[
            ("tokenize", ""),
            (
                "count",
                "key_by = \"key\"\nrepartition = { partitions = 6 }",
            ),
            ("format", ""),
        ],
    )
    .expect("valid");
    let plan = StagePlan::of(&spec);
    let jobs = plan.stage_jobs(&spec, &[4, 6]);
    assert_eq!(jobs.len(), 2);
    let (first, second) = (&jobs[0], &jobs[1]);
    let names =
        |job: &JobSpec| -> Vec<String> { job.operators.iter().map(|o| o.name.clone()).collect() };
    assert_eq!(names(first), ["tokenize"]);
    assert_eq!(names(second), ["count", "format"]);
    // Stage 1 is the job itself, writing the topic, each record by the next stage's key.
    assert_eq!(first.name, "wc");
    let SinkSpec::Kafka(into) = &first.sink else {
        panic!("stage 1 writes the topic: {:?}", first.sink)
    };
    assert_eq!(into.topic, "weir.wc.count.repartition");
    assert_eq!(
        into.repartition,
        Some(RepartitionWrite {
            key_by: KeyBy::RecordKey,
            partitions: 6,
            writers: 4,
            writer: 0,
        })
    );
    // Stage 2 reads it in a group and a folder of its own, and writes the job's sink.
    assert_eq!(second.name, "wc.stage-1");
    let SourceSpec::Kafka(from) = &second.source else {
        panic!("stage 2 reads the topic")
    };
    assert_eq!(from.topic, "weir.wc.count.repartition");
    assert_eq!(from.group_id, "wc.stage-1");
    assert!(from.repartition_input.is_some() && from.stop_at_end);
    assert_eq!(
        (from.format, from.start),
        (ValueFormat::Raw, StartPosition::Earliest)
    );
    assert_eq!(second.sink, spec.sink);
    // A job that does not re-key runs as it is.
    let whole = kafka_job("", &[("count", "key_by = \"key\"")]).expect("valid");
    let jobs = StagePlan::of(&whole).stage_jobs(&whole, &[4]);
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].name, "wc");
    assert_eq!(jobs[0].sink, whole.sink);
}

#[test]
fn a_repartition_topic_is_named_by_the_operators_uid_so_a_kept_uid_keeps_the_topic() {
    let renamed = kafka_job(
        "",
        &[
            ("tokenize", ""),
            ("word-counts", "key_by = \"key\"\nuid = \"count\""),
        ],
    )
    .expect("valid");
    let topics: Vec<String> = StagePlan::of(&renamed)
        .topics()
        .map(|t| t.topic.clone())
        .collect();
    assert_eq!(topics, ["weir.wc.count.repartition"]);
}
