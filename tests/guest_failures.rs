//! A guest that returns an error, traps, runs too long or allocates too much fails the job
//! with a message naming the operator and subtask, and leaves no partial output. Errors
//! raised in Python and JavaScript carry their traceback or stack; values of the wrong type
//! given to `emit` are refused at the call; a malformed batch is the operator's fault; a limit
//! is named by its setting.

use crate::support;

use std::path::{Path, PathBuf};

use support::{assert_clean_failure, built_operator, repo, stderr, tokenize_then, toml_path, weir};

/// Writes a job in `dir`: `in.txt` -> tokenizer -> `faulty` named `operator` (two subtasks,
/// keyed by word, with `operator_lines` added to its section) -> `out.txt`.
fn faulty_job(dir: &Path, job: &str, operator: &str, operator_lines: &str) -> std::path::PathBuf {
    tokenize_then(
        dir,
        &format!("name = \"{job}\""),
        operator,
        "weir-test-faulty",
        &format!("parallelism = 2\n{operator_lines}"),
        "",
    )
}

/// Runs `faulty` as `victim` over words, with `mode` triggered by the word "boom".
fn run_faulty(dir: &Path, mode: &str, limits: &str) -> std::process::Output {
    run_victim(dir, None, mode, limits)
}

/// Runs the component `component` (`faulty` when None) as `victim` over 5 000 words and then
/// "boom", in `mode` with `word = "boom"` and the operator lines `limits`.
fn run_victim(
    dir: &Path,
    component: Option<&Path>,
    mode: &str,
    limits: &str,
) -> std::process::Output {
    let job = victim_job(dir, component, mode, limits);
    weir(&["run", job.to_str().expect("utf-8")])
}

/// The job file of [`run_victim`].
fn victim_job(dir: &Path, component: Option<&Path>, mode: &str, limits: &str) -> PathBuf {
    let mut input = String::new();
    for i in 0..5000 {
        input.push_str(&format!("w{}\n", i % 50));
    }
    input.push_str("boom\n");
    std::fs::write(dir.join("in.txt"), input).expect("write");
    let config = format!("config = {{ mode = \"{mode}\", word = \"boom\" }}\n{limits}");
    let job = faulty_job(dir, "faulty", "victim", &config);
    if let Some(component) = component {
        let faulty = toml_path(&support::component("weir-test-faulty"));
        let text = std::fs::read_to_string(&job).expect("job");
        assert!(text.contains(&faulty));
        std::fs::write(&job, text.replace(&faulty, &toml_path(component))).expect("job");
    }
    job
}

/// The test guest `tests/guests/NAME`, built with `weir build`.
fn test_guest(name: &str) -> PathBuf {
    built_operator(&repo().join("tests/guests").join(name))
}

/// The number of the first line of `tests/guests/NAME/FILE` that contains `text`.
fn line_of(name: &str, file: &str, text: &str) -> usize {
    let path = repo().join("tests/guests").join(name).join(file);
    let source = std::fs::read_to_string(&path).expect("source");
    1 + source
        .lines()
        .position(|line| line.contains(text))
        .unwrap_or_else(|| panic!("{text:?} is not in {}", path.display()))
}

/// The job's error starts with `message`, the guest's own words (the operator and subtask
/// come after them).
fn starts_with_the_guests_message(out: &std::process::Output, message: &str) {
    let stderr = stderr(out);
    assert!(
        stderr.starts_with(&format!("error: {message}")),
        "the error does not start with {message:?}:\n{stderr}"
    );
}

/// A failed run commits nothing: the output file, if there is one, is empty (what was
/// staged before the failure stays hidden in the sink's staging folder).
fn no_output(dir: &Path) {
    let out = dir.join("out.txt");
    let committed = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        committed.is_empty(),
        "partial output committed: {committed:?}"
    );
}

#[test]
fn a_guest_error_fails_the_job_naming_operator_and_subtask() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_faulty(dir.path(), "error-on", "");
    assert_clean_failure(
        &out,
        &["operator `victim` subtask", "returned an error", "boom"],
    );
    no_output(dir.path());
}

