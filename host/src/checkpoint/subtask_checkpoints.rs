//! [`SubtaskCheckpoints`]: a subtask's side of checkpointing: snapshots, uploads, its chain,
//! cleanup of the artifacts it owns, and restore with an orphan sweep.
//!
//! The subtask's thread runs the synchronous phase of a snapshot (freezing the dirty sets),
//! then pins the frozen values between batches ([`SubtaskCheckpoints::pin`]); encoding and
//! upload run on the tokio runtime while records keep flowing, and the acknowledgement goes to
//! the coordinator once every artifact of the chain is in the store. A failed upload fails
//! that checkpoint only: the increment stays in memory and is uploaded again at the next
//! barrier, since later increments build on it.
//!
//! The chain stays bounded ([`ChainPolicy`]): before each snapshot the backend re-writes a
//! slice of the entries still living in the oldest increments (between batches, and what is
//! left at the barrier), and the increments it drains leave the chain with that snapshot
//! (`state::aging`).
//!
//! Cleanup follows DESIGN.md §5: the subtask remembers, per checkpoint it snapshotted or
//! restored, which of the artifacts it owns ([`Ownership`]) that checkpoint references. On
//! `complete(completed, earliest_retained)` it deletes those referenced only by checkpoints
//! before `earliest_retained`, never one referenced by a retained or later (in-flight)
//! checkpoint or by its current chain. Deletes run off the processing path, a few at a time,
//! and a missing object counts as deleted, so a repeated or lost notification does no harm.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use futures::future::{BoxFuture, FutureExt, Shared};
use object_store::{ObjectStoreExt, PutPayload};
use tokio::runtime::Handle;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::actor::{Actor, acting};
use super::checkpoint_store::{ChainError, CheckpointStore, delete_if_present};
use super::error::CheckpointError;
use super::format;
use super::metadata::{ArtifactRef, CheckpointMetadata, SubtaskHandle};
use super::ownership::Ownership;
use super::protocol::{Ack, BarrierReport};
use super::release::{Owned, release};
use crate::ids::{CheckpointId, SubtaskIndex};
use crate::partition::{KeyGroupRange, KeyGroups};
use crate::state::{Increment, KeyedStateBackend};

/// Deletes one subtask's cleanup runs at a time.
const CLEANUP_CONCURRENCY: usize = 4;
/// Attempts per delete before the object is left to a later sweep.
const DELETE_ATTEMPTS: u32 = 5;

/// An upload's outcome: the artifact's size, or why it failed.
type Upload = Shared<BoxFuture<'static, Result<u64, CheckpointError>>>;

/// One artifact of the subtask's current chain.
struct Link {
    /// Its reference; `bytes` is filled in when the upload completes.
    artifact: ArtifactRef,
    upload: Upload,
    /// Kept until a completed checkpoint references the artifact: until then the upload may
    /// fail (or its checkpoint be aborted), and the increment is merged into the next one.
    increment: Option<Arc<Increment>>,
}

impl Link {
    /// The artifact is stored.
    fn stored(&self) -> bool {
        matches!(self.upload.peek(), Some(Ok(_)))
    }
}

/// A snapshot frozen at a barrier and still being pinned: what its acknowledgement carries.
struct Pinning {
    checkpoint: CheckpointId,
    held: HeldState,
    report: BarrierReport,
}

/// Where a subtask is and what it needs to talk to the store and the coordinator.
pub struct SubtaskCheckpoints {
    store: CheckpointStore,
    runtime: Handle,
    /// Acknowledgements to the coordinator, sent once a snapshot's chain is stored.
    acks: UnboundedSender<Ack>,
    operator: String,
    operator_index: usize,
    subtask: SubtaskIndex,
    parallelism: u32,
    key_groups: KeyGroups,
    range: KeyGroupRange,
    /// Names this run's artifacts apart from other runs'.
    run: Arc<str>,
    policy: ChainPolicy,
    /// Snapshots since the last full one (for [`ChainPolicy::full_snapshot_every`]).
    since_full: usize,
    /// The next snapshot must be full: the state came from other subtasks' chains (rescale).
    full_next: bool,
    /// The snapshot frozen and still being pinned beside processing (`state::frozen`).
    pinning: Option<Pinning>,
    /// Keys visited and elements re-written since the last snapshot, between batches, of
    /// the next checkpoint's re-writing budget ([`Self::pin`]).
    rewritten: (usize, usize),
    /// The re-writing budget of the next checkpoint, once a step between batches needed it.
    rewrite_budget: Option<usize>,
    chain: Vec<Link>,
    /// Uploads of artifacts that left the chain (drained, or replaced by a full snapshot)
    /// before they finished: deleting such an artifact waits for its upload, lest it land
    /// afterwards.
    superseded: HashMap<String, Upload>,
    /// Per checkpoint that may still be retained, the artifacts of this subtask it references;
    /// and those of aborted checkpoints, released at the next completion unless a retained or
    /// later checkpoint, or the chain, still holds them.
    owned: Owned,
    cleanups: Vec<JoinHandle<()>>,
    /// Artifacts whose deletion failed (the store was down): tried again at the next
    /// completion.
    undeleted: Arc<std::sync::Mutex<Vec<String>>>,
    /// How long an upload may take before it counts as failed: a store that does not answer
    /// must not hold increments in memory past their checkpoint.
    upload_timeout: Option<std::time::Duration>,
    counters: Arc<SnapshotCounters>,
}

