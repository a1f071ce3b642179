//! `weir state get --key K ...` and `weir state scan [--prefix P] [--limit N] ...`: the keyed
//! state of one operator at a completed checkpoint, read from the store without running the
//! job. What a user reaches for when an operator's output looks wrong.
//!
//! The state is rebuilt as a restore rebuilds it: for each subtask of the operator whose key
//! groups are wanted, its chain of artifacts is read (ranged reads of only the wanted key
//! groups' sections, `checkpoint::storage::restore_chain`) and applied oldest first to a backend
//! that holds only those key groups; then its live entries are read out
//! (`KeyedStateBackend::entries`). `get` reads the one key group its key hashes to; `scan`
//! reads every key group, subtask by subtask in key-group order, and stops once it has more
//! than `--limit` entries, so rows come in key-group order (then key, then state).
//!
//! Values are shown decoded where they are JSON or CBOR and as hex otherwise ([`decode`]);
//! maps as maps, lists as lists, timers (`@timers`) as their clock, time and tag.
//!
//! Everything here reads; nothing writes or deletes, so it is safe to point at the store of a
//! running job.

mod decode;

use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::anyhow;
use serde_json::{Value, json};

use super::Failure;
use super::store_arg::StoreArg;
use crate::checkpoint::CheckpointStore;
use crate::checkpoint::metadata::{CheckpointMetadata, OperatorHandles, SubtaskHandle};
use crate::partition::{KeyGroup, KeyGroupRange, KeyGroups, hash_key};
use crate::serve::job_checkpoints::{InspectError, Which};
use crate::state::inspect::{Contents, StateEntry};
use crate::state::{KeyedStateBackend, TimeDomain, Timer};
use decode::Stored;

#[derive(Debug, clap::Args)]
pub(super) struct StateArgs {
    #[command(subcommand)]
    command: StateCommand,
}

