//! [`RestoreLatch`]: the sink rolls its output back to a checkpoint only once every subtask
//! has restored its state from that checkpoint.
//!
//! Rolling back is destructive (the file sink truncates its output to the length the
//! checkpoint recorded), and a restore can fail on damage that a fallback to an older
//! checkpoint then works around (DESIGN.md §8). Were the sink to roll back first, a restore
//! that failed would leave the output cut to a checkpoint nothing was restored from, and
//! every later restore of a newer checkpoint would find its output lost.
//!
//! The same moment is when the run has started (every operator opened, every state back):
//! the latch raises the run's [`StartedSignal`] then, in the subtask that restored last,
//! before any record is processed, so a watcher never sees a job fail before it started
//! when it started first.

use std::sync::{Arc, Condvar, Mutex};

use super::run_options::StartedSignal;

/// Counts the subtasks still restoring; the sink waits on it.
#[derive(Clone)]
pub(super) struct RestoreLatch(Arc<Shared>);

struct Shared {
    /// How many subtasks are still restoring, and whether one failed: changed under the lock,
    /// waited on through `changed`.
    state: Mutex<Progress>,
    /// Signalled whenever `state` changes.
    changed: Condvar,
    /// Raised when the last subtask has restored.
    started: StartedSignal,
}

struct Progress {
    restoring: usize,
    failed: bool,
}

/// One subtask's part: [`Restoring::restored`] when its state is back; dropped without it
/// (the subtask failed, or never got there), the restore failed.
pub(super) struct Restoring {
    latch: RestoreLatch,
    done: bool,
}

impl RestoreLatch {
    /// A latch for `subtasks` subtasks, each to be given one [`Restoring`]; raises `started`
    /// once all of them restored.
    pub(super) fn new(subtasks: usize, started: StartedSignal) -> Self {
        if subtasks == 0 {
            started.raise();
        }
        Self(Arc::new(Shared {
            state: Mutex::new(Progress {
                restoring: subtasks,
                failed: false,
            }),
            changed: Condvar::new(),
            started,
        }))
    }

    /// A subtask's part.
    pub(super) fn part(&self) -> Restoring {
        Restoring {
            latch: self.clone(),
            done: false,
        }
    }

    /// Blocks until every subtask has restored (`true`) or one has failed (`false`).
    pub(super) fn wait(&self) -> bool {
        let mut progress = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        while progress.restoring > 0 && !progress.failed {
            progress = self
                .0
                .changed
                .wait(progress)
                .unwrap_or_else(|e| e.into_inner());
        }
        !progress.failed
    }

    fn settle(&self, restored: bool) {
        let mut progress = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        if restored {
            progress.restoring = progress.restoring.saturating_sub(1);
            if progress.restoring == 0 && !progress.failed {
                self.0.started.raise();
            }
        } else {
            progress.failed = true;
        }
        self.0.changed.notify_all();
    }
}

impl Restoring {
    /// This subtask's state is restored (once; later calls do nothing).
    pub(super) fn restored(&mut self) {
        if !self.done {
            self.done = true;
            self.latch.settle(true);
        }
    }
}

impl Drop for Restoring {
    fn drop(&mut self) {
        if !self.done {
            self.latch.settle(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_when_every_subtask_restored_and_fails_when_one_did_not() {
        let started = StartedSignal::default();
        let latch = RestoreLatch::new(2, started.clone());
        let (mut a, mut b) = (latch.part(), latch.part());
        let waiter = std::thread::spawn({
            let latch = latch.clone();
            move || latch.wait()
        });
        a.restored();
        assert!(!started.is_raised(), "one subtask is still restoring");
        b.restored();
        assert!(waiter.join().expect("join"));
        assert!(started.is_raised());

        let started = StartedSignal::default();
        let latch = RestoreLatch::new(2, started.clone());
        let (mut a, b) = (latch.part(), latch.part());
        a.restored();
        drop(b);
        assert!(!latch.wait());
        assert!(!started.is_raised());
    }
}
