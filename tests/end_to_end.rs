//! The end-to-end tests, one module per area, in one test binary: built and linked once
//! (each binary links the whole host), run test by test by `cargo nextest`. The fuzz tests
//! are a binary of their own (`tests/fuzz.rs`), also run in release for long campaigns.
//!
//! Run one area with `cargo nextest run --test end_to_end -E 'test(/^serve::/)'`.

mod support;

mod bad_records;
mod build;
mod chains;
mod checkpoint_timing;
mod checkpoints;
mod checkpoints_cli;
mod cloud_checkpoints;
mod component_cache;
mod console;
mod damaged_checkpoints;
mod errors;
mod fresh_runs;
mod guest_failures;
mod installed;
mod kafka;
mod languages;
mod one_writer;
mod pipeline;
mod record_counts;
mod sandbox;
mod sdk_state;
mod serve;
mod state;
mod state_cli;
mod storage_conformance;
mod store_outage;
mod upgrades;
mod windows;
mod wordcount;