/// What a subtask's checkpoints did, for metrics.
#[derive(Debug, Default)]
pub struct SnapshotCounters {
    /// Bytes of keyed state held (keys and values), as of the last snapshot.
    pub state_bytes: AtomicU64,
    /// Entries the last snapshot wrote: keys changed since the one before, plus entries
    /// re-written to bound the chain.
    pub last_entries: AtomicU64,
    /// Entries every snapshot of the run wrote, summed.
    pub entries_total: AtomicU64,
    /// Bytes of artifacts uploaded.
    pub uploaded_bytes: AtomicU64,
    /// Artifacts deleted from the store (cleanup after completions, and orphan sweeps).
    pub deleted_artifacts: AtomicU64,
    /// How long the last snapshot paused the subtask (its synchronous part), in microseconds.
    pub last_sync_pause_us: AtomicU64,
}

/// How a subtask keeps its chain of increments bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainPolicy {
    /// The chain length to stay under: the re-write budget grows so that the whole state is
    /// re-written within about this many checkpoints.
    pub max_chain: usize,
    /// Entries re-written per checkpoint at least (DESIGN.md §4).
    pub rewrite_budget: usize,
    /// Instead of re-writing, a full snapshot every this many checkpoints (the classic
    /// scheme, kept for comparison).
    pub full_snapshot_every: Option<usize>,
}

impl ChainPolicy {
    /// Entries to re-write at the next checkpoint for a state of `entries` keys: enough to
    /// re-write all of them in `max_chain - 1` checkpoints, and never less than the
    /// configured budget.
    pub fn budget(&self, entries: usize) -> usize {
        let spread = self.max_chain.saturating_sub(1).max(1);
        self.rewrite_budget.max(entries.div_ceil(spread))
    }
}

impl Default for ChainPolicy {
    fn default() -> Self {
        Self {
            max_chain: 16,
            rewrite_budget: 10_000,
            full_snapshot_every: None,
        }
    }
}

/// What a subtask is told when it starts: the whole picture of the store.
#[derive(Clone, Debug)]
pub struct RestoreAssignment {
    /// The checkpoint to restore, if any.
    pub restored: Option<Arc<CheckpointMetadata>>,
    /// Every retained checkpoint (the restored one among them): their artifacts stay.
    pub retained: Vec<Arc<CheckpointMetadata>>,
    /// Operators (by uid) of retained checkpoints that the job no longer has: the job's
    /// first subtask (of its first operator) owns their artifacts, and deletes them as those
    /// checkpoints leave retention.
    pub adopted: Vec<String>,
    /// The restored checkpoint is a savepoint, whose artifacts belong to no run: the state
    /// restored from them is written afresh at the first checkpoint, as after a rescale.
    pub detached: bool,
    /// What `--allow-dropped-state` lets a restore drop: `OP` (all the state of operator
    /// uid `OP`) or `OP.STATE` (one state of it).
    pub allow_dropped_state: Vec<String>,
}

/// What a subtask's state held at a checkpoint, for its metadata.
struct HeldState {
    live_bytes: u64,
    /// Timers pending, both clocks.
    timers: u64,
    /// The states holding entries, by name.
    states: Vec<String>,
}

/// Who a subtask is, for [`SubtaskCheckpoints::new`].
pub struct SubtaskIdentity {
    pub operator: String,
    pub operator_index: usize,
    pub subtask: SubtaskIndex,
    pub parallelism: u32,
    pub key_groups: KeyGroups,
    pub range: KeyGroupRange,
}

