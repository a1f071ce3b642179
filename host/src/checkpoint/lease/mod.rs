//! Leases: one run at a time owns a job's checkpoint folder and each output it writes
//! (DESIGN.md §16).
//!
//! A lease is an object in a folder of the store it guards, `<folder>/lease/<generation>`,
//! holding its [`Holder`] and an expiry. Taking it creates the next generation with a
//! conditional put (`PutMode::Create`: of two contenders exactly one succeeds), which every
//! store Weir uses supports, local disk included; the newest generation is the lease. The
//! holder renews it (rewrites its own generation with a later expiry) every quarter of its
//! time to live, and after each renewal lists the folder: a newer generation means another
//! run took the lease over, and this one has lost it for good.
//!
//! Commits ask [`LeaseCheck::check`], which reads no store: the lease is good for a commit
//! until half its time to live after the last renewal that found no newer generation. A
//! contender takes the lease only once the holder's expiry has passed (or the holder is known
//! to be gone, [`Holder::is_gone`]), and after creating its generation it reads the old one
//! again and waits out any renewal that landed meanwhile. So the old holder has stopped
//! committing half a lease before the new one starts: clocks of two machines may disagree by
//! that much.
//!
//! A lease that was not renewed for a while (the store did not answer) has *lapsed*: commits
//! wait for the next renewal, which either finds the lease still this run's or finds it
//! lost. Only a lost lease ends the run.

mod holder;

pub use holder::Holder;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::checkpoint::actor::{Actor, acting};

/// How long a lease lives without renewal, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// How often taking a lease is tried while the store fails (a flaky store is not another
/// run): about 20 s of pauses in all.
const STORE_ATTEMPTS: u32 = 12;

/// How a lease is taken and kept.
#[derive(Clone, Debug)]
pub struct LeaseOptions {
    /// How long the lease lives without a renewal. A killed holder on another machine keeps
    /// it that long; on the same machine it is free at once.
    pub ttl: Duration,
    /// How long to wait for a live lease to be released or to expire before giving up
    /// (zero: refuse at once).
    pub wait: Duration,
    pub clock: Clock,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            wait: Duration::ZERO,
            clock: Clock::System,
        }
    }
}

/// Where leases read the time: the system's wall clock, or a clock a test sets.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    #[default]
    System,
    Manual(Arc<AtomicU64>),
}

impl Clock {
    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            Clock::Manual(ms) => ms.load(Ordering::SeqCst),
        }
    }
}

/// Why a lease could not be taken or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Another run holds the lease and it has not expired.
    #[error(
        "{what} is in use by another run: {} (its lease expires in {} s unless renewed). \
         Stop that run, or wait for it to end",
        holder.describe(), expires_in_ms.div_ceil(1000)
    )]
    Held {
        what: String,
        holder: Box<Holder>,
        expires_in_ms: u64,
    },
    /// Another run took the lease over: this one must stop without committing.
    #[error("{what}: another run took it over ({}); this run stops without committing", holder.describe())]
    Lost { what: String, holder: Box<Holder> },
    /// The lease was not renewed for half its life (the store did not answer): nothing may
    /// be committed until a renewal says whether it is still this run's.
    #[error(
        "{what}: the lease was not renewed for {} ms; committing waits for the store",
        since_ms
    )]
    Lapsed { what: String, since_ms: u64 },
    /// The store failed while the lease was taken or renewed.
    #[error("{what}: cannot take its lease at {path}: {source}")]
    Store {
        what: String,
        path: Path,
        source: object_store::Error,
    },
}

impl LeaseError {
    /// Another run holds or took the lease: nothing this run does will change that.
    pub fn is_other_run(&self) -> bool {
        matches!(self, LeaseError::Held { .. } | LeaseError::Lost { .. })
    }
}

/// A generation's object.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct LeaseRecord {
    holder: Holder,
    /// Milliseconds since the Unix epoch.
    expires_at_ms: u64,
    /// The holder let go: the lease is free.
    #[serde(default)]
    released: bool,
}

