//! The state the checkpoint benchmarks share: user profiles of ~100 bytes under keys
//! `user-00000042`.

use weir_host::partition::hash_key;
use weir_host::state::{KeyRef, KeyedStateBackend, StateId};

pub const VALUE_LEN: usize = 100;

pub fn key(i: u64) -> String {
    format!("user-{i:08}")
}

/// Writes profile `i`, its bytes marked with `round` so that a rewrite changes the value.
pub fn write(backend: &mut KeyedStateBackend, state: StateId, i: u64, round: u64) {
    let k = key(i);
    let mut value = [round as u8; VALUE_LEN];
    value[..8].copy_from_slice(&i.to_le_bytes());
    backend
        .value_set(
            state,
            KeyRef::new(k.as_bytes(), hash_key(k.as_bytes())),
            &value,
        )
        .expect("set");
}
