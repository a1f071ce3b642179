//! `weir serve` and the commands that talk to it: a host started on 127.0.0.1:0 runs jobs
//! submitted with `weir submit`, lists, shows and cancels them, exposes `/metrics`, and
//! refuses every call without the right token.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use support::crash::{committed, running_counts};
use support::host::{Host, TOKEN};
use support::{component, stderr, tokenize_then, toml_path, write_job};

fn submitted_id(out: &Output) -> String {
    assert!(out.status.success(), "submit failed: {}", stderr(out));
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    jobs[0]["id"].as_str().expect("an id").to_owned()
}

fn wordcount_job(dir: &Path, checkpoints: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("in.txt"), "a b a\nc a b\n".repeat(500)).expect("input");
    tokenize_then(
        dir,
        "name = \"wc\"",
        "count",
        "weir-example-counter",
        "parallelism = 2",
        checkpoints,
    )
}

/// A job in `dir` without end: a generator over 1 000 keys -> counter -> discard, with `tail`
/// after the sink.
fn endless_job(dir: &Path, tail: &str) -> std::path::PathBuf {
    write_job(
        dir,
        &format!(
            r#"
            [job]
            name = "endless"
            [source]
            kind = "generator"
            records = 10000000000
            keys = 1000
            [[operators]]
            name = "count"
            component = {counter}
            key_by = "key"
            [sink]
            kind = "discard"
            {tail}
            "#,
            counter = toml_path(&component("weir-example-counter")),
        ),
    )
}

