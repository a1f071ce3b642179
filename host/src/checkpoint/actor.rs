//! [`Actor`]: which task of a job a store call comes from.
//!
//! Deletes carry the deleter's identity as a task-local value, so that a wrapping store can
//! tell who issued each call (tests check that only an artifact's owner deletes it and that
//! the coordinator deletes only its own metadata) and logs can say who cleaned up.

use std::future::Future;

tokio::task_local! {
    static ACTOR: Actor;
}

/// A task that talks to the store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Actor {
    Coordinator,
    Subtask {
        operator: String,
        subtask: u32,
    },
    /// A run's lease (`crate::checkpoint::lease`): it writes and deletes only in the
    /// folder's `lease/`.
    Lease,
}

/// Runs `future` as `actor`.
pub async fn acting<F: Future>(actor: Actor, future: F) -> F::Output {
    ACTOR.scope(actor, future).await
}

/// The actor of the running task, if it declared one.
pub fn current() -> Option<Actor> {
    ACTOR.try_with(Clone::clone).ok()
}
