//! What an upgrade would do to a job's state (DESIGN.md §8.8): the job's latest checkpoint
//! matched against the new version's operators by uid ([`JobStart::check_state_kept`]) and,
//! with `--check`, restored into them offline: every subtask opened and the key groups it
//! would restore read into it, which finds an operator that fails to open, no longer
//! declares a state it held, or whose state does not read. Nothing is written.
//!
//! A Kafka job has no one latest checkpoint: each input partition (of each stage, for a job
//! that re-keys) keeps its own, and each is checked as the pipeline that takes it would
//! restore it.

use crate::checkpoint::metadata::OperatorHandles;
use crate::checkpoint::{CheckpointMetadata, CheckpointStore, JobStart, RestoreFrom, StartFrom};
use crate::engine::Engine;
use crate::engine::component_digest::component_digest;
use crate::ids::SubtaskIndex;
use crate::job::{JobSpec, Pipeline};
use crate::operator::SubtaskContext;
use crate::partition::KeyGroupRange;
use crate::state::KeyedStateBackend;

/// What checking one checkpoint folder found.
pub(super) struct Checked {
    /// The checkpoint checked against, if the folder has a completed one.
    pub(super) checkpoint: Option<u64>,
    /// Per operator of the new version, and per state dropped, what the restore does.
    pub(super) notes: Vec<String>,
}

/// Checks that the latest checkpoint in `store` restores into `spec`, dropping only the
/// state `allowed` names; with `open`, opens every subtask offline and restores into it.
///
/// The job may run on while it is checked (a Kafka job's partitions do, and so does a job
/// whose failed upgrade rolled back): a checkpoint that completes meanwhile can retire the
/// one being read, its metadata or its artifacts, so a plan or a restore that fails is tried
/// again at the newer checkpoint, and only one that fails at the newest is an error.
pub(super) async fn latest(
    spec: &JobSpec,
    store: CheckpointStore,
    engine: &Engine,
    allowed: &[String],
    open: bool,
) -> Result<Checked, String> {
    /// Checkpoints tried at most: a job checkpointing faster than a restore reads must
    /// still get an answer.
    const TRIES: usize = 3;
    let mut failed = None;
    for tries in 1.. {
        let latest = StartFrom::Restore(RestoreFrom::Latest);
        let start = match JobStart::plan(&store, &spec.name, &latest, &[]).await {
            Ok(start) => start,
            // The checkpoint listed as the latest can be retired before its metadata is
            // read, when newer ones complete meanwhile: list again.
            Err(_) if tries < TRIES => continue,
            Err(e) => return Err(format!("cannot restore the latest checkpoint: {e}")),
        };
        let at = start.restored.as_ref().map(|m| m.id);
        if let Some((_, e)) = failed.take_if(|(before, _)| *before == at) {
            return Err(e);
        }
        match check_start(spec, &store, &start, engine, allowed, open).await {
            Ok(checked) => return Ok(checked),
            Err(e) if tries == TRIES => return Err(e),
            Err(e) => failed = Some((at, e)),
        }
    }
    unreachable!("the loop returns by its last try")
}

/// [`latest`] of one planned restore, `start`.
async fn check_start(
    spec: &JobSpec,
    store: &CheckpointStore,
    start: &JobStart,
    engine: &Engine,
    allowed: &[String],
    open: bool,
) -> Result<Checked, String> {
    let uids: Vec<&str> = spec.operators.iter().map(|op| op.uid.as_str()).collect();
    start
        .check_state_kept(&spec.name, &uids, allowed)
        .map_err(|e| e.to_string())?;
    let mut notes = restore_notes(spec, start, &uids);
    if open {
        let (opened, engine, store) = (spec.clone(), engine.clone(), store.clone());
        let restored = start.restored.clone().filter(|m| !m.finished);
        let runtime = tokio::runtime::Handle::current();
        let declared = tokio::task::spawn_blocking(move || {
            let restore = restored.as_deref().map(|m| (&store, m, &runtime));
            declared_states(&opened, &engine, restore)
        })
        .await
        .map_err(|e| e.to_string())??;
        if let Some(restored) = start.restored.as_ref().filter(|m| !m.finished) {
            notes.extend(states_kept(restored, &declared, allowed)?);
        }
    }
    Ok(Checked {
        checkpoint: start.restored.as_ref().map(|m| m.id.0),
        notes,
    })
}

