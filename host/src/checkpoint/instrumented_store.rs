//! [`InstrumentedStore`]: a wrapper around any store that counts what goes through it and
//! can inject faults (errors, latency).
//!
//! Tests use it to check what a component really did with the store (which bytes a restore
//! read, which paths were deleted and how often) and how it behaves when the store fails.
//! Faults are injected here, around the store, never by special cases in the code under test.

use std::collections::HashMap;
use std::fmt;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;

use super::actor::{self, Actor};
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// Which faults to inject.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Fraction (0 to 1) of calls that fail with an error, before reaching the store.
    pub error_rate: f64,
    /// Delay added to every call.
    pub latency: Duration,
    /// Seed of the deterministic choice of failing calls.
    pub seed: u64,
}

/// What went through the store.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Objects written.
    pub puts: AtomicU64,
    /// Bytes of the objects written.
    pub bytes_written: AtomicU64,
    /// Objects read (whole or ranges).
    pub gets: AtomicU64,
    /// Bytes read.
    pub bytes_read: AtomicU64,
    /// Calls failed on purpose by the fault plan.
    pub injected_errors: AtomicU64,
    /// Deletes per path (a path deleted twice shows 2).
    deletes: Mutex<HashMap<Path, u32>>,
    /// Every delete in order, with the task that issued it.
    delete_log: Mutex<Vec<(Path, Option<Actor>)>>,
    /// Bytes read per task that declared itself.
    reads_by: Mutex<HashMap<Actor, u64>>,
}

impl StoreStats {
    /// Deletes per path so far.
    pub fn deletes(&self) -> HashMap<Path, u32> {
        self.deletes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Bytes read so far by each task that declared itself, and forgets them (so that a test
    /// can look at one restore at a time).
    pub fn take_reads_by(&self) -> HashMap<Actor, u64> {
        std::mem::take(&mut *self.reads_by.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Every delete so far, in order, with who issued it.
    pub fn delete_log(&self) -> Vec<(Path, Option<Actor>)> {
        self.delete_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Holds back writes to some paths until released, as a store whose calls hang would; made
/// by [`InstrumentedStore::write_hold`], shared by its clones.
#[derive(Clone, Debug)]
pub struct WriteHold {
    /// The suffix of the paths held back, `None` once released.
    suffix: Arc<tokio::sync::watch::Sender<Option<String>>>,
    /// The paths of the writes held back so far, in order (a path twice when written again):
    /// what a test waits on before it releases.
    held: Arc<tokio::sync::watch::Sender<Vec<String>>>,
}

impl WriteHold {
    fn new() -> Self {
        Self {
            suffix: Arc::new(tokio::sync::watch::Sender::new(None)),
            held: Arc::new(tokio::sync::watch::Sender::new(Vec::new())),
        }
    }

    /// From now on, writes to paths ending with `suffix` wait (those already waiting too).
    pub fn hold(&self, suffix: &str) {
        self.suffix.send_replace(Some(suffix.to_owned()));
    }

    /// Lets every held write through.
    pub fn release(&self) {
        self.suffix.send_replace(None);
    }

    /// Waits until the paths of the writes held back so far satisfy `done`.
    pub async fn held_until(&self, done: impl Fn(&[String]) -> bool) {
        let mut held = self.held.subscribe();
        // The sender lives as long as `self`.
        let _ = held.wait_for(|paths| done(paths)).await;
    }

    async fn pass(&self, location: &Path) {
        let holds = |suffix: &Option<String>| {
            suffix
                .as_deref()
                .is_some_and(|s| location.as_ref().ends_with(s))
        };
        let mut suffix = self.suffix.subscribe();
        if holds(&suffix.borrow_and_update()) {
            self.held
                .send_modify(|paths| paths.push(location.to_string()));
        }
        // The sender lives as long as `self`, so the wait ends only by a release.
        let _ = suffix.wait_for(|suffix| !holds(suffix)).await;
    }
}

/// Wraps a store; see the module docs.
pub struct InstrumentedStore {
    inner: Arc<dyn ObjectStore>,
    stats: Arc<StoreStats>,
    faults: Faults,
    hold: WriteHold,
    /// Calls so far: each call's number seeds the fault plan's draw for it.
    calls: AtomicU64,
}

impl InstrumentedStore {
    pub fn new(inner: Arc<dyn ObjectStore>, faults: Faults) -> Self {
        Self {
            inner,
            stats: Arc::default(),
            faults,
            hold: WriteHold::new(),
            calls: AtomicU64::new(0),
        }
    }

    /// The switch that holds back this store's writes.
    pub fn write_hold(&self) -> WriteHold {
        self.hold.clone()
    }

    pub fn stats(&self) -> Arc<StoreStats> {
        self.stats.clone()
    }

    /// Waits the configured latency, then fails this call if the fault plan says so.
    async fn enter(&self, what: &'static str) -> Result<()> {
        if !self.faults.latency.is_zero() {
            tokio::time::sleep(self.faults.latency).await;
        }
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        if self.faults.error_rate > 0.0 && unit(self.faults.seed ^ n) < self.faults.error_rate {
            self.stats.injected_errors.fetch_add(1, Ordering::Relaxed);
            return Err(object_store::Error::Generic {
                store: "instrumented",
                source: format!("injected fault in {what}").into(),
            });
        }
        Ok(())
    }
}

/// A number in [0, 1) from `x` (SplitMix64), for deterministic fault choices.
fn unit(x: u64) -> f64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as f64 / u64::MAX as f64
}

impl fmt::Debug for InstrumentedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstrumentedStore")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for InstrumentedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instrumented({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for InstrumentedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.hold.pass(location).await;
        self.enter("put").await?;
        let size = payload.content_length() as u64;
        let result = self.inner.put_opts(location, payload, opts).await?;
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_written.fetch_add(size, Ordering::Relaxed);
        Ok(result)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.hold.pass(location).await;
        self.enter("put_multipart").await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.enter("get").await?;
        let result = self.inner.get_opts(location, options).await?;
        self.stats.gets.fetch_add(1, Ordering::Relaxed);
        let bytes = result.range.end - result.range.start;
        self.stats.bytes_read.fetch_add(bytes, Ordering::Relaxed);
        if let Some(actor) = actor::current() {
            *self
                .stats
                .reads_by
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(actor)
                .or_default() += bytes;
        }
        Ok(result)
    }

    // `get_ranges` keeps its default, which reads through `get_opts`, so ranged reads are
    // counted like any other.

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let stats = self.stats.clone();
        self.inner
            .delete_stream(locations)
            .map(move |deleted| {
                if let Ok(path) = &deleted {
                    stats
                        .delete_log
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((path.clone(), actor::current()));
                    *stats
                        .deletes
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(path.clone())
                        .or_default() += 1;
                }
                deleted
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.enter("list").await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.enter("copy").await?;
        self.inner.copy_opts(from, to, options).await
    }
}
