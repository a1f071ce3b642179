//! Wordcount end to end: `weir run` with the example tokenizer and counter components, at
//! parallelism 1 and 3, against counts computed here from the same input.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use support::{component, repo, toml_path, weir, write_job};

/// Counts words the way the tokenizer is specified: lowercase, split on every character that
/// is not a letter or a digit.
fn expected_counts(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for word in text
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        *counts.entry(word.to_owned()).or_insert(0) += 1;
    }
    counts
}

fn run_wordcount(input: &Path, parallelism: u32) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.txt");
    let job = write_job(
        dir.path(),
        &format!(
            r#"
            [job]
            name = "wordcount-test"
            [source]
            kind = "text-lines"
            path = {input}
            [[operators]]
            name = "tokenize"
            component = {tokenizer}
            parallelism = {parallelism}
            [[operators]]
            name = "count"
            component = {counter}
            parallelism = {parallelism}
            key_by = "key"
            [sink]
            kind = "file"
            path = {out}
            "#,
            input = toml_path(input),
            tokenizer = toml_path(&component("weir-example-tokenizer")),
            counter = toml_path(&component("weir-example-counter")),
            out = toml_path(&out),
        ),
    );
    let result = weir(&["run", job.to_str().expect("utf-8 path")]);
    assert!(
        result.status.success(),
        "weir run failed:\n{}",
        support::stderr(&result)
    );
    std::fs::read_to_string(&out).expect("output file")
}

/// Checks the counter's output: for every word, the running counts 1..=n, each exactly once,
/// where n is the word's count in the input.
fn check(output: &str, expected: &BTreeMap<String, u64>) {
    let mut seen: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut lines = 0u64;
    for line in output.lines() {
        let (word, count) = line
            .split_once('\t')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {line:?}"));
        assert!(
            seen.entry(word.to_owned()).or_default().insert(count),
            "duplicate line {line:?}"
        );
        lines += 1;
    }
    assert_eq!(
        lines,
        expected.values().sum::<u64>(),
        "one output line per input word"
    );
    assert_eq!(seen.len(), expected.len(), "same set of words");
    for (word, n) in expected {
        let counts = &seen[word];
        assert_eq!(counts.len() as u64, *n, "word {word:?}");
        assert_eq!(
            counts.iter().next_back(),
            Some(n),
            "final count of {word:?}"
        );
    }
}

/// A larger input than the sample, so that subtasks see many batches and keys repeat across
/// batches.
fn generated_input(dir: &Path) -> std::path::PathBuf {
    let words = [
        "Alpha",
        "beta",
        "GAMMA",
        "delta",
        "ε-psilon",
        "zeta42",
        "eta",
        "theta",
    ];
    let mut text = String::new();
    for i in 0..20_000u64 {
        let n = (i * 2_654_435_761) % 97;
        text.push_str(&format!(
            "{}, {} {}!{}\n",
            words[(n % 8) as usize],
            words[(i % 8) as usize],
            n,
            i % 13
        ));
    }
    let path = dir.join("generated.txt");
    std::fs::write(&path, text).expect("write input");
    path
}

#[test]
fn wordcount_sample_at_parallelism_1_and_3() {
    let input = repo().join("examples/wordcount/input.txt");
    let expected = expected_counts(&std::fs::read_to_string(&input).expect("sample input"));
    assert!(expected.len() > 20, "the sample has a real vocabulary");
    for parallelism in [1, 3] {
        check(&run_wordcount(&input, parallelism), &expected);
    }
}

#[test]
fn wordcount_many_batches_at_parallelism_1_and_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = generated_input(dir.path());
    let expected = expected_counts(&std::fs::read_to_string(&input).expect("input"));
    for parallelism in [1, 3] {
        check(&run_wordcount(&input, parallelism), &expected);
    }
}