/// [`latest`] for every input partition of the Kafka job `spec` that has a checkpoint
/// folder in the store at `url`, stage by stage, each as its partition's pipeline restores
/// it; the notes name the partition (and the stage) they are about. Asks the brokers how the
/// job is staged, as a run does.
pub(super) async fn partitions(
    spec: &JobSpec,
    url: &str,
    engine: &Engine,
    allowed: &[String],
    open: bool,
) -> Result<Vec<String>, String> {
    let stages = crate::group::partitioned_jobs(spec)
        .await
        .map_err(|e| e.to_string())?;
    let mut notes = Vec::new();
    for stage in &stages {
        let folder = CheckpointStore::open(url, &stage.name).map_err(|e| e.to_string())?;
        let kept = folder
            .partition_folders()
            .await
            .map_err(|e| e.to_string())?;
        for partition in kept {
            let place = match stages.len() {
                1 => format!("partition {partition}"),
                _ => format!("`{}` partition {partition}", stage.name),
            };
            let job = crate::group::partition_job(stage, partition);
            let store = folder.partition(partition);
            let checked = latest(&job, store, engine, allowed, open)
                .await
                .map_err(|e| format!("{place}: {e}"))?;
            let at = checked
                .checkpoint
                .map_or_else(String::new, |c| format!(" (checkpoint {c})"));
            notes.extend(checked.notes.iter().map(|n| format!("{place}{at}: {n}")));
        }
    }
    if notes.is_empty() {
        notes.push(
            "no partition has a checkpoint yet: each starts the new version with empty state"
                .into(),
        );
    }
    Ok(notes)
}

/// Opens every subtask of every operator of `spec` and, given a checkpoint (`restore`), reads
/// into it the key groups it would restore, from the chains that hold them, as a run does: the
/// states each operator declares, by uid (the union over its subtasks). A subtask that fails
/// to open, or whose state does not restore (an artifact that does not read, state an older
/// Weir stored that does not convert), is an error. Nothing is written.
fn declared_states(
    spec: &JobSpec,
    engine: &Engine,
    restore: Option<(
        &CheckpointStore,
        &CheckpointMetadata,
        &tokio::runtime::Handle,
    )>,
) -> Result<Vec<Declared>, String> {
    let pipeline = Pipeline::from_spec(spec, engine).map_err(|e| e.to_string())?;
    let mut declared = Vec::new();
    for stage in &pipeline.stages {
        let mut states: Vec<String> = Vec::new();
        let mut restored_entries = None;
        for subtask in 0..stage.parallelism {
            let mut ctx = SubtaskContext::new(
                &spec.name,
                &stage.name,
                subtask,
                stage.parallelism,
                pipeline.key_groups,
            );
            ctx.config_json = stage.config_json.clone();
            ctx.limits = stage.limits;
            let mut instance = stage.factory.instantiate(&ctx).map_err(|e| {
                format!(
                    "operator `{}` subtask {subtask} fails to open: {e}",
                    stage.name
                )
            })?;
            if let Some((store, restored, runtime)) = restore
                && let Some(old) = restored.operator(&stage.uid)
            {
                let range = pipeline
                    .key_groups
                    .range_of(SubtaskIndex(subtask), stage.parallelism);
                let backend = instance.state_mut();
                restore_offline(backend, store, old, range, runtime).map_err(|e| {
                    format!(
                        "operator `{}` subtask {subtask} does not restore checkpoint {}: {e}",
                        stage.name, restored.id
                    )
                })?;
                *restored_entries.get_or_insert(0) += backend.stats().entries;
            }
            let names = instance.state_mut().declared_states();
            states.extend(names.into_iter().map(str::to_owned));
        }
        states.sort_unstable();
        states.dedup();
        declared.push(Declared {
            uid: stage.uid.clone(),
            states,
            restored_entries,
        });
    }
    Ok(declared)
}

