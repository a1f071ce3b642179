//! State restored from a checkpoint written before every state was CBOR (WIT 0.5.0 and
//! earlier, when the host stored a Python, JavaScript or C operator's JSON text as it was):
//! converted to CBOR once, as the operator declares it JSON again.

use super::encoding::{EncodingError, StateEncoding, converted, json_to_cbor};
use super::inspect::Contents;
use super::{KeyRef, KeyedStateBackend, StateError, StateId};
use crate::partition::hash_key;

/// Why a state could not be converted: its name, and the error.
#[derive(Debug, thiserror::Error)]
pub enum ReencodeError {
    #[error("state `{state}`: a value stored as JSON text does not convert to CBOR: {error}")]
    Value { state: String, error: EncodingError },
    #[error("state `{state}`: {error}")]
    State { state: String, error: StateError },
}

impl KeyedStateBackend {
    /// Converts every value, map key and list item of the states the operator declared as
    /// JSON from the JSON text an older host stored to CBOR; returns how many states it
    /// converted. The converted keys are written in the current epoch: the caller makes the
    /// next checkpoint a full one, so that no later restore reads the old text from the chain.
    pub fn reencode_json_text(&mut self) -> Result<usize, ReencodeError> {
        let states: Vec<(StateId, String)> = self
            .states
            .iter()
            .enumerate()
            .filter(|(_, s)| s.encoding == StateEncoding::Json && !s.name.starts_with('@'))
            .map(|(i, s)| (StateId(i as u32), s.name.clone()))
            .collect();
        for (id, state) in &states {
            let value_error = |error| ReencodeError::Value {
                state: state.clone(),
                error,
            };
            let state_error = |error| ReencodeError::State {
                state: state.clone(),
                error,
            };
            // Copied out first: the rewrite below changes the tables they live in.
            let mut rewrites = Vec::new();
            for entry in self.entries().into_iter().filter(|e| e.state == state) {
                let contents = match entry.contents {
                    Contents::Value(v) => {
                        Rewrite::Value(converted(v, json_to_cbor).map_err(value_error)?)
                    }
                    Contents::Map(entries) => Rewrite::Map(
                        entries
                            .into_iter()
                            .map(|(k, v)| {
                                Ok((converted(k, json_to_cbor)?, converted(v, json_to_cbor)?))
                            })
                            .collect::<Result<_, _>>()
                            .map_err(value_error)?,
                    ),
                    Contents::List(items) => Rewrite::List(
                        items
                            .iter()
                            .map(|i| converted(i, json_to_cbor))
                            .collect::<Result<_, _>>()
                            .map_err(value_error)?,
                    ),
                    Contents::Timers { .. } => continue,
                };
                rewrites.push((entry.key.to_vec(), contents));
            }
            for (key, rewrite) in rewrites {
                let key = KeyRef::new(&key, hash_key(&key));
                match rewrite {
                    Rewrite::Value(value) => {
                        self.value_set(*id, key, &value).map_err(state_error)?;
                    }
                    Rewrite::Map(entries) => {
                        self.map_clear(*id, key).map_err(state_error)?;
                        for (k, v) in entries {
                            self.map_put(*id, key, &k, &v).map_err(state_error)?;
                        }
                    }
                    Rewrite::List(items) => {
                        self.list_clear(*id, key).map_err(state_error)?;
                        for item in items {
                            self.list_append(*id, key, &item).map_err(state_error)?;
                        }
                    }
                }
            }
        }
        Ok(states.len())
    }
}

/// One key's contents in one state, converted.
enum Rewrite {
    Value(Vec<u8>),
    Map(Vec<(Vec<u8>, Vec<u8>)>),
    List(Vec<Vec<u8>>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubtaskIndex;
    use crate::partition::KeyGroups;
    use crate::state::StateKind;

    #[test]
    fn json_text_of_a_json_state_becomes_cbor_and_other_states_stay() {
        let groups = KeyGroups::default();
        let mut backend = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let count = backend
            .declare_as("count", StateKind::Value, StateEncoding::Json)
            .expect("declare");
        let seen = backend
            .declare_as("seen", StateKind::Map, StateEncoding::Json)
            .expect("declare");
        let log = backend
            .declare_as("log", StateKind::List, StateEncoding::Json)
            .expect("declare");
        let rust = backend.declare("rust", StateKind::Value).expect("declare");
        let key = KeyRef::new(b"k", hash_key(b"k"));
        backend.value_set(count, key, b"42").expect("set");
        backend.map_put(seen, key, b"\"a\"", b"[1,2]").expect("put");
        backend.list_append(log, key, b"{\"n\":1}").expect("append");
        backend.value_set(rust, key, &[0x18, 42]).expect("set");

        assert_eq!(backend.reencode_json_text().expect("reencode"), 3);

        let cbor = |json: &[u8]| converted(json, json_to_cbor).expect("JSON");
        assert_eq!(
            backend.value_get(count, key).expect("get"),
            Some(&[0x18, 42][..])
        );
        assert_eq!(
            backend.map_get(seen, key, &cbor(b"\"a\"")).expect("get"),
            Some(&cbor(b"[1,2]")[..])
        );
        let items = backend.list_items(log, key).expect("items");
        assert_eq!(&items[0][..], &cbor(b"{\"n\":1}")[..]);
        assert_eq!(
            backend.value_get(rust, key).expect("get"),
            Some(&[0x18, 42][..])
        );

        backend.value_set(count, key, b"not json").expect("set");
        let e = backend.reencode_json_text().expect_err("not JSON");
        assert!(
            e.to_string()
                .starts_with("state `count`: a value stored as JSON text"),
            "{e}"
        );
    }
}
