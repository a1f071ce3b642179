//! `weir plan JOB.toml`: the job's stages and the topics between them.

use std::path::Path;

use super::Failure;
use crate::job::JobSpec;
use crate::job::stages::StagePlan;

pub(super) fn plan(job: &Path) -> Result<(), Failure> {
    let spec = JobSpec::load(job).map_err(Failure::input)?;
    let plan = StagePlan::of(&spec);
    print!("{}", plan.describe(&spec));
    if plan.rekeys() {
        println!(
            "  note: this Weir does not run repartition topics yet: it runs the job only on an \
             input topic of one partition, and refuses it on more (each partition would group \
             its own records)"
        );
    }
    Ok(())
}
