//! Event-time windows end to end (`examples/windows`): per-page tumbling counts with allowed
//! lateness (the Rust example, and the same operator in JavaScript) and per-user sessions
//! (the Python example), over clicks that arrive out of order, some of them late and some
//! too late.
//!
//! Every output is compared with an expectation computed here from the input by a plain
//! model of the semantics (Flink's): the source's watermark trails the latest timestamp by
//! the out-of-orderness and is sent after every `batch_size` records; windows fire when it
//! passes their end, fire again for each record within the lateness, and drop records
//! later than that. Once for clean runs, once for a run SIGKILLed at random instants while
//! timers are pending and restored until it finishes, and once across a rescale from 2 to 3
//! subtasks in the middle.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use support::crash::{Rng, committed, crash_then_finish, seed};
use support::{built_operator, checkpoint_ids, component, stderr, toml_path, write_job};

/// Records between two watermarks of the source: the jobs' `batch_size`.
const BATCH: usize = 64;
/// `[source] watermark.max_out_of_order_ms` of every job here.
const OUT_OF_ORDER_MS: i64 = 1_000;
/// The page counts' windows and lateness.
const PAGE_WINDOW_MS: i64 = 10_000;
const PAGE_LATENESS_MS: i64 = 3_000;
/// The sessions' gap (their lateness is 0).
const SESSION_GAP_MS: i64 = 2_000;

const PAGES: [&str; 8] = [
    "/",
    "/docs",
    "/docs/windows",
    "/pricing",
    "/blog",
    "/ünïcode",
    "/a\"b",
    "/x y",
];

/// A click as generated: when it happened, who, where.
#[derive(Clone, Debug)]
struct Click {
    ts: i64,
    user: String,
    page: &'static str,
}

/// `n` clicks in the order they arrive: 20 ms apart on average; most arrive within a second,
/// some 2 to 6 seconds late (late for a watermark 1 s behind, within the pages' lateness or
/// not), a few 20 to 90 seconds late (too late). Users click in bursts: a user is picked
/// with a skew, so some users pause longer than the sessions' gap.
fn clicks(n: usize, seed: u64) -> Vec<Click> {
    let mut rng = Rng(seed | 1);
    let start = 1_764_633_600_000i64;
    let mut happened: Vec<(i64, Click)> = (0..n)
        .map(|i| {
            let ts = start + 20 * i as i64 + rng.below(20) as i64;
            let r = rng.below(1000);
            let delay = if r < 20 {
                20_000 + rng.below(70_000) as i64
            } else if r < 100 {
                2_000 + rng.below(4_000) as i64
            } else {
                rng.below(1_000) as i64
            };
            // Users 0..8 click often, the others now and then.
            let user = if rng.below(3) == 0 {
                rng.below(8)
            } else {
                8 + rng.below(60)
            };
            let click = Click {
                ts,
                user: format!("u{user:02}"),
                page: PAGES[rng.below(PAGES.len() as u64) as usize],
            };
            (ts + delay, click)
        })
        .collect();
    happened.sort_by_key(|(arrival, c)| (*arrival, c.ts));
    happened.into_iter().map(|(_, c)| c).collect()
}

fn write_clicks(path: &Path, clicks: &[Click]) {
    let lines: String = clicks
        .iter()
        .map(|c| {
            let event = serde_json::json!({ "ts": c.ts, "user": c.user, "page": c.page });
            format!("{event}\n")
        })
        .collect();
    std::fs::write(path, lines).expect("write clicks");
}

/// A window of the model: its bounds, what it holds, and its timers.
#[derive(Clone, Debug)]
struct ModelWindow {
    start: i64,
    end: i64,
    clicks: u64,
    pages: Vec<&'static str>,
    fired: bool,
    /// Its timer at `end - 1` is pending (a window due when made fires at once instead).
    fire_pending: bool,
}

/// The windows of every key, and what they emitted.
struct Model {
    lateness: i64,
    windows: BTreeMap<String, Vec<ModelWindow>>,
    watermark: Option<i64>,
    out: Vec<(String, ModelWindow)>,
    /// Records at or before the watermark when they came, those of them dropped as late for
    /// all their windows, and timers registered.
    late_records: u64,
    dropped_late: u64,
    timers: u64,
}