#[test]
fn submit_list_inspect_and_cancel_jobs_through_the_cli() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    let elsewhere = dir.path().join("elsewhere");
    let job = wordcount_job(
        dir.path(),
        &format!(
            "[checkpoints]\nstore = \"file://{}\"\ninterval_ms = 5",
            elsewhere.display()
        ),
    );
    let id = submitted_id(&host.weir(
        &["submit", job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    let info = host.wait(&id);
    assert_eq!(info["status"], "finished", "{info}");
    assert_eq!(info["source_records"], 1000);
    assert_eq!(info["operators"][1]["records_in"], 3000, "{info}");
    assert!(info["last_checkpoint"].as_u64().is_some(), "{info}");
    // The output: every word's running count, 1500 `a`, 1000 `b`, 500 `c`.
    let out = std::fs::read_to_string(dir.path().join("out.txt")).expect("output");
    assert_eq!(out.lines().count(), 3000);
    assert!(out.lines().any(|l| l == "a\t1500") && out.lines().any(|l| l == "c\t500"));
    // Checkpoints live in the job's own folder on the host, whatever the job file says.
    assert!(
        !elsewhere.exists(),
        "the job wrote to a store outside its folder"
    );
    let own = host.data.join("jobs").join(&id).join("checkpoints");
    assert!(
        own.join("wc/checkpoints").is_dir(),
        "no checkpoints in {}",
        own.display()
    );

    let listed = host.weir(&["jobs", "--json"], Some(TOKEN));
    assert!(listed.status.success(), "{}", stderr(&listed));
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(listed[0]["id"], id.as_str());
    let table = host.weir(&["jobs"], Some(TOKEN));
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains(&id) && table.contains("finished"), "{table}");

    // A job without end, cancelled.
    let endless = endless_job(dir.path(), "");
    let endless_id = submitted_id(&host.weir(
        &["submit", endless.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    // `submit` returns once every subtask opened.
    let info = host.job(&endless_id);
    assert_eq!(info["status"], "running");
    assert!(
        info["last_checkpoint"].is_null(),
        "no interval, no checkpoint yet: {info}"
    );
    let asked = host.weir(&["checkpoint", &endless_id], Some(TOKEN));
    assert!(asked.status.success(), "{}", stderr(&asked));
    let deadline = Instant::now() + Duration::from_secs(30);
    while host.job(&endless_id)["last_checkpoint"].is_null() {
        assert!(
            Instant::now() < deadline,
            "the asked-for checkpoint never completed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = host.job(&endless_id)["last_checkpoint"]
        .as_u64()
        .expect("a checkpoint");
    let cancelled = host.weir(&["cancel", &endless_id, "--checkpoint"], Some(TOKEN));
    assert!(cancelled.status.success(), "{}", stderr(&cancelled));
    let info = host.wait(&endless_id);
    assert_eq!(info["status"], "cancelled", "{info}");
    let last = info["last_checkpoint"].as_u64().expect("a checkpoint");
    assert!(last > before, "no last checkpoint before stopping: {info}");
    assert!(info["source_records"].as_u64().expect("count") > 0);

    // Metrics name every job, operator and subtask.
    let (status, metrics) = host.get("/metrics", Some(&format!("Bearer {TOKEN}")));
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains(&format!(
            "weir_records_in_total{{job_id=\"{id}\",job=\"wc\",operator=\"count\",subtask=\"1\"}}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("weir_checkpoints_completed_total"),
        "{metrics}"
    );

    // Unknown jobs and bad job files are the caller's mistake (exit 2).
    let unknown = host.weir(&["job", "job-999"], Some(TOKEN));
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("no job job-999"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn calls_without_the_right_token_are_refused() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    for path in ["/v1/jobs", "/metrics", "/v1/jobs/job-1"] {
        let (status, body) = host.get(path, None);
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains("missing token"), "{body}");
        let (status, body) = host.get(path, Some("Bearer not-the-token"));
        assert_eq!(status, 401, "{path}: {body}");
        let (status, _) = host.get(path, Some(TOKEN));
        assert_eq!(status, 401, "{path}: a token without `Bearer` is refused");
    }
    let wrong = host.weir(&["jobs"], Some("not-the-token"));
    assert_eq!(wrong.status.code(), Some(3), "{}", stderr(&wrong));
    assert!(
        stderr(&wrong).contains("refused the token"),
        "{}",
        stderr(&wrong)
    );
    let none = host.weir(&["jobs"], None);
    assert_eq!(none.status.code(), Some(2), "{}", stderr(&none));
    assert!(stderr(&none).contains("no token"), "{}", stderr(&none));
    // The token can also come from the config file.
    let config = host.data.join(".config/weir");
    std::fs::create_dir_all(&config).expect("config dir");
    std::fs::write(config.join("token"), format!("{TOKEN}\n")).expect("token file");
    let from_file = host.weir(&["jobs", "--json"], None);
    assert!(from_file.status.success(), "{}", stderr(&from_file));
}

#[test]
fn a_host_stopped_mid_job_resumes_it_from_its_latest_checkpoint_with_exactly_once_output() {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = 60_000;
    let mut input = String::new();
    for i in 0..lines {
        input.push_str(&format!("w{} w{}\n", i % 700, i % 300));
    }
    let job = wordcount_job(dir.path(), "[checkpoints]\ninterval_ms = 5");
    std::fs::write(dir.path().join("in.txt"), &input).expect("input");
    let text = std::fs::read_to_string(&job)
        .expect("job")
        .replace("name = \"wc\"", "name = \"wc\"\nbatch_size = 16");
    std::fs::write(&job, text).expect("job");
    // The job lasts at least 2 s: it is still running when its third checkpoint completes.
    support::pace_source(&job, 30_000);

    let first = Host::start(data.path());
    let id = submitted_id(&first.weir(
        &["submit", job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = first.job(&id);
        assert_eq!(
            info["status"], "running",
            "the job ended before the host was stopped: {info}"
        );
        if info["last_checkpoint"].as_u64().unwrap_or(0) >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "no checkpoint: {info}");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(first); // SIGKILL

    let second = Host::start(data.path());
    let info = second.wait(&id);
    assert_eq!(info["status"], "finished", "{info}");
    let expected = running_counts(input.split_whitespace());
    let got = committed(dir.path());
    assert_eq!(got.len(), expected.len(), "lost or repeated lines");
    assert!(got == expected, "output differs");
}

/// A job that runs the test guest `faulty` in `mode` (triggered by the word "boom") in a
/// folder of its own, with `lines` added to the operator's section and `tail` after the sink.
fn faulty_job(name: &str, mode: &str, lines: &str, tail: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    // The bad word first: every record after it waits behind a failed subtask, so no
    // checkpoint that covers any output can complete, however fast the machine.
    let mut input = String::from("boom\n");
    input.push_str(&"w1 w2 w3\n".repeat(2000));
    std::fs::write(dir.path().join("in.txt"), input).expect("input");
    tokenize_then(
        dir.path(),
        &format!("name = \"{name}\""),
        "victim",
        "weir-test-faulty",
        &format!("config = {{ mode = \"{mode}\", word = \"boom\" }}\n{lines}"),
        tail,
    );
    dir
}

#[test]
fn misbehaving_jobs_are_stopped_at_their_limits_while_a_neighbour_finishes() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let restart_once = "[checkpoints]\ninterval_ms = 20\nrestart_attempts = 1";
    // (job, its folder, what its error must say, whether it restarted once)
    let spinner = faulty_job(
        "spinner",
        "loop-on",
        "limits = { cpu_ms_per_call = 300 }",
        restart_once,
    );
    let hog = faulty_job(
        "hog",
        "alloc-on",
        "limits = { memory_mb = 64 }",
        restart_once,
    );
    let crasher = faulty_job("crasher", "trap-on", "", restart_once);
    // 200 000 distinct words over two subtasks limited to 1 MiB of state each; this job's
    // policy restarts on a limit, so it fails a second time before it gives up. What a
    // checkpoint completed before the limit committed is exact (each word counted once).
    let hoarder = tempfile::tempdir().expect("tempdir");
    let mut input = String::new();
    for i in 0..20_000 {
        for j in 0..10 {
            input.push_str(&format!("uniquelongword{i}x{j} "));
        }
        input.push('\n');
    }
    std::fs::write(hoarder.path().join("in.txt"), input).expect("input");
    tokenize_then(
        hoarder.path(),
        "name = \"hoarder\"",
        "count",
        "weir-example-counter",
        "parallelism = 2\nlimits = { state_mb = 1 }",
        "[checkpoints]\ninterval_ms = 60000\nrestart_attempts = 1\non_limit = \"restart\"",
    );
    let bad: [(&str, &Path, &[&str], bool); 4] = [
        (
            "spinner",
            spinner.path(),
            &[
                "operator `victim` subtask",
                "exceeded its CPU time limit of 300 ms per call (limits.cpu_ms_per_call)",
            ],
            false,
        ),
        (
            "hog",
            hog.path(),
            &[
                "operator `victim` subtask",
                "exceeded its memory limit",
                "64 MiB",
            ],
            false,
        ),
        (
            "crasher",
            crasher.path(),
            &[
                "operator `victim` subtask",
                "trapped",
                "trap on value `boom`",
            ],
            true,
        ),
        (
            "hoarder",
            hoarder.path(),
            &[
                "operator `count` subtask",
                "exceeded its state limit",
                "1 MiB",
            ],
            true,
        ),
    ];

    // The neighbour: a word count big enough to run while the others fail.
    let good = tempfile::tempdir().expect("tempdir");
    let mut input = String::new();
    for i in 0..100_000 {
        input.push_str(&format!("w{} w{}\n", i % 500, i % 70));
    }
    // A full snapshot every other checkpoint, so that cleanup has artifacts to delete.
    let job = wordcount_job(
        good.path(),
        "[checkpoints]\ninterval_ms = 10\nretain = 1\nfull_snapshot_every = 2",
    );
    std::fs::write(good.path().join("in.txt"), &input).expect("input");
    let good_id = submitted_id(&host.weir(
        &["submit", job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    let submitted: Vec<String> = bad
        .iter()
        .map(|(_, dir, _, _)| {
            let job = dir.join("job.toml");
            submitted_id(&host.weir(
                &["submit", job.to_str().expect("utf-8"), "--json"],
                Some(TOKEN),
            ))
        })
        .collect();

    for ((name, dir, expected, restarted), id) in bad.iter().zip(&submitted) {
        let info = host.wait(id);
        assert_eq!(info["status"], "failed", "{name}: {info}");
        let error = info["error"].as_str().expect("an error");
        for part in *expected {
            assert!(error.contains(part), "{name}: `{part}` missing in: {error}");
        }
        assert_eq!(
            error.contains("(after 1 restart)"),
            *restarted,
            "{name}: the restart policy was not followed: {error}"
        );
        let committed = std::fs::read_to_string(dir.join("out.txt")).unwrap_or_default();
        if *name == "hoarder" {
            let wrong: Vec<&str> = committed
                .split_terminator('\n')
                .filter(|l| !(l.starts_with("uniquelongword") && l.ends_with("\t1")))
                .collect();
            assert!(wrong.is_empty(), "hoarder committed {wrong:?}");
            assert!(committed.is_empty() || committed.ends_with('\n'));
        } else {
            assert!(
                committed.is_empty(),
                "{name} committed output of a failed run"
            );
        }
    }
    assert_eq!(
        host.job(&submitted[0])["error"]
            .as_str()
            .map(|e| e.contains("CPU")),
        Some(true)
    );

    let info = host.wait(&good_id);
    assert_eq!(info["status"], "finished", "{info}");
    assert_eq!(
        committed(good.path()),
        running_counts(input.split_whitespace())
    );

    // The guests' log lines of one job, with operator, subtask and checkpoint, and the
    // panic message the crasher printed before its trap.
    let crasher_id = &submitted[2];
    let out = host.weir(&["job", crasher_id, "--logs", "--json"], Some(TOKEN));
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    let opened = lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("faulty operator opened in mode trap-on"))
        })
        .unwrap_or_else(|| panic!("no open line in {lines:?}"));
    assert_eq!(opened["operator"], "victim");
    assert_eq!(opened["stream"], "log");
    assert!(opened["checkpoint"].as_u64().is_some(), "{opened}");
    assert!(
        lines.iter().any(|l| l["stream"] == "stderr"
            && l["message"]
                .as_str()
                .is_some_and(|m| m.contains("trap on value `boom`"))),
        "no panic message in {lines:?}"
    );
    // As text, for people; only the crasher's lines.
    let out = host.weir(&["job", crasher_id, "--logs", "--tail", "500"], Some(TOKEN));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("INFO  victim[") && l.contains("opened in mode trap-on")),
        "{text}"
    );
    assert!(
        !text.contains("mode loop-on"),
        "another job's lines: {text}"
    );

    // The neighbour's metrics: batch latency, state size, snapshots, cleanup.
    let (_, metrics) = host.get("/metrics", Some(&format!("Bearer {TOKEN}")));
    let value = |family: &str| -> f64 {
        let prefix =
            format!("{family}{{job_id=\"{good_id}\",job=\"wc\",operator=\"count\",subtask=\"0\"");
        metrics
            .lines()
            .find(|l| l.starts_with(&prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {family} in\n{metrics}"))
    };
    assert!(value("weir_batch_latency_seconds_count") > 0.0);
    assert!(value("weir_bytes_in_total") > 0.0);
    assert!(value("weir_state_bytes") > 0.0);
    assert!(value("weir_checkpoint_dirty_keys_total") > 0.0);
    assert!(value("weir_checkpoint_uploaded_bytes_total") > 0.0);
    // Four checkpoints or more, so at least one full snapshot replaced a chain.
    assert!(
        info["checkpoints_completed"].as_u64().expect("count") >= 4,
        "{info}"
    );
    assert!(
        value("weir_checkpoint_cleanup_deletes_total") > 0.0,
        "{metrics}"
    );
}

#[test]
fn a_job_cannot_reach_another_jobs_files_and_an_ended_job_restarts_from_its_checkpoint() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    let job = endless_job(dir.path(), "[checkpoints]\ninterval_ms = 20");
    let id = submitted_id(&host.weir(
        &["submit", job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    while host.job(&id)["last_checkpoint"].as_u64().unwrap_or(0) < 2 {
        assert!(Instant::now() < deadline, "no checkpoint");
        std::thread::sleep(Duration::from_millis(10));
    }

    // Restarting: refused while running, and for a checkpoint that does not exist.
    let running = host.weir(&["restart", &id], Some(TOKEN));
    assert_eq!(running.status.code(), Some(2), "{}", stderr(&running));
    assert!(
        stderr(&running).contains("is running"),
        "{}",
        stderr(&running)
    );
    let cancelled = host.weir(&["cancel", &id, "--checkpoint"], Some(TOKEN));
    assert!(cancelled.status.success(), "{}", stderr(&cancelled));
    let info = host.wait(&id);
    assert_eq!(info["status"], "cancelled", "{info}");
    let last = info["last_checkpoint"].as_u64().expect("a checkpoint");

    // A job whose source is another job's checkpoint, or whose sink would write into the
    // host's data directory, is refused (the job is stopped, so its checkpoints stay put).
    let metadata = data
        .path()
        .join("jobs")
        .join(&id)
        .join("checkpoints/endless/checkpoints");
    let stolen = std::fs::read_dir(&metadata)
        .expect("checkpoints")
        .flatten()
        .next()
        .expect("a checkpoint file")
        .path();
    let thief = tempfile::tempdir().expect("tempdir");
    for (source, sink) in [
        (stolen.clone(), thief.path().join("out.txt")),
        (
            // Through `..` from a folder outside, too.
            thief
                .path()
                .join("../")
                .join(data.path().file_name().expect("name"))
                .join("jobs")
                .join(&id)
                .join("job.toml"),
            thief.path().join("out.txt"),
        ),
        (
            job.clone(),
            data.path().join("jobs").join(&id).join("guest.log"),
        ),
    ] {
        let text = format!(
            r#"
            [job]
            name = "thief"
            [source]
            kind = "text-lines"
            path = {source}
            [[operators]]
            name = "count"
            component = {counter}
            key_by = "key"
            [sink]
            kind = "file"
            path = {sink}
            "#,
            source = toml_path(&source),
            sink = toml_path(&sink),
            counter = toml_path(&component("weir-example-counter")),
        );
        let file = write_job(thief.path(), &text);
        let out = host.weir(&["submit", file.to_str().expect("utf-8")], Some(TOKEN));
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("inside the host's data directory"),
            "{}",
            stderr(&out)
        );
    }

    let missing = host.weir(&["restart", &id, "--checkpoint", "999999"], Some(TOKEN));
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("999999"), "{}", stderr(&missing));

    // From its latest checkpoint: it runs again, and its checkpoint ids continue after it.
    let restarted = host.weir(&["restart", &id, "--json"], Some(TOKEN));
    assert!(restarted.status.success(), "{}", stderr(&restarted));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = host.job(&id);
        assert_eq!(info["status"], "running", "{info}");
        if info["last_checkpoint"].as_u64().is_some_and(|c| c > last) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint after the restart: {info}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let stopped = host.weir(&["cancel", &id], Some(TOKEN));
    assert!(stopped.status.success(), "{}", stderr(&stopped));
    assert_eq!(host.wait(&id)["status"], "cancelled");
}

/// Standard output of a command that must succeed.
fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "weir failed ({:?}):\n{}",
        out.status.code(),
        stderr(out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_job_file_named_without_its_folder_is_submitted_from_the_current_one() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    wordcount_job(dir.path(), "");
    // `weir submit job.toml`, as the README writes it: no folder in the path.
    let id = submitted_id(&host.weir_in(
        Some(dir.path()),
        &["submit", "job.toml", "--json"],
        Some(TOKEN),
    ));
    let info = host.wait(&id);
    assert_eq!(info["status"], "finished", "{info}");
    // The relative source and sink were read and written in the job file's folder.
    let out = std::fs::read_to_string(dir.path().join("out.txt")).expect("output");
    assert_eq!(out.lines().count(), 3000);
    assert!(out.lines().any(|l| l == "a\t1500"), "{out}");
}

#[test]
fn a_submitted_jobs_dead_letters_land_beside_its_job_file_never_in_the_data_directory() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("events.jsonl"),
        "{\"u\":\"a\"}\nnot json\n{\"u\":\"b\"}\n",
    )
    .expect("events");
    let job = |dead_letter: &str| {
        write_job(
            dir.path(),
            &format!(
                r#"
                [job]
                name = "letters"
                [source]
                kind = "json-lines"
                path = "events.jsonl"
                on_bad_record = {{ dead_letter = {dead_letter} }}
                [[operators]]
                name = "pass"
                component = {component}
                [sink]
                kind = "file"
                path = "out.txt"
                "#,
                component = toml_path(&component("weir-test-faulty")),
            ),
        )
    };
    job("\"bad.jsonl\"");
    let id = submitted_id(&host.weir_in(
        Some(dir.path()),
        &["submit", "job.toml", "--json"],
        Some(TOKEN),
    ));
    assert_eq!(host.wait(&id)["status"], "finished");
    let letters = std::fs::read_to_string(dir.path().join("bad.jsonl")).expect("dead letters");
    let letter: serde_json::Value = serde_json::from_str(letters.trim()).expect("one letter");
    assert_eq!(letter["value"], "not json", "{letter}");
    assert!(
        letter["origin"]
            .as_str()
            .is_some_and(|o| o.ends_with("events.jsonl line 2")),
        "{letter}"
    );

    let inside = toml_path(&data.path().join("stolen.jsonl"));
    let out = host.weir(
        &["submit", job(&inside).to_str().expect("utf-8")],
        Some(TOKEN),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the dead-letter path"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn submit_warns_about_a_component_older_than_its_projects_sources() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    // A project folder (operator.py marks a Python one) whose component was built a minute
    // before its source last changed.
    let project = dir.path().join("counter");
    std::fs::create_dir(&project).expect("project folder");
    let built = project.join("operator.wasm");
    std::fs::copy(component("weir-example-counter"), &built).expect("component");
    std::fs::File::options()
        .write(true)
        .open(&built)
        .expect("open")
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(60))
        .expect("set mtime");
    std::fs::write(project.join("operator.py"), "# changed after the build\n").expect("source");
    let job = write_job(
        dir.path(),
        r#"
        [job]
        name = "stale"
        [source]
        kind = "generator"
        records = 1000
        keys = 10
        [[operators]]
        name = "count"
        component = "counter/operator.wasm"
        key_by = "key"
        [sink]
        kind = "discard"
        "#,
    );
    let out = host.weir(
        &["submit", job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    );
    let warning = format!(
        "warning: operator `count`: {} is newer than its component {}; rebuild it with \
         `weir build {}`",
        project.join("operator.py").display(),
        built.display(),
        project.display()
    );
    assert!(stderr(&out).contains(&warning), "{}", stderr(&out));
    // A warning: the job still runs.
    let id = submitted_id(&out);
    assert_eq!(host.wait(&id)["status"], "finished");
}

#[test]
fn a_served_jobs_checkpoints_read_through_the_host_as_from_its_folder() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    let job = wordcount_job(dir.path(), "[checkpoints]\ninterval_ms = 5\nretain = 3");
    let id = submitted_id(&host.weir(
        &["submit", job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    let info = host.wait(&id);
    assert_eq!(info["status"], "finished", "{info}");
    let last = info["last_checkpoint"].as_u64().expect("a checkpoint");
    let folder = data.path().join("jobs").join(&id).join("checkpoints");
    let folder = folder.to_str().expect("utf-8");

    // The same output whichever way the checkpoints are reached, JSON included.
    let local = |args: &[&str]| stdout(&support::weir(args));
    let served = |args: &[&str]| stdout(&host.weir(args, Some(TOKEN)));
    let table = served(&["checkpoints", "list", &id]);
    assert_eq!(table, local(&["checkpoints", "list", folder]));
    assert!(table.lines().count() >= 2, "{table}");
    let rows: serde_json::Value =
        serde_json::from_str(&served(&["checkpoints", "list", &id, "--json"])).expect("JSON");
    assert_eq!(
        rows,
        serde_json::from_str::<serde_json::Value>(&local(&[
            "checkpoints",
            "list",
            folder,
            "--json"
        ]))
        .expect("JSON")
    );
    let rows = rows.as_array().expect("an array");
    assert_eq!(rows.last().expect("a row")["id"], last);
    assert!(rows.iter().all(|r| r["job"] == "wc"), "{rows:?}");

    let shown = served(&["checkpoints", "show", "latest", "--store", &id]);
    assert_eq!(
        shown,
        local(&["checkpoints", "show", "latest", "--store", folder])
    );
    assert!(shown.contains(&format!("checkpoint  {last}\n")), "{shown}");
    assert!(!shown.contains("missing"), "{shown}");
    let json = served(&[
        "checkpoints",
        "show",
        &last.to_string(),
        "--store",
        &id,
        "--json",
    ]);
    assert_eq!(
        json,
        local(&["checkpoints", "show", "latest", "--store", folder, "--json"])
    );
    let metadata: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(metadata["id"], last);
    assert_eq!(metadata["finished"], true);

    // The API behind it: the token is needed as everywhere, a detail says what is stored.
    let bearer = format!("Bearer {TOKEN}");
    let (status, _) = host.get(&format!("/v1/jobs/{id}/checkpoints"), None);
    assert_eq!(status, 401);
    let (status, _) = host.get(
        &format!("/v1/jobs/{id}/checkpoints/latest"),
        Some("Bearer wrong-token-of-some-length"),
    );
    assert_eq!(status, 401);
    let (status, body) = host.get(&format!("/v1/jobs/{id}/checkpoints/latest"), Some(&bearer));
    assert_eq!(status, 200, "{body}");
    let detail: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(detail["id"], last);
    let stored = detail["stored"].as_object().expect("stored artifacts");
    assert!(!stored.is_empty(), "{detail}");
    for artifact in detail["operators"][1]["subtasks"][0]["chain"]
        .as_array()
        .expect("a chain")
    {
        let path = artifact["path"].as_str().expect("a path");
        assert_eq!(stored[path], artifact["bytes"], "{path}");
    }
    let (status, body) = host.get(&format!("/v1/jobs/{id}/checkpoints/newest"), Some(&bearer));
    assert_eq!(status, 400, "{body}");

    // Clear errors, each the caller's mistake (exit 2), or the token's (exit 3).
    for (args, expected) in [
        (vec!["checkpoints", "list", "job-999"], "no job job-999"),
        (
            vec!["checkpoints", "show", "999999", "--store", &id],
            "checkpoint 999999 of job `wc` does not exist",
        ),
    ] {
        let out = host.weir(&args, Some(TOKEN));
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
    }
    let refused = host.weir(
        &["checkpoints", "list", &id],
        Some("wrong-token-of-some-length"),
    );
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));

    // A job that has none yet (none before an hour).
    let endless = endless_job(dir.path(), "[checkpoints]\ninterval_ms = 3600000");
    let endless_id = submitted_id(&host.weir(
        &["submit", endless.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    let none = host.weir(
        &["checkpoints", "show", "latest", "--store", &endless_id],
        Some(TOKEN),
    );
    assert_eq!(none.status.code(), Some(2), "{}", stderr(&none));
    assert!(
        stderr(&none).contains("job `endless` has no completed checkpoint yet"),
        "{}",
        stderr(&none)
    );
    assert_eq!(
        stdout(&host.weir(&["checkpoints", "list", &endless_id], Some(TOKEN))).trim(),
        "no completed checkpoints"
    );
    assert!(
        host.weir(&["cancel", &endless_id], Some(TOKEN))
            .status
            .success()
    );
}

#[test]
fn weir_checkpoint_waits_for_the_checkpoint_and_says_which_it_was() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    // Checkpoints kept, but none before an hour: only those asked for.
    let job = endless_job(dir.path(), "[checkpoints]\ninterval_ms = 3600000");
    let id = submitted_id(&host.weir(
        &["submit", job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    let said = stdout(&host.weir(&["checkpoint", &id], Some(TOKEN)));
    let prefix = format!("checkpoint 1 of {id} completed: ");
    let size = said
        .trim()
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{said:?} does not start with {prefix:?}"));
    assert_eq!(host.job(&id)["last_checkpoint"], 1);
    // Its size as `weir checkpoints list` counts it.
    let rows: serde_json::Value = serde_json::from_str(&stdout(
        &host.weir(&["checkpoints", "list", &id, "--json"], Some(TOKEN)),
    ))
    .expect("JSON");
    assert_eq!(
        size,
        format!("{} bytes in 1 artifact", rows[0]["bytes"]),
        "{rows}"
    );

    // A job that keeps no checkpoints takes one (its barrier passes), and stores nothing.
    let plain_dir = tempfile::tempdir().expect("tempdir");
    let plain = endless_job(plain_dir.path(), "");
    let plain_id = submitted_id(&host.weir(
        &["submit", plain.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    let said = stdout(&host.weir(&["checkpoint", &plain_id], Some(TOKEN)));
    assert!(
        said.starts_with(&format!(
            "checkpoint 1 of {plain_id} completed; the job keeps no checkpoints"
        )),
        "{said}"
    );
    let out = host.weir(&["checkpoints", "list", &plain_id], Some(TOKEN));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("keeps no checkpoints"),
        "{}",
        stderr(&out)
    );

    // An ended job takes none: the caller's mistake.
    for job in [&id, &plain_id] {
        assert!(host.weir(&["cancel", job], Some(TOKEN)).status.success());
        assert_eq!(host.wait(job)["status"], "cancelled");
    }
    let out = host.weir(&["checkpoint", &id], Some(TOKEN));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("job {id} is cancelled")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_job_resumed_by_a_restarted_host_reports_the_totals_of_an_uninterrupted_run() {
    let lines = 60_000;
    let mut input = String::new();
    for i in 0..lines {
        input.push_str(&format!("w{} w{}\n", i % 700, i % 300));
    }
    let submit = |host: &Host, dir: &Path| {
        let job = wordcount_job(dir, "[checkpoints]\ninterval_ms = 5");
        std::fs::write(dir.join("in.txt"), &input).expect("input");
        let text = std::fs::read_to_string(&job)
            .expect("job")
            .replace("name = \"wc\"", "name = \"wc\"\nbatch_size = 16");
        std::fs::write(&job, text).expect("job");
        // At least 2 s: still running when its third checkpoint completes.
        support::pace_source(&job, 30_000);
        submitted_id(&host.weir(
            &["submit", job.to_str().expect("utf-8"), "--json"],
            Some(TOKEN),
        ))
    };
    // What `weir job` reports of records, per operator and end to end.
    let totals = |info: &serde_json::Value| {
        let mut totals = vec![info["source_records"].clone(), info["sink_records"].clone()];
        for o in info["operators"].as_array().expect("operators") {
            totals.extend([o["records_in"].clone(), o["records_out"].clone()]);
        }
        totals
    };

    let data = tempfile::tempdir().expect("tempdir");
    let whole = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let uninterrupted = host.wait(&submit(&host, whole.path()));
    assert_eq!(uninterrupted["status"], "finished", "{uninterrupted}");
    assert_eq!(uninterrupted["source_records"], lines, "{uninterrupted}");

    let dir = tempfile::tempdir().expect("tempdir");
    let id = submit(&host, dir.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = host.job(&id);
        assert_eq!(
            info["status"], "running",
            "ended before the host stopped: {info}"
        );
        if info["last_checkpoint"].as_u64().unwrap_or(0) >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "no checkpoint: {info}");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(host); // SIGKILL

    let second = Host::start(data.path());
    let resumed = second.wait(&id);
    assert_eq!(resumed["status"], "finished", "{resumed}");
    assert_eq!(totals(&resumed), totals(&uninterrupted), "{resumed}");

    // `/metrics` says where the last checkpoint's time went, within its duration.
    let (_, metrics) = second.get("/metrics", Some(&format!("Bearer {TOKEN}")));
    let job_value = |family: &str| -> f64 {
        let prefix = format!("{family}{{job_id=\"{id}\",job=\"wc\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {family} in\n{metrics}"))
    };
    let duration = job_value("weir_checkpoint_duration_seconds");
    assert!(duration > 0.0, "{metrics}");
    for family in [
        "weir_checkpoint_start_delay_seconds",
        "weir_checkpoint_alignment_seconds",
        "weir_checkpoint_sync_pause_seconds",
    ] {
        let value = job_value(family);
        assert!(
            (0.0..=duration).contains(&value),
            "{family} {value} > {duration}"
        );
    }
    assert!(
        job_value("weir_checkpoint_start_delay_seconds") > 0.0,
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "weir_barrier_start_delay_seconds{{job_id=\"{id}\",job=\"wc\",operator=\"count\",subtask=\"1\"}}"
        )),
        "{metrics}"
    );
}
