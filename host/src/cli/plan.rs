//! `weir plan JOB.toml`: the job's stages and the topics between them.

use std::path::Path;

use super::Failure;
use crate::job::JobSpec;
use crate::job::stages::StagePlan;

pub(super) fn plan(job: &Path) -> Result<(), Failure> {
    let spec = JobSpec::load(job).map_err(Failure::input)?;
    plan_of(&spec);
    Ok(())
}

/// Prints the stages of a job already loaded (also `weir validate JOB.toml`'s last part).
pub(super) fn plan_of(spec: &JobSpec) {
    let plan = StagePlan::of(spec);
    out!("{}", plan.describe(spec));
    if plan.rekeys() {
        outln!(
            "  each stage k > 0 runs as a consumer group of its own (`<group>.stage-<k>`), \
             with checkpoints under `<job>.stage-<k>` (stage 0 is the job's own); Weir creates \
             a missing topic, and runs the job whole when every stage would have one partition"
        );
    }
}
