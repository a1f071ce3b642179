//! `weir checkpoints list|show` against checkpoint metadata written directly into a local
//! store: no job runs, so these tests need no guest component.

use crate::support;

use std::path::Path;
use std::process::Output;

use object_store::{ObjectStoreExt, PutPayload};
use weir_host::checkpoint::CheckpointStore;
use weir_host::checkpoint::metadata::{
    ArtifactRef, CheckpointMetadata, METADATA_VERSION, OperatorHandles, SubtaskHandle,
};
use weir_host::ids::CheckpointId;

use support::{assert_clean_failure, weir};

/// 2023-11-14 22:13:20 UTC.
const T0_MS: u64 = 1_700_000_000_000;

fn artifact(subtask: u32, checkpoint: u64, bytes: u64, full: bool) -> ArtifactRef {
    ArtifactRef {
        path: format!("state/count/{subtask}/chk-{checkpoint:020}-run1.inc"),
        checkpoint: CheckpointId(checkpoint),
        bytes,
        full,
        owner: subtask,
    }
}

/// Checkpoint 1: one full artifact per subtask; checkpoint 2: each chain grows by an
/// incremental one.
fn metadata(job: &str, id: u64) -> CheckpointMetadata {
    let chains = [
        vec![artifact(0, 1, 100, true), artifact(0, 2, 30, false)],
        vec![artifact(1, 1, 150, true), artifact(1, 2, 45, false)],
    ];
    CheckpointMetadata {
        version: METADATA_VERSION,
        job: job.to_owned(),
        id: CheckpointId(id),
        completed_at_ms: T0_MS + (id - 1) * 1000,
        finished: id == 2,
        key_groups: 128,
        source: serde_json::json!({ "offset": 1234 * id, "line": 10 * id }),
        sink: None,
        dead_letters: Default::default(),
        source_max_timestamp: None,
        operators: vec![OperatorHandles {
            name: "count".into(),
            parallelism: 2,
            component: None,
            wit: None,
            state_encoding: Some("cbor".into()),
            subtasks: chains
                .iter()
                .enumerate()
                .map(|(i, chain)| SubtaskHandle {
                    subtask: i as u32,
                    key_groups: (64 * i as u32, 64 * (i as u32 + 1)),
                    chain: chain
                        .iter()
                        .filter(|a| a.checkpoint.0 <= id)
                        .cloned()
                        .collect(),
                    live_bytes: 100,
                    watermark: None,
                    timers: 0,
                    states: Vec::new(),
                })
                .collect(),
        }],
        timing: None,
        counts: None,
    }
}

fn url_of(dir: &Path) -> String {
    url::Url::from_directory_path(dir)
        .expect("absolute path")
        .to_string()
}

