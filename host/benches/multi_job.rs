//! Jobs sharing one `weir serve` host, and how soon a submitted job processes its first record.
//!
//! The host runs in this process (`weir_host::serve::serve` on 127.0.0.1:0, like the binary);
//! jobs are submitted with the real `weir submit` command.
//!
//! - `shared_host_throughput_ratio`: a keyed count (generator over 10 000 keys -> counter ->
//!   discard) measured in its steady state, over the same window, alone on the host and then
//!   while three copies of it run beside it. On a machine with C cores and jobs that each
//!   keep about two busy, the ideal is about min(1, C / 8).
//! - `console_throughput_ratio`: the same shared host's throughput with a console open on
//!   every job's page (a client per job that makes the page's requests once a second: the
//!   job, its graph, new rates, checkpoint history and the log's last 200 lines) over its
//!   throughput without; windows alternate, two of each. 1.0 is no cost.
//! - `submit_to_first_record_ms_<language>_{uncached,cached}`: from starting `weir submit` to
//!   the job's first operator having taken in a record, for the word counter in Rust and in
//!   Python (`examples/languages/python-counter`, built with `weir build`). Uncached: the host's component cache
//!   is emptied first, so the component compiles; cached: the compiled component is on disk.
//!   Medians of a few submissions each.
//!
//! `cargo bench -p weir-host --bench multi_job`

mod host_allocator;

#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_host::engine::{ComponentCache, Engine, EngineOptions};
use weir_host::serve::protocol::{JobInfo, JobStatus};
use weir_host::serve::{ServeOptions, serve};

const TOKEN: &str = "multi-job-benchmark-token";
/// How long each throughput window lasts.
const WINDOW: Duration = Duration::from_secs(3);
/// Submissions per start-time median.
const STARTS: usize = 5;

/// A host running in this process, and a client for it.
struct Host {
    url: String,
    cache: PathBuf,
    http: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl Host {
    fn start(data: &Path, cache: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let engine = Engine::new(EngineOptions {
            cache: Some(ComponentCache::new(cache)),
        })
        .expect("engine");
        let options = ServeOptions {
            listen: "127.0.0.1:0".parse().expect("address"),
            data_dir: data.to_owned(),
            token: TOKEN.into(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            let served = serve(options, engine, move |address| {
                let _ = tx.send(address);
            })
            .await;
            if let Err(e) = served {
                panic!("the host stopped: {e:#}");
            }
        });
        let address = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the host listens");
        Self {
            url: format!("http://{address}"),
            cache: cache.to_owned(),
            http: weir_host::http::client(),
            runtime,
        }
    }

    /// `weir submit JOB`; the new job's id.
    fn submit(&self, job: &Path) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["submit", "--json", "--host", &self.url])
            .arg(job)
            .env("WEIR_TOKEN", TOKEN)
            .output()
            .expect("weir submit runs");
        assert!(
            out.status.success(),
            "weir submit failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let jobs: Vec<JobInfo> = serde_json::from_slice(&out.stdout).expect("JSON");
        jobs[0].id.clone()
    }

    fn call(&self, method: reqwest::Method, path: &str) -> reqwest::Response {
        self.runtime.block_on(async {
            self.http
                .request(method, format!("{}{path}", self.url))
                .bearer_auth(TOKEN)
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .unwrap_or_else(|e| panic!("{path}: {e}"))
        })
    }

    fn job(&self, id: &str) -> JobInfo {
        let response = self.call(reqwest::Method::GET, &format!("/v1/jobs/{id}"));
        self.runtime
            .block_on(response.json())
            .expect("a job as JSON")
    }

