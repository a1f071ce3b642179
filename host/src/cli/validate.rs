//! `weir validate COMPONENT.wasm`

use std::path::Path;

use super::Failure;
use crate::bindings::PACKAGE;

pub(super) fn validate(component: &Path) -> Result<(), Failure> {
    let engine = super::engine()?;
    engine.load(component).map_err(Failure::failed)?;
    println!(
        "{}: implements weir:operator/operator ({PACKAGE})",
        component.display()
    );
    Ok(())
}