impl SubtaskCheckpoints {
    pub fn new(
        store: CheckpointStore,
        runtime: Handle,
        acks: UnboundedSender<Ack>,
        identity: SubtaskIdentity,
        run: Arc<str>,
        policy: ChainPolicy,
    ) -> Self {
        Self {
            store,
            runtime,
            acks,
            operator: identity.operator,
            operator_index: identity.operator_index,
            subtask: identity.subtask,
            parallelism: identity.parallelism,
            key_groups: identity.key_groups,
            range: identity.range,
            run,
            policy,
            since_full: 0,
            full_next: false,
            pinning: None,
            rewritten: (0, 0),
            rewrite_budget: None,
            chain: Vec::new(),
            superseded: HashMap::new(),
            owned: Owned::default(),
            cleanups: Vec::new(),
            undeleted: Arc::default(),
            upload_timeout: None,
            counters: Arc::default(),
        }
    }

    /// Uploads that take longer than `timeout` fail (the checkpoint's timeout: by then the
    /// checkpoint has failed anyway).
    pub fn upload_within(&mut self, timeout: std::time::Duration) {
        self.upload_timeout = Some(timeout);
    }

    /// Counts into `counters` from now on (the job's metrics).
    pub fn count_into(&mut self, counters: Arc<SnapshotCounters>) {
        self.counters = counters;
    }

    /// Rebuilds `backend` from the restored checkpoint, if any, reading only the subtask's
    /// key groups from the chains of the subtasks that held them; learns which retained
    /// artifacts it owns ([`Ownership`]); then deletes, in the folders it sweeps, every
    /// object no retained checkpoint references: artifacts of checkpoints that never
    /// completed.
    pub fn start(
        &mut self,
        backend: &mut KeyedStateBackend,
        assignment: &RestoreAssignment,
    ) -> Result<(), CheckpointError> {
        let ownership = Ownership::plan(
            &self.operator,
            self.parallelism,
            self.key_groups,
            assignment.retained.iter().map(|m| &**m),
        );
        let adopts = self.operator_index == 0 && self.subtask.0 == 0;
        for metadata in &assignment.retained {
            let mut own: Vec<String> = metadata
                .operator(&self.operator)
                .into_iter()
                .flat_map(|o| &o.subtasks)
                .flat_map(|h| &h.chain)
                .filter(|a| ownership.owns(self.subtask, &a.path))
                .map(|a| a.path.clone())
                .collect();
            if adopts {
                own.extend(
                    metadata
                        .operators
                        .iter()
                        .filter(|o| assignment.adopted.contains(&o.name))
                        .flat_map(|o| &o.subtasks)
                        .flat_map(|h| &h.chain)
                        .map(|a| a.path.clone()),
                );
                // After a rescale, chains share artifacts.
                own.sort_unstable();
                own.dedup();
            }
            self.owned.referenced.insert(metadata.id, own);
        }
        if let Some(restored) = &assignment.restored {
            let _span = tracing::info_span!(
                "restore",
                operator = %self.operator,
                subtask = self.subtask.0,
                checkpoint = restored.id.0
            )
            .entered();
            self.restore(backend, restored, assignment.detached)?;
            self.drop_unclaimed(backend, restored.id, &assignment.allow_dropped_state)?;
            self.reencode_json_text(backend, restored)?;
        }
        let everything: HashSet<&str> = assignment
            .retained
            .iter()
            .flat_map(|m| m.artifacts())
            .map(|a| a.path.as_str())
            .collect();
        self.sweep_orphans(&everything)
            .map_err(|reason| CheckpointError::OrphanSweep {
                operator: self.operator.clone(),
                subtask: self.subtask.0,
                reason,
            })
    }