#[derive(Debug, clap::Subcommand)]
enum StateCommand {
    /// Print one key's state: every state of the operator that holds something for it.
    Get {
        /// The key, as text (its UTF-8 bytes).
        #[arg(long, value_name = "KEY", required_unless_present = "key_hex")]
        key: Option<String>,
        /// The key as hex bytes (`0a1b…`, with or without `0x`), for a key that is not text.
        #[arg(long, value_name = "HEX", conflicts_with = "key")]
        key_hex: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Print the state of many keys: all of them, or those starting with --prefix.
    Scan {
        /// Only the keys whose bytes start with this text's.
        #[arg(long, value_name = "TEXT")]
        prefix: Option<String>,
        /// Print at most this many (key, state) entries, in key-group order; 0 for all.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, clap::Args)]
struct Common {
    /// The operator whose state to read: its uid in the job file, or its name when it has none.
    #[arg(long, value_name = "NAME")]
    operator: String,
    /// A job file (JOB.toml), a folder, or an object-store URL (file:///dir,
    /// s3://bucket/prefix), as for `weir checkpoints`.
    #[arg(long, value_name = "STORE")]
    store: String,
    /// The job, when the store holds the checkpoints of several.
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// The checkpoint id, or `latest`.
    #[arg(long, value_name = "ID|latest", default_value = "latest")]
    checkpoint: Which,
    /// Only the state with this name (`@timers` for the key's timers).
    #[arg(long, value_name = "NAME")]
    state: Option<String>,
    /// Print a JSON array of {key, key_hex, key_group, state, kind, value, raw_hex}.
    #[arg(long)]
    json: bool,
}

pub(super) fn state(args: StateArgs) -> Result<(), Failure> {
    let runtime = super::runtime(false)?;
    let (query, common) = match args.command {
        StateCommand::Get {
            key,
            key_hex,
            common,
        } => {
            let key = match (key, key_hex) {
                (Some(key), _) => key.into_bytes(),
                (None, Some(hex)) => parse_hex(&hex).map_err(Failure::input)?,
                (None, None) => return Err(Failure::input(anyhow!("give --key or --key-hex"))),
            };
            (
                Query {
                    keys: Keys::One(key),
                    state: common.state.clone(),
                    limit: None,
                },
                common,
            )
        }
        StateCommand::Scan {
            prefix,
            limit,
            common,
        } => (
            Query {
                keys: Keys::Prefix(prefix.unwrap_or_default().into_bytes()),
                state: common.state.clone(),
                limit: (limit > 0).then_some(limit),
            },
            common,
        ),
    };
    runtime.block_on(run(&common, &query))
}

async fn run(common: &Common, query: &Query) -> Result<(), Failure> {
    let target = StoreArg::open(&common.store, "")?;
    let job = target
        .one_job(
            common.job.as_deref(),
            &format!("checkpoint {}", common.checkpoint),
        )
        .await?;
    let store = target.store_of(&job);
    let metadata = pick(&store, &job, common.checkpoint)
        .await
        .map_err(|e| match e {
            InspectError::Storage(e) => target.unreadable(e),
            e => Failure::input(anyhow!("{}: {e}", target.url)),
        })?;
    let operator = metadata.operator(&common.operator).ok_or_else(|| {
        let names: Vec<&str> = metadata.operators.iter().map(|o| o.name.as_str()).collect();
        Failure::input(anyhow!(
            "checkpoint {} of job `{job}` has no operator `{}`; its operators: {}",
            metadata.id,
            common.operator,
            names.join(", ")
        ))
    })?;
    let scan = read_state(&store, &metadata, operator, query)
        .await
        .map_err(|e| {
            Failure::input(anyhow!(
                "cannot read the state of operator `{}` at checkpoint {} of job `{job}`: {e}",
                operator.name,
                metadata.id
            ))
        })?;
    if common.json {
        let rows: Vec<JsonRow<'_>> = scan.rows.iter().map(Row::json).collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(Failure::failed)?
        );
        if scan.truncated {
            eprintln!("{}", truncation_note(query));
        }
    } else {
        out!(
            "{}",
            describe(&job, &metadata, &operator.name, query, &scan)
        );
    }
    Ok(())
}

/// Which keys to read.
#[derive(Clone, Debug)]
enum Keys {
    /// One key: only its key group is read.
    One(Vec<u8>),
    /// The keys starting with these bytes (all of them for none): every key group.
    Prefix(Vec<u8>),
}

/// What to read and keep.
#[derive(Clone, Debug)]
struct Query {
    keys: Keys,
    /// Only this state.
    state: Option<String>,
    /// Stop after this many rows.
    limit: Option<usize>,
}

impl Query {
    fn wants(&self, entry: &StateEntry<'_>) -> bool {
        let key = match &self.keys {
            Keys::One(key) => entry.key == key.as_slice(),
            Keys::Prefix(prefix) => entry.key.starts_with(prefix),
        };
        key && self.state.as_deref().is_none_or(|s| s == entry.state)
    }
}

/// What a read found.
#[derive(Debug, Default)]
struct Scan {
    /// In key-group order, then key, then state.
    rows: Vec<Row>,
    /// There were more rows than the limit.
    truncated: bool,
    /// The key groups read, ascending.
    groups_read: Vec<KeyGroupRange>,
    /// Every state name the key groups read hold.
    states_seen: BTreeSet<String>,
}

/// One (key, state) and what it holds, decoded.
#[derive(Clone, Debug)]
struct Row {
    key: Vec<u8>,
    group: KeyGroup,
    state: String,
    /// `value`, `map`, `list` or `timers`.
    kind: &'static str,
    /// Decoded as far as it goes.
    value: Value,
    /// The bytes as stored, in hex: a string, an object (map key to value) or an array.
    raw: Value,
    /// `value` for a table cell.
    text: String,
}

impl Row {
    fn new(entry: &StateEntry<'_>, stored: Stored) -> Self {
        let (kind, value, raw, text) = match &entry.contents {
            Contents::Value(bytes) => {
                let (value, text) = match decode::decode(bytes, stored) {
                    Some(value) => (value.clone(), value.to_string()),
                    None => (Value::String(decode::hex(bytes)), decode::hex(bytes)),
                };
                ("value", value, Value::String(decode::hex(bytes)), text)
            }
            Contents::Map(entries) => {
                let value: serde_json::Map<String, Value> = entries
                    .iter()
                    .map(|(k, v)| (decode::map_key(k, stored), decode::shown(v, stored)))
                    .collect();
                let raw: serde_json::Map<String, Value> = entries
                    .iter()
                    .map(|(k, v)| (decode::hex(k), Value::String(decode::hex(v))))
                    .collect();
                let value = Value::Object(value);
                let text = value.to_string();
                ("map", value, Value::Object(raw), text)
            }
            Contents::List(items) => {
                let value = Value::Array(items.iter().map(|i| decode::shown(i, stored)).collect());
                let raw = items
                    .iter()
                    .map(|i| Value::String(decode::hex(i)))
                    .collect();
                let text = value.to_string();
                ("list", value, Value::Array(raw), text)
            }
            Contents::Timers { timers, set } => {
                let value = timers
                    .iter()
                    .map(|t| json!({ "domain": domain(t.domain), "at": t.at, "tag": t.tag }))
                    .collect();
                let text: Vec<String> = timers.iter().map(timer_text).collect();
                let raw = Value::String(decode::hex(set));
                ("timers", Value::Array(value), raw, text.join(", "))
            }
        };
        Self {
            key: entry.key.to_vec(),
            group: entry.group,
            state: entry.state.to_owned(),
            kind,
            value,
            raw,
            text,
        }
    }

    fn json(&self) -> JsonRow<'_> {
        JsonRow {
            key: match std::str::from_utf8(&self.key) {
                Ok(text) => text.to_owned(),
                Err(_) => decode::hex(&self.key),
            },
            key_hex: decode::hex(&self.key),
            key_group: self.group.0,
            state: &self.state,
            kind: self.kind,
            value: &self.value,
            raw_hex: &self.raw,
        }
    }
}

/// A row of `--json`, its fields in this order.
#[derive(Debug, serde::Serialize)]
struct JsonRow<'a> {
    /// The key's UTF-8, or its hex if it is not UTF-8.
    key: String,
    key_hex: String,
    key_group: u32,
    state: &'a str,
    kind: &'a str,
    value: &'a Value,
    raw_hex: &'a Value,
}

