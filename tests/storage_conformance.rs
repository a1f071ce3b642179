//! Checkpoint-storage conformance: one set of cases, run against every kind of store Weir
//! checkpoints to, each reported as its own test: `memory://`, `file://` (a temporary folder)
//! and `s3://` (moto's S3-compatible server on 127.0.0.1).
//!
//! Every case takes a store URL and opens it through `open_store_with`, as Weir does, then checks
//! one promise Weir relies on: increments round-trip through whole and ranged reads; an
//! overwrite replaces an object at once; a listing under a prefix holds exactly what was put
//! there; deletes remove, and deleting a missing object is `Ok` or `NotFound`; reading a
//! missing object is `NotFound`; a create-only put fails with `AlreadyExists` on a present
//! object. A failing run names every case that failed and the store it failed against.
//!
//! The S3 server: `scripts/moto` installs moto into `target/tools/moto-venv`, and
//! `scripts/test` exports the path of its `moto_server` as `WEIR_MOTO_SERVER`. The `s3_moto`
//! test starts it on a free port, creates a bucket, points Weir's store settings at it, and
//! stops it when done. Without the server the test fails; it never skips.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

#[test]
fn memory() {
    conformance("memory:///");
}

#[test]
fn local_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    conformance(&format!("file://{}/store", dir.path().display()));
}

#[test]
fn s3_moto() {
    let moto = Moto::start();
    SETTINGS
        .set(moto.settings())
        .expect("one S3 server per test process");
    conformance(&format!("s3://{}/checkpoints", Moto::BUCKET));
}

// The suite.

type Case = fn(String) -> LocalBoxFuture<'static, Result<()>>;

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        &[$((stringify!($case), |url| Box::pin($case(url)))),*]
    };
}

/// Every case, named by its function. Each runs under its own sub-prefix of the store URL.
const CASES: &[(&str, Case)] = cases![
    increment_round_trip,
    ranged_reads,
    overwrite_is_atomic,
    list_returns_exactly_the_prefix,
    delete_removes_the_object,
    delete_of_a_missing_object_succeeds,
    get_of_a_missing_object_is_not_found,
    create_fails_when_present,
];

/// Runs every case against the store at `base` and fails naming each case that failed.
fn conformance(base: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let failures: Vec<String> = runtime.block_on(async {
        let mut failures = Vec::new();
        for (name, case) in CASES {
            let url = format!("{}/{name}", base.trim_end_matches('/'));
            if let Err(e) = case(url).await {
                failures.push(format!("{name}: {e:#}"));
            }
        }
        failures
    });
    assert!(
        failures.is_empty(),
        "{} of {} storage cases failed against {base}:\n  {}",
        failures.len(),
        CASES.len(),
        failures.join("\n  ")
    );
}

const GROUPS: u32 = 32;

/// Store settings of the server under test (S3's endpoint and keys); none for the others.
static SETTINGS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

