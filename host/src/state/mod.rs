//! The in-memory keyed state backend (DESIGN.md §4).
//!
//! State is organised by *state* (declared by name by the operator) and then by *key group*:
//! every (state, key group) pair has its own hash table, so a snapshot can be laid out by key
//! group and a rescale can hand whole groups to another subtask.
//!
//! Keys and values are [`StateBytes`]: immutable; short ones inline in their entry (no
//! allocation, no pointer to chase), long ones shared by reference, so that a snapshot pins
//! the current values of the dirty keys without copying their bytes.
//!
//! Dirty tracking records *keys*, not values: every entry remembers the checkpoint in which it
//! was last written (`written_in`), and a write to an entry whose `written_in` is older than the
//! current epoch pushes the key onto its group's dirty list once (a key new since the last
//! snapshot is dirty by its place at the end of the table instead). Ten writes to one key
//! before a checkpoint leave one dirty key (squashing). A removal keeps the entry as a tombstone
//! (`None`) until a snapshot has recorded it; clearing a key's map or list is one `cleared`
//! flag, not one tombstone per element. A map entry that no snapshot has taken needs no
//! tombstone: removing it removes it ([`map::MapValue::persisted`]).
//!
//! Layout:
//! - [`backend`]: [`KeyedStateBackend`], the per-subtask registry of states and the only entry
//!   point; it refuses keys outside the subtask's key groups.
//! - [`table`]: [`table::KeyedTable`], one (state, key group) hash table with its dirty list;
//!   [`chunked`]: the vector its entries live in, in chunks (at most one chunk of slack);
//!   [`position_index`]: its hash index, a tag and a position in one `u32` a bucket.
//! - [`value`], [`map`], [`list`]: what an entry holds for each kind of state;
//!   [`map_entries`]: a map's entries, small ones in a sorted vector.
//! - [`bytes`]: [`StateBytes`], how keys and values are held.
//! - [`encoding`]: the one encoding every state is stored in (CBOR) and its conversion from
//!   and to the JSON text that Python, JavaScript and C guests speak.
//! - [`timers`]: timers as keyed state (a reserved value state per key) and the index that
//!   fires them by time.
//! - [`undo`]: [`undo::UndoLog`], the changes of one call, to take them back.
//! - [`snapshot`]: [`Increment`], what a snapshot pins, and [`KeyedStateBackend::snapshot`] /
//!   [`KeyedStateBackend::restore`] in the backend; [`take`](mod@take): freezing the dirty
//!   keys and pinning them; [`frozen`]: a table's frozen keys, pinned beside processing or by
//!   the first write to one (copy-on-write).
//! - [`merge`](mod@merge): [`Increment::merge`], two consecutive increments as one (an
//!   increment whose upload failed rides in the next one).
//! - [`reencode`](mod@reencode): state an older host stored as JSON text, converted to CBOR.
//! - [`inspect`]: [`KeyedStateBackend::entries`], every live entry read back out, for
//!   `weir state get|scan`.

mod aging;
pub(crate) mod backend;
// The one module of the state backend with unsafe code: a 12-byte byte string with a thin
// shared pointer, which no crate offers (its module says why the size matters).
#[allow(unsafe_code)]
pub(crate) mod bytes;
mod chunked;
pub mod encoding;
mod frozen;
pub(crate) mod inspect;
pub(crate) mod list;
pub(crate) mod map;
pub(crate) mod map_entries;
mod merge;
mod position_index;
mod reencode;
mod restore;
pub(crate) mod snapshot;
pub(crate) mod table;
mod take;
pub(crate) mod timers;
pub(crate) mod undo;
pub(crate) mod value;

#[cfg(test)]
mod oracle_tests;

use std::fmt;

pub use backend::{EntryHint, KeyRef, KeyedStateBackend, StateStats};
pub use bytes::StateBytes;
pub use encoding::StateEncoding;
pub use reencode::ReencodeError;
pub use restore::Restoring;
pub use snapshot::{Change, GroupIncrement, Increment, StateChanges};
pub use take::PIN_STEP;
pub use timers::{FiredTimer, TIMERS_STATE, TimeDomain, Timer};

use crate::partition::{KeyGroup, KeyGroupRange};

/// Identifies a declared state inside one subtask's backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateId(pub u32);

/// The shape of a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum StateKind {
    Value,
    Map,
    List,
}

impl fmt::Display for StateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StateKind::Value => "value",
            StateKind::Map => "map",
            StateKind::List => "list",
        })
    }
}

/// Why a state access was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    #[error(
        "key group {group} is outside this subtask's key groups {range}: a subtask may only touch the keys routed to it"
    )]
    KeyGroupOutOfRange {
        group: KeyGroup,
        range: KeyGroupRange,
    },
    #[error("no state with id {0} was declared")]
    UnknownState(u32),
    #[error("state `{name}` is a {actual} state, not a {expected} state")]
    WrongKind {
        name: String,
        expected: StateKind,
        actual: StateKind,
    },
    #[error(
        "state `{name}` is already declared as a {existing} state; it cannot also be a {requested} state"
    )]
    KindConflict {
        name: String,
        existing: StateKind,
        requested: StateKind,
    },
    #[error("states can only be declared while the operator opens")]
    DeclareAfterOpen,
    #[error("cannot restore into state with writes not yet snapshotted")]
    RestoreOverWrites,
    #[error("invalid state name {0:?}: use 1 to 128 characters")]
    InvalidName(String),
    #[error("invalid state name {0:?}: names starting with `@` are the host's own")]
    ReservedName(String),
    #[error("the timers of a key are unreadable: {0}")]
    BadTimers(String),
}