fn domain(d: TimeDomain) -> &'static str {
    match d {
        TimeDomain::EventTime => "event-time",
        TimeDomain::ProcessingTime => "processing-time",
    }
}

/// `event-time 2023-11-14T22:13:20.000Z (1700000000000) tag 0`; a time before 1970 or past
/// 9999 as its milliseconds.
fn timer_text(t: &Timer) -> String {
    // humantime writes years up to 9999 only (and panics past them).
    const LAST_MS: u64 = 253_402_300_799_999;
    let when = u64::try_from(t.at)
        .ok()
        .filter(|ms| *ms <= LAST_MS)
        .map_or_else(
            || format!("{} ms", t.at),
            |ms| {
                format!(
                    "{} ({})",
                    humantime::format_rfc3339_millis(
                        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
                    ),
                    t.at
                )
            },
        );
    format!("{} {when} tag {}", domain(t.domain), t.tag)
}

/// The metadata of checkpoint `which` of `job`.
async fn pick(
    store: &CheckpointStore,
    job: &str,
    which: Which,
) -> Result<CheckpointMetadata, InspectError> {
    let completed = store.completed().await?;
    let no_checkpoints = || InspectError::NoCheckpoints {
        job: job.to_owned(),
    };
    let id = match which {
        Which::Latest => *completed.last().ok_or_else(no_checkpoints)?,
        Which::Id(id) if completed.contains(&id) => id,
        Which::Id(_) if completed.is_empty() => return Err(no_checkpoints()),
        Which::Id(id) => {
            return Err(InspectError::NoSuchCheckpoint {
                job: job.to_owned(),
                id,
                completed,
            });
        }
    };
    Ok(store.read_metadata(id).await?)
}