/// Writes checkpoints 1 and 2 of `job`, and every artifact's object except subtask 1's of
/// checkpoint 2, so that `show` reports it missing.
fn write_checkpoints(url: &str, job: &str, ids: &[u64]) -> Vec<CheckpointMetadata> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = CheckpointStore::open(url, job).expect("open store");
    runtime.block_on(async {
        let mut written = Vec::new();
        for &id in ids {
            let m = metadata(job, id);
            store.write_metadata(&m).await.expect("write metadata");
            for a in m.artifacts() {
                if a.path != artifact(1, 2, 45, false).path {
                    store
                        .object_store()
                        .put(
                            &store.resolve(&a.path),
                            PutPayload::from(vec![7u8; a.bytes as usize]),
                        )
                        .await
                        .expect("put artifact");
                }
            }
            written.push(m);
        }
        written
    })
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "weir failed ({:?}):\n{}",
        out.status.code(),
        support::stderr(out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn list_and_show_a_jobs_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = url_of(dir.path());
    let written = write_checkpoints(&url, "wordcount", &[1, 2]);

    let table = stdout(&weir(&["checkpoints", "list", &url]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    for column in [
        "JOB",
        "ID",
        "COMPLETED",
        "FINISHED",
        "SUBTASKS",
        "ARTIFACTS",
        "BYTES",
    ] {
        assert!(lines[0].contains(column), "{table}");
    }
    let words = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        words(lines[1]),
        [
            "wordcount",
            "1",
            "2023-11-14",
            "22:13:20",
            "UTC",
            "no",
            "2",
            "2",
            "250"
        ],
        "{table}"
    );
    assert_eq!(
        words(lines[2]),
        [
            "wordcount",
            "2",
            "2023-11-14",
            "22:13:21",
            "UTC",
            "yes",
            "2",
            "4",
            "325"
        ],
        "{table}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&weir(&["checkpoints", "list", &url, "--json"])))
            .expect("list --json prints JSON");
    let rows = json.as_array().expect("an array");
    assert_eq!(rows.len(), 2, "{json}");
    assert_eq!(rows[1]["job"], "wordcount");
    assert_eq!(rows[1]["id"], 2);
    assert_eq!(rows[1]["completed_at_ms"], T0_MS + 1000);
    assert_eq!(rows[1]["finished"], true);
    assert_eq!(rows[1]["subtasks"], 2);
    assert_eq!(rows[1]["artifacts"], 4);
    assert_eq!(rows[1]["bytes"], 325);

    let shown = stdout(&weir(&["checkpoints", "show", "2", "--store", &url]));
    for expected in [
        "job         wordcount",
        "checkpoint  2",
        "completed   2023-11-14 22:13:21 UTC",
        "finished    yes",
        r#"source      {"line":20,"offset":2468}"#,
        "key groups  128",
        "artifacts   4 (325 bytes)",
        "operator `count` (parallelism 2)",
        "subtask 0: key groups 0..64, chain of 2, 130 bytes (100 + 30)",
        "subtask 1: key groups 64..128, chain of 2, 195 bytes (150 + 45)",
        "oldest increment 1, live 100 bytes, stored 130 bytes, space amplification 1.30",
        "oldest increment 1, live 100 bytes, stored 195 bytes, space amplification 1.95",
    ] {
        assert!(shown.contains(expected), "lacks {expected:?}:\n{shown}");
    }
    // Each artifact: path, checkpoint, size, kind, owner, size found in the store.
    let row = |path: &str| {
        let line = shown
            .lines()
            .find(|l| l.contains(path))
            .unwrap_or_else(|| panic!("no row for {path}:\n{shown}"));
        words(line)
    };
    assert_eq!(
        row(&artifact(0, 1, 100, true).path)[1..],
        ["1", "100", "full", "0", "100"]
    );
    assert_eq!(
        row(&artifact(0, 2, 30, false).path)[1..],
        ["2", "30", "incremental", "0", "30"]
    );
    assert_eq!(
        row(&artifact(1, 1, 150, true).path)[1..],
        ["1", "150", "full", "1", "150"]
    );
    assert_eq!(
        row(&artifact(1, 2, 45, false).path)[1..],
        ["2", "45", "incremental", "1", "missing"]
    );

    let json = stdout(&weir(&[
        "checkpoints",
        "show",
        "2",
        "--store",
        &url,
        "--json",
    ]));
    let parsed: CheckpointMetadata = serde_json::from_str(&json).expect("show --json is metadata");
    assert_eq!(parsed, written[1]);

    let out = weir(&["checkpoints", "show", "99", "--store", &url]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(&out, &["checkpoint 99", "wordcount", "1, 2"]);
}

#[test]
fn a_job_file_names_its_store_and_job_and_several_jobs_need_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store_dir = dir.path().join("store");
    std::fs::create_dir(&store_dir).expect("mkdir");
    let url = url_of(&store_dir);
    write_checkpoints(&url, "wordcount", &[1, 2]);
    write_checkpoints(&url, "other", &[1]);

    let table = stdout(&weir(&["checkpoints", "list", &url]));
    let jobs: Vec<(&str, &str)> = table
        .lines()
        .skip(1)
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().expect("job"), w.next().expect("id"))
        })
        .collect();
    assert_eq!(
        jobs,
        [("other", "1"), ("wordcount", "1"), ("wordcount", "2")],
        "{table}"
    );

    let out = weir(&["checkpoints", "show", "1", "--store", &url]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(&out, &["several jobs", "other, wordcount", "--job"]);
    let shown = stdout(&weir(&[
        "checkpoints",
        "show",
        "1",
        "--store",
        &url,
        "--job",
        "other",
    ]));
    assert!(shown.contains("job         other"), "{shown}");

    // A job file: its store and its job only.
    std::fs::write(dir.path().join("input.txt"), "a b\n").expect("input");
    std::fs::write(dir.path().join("op.wasm"), b"").expect("component stand-in");
    let job = support::write_job(
        dir.path(),
        &format!(
            r#"
[job]
name = "wordcount"
[source]
kind = "text-lines"
path = "input.txt"
[[operators]]
name = "count"
component = "op.wasm"
[sink]
kind = "discard"
[checkpoints]
store = {url:?}
"#
        ),
    );
    let job = job.to_str().expect("utf-8 path");
    let table = stdout(&weir(&["checkpoints", "list", job]));
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(!table.contains("other"), "{table}");
    let shown = stdout(&weir(&["checkpoints", "show", "2", "--store", job]));
    assert!(shown.contains("job         wordcount"), "{shown}");
}

