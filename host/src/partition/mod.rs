//! How keys map to key groups and key groups to subtasks (DESIGN.md §3).
//!
//! A job has a fixed number of key groups (its max parallelism). A key hashes to one key group
//! for the life of the job; a subtask owns a contiguous range of key groups. Rescaling moves
//! ranges between subtasks and never rehashes a key.

mod key_group;
mod key_hash;

pub use key_group::{KeyGroup, KeyGroupRange, KeyGroups, MAX_KEY_GROUPS};
pub use key_hash::{KeyHash, hash_key};
