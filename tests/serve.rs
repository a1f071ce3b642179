//! `weir serve` and the commands that talk to it: a host started on 127.0.0.1:0 runs jobs
//! submitted with `weir submit`, lists, shows and cancels them, exposes `/metrics`, and
//! refuses every call without the right token.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{cache_dir, component, stderr, tokenize_then, toml_path, write_job};

const TOKEN: &str = "a-test-token-of-some-length";

/// A `weir serve` process, killed when dropped.
struct Host {
    child: Child,
    url: String,
    data: std::path::PathBuf,
}

impl Host {
    /// Starts a host keeping its jobs in `data`.
    fn start(data: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .env("WEIR_TOKEN", TOKEN)
            .env("WEIR_CACHE_DIR", cache_dir())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("weir serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the host says where it listens");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Self {
            child,
            url,
            data: data.to_owned(),
        }
    }

    /// Runs a client command against this host with `token`.
    fn weir(&self, args: &[&str], token: Option<&str>) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
        command
            .args(args)
            .args(["--host", &self.url])
            .env("WEIR_CACHE_DIR", cache_dir())
            .env_remove("WEIR_TOKEN")
            .env("HOME", &self.data)
            .env_remove("XDG_CONFIG_HOME");
        if let Some(token) = token {
            command.env("WEIR_TOKEN", token);
        }
        command.output().expect("weir runs")
    }

    fn job(&self, id: &str) -> serde_json::Value {
        let out = self.weir(&["job", id, "--json"], Some(TOKEN));
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    /// Waits until job `id` is no longer running; returns its info.
    fn wait(&self, id: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let info = self.job(id);
            if info["status"] != "running" {
                return info;
            }
            assert!(Instant::now() < deadline, "job {id} still running: {info}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A raw HTTP GET, with the given Authorization header value: (status, body).
    fn get(&self, path: &str, authorization: Option<&str>) -> (u16, String) {
        let address = self.url.strip_prefix("http://").expect("http");
        let mut stream = TcpStream::connect(address).expect("connect");
        let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Connection: close\r\n\r\n"
        )
        .expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status");
        let body = response
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        (status, body)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    let endless = write_job(
        dir.path(),
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
            "#,
            counter = toml_path(&component("weir-example-counter")),
        ),
    );
    let endless_id = submitted_id(&host.weir(
        &["submit", endless.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    ));
    std::thread::sleep(Duration::from_millis(300));
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
    let mut expected: Vec<String> = Vec::new();
    let mut counts = std::collections::HashMap::<String, u64>::new();
    for word in input.split_whitespace() {
        let n = counts.entry(word.to_owned()).or_default();
        *n += 1;
        expected.push(format!("{word}\t{n}"));
    }
    expected.sort();
    let mut got: Vec<String> = std::fs::read_to_string(dir.path().join("out.txt"))
        .expect("output")
        .lines()
        .map(str::to_owned)
        .collect();
    got.sort();
    assert_eq!(got.len(), expected.len(), "lost or repeated lines");
    assert!(got == expected, "output differs");
}
