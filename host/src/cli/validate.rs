//! `weir validate COMPONENT.wasm`

use std::path::Path;

use super::Failure;
use crate::bindings::PACKAGE;

pub(super) fn validate(component: &Path) -> Result<(), Failure> {
    if component.extension().is_some_and(|e| e == "toml") {
        return Err(Failure::input(anyhow::anyhow!(
            "{} looks like a job file: `weir validate` checks a component; `weir plan {0}` \
             checks a job file (and prints its stages)",
            component.display()
        )));
    }
    let engine = super::engine()?;
    engine.load(component).map_err(Failure::failed)?;
    outln!(
        "{}: implements weir:operator/operator ({PACKAGE})",
        component.display()
    );
    Ok(())
}
