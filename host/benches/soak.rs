//! The soak: for the given number of minutes, word counts checkpointing to S3 (moto) are
//! SIGKILLed at random instants and restored, with a random parallelism at each restore
//! (rescales), while the store is stopped now and then (SIGSTOP for up to three seconds:
//! store faults). Each round ends with the job run to its end and checked: its output is
//! exactly the uninterrupted one, every retained checkpoint verifies whole, and the store
//! holds exactly what they reference (no orphan). Not part of CI: `scripts/soak MINUTES`.
//!
//! `cargo bench -p weir-host --bench soak -- MINUTES` (WEIR_MOTO_SERVER set, as
//! `scripts/soak` does; WEIR_TEST_SEED replays a run).

mod host_allocator;

#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::crash::{OutputCheck, Rng, committed, running_counts, seed};
use support::emulators::{Cloud, StoreServer};
use support::{tokenize_then, weir_command, weir_with_env};
use weir_host::checkpoint::CheckpointStore;
use weir_host::checkpoint::storage::open_store_with;

/// What the soak did.
#[derive(Default)]
struct Tally {
    rounds: u64,
    runs: u64,
    kills: u64,
    restores: u64,
    rescales: u64,
    store_faults: u64,
    checkpoints: u64,
    bytes: u64,
    orphans: u64,
}

fn main() {
    weir_host::disable_huge_pages();
    let minutes: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1.0);
    let seed = seed();
    let mut rng = Rng(seed | 1);
    let server = StoreServer::start(Cloud::S3);
    let deadline = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let mut tally = Tally::default();
    println!("soak: {minutes} minutes, seed {seed} (WEIR_TEST_SEED replays it)");
    while Instant::now() < deadline {
        tally.rounds += 1;
        round(&server, &mut rng, tally.rounds, deadline, &mut tally);
    }
    println!(
        "soak: {} rounds, {} runs: {} kills, {} restores, {} rescales, {} store faults; \
         {} checkpoints, {} bytes of artifacts retained at the ends; orphans found: {}",
        tally.rounds,
        tally.runs,
        tally.kills,
        tally.restores,
        tally.rescales,
        tally.store_faults,
        tally.checkpoints,
        tally.bytes,
        tally.orphans
    );
    for (name, value, unit) in [
        ("soak_kills", tally.kills, "count"),
        ("soak_restores", tally.restores, "count"),
        ("soak_rescales", tally.rescales, "count"),
        ("soak_store_faults", tally.store_faults, "count"),
        ("soak_checkpoints", tally.checkpoints, "count"),
        ("soak_retained_bytes", tally.bytes, "bytes"),
        ("soak_orphans", tally.orphans, "count"),
    ] {
        println!("bench: {name} = {value} {unit}");
    }
    assert_eq!(
        tally.orphans, 0,
        "the store held objects no checkpoint references"
    );
}

/// One job from its beginning to its checked end.
fn round(server: &StoreServer, rng: &mut Rng, n: u64, deadline: Instant, tally: &mut Tally) {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = write_words(&dir.path().join("in.txt"), 60_000 + rng.below(60_000), rng);
    let name = format!("soak-{n}");
    let store = server.url("soak");
    let job = tokenize_then(
        dir.path(),
        &format!("name = \"{name}\"\nbatch_size = {}", 16 << rng.below(4)),
        "count",
        "weir-example-counter",
        "parallelism = 2",
        &format!(
            "[checkpoints]\nstore = \"{store}\"\ninterval_ms = {}\ntimeout_ms = 1000\n\
             retain = {}\nmax_chain = {}\nrestart_attempts = 0\ntolerable_failures = 1000",
            20 + rng.below(200),
            1 + rng.below(3),
            2 + rng.below(6),
        ),
    );
    let job = job.to_str().expect("utf-8").to_owned();
    let env = server.env();
    let mut parallelism = 2;
    let mut started = false;
    let mut check = OutputCheck::new(&expected);
    // Kill at random instants until a run gets to the end (or time is up: then one last
    // run without kills).
    loop {
        let next = 1 + rng.below(4);
        if started && next != parallelism {
            tally.rescales += 1;
        }
        parallelism = next;
        let mut args = vec!["run".to_owned(), job.clone(), "-q".to_owned()];
        if started {
            args.extend(["--restore".into(), "latest".into()]);
            tally.restores += 1;
        }
        args.extend(["--parallelism".into(), format!("count={parallelism}")]);
        let mut child = weir_command()
            .args(&args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("weir starts");
        started = true;
        tally.runs += 1;
        let last = Instant::now() >= deadline;
        if !last {
            std::thread::sleep(Duration::from_millis(100 + rng.below(900)));
            if rng.below(3) == 0 {
                tally.store_faults += 1;
                server.pause();
                std::thread::sleep(Duration::from_millis(500 + rng.below(2_500)));
                server.resume();
                std::thread::sleep(Duration::from_millis(rng.below(500)));
            }
        }
        let finished = last || child.try_wait().expect("poll").is_some();
        if !finished {
            child.kill().expect("SIGKILL");
            tally.kills += 1;
        }
        let out = child.wait_with_output().expect("wait");
        if finished {
            assert!(
                out.status.success(),
                "round {n}: weir failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        check.check(dir.path());
        if finished {
            break;
        }
    }
    assert_eq!(committed(dir.path()), expected, "round {n}: exactly once");
    let verified = weir_with_env(
        &[
            "checkpoints",
            "verify",
            "all",
            "--store",
            &store,
            "--job",
            &name,
        ],
        &env,
    );
    assert!(
        verified.status.success(),
        "round {n}: {}",
        String::from_utf8_lossy(&verified.stdout)
    );
    let (objects, prefix) = open_store_with(&store, server.settings()).expect("open the store");
    let checkpoints = CheckpointStore::new(objects, &prefix, &name);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (ids, bytes, orphans) = runtime.block_on(census(&checkpoints));
    tally.checkpoints += ids;
    tally.bytes += bytes;
    tally.orphans += orphans.len() as u64;
    assert!(orphans.is_empty(), "round {n}: orphans {orphans:?}");
}

/// The newest checkpoint id, the bytes the retained checkpoints' artifacts hold, and the
/// objects no retained checkpoint references.
async fn census(store: &CheckpointStore) -> (u64, u64, Vec<String>) {
    let mut expected = BTreeSet::new();
    let mut bytes = 0;
    let completed = store.completed().await.expect("list checkpoints");
    for &id in &completed {
        expected.insert(store.metadata_path(id).to_string());
        let metadata = store.read_metadata(id).await.expect("read metadata");
        for artifact in metadata.artifacts() {
            if expected.insert(store.resolve(&artifact.path).to_string()) {
                bytes += artifact.bytes;
            }
        }
    }
    let orphans = store
        .list_all()
        .await
        .expect("list")
        .iter()
        .map(ToString::to_string)
        .filter(|p| !expected.contains(p))
        .collect();
    let newest = completed.last().map_or(0, |id| id.0);
    (newest, bytes, orphans)
}

/// Writes `lines` lines of five words to `path`; returns the word count's output, sorted.
fn write_words(path: &Path, lines: u64, rng: &mut Rng) -> Vec<String> {
    let vocabulary = 500 + rng.below(5_000);
    let words: Vec<String> = (0..lines * 5)
        .map(|_| format!("w{}", rng.below(vocabulary)))
        .collect();
    let text: String = words.chunks(5).map(|line| line.join(" ") + "\n").collect();
    std::fs::write(path, text).expect("write input");
    running_counts(words.iter().map(String::as_str))
}