#[test]
fn a_guest_trap_fails_the_job_naming_operator_and_subtask() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_faulty(dir.path(), "trap-on", "");
    // The guest's panic message (its last words on stderr) explains the trap.
    assert_clean_failure(
        &out,
        &[
            "operator `victim` subtask",
            "trapped",
            "panicked at",
            "faulty operator: trap on value `boom`",
            "wasm trap: wasm `unreachable` instruction executed",
        ],
    );
    // The panic message first, then the trap, then the operator; without the hint to set
    // RUST_BACKTRACE, which a guest cannot see.
    let text = stderr(&out);
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line:\n{text}"));
    assert!(
        lines[at].contains("panicked at tests/guests/faulty/src/lib.rs:"),
        "{text}"
    );
    assert_eq!(
        lines[at + 1],
        "faulty operator: trap on value `boom`",
        "{text}"
    );
    assert_eq!(
        lines[at + 2],
        "wasm trap: wasm `unreachable` instruction executed",
        "{text}"
    );
    assert!(
        lines[at + 3].starts_with("in operator `victim` subtask ")
            && lines[at + 3].ends_with(", which trapped"),
        "{text}"
    );
    assert!(
        !lines[at..].iter().any(|l| l.contains("RUST_BACKTRACE")),
        "{text}"
    );
    // The wasm backtrace only when debugging.
    assert!(!stderr(&out).contains("wasm backtrace"), "{}", stderr(&out));
    no_output(dir.path());
    let job = dir.path().join("job.toml");
    let debugging = support::weir_logging(&["run", job.to_str().expect("utf-8")], "weir=debug");
    assert!(
        stderr(&debugging).contains("wasm backtrace"),
        "{}",
        stderr(&debugging)
    );
}

#[test]
fn a_guest_that_spins_is_interrupted_by_the_cpu_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_faulty(dir.path(), "loop-on", "limits = { cpu_ms_per_call = 300 }");
    assert_clean_failure(
        &out,
        &[
            "operator `victim` subtask",
            "exceeded its CPU time limit of 300 ms per call (limits.cpu_ms_per_call)",
            "raise `cpu_ms_per_call`",
        ],
    );
    no_output(dir.path());
}

#[test]
fn a_guest_that_allocates_in_process_hits_the_memory_limit_named_by_its_setting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_faulty(dir.path(), "alloc-on", "limits = { memory_mb = 8 }");
    assert_clean_failure(
        &out,
        &[
            "operator `victim` subtask",
            "exceeded its memory limit of 8 MiB (limits.memory_mb)",
            "raise `memory_mb`",
        ],
    );
    assert!(
        !support::stderr(&out).contains("forcing trap"),
        "{}",
        support::stderr(&out)
    );
    no_output(dir.path());
}

#[test]
fn a_python_operator_larger_than_its_memory_limit_fails_to_start_naming_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let component = test_guest("failures-python");
    let out = run_victim(
        dir.path(),
        Some(&component),
        "passthrough",
        "limits = { memory_mb = 8 }",
    );
    // The interpreter needs more than 8 MiB before it runs a line: instantiation fails.
    assert_clean_failure(
        &out,
        &[
            "operator `victim` subtask",
            "exceeded its memory limit of 8 MiB (limits.memory_mb): the instance asked for a memory of",
            "raise `memory_mb`",
        ],
    );
    no_output(dir.path());
}

#[test]
fn a_python_exception_shows_its_traceback_without_the_sdk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let component = test_guest("failures-python");
    let out = run_victim(dir.path(), Some(&component), "raise-in-helper", "");
    let raise = line_of(
        "failures-python",
        "operator.py",
        "raise ValueError(f\"the word",
    );
    let call = line_of("failures-python", "operator.py", "check_word(self.word)");
    assert_clean_failure(
        &out,
        &[
            "\nin operator `victim` subtask 1, which returned an error on the record with key \
             \"boom\" and value \"boom\"\njob `faulty` failed",
            "Traceback (most recent call last):",
            &format!("File \"operator.py\", line {call}, in Failures.process"),
            &format!("File \"operator.py\", line {raise}, in check_word"),
        ],
    );
    starts_with_the_guests_message(
        &out,
        "ValueError: the word 'boom' is not welcome here\nTraceback (most recent call last):\n",
    );
    assert!(
        !support::stderr(&out).contains("weir_sdk"),
        "{}",
        support::stderr(&out)
    );
    no_output(dir.path());
}