fn open(url: &str) -> Result<(Arc<dyn ObjectStore>, Path)> {
    // Only S3 URLs take the server's settings: under `cargo test` the backends' tests share
    // one process.
    let settings = match url.starts_with("s3://") {
        true => SETTINGS.get().cloned().unwrap_or_default(),
        false => Vec::new(),
    };
    open_store_with(url, settings).with_context(|| format!("opening {url}"))
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
async fn increment_round_trip(url: String) -> Result<()> {
    let (store, prefix) = open(&url)?;
    let path = prefix.clone().join("chk-1").join("increment");
    let written = increment();
    put_increment(store.as_ref(), &path, &written).await?;

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

/// Bounded, suffix and coalesced ranged reads return exactly the bytes asked for.
async fn ranged_reads(url: String) -> Result<()> {
    let (store, prefix) = open(&url)?;
    let path = prefix.clone().join("object");
    let data = pattern(100_000, 0);
    store.put(&path, data.clone().into()).await?;

    let got = store.get_range(&path, 1_000..2_500).await?;
    ensure!(
        got == data[1_000..2_500],
        "get_range(1000..2500) returned other bytes"
    );

    let suffix = GetOptions {
        range: Some(GetRange::Suffix(64)),
        ..GetOptions::default()
    };
    let got = store.get_opts(&path, suffix).await?.bytes().await?;
    ensure!(
        got == data[data.len() - 64..],
        "a 64-byte suffix read returned other bytes"
    );

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
async fn overwrite_is_atomic(url: String) -> Result<()> {
    let (store, prefix) = open(&url)?;
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
async fn list_returns_exactly_the_prefix(url: String) -> Result<()> {
    let (store, prefix) = open(&url)?;
    let dir = prefix.clone().join("chk-7");
    let mut wanted = vec![
        (dir.clone().join("a"), 10),
        (dir.clone().join("b"), 20),
        (dir.clone().join("sub").join("c"), 30),
    ];
    let others = [
        (prefix.clone().join("chk-70").join("x"), 40),
        (prefix.clone().join("chk-7.tmp"), 50),
    ];
    for (path, len) in wanted.iter().chain(&others) {
        store.put(path, pattern(*len, 0).into()).await?;
    }

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

/// Deleting a present object removes it: gets, heads and listings no longer see it.
async fn delete_removes_the_object(url: String) -> Result<()> {
    let (store, prefix) = open(&url)?;
    let path = prefix.clone().join("chk-1").join("increment");
    let kept = prefix.clone().join("chk-1").join("kept");
    store.put(&path, pattern(1_000, 0).into()).await?;
    store.put(&kept, pattern(1_000, 1).into()).await?;

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
async fn delete_of_a_missing_object_succeeds(url: String) -> Result<()> {
    let (store, prefix) = open(&url)?;
    match store.delete(&prefix.clone().join("never-written")).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => bail!("deleting a missing object failed with an error other than NotFound: {e}"),
    }
}

/// Reading an object that is not there is `NotFound`, through the store and `read_increment`.
async fn get_of_a_missing_object_is_not_found(url: String) -> Result<()> {
    let (store, prefix) = open(&url)?;
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
async fn create_fails_when_present(url: String) -> Result<()> {
    let (store, prefix) = open(&url)?;
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

// The S3 server.

/// moto's S3 server on 127.0.0.1 with one bucket, [`Moto::BUCKET`]; killed on drop.
struct Moto {
    child: Child,
    port: u16,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl Moto {
    const BUCKET: &str = "weir";
    /// moto imports its many services at start; a loaded machine can take seconds.
    const START_TIMEOUT: Duration = Duration::from_secs(60);

    /// Starts the server at `$WEIR_MOTO_SERVER` on a free port and creates the bucket.
    fn start() -> Moto {
        let server = moto_server();
        let port = free_port();
        let log_dir = tempfile::tempdir().expect("tempdir");
        let log = log_dir.path().join("moto.log");
        let out = File::create(&log).expect("create the moto log");
        let child = Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone the log handle"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", server.display()));
        // From here on, a panic drops `moto` and so stops the server.
        let mut moto = Moto {
            child,
            port,
            log,
            _log_dir: log_dir,
        };
        moto.wait_until_answering();
        let status = http(port, "PUT", &format!("/{}", Self::BUCKET))
            .unwrap_or_else(|e| moto.fail(&format!("creating the bucket failed: {e:#}")));
        if status != 200 {
            moto.fail(&format!("creating the bucket answered HTTP {status}"));
        }
        moto
    }

    /// The settings that make a store reach this server, as `open_store_with` takes them.
    fn settings(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint", format!("http://127.0.0.1:{}", self.port)),
            ("aws_allow_http", "true".to_owned()),
            ("aws_region", "us-east-1".to_owned()),
            ("aws_access_key_id", "weir-test".to_owned()),
            ("aws_secret_access_key", "weir-test".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn wait_until_answering(&mut self) {
        let deadline = Instant::now() + Self::START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.fail(&format!("moto_server exited ({status}) before answering"));
            }
            if http(self.port, "GET", "/").is_ok() {
                return;
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "moto_server did not answer within {:?}",
                    Self::START_TIMEOUT
                ));
            }
            // Polling an external process: there is no event to wait on.
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn fail(&self, message: &str) -> ! {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        panic!(
            "moto on 127.0.0.1:{}: {message}; its output:\n{log}",
            self.port
        );
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `moto_server` binary named by `WEIR_MOTO_SERVER`; fails (never skips) without it.
fn moto_server() -> PathBuf {
    const HOW: &str = "run the tests with scripts/test, or \
        `WEIR_MOTO_SERVER=$(scripts/moto) cargo test --test storage_conformance` \
        (scripts/moto installs moto and prints the server's path)";
    let Some(path) = std::env::var_os("WEIR_MOTO_SERVER") else {
        panic!("WEIR_MOTO_SERVER is not set, so the S3 storage tests have no server: {HOW}");
    };
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "WEIR_MOTO_SERVER names {}, which does not exist: {HOW}",
        path.display()
    );
    path
}

/// A port that was free a moment ago; the server binds it right after.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

/// Sends an unsigned, bodiless HTTP/1.1 request to 127.0.0.1:`port`; returns the status code.
fn http(port: u16, method: &str, target: &str) -> Result<u16> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response);
    let status = response
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| response.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .with_context(|| format!("not an HTTP response: {response:.80}"))?;
    Ok(status.parse()?)
}
