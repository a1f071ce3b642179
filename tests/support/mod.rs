//! Shared setup of the end-to-end tests: guest components built from source, once per test
//! process, and the `weir` binary.
//!
//! A test that needs a component never skips: if the build fails, the test fails with the
//! build's output.

#![allow(dead_code)]

pub mod browser;
pub mod crash;
pub mod emulators;
pub mod host;
pub mod kafka;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

/// Builds every guest component (a no-op when they are up to date) and returns the folder
/// that holds them.
pub fn guest_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = repo().join("scripts/build-guests");
        let out = Command::new("bash")
            .arg(&script)
            .current_dir(repo())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "building the guest components failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        repo().join("target/wasm32-wasip2/guest")
    })
}

/// The path of a guest component by crate name (`weir-example-counter`).
pub fn component(crate_name: &str) -> PathBuf {
    let path = guest_dir().join(format!("{}.wasm", crate_name.replace('-', "_")));
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// Builds the operator project `project` with `weir build` (a no-op when it is up to date)
/// and returns its component, `project/operator.wasm`. Test processes that build the same
/// project take turns through a lock file, so each project builds once per run.
pub fn built_operator(project: &Path) -> PathBuf {
    let lock = std::fs::File::create(repo().join("target/.weir-build-tests.lock"))
        .expect("create the build lock");
    lock.lock().expect("take the build lock");
    let out = weir(&["build", project.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "weir build {} failed (run scripts/setup-languages if a toolchain is missing):\n{}\n{}",
        project.display(),
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    let component = project.join("operator.wasm");
    assert!(component.is_file(), "{} was not built", component.display());
    component
}

/// A component cache shared by the tests of this run, so each component compiles once.
pub fn cache_dir() -> PathBuf {
    repo().join("target/test-component-cache")
}

/// Runs `weir` with `args`; the component cache is the tests' shared one.
pub fn weir(args: &[&str]) -> Output {
    weir_logging(args, "warn")
}

/// Runs `weir` with `args` and the environment variables `env` added (a cloud store's
/// settings); the component cache is the tests' shared one.
pub fn weir_with_env(args: &[&str], env: &[(String, String)]) -> Output {
    weir_command()
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("weir runs")
}

/// Runs `weir` with `args` and the log filter `filter` (`RUST_LOG`).
pub fn weir_logging(args: &[&str], filter: &str) -> Output {
    weir_command()
        .args(args)
        .env("RUST_LOG", filter)
        .output()
        .expect("weir runs")
}

/// The `weir` under test, as the tests run it: the tests' shared component cache, warnings
/// only, no colours, a `WEIR_HOME` without toolchains, so that builds use those
/// `scripts/setup-languages` installed next to the binary and never a user's own, and one
/// Cargo target folder for the Rust projects the tests build (dependencies compile once;
/// projects of the same name would share their output, so names differ between tests).
pub fn weir_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command
        .env("WEIR_CACHE_DIR", cache_dir())
        .env("WEIR_HOME", repo().join("target/test-weir-home"))
        .env("CARGO_TARGET_DIR", repo().join("target/test-build-rust"))
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1");
    command
}

/// Standard error as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that `weir` failed cleanly: a non-zero exit, an `error:` line containing every
/// one of `expected`, and no panic.
pub fn assert_clean_failure(out: &Output, expected: &[&str]) {
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr:\n{err}"
    );
    // A host panic starts a line with "thread '…' panicked"; a guest's panic message only
    // appears inside log lines and the error.
    let host_panic = err
        .lines()
        .any(|l| l.starts_with("thread '") && l.contains("panicked"));
    assert!(!host_panic, "weir panicked:\n{err}");
    assert!(err.contains("error:"), "no error line:\n{err}");
    for e in expected {
        assert!(err.contains(e), "stderr lacks {e:?}:\n{err}");
    }
}

/// Writes a job file into `dir` and returns its path.
pub fn write_job(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("job.toml");
    std::fs::write(&path, text).expect("write job file");
    path
}

/// Paces the file source of the job file at `job` to `lines_per_second`. For a test that acts
/// while a bounded job runs (kills it, starts a second run): the job then lasts at least its
/// lines over the pace, however fast the machine, and the test waits for its event (a
/// checkpoint) within that time instead of assuming the job has not ended yet.
pub fn pace_source(job: &Path, lines_per_second: u64) {
    let text = std::fs::read_to_string(job).expect("read job file");
    let kind = text
        .lines()
        .find(|l| {
            l.trim_start().starts_with("kind = \"text-lines\"")
                || l.trim_start().starts_with("kind = \"json-lines\"")
        })
        .expect("a job file with a file source")
        .to_owned();
    let paced = text.replacen(
        &kind,
        &format!("{kind}\nrecords_per_second = {lines_per_second}"),
        1,
    );
    std::fs::write(job, paced).expect("write job file");
}

/// TOML string literal for a path.
pub fn toml_path(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// Writes a job file in `dir`: text lines of `in.txt` -> the example tokenizer -> the
/// component of crate `component_crate`, as operator `operator`, keyed by word, with
/// `operator_lines` added to its section -> the file `out.txt`. `job_lines` go into `[job]`
/// (after its name), `tail` after the sink (a `[checkpoints]` section, say).
pub fn tokenize_then(
    dir: &Path,
    job_lines: &str,
    operator: &str,
    component_crate: &str,
    operator_lines: &str,
    tail: &str,
) -> PathBuf {
    tokenize_then_component(
        dir,
        job_lines,
        operator,
        &component(component_crate),
        operator_lines,
        tail,
    )
}

/// [`tokenize_then`] with the operator's component file rather than a crate name.
pub fn tokenize_then_component(
    dir: &Path,
    job_lines: &str,
    operator: &str,
    component_file: &Path,
    operator_lines: &str,
    tail: &str,
) -> PathBuf {
    write_job(
        dir,
        &format!(
            r#"
            [job]
            {job_lines}
            [source]
            kind = "text-lines"
            path = "in.txt"
            [[operators]]
            name = "tokenize"
            component = {tokenizer}
            [[operators]]
            name = "{operator}"
            component = {component}
            key_by = "key"
            {operator_lines}
            [sink]
            kind = "file"
            path = "out.txt"
            {tail}
            "#,
            tokenizer = toml_path(&component("weir-example-tokenizer")),
            component = toml_path(component_file),
        ),
    )
}

/// The ids of the completed checkpoints whose metadata (`chk-N.json`) lies in `folder` (a
/// job's `checkpoints/` folder in a `file://` store), ascending; none if it does not exist.
pub fn checkpoint_ids(folder: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(folder)
        .map(|entries| {
            entries
                .filter_map(|e| {
                    let name = e.ok()?.file_name().into_string().ok()?;
                    name.strip_prefix("chk-")?
                        .strip_suffix(".json")?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// Writes `dir/in.txt` of `lines` lines of three words each (97, 31 and 7 distinct words in
/// turn); returns the words, in order.
pub fn write_word_lines(dir: &Path, lines: usize) -> Vec<String> {
    let mut text = String::new();
    let mut words = Vec::new();
    for i in 0..lines {
        let line = format!("w{} w{} w{}", i % 97, i % 31, i % 7);
        words.extend(line.split(' ').map(str::to_owned));
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(dir.join("in.txt"), text).expect("write input");
    words
}

/// Waits until `held` is true, while `child` runs: it must still be running then (pace its
/// source, [`pace_source`]), and it must happen within a minute.
pub fn wait_while_running(child: &mut Child, what: &str, held: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !held() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within 60 s"
        );
        assert!(
            child.try_wait().expect("poll").is_none(),
            "the run ended before {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// `weir run ARGS` in the background, quiet: its output and log go nowhere.
pub fn spawn_run(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .args(args)
        .env("WEIR_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("weir starts")
}