impl Model {
    fn new(lateness: i64) -> Self {
        Self {
            lateness,
            windows: BTreeMap::new(),
            watermark: None,
            out: Vec::new(),
            late_records: 0,
            dropped_late: 0,
            timers: 0,
        }
    }

    fn late(&self, end: i64) -> bool {
        self.watermark.is_some_and(|w| end - 1 + self.lateness <= w)
    }

    fn due(&self, end: i64) -> bool {
        self.watermark.is_some_and(|w| end - 1 <= w)
    }

    /// A click into the window `[start, end)` of `key` (tumbling: found by start).
    fn tumbling(&mut self, key: &str, start: i64, end: i64, page: &'static str) {
        if self.late(end) {
            self.dropped_late += 1;
            return;
        }
        let due = self.due(end);
        let windows = self.windows.entry(key.to_owned()).or_default();
        let window = match windows.iter_mut().position(|w| w.start == start) {
            Some(i) => &mut windows[i],
            None => {
                windows.push(ModelWindow {
                    start,
                    end,
                    clicks: 0,
                    pages: Vec::new(),
                    fired: false,
                    fire_pending: !due,
                });
                // Its fire timer unless due, and its cleanup timer after the lateness.
                self.timers += u64::from(!due) + u64::from(self.lateness > 0);
                windows.last_mut().expect("pushed")
            }
        };
        window.clicks += 1;
        window.pages.push(page);
        if window.fired || due {
            window.fired = true;
            self.out.push((key.to_owned(), window.clone()));
        }
    }

    /// A click opening `[ts, ts + gap)` for `key`, merged with the sessions it meets.
    fn session(&mut self, key: &str, ts: i64, gap: i64, page: &'static str) {
        let (start, end) = (ts, ts + gap);
        let windows = self.windows.entry(key.to_owned()).or_default();
        let meets = |w: &ModelWindow| w.start <= end && start <= w.end;
        let merged_end = windows
            .iter()
            .filter(|w| meets(w))
            .map(|w| w.end)
            .fold(end, i64::max);
        if self
            .watermark
            .is_some_and(|w| merged_end - 1 + self.lateness <= w)
        {
            self.dropped_late += 1;
            return;
        }
        let (meeting, rest): (Vec<_>, Vec<_>) =
            std::mem::take(windows).into_iter().partition(meets);
        *windows = rest;
        let inside = meeting.len() == 1 && meeting[0].start <= start && end <= meeting[0].end;
        let mut merged = ModelWindow {
            start,
            end,
            clicks: 1,
            pages: vec![page],
            fired: false,
            fire_pending: false,
        };
        for w in &meeting {
            merged.start = merged.start.min(w.start);
            merged.end = merged.end.max(w.end);
            merged.clicks += w.clicks;
            merged.pages.extend(&w.pages);
        }
        let due = self.watermark.is_some_and(|w| merged.end - 1 <= w);
        if inside {
            merged.fired = meeting[0].fired;
            merged.fire_pending = meeting[0].fire_pending;
        } else {
            merged.fire_pending = !due;
        }
        if merged.fired || (!inside && due) {
            merged.fired = true;
            self.out.push((key.to_owned(), merged.clone()));
        }
        windows.push(merged);
    }

    /// The watermark moves to `w`: due windows fire, windows past their lateness go.
    fn advance(&mut self, w: i64) {
        if self.watermark.is_some_and(|current| w <= current) {
            return;
        }
        self.watermark = Some(w);
        let lateness = self.lateness;
        for (key, windows) in &mut self.windows {
            for window in windows.iter_mut() {
                if window.fire_pending && window.end - 1 <= w {
                    window.fire_pending = false;
                    window.fired = true;
                    self.out.push((key.clone(), window.clone()));
                }
            }
            windows.retain(|window| window.end - 1 + lateness > w);
        }
    }

    /// Feeds `clicks` in order, the watermark moving after every [`BATCH`] of them as the
    /// source sends it, and to the end of time after the last.
    fn run(mut self, clicks: &[Click], mut add: impl FnMut(&mut Self, &Click)) -> Self {
        let mut latest: Option<i64> = None;
        for (i, click) in clicks.iter().enumerate() {
            if self.watermark.is_some_and(|w| click.ts <= w) {
                self.late_records += 1;
            }
            add(&mut self, click);
            latest = Some(latest.map_or(click.ts, |l| l.max(click.ts)));
            if (i + 1) % BATCH == 0 {
                self.advance(latest.expect("a click") - OUT_OF_ORDER_MS - 1);
            }
        }
        self.advance(i64::MAX);
        self
    }
}