/// The rows of `operator`'s state at `metadata`'s checkpoint that `query` asks for, reading
/// only the key groups it needs.
async fn read_state(
    store: &CheckpointStore,
    metadata: &CheckpointMetadata,
    operator: &OperatorHandles,
    query: &Query,
) -> Result<Scan, String> {
    let groups = KeyGroups::new(metadata.key_groups);
    let wanted = match &query.keys {
        Keys::One(key) => {
            let g = groups.of(hash_key(key));
            KeyGroupRange {
                start: g.0,
                end: g.0 + 1,
            }
        }
        Keys::Prefix(_) => KeyGroupRange {
            start: 0,
            end: groups.count(),
        },
    };
    let mut handles: Vec<&SubtaskHandle> = operator.subtasks.iter().collect();
    handles.sort_by_key(|h| h.key_groups);
    let stored = if operator.stores_json_text() {
        Stored::JsonOrCbor
    } else {
        Stored::Cbor
    };
    let mut scan = Scan::default();
    for handle in handles {
        let own = handle.range();
        let range = KeyGroupRange {
            start: own.start.max(wanted.start),
            end: own.end.min(wanted.end),
        };
        if range.start >= range.end {
            continue;
        }
        let backend = restore(store, groups, handle, range)
            .await
            .map_err(|e| format!("subtask {}: {e}", handle.subtask))?;
        scan.groups_read.push(range);
        scan.states_seen
            .extend(backend.state_names().map(str::to_owned));
        scan.rows.extend(
            backend
                .entries()
                .iter()
                .filter(|e| query.wants(e))
                .map(|e| Row::new(e, stored)),
        );
        if let Some(limit) = query.limit
            && scan.rows.len() > limit
        {
            scan.rows.truncate(limit);
            scan.truncated = true;
            break;
        }
    }
    Ok(scan)
}

/// The state of the key groups `range` of a subtask: its chain read for them, applied oldest
/// first.
async fn restore(
    store: &CheckpointStore,
    groups: KeyGroups,
    handle: &SubtaskHandle,
    range: KeyGroupRange,
) -> Result<KeyedStateBackend, String> {
    let mut backend = KeyedStateBackend::new(groups, range);
    store
        .restore_chain(&mut backend, handle, range)
        .await
        .map_err(|e| e.to_string())?;
    Ok(backend)
}

/// The human form: which checkpoint, a KEY / STATE / VALUE table, and what was left out.
fn describe(
    job: &str,
    metadata: &CheckpointMetadata,
    operator: &str,
    query: &Query,
    scan: &Scan,
) -> String {
    let mut out = String::new();
    let read = match (&query.keys, scan.groups_read.as_slice()) {
        (Keys::One(_), [one]) => format!("key group {}", one.start),
        (_, []) => "no key groups".to_owned(),
        (_, ranges) => {
            let first = ranges.first().map_or(0, |r| r.start);
            let last = ranges.last().map_or(0, |r| r.end);
            format!("key groups {first}..{last} of {}", metadata.key_groups)
        }
    };
    let _ = writeln!(
        out,
        "checkpoint {} of job `{job}`, operator `{operator}`, {read}",
        metadata.id
    );
    if scan.rows.is_empty() {
        let what = match &query.keys {
            Keys::One(key) => format!("key `{}` has no state", decode::key_text(key)),
            Keys::Prefix(p) if p.is_empty() => "no key has state".to_owned(),
            Keys::Prefix(p) => format!("no key starting with `{}` has state", decode::key_text(p)),
        };
        let named = query
            .state
            .as_deref()
            .map_or_else(String::new, |s| format!(" in `{s}`"));
        let _ = writeln!(out, "{what}{named}");
        if let Some(state) = &query.state
            && !scan.states_seen.contains(state)
        {
            let seen: Vec<&str> = scan.states_seen.iter().map(String::as_str).collect();
            let _ = writeln!(
                out,
                "(no state is named `{state}` in the key groups read; they hold: {})",
                if seen.is_empty() {
                    "nothing".to_owned()
                } else {
                    seen.join(", ")
                }
            );
        }
        return out;
    }
    let mut table = vec![vec!["KEY".to_owned(), "STATE".into(), "VALUE".into()]];
    table.extend(
        scan.rows
            .iter()
            .map(|r| vec![decode::key_text(&r.key), r.state.clone(), r.text.clone()]),
    );
    let columns = table.first().map_or(0, Vec::len);
    out.push_str(&super::checkpoints::render(&table, &vec![false; columns]));
    if scan.truncated {
        let _ = writeln!(out, "{}", truncation_note(query));
    }
    out
}

