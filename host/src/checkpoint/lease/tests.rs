//! The lease's rules on an in-memory store with a clock the tests move.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::*;

const TTL: Duration = Duration::from_secs(10);

struct World {
    store: Arc<dyn ObjectStore>,
    now: Arc<AtomicU64>,
}

impl World {
    fn new() -> Self {
        Self {
            store: Arc::new(InMemory::new()),
            now: Arc::new(AtomicU64::new(1_000_000)),
        }
    }

    fn options(&self) -> LeaseOptions {
        LeaseOptions {
            ttl: TTL,
            wait: Duration::ZERO,
            clock: Clock::Manual(self.now.clone()),
        }
    }

    fn advance(&self, by: Duration) {
        self.now.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }

    async fn acquire(&self) -> Result<Lease, LeaseError> {
        Lease::acquire(
            self.store.clone(),
            &Path::from("job"),
            "job `j`",
            &self.options(),
        )
        .await
    }

    async fn generations(&self) -> Vec<String> {
        let listed: Vec<_> = self
            .store
            .list(Some(&Path::from("job/lease")))
            .try_collect()
            .await
            .expect("list");
        let mut names: Vec<String> = listed
            .iter()
            .filter_map(|m| m.location.filename().map(str::to_owned))
            .collect();
        names.sort();
        names
    }
}

#[tokio::test(start_paused = true)]
async fn a_second_run_is_refused_while_the_lease_lives_and_named() {
    let world = World::new();
    let first = world.acquire().await.expect("first");
    assert!(first.check().check().is_ok());
    let refused = world.acquire().await.expect_err("a live lease");
    let message = refused.to_string();
    assert!(matches!(refused, LeaseError::Held { .. }), "{message}");
    assert!(
        message.contains(&format!("pid {}", std::process::id())) && message.contains("job `j`"),
        "{message}"
    );
    assert!(message.contains("expires in 10 s"), "{message}");
}

#[tokio::test(start_paused = true)]
async fn an_expired_lease_is_taken_over_and_its_old_holder_learns_it_lost() {
    let world = World::new();
    let first = world.acquire().await.expect("first");
    // The first holder stops renewing (stalled, or cut off from the store) past the expiry.
    world.advance(TTL + Duration::from_millis(1));
    assert!(matches!(
        first.check().check(),
        Err(LeaseError::Lapsed { .. })
    ));
    let second = world.acquire().await.expect("the lease expired");
    assert!(second.check().check().is_ok());
    assert_eq!(world.generations().await, ["00000000000000000002"]);
    // The first comes back: its renewal finds the newer generation, and it never commits.
    let lost = first.renew().await.expect_err("taken over");
    assert!(matches!(lost, LeaseError::Lost { .. }), "{lost}");
    assert!(matches!(
        first.check().check(),
        Err(LeaseError::Lost { .. })
    ));
    assert!(second.renew().await.is_ok());
    assert!(second.check().check().is_ok());
}

#[tokio::test(start_paused = true)]
async fn commits_lapse_half_a_lease_after_the_last_renewal_and_resume_with_the_next() {
    let world = World::new();
    let lease = world.acquire().await.expect("lease");
    world.advance(TTL / 2 - Duration::from_millis(1));
    assert!(lease.check().check().is_ok());
    world.advance(Duration::from_millis(1));
    assert!(matches!(
        lease.check().check(),
        Err(LeaseError::Lapsed { .. })
    ));
    lease.renew().await.expect("renew");
    assert!(lease.check().check().is_ok());
    // Renewed, it is still live for others.
    world.advance(TTL / 2);
    assert!(matches!(
        world.acquire().await,
        Err(LeaseError::Held { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_commit_waits_out_a_lapse_for_the_next_renewal_but_not_past_the_expiry() {
    let world = World::new();
    let lease = world.acquire().await.expect("lease");
    world.advance(TTL / 2);
    let check = lease.check();
    assert!(matches!(check.check(), Err(LeaseError::Lapsed { .. })));
    // A commit on a blocking thread, and the renewal that lets it go on.
    let waiting = std::thread::spawn({
        let check = check.clone();
        move || check.wait_while_lapsed()
    });
    lease.renew().await.expect("renew");
    waiting
        .join()
        .expect("the waiting thread")
        .expect("renewed: the commit goes on");
    // At the lease's expiry another run may hold it: the lapse is an error at once.
    world.advance(TTL);
    assert!(matches!(
        check.wait_while_lapsed(),
        Err(LeaseError::Lapsed { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_released_or_dropped_lease_is_free_at_once() {
    let world = World::new();
    let first = world.acquire().await.expect("first");
    first.release().await;
    let second = world.acquire().await.expect("released");
    // Dropped without a release (a run that panicked): on this machine its holder is seen
    // to hold it no more.
    drop(second);
    let third = world.acquire().await.expect("dropped");
    assert_eq!(world.generations().await, ["00000000000000000003"]);
    assert!(third.check().check().is_ok());
}

#[tokio::test(start_paused = true)]
async fn of_two_runs_starting_together_exactly_one_holds_the_lease() {
    let world = World::new();
    let (a, b) = tokio::join!(world.acquire(), world.acquire());
    assert!(
        a.is_ok() != b.is_ok(),
        "exactly one of {a:?} and {b:?} must hold the lease"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_contender_takes_the_lease_when_it_is_released() {
    let world = World::new();
    let first = world.acquire().await.expect("first");
    let options = LeaseOptions {
        wait: Duration::from_secs(60),
        ..world.options()
    };
    let store = world.store.clone();
    let waiting = tokio::spawn(async move {
        Lease::acquire(store, &Path::from("job"), "job `j`", &options).await
    });
    tokio::task::yield_now().await;
    first.release().await;
    let second = waiting
        .await
        .expect("join")
        .expect("taken after the release");
    assert!(second.check().check().is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_record_that_does_not_parse_counts_as_free() {
    let world = World::new();
    world
        .store
        .put(
            &Path::from("job/lease/00000000000000000004"),
            "not json".into(),
        )
        .await
        .expect("put");
    world.acquire().await.expect("free");
    assert_eq!(world.generations().await, ["00000000000000000005"]);
}

#[tokio::test(start_paused = true)]
async fn a_release_the_store_does_not_answer_gives_up_when_the_lease_expires() {
    use crate::checkpoint::instrumented_store::{Faults, InstrumentedStore};
    let store = InstrumentedStore::new(Arc::new(InMemory::new()), Faults::default());
    let hold = store.write_hold();
    let mut world = World::new();
    world.store = Arc::new(store);
    let lease = world.acquire().await.expect("first");
    hold.hold("");
    let started = tokio::time::Instant::now();
    lease.release().await;
    assert_eq!(
        started.elapsed(),
        TTL,
        "the release waits out the lease, no longer"
    );
    assert_eq!(hold_count(&hold).await, 1, "the release's write was held");
}

async fn hold_count(hold: &crate::checkpoint::instrumented_store::WriteHold) -> usize {
    let count = std::sync::Mutex::new(0);
    hold.held_until(|paths| {
        *count.lock().expect("count") = paths.len();
        true
    })
    .await;
    count.into_inner().expect("count")
}