impl LeaseRecord {
    fn is_live(&self, now_ms: u64) -> bool {
        !self.released && self.expires_at_ms > now_ms && !self.holder.is_gone()
    }
}

/// What commits consult: whether the lease still allows them. Cheap to clone and to ask.
#[derive(Clone, Debug)]
pub struct LeaseCheck {
    state: Arc<LeaseState>,
}

#[derive(Debug)]
struct LeaseState {
    /// What the lease guards, for messages (`the checkpoints of job wc at /x/wc`).
    what: String,
    clock: Clock,
    /// Commits are allowed before this time (ms since the epoch); set by each renewal that
    /// found the lease still this run's.
    commit_until_ms: AtomicU64,
    /// When the last good renewal was made, for the message of a lapsed lease.
    renewed_at_ms: AtomicU64,
    /// Set once a renewal found a newer generation: the lease is gone for good.
    lost: std::sync::OnceLock<Holder>,
    /// Notified after each renewal, good or lost: what [`LeaseCheck::wait_while_lapsed`]
    /// waits for. The mutex guards nothing but that handshake (a waiter holds it from its
    /// check to its wait, so a renewal in between is not missed).
    renewed: (Mutex<()>, Condvar),
}

impl LeaseState {
    fn notify_renewed(&self) {
        let _handshake = self.renewed.0.lock().unwrap_or_else(|e| e.into_inner());
        self.renewed.1.notify_all();
    }
}

impl LeaseCheck {
    /// `Ok` while this run may commit under the lease.
    pub fn check(&self) -> Result<(), LeaseError> {
        let state = &self.state;
        if let Some(holder) = state.lost.get() {
            return Err(LeaseError::Lost {
                what: state.what.clone(),
                holder: Box::new(holder.clone()),
            });
        }
        let now = state.clock.now_ms();
        if now >= state.commit_until_ms.load(Ordering::SeqCst) {
            return Err(LeaseError::Lapsed {
                what: state.what.clone(),
                since_ms: now.saturating_sub(state.renewed_at_ms.load(Ordering::SeqCst)),
            });
        }
        Ok(())
    }

    /// Every one of `checks` allows a commit.
    pub fn check_all(checks: &[LeaseCheck]) -> Result<(), LeaseError> {
        checks.iter().try_for_each(LeaseCheck::check)
    }

    /// [`LeaseCheck::check`], but a lapsed lease is waited on (the thread blocks) until a
    /// renewal says whether it is still this run's, as long as it has not expired: a store
    /// that stops answering for a few seconds holds commits back instead of failing the run.
    /// Past the lease's expiry (another run may hold it now) the lapse is an error. For the
    /// blocking threads that stage and commit.
    pub fn wait_while_lapsed(&self) -> Result<(), LeaseError> {
        let state = &self.state;
        let mut handshake = state.renewed.0.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match self.check() {
                Err(LeaseError::Lapsed { .. }) => {
                    let renewed = state.renewed_at_ms.load(Ordering::SeqCst);
                    let half = state
                        .commit_until_ms
                        .load(Ordering::SeqCst)
                        .saturating_sub(renewed);
                    let expires = renewed + 2 * half;
                    let now = state.clock.now_ms();
                    if now >= expires {
                        return self.check();
                    }
                    handshake = state
                        .renewed
                        .1
                        .wait_timeout(handshake, Duration::from_millis(expires - now))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                result => return result,
            }
        }
    }

    /// [`LeaseCheck::wait_while_lapsed`] for every one of `checks`.
    pub fn wait_for_all(checks: &[LeaseCheck]) -> Result<(), LeaseError> {
        checks.iter().try_for_each(LeaseCheck::wait_while_lapsed)
    }
}

/// A lease this run holds. Renew it ([`Lease::renew`], or [`Lease::keep_renewed`]) and
/// [`Lease::release`] it at the end; dropped without a release, it stays in the store until
/// it expires, but is free at once for runs on this machine.
#[derive(Debug)]
pub struct Lease {
    store: Arc<dyn ObjectStore>,
    folder: Path,
    generation: u64,
    holder: Holder,
    ttl: Duration,
    check: LeaseCheck,
}

