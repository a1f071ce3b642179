//! Checkpoint-storage conformance: one set of cases, run against every kind of store Weir
//! checkpoints to, each reported as its own test: `memory://`, `file://` (a temporary folder),
//! `s3://` (moto's S3-compatible server), `az://` (Azurite, the Azure Storage emulator) and
//! `gs://` (fake-gcs-server), the servers on 127.0.0.1.
//!
//! Every case takes a store URL with its settings and opens it through `open_store_with`, as
//! Weir does, then checks one promise Weir relies on: increments round-trip through whole and
//! ranged reads; an overwrite replaces an object at once; a listing under a prefix holds
//! exactly what was put there, and a listing with a delimiter its folders; deletes remove, and
//! deleting a missing object is `Ok` or `NotFound`; reading a missing object is `NotFound`; a
//! create-only put fails with `AlreadyExists` on a present object. A failing run names every
//! case that failed and the store it failed against.
//!
//! The servers (`tests/support/emulators.rs`): `scripts/moto`, `scripts/azurite` and
//! `scripts/gcs-emulator` install them into `target/tools/`, and `scripts/test` exports their
//! paths. Each server test starts its server on a free port, creates a bucket, points Weir's
//! store settings at it, and stops it when done. Without the server the test fails; it never
//! skips.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use futures::TryStreamExt;
use futures::future::LocalBoxFuture;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutPayload};
use weir_host::checkpoint::storage::{
    StorageError, open_store_with, put_increment, read_increment,
};
use weir_host::ids::SubtaskIndex;
use weir_host::partition::{KeyGroupRange, KeyGroups, hash_key};
use weir_host::state::{Increment, KeyRef, KeyedStateBackend, StateKind};

use support::emulators::{Cloud, StoreServer};

#[test]
fn memory() {
    conformance(Target::new("memory:///"));
}

#[test]
fn local_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    conformance(Target::new(&format!(
        "file://{}/store",
        dir.path().display()
    )));
}

#[test]
fn s3_moto() {
    on_server(Cloud::S3);
}

#[test]
fn azure_azurite() {
    on_server(Cloud::Azure);
}

/// fake-gcs-server 1.54 (the one on PyPI) serves object_store's reads, listings and deletes,
/// but refuses its uploads: object_store puts objects through GCS's XML API (`PUT
/// /bucket/object`), which fake-gcs-server takes only as signed URLs and otherwise answers
/// `400 invalid uploadType`. So here every case that writes through object_store must fail on
/// exactly that refusal (the test says so when one no longer does), and the others pass. The
/// reads, listings and deletes of those cases are checked by the next test.
#[test]
fn gcs_fake_gcs_server() {
    let server = StoreServer::start(Cloud::Gcs);
    let target = Target {
        url: server.url("checkpoints"),
        settings: server.settings(),
    };
    conformance_with_gap(target, Some(&FAKE_GCS_SERVER_REFUSES_UPLOADS));
}

/// The write-then-check cases on GCS, the objects written by the same steps (Weir's own
/// `put_increment` among them) into a local store over fake-gcs-server's data folder, which
/// it loads at start; the checks (ranged reads, `read_increment`, listings, deletes) then run
/// against the server.
#[test]
fn gcs_fake_gcs_server_serves_objects_loaded_at_start() {
    let runtime = runtime();
    let case_url = |base: &str, name: &str| format!("{}/{name}", base.trim_end_matches('/'));
    let server = StoreServer::start_gcs_with_objects(|bucket| {
        let local = format!("file://{}/checkpoints", bucket.display());
        runtime.block_on(async {
            for (name, write, _) in WRITE_THEN_CHECK {
                let (store, prefix) = Target::new(&case_url(&local, name))
                    .open()
                    .expect("a local store over the data folder");
                write(store, prefix)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: writing its objects failed: {e:#}"));
            }
        });
    });
    let base = server.url("checkpoints");
    let failures: Vec<String> = runtime.block_on(async {
        let mut failures = Vec::new();
        for (name, _, check) in WRITE_THEN_CHECK {
            let target = Target {
                url: case_url(&base, name),
                settings: server.settings(),
            };
            let result = match target.open() {
                Ok((store, prefix)) => check(store, prefix).await,
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                failures.push(format!("{name}: {e:#}"));
            }
        }
        failures
    });
    assert!(
        failures.is_empty(),
        "{} of {} checks failed against {base}:\n  {}",
        failures.len(),
        WRITE_THEN_CHECK.len(),
        failures.join("\n  ")
    );
}

/// Runs the suite against the server of `cloud`, started for this test alone.
fn on_server(cloud: Cloud) {
    let server = StoreServer::start(cloud);
    conformance(Target {
        url: server.url("checkpoints"),
        settings: server.settings(),
    });
}

// The suite.

type Case = fn(Target) -> LocalBoxFuture<'static, Result<()>>;

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        &[$((stringify!($case), |target| Box::pin($case(target)))),*]
    };
}

