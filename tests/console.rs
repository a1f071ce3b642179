//! The web console of `weir serve`, tested in a real browser (headless Chromium through
//! ChromeDriver; `scripts/browser` installs both): signing in, a running job's graph with
//! counts that rise, a checkpoint taken from the page, the log and its filters, cancelling
//! and restarting from a chosen checkpoint; a wrong token; job names and log lines that are
//! HTML shown as text. Screenshots go to `target/console-screenshots/`.
//!
//! And without a browser: every data and action endpoint refuses calls without the token,
//! and every response carries the security headers.

use crate::support;

use std::path::Path;

use support::browser::Browser;
use support::host::{Host, TOKEN};
use support::{component, stderr, tokenize_then, toml_path, write_job};

/// A name that runs a script wherever a page puts it into HTML.
const HOSTILE_NAME: &str = "<img src=x onerror=alert(1)>";
/// A line the guest `greet` logs, HTML too.
const HOSTILE_LOG: &str = "<b>bold</b> <img src=x onerror=alert(2)>";

/// A job without end at 2 000 records a second: generator -> greet (2 subtasks, logs
/// [`HOSTILE_LOG`]) -> relay -> count (keyed, 2 subtasks) -> discard; checkpoints only when
/// asked for.
fn endless_job(dir: &Path) -> std::path::PathBuf {
    let faulty = toml_path(&component("weir-test-faulty"));
    write_job(
        dir,
        &format!(
            r#"
            [job]
            name = {name:?}
            [source]
            kind = "generator"
            records = 10000000000
            keys = 100
            records_per_second = 2000
            [[operators]]
            name = "greet"
            component = {faulty}
            parallelism = 2
            config = {{ mode = "passthrough", log = {log:?} }}
            [[operators]]
            name = "relay"
            component = {faulty}
            [[operators]]
            name = "count"
            component = {counter}
            key_by = "key"
            parallelism = 2
            [sink]
            kind = "discard"
            [checkpoints]
            interval_ms = 3600000
            "#,
            name = HOSTILE_NAME,
            log = HOSTILE_LOG,
            counter = toml_path(&component("weir-example-counter")),
        ),
    )
}

