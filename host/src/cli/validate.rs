//! `weir validate COMPONENT.wasm` and `weir validate JOB.toml`

use std::path::Path;

use super::Failure;
use crate::bindings::PACKAGE;
use crate::job::JobSpec;
use crate::job::pipeline::load_operator;

/// Checks a component against Weir's world, or a job file (its fields, then every operator's
/// component) before anything runs: what `weir run` would refuse at its start, refused here
/// with the same message and exit code (2, the input).
pub(super) fn validate(path: &Path) -> Result<(), Failure> {
    if path.extension().is_some_and(|e| e == "toml") {
        return validate_job(path);
    }
    let engine = super::engine()?;
    engine.load(path).map_err(Failure::failed)?;
    outln!(
        "{}: implements weir:operator/operator ({PACKAGE})",
        path.display()
    );
    Ok(())
}

fn validate_job(job: &Path) -> Result<(), Failure> {
    let spec = JobSpec::load(job).map_err(Failure::input)?;
    let engine = super::engine()?;
    for operator in &spec.operators {
        load_operator(operator, &engine).map_err(Failure::input)?;
    }
    outln!(
        "{}: job `{}` is valid; every operator's component implements \
         weir:operator/operator ({PACKAGE})",
        job.display(),
        spec.name
    );
    super::plan::plan_of(&spec);
    Ok(())
}
