//! Keyed state: typed handles over the host's value, map and list states.
//!
//! Handles are declared in [`Operator::open`](crate::Operator::open) through the
//! [`OpenContext`](crate::OpenContext) and kept in the operator. Every call on a handle acts
//! on the state of the key of the record being processed; on a record without key, or outside
//! of `process`, it returns an error. Values, map keys and map values, and list items are
//! encoded as CBOR ([`codec`](crate::codec)). A value state may declare the version of its
//! values and a migration from older ones (`version.rs`).
//!
//! How calls become host crossings is described in `batch.rs`: in short, one read per value
//! state and one write for everything, per batch.

pub(crate) mod batch;
pub(crate) mod host;
mod list;
mod map;
pub(crate) mod op_log;
mod value;
mod version;

#[cfg(test)]
pub(crate) mod fake;

pub use list::ListState;
pub use map::MapState;
pub use value::ValueState;
pub use version::{Migration, OldValue, VERSION_TAG};
