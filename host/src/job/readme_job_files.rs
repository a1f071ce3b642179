//! The job files the README shows use only settings that exist: each ```toml block, its
//! tables put into an otherwise minimal job, reads as a job file (whose tables refuse unknown
//! fields). A setting the README explains but the job file refuses is what a newcomer copies
//! first.

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

#[test]
fn every_job_file_snippet_of_the_readme_reads() {
    let readme = include_str!("../../../README.md");
    let blocks = toml_blocks(readme);
    assert!(blocks.len() >= 3, "the README's job files were not found");
    for (line, block) in blocks {
        let snippet: toml::Table = toml::from_str(&block)
            .unwrap_or_else(|e| panic!("README.md:{line}: not TOML: {e}\n{block}"));
        let mut job: toml::Table = toml::from_str(BASE).expect("the base job");
        for (table, value) in snippet {
            job.insert(table, value);
        }
        if let Err(e) = toml::Value::Table(job).try_into::<JobFile>() {
            panic!("README.md:{line}: not a job file: {e}\n{block}");
        }
    }
}

#[test]
fn a_setting_that_does_not_exist_is_caught() {
    let mut job: toml::Table = toml::from_str(BASE).expect("the base job");
    let source = job.get_mut("source").and_then(toml::Value::as_table_mut);
    source
        .expect("a source")
        .insert("batch_size".into(), 1024.into());
    assert!(toml::Value::Table(job).try_into::<JobFile>().is_err());
}