#[test]
fn a_javascript_error_shows_its_stack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let component = test_guest("failures-js");
    let out = run_victim(dir.path(), Some(&component), "throw-in-helper", "");
    let throw = line_of("failures-js", "operator.js", "throw new Error(`the word");
    let call = line_of("failures-js", "operator.js", "checkWord(this.word)");
    assert_clean_failure(
        &out,
        &[
            "\nin operator `victim` subtask 1, which returned an error on the record with key \
             \"boom\" and value \"boom\"\njob `faulty` failed",
            &format!("at checkWord (operator.js:{throw}:"),
            &format!("at process (operator.js:{call}:"),
        ],
    );
    starts_with_the_guests_message(
        &out,
        &format!(
            "Error: the word \"boom\" is not welcome here\n    at checkWord (operator.js:{throw}:"
        ),
    );
    // No frame of the SDK: its entry, nor its modules in `weir/`.
    let err = support::stderr(&out);
    assert!(!err.contains("weir.js") && !err.contains("weir/"), "{err}");
    no_output(dir.path());
}

#[test]
fn python_emit_refuses_values_of_other_types_at_the_call() {
    let component = test_guest("failures-python");
    let cases = [
        (
            "emit-dict",
            "TypeError: emit: a value is bytes, bytearray, memoryview or str (UTF-8), not \
             dict; use emit_json(key, value) to emit other values as JSON",
            "out.emit(record.key, {",
        ),
        (
            "emit-int-key",
            "TypeError: emit: a key is bytes, bytearray, memoryview or str (UTF-8), or None \
             for a record without key, not int",
            "out.emit(7, value)",
        ),
    ];
    for (mode, error, call) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_victim(dir.path(), Some(&component), mode, "");
        let line = line_of("failures-python", "operator.py", call);
        assert_clean_failure(
            &out,
            &[
                "operator `victim` subtask",
                "returned an error",
                error,
                &format!("File \"operator.py\", line {line}, in Failures.process"),
            ],
        );
        no_output(dir.path());
    }
}

#[test]
fn javascript_console_writes_to_the_guest_log_at_each_methods_level() {
    let dir = tempfile::tempdir().expect("tempdir");
    let job = victim_job(dir.path(), Some(&test_guest("failures-js")), "console", "");
    let out = support::weir_logging(
        &["run", job.to_str().expect("utf-8")],
        "warn,weir::guest=debug",
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    for (level, text) in [
        ("INFO", "console.log saw boom {\"n\":1}"),
        ("INFO", "console.info saw boom"),
        ("WARN", "console.warn saw boom"),
        ("ERROR", "console.error saw Error: an error"),
        ("DEBUG", "console.debug saw 42"),
    ] {
        let lines: Vec<&str> = err.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains(text))
            .unwrap_or_else(|| panic!("no log line {text:?} in:\n{err}"));
        assert!(lines[at].contains(level), "not at {level}: {}", lines[at]);
        // The log record: its first line, and those of a multi-line message (a stack), up to
        // the next record; its fields come last.
        let next = lines[at + 1..]
            .iter()
            .position(|l| l.starts_with("20"))
            .map_or(lines.len(), |n| at + 1 + n);
        let record = lines[at..next].join("\n");
        assert!(record.contains("operator=\"victim\""), "{record}");
    }
}

#[test]
fn javascript_emit_refuses_values_of_other_types_at_the_call() {
    let component = test_guest("failures-js");
    for (mode, kind, call) in [
        ("emit-object", "Object", "{ word: this.word }"),
        ("emit-number", "number", "out.emit(record.key, 42)"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_victim(dir.path(), Some(&component), mode, "");
        let line = line_of("failures-js", "operator.js", call);
        assert_clean_failure(
            &out,
            &[
                "operator `victim` subtask",
                "returned an error",
                &format!(
                    "TypeError: emit: a value is a string (UTF-8), a Uint8Array (or another \
                     typed array view) or an ArrayBuffer, not {kind}; use emitJson(key, value) \
                     to emit other values as JSON"
                ),
                &format!("at process (operator.js:{line}:"),
            ],
        );
        assert!(!support::stderr(&out).contains("malformed batch"));
        no_output(dir.path());
    }
}

#[test]
fn a_malformed_batch_from_a_guest_is_reported_as_the_operators_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let component = test_guest("failures-js");
    let out = run_victim(dir.path(), Some(&component), "bad-batch", "");
    assert_clean_failure(
        &out,
        &[
            "operator `victim` subtask",
            "returned a malformed batch: the batch its `process` returned is malformed \
             (record 0: its value ends at byte 0, before its key ends at byte 3); the operator \
             made that batch, with its SDK or bindings, not the host",
        ],
    );
    no_output(dir.path());
}

