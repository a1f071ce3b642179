//! Keyed state through a real component: accesses outside the subtask's key groups are
//! refused with a clear error.

use crate::support;

use weir_host::engine::{Engine, EngineOptions};
use weir_host::guest::WasmOperator;
use weir_host::ids::SubtaskIndex;
use weir_host::operator::{FailureKind, OperatorInstance, SubtaskContext};
use weir_host::partition::{KeyGroups, hash_key};
use weir_host::record::{RecordBatch, RecordRef};

fn counter_subtask(subtask: u32, parallelism: u32) -> WasmOperator {
    let engine = Engine::new(EngineOptions::default()).expect("engine");
    let component = engine
        .load(&support::component("weir-example-counter"))
        .expect("load");
    let ctx = SubtaskContext::new(
        "state-test",
        "count",
        subtask,
        parallelism,
        KeyGroups::new(128),
    );
    WasmOperator::open(&engine, &component, &ctx).expect("open")
}

fn batch_of(keys: &[&str]) -> RecordBatch {
    let mut batch = RecordBatch::new();
    for k in keys {
        batch.push_hashed(
            RecordRef::keyed(k.as_bytes(), k.as_bytes()),
            hash_key(k.as_bytes()),
        );
    }
    batch
}

#[test]
fn a_subtask_counts_the_keys_it_owns() {
    let mut op = counter_subtask(0, 1);
    let out = op
        .process(&mut batch_of(&["a", "b", "a"]))
        .expect("process");
    let values: Vec<_> = out
        .iter()
        .map(|r| String::from_utf8_lossy(r.value).into_owned())
        .collect();
    assert_eq!(values, ["a\t1", "b\t1", "a\t2"]);
    let out = op.process(&mut batch_of(&["a"])).expect("process");
    assert_eq!(out.get(0).value, b"a\t3", "state persists across batches");
}

#[test]
fn a_key_outside_the_subtask_key_groups_is_refused() {
    let groups = KeyGroups::new(128);
    let range = groups.range_of(SubtaskIndex(1), 3);
    let foreign = (0..)
        .map(|i| format!("key{i}"))
        .find(|k| !range.contains(groups.of(hash_key(k.as_bytes()))))
        .expect("a foreign key");
    let mut op = counter_subtask(1, 3);
    let err = op.process(&mut batch_of(&[&foreign])).expect_err("refused");
    assert_eq!(err.kind, FailureKind::Returned);
    let msg = err.to_string();
    assert!(msg.contains("operator `count` subtask 1"), "{msg}");
    assert!(
        msg.contains("outside this subtask's key groups 43..86"),
        "{msg}"
    );
    assert_eq!(op.state().stats().entries, 0, "nothing was written");
}

/// Input for the isolation runs: JSON lines keyed by user, `i` an item from a small set.
fn isolation_input(dir: &std::path::Path) -> (std::path::PathBuf, Vec<(String, String)>) {
    let mut text = String::new();
    let mut records = Vec::new();
    for n in 0..600u64 {
        let user = format!("u{}", (n * 7919) % 23);
        let line = format!(r#"{{"u":"{user}","i":"x{}"}}"#, (n * 31) % 4);
        text.push_str(&line);
        text.push('\n');
        records.push((user, line));
    }
    let path = dir.join("events.jsonl");
    std::fs::write(&path, text).expect("write input");
    (path, records)
}

fn isolation_job(
    dir: &std::path::Path,
    input: &std::path::Path,
    operators: &[(&str, u32)],
) -> String {
    let faulty = support::toml_path(&support::component("weir-test-faulty"));
    let mut job = format!(
        "[job]\nname = \"isolation\"\n[source]\nkind = \"json-lines\"\npath = {}\nkey_pointer = \"/u\"\n",
        support::toml_path(input)
    );
    for (name, parallelism) in operators {
        job.push_str(&format!(
            "[[operators]]\nname = \"{name}\"\ncomponent = {faulty}\nparallelism = {parallelism}\nkey_by = \"key\"\nconfig = {{ mode = \"isolation\" }}\n"
        ));
    }
    job.push_str("[sink]\nkind = \"file\"\npath = \"out.txt\"\n");
    let path = support::write_job(dir, &job);
    let out = support::weir(&["run", path.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    std::fs::read_to_string(dir.join("out.txt")).expect("output")
}

#[test]
fn value_map_and_list_state_are_isolated_per_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (input, records) = isolation_input(dir.path());
    let output = isolation_job(dir.path(), &input, &[("iso", 2)]);

    // The oracle: per key, in arrival order, the same updates.
    use std::collections::{BTreeMap, HashMap};
    let mut expected: HashMap<String, Vec<String>> = HashMap::new();
    let mut maps: HashMap<&str, BTreeMap<&str, u64>> = HashMap::new();
    let mut lists: HashMap<&str, Vec<&str>> = HashMap::new();
    for (user, line) in &records {
        let map = maps.entry(user).or_default();
        *map.entry(line).or_default() += 1;
        let list = lists.entry(user).or_default();
        list.push(line);
        let a = list.len() as u64;
        let mut map_text = map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>();
        map_text.sort_unstable();
        expected.entry(user.clone()).or_default().push(format!(
            "{user}\t{a}\t{}\t{}\t{}",
            a * 10,
            map_text.join(";"),
            list.join("|")
        ));
    }
    let mut actual: HashMap<String, Vec<String>> = HashMap::new();
    for line in output.lines() {
        let user = line.split('\t').next().expect("key field").to_owned();
        // Map entries come in the SDK's key order; compare them as a set.
        let mut fields: Vec<String> = line.split('\t').map(str::to_owned).collect();
        let mut entries: Vec<&str> = fields[3].split(';').collect();
        entries.sort_unstable();
        fields[3] = entries.join(";");
        actual.entry(user).or_default().push(fields.join("\t"));
    }
    assert_eq!(actual.len(), 23, "every user");
    for (user, lines) in &expected {
        assert_eq!(actual.get(user), Some(lines), "user {user}");
    }
}

#[test]
fn operators_do_not_share_state_even_with_the_same_state_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (input, records) = isolation_input(dir.path());
    let output = isolation_job(dir.path(), &input, &[("first", 2), ("second", 3)]);
    // `second` counts its own input: per key 1..n and 10..10n, whatever `first` stored
    // under the same names.
    let mut counts: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for (user, _) in &records {
        *counts.entry(user).or_default() += 1;
    }
    let mut seen: std::collections::HashMap<String, Vec<(u64, u64)>> =
        std::collections::HashMap::new();
    for line in output.lines() {
        let f: Vec<&str> = line.splitn(4, '\t').collect();
        let (a, b) = (f[1].parse().expect("a"), f[2].parse().expect("b"));
        seen.entry(f[0].to_owned()).or_default().push((a, b));
    }
    for (user, n) in counts {
        let expected: Vec<(u64, u64)> = (1..=n).map(|a| (a, a * 10)).collect();
        assert_eq!(seen.get(user), Some(&expected), "user {user}");
    }
}
