//! The job files the README and the pages of `docs/` show use only settings that exist: each
//! ```toml block, its tables put into an otherwise minimal job, reads as a job file (whose
//! tables refuse unknown fields). A setting the docs explain but the job file refuses is what
//! a newcomer copies first.

use super::spec::JobFile;

/// A job with every required table, which a snippet's tables replace.
const BASE: &str = r#"
[job]
name = "readme"

[source]
kind = "text-lines"
path = "in.txt"

[[operators]]
name = "op"
component = "op.wasm"

[sink]
kind = "stdout"
"#;

/// The ```toml blocks of `markdown`, with the line each starts on.
fn toml_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, line) in markdown.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == "```toml" => current = Some((index + 1, String::new())),
            None => {}
            Some(_) if line.trim_start() == "```" => blocks.extend(current.take()),
            Some((_, text)) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    blocks
}

/// The README and every page of `docs/`, by name.
const PAGES: &[(&str, &str)] = &[
    ("README.md", include_str!("../../../README.md")),
    (
        "docs/checkpoints.md",
        include_str!("../../../docs/checkpoints.md"),
    ),
    (
        "docs/event-time.md",
        include_str!("../../../docs/event-time.md"),
    ),
    ("docs/install.md", include_str!("../../../docs/install.md")),
    (
        "docs/job-file.md",
        include_str!("../../../docs/job-file.md"),
    ),
    ("docs/kafka.md", include_str!("../../../docs/kafka.md")),
    (
        "docs/languages.md",
        include_str!("../../../docs/languages.md"),
    ),
    ("docs/layout.md", include_str!("../../../docs/layout.md")),
    ("docs/limits.md", include_str!("../../../docs/limits.md")),
    (
        "docs/performance.md",
        include_str!("../../../docs/performance.md"),
    ),
    ("docs/serve.md", include_str!("../../../docs/serve.md")),
    (
        "docs/upgrading.md",
        include_str!("../../../docs/upgrading.md"),
    ),
];

#[test]
fn every_job_file_snippet_of_the_docs_reads() {
    let mut found = 0;
    for (page, text) in PAGES {
        for (line, block) in toml_blocks(text) {
            found += 1;
            let snippet: toml::Table = toml::from_str(&block)
                .unwrap_or_else(|e| panic!("{page}:{line}: not TOML: {e}\n{block}"));
            let mut job: toml::Table = toml::from_str(BASE).expect("the base job");
            for (table, value) in snippet {
                job.insert(table, value);
            }
            if let Err(e) = toml::Value::Table(job).try_into::<JobFile>() {
                panic!("{page}:{line}: not a job file: {e}\n{block}");
            }
        }
    }
    assert!(found >= 5, "the docs' job files were not found: {found}");
}

#[test]
fn every_page_of_the_docs_is_checked() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs");
    let mut pages: Vec<String> = std::fs::read_dir(dir)
        .expect("docs/")
        .map(|e| format!("docs/{}", e.expect("entry").file_name().to_string_lossy()))
        .collect();
    pages.sort();
    let listed: Vec<&str> = PAGES.iter().skip(1).map(|(page, _)| *page).collect();
    assert_eq!(pages, listed, "list every page of docs/ in PAGES");
}