    fn restore(
        &mut self,
        backend: &mut KeyedStateBackend,
        restored: &CheckpointMetadata,
        detached: bool,
    ) -> Result<(), CheckpointError> {
        let incompatible = |reason: String| CheckpointError::Incompatible {
            checkpoint: restored.id,
            reason,
        };
        if restored.key_groups != self.key_groups.count() {
            return Err(incompatible(format!(
                "has {} key groups and the job {}: max_parallelism cannot change",
                restored.key_groups,
                self.key_groups.count()
            )));
        }
        let Some(operator) = restored.operator(&self.operator) else {
            // An operator the job did not have then (the checkpoint knows operators by their
            // uid): it starts with empty state.
            if self.subtask.0 == 0 {
                tracing::info!(
                    operator = %self.operator,
                    checkpoint = restored.id.0,
                    "the checkpoint holds no state of this operator: it starts empty"
                );
            }
            return Ok(());
        };
        // The subtasks whose key groups overlap ours; with unchanged parallelism, just ours.
        let sources: Vec<&SubtaskHandle> = operator
            .subtasks
            .iter()
            .filter(|h| {
                let r = h.range();
                r.start < self.range.end && self.range.start < r.end
            })
            .collect();
        let actor = Actor::Subtask {
            operator: self.operator.clone(),
            subtask: self.subtask.0,
        };
        for handle in &sources {
            let chain = self.store.restore_chain(backend, handle, self.range);
            self.runtime
                .block_on(acting(actor.clone(), chain))
                .map_err(|e| match e {
                    ChainError::Read(e) => {
                        CheckpointError::from_storage(restored.id, e, |p| self.store.locate(p))
                    }
                    ChainError::Apply { path, error } => {
                        CheckpointError::undecodable(restored.id, self.store.locate(&path), error)
                    }
                })?;
        }
        let rescaled = operator.parallelism != self.parallelism;
        if rescaled || detached {
            // Our state comes from others' chains (or a savepoint's copies): the first
            // checkpoint writes it afresh, and the inherited artifacts go once that
            // checkpoint is the earliest retained (a savepoint's never: nothing owns them).
            self.full_next = true;
            backend.forget_chain();
        } else if let Some(handle) = sources.first() {
            self.chain = handle
                .chain
                .iter()
                .map(|artifact| Link {
                    artifact: artifact.clone(),
                    upload: futures::future::ready(Ok(artifact.bytes)).boxed().shared(),
                    increment: None,
                })
                .collect();
        }
        Ok(())
    }

    /// Refuses a restore that found state the operator no longer declares, naming it, unless
    /// `allowed` drops it; drops what it allows (and writes the next checkpoint whole, so
    /// that no later restore finds it in the chain).
    fn drop_unclaimed(
        &mut self,
        backend: &mut KeyedStateBackend,
        checkpoint: CheckpointId,
        allowed: &[String],
    ) -> Result<(), CheckpointError> {
        let unclaimed: Vec<(String, usize)> = backend
            .unclaimed_states()
            .into_iter()
            .map(|(name, entries)| (name.to_owned(), entries))
            .collect();
        let operator = &self.operator;
        let (dropped, refused): (Vec<_>, Vec<_>) = unclaimed.into_iter().partition(|(state, _)| {
            allowed
                .iter()
                .any(|a| *a == *operator || *a == format!("{operator}.{state}"))
        });
        if let Some((first, _)) = refused.first() {
            let states: Vec<String> = refused
                .iter()
                .map(|(state, entries)| format!("`{state}` ({entries} entries)"))
                .collect();
            return Err(CheckpointError::Incompatible {
                checkpoint,
                reason: format!(
                    "holds state of operator `{operator}` that it no longer declares as it \
                     opens: {} in subtask {}; declare it again, or drop it with \
                     --allow-dropped-state {operator}.{first} (one per state, or \
                     --allow-dropped-state {operator} for all of them)",
                    states.join(", "),
                    self.subtask.0
                ),
            });
        }
        for (state, entries) in &dropped {
            tracing::warn!(
                operator = %operator,
                subtask = self.subtask.0,
                checkpoint = checkpoint.0,
                state = %state,
                entries,
                "dropping a state the operator no longer declares (--allow-dropped-state)"
            );
            backend.drop_state(state);
        }
        if !dropped.is_empty() {
            self.full_next = true;
            backend.forget_chain();
        }
        Ok(())
    }

    /// Converts the state an older host stored as a JSON guest's text into CBOR, which every
    /// state is stored as now, and writes the next checkpoint whole (so that no later restore
    /// reads the text from the chain).
    fn reencode_json_text(
        &mut self,
        backend: &mut KeyedStateBackend,
        restored: &CheckpointMetadata,
    ) -> Result<(), CheckpointError> {
        if !restored
            .operator(&self.operator)
            .is_some_and(|o| o.stores_json_text())
        {
            return Ok(());
        }
        let converted = backend.reencode_json_text().map_err(|e| {
            CheckpointError::Incompatible {
                checkpoint: restored.id,
                reason: format!(
                    "holds state of operator `{}` (subtask {}) written as JSON text by an older \
                     Weir, which does not convert to CBOR: {e}",
                    self.operator, self.subtask.0
                ),
            }
        })?;
        if converted > 0 {
            tracing::info!(
                operator = %self.operator,
                subtask = self.subtask.0,
                checkpoint = restored.id.0,
                states = converted,
                "converted state an older Weir stored as JSON text to CBOR"
            );
            self.full_next = true;
            backend.forget_chain();
        }
        Ok(())
    }

