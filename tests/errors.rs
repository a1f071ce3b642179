//! Bad input gives a clear error and a non-zero exit, never a panic: a component of the wrong
//! world, a corrupt `.wasm`, a core module, a job file with an unknown field or a missing
//! component.

use crate::support;

use support::{assert_clean_failure, component, toml_path, weir, write_job};

#[test]
fn validate_accepts_the_example_operators() {
    for name in ["weir-example-tokenizer", "weir-example-counter"] {
        let path = component(name);
        let out = weir(&["validate", path.to_str().expect("utf-8")]);
        assert!(out.status.success(), "{}", support::stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("implements weir:operator/operator"));
    }
}

#[test]
fn output_into_a_pipe_whose_reader_has_gone_ends_quietly_not_in_a_panic() {
    // `weir plan JOB | head -1`, with `head` already gone: the first write meets a closed pipe.
    let job = support::repo().join("examples/wordcount/job.toml");
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = support::weir_command()
        .args(["plan", job.to_str().expect("utf-8")])
        .stdout(writer)
        .output()
        .expect("weir runs");
    let stderr = support::stderr(&out);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn validate_checks_a_job_file_and_its_components_and_prints_its_stages() {
    let job = support::repo().join("examples/wordcount/job.toml");
    let out = weir(&["validate", job.to_str().expect("utf-8")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", support::stderr(&out));
    assert!(
        stdout.contains("job `wordcount` is valid; every operator's component implements"),
        "{stdout}"
    );
    let plan = weir(&["plan", job.to_str().expect("utf-8")]);
    assert!(plan.status.success(), "{}", support::stderr(&plan));
    let stages = String::from_utf8_lossy(&plan.stdout);
    assert!(
        stdout.ends_with(&*stages),
        "validate prints the plan:\n{stdout}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let job = write_job(dir.path(), "[job]\nname = \"j\"\n");
    let out = weir(&["validate", job.to_str().expect("utf-8")]);
    assert_clean_failure(&out, &["job.toml"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_component_of_another_world_is_refused_naming_what_is_missing() {
    // A WASI command (exports wasi:cli/run), not an operator.
    let path = component("weir-test-not-an-operator");
    let out = weir(&["validate", path.to_str().expect("utf-8")]);
    assert_clean_failure(
        &out,
        &[
            "does not implement the world weir:operator/operator@0.6.0",
            "does not export `weir:operator/processor@0.6.0`",
            "wasi:cli/run",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_component_built_against_the_previous_wit_is_told_to_rebuild() {
    // The counter as a build against weir:operator@0.4.0 names it: the same bytes with the
    // interfaces' versions rewritten (same length, so the component stays well formed).
    let mut bytes = std::fs::read(component("weir-example-counter")).expect("read");
    let mut renamed = 0;
    for interface in ["processor", "state", "time", "log", "types"] {
        let new = format!("weir:operator/{interface}@0.6.0");
        let old = format!("weir:operator/{interface}@0.4.0");
        while let Some(at) = bytes.windows(new.len()).position(|w| w == new.as_bytes()) {
            bytes[at..at + new.len()].copy_from_slice(old.as_bytes());
            renamed += 1;
        }
    }
    assert!(renamed >= 3, "the counter names Weir's interfaces");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old-counter.wasm");
    std::fs::write(&path, bytes).expect("write");
    let out = weir(&["validate", path.to_str().expect("utf-8")]);
    assert_clean_failure(
        &out,
        &[
            "old-counter.wasm does not implement the world weir:operator/operator@0.6.0",
            "it was built against weir:operator@0.4.0, and this Weir implements \
             weir:operator@0.6.0: rebuild it with this Weir (`weir build`), or with its SDK \
             and `wit/`",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn corrupt_and_non_component_files_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let real = std::fs::read(component("weir-example-counter")).expect("read");
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "text.wasm",
            b"this is not wasm".to_vec(),
            "does not start with the WebAssembly magic bytes",
        ),
        (
            "module.wasm",
            b"\0asm\x01\0\0\0".to_vec(),
            "core WebAssembly module, not a component",
        ),
        (
            "truncated.wasm",
            real[..real.len() / 2].to_vec(),
            "is not a valid WebAssembly component",
        ),
    ];
    for (name, bytes, expected) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        let out = weir(&["validate", path.to_str().expect("utf-8")]);
        assert_clean_failure(&out, &[expected, name]);
    }
}

#[test]
fn a_job_with_a_corrupt_component_fails_before_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), "a\n").expect("write");
    std::fs::write(dir.path().join("bad.wasm"), b"\0asm\x0d\0\x01\0garbage").expect("write");
    let job = write_job(
        dir.path(),
        r#"
        [job]
        name = "j"
        [source]
        kind = "text-lines"
        path = "in.txt"
        [[operators]]
        name = "broken"
        component = "bad.wasm"
        [sink]
        kind = "stdout"
        "#,
    );
    for command in ["run", "validate"] {
        let out = weir(&[command, job.to_str().expect("utf-8")]);
        assert_clean_failure(
            &out,
            &[
                "operator `broken`",
                "bad.wasm",
                "not a valid WebAssembly component",
            ],
        );
        assert_eq!(out.status.code(), Some(2), "weir {command}");
    }
}

fn job_text(extra_operator_line: &str, component: &str) -> String {
    format!(
        r#"
        [job]
        name = "j"
        [source]
        kind = "text-lines"
        path = "in.txt"
        [[operators]]
        name = "tokenize"
        component = {component}
        {extra_operator_line}
        [sink]
        kind = "stdout"
        "#
    )
}

#[test]
fn a_job_file_with_an_unknown_field_names_the_field_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), "a\n").expect("write");
    let tokenizer = toml_path(&component("weir-example-tokenizer"));
    let job = write_job(dir.path(), &job_text("paralellism = 2", &tokenizer));
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    assert_clean_failure(
        &out,
        &["unknown field `paralellism`", "line 10", "job.toml"],
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_job_file_with_a_missing_component_names_the_operator_and_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), "a\n").expect("write");
    let job = write_job(dir.path(), &job_text("", "\"missing/tokenizer.wasm\""));
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    assert_clean_failure(
        &out,
        &[
            "operators[0] (`tokenize`) component",
            "missing/tokenizer.wasm does not exist",
            "scripts/build-guests",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_missing_component_in_an_operator_project_names_its_weir_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), "a\n").expect("write");
    // A JavaScript project not built yet: the file that marks it, no component.
    std::fs::create_dir(dir.path().join("tokenizer")).expect("mkdir");
    std::fs::write(dir.path().join("tokenizer/operator.js"), "// source\n").expect("write");
    let job = write_job(dir.path(), &job_text("", "\"tokenizer/operator.wasm\""));
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    let project = dir.path().join("tokenizer");
    assert_clean_failure(
        &out,
        &[
            "operators[0] (`tokenize`) component",
            "tokenizer/operator.wasm does not exist",
            &format!(
                "{} holds a JavaScript operator project: build it with `weir build {}`",
                project.display(),
                project.display()
            ),
        ],
    );
    assert!(
        !support::stderr(&out).contains("scripts/build-guests"),
        "{}",
        support::stderr(&out)
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_missing_job_file_and_bad_arguments_fail_cleanly() {
    let out = weir(&["run", "/nonexistent/job.toml"]);
    assert_clean_failure(&out, &["cannot read job file /nonexistent/job.toml"]);
    let err = support::stderr(&out);
    assert_eq!(
        err.matches("No such file or directory").count(),
        1,
        "the cause is said once:\n{err}"
    );
    let out = weir(&["frobnicate"]);
    assert!(!out.status.success());
    assert!(!support::stderr(&out).contains("panicked"));
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
}

/// A job of page views in JSON lines whose `ts` are milliseconds, read with `timestamp_line`.
fn page_views_job(dir: &std::path::Path, timestamp_line: &str) -> std::path::PathBuf {
    let lines: String = (0..50)
        .map(|i| {
            format!(
                "{{\"page\": \"p{}\", \"ts\": {}}}\n",
                i % 3,
                1_764_633_609_660i64 + i
            )
        })
        .collect();
    std::fs::write(dir.join("views.jsonl"), lines).expect("write");
    write_job(
        dir,
        &format!(
            r#"
            [job]
            name = "views"
            [source]
            kind = "json-lines"
            path = "views.jsonl"
            key_pointer = "/page"
            {timestamp_line}
            on_bad_timestamp = "skip"
            [[operators]]
            name = "count"
            component = {counter}
            key_by = "key"
            [sink]
            kind = "file"
            path = "out.txt"
            "#,
            counter = toml_path(&component("weir-example-counter")),
        ),
    )
}

#[test]
fn timestamps_in_another_unit_than_the_format_fail_at_the_first_record_naming_the_setting() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Milliseconds read as seconds would put every window 56 000 years ahead; skipping bad
    // timestamps does not hide a wrong setting.
    let job = page_views_job(
        dir.path(),
        r#"timestamp = { json_pointer = "/ts", format = "s" }"#,
    );
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    assert_clean_failure(
        &out,
        &[
            "views.jsonl line 1",
            "[source] timestamp",
            "format = \"s\"",
            "these look like milliseconds: set format = \"ms\"",
        ],
    );
    // The right unit runs.
    let job = page_views_job(
        dir.path(),
        r#"timestamp = { json_pointer = "/ts", format = "ms" }"#,
    );
    let out = weir(&["run", job.to_str().expect("utf-8"), "-q"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
}

#[test]
fn weir_run_is_quiet_by_default_says_more_with_v_and_only_errors_with_q() {
    let dir = tempfile::tempdir().expect("tempdir");
    let job = page_views_job(dir.path(), r#"timestamp = { json_pointer = "/ts" }"#);
    let job = job.to_str().expect("utf-8");
    std::fs::write(
        dir.path().join("job.toml"),
        std::fs::read_to_string(job).expect("read") + "[checkpoints]\ninterval_ms = 5\n",
    )
    .expect("write");
    // As a user runs it: no RUST_LOG.
    let run = |args: &[&str]| {
        support::weir_command()
            .env_remove("RUST_LOG")
            .arg("run")
            .arg(job)
            .args(args)
            .output()
            .expect("weir runs")
    };
    let out = run(&["--fresh"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let err = support::stderr(&out);
    assert!(!err.contains("INFO"), "no info lines by default:\n{err}");
    assert!(err.contains("job `views` finished"), "the summary:\n{err}");

    let out = run(&["--fresh", "-v"]);
    let err = support::stderr(&out);
    assert!(
        err.contains("INFO") && err.contains("checkpoint complete"),
        "-v says what the host does:\n{err}"
    );

    let out = run(&["--fresh", "-q"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    assert_eq!(support::stderr(&out), "", "-q prints only errors");
}
