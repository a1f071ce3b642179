//! `weir new` and `weir build` end to end: a new project of each language builds, its
//! component passes the world check and its job gives the expected output; a syntax error
//! fails with the compiler's message, a component of another world with the world check's,
//! a missing toolchain with how to install it.
//!
//! The toolchains are those `scripts/setup-languages` installs (`scripts/test` runs it
//! first). A test whose toolchain is missing fails and says so; none skips.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::{repo, stderr};

/// What every skeleton's job prints: `user<TAB>count` for each line of its `input.jsonl`.
const SKELETON_OUTPUT: &str = "ada\t1\nbob\t1\nada\t2\nada\t3\n";

/// Runs `weir` with `args` and the extra environment `env`; the component cache is the
/// tests' shared one. Rust builds share one Cargo target folder across runs, so the SDK and
/// its dependencies compile once.
fn weir_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = support::weir_command();
    command.args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("weir runs")
}

fn weir(args: &[&str]) -> Output {
    weir_env(args, &[])
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// `weir new --lang LANG` of the project `name` in a fresh temporary folder; returns the
/// folder (kept alive by the returned guard) and the project in it. Names differ between
/// tests: Rust projects of the same name would share their output in the Cargo target folder.
fn new_project(lang: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join(name);
    let out = weir(&["new", "--lang", lang, path_str(&project)]);
    assert!(
        out.status.success(),
        "weir new --lang {lang} failed:\n{}",
        stderr(&out)
    );
    (dir, project)
}

/// `weir build PROJECT`, which must succeed.
fn build(project: &Path) -> String {
    let out = weir(&["build", path_str(project)]);
    assert!(
        out.status.success(),
        "weir build {} failed (a missing toolchain? run scripts/setup-languages or weir toolchain install):\n{}",
        project.display(),
        stderr(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A new project builds into `operator.wasm`, a second build finds it up to date (except in
/// Rust, where Cargo decides), and its job prints the skeleton's counts.
fn new_project_builds_and_runs(lang: &str) {
    let (_dir, project) = new_project(lang, &format!("new-{lang}"));
    let built = build(&project);
    assert!(
        built.contains("implements weir:operator/operator"),
        "{built}"
    );
    assert!(project.join("operator.wasm").is_file());
    if lang == "rust" {
        // The project takes the SDK the binary staged in it, not a checkout of Weir's; a
        // second build leaves the staged files (and so Cargo's fingerprints) as they were.
        let manifest = std::fs::read_to_string(project.join("Cargo.toml")).expect("manifest");
        assert!(
            manifest.contains("path = \".weir-build/rust/weir-guest\""),
            "{manifest}"
        );
        let staged = project.join(".weir-build/rust/weir-guest/src/lib.rs");
        let modified = || {
            std::fs::metadata(&staged)
                .and_then(|m| m.modified())
                .expect("staged")
        };
        let before = modified();
        build(&project);
        assert_eq!(modified(), before, "the staged SDK was rewritten");
    } else {
        let again = build(&project);
        assert!(again.contains("up to date"), "{again}");
    }
    let out = weir(&["run", path_str(&project.join("job.toml")), "--quiet"]);
    assert!(out.status.success(), "weir run failed:\n{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), SKELETON_OUTPUT);
}

#[test]
fn new_rust_project_builds_and_runs() {
    new_project_builds_and_runs("rust");
}

#[test]
fn new_python_project_builds_and_runs() {
    new_project_builds_and_runs("python");
}

#[test]
fn new_js_project_builds_and_runs() {
    new_project_builds_and_runs("js");
}

#[test]
fn new_c_project_builds_and_runs() {
    new_project_builds_and_runs("c");
}

/// The README's first operator in `lang`: the fenced block whose info string is `lang FILE`,
/// and `FILE`.
fn readme_operator(lang: &str) -> (String, String) {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let Some(file) = line
            .strip_prefix("```")
            .and_then(|info| info.strip_prefix(lang))
            .and_then(|rest| rest.strip_prefix(' '))
        else {
            continue;
        };
        let code: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        return (file.to_owned(), code.join("\n") + "\n");
    }
    panic!("README.md has no ```{lang} FILE block");
}

/// The README's first operator of a language, put in place of a new project's, builds and
/// counts as the project's own does: the operators a newcomer copies first work.
fn readme_operator_builds_and_runs(lang: &str, fence: &str) {
    let (_dir, project) = new_project(lang, &format!("readme-{lang}"));
    let (file, code) = readme_operator(fence);
    assert!(
        project.join(&file).is_file(),
        "a {lang} project has no {file}"
    );
    std::fs::write(project.join(&file), code).expect("write the operator");
    build(&project);
    let out = weir(&["run", path_str(&project.join("job.toml")), "--quiet"]);
    assert!(out.status.success(), "weir run failed:\n{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), SKELETON_OUTPUT);
}

#[test]
fn the_readmes_rust_operator_builds_and_runs() {
    readme_operator_builds_and_runs("rust", "rust");
}

#[test]
fn the_readmes_python_operator_builds_and_runs() {
    readme_operator_builds_and_runs("python", "python");
}

#[test]
fn the_readmes_js_operator_builds_and_runs() {
    readme_operator_builds_and_runs("js", "js");
}

#[test]
fn the_readmes_c_operator_builds_and_runs() {
    readme_operator_builds_and_runs("c", "c");
}

/// Appends `broken` to the project's `file`, builds, and expects exit code 1 with every one
/// of `expected` on standard error, the build's failure named, and no stack trace.
fn syntax_error_fails_with_the_compilers_message(
    lang: &str,
    file: &str,
    broken: &str,
    expected: &[&str],
) {
    let (_dir, project) = new_project(lang, &format!("broken-{lang}"));
    let source = project.join(file);
    let mut text = std::fs::read_to_string(&source).expect("read the skeleton");
    text.push_str(broken);
    std::fs::write(&source, text).expect("write the broken source");
    let out = weir(&["build", path_str(&project)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "expected exit code 1:\n{err}");
    for e in expected {
        assert!(err.contains(e), "stderr lacks {e:?}:\n{err}");
    }
    assert!(err.contains("build failed"), "{err}");
    let lower = err.to_lowercase();
    assert!(
        !lower.contains("panicked") && !lower.contains("stack backtrace"),
        "a stack trace:\n{err}"
    );
    assert!(
        !project.join("operator.wasm").exists(),
        "a failed build left a component"
    );
}

#[test]
fn rust_syntax_error_fails_with_rustcs_message() {
    syntax_error_fails_with_the_compilers_message(
        "rust",
        "src/lib.rs",
        "\nfn broken( {\n",
        &[
            "error: this file contains an unclosed delimiter",
            "src/lib.rs",
        ],
    );
}

#[test]
fn python_syntax_error_fails_with_pythons_message() {
    syntax_error_fails_with_the_compilers_message(
        "python",
        "operator.py",
        "\ndef broken(:\n    pass\n",
        // Found by the local Python before componentize-py starts (build/python_check.rs):
        // the file and line, and which Python judged.
        &["SyntaxError", "operator.py\", line", "found by Python 3."],
    );
}

#[test]
fn js_syntax_error_fails_with_quickjss_message() {
    syntax_error_fails_with_the_compilers_message(
        "js",
        "operator.js",
        "\nlet broken = ;\n",
        &["unexpected token", "operator.js"],
    );
}

#[test]
fn c_syntax_error_fails_with_clangs_message() {
    syntax_error_fails_with_the_compilers_message(
        "c",
        "operator.c",
        "\nint broken( {\n",
        &["operator.c:", "error:"],
    );
}

#[test]
fn a_component_of_another_world_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_path = dir.path().join("not-an-operator.wasm");
    let project = repo().join("tests/guests/not-an-operator");
    let out = weir(&["build", path_str(&project), "-o", path_str(&out_path)]);
    support::assert_clean_failure(
        &out,
        &[
            "does not implement the world weir:operator/operator@0.6.0",
            "does not export `weir:operator/processor@0.6.0`",
            "wasi:cli/run",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!out_path.exists(), "the refused component was written");
}

#[test]
fn a_missing_toolchain_says_how_to_install_it() {
    let (_dir, project) = new_project("python", "no-tools");
    let out = weir_env(
        &["build", path_str(&project)],
        &[("WEIR_COMPONENTIZE_PY", "/nonexistent/componentize-py")],
    );
    support::assert_clean_failure(
        &out,
        &[
            "componentize-py not found",
            "WEIR_COMPONENTIZE_PY=/nonexistent/componentize-py",
            "run `weir toolchain install python`",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn a_folder_without_a_project_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = weir(&["build", path_str(dir.path())]);
    support::assert_clean_failure(
        &out,
        &[
            "is not an operator project",
            "Cargo.toml, operator.py, operator.js, operator.c",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn new_refuses_an_existing_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("taken");
    std::fs::create_dir(&project).expect("create");
    let out = weir(&["new", "--lang", "c", path_str(&project)]);
    support::assert_clean_failure(&out, &["already exists"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_dir(&project).expect("read").count(),
        0,
        "weir new wrote into an existing folder"
    );
}

/// Sets `path`'s modification time `seconds` into the past.
fn age(path: &Path, seconds: u64) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(seconds))
        .expect("set mtime");
}

#[test]
fn run_warns_when_a_projects_sources_are_newer_than_its_component() {
    let (_dir, project) = new_project("c", "stale-c");
    build(&project);
    let job = project.join("job.toml");
    let component = project.join("operator.wasm");
    // Not -q: that prints errors only, and this warning is not one.
    let run = || weir(&["run", path_str(&job)]);
    let out = run();
    assert!(out.status.success(), "weir run failed:\n{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));

    // The source edited after the build (the component a minute older: file times can be
    // coarser than the edit).
    let source = project.join("operator.c");
    let mut text = std::fs::read_to_string(&source).expect("source");
    text.push_str("\n/* edited */\n");
    std::fs::write(&source, text).expect("edit");
    age(&component, 60);
    let out = run();
    assert!(out.status.success(), "weir run failed:\n{}", stderr(&out));
    let warning = format!(
        "warning: operator `stale-c`: {} is newer than its component {}; rebuild it with \
         `weir build {}`",
        source.display(),
        component.display(),
        project.display()
    );
    assert!(stderr(&out).contains(&warning), "{}", stderr(&out));
    // A warning only: the job ran with the component it has.
    assert_eq!(String::from_utf8_lossy(&out.stdout), SKELETON_OUTPUT);

    // Rebuilt, nothing to say.
    build(&project);
    let out = run();
    assert!(out.status.success(), "weir run failed:\n{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));

    // Without its component, the job file's error names the build that makes it.
    std::fs::remove_file(&component).expect("remove");
    let out = run();
    support::assert_clean_failure(
        &out,
        &[&format!("build it with `weir build {}`", project.display())],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