#[test]
fn an_unknown_mode_fails_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_faulty(dir.path(), "no-such-mode", "");
    assert_clean_failure(
        &out,
        &[
            "operator `victim` subtask",
            "failed to open",
            "no-such-mode",
        ],
    );
}

#[test]
fn guest_log_lines_land_in_the_host_log_tagged_with_their_origin() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), "a b\n").expect("write");
    let job = faulty_job(dir.path(), "logging", "chatty", "");
    let out = support::weir_logging(
        &["run", job.to_str().expect("utf-8")],
        "warn,weir::guest=info",
    );
    let err = support::stderr(&out);
    assert!(out.status.success(), "{err}");
    for subtask in 0..2 {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("(subtask {subtask} of 2)")))
            .unwrap_or_else(|| panic!("no log line of subtask {subtask}:\n{err}"));
        assert!(
            line.contains("faulty operator opened in mode passthrough"),
            "{line}"
        );
        for field in [
            "job=\"logging\"",
            "operator=\"chatty\"",
            &format!("subtask={subtask}"),
            "checkpoint=",
        ] {
            assert!(line.contains(field), "{field} missing in {line}");
        }
    }
}

#[test]
fn after_a_restore_guest_log_lines_name_the_checkpoint_the_run_works_towards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut input = String::new();
    for i in 0..3_000 {
        input.push_str(&format!("w{} w{}\n", i % 40, i % 7));
    }
    std::fs::write(dir.path().join("in.txt"), input).expect("write");
    let job = tokenize_then(
        dir.path(),
        "name = \"relog\"\nbatch_size = 16",
        "chatty",
        "weir-test-faulty",
        "parallelism = 2",
        "[checkpoints]\ninterval_ms = 5\nretain = 3",
    );
    let job = job.to_str().expect("utf-8");
    let out = weir(&["run", job, "-q"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let folder = dir.path().join(".weir-checkpoints/relog/checkpoints");
    let ids = support::checkpoint_ids(&folder);
    assert!(!ids.is_empty(), "no checkpoint in {}", folder.display());
    let (oldest, newest) = (ids[0], ids[ids.len() - 1]);
    assert!(oldest < newest, "{ids:?}");

    let out = support::weir_logging(
        &["run", job, "--restore", &oldest.to_string(), "-q"],
        "warn,weir::guest=info",
    );
    let err = support::stderr(&out);
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("opened in mode"))
        .collect();
    assert_eq!(lines.len(), 2, "one per subtask:\n{err}");
    for line in lines {
        assert!(
            line.contains(&format!("checkpoint={}", newest + 1)),
            "restored {oldest}, so the run's first checkpoint is {}: {line}",
            newest + 1
        );
    }
}

#[test]
fn an_operator_whose_state_grows_past_its_limit_is_stopped_naming_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 200 000 distinct words: about 4 MB of keys and counts over two subtasks, each limited
    // to 1 MiB.
    let mut input = String::new();
    for i in 0..20_000 {
        for j in 0..10 {
            input.push_str(&format!("uniquelongword{i}x{j} "));
        }
        input.push('\n');
    }
    std::fs::write(dir.path().join("in.txt"), input).expect("write");
    let job = tokenize_then(
        dir.path(),
        "name = \"hoarder\"",
        "count",
        "weir-example-counter",
        "parallelism = 2\nlimits = { state_mb = 1 }",
        "",
    );
    let out = weir(&["run", job.to_str().expect("utf-8")]);
    assert_clean_failure(
        &out,
        &[
            "operator `count` subtask",
            "exceeded its state limit of 1 MiB (limits.state_mb): its keyed state grew to",
            "raise `state_mb`",
        ],
    );
    no_output(dir.path());
}
