//! The web console of `weir serve`, tested in a real browser (headless Chromium through
//! ChromeDriver; `scripts/browser` installs both): signing in, a running job's graph with
//! counts that rise, a checkpoint taken from the page, the log and its filters, cancelling
//! and restarting from a chosen checkpoint; a wrong token; job names and log lines that are
//! HTML shown as text. Screenshots go to `target/console-screenshots/`.
//!
//! And without a browser: every data and action endpoint refuses calls without the token,
//! and every response carries the security headers.

mod support;

use std::path::Path;
use std::time::Duration;

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
    submit(host, &job)
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
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let second = records_in(&browser, "count").await;
    assert!(
        second > first,
        "count's records in did not rise: {first} then {second}"
    );
    let rate = browser
        .wait_text(".node[data-node=\"count\"] .in-rate", "a rate", |t| {
            t.ends_with("/s")
        })
        .await;
    assert!(rate.contains("k/s"), "about 2 000 records a second: {rate}");
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