/// What `--check` found of one operator of the new version.
struct Declared {
    uid: String,
    /// The states its subtasks declare as they open.
    states: Vec<String>,
    /// The entries its subtasks restored, when the checkpoint held state of it.
    restored_entries: Option<usize>,
}

/// Reads into `backend` the key groups of `range` that `old`'s subtasks hold, chain by chain,
/// and converts what an older Weir stored as JSON text, as a restore does.
fn restore_offline(
    backend: &mut KeyedStateBackend,
    store: &CheckpointStore,
    old: &OperatorHandles,
    range: KeyGroupRange,
    runtime: &tokio::runtime::Handle,
) -> Result<(), String> {
    let overlapping = old.subtasks.iter().filter(|h| {
        let held = h.range();
        held.start < range.end && range.start < held.end
    });
    for handle in overlapping {
        runtime
            .block_on(store.restore_chain(backend, handle, range))
            .map_err(|e| e.to_string())?;
    }
    if old.stores_json_text() {
        backend.reencode_json_text().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Refuses states `restored` holds that the operators' new versions do not declare
/// (`declared`, by uid) unless `allowed` drops them; notes the drops.
fn states_kept(
    restored: &CheckpointMetadata,
    declared: &[Declared],
    allowed: &[String],
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    for Declared {
        uid,
        states,
        restored_entries,
    } in declared
    {
        let Some(old) = restored.operator(uid) else {
            continue;
        };
        if let Some(entries) = restored_entries {
            notes.push(format!(
                "`{uid}`: every subtask opened with its restored state ({entries} entries)"
            ));
        }
        for held in old.states() {
            if states.iter().any(|s| s == held) {
                continue;
            }
            if allowed
                .iter()
                .any(|a| *a == *uid || *a == format!("{uid}.{held}"))
            {
                notes.push(format!("`{uid}`: its state `{held}` is dropped"));
            } else {
                return Err(format!(
                    "checkpoint {} holds state `{held}` of operator `{uid}` that its new \
                     version does not declare as it opens: declare it again, or drop it \
                     with --allow-dropped-state {uid}.{held}",
                    restored.id
                ));
            }
        }
    }
    Ok(notes)
}

/// What restoring `start` into `spec` does to each operator's state.
fn restore_notes(spec: &JobSpec, start: &JobStart, uids: &[&str]) -> Vec<String> {
    let Some(restored) = &start.restored else {
        return vec!["no completed checkpoint yet: the job takes one as it stops".into()];
    };
    // The checkpoint is named once, before the notes (the check's header, or each Kafka
    // partition's place), not again in every line.
    let mut notes: Vec<String> = spec
        .operators
        .iter()
        .map(|op| {
            let uid = match op.uid == op.name {
                true => String::new(),
                false => format!(" (uid `{}`)", op.uid),
            };
            let Some(old) = restored.operator(&op.uid) else {
                return format!("`{}`{uid}: new: starts with empty state", op.name);
            };
            let digest = component_digest(&op.component).ok();
            let code = match (&old.component, digest) {
                (Some(old), Some(new)) if *old == new => "the same component",
                (Some(_), Some(_)) => "a new component",
                _ => "a component the checkpoint does not name",
            };
            let states = old.states();
            let held = match states.is_empty() {
                true => String::new(),
                false => format!(" (states {})", states.join(", ")),
            };
            format!("`{}`{uid}: restores its state{held} into {code}", op.name)
        })
        .collect();
    notes.extend(
        restored
            .state_without_place(uids)
            .into_iter()
            .map(|(uid, bytes)| format!("`{uid}`: its state ({bytes} bytes) is dropped")),
    );
    notes
}