/// Every case, named by its function. Each runs under its own sub-prefix of the store URL.
const CASES: &[(&str, Case)] = cases![
    increment_round_trip,
    ranged_reads,
    overwrite_is_atomic,
    list_returns_exactly_the_prefix,
    list_with_delimiter_returns_the_folders,
    delete_removes_the_object,
    delete_of_a_missing_object_succeeds,
    get_of_a_missing_object_is_not_found,
    create_fails_when_present,
];

/// Cases a server is known to fail, and a text each of their failures carries.
struct Gap {
    cases: &'static [&'static str],
    error: &'static str,
}

/// See `gcs_fake_gcs_server`: every case that puts an object through object_store.
const FAKE_GCS_SERVER_REFUSES_UPLOADS: Gap = Gap {
    cases: &[
        "increment_round_trip",
        "ranged_reads",
        "overwrite_is_atomic",
        "list_returns_exactly_the_prefix",
        "list_with_delimiter_returns_the_folders",
        "delete_removes_the_object",
        "create_fails_when_present",
    ],
    error: "invalid uploadType",
};

/// Runs every case against `target` and fails naming each case that failed.
fn conformance(target: Target) {
    conformance_with_gap(target, None);
}

/// [`conformance`], where the cases of `gap` must fail, each with the gap's error.
fn conformance_with_gap(target: Target, gap: Option<&Gap>) {
    let base = target.url.trim_end_matches('/').to_owned();
    let failures: Vec<String> = runtime().block_on(async {
        let mut failures = Vec::new();
        for (name, case) in CASES {
            let case_target = Target {
                url: format!("{base}/{name}"),
                settings: target.settings.clone(),
            };
            let result = case(case_target).await;
            match (result, gap.filter(|gap| gap.cases.contains(name))) {
                (Ok(()), None) => {}
                (Err(e), None) => failures.push(format!("{name}: {e:#}")),
                (Err(e), Some(gap)) if format!("{e:#}").contains(gap.error) => {}
                (Err(e), Some(gap)) => failures.push(format!(
                    "{name}: expected to fail with {:?}, failed otherwise: {e:#}",
                    gap.error
                )),
                (Ok(()), Some(_)) => failures.push(format!(
                    "{name}: passed, though this server was known to fail it: \
                     take it out of the gap (and out of docs/checkpoints.md's)"
                )),
            }
        }
        failures
    });
    assert!(
        failures.is_empty(),
        "{} of {} storage cases did not do as expected against {base}:\n  {}",
        failures.len(),
        CASES.len(),
        failures.join("\n  ")
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

const GROUPS: u32 = 32;

/// A store under test: its URL and the settings that reach its server (none for memory and
/// disk), as `open_store_with` takes them.
#[derive(Clone)]
struct Target {
    url: String,
    settings: Vec<(String, String)>,
}

impl Target {
    fn new(url: &str) -> Target {
        Target {
            url: url.to_owned(),
            settings: Vec::new(),
        }
    }

    fn open(&self) -> Result<(Arc<dyn ObjectStore>, Path)> {
        open_store_with(&self.url, self.settings.clone())
            .with_context(|| format!("opening {}", self.url))
    }
}

/// One half of a write-then-check case: writes its objects, or checks what the store makes
/// of them, under a prefix.
type Step = fn(Arc<dyn ObjectStore>, Path) -> LocalBoxFuture<'static, Result<()>>;

macro_rules! steps {
    ($(($case:ident, $write:ident, $check:ident)),* $(,)?) => {
        &[$((
            stringify!($case),
            |store, prefix| Box::pin($write(store, prefix)),
            |store, prefix| Box::pin($check(store, prefix)),
        )),*]
    };
}

/// The cases that write objects, then check reads, listings or deletes of them, by their
/// steps: `gcs_fake_gcs_server_serves_objects_loaded_at_start` writes them another way.
const WRITE_THEN_CHECK: &[(&str, Step, Step)] = steps![
    (increment_round_trip, write_increment, check_increment_reads),
    (ranged_reads, write_object, check_ranged_reads),
    (
        list_returns_exactly_the_prefix,
        write_listing,
        check_listing
    ),
    (
        list_with_delimiter_returns_the_folders,
        write_folders,
        check_folders
    ),
    (delete_removes_the_object, write_two_objects, check_delete),
];

async fn write_then_check<W, C>(
    target: Target,
    write: fn(Arc<dyn ObjectStore>, Path) -> W,
    check: fn(Arc<dyn ObjectStore>, Path) -> C,
) -> Result<()>
where
    W: Future<Output = Result<()>>,
    C: Future<Output = Result<()>>,
{
    let (store, prefix) = target.open()?;
    write(store.clone(), prefix.clone()).await?;
    check(store, prefix).await
}

/// An increment of 500 keys spread over all key groups, about 50 KB encoded.
fn increment() -> Increment {
    let groups = KeyGroups::new(GROUPS);
    let mut backend = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
    let v = backend.declare("v", StateKind::Value).expect("declare");
    for i in 0..500u32 {
        let key = format!("k{i}");
        let value = [i as u8; 100];
        backend
            .value_set(
                v,
                KeyRef::new(key.as_bytes(), hash_key(key.as_bytes())),
                &value,
            )
            .expect("set");
    }
    backend.snapshot()
}

/// `len` bytes that differ from their neighbours, so a misplaced range shows.
fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

async fn get_bytes(store: &dyn ObjectStore, path: &Path) -> object_store::Result<Bytes> {
    store.get(path).await?.bytes().await
}

fn is_not_found<T>(result: &object_store::Result<T>) -> bool {
    matches!(result, Err(object_store::Error::NotFound { .. }))
}

/// An increment written with `put_increment` reads back whole, and in part (ranged reads of
/// the footer, index and wanted sections) with only the wanted key groups.
async fn increment_round_trip(target: Target) -> Result<()> {
    write_then_check(target, write_increment, check_increment_reads).await
}

async fn write_increment(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    let path = prefix.join("chk-1").join("increment");
    put_increment(store.as_ref(), &path, &increment()).await?;
    Ok(())
}

async fn check_increment_reads(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    let path = prefix.join("chk-1").join("increment");
    let written = increment();
    let all = KeyGroupRange {
        start: 0,
        end: GROUPS,
    };
    let read = read_increment(store.as_ref(), &path, all).await?;
    ensure!(
        read == written,
        "the whole increment read back differs from the one written"
    );

    let part = KeyGroupRange { start: 8, end: 16 };
    let read = read_increment(store.as_ref(), &path, part).await?;
    let expected: Vec<_> = written
        .groups
        .iter()
        .filter(|g| part.contains(g.group))
        .cloned()
        .collect();
    ensure!(
        !expected.is_empty(),
        "the test increment has no key group in {part:?}"
    );
    ensure!(
        read.checkpoint == written.checkpoint && read.groups == expected,
        "reading key groups {part:?} returned groups {:?}",
        read.groups.iter().map(|g| g.group).collect::<Vec<_>>()
    );
    Ok(())
}

/// Bounded, suffix and coalesced ranged reads return exactly the bytes asked for. A store
/// without suffix reads (Azure) refuses them with `NotSupported`, and `read_increment` reads
/// the size and a bounded range instead; any other answer to a suffix read is a failure.
async fn ranged_reads(target: Target) -> Result<()> {
    write_then_check(target, write_object, check_ranged_reads).await
}

async fn write_object(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    store
        .put(&prefix.join("object"), pattern(100_000, 0).into())
        .await?;
    Ok(())
}

async fn check_ranged_reads(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    let path = prefix.join("object");
    let data = pattern(100_000, 0);
    let got = store.get_range(&path, 1_000..2_500).await?;
    ensure!(
        got == data[1_000..2_500],
        "get_range(1000..2500) returned other bytes"
    );

    let suffix = GetOptions {
        range: Some(GetRange::Suffix(64)),
        ..GetOptions::default()
    };
    match store.get_opts(&path, suffix).await {
        Ok(result) => {
            let got = result.bytes().await?;
            ensure!(
                got == data[data.len() - 64..],
                "a 64-byte suffix read returned other bytes"
            );
        }
        Err(object_store::Error::NotSupported { .. }) => {}
        Err(e) => bail!("a 64-byte suffix read failed: {e}"),
    }

    let ranges = [0..10, 500..600, 99_990..100_000];
    let parts = store.get_ranges(&path, &ranges).await?;
    ensure!(
        parts.len() == ranges.len(),
        "get_ranges returned {} parts",
        parts.len()
    );
    for (range, part) in ranges.iter().zip(&parts) {
        let want = &data[range.start as usize..range.end as usize];
        ensure!(
            part == want,
            "get_ranges returned other bytes for {range:?}"
        );
    }
    Ok(())
}

/// Overwriting an object replaces it at once: a reader polling during overwrites sees one
/// whole version or the other, never a mix, a truncation or nothing; afterwards, the new one.
async fn overwrite_is_atomic(target: Target) -> Result<()> {
    let (store, prefix) = target.open()?;
    let path = prefix.clone().join("chk-1").join("increment");
    let old = pattern(300_000, 0x0f);
    let new = pattern(200_000, 0xf0);
    store.put(&path, old.clone().into()).await?;

    let done = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn({
        let (store, path, done) = (store.clone(), path.clone(), done.clone());
        let (old, new) = (old.clone(), new.clone());
        async move {
            let mut reads = 0u32;
            while !done.load(Ordering::Acquire) {
                let got = get_bytes(store.as_ref(), &path)
                    .await
                    .context("a read during overwrites failed")?;
                ensure!(
                    got == old || got == new,
                    "a read during overwrites returned {} bytes that are neither version",
                    got.len()
                );
                reads += 1;
                tokio::task::yield_now().await;
            }
            anyhow::Ok(reads)
        }
    });
    for round in 0..10 {
        let next = if round % 2 == 0 { &new } else { &old };
        store.put(&path, next.clone().into()).await?;
    }
    store.put(&path, new.clone().into()).await?;
    done.store(true, Ordering::Release);
    reader.await.context("the reader task panicked")??;

    let got = get_bytes(store.as_ref(), &path).await?;
    ensure!(
        got == new,
        "after the overwrite, a read returned {} bytes, not the new version",
        got.len()
    );
    Ok(())
}

/// A listing under a prefix returns exactly the objects put under it, with their sizes, and
/// nothing from a sibling whose name merely starts the same; an unused prefix lists nothing.
async fn list_returns_exactly_the_prefix(target: Target) -> Result<()> {
    write_then_check(target, write_listing, check_listing).await
}

/// Objects by path, with their sizes.
type SizedObjects = Vec<(Path, usize)>;

/// The objects under `chk-7` with their sizes, and two that only look alike.
fn listing(prefix: &Path) -> (SizedObjects, SizedObjects) {
    let dir = prefix.clone().join("chk-7");
    let wanted = vec![
        (dir.clone().join("a"), 10),
        (dir.clone().join("b"), 20),
        (dir.clone().join("sub").join("c"), 30),
    ];
    let others = vec![
        (prefix.clone().join("chk-70").join("x"), 40),
        (prefix.clone().join("chk-7.tmp"), 50),
    ];
    (wanted, others)
}

async fn write_listing(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    let (wanted, others) = listing(&prefix);
    for (path, len) in wanted.iter().chain(&others) {
        store.put(path, pattern(*len, 0).into()).await?;
    }
    Ok(())
}

async fn check_listing(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    let (mut wanted, _) = listing(&prefix);
    let dir = prefix.clone().join("chk-7");
    let mut listed: Vec<(Path, usize)> = store
        .list(Some(&dir))
        .map_ok(|meta| (meta.location, meta.size as usize))
        .try_collect()
        .await
        .with_context(|| format!("listing {dir}"))?;
    listed.sort();
    wanted.sort();
    ensure!(
        listed == wanted,
        "listing {dir} returned {listed:?}, expected {wanted:?}"
    );

    let unused = prefix.clone().join("chk-8");
    let listed: Vec<_> = store.list(Some(&unused)).try_collect().await?;
    ensure!(
        listed.is_empty(),
        "listing the unused prefix {unused} returned {listed:?}"
    );
    Ok(())
}

/// A listing with a delimiter (how Weir finds the subtask folders of an operator) returns the
/// folders directly under the prefix once each, and the objects directly in it; nothing of a
/// sibling whose name merely starts the same.
async fn list_with_delimiter_returns_the_folders(target: Target) -> Result<()> {
    write_then_check(target, write_folders, check_folders).await
}

async fn write_folders(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    let dir = prefix.clone().join("state").join("count");
    for path in [
        dir.clone().join("0").join("chk-1.inc"),
        dir.clone().join("0").join("chk-2.inc"),
        dir.clone().join("1").join("chk-1.inc"),
        dir.clone().join("12").join("deeper").join("chk-1.inc"),
        dir.clone().join("marker"),
        prefix
            .clone()
            .join("state")
            .join("counter")
            .join("9")
            .join("x"),
    ] {
        store.put(&path, pattern(10, 0).into()).await?;
    }
    Ok(())
}

async fn check_folders(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    let dir = prefix.clone().join("state").join("count");
    let listing = store
        .list_with_delimiter(Some(&dir))
        .await
        .with_context(|| format!("listing {dir} with a delimiter"))?;
    let mut folders = listing.common_prefixes.clone();
    folders.sort();
    let wanted: Vec<Path> = ["0", "1", "12"]
        .iter()
        .map(|name| dir.clone().join(*name))
        .collect();
    ensure!(
        folders == wanted,
        "the folders under {dir} are {folders:?}, expected {wanted:?}"
    );
    let objects: Vec<&Path> = listing.objects.iter().map(|meta| &meta.location).collect();
    ensure!(
        objects == [&dir.clone().join("marker")],
        "the objects directly in {dir} are {objects:?}"
    );
    Ok(())
}

/// Deleting a present object removes it: gets, heads and listings no longer see it.
async fn delete_removes_the_object(target: Target) -> Result<()> {
    write_then_check(target, write_two_objects, check_delete).await
}

async fn write_two_objects(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    let dir = prefix.join("chk-1");
    store
        .put(&dir.clone().join("increment"), pattern(1_000, 0).into())
        .await?;
    store
        .put(&dir.join("kept"), pattern(1_000, 1).into())
        .await?;
    Ok(())
}

async fn check_delete(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<()> {
    let path = prefix.clone().join("chk-1").join("increment");
    let kept = prefix.clone().join("chk-1").join("kept");
    store
        .delete(&path)
        .await
        .context("deleting a present object")?;
    let got = store.get(&path).await;
    ensure!(
        is_not_found(&got),
        "a get after the delete returned {:?}",
        got.map(|r| r.meta)
    );
    let head = store.head(&path).await;
    ensure!(
        is_not_found(&head),
        "a head after the delete returned {head:?}"
    );
    let listed: Vec<Path> = store
        .list(Some(&prefix))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await?;
    ensure!(
        listed == [kept],
        "after the delete, the listing is {listed:?}"
    );
    Ok(())
}

/// Deleting an object that is not there is `Ok` or `NotFound`; Weir treats both as success.
async fn delete_of_a_missing_object_succeeds(target: Target) -> Result<()> {
    let (store, prefix) = target.open()?;
    match store.delete(&prefix.clone().join("never-written")).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => bail!("deleting a missing object failed with an error other than NotFound: {e}"),
    }
}

/// Reading an object that is not there is `NotFound`, through the store and `read_increment`.
async fn get_of_a_missing_object_is_not_found(target: Target) -> Result<()> {
    let (store, prefix) = target.open()?;
    let path = prefix.clone().join("never-written");
    let got = store.get(&path).await;
    ensure!(
        is_not_found(&got),
        "a get returned {:?}",
        got.map(|r| r.meta)
    );
    let got = store.get_range(&path, 0..10).await;
    ensure!(is_not_found(&got), "a ranged get returned {got:?}");
    let head = store.head(&path).await;
    ensure!(is_not_found(&head), "a head returned {head:?}");
    let all = KeyGroupRange {
        start: 0,
        end: GROUPS,
    };
    match read_increment(store.as_ref(), &path, all).await {
        Err(StorageError::Store {
            source: object_store::Error::NotFound { .. },
            ..
        }) => Ok(()),
        other => bail!("read_increment returned {other:?}, not a NotFound store error"),
    }
}

/// A put with `PutMode::Create` writes an absent object and fails with `AlreadyExists`,
/// leaving the object as it was, when it is present.
async fn create_fails_when_present(target: Target) -> Result<()> {
    let (store, prefix) = target.open()?;
    let path = prefix.clone().join("_metadata");
    let first = pattern(1_000, 1);
    store
        .put_opts(
            &path,
            PutPayload::from(first.clone()),
            PutMode::Create.into(),
        )
        .await
        .context("a create-only put of an absent object")?;
    let second = store
        .put_opts(
            &path,
            PutPayload::from(pattern(2_000, 2)),
            PutMode::Create.into(),
        )
        .await;
    ensure!(
        matches!(second, Err(object_store::Error::AlreadyExists { .. })),
        "a create-only put of a present object returned {second:?}, not AlreadyExists"
    );
    let got = get_bytes(store.as_ref(), &path).await?;
    ensure!(got == first, "the refused put changed the object");
    Ok(())
}