    fn cancel(&self, id: &str) {
        self.call(reqwest::Method::POST, &format!("/v1/jobs/{id}/cancel"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.job(id).status == JobStatus::Running {
            assert!(Instant::now() < deadline, "job {id} does not stop");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Records the job's first operator has taken in.
    fn records_in(&self, id: &str) -> u64 {
        let info = self.job(id);
        assert_eq!(
            info.status,
            JobStatus::Running,
            "job {id} stopped: {:?}",
            info.error
        );
        info.operators[0].records_in
    }

    /// Opens a console on each of `jobs`' pages: a task per job making the page's requests
    /// once a second until `closed` is set. Counts the rounds of requests in `polls`.
    fn open_consoles(&self, jobs: &[String], closed: &Arc<AtomicBool>, polls: &Arc<AtomicU64>) {
        for id in jobs {
            let (http, url, id) = (self.http.clone(), self.url.clone(), id.clone());
            let (closed, polls) = (closed.clone(), polls.clone());
            self.runtime.spawn(async move {
                let mut since: Option<u64> = None;
                let get = |path: String| {
                    let request = http
                        .get(format!("{url}/v1/jobs/{id}{path}"))
                        .bearer_auth(TOKEN);
                    async move {
                        let response = request.send().await.and_then(|r| r.error_for_status());
                        response
                            .expect("the console's request")
                            .bytes()
                            .await
                            .expect("a body")
                    }
                };
                while !closed.load(Ordering::Relaxed) {
                    let rates = match since {
                        Some(t) => format!("/rates?since_ms={t}"),
                        None => "/rates".to_owned(),
                    };
                    let (_, _, rates, _, _) = futures::join!(
                        get(String::new()),
                        get("/graph".to_owned()),
                        get(rates),
                        get("/checkpoints/history".to_owned()),
                        get("/logs?tail=200".to_owned()),
                    );
                    let rates: serde_json::Value = serde_json::from_slice(&rates).expect("rates");
                    if let Some(last) = rates["times_ms"].as_array().and_then(|t| t.last()) {
                        since = last.as_u64();
                    }
                    polls.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
        }
    }

    /// Milliseconds from starting `weir submit job` to the first record in.
    fn time_to_first_record(&self, job: &Path) -> (f64, String) {
        let started = Instant::now();
        let id = self.submit(job);
        while self.records_in(&id) == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        (started.elapsed().as_secs_f64() * 1e3, id)
    }

    /// The job's steady rate: records in over [`WINDOW`], after a warm-up.
    fn rate(&self, id: &str) -> f64 {
        std::thread::sleep(Duration::from_millis(500));
        let (t0, n0) = (Instant::now(), self.records_in(id));
        std::thread::sleep(WINDOW);
        let (t1, n1) = (Instant::now(), self.records_in(id));
        (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
    }
}

/// A job file in `dir`: an endless generator over 10 000 keys -> `component` keyed -> discard.
fn endless_job(dir: &Path, name: &str, component: &Path) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"
            [job]
            name = "{name}"
            [source]
            kind = "generator"
            records = 1000000000000
            keys = 10000
            [[operators]]
            name = "count"
            component = {component}
            key_by = "key"
            [sink]
            kind = "discard"
            "#,
            component = support::toml_path(component),
        ),
    )
    .expect("job file");
    path
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    weir_host::disable_huge_pages();
    let data = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    let jobs = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path(), cache.path());
    let counter = support::component("weir-example-counter");

    // Throughput alone, then beside three neighbours.
    let measured = endless_job(jobs.path(), "measured", &counter);
    let (_, alone_id) = host.time_to_first_record(&measured);
    let alone = host.rate(&alone_id);
    host.cancel(&alone_id);
    let neighbours: Vec<String> = (0..3)
        .map(|i| {
            host.submit(&endless_job(
                jobs.path(),
                &format!("neighbour-{i}"),
                &counter,
            ))
        })
        .collect();
    let (_, shared_id) = host.time_to_first_record(&measured);
    let shared = host.rate(&shared_id);
    println!("bench: alone_records_per_sec = {alone:.0} records/s");
    println!("bench: shared_records_per_sec = {shared:.0} records/s");
    println!(
        "bench: shared_host_throughput_ratio = {:.3} ratio",
        shared / alone
    );

    // The same, with and without a console open on every job, in turns.
    let mut all = neighbours.clone();
    all.push(shared_id.clone());
    let polls = Arc::new(AtomicU64::new(0));
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        without.push(host.rate(&shared_id));
        let closed = Arc::new(AtomicBool::new(false));
        host.open_consoles(&all, &closed, &polls);
        with.push(host.rate(&shared_id));
        closed.store(true, Ordering::Relaxed);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "bench: shared_records_per_sec_without_consoles = {:.0} records/s",
        mean(&without)
    );
    println!(
        "bench: shared_records_per_sec_with_consoles = {:.0} records/s",
        mean(&with)
    );
    println!(
        "bench: console_polls = {} polls",
        polls.load(Ordering::Relaxed)
    );
    println!(
        "bench: console_throughput_ratio = {:.3} ratio",
        mean(&with) / mean(&without)
    );
    host.cancel(&shared_id);
    for id in &neighbours {
        host.cancel(id);
    }

    // Time to the first record, per language.
    let python =
        support::built_operator(&support::repo().join("examples/languages/python-counter"));
    for (language, component) in [("rust", counter.clone()), ("python", python)] {
        let job = endless_job(jobs.path(), &format!("start-{language}"), &component);
        let mut uncached = Vec::new();
        let mut cached = Vec::new();
        for _ in 0..STARTS {
            match std::fs::remove_dir_all(&host.cache) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    panic!("cannot empty the component cache: {e}")
                }
                _ => {}
            }
            let (ms, id) = host.time_to_first_record(&job);
            host.cancel(&id);
            uncached.push(ms);
            let (ms, id) = host.time_to_first_record(&job);
            host.cancel(&id);
            cached.push(ms);
        }
        let bytes = std::fs::metadata(&component).map_or(0, |m| m.len());
        println!("bench: component_bytes_{language} = {bytes} bytes");
        println!(
            "bench: submit_to_first_record_ms_{language}_uncached = {:.1} ms",
            median(uncached)
        );
        println!(
            "bench: submit_to_first_record_ms_{language}_cached = {:.1} ms",
            median(cached.clone())
        );
        if language == "rust" {
            println!(
                "bench: submit_to_first_record_ms_rust = {:.1} ms",
                median(cached)
            );
        }
    }
}
