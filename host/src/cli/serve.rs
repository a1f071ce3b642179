//! `weir serve [--listen ADDR] [--data-dir DIR] [--token-file FILE]`

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

use super::Failure;
use crate::serve::{ServeOptions, serve as run_server};

#[derive(Debug, clap::Args)]
pub(super) struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Folder for jobs' files and checkpoints.
    #[arg(long, default_value = ".weir-host")]
    data_dir: PathBuf,
    /// File holding the bearer token every call must carry; else `WEIR_TOKEN`.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

pub(super) fn serve(args: ServeArgs) -> Result<(), Failure> {
    let token = match &args.token_file {
        Some(file) => std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the token file {}", file.display()))
            .map_err(Failure::input)?
            .trim()
            .to_owned(),
        None => std::env::var("WEIR_TOKEN").map_err(|_| {
            Failure::input(anyhow::anyhow!(
                "no token: give --token-file FILE or set WEIR_TOKEN; every API call must carry it"
            ))
        })?,
    };
    if token.len() < 16 {
        return Err(Failure::input(anyhow::anyhow!(
            "the token is too short: use at least 16 characters"
        )));
    }
    let engine = super::engine()?;
    let runtime = super::runtime(true)?;
    let options = ServeOptions {
        listen: args.listen,
        data_dir: args.data_dir,
        token,
    };
    runtime
        .block_on(run_server(options, engine, |address| {
            // The first line of standard output, for scripts that started the host on port 0.
            outln!("listening on http://{address}");
            eprintln!("the web console: http://{address}/ (sign in with the token)");
        }))
        .map_err(Failure::failed)
}