impl Lease {
    /// Takes the lease of `folder` in `store` for this process, or says who holds it.
    /// `what` names what the lease guards, in messages.
    pub async fn acquire(
        store: Arc<dyn ObjectStore>,
        folder: &Path,
        what: &str,
        options: &LeaseOptions,
    ) -> Result<Self, LeaseError> {
        let acquiring = Self::acquire_retrying(store, folder, what, options);
        acting(Actor::Lease, acquiring).await
    }

    /// [`Lease::acquire`], trying again, with a pause that doubles, while the store fails:
    /// up to [`STORE_ATTEMPTS`] times.
    async fn acquire_retrying(
        store: Arc<dyn ObjectStore>,
        folder: &Path,
        what: &str,
        options: &LeaseOptions,
    ) -> Result<Self, LeaseError> {
        let mut pause = Duration::from_millis(50);
        let mut attempts = 1;
        loop {
            match Self::try_acquire(store.clone(), folder, what, options).await {
                Err(LeaseError::Store { .. }) if attempts < STORE_ATTEMPTS => {
                    attempts += 1;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                result => return result,
            }
        }
    }

    async fn try_acquire(
        store: Arc<dyn ObjectStore>,
        folder: &Path,
        what: &str,
        options: &LeaseOptions,
    ) -> Result<Self, LeaseError> {
        let folder = folder.clone().join("lease");
        let clock = options.clock.clone();
        let give_up_at = clock.now_ms() + options.wait.as_millis() as u64;
        let store_error = |path: &Path, source| LeaseError::Store {
            what: what.to_owned(),
            path: path.clone(),
            source,
        };
        loop {
            let (newest, record) = newest_generation(store.as_ref(), &folder)
                .await
                .map_err(|e| store_error(&folder, e))?;
            let now = clock.now_ms();
            if let Some(record) = record.as_ref().filter(|r| r.is_live(now)) {
                if now < give_up_at {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
                return Err(LeaseError::Held {
                    what: what.to_owned(),
                    holder: Box::new(record.holder.clone()),
                    expires_in_ms: record.expires_at_ms.saturating_sub(now),
                });
            }
            let generation = newest.map_or(1, |n| n + 1);
            let holder = Holder::this_process(crate::ids::new_run_id(), now);
            let ours = LeaseRecord {
                holder: holder.clone(),
                expires_at_ms: now + options.ttl.as_millis() as u64,
                released: false,
            };
            let path = generation_path(&folder, generation);
            let put = store
                .put_opts(&path, encode(&ours), PutOptions::from(PutMode::Create))
                .await;
            match put {
                Ok(_) => {}
                // Another contender made this generation first: look again.
                Err(object_store::Error::AlreadyExists { .. }) => continue,
                Err(e) => return Err(store_error(&path, e)),
            }
            // A contender whose listing was older than ours may have made a later
            // generation: then the lease is its, and this run looks again.
            let (latest, _) = newest_generation(store.as_ref(), &folder)
                .await
                .map_err(|e| store_error(&folder, e))?;
            if latest.is_some_and(|n| n > generation) {
                continue;
            }
            holder::hold_here(&holder.token);
            let lease = Self {
                store: store.clone(),
                folder: folder.clone(),
                generation,
                check: LeaseCheck {
                    state: Arc::new(LeaseState {
                        what: what.to_owned(),
                        clock: clock.clone(),
                        commit_until_ms: AtomicU64::new(0),
                        renewed_at_ms: AtomicU64::new(now),
                        lost: std::sync::OnceLock::new(),
                        renewed: (Mutex::new(()), Condvar::new()),
                    }),
                },
                holder,
                ttl: options.ttl,
            };
            lease.wait_out_previous(newest).await?;
            lease
                .check
                .state
                .commit_until_ms
                .store(clock.now_ms() + lease.commit_window_ms(), Ordering::SeqCst);
            lease.delete_older().await;
            tracing::debug!(what, generation, "lease taken");
            return Ok(lease);
        }
    }

    /// After taking generation `n + 1`: the holder of `n` may have renewed after this run
    /// read it (it was slow, not gone). It finds this run's generation at its next renewal;
    /// until its renewed expiry has passed, this run waits.
    async fn wait_out_previous(&self, previous: Option<u64>) -> Result<(), LeaseError> {
        let Some(previous) = previous else {
            return Ok(());
        };
        let path = generation_path(&self.folder, previous);
        let record = match read_record(self.store.as_ref(), &path).await {
            Ok(record) => record,
            Err(object_store::Error::NotFound { .. }) => return Ok(()),
            Err(source) => {
                return Err(LeaseError::Store {
                    what: self.check.state.what.clone(),
                    path,
                    source,
                });
            }
        };
        let Some(record) = record else { return Ok(()) };
        let clock = &self.check.state.clock;
        let now = clock.now_ms();
        if record.is_live(now) {
            let wait = record.expires_at_ms - now;
            tracing::info!(
                what = %self.check.state.what,
                wait_ms = wait,
                "the lease's last holder renewed it as this run took it over: waiting for it to expire"
            );
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        Ok(())
    }

    /// Removes the generations before this one (best effort: the newest is the lease).
    async fn delete_older(&self) {
        let Ok(listed) = self
            .store
            .list(Some(&self.folder))
            .try_collect::<Vec<_>>()
            .await
        else {
            return;
        };
        for meta in listed {
            if generation_of(&meta.location).is_some_and(|g| g < self.generation) {
                let _ = self.store.delete(&meta.location).await;
            }
        }
    }

    /// How long after a renewal commits are allowed: half the time to live, so that the
    /// holder stops committing long before a contender may take over.
    fn commit_window_ms(&self) -> u64 {
        self.ttl.as_millis() as u64 / 2
    }

    /// What commits consult.
    pub fn check(&self) -> LeaseCheck {
        self.check.clone()
    }

    /// Renews the lease once. A newer generation means the lease was taken over: it is lost
    /// for good (and [`LeaseCheck::check`] says so from then on). A store that fails leaves
    /// the lease to lapse.
    pub async fn renew(&self) -> Result<(), LeaseError> {
        let state = &self.check.state;
        if let Some(holder) = state.lost.get() {
            return Err(LeaseError::Lost {
                what: state.what.clone(),
                holder: Box::new(holder.clone()),
            });
        }
        let now = state.clock.now_ms();
        let ours = LeaseRecord {
            holder: self.holder.clone(),
            expires_at_ms: now + self.ttl.as_millis() as u64,
            released: false,
        };
        let path = generation_path(&self.folder, self.generation);
        let store_error = |source| LeaseError::Store {
            what: state.what.clone(),
            path: path.clone(),
            source,
        };
        self.store
            .put(&path, encode(&ours))
            .await
            .map_err(store_error)?;
        // Listed after the put: a contender's generation made before it is seen now; one
        // made after it waits out the expiry just written.
        let (newest, record) = newest_generation(self.store.as_ref(), &self.folder)
            .await
            .map_err(store_error)?;
        if let (Some(n), Some(record)) = (newest, record)
            && n > self.generation
        {
            let _ = state.lost.set(record.holder.clone());
            state.notify_renewed();
            holder::let_go_here(&self.holder.token);
            return Err(LeaseError::Lost {
                what: state.what.clone(),
                holder: Box::new(record.holder),
            });
        }
        state.renewed_at_ms.store(now, Ordering::SeqCst);
        state
            .commit_until_ms
            .store(now + self.commit_window_ms(), Ordering::SeqCst);
        state.notify_renewed();
        Ok(())
    }

    /// Renews the lease in the background until the returned [`HeldLease`] is released or
    /// dropped.
    pub fn keep_renewed(self) -> HeldLease {
        let lease = Arc::new(self);
        let renewing = lease.clone();
        let every = lease.ttl / 4;
        let task = tokio::spawn(acting(Actor::Lease, async move {
            loop {
                tokio::time::sleep(every).await;
                match renewing.renew().await {
                    Ok(()) => {}
                    Err(e @ LeaseError::Lost { .. }) => {
                        tracing::error!("{e}");
                        return;
                    }
                    Err(e) => tracing::warn!("cannot renew a lease: {e}"),
                }
            }
        }));
        HeldLease {
            lease,
            renewal: task,
        }
    }

    /// Lets go of the lease, so that the next run takes it at once. Does nothing when the
    /// lease was lost. Gives up after the lease's time to live: by then the lease has expired
    /// by itself, and a store that does not answer (the very reason a run may be ending)
    /// must not hold the run's exit for the minutes its client would retry.
    pub async fn release(&self) {
        let release = acting(Actor::Lease, self.release_here());
        if tokio::time::timeout(self.ttl, release).await.is_err() {
            tracing::warn!(
                what = %self.check.state.what,
                "the store did not answer the lease's release within {} s: it expires by itself",
                self.ttl.as_secs()
            );
        }
    }

    async fn release_here(&self) {
        holder::let_go_here(&self.holder.token);
        let state = &self.check.state;
        if state.lost.get().is_some() {
            return;
        }
        let newest = newest_generation(self.store.as_ref(), &self.folder).await;
        if !matches!(newest, Ok((Some(n), _)) if n == self.generation) {
            return;
        }
        let released = LeaseRecord {
            holder: self.holder.clone(),
            expires_at_ms: state.clock.now_ms(),
            released: true,
        };
        let path = generation_path(&self.folder, self.generation);
        if let Err(e) = self.store.put(&path, encode(&released)).await {
            tracing::warn!(what = %state.what, "cannot release the lease ({e}): it expires in {} s", self.ttl.as_secs());
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        holder::let_go_here(&self.holder.token);
    }
}

/// A lease renewed in the background.
#[derive(Debug)]
pub struct HeldLease {
    lease: Arc<Lease>,
    renewal: tokio::task::JoinHandle<()>,
}

impl HeldLease {
    pub fn check(&self) -> LeaseCheck {
        self.lease.check()
    }

    /// Stops renewing and lets go.
    pub async fn release(mut self) {
        self.renewal.abort();
        // A renewal under way must not land after the release.
        let _ = (&mut self.renewal).await;
        self.lease.release().await;
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

fn generation_path(folder: &Path, generation: u64) -> Path {
    folder.clone().join(format!("{generation:020}"))
}

fn generation_of(path: &Path) -> Option<u64> {
    path.filename()?.parse().ok()
}

fn encode(record: &LeaseRecord) -> PutPayload {
    // A struct of strings and numbers always serialises.
    PutPayload::from(serde_json::to_vec_pretty(record).unwrap_or_default())
}

/// A generation's record; `None` when it does not parse (it counts as free).
async fn read_record(
    store: &dyn ObjectStore,
    path: &Path,
) -> Result<Option<LeaseRecord>, object_store::Error> {
    let bytes = store.get(path).await?.bytes().await?;
    Ok(serde_json::from_slice(&bytes).ok())
}

/// The newest generation in `folder` and its record.
async fn newest_generation(
    store: &dyn ObjectStore,
    folder: &Path,
) -> Result<(Option<u64>, Option<LeaseRecord>), object_store::Error> {
    let listed: Vec<_> = store.list(Some(folder)).try_collect().await?;
    let Some(newest) = listed
        .iter()
        .filter_map(|meta| generation_of(&meta.location))
        .max()
    else {
        return Ok((None, None));
    };
    match read_record(store, &generation_path(folder, newest)).await {
        Ok(record) => Ok((Some(newest), record)),
        // Deleted by a newer holder since the listing: look again later.
        Err(object_store::Error::NotFound { .. }) => Ok((Some(newest), None)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
