//! `weir serve`: a long-running host that runs many jobs, submitted over HTTP.
//!
//! - [`api`]: the HTTP API (axum) and its bearer-token check.
//! - [`protocol`]: the request and response bodies, shared with the CLI client.
//! - [`job_checkpoints`]: a job's completed checkpoints as summaries and details, what the
//!   API answers and `weir checkpoints` prints for a store too.
//! - [`registry`]: the jobs the host runs, each isolated in its own folder, checkpoint store
//!   prefix, metrics and failures, and their versions (`weir upgrade`, with rollback).
//! - [`prometheus`]: `/metrics` in the Prometheus text format.
//! - [`rates`]: each job's records per second over the last five minutes and each task's
//!   backpressure, sampled by the host once a second.
//! - [`graph`]: a job's operator graph with its counts, rates, state and backpressure.
//! - [`console`]: the web console, a page compiled into the binary that calls the API.
//!
//! Every API call needs `Authorization: Bearer <token>`, the token given at start (a file or
//! `WEIR_TOKEN`); the comparison takes the same time whatever the token. The console's
//! assets hold no data and need none.

pub mod api;
pub(crate) mod console;
pub(crate) mod graph;
pub mod job_checkpoints;
pub(crate) mod prometheus;
pub mod protocol;
pub(crate) mod rates;
pub mod registry;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use crate::engine::Engine;
pub use registry::Registry;

/// How `weir serve` runs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// Jobs' files, outputs and checkpoints live under it.
    pub data_dir: PathBuf,
    pub token: String,
}

/// Serves until the process ends; calls `ready` with the bound address first.
pub async fn serve(
    options: ServeOptions,
    engine: Engine,
    ready: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&options.data_dir)
        .with_context(|| format!("cannot create {}", options.data_dir.display()))?;
    // Whole, since jobs' stores are named by URL: a relative folder names none.
    let data_dir = std::fs::canonicalize(&options.data_dir)
        .with_context(|| format!("cannot resolve {}", options.data_dir.display()))?;
    let registry = Arc::new(Registry::new(engine, data_dir));
    // Jobs running when the host last stopped go on from their latest checkpoint.
    registry.resume();
    tokio::spawn(rates::sample_every(registry.clone()));
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    let address = listener.local_addr()?;
    ready(address);
    let app = api::router(registry, options.token);
    axum::serve(listener, app)
        .await
        .context("the server stopped")
}