    fn own_paths<'a>(&self, artifacts: impl Iterator<Item = &'a ArtifactRef>) -> Vec<String> {
        artifacts
            .filter(|a| a.owner == self.subtask.0)
            .map(|a| a.path.clone())
            .collect()
    }

    /// Deletes, in every folder this subtask sweeps, what no retained checkpoint
    /// (`everything` they reference) needs and this run did not write.
    fn sweep_orphans(&mut self, everything: &HashSet<&str>) -> Result<(), String> {
        let folders = self
            .runtime
            .block_on(self.store.subtask_folders(&self.operator))
            .map_err(|e| e.to_string())?;
        let mut orphans = BTreeSet::new();
        for folder in folders
            .into_iter()
            .filter(|&f| Ownership::sweeps(self.subtask, self.parallelism, f))
        {
            let present = self
                .runtime
                .block_on(
                    self.store
                        .list_subtask(&self.operator, SubtaskIndex(folder)),
                )
                .map_err(|e| e.to_string())?;
            orphans.extend(
                present
                    .iter()
                    .map(|p| self.store.relative(p))
                    .filter(|p| !everything.contains(p.as_str()) && !p.contains(&*self.run)),
            );
        }
        if !orphans.is_empty() {
            tracing::info!(
                operator = %self.operator,
                subtask = self.subtask.0,
                orphans = orphans.len(),
                "deleting artifacts of checkpoints that never completed"
            );
            let task = self.delete(orphans, Vec::new());
            self.runtime
                .block_on(task)
                .map_err(|e| format!("orphan sweep panicked: {e}"))?;
        }
        Ok(())
    }

    /// The barrier of `checkpoint` passed: takes the snapshot's synchronous part. A full
    /// snapshot is taken whole; an incremental one is frozen, then pinned a step at a time
    /// beside processing ([`Self::pin`]). Once pinned, its upload starts, and it is
    /// acknowledged with `report` once the whole chain is stored.
    pub fn snapshot(
        &mut self,
        backend: &mut KeyedStateBackend,
        checkpoint: CheckpointId,
        mut report: BarrierReport,
    ) {
        let paused = std::time::Instant::now();
        // The previous snapshot's pinning ends first: its increment comes before this one.
        // What is left of it pauses the subtask at this barrier, and counts as its pause.
        self.settle(backend);
        let _span = tracing::info_span!(
            "snapshot",
            operator = %self.operator,
            subtask = self.subtask.0,
            checkpoint = checkpoint.0
        )
        .entered();
        // Increments not stored, or whose checkpoint did not complete, ride in this one; one
        // that is no longer at hand cannot, and a full snapshot stands in for it.
        let unmergeable = self
            .chain
            .iter()
            .skip_while(|l| l.stored())
            .any(|l| l.increment.is_none());
        let full = unmergeable
            || self.full_next
            || self
                .policy
                .full_snapshot_every
                .is_some_and(|every| self.since_full + 1 >= every);
        let full_snapshot = if full {
            self.leave_chain(|_| true);
            self.full_next = false;
            self.since_full = 0;
            Some(backend.snapshot_full(checkpoint))
        } else {
            self.since_full += 1;
            let released = match self.policy.full_snapshot_every {
                Some(_) => Vec::new(),
                None => {
                    // What the re-writing between batches left of the budget.
                    let budget = self.policy.budget(backend.stats().entries);
                    backend.rewrite_oldest(checkpoint, self.rewrite_left(budget))
                }
            };
            self.leave_chain(|c| released.contains(&c));
            backend.freeze(checkpoint);
            None
        };
        // What the snapshot holds, as of its barrier.
        let timers = backend
            .timers_pending()
            .map_or(0, |(event, processing)| (event + processing) as u64);
        let held = HeldState {
            live_bytes: backend.live_bytes() as u64,
            timers,
            states: backend.states_with_entries(),
        };
        self.rewritten = (0, 0);
        self.rewrite_budget = None;
        report.timing.sync_pause_us = paused.elapsed().as_micros() as u64;
        self.counters
            .last_sync_pause_us
            .store(report.timing.sync_pause_us, Ordering::Relaxed);
        match full_snapshot {
            Some(increment) => self.store_snapshot(increment, held, true, report),
            None => {
                self.pinning = Some(Pinning {
                    checkpoint,
                    held,
                    report,
                })
            }
        }
    }

    /// Whether a snapshot is frozen and not yet wholly pinned: the subtask calls
    /// [`Self::pin`] between batches until it is.
    pub fn is_pinning(&self) -> bool {
        self.pinning.is_some()
    }

    /// The work a subtask does between batches, up to about `budget` entries: pins the
    /// frozen snapshot, and stores it (upload, then acknowledgement) once every entry is
    /// pinned; between snapshots, re-writes part of the next checkpoint's budget of old
    /// entries (`state::aging`), so that the snapshot's synchronous part has little left.
    pub fn pin(&mut self, backend: &mut KeyedStateBackend, budget: usize) {
        if self.pinning.is_some() {
            self.pin_frozen(backend, budget);
        } else {
            self.rewrite_ahead(backend, budget);
        }
    }

    /// Pins up to about `budget` entries of the frozen snapshot; once every one is, stores
    /// it.
    fn pin_frozen(&mut self, backend: &mut KeyedStateBackend, budget: usize) {
        let Some(increment) = backend.pin_frozen(budget) else {
            return;
        };
        if let Some(Pinning {
            checkpoint,
            held,
            report,
        }) = self.pinning.take()
        {
            debug_assert_eq!(increment.checkpoint, checkpoint);
            self.store_snapshot(increment, held, false, report);
        }
    }

    /// Re-writes up to `step` of the next checkpoint's re-writing budget, unless the budget
    /// is spent: its elements re-written, or four times as many keys (and 1 024) looked up,
    /// as `KeyedStateBackend::rewrite_oldest` bounds them.
    fn rewrite_ahead(&mut self, backend: &mut KeyedStateBackend, step: usize) {
        if self.policy.full_snapshot_every.is_some() {
            return;
        }
        // The budget as of the first step after a snapshot: the state's size moves little
        // between two, and counting its entries visits every table.
        let budget = *self
            .rewrite_budget
            .get_or_insert_with(|| self.policy.budget(backend.stats().entries));
        let left = self.rewrite_left(budget);
        if left == 0 || backend.aged_keys() == 0 {
            return;
        }
        let (visited, spent) = backend.rewrite_some(step.min(left));
        self.rewritten.0 += visited;
        self.rewritten.1 += spent;
    }

    /// What is left of `budget` after the re-writing since the last snapshot: of the
    /// elements to re-write, and of the keys to look up (four per element), whichever is
    /// less. Dead keys cost a lookup and re-write nothing: a state whose keys are all written
    /// again between two checkpoints spends the lookups, not the elements.
    fn rewrite_left(&self, budget: usize) -> usize {
        let (visited, spent) = self.rewritten;
        let lookups = budget.saturating_mul(4).saturating_add(1024);
        budget
            .saturating_sub(spent)
            .min(lookups.saturating_sub(visited) / 4)
    }

    /// Pins the whole frozen snapshot, if any, and stores it (nothing else: the re-writing
    /// ahead is left to the steps between batches, and to the next barrier).
    pub fn settle(&mut self, backend: &mut KeyedStateBackend) {
        if self.pinning.is_some() {
            self.pin_frozen(backend, usize::MAX);
        }
    }

    /// Stores `increment`, a snapshot taken (`full`, or pinned): increments not stored before
    /// ride in it, its upload starts, and the acknowledgement waits for the whole chain.
    fn store_snapshot(
        &mut self,
        mut increment: Increment,
        held: HeldState,
        full: bool,
        mut report: BarrierReport,
    ) {
        let checkpoint = increment.checkpoint;
        let _span = tracing::info_span!(
            "store snapshot",
            operator = %self.operator,
            subtask = self.subtask.0,
            checkpoint = checkpoint.0
        )
        .entered();
        let (carried, carried_full) = self.take_unstored();
        if let Some(older) = carried {
            tracing::info!(
                operator = %self.operator,
                subtask = self.subtask.0,
                checkpoint = checkpoint.0,
                "carrying increments that were not stored into this checkpoint's"
            );
            increment = Increment::merge(older, increment);
        }
        let full = full || carried_full;
        let entries = increment.changes() as u64;
        report.entries = entries;
        self.counters.last_entries.store(entries, Ordering::Relaxed);
        self.counters
            .entries_total
            .fetch_add(entries, Ordering::Relaxed);
        self.counters
            .state_bytes
            .store(held.live_bytes, Ordering::Relaxed);
        if !increment.is_empty() {
            let path =
                self.store
                    .artifact_path(&self.operator, self.subtask, checkpoint, &self.run);
            let increment = Arc::new(increment);
            self.chain.push(Link {
                artifact: ArtifactRef {
                    path: self.store.relative(&path),
                    checkpoint,
                    bytes: 0,
                    full,
                    owner: self.subtask.0,
                },
                upload: self.upload(&path, checkpoint, increment.clone()),
                increment: Some(increment),
            });
        }
        let own = self.own_paths(self.chain.iter().map(|l| &l.artifact));
        self.owned.referenced.insert(checkpoint, own);
        self.acknowledge(checkpoint, held, report);
    }

    /// Takes out of the chain the links from the first one not stored on: their
    /// checkpoints did not complete (each acknowledgement waits for the whole chain), so no
    /// completed checkpoint references them. Returns their increments merged, oldest first,
    /// and whether one was full. Uploads still running go on, and their artifacts are
    /// deleted once they end (they were referenced by aborted checkpoints only).
    fn take_unstored(&mut self) -> (Option<Increment>, bool) {
        let Some(first) = self.chain.iter().position(|l| !l.stored()) else {
            return (None, false);
        };
        let mut merged: Option<Increment> = None;
        let mut full = false;
        for link in self.chain.split_off(first) {
            full |= link.artifact.full;
            if link.upload.peek().is_none() {
                self.superseded.insert(link.artifact.path, link.upload);
            }
            // `snapshot` took a full one instead when an increment was gone.
            let Some(increment) = link.increment else {
                continue;
            };
            let increment = Arc::unwrap_or_clone(increment);
            merged = Some(match merged {
                Some(older) => Increment::merge(older, increment),
                None => increment,
            });
        }
        (merged, full)
    }

    /// Takes the links of the checkpoints `leaves` names out of the chain; uploads still
    /// running are kept, to finish before their artifact may be deleted.
    fn leave_chain(&mut self, leaves: impl Fn(CheckpointId) -> bool) {
        let (gone, kept): (Vec<Link>, Vec<Link>) = std::mem::take(&mut self.chain)
            .into_iter()
            .partition(|l| leaves(l.artifact.checkpoint));
        self.chain = kept;
        for link in gone {
            if link.upload.peek().is_none() {
                self.superseded.insert(link.artifact.path, link.upload);
            }
        }
    }

    /// Acknowledges `checkpoint` once every upload of the current chain has finished.
    fn acknowledge(&self, checkpoint: CheckpointId, held: HeldState, report: BarrierReport) {
        let watermark = report.watermark;
        let links: Vec<(ArtifactRef, Upload)> = self
            .chain
            .iter()
            .map(|l| (l.artifact.clone(), l.upload.clone()))
            .collect();
        let acks = self.acks.clone();
        let (operator, subtask, range) = (self.operator_index, self.subtask.0, self.range);
        self.runtime.spawn(async move {
            let mut chain = Vec::with_capacity(links.len());
            let mut result = Ok(());
            for (mut artifact, upload) in links {
                match upload.await {
                    Ok(bytes) => {
                        artifact.bytes = bytes;
                        chain.push(artifact);
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            let result = result.map(|()| SubtaskHandle {
                subtask,
                key_groups: (range.start, range.end),
                chain,
                live_bytes: held.live_bytes,
                watermark,
                timers: held.timers,
                states: held.states,
            });
            // The coordinator is gone only when the job is stopping.
            let _ = acks.send(Ack::Subtask {
                checkpoint,
                operator,
                subtask,
                result,
                report,
            });
        });
    }

    /// Starts encoding and writing an increment; the upload runs whether or not anyone
    /// waits for it, for at most the upload timeout.
    fn upload(
        &self,
        path: &object_store::path::Path,
        checkpoint: CheckpointId,
        increment: Arc<Increment>,
    ) -> Upload {
        let store = self.store.object_store().clone();
        let path = path.clone();
        let object = self.store.locate(&path);
        let counters = self.counters.clone();
        let timeout = self.upload_timeout;
        let span = tracing::info_span!("upload", checkpoint = checkpoint.0, object = %object);
        let upload = async move {
            let failed = |reason: String| CheckpointError::Upload {
                checkpoint,
                object: object.clone(),
                reason,
            };
            let bytes = tokio::task::spawn_blocking(move || format::encode(&increment))
                .await
                .map_err(|e| failed(format!("encoding panicked: {e}")))?
                .map_err(|e| failed(format!("cannot encode: {e}")))?;
            let size = bytes.len() as u64;
            let put = store.put(&path, PutPayload::from(bytes));
            let put = match timeout {
                Some(limit) => tokio::time::timeout(limit, put).await.map_err(|_| {
                    failed(format!(
                        "the store did not take the upload within {} ms",
                        limit.as_millis()
                    ))
                })?,
                None => put.await,
            };
            put.map_err(|source| CheckpointError::Store {
                checkpoint,
                object: object.clone(),
                source: Arc::new(source),
            })?;
            counters.uploaded_bytes.fetch_add(size, Ordering::Relaxed);
            tracing::debug!(bytes = size, "uploaded");
            Ok(size)
        }
        .instrument(span)
        .boxed()
        .shared();
        self.runtime.spawn(upload.clone());
        upload
    }

    /// `abort(checkpoint)`: the checkpoint will never be retained. Its artifacts are not
    /// deleted now (a later increment may build on them) but at the next completion, if
    /// nothing retained or later references them. A lost abort only delays this until the
    /// checkpoint falls before the earliest retained one.
    pub fn abort(&mut self, checkpoint: CheckpointId) {
        if let Some(paths) = self.owned.referenced.remove(&checkpoint) {
            self.owned.aborted.extend(paths);
        }
    }

    /// `complete(completed, earliest_retained)`: deletes the artifacts this subtask owns that
    /// only checkpoints before `earliest_retained` (or aborted ones) referenced.
    pub fn complete(&mut self, completed: CheckpointId, earliest_retained: CheckpointId) {
        // What the completed checkpoint references is stored for good.
        for link in &mut self.chain {
            if link.artifact.checkpoint <= completed && link.stored() {
                link.increment = None;
            }
        }
        let undeleted =
            std::mem::take(&mut *self.undeleted.lock().unwrap_or_else(|e| e.into_inner()));
        let chain: Vec<&str> = self
            .chain
            .iter()
            .map(|l| l.artifact.path.as_str())
            .collect();
        let doomed = release(
            &mut self.owned,
            completed,
            earliest_retained,
            &chain,
            undeleted,
        );
        if !doomed.is_empty() {
            let uploads: Vec<Upload> = doomed
                .iter()
                .filter_map(|p| self.superseded.remove(p))
                .collect();
            let task = self.delete(doomed, uploads);
            self.cleanups.retain(|t| !t.is_finished());
            self.cleanups.push(task);
        }
    }

    /// Deletes `paths` (relative to the job's folder) on the runtime, a few at a time, once
    /// `uploads` of some of them have finished.
    fn delete(&self, paths: BTreeSet<String>, uploads: Vec<Upload>) -> JoinHandle<()> {
        let store = self.store.clone();
        let (operator, subtask) = (self.operator.clone(), self.subtask.0);
        let counters = self.counters.clone();
        let undeleted = self.undeleted.clone();
        let actor = Actor::Subtask {
            operator: operator.clone(),
            subtask,
        };
        self.runtime.spawn(acting(actor, async move {
            futures::future::join_all(uploads).await;
            futures::stream::iter(paths)
                .for_each_concurrent(CLEANUP_CONCURRENCY, |relative| {
                    let store = store.clone();
                    let operator = operator.clone();
                    let counters = counters.clone();
                    let undeleted = undeleted.clone();
                    async move {
                        let path = store.resolve(&relative);
                        let mut attempt = 0;
                        loop {
                            attempt += 1;
                            match delete_if_present(store.object_store().as_ref(), &path).await {
                                Ok(()) => {
                                    counters.deleted_artifacts.fetch_add(1, Ordering::Relaxed);
                                    break;
                                }
                                Err(e) if attempt >= DELETE_ATTEMPTS => {
                                    tracing::warn!(%operator, subtask, error = %e, "cannot delete an artifact; trying again at the next completion");
                                    undeleted
                                        .lock()
                                        .unwrap_or_else(|e| e.into_inner())
                                        .push(relative);
                                    break;
                                }
                                Err(_) => {
                                    tokio::time::sleep(std::time::Duration::from_millis(
                                        10 << attempt,
                                    ))
                                    .await;
                                }
                            }
                        }
                    }
                })
                .await;
        }))
    }

    /// Waits for running cleanups, at the end of the job.
    pub fn finish(&mut self) {
        let cleanups = std::mem::take(&mut self.cleanups);
        self.runtime.block_on(futures::future::join_all(cleanups));
    }
}

impl Drop for SubtaskCheckpoints {
    /// A subtask that stops (the job failed) waits for its uploads: one landing after a
    /// restarted run swept the prefix would be an orphan nobody deletes.
    fn drop(&mut self) {
        let running: Vec<Upload> = self
            .chain
            .iter()
            .map(|l| &l.upload)
            .chain(self.superseded.values())
            .filter(|u| u.peek().is_none())
            .cloned()
            .collect();
        if !running.is_empty() {
            self.runtime.block_on(futures::future::join_all(running));
        }
    }
}
