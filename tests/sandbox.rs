//! The sandbox, the same in every language: a probe operator in Python, JavaScript, C and Rust
//! (`tests/guests/sandbox-*`), built with `weir build` and run with `weir run`, prints, logs,
//! reads both clocks, draws random numbers, imports lazily (Python), and reaches for a host
//! file, an environment variable the host process has, and a socket. Each test asserts what
//! it emitted, that its printed and logged lines are in the log at their level, that the
//! file, the environment and the socket were refused with an error the operator caught (no
//! trap), that nobody connected to the socket, and that the job finished.

use crate::support;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use support::{built_operator, repo, stderr, toml_path, weir_command, write_job};

/// What a probe run left: its `check=result` records and its log (standard error).
struct Probed {
    results: BTreeMap<String, String>,
    log: String,
}

impl Probed {
    fn result(&self, check: &str) -> &str {
        self.results
            .get(check)
            .unwrap_or_else(|| panic!("no `{check}` result in {:?}", self.results))
    }

    /// The log has a line with `text` at `level` (`INFO`, `WARN`, `ERROR`), from `stream`
    /// (`stdout`, `stderr`) or from the WIT logger (`None`).
    fn logged(&self, text: &str, level: &str, stream: Option<&str>) {
        let line = self
            .log
            .lines()
            .find(|line| line.contains(text))
            .unwrap_or_else(|| panic!("{text:?} is not in the log:\n{}", self.log));
        assert!(
            line.contains(&format!(" {level} ")),
            "not at {level}: {line}"
        );
        assert!(line.contains("operator=\"probe\""), "{line}");
        match stream {
            Some(stream) => assert!(line.contains(&format!("stream=\"{stream}\"")), "{line}"),
            None => assert!(!line.contains("stream="), "not from the logger: {line}"),
        }
    }

    /// The checks every language makes: clocks, random numbers, and the refusals.
    fn assert_common(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let wall: u64 = self.result("wall_clock").parse().expect("seconds");
        assert!(now.abs_diff(wall) < 600, "wall clock {wall}, host {now}");
        assert_eq!(self.result("monotonic"), "ok");
        let draws: Vec<&str> = self.result("random").split(',').collect();
        for draw in &draws {
            assert!(
                !draw.is_empty() && draw.chars().any(|c| !matches!(c, '0' | '.')),
                "not random: {draws:?}"
            );
        }
        if let [a, b] = draws[..] {
            assert_ne!(a, b, "two draws gave the same number");
        }
        for check in ["file", "env", "socket"] {
            assert!(
                self.result(check).starts_with("refused: "),
                "{check} was not refused: {}",
                self.result(check)
            );
        }
    }
}

/// Builds the probe `tests/guests/sandbox-LANG` and runs it over one record, with
/// `WEIR_PROBE_SECRET` (and `WEIR_TOKEN`) set in the host's environment and a listening
/// socket for it to connect to.
fn probe(lang: &str) -> Probed {
    let component = built_operator(&repo().join("tests/guests").join(format!("sandbox-{lang}")));
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in.txt"), "probe\n").expect("input");
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("address").port();
    let job = write_job(
        dir.path(),
        &format!(
            r#"[job]
name = "sandbox-{lang}"

[source]
kind = "text-lines"
path = "in.txt"

[[operators]]
name = "probe"
component = {component}
config = {{ port = {port} }}

[sink]
kind = "file"
path = "out.txt"
"#,
            component = toml_path(&component)
        ),
    );
    let out = weir_command()
        .args(["run", job.to_str().expect("utf-8")])
        .env("RUST_LOG", "warn,weir::guest=info")
        .env("WEIR_PROBE_SECRET", "hunter2")
        .env("WEIR_TOKEN", "the-hosts-token")
        .output()
        .expect("weir runs");
    let log = stderr(&out);
    assert!(out.status.success(), "the {lang} probe failed:\n{log}");
    assert!(
        !log.contains("hunter2") && !log.contains("the-hosts-token"),
        "{log}"
    );
    listener.set_nonblocking(true).expect("nonblocking");
    assert!(
        listener
            .accept()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the {lang} probe connected to the host's socket"
    );
    Probed {
        results: results(&dir.path().join("out.txt")),
        log,
    }
}