#[test]
fn empty_and_missing_stores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = url_of(dir.path());
    let out = stdout(&weir(&["checkpoints", "list", &url]));
    assert_eq!(out.trim(), "no completed checkpoints");
    let out = stdout(&weir(&["checkpoints", "list", &url, "--json"]));
    assert_eq!(out.trim(), "[]");

    let missing = url_of(&dir.path().join("nowhere"));
    let out = weir(&["checkpoints", "list", &missing]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(&out, &["does not exist"]);
    assert!(
        !dir.path().join("nowhere").exists(),
        "listing created the folder"
    );

    let out = weir(&["checkpoints", "list", "ftp://host/x"]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(&out, &["ftp://host/x"]);

    let out = weir(&["checkpoints", "show", "1", "--store", &url]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(&out, &["checkpoint 1 does not exist", "no checkpoints"]);
}

/// Runs `weir` in `dir` with `args`.
fn weir_in(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .current_dir(dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .output()
        .expect("weir runs")
}

#[test]
fn a_folder_is_read_as_a_store_or_as_one_jobs_folder_and_latest_is_the_newest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir(&store).expect("mkdir");
    let url = url_of(&store);
    write_checkpoints(&url, "wordcount", &[1, 2]);
    write_checkpoints(&url, "other", &[1]);
    let by_url = stdout(&weir(&["checkpoints", "list", &url]));

    // A store folder, absolute or relative to the current folder, is its `file://` URL.
    let absolute = store.to_str().expect("utf-8");
    assert_eq!(stdout(&weir(&["checkpoints", "list", absolute])), by_url);
    assert_eq!(
        stdout(&weir_in(dir.path(), &["checkpoints", "list", "store"])),
        by_url
    );
    assert_eq!(
        stdout(&weir_in(&store, &["checkpoints", "list", "."])),
        by_url
    );

    // One job's folder, or its `checkpoints/` folder: that job only.
    let wordcount_rows: Vec<&str> = by_url
        .lines()
        .filter(|l| l.starts_with("wordcount") || l.starts_with("JOB"))
        .collect();
    for folder in ["store/wordcount", "store/wordcount/checkpoints"] {
        let table = stdout(&weir_in(dir.path(), &["checkpoints", "list", folder]));
        assert_eq!(
            table.lines().collect::<Vec<_>>(),
            wordcount_rows,
            "{folder}"
        );
        // Without --job, though the store holds two jobs.
        let shown = stdout(&weir_in(
            dir.path(),
            &["checkpoints", "show", "1", "--store", folder],
        ));
        assert!(shown.contains("job         wordcount"), "{shown}");
    }

    // `latest`: the newest completed checkpoint, the same as naming it.
    let latest = stdout(&weir_in(
        dir.path(),
        &[
            "checkpoints",
            "show",
            "latest",
            "--store",
            "store/wordcount",
        ],
    ));
    assert!(latest.contains("checkpoint  2\n"), "{latest}");
    assert_eq!(
        latest,
        stdout(&weir(&[
            "checkpoints",
            "show",
            "2",
            "--store",
            &url,
            "--job",
            "wordcount"
        ]))
    );
    let json = stdout(&weir(&[
        "checkpoints",
        "show",
        "latest",
        "--store",
        &url,
        "--job",
        "other",
        "--json",
    ]));
    let parsed: CheckpointMetadata = serde_json::from_str(&json).expect("metadata");
    assert_eq!((parsed.job.as_str(), parsed.id), ("other", CheckpointId(1)));

    // Neither a job file, a folder nor a URL: says what it accepts, and of --host.
    let out = weir_in(dir.path(), &["checkpoints", "list", "job-3"]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(
        &out,
        &[
            "job-3 is neither a job file, a folder nor a store URL",
            "--host",
        ],
    );
    let out = weir(&["checkpoints", "show", "newest", "--store", &url]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert!(
        support::stderr(&out).contains("use a checkpoint id or `latest`"),
        "{}",
        support::stderr(&out)
    );
}

#[test]
fn latest_of_a_job_without_checkpoints_says_there_are_none_yet() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A job folder whose checkpoints are not complete yet: only an artifact.
    let job = dir.path().join("wordcount");
    std::fs::create_dir_all(job.join("state/count/0")).expect("mkdir");
    std::fs::write(job.join("state/count/0/chk-1-run1.inc"), b"x").expect("artifact");
    let url = url_of(dir.path());
    let out = weir(&[
        "checkpoints",
        "show",
        "latest",
        "--store",
        &url,
        "--job",
        "wordcount",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert_clean_failure(&out, &["job `wordcount` has no completed checkpoint yet"]);
}

#[test]
fn a_torn_metadata_object_is_listed_as_damaged_and_the_others_still_are() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = url_of(dir.path());
    write_checkpoints(&url, "wordcount", &[1, 2, 3]);
    let folder = dir.path().join("wordcount/checkpoints");
    let newest = std::fs::read_dir(&folder)
        .expect("the metadata folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .max()
        .expect("metadata objects");
    let bytes = std::fs::read(&newest).expect("metadata");
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).expect("tear it");

    let table = stdout(&weir(&["checkpoints", "list", &url]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    fn words(line: &str) -> Vec<&str> {
        line.split_whitespace().take(3).collect()
    }
    assert_eq!(words(lines[1])[..2], ["wordcount", "1"], "{table}");
    assert_eq!(words(lines[2])[..2], ["wordcount", "2"], "{table}");
    assert_eq!(words(lines[3]), ["wordcount", "3", "DAMAGED"], "{table}");
    assert!(
        lines[4].starts_with("damaged: checkpoint 3 of wordcount: ")
            && lines[4].contains("not checkpoint metadata"),
        "{table}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&weir(&["checkpoints", "list", &url, "--json"])))
            .expect("JSON");
    let rows = json.as_array().expect("an array");
    assert_eq!(rows.len(), 3, "{json}");
    assert!(rows[0].get("damaged").is_none(), "{json}");
    assert!(
        rows[2]["damaged"]
            .as_str()
            .is_some_and(|d| d.contains("chk-")),
        "{json}"
    );
}
