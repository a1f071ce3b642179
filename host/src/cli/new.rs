//! `weir new --lang rust|python|js|c NAME`

use std::path::PathBuf;

use super::Failure;
use crate::build::{Language, create_skeleton};

#[derive(Debug, clap::Args)]
pub(super) struct NewArgs {
    /// The operator's language.
    #[arg(long, value_enum)]
    lang: Language,
    /// The folder to create (it must not exist); its name is the operator's name.
    name: PathBuf,
}

pub(super) fn new(args: NewArgs) -> Result<(), Failure> {
    let files = create_skeleton(&args.name, args.lang).map_err(|e| {
        if e.is_input_error() {
            Failure::input(e)
        } else {
            Failure::failed(e)
        }
    })?;
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    outln!(
        "created the {} operator {}: {}",
        args.lang,
        args.name.display(),
        files.join(", ")
    );
    outln!(
        "next: cd {} && weir build && weir run job.toml",
        args.name.display()
    );
    Ok(())
}