fn truncation_note(query: &Query) -> String {
    format!(
        "... more entries not shown: the first {} (in key-group order); raise --limit, or 0 for all",
        query.limit.unwrap_or(0)
    )
}

/// The bytes of hex digits, with or without a `0x`.
fn parse_hex(text: &str) -> anyhow::Result<Vec<u8>> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    if !digits.len().is_multiple_of(2) {
        return Err(anyhow!(
            "--key-hex {text:?} has an odd number of hex digits"
        ));
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            digits
                .get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| anyhow!("--key-hex {text:?} is not hex"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_timer_past_the_year_9999_is_shown_in_milliseconds() {
        let far = Timer {
            domain: TimeDomain::EventTime,
            at: i64::MAX,
            tag: 1,
        };
        assert_eq!(
            timer_text(&far),
            format!("event-time {} ms tag 1", i64::MAX)
        );
    }

    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use object_store::ObjectStore;
    use object_store::path::Path;

    use super::*;
    use crate::checkpoint::format;
    use crate::checkpoint::instrumented_store::{Faults, InstrumentedStore, StoreStats};
    use crate::checkpoint::metadata::{ArtifactRef, METADATA_VERSION};
    use crate::checkpoint::storage::put_increment;
    use crate::connectors::SourcePosition;
    use crate::ids::{CheckpointId, SubtaskIndex};
    use crate::state::{Increment, KeyRef, StateKind};

    const GROUPS: u32 = 32;
    const KEYS: u32 = 400;

    fn key(k: &str) -> KeyRef<'_> {
        KeyRef::new(k.as_bytes(), hash_key(k.as_bytes()))
    }

    fn cbor(n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(&n, &mut out).expect("encode");
        out
    }

    /// A store holding checkpoint 2 of job `j`: operator `count` with two subtasks, each with
    /// a chain of two artifacts: checkpoint 1 sets `count` of `k0`..`k399` to their number,
    /// checkpoint 2 adds 1000 to the even ones and removes `k1`. Returns the store, its
    /// stats, and the artifacts' bytes by path.
    async fn store() -> (CheckpointStore, Arc<StoreStats>, Vec<(Path, Vec<u8>)>) {
        let (inner, _) = crate::checkpoint::storage::open_store("memory:///").expect("open");
        let instrumented = InstrumentedStore::new(inner, Faults::default());
        let stats = instrumented.stats();
        let store = CheckpointStore::new(Arc::new(instrumented), &Path::from("root"), "j");
        let groups = KeyGroups::new(GROUPS);
        let mut handles = Vec::new();
        let mut artifacts = Vec::new();
        for s in 0..2u32 {
            let range = groups.range_of(SubtaskIndex(s), 2);
            let mut b = KeyedStateBackend::new(groups, range);
            let count = b.declare("count", StateKind::Value).expect("declare");
            let mine = |i: &u32| range.contains(groups.of(hash_key(format!("k{i}").as_bytes())));
            let mut chain = Vec::new();
            for checkpoint in 1..=2u64 {
                for i in (0..KEYS).filter(mine) {
                    let k = format!("k{i}");
                    match (checkpoint, i) {
                        (1, _) => b.value_set(count, key(&k), &cbor(u64::from(i))),
                        (_, 1) => b.value_remove(count, key(&k)),
                        (_, i) if i % 2 == 0 => {
                            b.value_set(count, key(&k), &cbor(u64::from(i) + 1000))
                        }
                        _ => Ok(()),
                    }
                    .expect("write");
                }
                let increment: Increment = b.snapshot();
                let path =
                    store.artifact_path("count", SubtaskIndex(s), CheckpointId(checkpoint), "r");
                let bytes = put_increment(store.object_store().as_ref(), &path, &increment)
                    .await
                    .expect("put");
                artifacts.push((path.clone(), format::encode(&increment).expect("encode")));
                chain.push(ArtifactRef {
                    path: store.relative(&path),
                    checkpoint: CheckpointId(checkpoint),
                    bytes,
                    full: checkpoint == 1,
                    owner: s,
                });
            }
            handles.push(SubtaskHandle {
                subtask: s,
                key_groups: (range.start, range.end),
                chain,
                ..SubtaskHandle::default()
            });
        }
        let metadata = CheckpointMetadata {
            version: METADATA_VERSION,
            job: "j".into(),
            id: CheckpointId(2),
            completed_at_ms: 0,
            finished: true,
            key_groups: GROUPS,
            source: SourcePosition::Null,
            sink: None,
            dead_letters: Default::default(),
            operators: vec![OperatorHandles {
                name: "count".into(),
                parallelism: 2,
                component: None,
                wit: None,
                state_encoding: Some(crate::checkpoint::metadata::STATE_ENCODING_CBOR.into()),
                subtasks: handles,
            }],
            source_max_timestamp: None,
            timing: None,
            counts: None,
        };
        store.write_metadata(&metadata).await.expect("metadata");
        (store, stats, artifacts)
    }

    fn query(keys: Keys, limit: Option<usize>) -> Query {
        Query {
            keys,
            state: None,
            limit,
        }
    }

    #[tokio::test]
    async fn get_reads_only_the_key_group_of_its_key() {
        let (store, stats, artifacts) = store().await;
        let metadata = pick(&store, "j", Which::Latest).await.expect("latest");
        assert_eq!(metadata.id, CheckpointId(2));
        let operator = metadata.operator("count").expect("operator");
        let k = "k42";
        let group = KeyGroups::new(GROUPS).of(hash_key(k.as_bytes()));
        // What reading one group of each artifact costs: its footer, index, header and that
        // group's section, if it has one.
        let mut expected_bytes = 0;
        let mut expected_gets = 0;
        let owner = operator
            .subtasks
            .iter()
            .find(|h| h.range().contains(group))
            .expect("a subtask owns the group");
        for a in &owner.chain {
            let encoded = &artifacts
                .iter()
                .find(|(p, _)| store.relative(p) == a.path)
                .expect("artifact")
                .1;
            let footer = format::read_footer(&encoded[encoded.len() - format::FOOTER_LEN..])
                .expect("footer");
            let start = footer.index_offset as usize;
            let index =
                format::decode_index(&encoded[start..start + footer.index_len as usize], &footer)
                    .expect("index");
            let section = index.groups.iter().find(|e| e.group == group);
            expected_bytes += format::FOOTER_LEN as u64
                + u64::from(footer.index_len)
                + 10
                + section.map_or(0, |e| e.len);
            expected_gets += 3 + u64::from(section.is_some());
        }
        let (bytes0, gets0) = (
            stats.bytes_read.load(Ordering::Relaxed),
            stats.gets.load(Ordering::Relaxed),
        );
        let scan = read_state(
            &store,
            &metadata,
            operator,
            &query(Keys::One(k.as_bytes().to_vec()), None),
        )
        .await
        .expect("read");
        let read = stats.bytes_read.load(Ordering::Relaxed) - bytes0;
        let gets = stats.gets.load(Ordering::Relaxed) - gets0;
        assert_eq!(
            read, expected_bytes,
            "only one key group's section of each artifact"
        );
        assert_eq!(gets, expected_gets);
        let total: u64 = artifacts.iter().map(|(_, b)| b.len() as u64).sum();
        assert!(read * 8 < total, "read {read} of {total} bytes");
        assert_eq!(
            scan.groups_read,
            [KeyGroupRange {
                start: group.0,
                end: group.0 + 1
            }]
        );
        assert_eq!(scan.rows.len(), 1);
        let row = &scan.rows[0];
        assert_eq!(
            (row.key.as_slice(), row.state.as_str()),
            (&b"k42"[..], "count")
        );
        assert_eq!(row.value, json!(1042), "the newest increment wins");
        assert_eq!(row.group, group);

        // A removed key has nothing; a key no one wrote neither.
        for k in ["k1", "nobody"] {
            let scan = read_state(
                &store,
                &metadata,
                operator,
                &query(Keys::One(k.as_bytes().to_vec()), None),
            )
            .await
            .expect("read");
            assert!(scan.rows.is_empty(), "{k}: {:?}", scan.rows);
            assert_eq!(scan.groups_read.len(), 1);
        }
    }

    #[tokio::test]
    async fn scan_filters_by_prefix_and_stops_at_the_limit() {
        let (store, _, _) = store().await;
        let metadata = pick(&store, "j", Which::Id(CheckpointId(2)))
            .await
            .expect("checkpoint 2");
        let operator = metadata.operator("count").expect("operator");
        let scan = read_state(
            &store,
            &metadata,
            operator,
            &query(Keys::Prefix(b"k12".to_vec()), None),
        )
        .await
        .expect("scan");
        let mut keys: Vec<String> = scan
            .rows
            .iter()
            .map(|r| String::from_utf8(r.key.clone()).expect("utf-8"))
            .collect();
        keys.sort();
        let mut expected: Vec<String> = (0..KEYS)
            .map(|i| format!("k{i}"))
            .filter(|k| k.starts_with("k12"))
            .collect();
        expected.sort();
        assert_eq!(keys, expected);
        assert!(!scan.truncated);
        assert_eq!(
            scan.groups_read.len(),
            2,
            "every key group, of both subtasks"
        );
        assert!(
            scan.rows
                .windows(2)
                .all(|w| (w[0].group, &w[0].key) <= (w[1].group, &w[1].key))
        );

        // 399 keys live (k1 removed); a limit below one subtask's share stops after it.
        let limited = read_state(
            &store,
            &metadata,
            operator,
            &query(Keys::Prefix(Vec::new()), Some(10)),
        )
        .await
        .expect("scan");
        assert_eq!(limited.rows.len(), 10);
        assert!(limited.truncated);
        assert_eq!(
            limited.groups_read.len(),
            1,
            "the second subtask is not read"
        );
        let all = read_state(
            &store,
            &metadata,
            operator,
            &query(Keys::Prefix(Vec::new()), None),
        )
        .await
        .expect("scan");
        assert_eq!(all.rows.len(), KEYS as usize - 1);
        assert!(!all.truncated);

        // A wrong state name finds nothing, and the states read are known.
        let mut named = query(Keys::Prefix(Vec::new()), None);
        named.state = Some("cuont".into());
        let none = read_state(&store, &metadata, operator, &named)
            .await
            .expect("scan");
        assert!(none.rows.is_empty());
        assert_eq!(none.states_seen, BTreeSet::from(["count".to_owned()]));
        let text = describe("j", &metadata, "count", &named, &none);
        assert!(text.contains("no state is named `cuont`"), "{text}");
        assert!(text.contains("they hold: count"), "{text}");
    }

    #[tokio::test]
    async fn a_missing_checkpoint_names_those_that_exist() {
        let (store, _, _) = store().await;
        let err = pick(&store, "j", Which::Id(CheckpointId(9)))
            .await
            .expect_err("no checkpoint 9")
            .to_string();
        assert!(
            err.contains("checkpoint 9") && err.contains("completed checkpoints: 2"),
            "{err}"
        );
        let empty = CheckpointStore::new(
            Arc::new(object_store::memory::InMemory::new()) as Arc<dyn ObjectStore>,
            &Path::from("root"),
            "j",
        );
        let err = pick(&empty, "j", Which::Latest)
            .await
            .expect_err("none")
            .to_string();
        assert!(err.contains("no completed checkpoint"), "{err}");
    }

    #[test]
    fn rows_of_every_kind_show_decoded_values_and_raw_bytes() {
        let groups = KeyGroups::new(8);
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let v = b.declare("v", StateKind::Value).expect("declare");
        let m = b.declare("m", StateKind::Map).expect("declare");
        let l = b.declare("l", StateKind::List).expect("declare");
        b.value_set(v, key("a"), b"\"json text\"").expect("set");
        b.value_set(v, key("b"), &[0xff, 0x00]).expect("set");
        b.map_put(m, key("a"), &cbor(3), b"7").expect("put");
        b.list_append(l, key("a"), &cbor(5)).expect("append");
        b.list_append(l, key("a"), b"plain").expect("append");
        b.timer_register(
            key("a"),
            Timer {
                domain: TimeDomain::EventTime,
                at: 1_700_000_000_000,
                tag: 2,
            },
        )
        .expect("timer");
        let rows: Vec<Row> = b
            .entries()
            .iter()
            .map(|e| Row::new(e, Stored::JsonOrCbor))
            .collect();
        let find = |k: &str, s: &str| {
            rows.iter()
                .find(|r| r.key == k.as_bytes() && r.state == s)
                .map(|r| serde_json::to_value(r.json()).expect("JSON"))
                .unwrap_or_else(|| panic!("no {k} {s}"))
        };
        let a = find("a", "v");
        assert_eq!(a["value"], json!("json text"));
        assert_eq!(a["raw_hex"], json!("0x226a736f6e207465787422"));
        assert_eq!(a["kind"], json!("value"));
        let b_row = find("b", "v");
        assert_eq!(b_row["value"], json!("0xff00"));
        assert_eq!(find("a", "m")["value"], json!({"3": 7}));
        assert_eq!(find("a", "m")["raw_hex"], json!({"0x03": "0x37"}));
        assert_eq!(find("a", "l")["value"], json!([5, "0x706c61696e"]));
        let timers = find("a", "@timers");
        assert_eq!(
            timers["value"],
            json!([{"domain": "event-time", "at": 1_700_000_000_000i64, "tag": 2}])
        );
        let timer_row = rows.iter().find(|r| r.state == "@timers").expect("timers");
        assert_eq!(
            timer_row.text,
            "event-time 2023-11-14T22:13:20.000Z (1700000000000) tag 2"
        );
        // The raw bytes are the stored timer set's.
        let set = b
            .value_get(b.state_id("@timers").expect("declared"), key("a"))
            .expect("get")
            .expect("set");
        assert_eq!(timers["raw_hex"], json!(decode::hex(set)));
        assert_eq!(
            rows.iter().find(|r| r.key == b"b").expect("b").text,
            "0xff00"
        );
    }

    #[test]
    fn hex_keys() {
        assert_eq!(parse_hex("0x00ff").expect("hex"), [0, 255]);
        assert_eq!(parse_hex("6b31").expect("hex"), b"k1");
        assert!(parse_hex("abc").is_err());
        assert!(parse_hex("zz").is_err());
    }
}