/// The model of the page counts over `clicks`.
fn page_counts_model(clicks: &[Click]) -> Model {
    Model::new(PAGE_LATENESS_MS).run(clicks, |m, c| {
        let start = c.ts - c.ts.rem_euclid(PAGE_WINDOW_MS);
        m.tumbling(c.page, start, start + PAGE_WINDOW_MS, c.page);
    })
}

/// What the page counts emit for `clicks`, as the operators write it, sorted.
fn expected_page_counts(clicks: &[Click]) -> Vec<String> {
    let model = page_counts_model(clicks);
    let mut lines: Vec<String> = model
        .out
        .iter()
        .map(|(page, w)| {
            format!(
                r#"{{"page":{},"start":{},"end":{},"clicks":{}}}"#,
                serde_json::to_string(page).expect("json"),
                w.start,
                w.end,
                w.clicks
            )
        })
        .collect();
    lines.sort();
    lines
}

/// What the sessions emit for `clicks`, as the Python operator writes it, sorted.
fn expected_sessions(clicks: &[Click]) -> Vec<String> {
    let model = Model::new(0).run(clicks, |m, c| {
        m.session(&c.user, c.ts, SESSION_GAP_MS, c.page);
    });
    let mut lines: Vec<String> = model
        .out
        .iter()
        .map(|(user, w)| {
            let mut pages = w.pages.clone();
            pages.sort();
            pages.dedup();
            format!(
                r#"{{"user":"{user}","start":{},"end":{},"clicks":{},"pages":{}}}"#,
                w.start,
                w.end,
                w.clicks,
                pages.len()
            )
        })
        .collect();
    lines.sort();
    lines
}

/// A job over `clicks.jsonl` in `dir`, keyed by `key`, through `component` (operator
/// `name`, `parallelism` subtasks, `config`), into `out.txt`.
fn windows_job(
    dir: &Path,
    key: &str,
    name: &str,
    component: &Path,
    parallelism: u32,
    config: &str,
    checkpoints: &str,
) -> PathBuf {
    write_job(
        dir,
        &format!(
            r#"
            [job]
            name = "{name}"
            batch_size = {BATCH}
            [source]
            kind = "json-lines"
            path = "clicks.jsonl"
            key_pointer = "{key}"
            timestamp = {{ json_pointer = "/ts", format = "ms" }}
            watermark = {{ max_out_of_order_ms = {OUT_OF_ORDER_MS}, interval_ms = 0 }}
            [[operators]]
            name = "{name}"
            component = {component}
            parallelism = {parallelism}
            key_by = "key"
            config = {config}
            [sink]
            kind = "file"
            path = "out.txt"
            [checkpoints]
            {checkpoints}
            "#,
            component = toml_path(component),
        ),
    )
}

fn pages_config() -> String {
    format!("{{ size_ms = {PAGE_WINDOW_MS}, allowed_lateness_ms = {PAGE_LATENESS_MS} }}")
}