fn submit(host: &Host, job: &Path) -> String {
    let out = host.weir(
        &["submit", job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    );
    assert!(out.status.success(), "submit failed: {}", stderr(&out));
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    jobs[0]["id"].as_str().expect("an id").to_owned()
}

/// Submits job `name` in `dir`: `input` as text lines -> tokenizer -> `operator` (a name
/// and the crate of its component) keyed, with `lines` in its section -> a file.
fn submit_lines_job(
    host: &Host,
    dir: &Path,
    name: &str,
    input: &str,
    (operator, component_crate): (&str, &str),
    lines: &str,
) -> String {
    std::fs::write(dir.join("in.txt"), input).expect("input");
    let job = tokenize_then(
        dir,
        &format!("name = {name:?}"),
        operator,
        component_crate,
        lines,
        "",
    );
    // `weir submit` waits for the job to start; one that fails on its first record may have
    // failed by the time it looks, which it reports as an error, with the job.
    let out = host.weir(
        &["submit", job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    );
    let err = stderr(&out);
    assert!(
        out.status.success() || err.contains("failed as it started"),
        "submit failed: {err}"
    );
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    jobs[0]["id"].as_str().expect("an id").to_owned()
}

/// Clicks `button`, checks the confirmation names `what`, and confirms.
async fn confirmed(browser: &Browser, button: &str, what: &str) {
    browser.click(button).await;
    browser
        .wait_text("#confirm-text", what, |t| t.contains(what))
        .await;
    browser.click("#confirm-yes").await;
}

/// The node-level count of `node`'s records in, as the graph shows it.
async fn records_in(browser: &Browser, node: &str) -> u64 {
    let css = format!(".node[data-node=\"{node}\"] .records-in");
    let text = browser.text(&css).await;
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{css} is not a count: {text:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_on_call_watches_checkpoints_filters_and_cancels_a_job_from_the_console() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    let id = submit(&host, &endless_job(dir.path()));
    // And one that fails on its first record "boom".
    let failing_dir = tempfile::tempdir().expect("tempdir");
    let failing = submit_lines_job(
        &host,
        failing_dir.path(),
        "failing",
        "boom\n",
        ("victim", "weir-test-faulty"),
        "config = { mode = \"error-on\", word = \"boom\" }",
    );
    // And one that ends at once, its watermark with it.
    let finishing_dir = tempfile::tempdir().expect("tempdir");
    let finishing = submit_lines_job(
        &host,
        finishing_dir.path(),
        "finishing",
        "a b a\n",
        ("count", "weir-example-counter"),
        "",
    );
    let browser = Browser::start().await;
    browser.goto(&format!("{}/", host.url)).await;

    // A wrong token: a clear message, and no data.
    browser.type_into("#token", "not-the-token").await;
    browser.click("#login-button").await;
    let refused = browser
        .wait_text("#login-error", "a refusal", |t| t.contains("refused"))
        .await;
    assert!(refused.contains("wrong token"), "{refused}");
    assert!(browser.count("tr[data-job]").await == 0, "data shown");
    assert_eq!(
        browser
            .eval("return sessionStorage.getItem('weir-token')")
            .await,
        serde_json::Value::Null
    );
    browser.screenshot("01-wrong-token").await;

    // The right one: kept in sessionStorage only, never in the URL or a cookie.
    browser.type_into("#token", TOKEN).await;
    browser.click("#login-button").await;
    let row = format!("tr[data-job=\"{id}\"]");
    let name = browser.text(&format!("{row} .name")).await;
    assert_eq!(name, HOSTILE_NAME, "the job's name, as text");
    assert_eq!(
        browser
            .eval("return sessionStorage.getItem('weir-token')")
            .await,
        TOKEN
    );
    assert_eq!(browser.eval("return document.cookie").await, "");
    let url = browser.url().await;
    assert!(!url.contains(TOKEN), "{url}");
    browser
        .wait_text(&format!("{row} .status"), "running", |t| t == "running")
        .await;
    // A failed job says why.
    let failed = format!("tr[data-job=\"{failing}\"]");
    browser
        .wait_text(&format!("{failed} .status"), "failed", |t| t == "failed")
        .await;
    let why = browser.text(&format!("{failed} .error")).await;
    assert!(why.contains("error on value `boom`"), "{why}");
    browser.screenshot("02-jobs").await;

    // The job's page: its graph, with counts that rise between two looks.
    browser.click(&format!("{row} a.job-link")).await;
    assert_eq!(browser.text("#job-title").await, HOSTILE_NAME);
    browser
        .wait_attrs(".node", "data-node", "the job's five nodes", |n| {
            n == ["source", "greet", "relay", "count", "sink"]
        })
        .await;
    let first = records_in(&browser, "count").await;
    browser
        .wait_text(
            ".node[data-node=\"count\"] .records-in",
            "count's records in to rise",
            |t| t.trim().parse::<u64>().is_ok_and(|n| n > first),
        )
        .await;
    // About 2 000 records a second; a second in which the machine stalled may show less, so
    // the rate is waited for, not read once.
    browser
        .wait_text(
            ".node[data-node=\"count\"] .in-rate",
            "a rate of about 2 000 records a second",
            |t| t.ends_with("k/s"),
        )
        .await;
    let level = browser
        .text(".node[data-node=\"greet\"] .backpressure")
        .await;
    assert!(["OK", "LOW", "HIGH"].contains(&level.as_str()), "{level}");
    assert_eq!(
        browser
            .count(".node[data-node=\"count\"] tr[data-subtask]")
            .await,
        2
    );
    browser.find("#chart canvas").await;
    browser.screenshot("03-job").await;

    // A checkpoint from the page, confirmed first, appears in the history.
    confirmed(&browser, "#action-checkpoint", "checkpoint").await;
    browser
        .wait_text(
            "#checkpoints-table tr[data-checkpoint=\"1\"] .status",
            "completed",
            |t| t == "completed",
        )
        .await;
    assert_eq!(host.job(&id)["last_checkpoint"], 1);
    browser.screenshot("04-checkpoint").await;

    // The log: every operator's lines, then one operator's, then warnings only, HTML as text.
    browser
        .wait_attrs(
            "#log-lines .log-line",
            "data-operator",
            "lines of greet and relay",
            |o| o.iter().any(|o| o == "greet") && o.iter().any(|o| o == "relay"),
        )
        .await;
    browser.choose("#log-operator", "relay").await;
    browser
        .wait_attrs(
            "#log-lines .log-line",
            "data-operator",
            "relay's lines only",
            |o| !o.is_empty() && o.iter().all(|o| o == "relay"),
        )
        .await;
    browser.choose("#log-operator", "").await;
    browser.choose("#log-level", "warn").await;
    browser
        .wait_text("#log-lines .log-line .message", "the warning", |t| {
            t == HOSTILE_LOG
        })
        .await;
    browser
        .wait_attrs("#log-lines .log-line", "data-level", "warnings only", |l| {
            !l.is_empty() && l.iter().all(|l| l == "warn")
        })
        .await;
    assert_eq!(
        browser
            .count("#log-lines img, #jobs-table img, #job-title img")
            .await,
        0,
        "HTML from the page's data became elements"
    );
    assert!(
        !browser.alert_open().await,
        "a script from the page's data ran"
    );
    browser.screenshot("05-log-filtered").await;

    // Cancel, confirmed; then restart from the checkpoint taken above.
    confirmed(&browser, "#action-cancel", "Cancel").await;
    browser
        .wait_text("#job-status", "cancelled", |t| t == "cancelled")
        .await;
    assert_eq!(host.wait(&id)["status"], "cancelled");
    browser.screenshot("06-cancelled").await;
    // Offered once the page has read the job's checkpoints (`choose` waits for it).
    browser.choose("#restart-checkpoint", "1").await;
    confirmed(&browser, "#action-restart", "checkpoint 1").await;
    browser
        .wait_text("#job-status", "running", |t| t == "running")
        .await;
    assert!(
        !browser.alert_open().await,
        "a script from the page's data ran"
    );
    browser.screenshot("07-restarted").await;

    // A finished job's page: its input, and so its event time, ended.
    assert_eq!(host.wait(&finishing)["status"], "finished");
    browser
        .goto(&format!("{}/#/jobs/{finishing}", host.url))
        .await;
    browser
        .wait_text(
            ".node[data-node=\"count\"] .watermark",
            "the end of input",
            |t| t == "end of input",
        )
        .await;
    assert_eq!(records_in(&browser, "count").await, 3);
    browser.screenshot("08-finished").await;
    browser.close().await;
}

/// The page's one time format: local date and time, then the zone.
fn is_local_time(text: &str) -> bool {
    let b = text.as_bytes();
    text.len() > 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b' '
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b' '
        && text[..4].chars().all(|c| c.is_ascii_digit())
}

/// ISO 8601 in UTC, as the tooltips give times.
fn is_iso(text: &str) -> bool {
    text.len() >= 20 && text.as_bytes()[10] == b'T' && text.ends_with('Z')
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newcomer_reads_times_lateness_pages_of_history_and_jobs_that_ended_or_never_started() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;

    // An endless job whose event time is three days old, checkpointing every 20 ms.
    let ticking_dir = tempfile::tempdir().expect("tempdir");
    let ticking_job = write_job(
        ticking_dir.path(),
        &format!(
            r#"
            [job]
            name = "ticking"
            [source]
            kind = "generator"
            records = 10000000000
            keys = 50
            records_per_second = 500
            clock = {{ start_ms = {start}, events_per_second = 500 }}
            watermark = {{ max_out_of_order_ms = 0 }}
            [[operators]]
            name = "count"
            component = {counter}
            key_by = "key"
            [sink]
            kind = "discard"
            [checkpoints]
            interval_ms = 20
            "#,
            start = now_ms - 3 * 86_400_000,
            counter = toml_path(&component("weir-example-counter")),
        ),
    );
    let ticking = submit(&host, &ticking_job);

    // The windows example over its clicks, some too late for their windows, from a job file
    // one folder down that names its input `../clicks.jsonl`.
    let pages_dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        support::repo().join("examples/windows/clicks.jsonl"),
        pages_dir.path().join("clicks.jsonl"),
    )
    .expect("clicks");
    let jobs = pages_dir.path().join("jobs");
    std::fs::create_dir(&jobs).expect("jobs folder");
    let pages_job = write_job(
        &jobs,
        &format!(
            r#"
            [job]
            name = "pages"
            [source]
            kind = "json-lines"
            path = "../clicks.jsonl"
            key_pointer = "/page"
            timestamp = {{ json_pointer = "/ts", format = "ms" }}
            watermark = {{ max_out_of_order_ms = 5000, interval_ms = 0 }}
            [[operators]]
            name = "pages"
            component = {pages}
            key_by = "key"
            config = {{ size_ms = 60000, allowed_lateness_ms = 10000 }}
            [sink]
            kind = "file"
            path = "../counts.jsonl"
            "#,
            pages = toml_path(&component("weir-example-page-counts")),
        ),
    );
    let pages = submit(&host, &pages_job);
    assert_eq!(host.wait(&pages)["status"], "finished");

    // A job whose operator fails in `open`: `weir submit` waits for it and says so.
    let broken_dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(broken_dir.path().join("in.txt"), "a\n").expect("input");
    let broken_job = tokenize_then(
        broken_dir.path(),
        "name = \"broken\"",
        "victim",
        "weir-test-faulty",
        "config = { mode = \"no-such-mode\" }",
        "",
    );
    let out = host.weir(
        &["submit", broken_job.to_str().expect("utf-8"), "--json"],
        Some(TOKEN),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("failed as it started"), "{err}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(listed[0]["status"], "failed", "{listed}");
    let broken = listed[0]["id"].as_str().expect("an id").to_owned();

    let browser = Browser::start().await;
    browser.goto(&format!("{}/", host.url)).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#login-button").await;

    // Event time: the source's watermark is shown, and the lag in days, not seconds.
    browser
        .goto(&format!("{}/#/jobs/{ticking}", host.url))
        .await;
    for node in ["source", "count"] {
        let watermark = browser
            .wait_text(
                &format!(".node[data-node=\"{node}\"] .watermark"),
                "a watermark with its lag",
                |t| t.contains(" · lag "),
            )
            .await;
        let (time, lag) = watermark.split_once(" · lag ").expect("time and lag");
        assert!(is_local_time(time), "{watermark}");
        assert!(
            lag.ends_with(" d") && (lag.starts_with("2.") || lag.starts_with("3.")),
            "{node}: {watermark}"
        );
        let title = browser
            .attrs(&format!(".node[data-node=\"{node}\"] .watermark"), "title")
            .await;
        assert!(
            is_iso(title[0].split(' ').next().unwrap_or("")),
            "{title:?}"
        );
    }

    // The checkpoint history: 20 rows a page, older ones a click away.
    browser
        .wait_true(
            "an older page of checkpoints",
            "return !document.querySelector('#ck-older').disabled",
        )
        .await;
    assert_eq!(
        browser.count("#checkpoints-body tr[data-checkpoint]").await,
        20
    );
    let triggered = browser
        .text("#checkpoints-body tr[data-checkpoint] .triggered")
        .await;
    assert!(is_local_time(&triggered), "{triggered}");
    let titles = browser
        .attrs("#checkpoints-body tr[data-checkpoint] .triggered", "title")
        .await;
    assert!(titles.iter().all(|t| is_iso(t)), "{titles:?}");
    let first_page: Vec<u64> = browser
        .attrs("#checkpoints-body tr[data-checkpoint]", "data-checkpoint")
        .await
        .iter()
        .map(|id| id.parse().expect("an id"))
        .collect();
    let oldest_shown = *first_page.iter().min().expect("rows");
    browser.click("#ck-older").await;
    browser
        .wait_text("#ck-page", "page 2", |t| t == "page 2")
        .await;
    browser
        .wait_attrs(
            "#checkpoints-body tr[data-checkpoint]",
            "data-checkpoint",
            "older checkpoints",
            |ids| {
                !ids.is_empty()
                    && ids.len() <= 20
                    && ids
                        .iter()
                        .all(|id| id.parse::<u64>().is_ok_and(|id| id < oldest_shown))
            },
        )
        .await;
    browser.click("#ck-newer").await;
    browser
        .wait_text("#ck-page", "the newest page", |t| t == "newest 20")
        .await;
    browser.screenshot("09-history-pages").await;

    // A job that ended: counts, but no rates and no backpressure grade; its lateness, and
    // its paths without `..`.
    browser.goto(&format!("{}/#/jobs/{pages}", host.url)).await;
    browser
        .wait_text("#job-status", "finished", |t| t == "finished")
        .await;
    browser
        .wait_text(
            ".node[data-node=\"pages\"] .records-in",
            "the clicks counted",
            |t| t == "3184",
        )
        .await;
    for field in ["in-rate", "out-rate", "backpressure"] {
        let shown: Vec<String> = browser
            .eval(&format!(
                "return [...document.querySelectorAll('.node .{field}')].map(e => e.textContent)"
            ))
            .await
            .as_array()
            .expect("texts")
            .iter()
            .map(|t| t.as_str().unwrap_or_default().to_owned())
            .collect();
        assert!(
            !shown.is_empty() && shown.iter().all(|t| t == "—"),
            "{field} of a finished job: {shown:?}"
        );
    }
    assert_eq!(browser.count(".node [class*=\"level-\"]").await, 0);
    let dropped = browser
        .text(".node[data-node=\"pages\"] .node-stats > .dropped-late")
        .await;
    let dropped: u64 = dropped.parse().unwrap_or_else(|_| panic!("{dropped:?}"));
    assert!(dropped > 0, "the example's late clicks were not dropped");
    let source = browser
        .text(".node[data-node=\"source\"] .node-detail")
        .await;
    assert!(
        source.contains("clicks.jsonl") && !source.contains(".."),
        "{source}"
    );
    browser.screenshot("10-finished-with-lateness").await;

    // A job that never started has no checkpoint to restart from.
    browser.goto(&format!("{}/#/jobs/{broken}", host.url)).await;
    browser
        .wait_text("#job-status", "failed", |t| t == "failed")
        .await;
    browser
        .wait_true(
            "restart disabled",
            "return document.querySelector('#action-restart').disabled",
        )
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgraded_job_shows_its_versions_and_why_an_upgrade_rolled_back() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    let job = endless_job(dir.path());
    let id = submit(&host, &job);
    let text = std::fs::read_to_string(&job).expect("job file");
    // A version with an operator that fails as it opens, then a good one.
    let failing = dir.path().join("failing.toml");
    let check = format!(
        "[[operators]]\nname = \"check\"\ncomponent = {}\nconfig = {{ mode = \"no-such-mode\" }}\n",
        toml_path(&component("weir-test-faulty"))
    );
    std::fs::write(&failing, format!("{text}\n{check}")).expect("job file");
    let out = host.weir(
        &["upgrade", &id, failing.to_str().expect("utf-8")],
        Some(TOKEN),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = host.weir(&["upgrade", &id, job.to_str().expect("utf-8")], Some(TOKEN));
    assert!(out.status.success(), "{}", stderr(&out));

    let browser = Browser::start().await;
    browser.goto(&format!("{}/", host.url)).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#login-button").await;
    browser.goto(&format!("{}/#/jobs/{id}", host.url)).await;
    browser
        .wait_text("#versions-current", "the version that runs", |t| {
            t == "Version 3 runs."
        })
        .await;
    let rows = browser.count("#versions-body tr").await;
    assert_eq!(rows, 2);
    // Newest first.
    let newest = browser.text("#versions-body tr:nth-child(1)").await;
    assert!(
        newest.contains("1 → 3") && newest.contains("done"),
        "{newest}"
    );
    let oldest = browser.text("#versions-body tr:nth-child(2)").await;
    for part in ["1 → 2", "rolled back", "upgrade-2", "no-such-mode"] {
        assert!(oldest.contains(part), "{part}: {oldest}");
    }
    browser.screenshot("versions").await;
}

#[test]
fn every_data_and_action_endpoint_needs_the_token_and_every_response_is_locked_down() {
    let data = tempfile::tempdir().expect("tempdir");
    let host = Host::start(data.path());
    let dir = tempfile::tempdir().expect("tempdir");
    let id = submit(&host, &endless_job(dir.path()));
    let bearer = format!("Bearer {TOKEN}");

    let reads = [
        "/v1/jobs".to_owned(),
        format!("/v1/jobs/{id}"),
        format!("/v1/jobs/{id}/graph"),
        format!("/v1/jobs/{id}/rates"),
        format!("/v1/jobs/{id}/checkpoints"),
        format!("/v1/jobs/{id}/checkpoints/history"),
        format!("/v1/jobs/{id}/logs?level=warn"),
        "/metrics".to_owned(),
    ];
    let actions = [
        format!("/v1/jobs/{id}/checkpoint"),
        format!("/v1/jobs/{id}/restart"),
        format!("/v1/jobs/{id}/cancel"),
        format!("/v1/jobs/{id}/savepoints"),
        format!("/v1/jobs/{id}/upgrade"),
    ];
    let calls = reads
        .iter()
        .map(|p| ("GET", p))
        .chain(actions.iter().map(|p| ("POST", p)));
    for (method, path) in calls {
        for wrong in [None, Some("Bearer nope"), Some(TOKEN)] {
            let (status, headers, body) = host.request(method, path, wrong);
            assert_eq!(status, 401, "{method} {path} with {wrong:?}: {body}");
            assert_locked_down(&headers, path);
        }
    }
    for path in &reads {
        let (status, headers, body) = host.request("GET", path, Some(&bearer));
        assert_eq!(status, 200, "{path}: {body}");
        assert_locked_down(&headers, path);
    }

    // The console's assets need no token: they hold no data. The page loads only itself.
    let (status, headers, page) = host.request("GET", "/", None);
    assert_eq!(status, 200);
    assert_locked_down(&headers, "/");
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "remote origins:\n{page}"
    );
    for asset in [
        "/console/app.js",
        "/console/app.css",
        "/console/vendor/uPlot.iife.min.js",
    ] {
        let (status, headers, body) = host.request("GET", asset, None);
        assert_eq!(status, 200, "{asset}");
        assert!(!body.is_empty());
        assert_locked_down(&headers, asset);
    }
    let (_, headers, _) = host.request("GET", "/console/app.js", None);
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/javascript; charset=utf-8")
    );
    // The log's filters: a level that does not exist is the caller's mistake.
    let (status, _, body) = host.request(
        "GET",
        &format!("/v1/jobs/{id}/logs?level=loud"),
        Some(&bearer),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no log level `loud`"), "{body}");
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn assert_locked_down(headers: &[(String, String)], path: &str) {
    let csp = header(headers, "content-security-policy")
        .unwrap_or_else(|| panic!("{path}: no Content-Security-Policy"));
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
    ] {
        assert!(csp.contains(directive), "{path}: {csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("http"),
        "{path}: {csp}"
    );
    assert_eq!(
        header(headers, "x-content-type-options"),
        Some("nosniff"),
        "{path}"
    );
    assert_eq!(
        header(headers, "referrer-policy"),
        Some("no-referrer"),
        "{path}"
    );
}