fn results(out: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(out).expect("output");
    text.lines()
        .map(|line| {
            let (check, result) = line.split_once('=').unwrap_or_else(|| panic!("{line}"));
            (check.to_owned(), result.to_owned())
        })
        .collect()
}

fn this_year() -> String {
    // Days since 1970 to a year, good to a day at the turn of a year, which the test
    // tolerates by accepting the next year too.
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        / 86_400;
    (1970 + days * 400 / 146_097).to_string()
}

fn assert_year(probed: &Probed, check: &str) {
    let year: u64 = probed.result(check).parse().expect("a year");
    let expected: u64 = this_year().parse().expect("a year");
    assert!(
        year == expected || year == expected + 1,
        "{check}: {year}, expected {expected}"
    );
}

#[test]
fn python_prints_logs_reads_clocks_draws_random_imports_lazily_and_is_refused_the_host() {
    let probed = probe("python");
    probed.assert_common();
    assert_year(&probed, "datetime");
    // The version `weir build` checks syntax for (build/python_check.rs) is the component's.
    let (major, minor) = weir_host::build::GUEST_PYTHON;
    assert_eq!(probed.result("python_version"), format!("{major}.{minor}"));
    assert_eq!(probed.result("random_module"), "True");
    assert_eq!(probed.result("uuid"), "4");
    assert_eq!(probed.result("lazy_import"), "2");
    assert_eq!(
        probed.result("missing_module"),
        "refused: ModuleNotFoundError"
    );
    // A host file does not exist for the guest; the environment is empty.
    assert_eq!(probed.result("file"), "refused: FileNotFoundError");
    assert_eq!(probed.result("env"), "refused: KeyError");
    assert_eq!(probed.result("environ"), "0");
    probed.logged("probe: printed to stdout", "INFO", Some("stdout"));
    probed.logged("probe: printed to stderr", "WARN", Some("stderr"));
    // `logging` at every level, the level carried once (by the log line, not in its text).
    probed.logged("probe: logging.info", "INFO", None);
    probed.logged("probe: logging.warning", "WARN", None);
    probed.logged("probe: logging.error", "ERROR", None);
    probed.logged("probe.named: logging.getLogger", "WARN", None);
    assert!(!probed.log.contains("WARNING:root"), "{}", probed.log);
    assert_eq!(
        probed.log.matches("probe: logging.info").count(),
        1,
        "{}",
        probed.log
    );
    probed.logged("probe: weir_sdk.info", "INFO", None);
}

#[test]
fn javascript_writes_to_the_console_reads_clocks_draws_random_and_is_refused_the_host() {
    let probed = probe("js");
    probed.assert_common();
    assert_year(&probed, "date");
    // QuickJS has no file, process or network API: what Node.js code would call is not there.
    for check in ["file", "env", "socket"] {
        assert_eq!(probed.result(check), "refused: ReferenceError");
    }
    probed.logged("probe: console.log", "INFO", None);
    probed.logged("probe: console.info", "INFO", None);
    probed.logged("probe: console.warn", "WARN", None);
    probed.logged("probe: console.error", "ERROR", None);
    probed.logged("probe: weir log.info", "INFO", None);
}

#[test]
fn c_prints_reads_clocks_draws_random_and_gets_error_returns_from_the_host() {
    let probed = probe("c");
    probed.assert_common();
    assert_eq!(probed.result("file"), "refused: ENOTCAPABLE");
    assert_eq!(probed.result("env"), "refused: NULL");
    assert_eq!(probed.result("socket"), "refused: ENOTCAPABLE");
    probed.logged("probe: printf", "INFO", Some("stdout"));
    probed.logged("probe: fprintf(stderr)", "WARN", Some("stderr"));
    probed.logged("probe: weir_log", "INFO", None);
}

#[test]
fn rust_prints_reads_clocks_draws_random_and_gets_errors_from_the_host() {
    let probed = probe("rust");
    probed.assert_common();
    assert_eq!(probed.result("file"), "refused: NotFound");
    assert_eq!(probed.result("env"), "refused: NotPresent");
    assert_eq!(probed.result("socket"), "refused: PermissionDenied");
    probed.logged("probe: println", "INFO", Some("stdout"));
    probed.logged("probe: eprintln", "WARN", Some("stderr"));
    probed.logged("probe: log::info", "INFO", None);
}