fn run_clean(job: &Path, dir: &Path) -> Vec<String> {
    let out = support::weir(&["run", job.to_str().expect("utf-8"), "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    committed(dir)
}

#[test]
fn page_counts_in_rust_javascript_and_python_equal_the_expectation() {
    let seed = seed();
    let clicks = clicks(20_000, seed);
    let expected = expected_page_counts(&clicks);
    // The input has what the test is about: windows that fire again, and records dropped.
    let refired = expected.len()
        - expected
            .iter()
            .map(|l| l.rsplit_once(',').expect("fields").0)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
    assert!(refired > 10, "only {refired} late firings (seed {seed})");
    let model = page_counts_model(&clicks);
    let operators = [
        component("weir-example-page-counts"),
        built_operator(&support::repo().join("tests/guests/windows-js")),
        built_operator(&support::repo().join("tests/guests/windows-python")),
    ];
    for operator in operators {
        let dir = tempfile::tempdir().expect("tempdir");
        write_clicks(&dir.path().join("clicks.jsonl"), &clicks);
        let job = windows_job(
            dir.path(),
            "/page",
            "pages",
            &operator,
            2,
            &pages_config(),
            "interval_ms = 50",
        );
        let out = support::weir(&["run", job.to_str().expect("utf-8")]);
        assert!(out.status.success(), "{}", stderr(&out));
        // The host counted the late records, those the windows dropped, and their timers.
        let summary = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
        assert!(model.dropped_late > 0, "nothing dropped (seed {seed})");
        let line = format!(
            "event time at pages (this run): {} records behind the watermark, {} of them \
             dropped as too late; {} timers fired",
            model.late_records, model.dropped_late, model.timers
        );
        assert!(summary.contains(&line), "no {line:?} in\n{summary}");
        let got = committed(dir.path());
        assert_eq!(
            got.len(),
            expected.len(),
            "{}: line count differs (seed {seed})",
            operator.display()
        );
        assert!(
            got == expected,
            "{}: output differs (seed {seed})",
            operator.display()
        );
    }
}

#[test]
fn sessions_in_python_equal_the_expectation() {
    let seed = seed();
    let clicks = clicks(20_000, seed);
    let dropped_late = Model::new(0)
        .run(&clicks, |m, c| {
            m.session(&c.user, c.ts, SESSION_GAP_MS, c.page)
        })
        .dropped_late;
    let expected = expected_sessions(&clicks);
    let users: std::collections::BTreeSet<&str> = clicks.iter().map(|c| c.user.as_str()).collect();
    assert!(
        expected.len() > 2 * users.len(),
        "users have several sessions each (seed {seed})"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    write_clicks(&dir.path().join("clicks.jsonl"), &clicks);
    let sessions = built_operator(&support::repo().join("examples/windows/sessions"));
    let job = windows_job(
        dir.path(),
        "/user",
        "sessions",
        &sessions,
        2,
        &format!("{{ gap_ms = {SESSION_GAP_MS} }}"),
        "interval_ms = 100",
    );
    let out = support::weir(&["run", job.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Python's windows count their drops into the host's counter too.
    let summary = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(dropped_late > 0, "nothing dropped (seed {seed})");
    let dropped = format!("{dropped_late} of them dropped as too late");
    assert!(summary.contains(&dropped), "no {dropped:?} in\n{summary}");
    let got = committed(dir.path());
    assert_eq!(
        got.len(),
        expected.len(),
        "line count differs (seed {seed})"
    );
    assert!(got == expected, "output differs (seed {seed})");
}

/// A folder with `n` clicks and a job counting them per page in Rust on 2 subtasks,
/// checkpointing every 20 ms, with the output it must give.
fn page_counts_checkpointed_often(
    n: usize,
    seed: u64,
) -> (tempfile::TempDir, PathBuf, Vec<String>) {
    let clicks = clicks(n, seed);
    let expected = expected_page_counts(&clicks);
    let dir = tempfile::tempdir().expect("tempdir");
    write_clicks(&dir.path().join("clicks.jsonl"), &clicks);
    let job = windows_job(
        dir.path(),
        "/page",
        "pages",
        &component("weir-example-page-counts"),
        2,
        &pages_config(),
        "interval_ms = 20\nretain = 2\nrestart_attempts = 0",
    );
    (dir, job, expected)
}

/// `weir run job -q` in the background, errors only, its output dropped: to be killed.
fn start_quietly(job: &str) -> Child {
    support::weir_command()
        .args(["run", job, "-q"])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("weir starts")
}

#[test]
fn page_counts_killed_at_random_instants_while_timers_are_pending_give_exactly_the_expected_output()
{
    let seed = seed();
    let mut rng = Rng(seed | 1);
    let (dir, job, expected) = page_counts_checkpointed_often(400_000, seed);
    let job = job.to_str().expect("utf-8");
    crash_then_finish(job, dir.path(), &expected, (seed, &mut rng), (20, 150), 3);
}

#[test]
fn a_rescale_from_2_to_3_subtasks_in_the_middle_keeps_every_pending_timer() {
    let seed = seed();
    let (dir, job, expected) = page_counts_checkpointed_often(300_000, seed);
    let job = job.to_str().expect("utf-8");
    // Two subtasks, stopped hard once a few checkpoints are in: windows are open, so their
    // timers are pending in the checkpoint.
    let folder = dir.path().join(".weir-checkpoints/pages/checkpoints");
    let mut child = start_quietly(job);
    let started = Instant::now();
    while checkpoint_ids(&folder).len() < 2 || checkpoint_ids(&folder).last() < Some(&4) {
        assert!(
            child.try_wait().expect("poll").is_none(),
            "the job finished before it could be stopped in the middle (seed {seed})"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoints"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let latest = *checkpoint_ids(&folder).last().expect("a checkpoint");
    let metadata: serde_json::Value = serde_json::from_slice(
        &std::fs::read(folder.join(format!("chk-{latest:020}.json"))).expect("metadata"),
    )
    .expect("json");
    let subtasks = metadata["operators"][0]["subtasks"]
        .as_array()
        .expect("subtasks");
    assert_eq!(subtasks.len(), 2);
    let pending: u64 = subtasks
        .iter()
        .map(|s| s["timers"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        pending > 0,
        "checkpoint {latest} holds no pending timer (seed {seed})"
    );
    assert!(metadata["finished"] == false, "stopped in the middle");
    let shown = support::weir(&["checkpoints", "show", &latest.to_string(), "--store", job]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.contains("timers pending"), "{shown}");

    // Three subtasks from there to the end: every timer fires where its key went.
    let out = support::weir(&[
        "run",
        job,
        "--restore",
        "latest",
        "--parallelism",
        "pages=3",
        "-q",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let got = committed(dir.path());
    assert_eq!(
        got.len(),
        expected.len(),
        "line count differs (seed {seed})"
    );
    assert!(got == expected, "output differs (seed {seed})");
}

/// A job over `input.jsonl` in `dir` (keyed by `/k`) through the reminders of
/// `tests/guests/timers-js` with `delay_ms`, into `out.txt`.
fn reminders_job(dir: &Path, delay_ms: u64) -> PathBuf {
    write_job(
        dir,
        &format!(
            r#"
            [job]
            name = "reminders"
            [source]
            kind = "json-lines"
            path = "input.jsonl"
            key_pointer = "/k"
            [[operators]]
            name = "reminders"
            component = {component}
            parallelism = 2
            key_by = "key"
            config = {{ delay_ms = {delay_ms} }}
            [sink]
            kind = "file"
            path = "out.txt"
            [checkpoints]
            interval_ms = 20
            restart_attempts = 0
            "#,
            component = toml_path(&built_operator(
                &support::repo().join("tests/guests/timers-js")
            )),
        ),
    )
}

#[test]
fn processing_time_timers_fire_from_the_clock_and_those_due_while_down_fire_after_restore() {
    // 40 keys ask for a reminder first; then filler keeps the job running a while.
    let reminded: Vec<String> = (0..40).map(|i| format!("r{i:02}")).collect();
    let mut input: String = reminded
        .iter()
        .map(|k| format!("{{\"k\":\"{k}\",\"v\":\"remind\"}}\n"))
        .collect();
    for i in 0..400_000 {
        input.push_str(&format!("{{\"k\":\"f{}\",\"v\":\"x\"}}\n", i % 1000));
    }
    let expected: Vec<String> = reminded
        .iter()
        .map(|k| format!("{k} fired processing 7"))
        .collect();

    // While the job runs, the clock fires them.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("input.jsonl"), &input).expect("write");
    let job = reminders_job(dir.path(), 50);
    let got = run_clean(&job, dir.path());
    assert_eq!(got, expected, "each reminder fired once while the job ran");

    // Due only after the job was killed: they fire when it is restored. The kill must come
    // after a checkpoint holds the timers and before they are due; a machine too slow for
    // that within the delay tries again with a longer one.
    for delay_ms in [3_000, 12_000, 48_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("input.jsonl"), &input).expect("write");
        let delay = Duration::from_millis(delay_ms);
        if killed_before_due(dir.path(), delay) {
            let job = dir.path().join("job.toml");
            let job = job.to_str().expect("utf-8");
            // The event: the wall clock passing the instant the last timer the checkpoint
            // holds is due.
            let due = last_timer_due(job);
            while std::time::SystemTime::now() < due {
                std::thread::sleep(Duration::from_millis(20));
            }
            let out = support::weir(&["run", job, "--restore", "latest", "-q"]);
            assert!(out.status.success(), "{}", stderr(&out));
            assert_eq!(
                committed(dir.path()),
                expected,
                "each fired once, after the restore"
            );
            return;
        }
        eprintln!("no checkpoint with the timers within {delay:?}: trying a longer delay");
    }
    panic!("no checkpoint with the timers before they were due, even at 48 s");
}

/// The instant the last of the 40 reminders held by the reminders job's latest checkpoint is
/// due, as `weir state` reads it.
fn last_timer_due(job: &str) -> std::time::SystemTime {
    let out = support::weir(&[
        "state",
        "scan",
        "--operator",
        "reminders",
        "--store",
        job,
        "--state",
        "@timers",
        "--json",
        "--limit",
        "0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON rows");
    let due: Vec<u64> = rows
        .as_array()
        .expect("rows")
        .iter()
        .flat_map(|row| row["value"].as_array().cloned().unwrap_or_default())
        .filter(|timer| timer["domain"] == "processing-time")
        .map(|timer| timer["at"].as_u64().expect("a time in ms"))
        .collect();
    assert_eq!(due.len(), 40, "the checkpoint holds the reminders: {rows}");
    let last = due.into_iter().max().expect("40 timers");
    std::time::UNIX_EPOCH + Duration::from_millis(last)
}

/// Runs the reminders job with `delay` in `dir` until a checkpoint holds its 40 timers, then
/// kills it; false when that did not happen before the timers were due (a slow machine).
/// Nothing may have fired by the kill.
fn killed_before_due(dir: &Path, delay: Duration) -> bool {
    let job = reminders_job(dir, delay.as_millis() as u64);
    let job = job.to_str().expect("utf-8");
    let folder = dir.join(".weir-checkpoints/reminders/checkpoints");
    // Before the job starts: the timers are due `delay` after their registration, later.
    let started = Instant::now();
    let mut child = start_quietly(job);
    let pending = |id: u64| -> u64 {
        let path = folder.join(format!("chk-{id:020}.json"));
        let Ok(bytes) = std::fs::read(path) else {
            return 0;
        };
        let metadata: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        metadata["operators"][0]["subtasks"]
            .as_array()
            .expect("subtasks")
            .iter()
            .map(|s| s["timers"].as_u64().unwrap_or(0))
            .sum()
    };
    while checkpoint_ids(&folder)
        .last()
        .is_none_or(|&id| pending(id) < 40)
    {
        assert!(
            child.try_wait().expect("poll").is_none(),
            "the job finished before it could be killed"
        );
        if started.elapsed() >= delay {
            child.kill().expect("SIGKILL");
            child.wait().expect("wait");
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    if started.elapsed() >= delay {
        return false;
    }
    assert_eq!(committed(dir), Vec::<String>::new(), "none fired yet");
    true
}

#[test]
fn c_event_time_timers_fire_at_the_end_of_input_once_per_key_and_instant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut input = String::new();
    let mut expected = std::collections::BTreeSet::new();
    for i in 0..3_000i64 {
        let (key, ts) = (format!("c{}", i % 50), 1_764_633_600_000 + (i * 7919) % 400);
        input.push_str(&format!("{{\"k\":\"{key}\",\"ts\":{ts}}}\n"));
        expected.insert(format!("{key} {} 3 {}", ts + 1000, i64::MAX));
    }
    std::fs::write(dir.path().join("input.jsonl"), input).expect("write");
    let job = write_job(
        dir.path(),
        &format!(
            r#"
            [job]
            name = "c-timers"
            [source]
            kind = "json-lines"
            path = "input.jsonl"
            key_pointer = "/k"
            timestamp = {{ json_pointer = "/ts" }}
            [[operators]]
            name = "timers"
            component = {component}
            parallelism = 2
            key_by = "key"
            [sink]
            kind = "file"
            path = "out.txt"
            "#,
            component = toml_path(&built_operator(
                &support::repo().join("tests/guests/timers-c")
            )),
        ),
    );
    // Without watermarks from the source, every timer waits for the end of the input.
    let got = run_clean(&job, dir.path());
    assert_eq!(got, expected.into_iter().collect::<Vec<_>>());
}
