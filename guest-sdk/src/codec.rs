//! CBOR encoding of state values, map keys and list items (via `ciborium`).
//!
//! Every typed state handle stores its values with these functions, so the bytes the host
//! keeps for a state are CBOR. They are public so that an operator can also read or write
//! CBOR record values with the same encoding.

use std::cell::RefCell;

use serde::{Serialize, de::DeserializeOwned};

use crate::Result;

/// Size of the buffer ciborium decodes definite-length strings and byte strings into.
const SCRATCH_LEN: usize = 4096;

thread_local! {
    /// Reused decoding buffer: `ciborium::from_reader` would zero a fresh 4 KiB stack buffer
    /// for every value, and state decoding runs once per touched key.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Appends the CBOR encoding of `value` to `buf`. On error, `buf` may hold a partial encoding;
/// callers that care truncate it back.
pub fn encode_into<T: Serialize + ?Sized>(value: &T, buf: &mut Vec<u8>) -> Result<()> {
    ciborium::into_writer(value, buf)?;
    Ok(())
}

/// The CBOR encoding of `value`.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    encode_into(value, &mut buf)?;
    Ok(buf)
}

/// Decodes one CBOR value from `bytes`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut scratch) => {
            if scratch.len() < SCRATCH_LEN {
                scratch.resize(SCRATCH_LEN, 0);
            }
            Ok(ciborium::de::from_reader_with_buffer(bytes, &mut scratch)?)
        }
        // A `Deserialize` impl that itself calls `decode`: fall back to a fresh buffer.
        Err(_) => Ok(ciborium::from_reader(bytes)?),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Window {
        start: i64,
        words: Vec<String>,
        counts: BTreeMap<String, u64>,
    }

    #[test]
    fn round_trips_scalars_and_structs() -> Result<()> {
        assert_eq!(decode::<u64>(&encode(&7u64)?)?, 7);
        assert_eq!(decode::<String>(&encode("héllo")?)?, "héllo");
        let window = Window {
            start: -5,
            words: vec!["a".into(), "b".repeat(10_000)],
            counts: [("x".to_owned(), 3)].into(),
        };
        assert_eq!(decode::<Window>(&encode(&window)?)?, window);
        Ok(())
    }

    #[test]
    fn encodes_small_unsigned_integers_in_one_byte() -> Result<()> {
        assert_eq!(encode(&1u64)?, [0x01]);
        let mut buf = vec![0xaa];
        encode_into(&24u64, &mut buf)?;
        assert_eq!(buf, [0xaa, 0x18, 24]);
        Ok(())
    }

    #[test]
    fn reports_garbage_as_an_error() {
        let error = decode::<u64>(&[0xff, 0x00]).expect_err("not CBOR");
        assert!(error.message().starts_with("CBOR decoding"), "{error}");
        assert!(decode::<String>(&[]).is_err());
    }
}
