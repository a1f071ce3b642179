//! How `weir state` shows the bytes of keys and values.
//!
//! The host stores every state as CBOR (`host/src/state/encoding.rs`): the Rust SDK writes it,
//! and the host converts the JSON text of the Python, JavaScript and C SDKs. A value is shown
//! decoded when the whole of it is one CBOR item (or one JSON text), and as hex (`0x…`)
//! otherwise.
//!
//! A checkpoint of an older host (one whose metadata names no `state_encoding`) holds the JSON
//! text of Python, JavaScript and C operators as it was: there JSON is tried first. Many short
//! byte strings are CBOR by accident (any single byte below `0x18` is a CBOR integer, `37` is
//! CBOR -24), while a CBOR encoding is rarely JSON text: unsigned integers, arrays and maps
//! start with bytes that JSON never does, and text strings with a length byte that the rest
//! must match exactly. The one common overlap, the single bytes `30`–`37`, is the JSON digits
//! 0–7 (a counter in Python or JavaScript) or the CBOR integers -17 to -24; it shows as the
//! digit.

use std::fmt::Write;

use serde_json::{Map, Number, Value};

/// `0x` and the bytes in lower-case hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + 2 * bytes.len());
    out.push_str("0x");
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// A record key as text: its UTF-8 when it is valid and has no control characters (which
/// would break a table's lines), else its hex.
pub(super) fn key_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(char::is_control) => text.to_owned(),
        _ => hex(bytes),
    }
}

/// How a checkpoint stored its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stored {
    /// As CBOR, whatever the operator's language.
    Cbor,
    /// By an older host: a JSON guest's text as it was, a Rust guest's CBOR.
    JsonOrCbor,
}

/// The value `bytes` encode, if they are one CBOR item or one JSON text.
pub(super) fn decode(bytes: &[u8], stored: Stored) -> Option<Value> {
    let json = || serde_json::from_slice::<Value>(bytes).ok();
    match stored {
        Stored::Cbor => decode_cbor(bytes).or_else(json),
        Stored::JsonOrCbor => json().or_else(|| decode_cbor(bytes)),
    }
}

fn decode_cbor(bytes: &[u8]) -> Option<Value> {
    let mut rest = bytes;
    let item: ciborium::Value = ciborium::from_reader(&mut rest).ok()?;
    rest.is_empty().then(|| cbor_to_json(item))
}

/// The value `bytes` encode, or their hex as a string.
pub(super) fn shown(bytes: &[u8], stored: Stored) -> Value {
    decode(bytes, stored).unwrap_or_else(|| Value::String(hex(bytes)))
}

/// A map's entry key as the key of a JSON object: a decoded string as itself, another
/// decoded value as its JSON text, else hex.
pub(super) fn map_key(bytes: &[u8], stored: Stored) -> String {
    match decode(bytes, stored) {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => hex(bytes),
    }
}

/// A CBOR item as JSON: integers beyond 64 bits (bignums too) and non-finite floats as strings,
/// byte strings as hex, tags as the item they tag, map keys that are not text as their JSON.
fn cbor_to_json(item: ciborium::Value) -> Value {
    use ciborium::Value as C;
    match item {
        C::Integer(i) => {
            let i = i128::from(i);
            if let Ok(n) = i64::try_from(i) {
                Value::from(n)
            } else if let Ok(n) = u64::try_from(i) {
                Value::from(n)
            } else {
                Value::String(i.to_string())
            }
        }
        C::Float(f) => {
            Number::from_f64(f).map_or_else(|| Value::String(f.to_string()), Value::from)
        }
        C::Text(s) => Value::String(s),
        C::Bytes(b) => Value::String(hex(&b)),
        C::Bool(b) => Value::Bool(b),
        C::Null => Value::Null,
        // Bignums (RFC 8949 §3.4.3), as serde writes integers beyond 64 bits.
        C::Tag(tag @ (2 | 3), inner) => match &*inner {
            C::Bytes(b) if b.len() <= 16 => {
                let n = b.iter().fold(0u128, |n, &byte| (n << 8) | u128::from(byte));
                if tag == 2 {
                    u64::try_from(n).map_or_else(|_| Value::String(n.to_string()), Value::from)
                } else {
                    // -1 - n, whose magnitude n + 1 may be 2^128.
                    Value::String(n.checked_add(1).map_or_else(
                        || "-340282366920938463463374607431768211456".to_owned(),
                        |m| format!("-{m}"),
                    ))
                }
            }
            _ => cbor_to_json(*inner),
        },
        C::Tag(_, inner) => cbor_to_json(*inner),
        C::Array(items) => Value::Array(items.into_iter().map(cbor_to_json).collect()),
        C::Map(entries) => Value::Object(
            entries
                .into_iter()
                .map(|(k, v)| {
                    let key = match cbor_to_json(k) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, cbor_to_json(v))
                })
                .collect::<Map<_, _>>(),
        ),
        // `ciborium::Value` is non-exhaustive; nothing else exists today.
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode_new(bytes: &[u8]) -> Option<Value> {
        decode(bytes, Stored::Cbor)
    }

    fn decode_old(bytes: &[u8]) -> Option<Value> {
        decode(bytes, Stored::JsonOrCbor)
    }

    fn cbor(value: &impl serde::Serialize) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(value, &mut out).expect("encode");
        out
    }

    #[test]
    fn the_rust_sdks_cbor_decodes() {
        for n in [0u64, 1, 7, 23, 24, 48, 255, 256, 70_000, u64::MAX] {
            assert_eq!(decode_new(&cbor(&n)), Some(json!(n)), "{n}");
        }
        assert_eq!(decode_new(&cbor(&-1i64)), Some(json!(-1)));
        assert_eq!(decode_new(&cbor(&"héllo")), Some(json!("héllo")));
        assert_eq!(decode_new(&cbor(&2.5f64)), Some(json!(2.5)));
        assert_eq!(decode_new(&cbor(&(1, "a"))), Some(json!([1, "a"])));
        let mut map = std::collections::BTreeMap::new();
        map.insert("start", 5);
        assert_eq!(decode_new(&cbor(&map)), Some(json!({"start": 5})));
        let mut by_number = std::collections::BTreeMap::new();
        by_number.insert(3, true);
        assert_eq!(decode_new(&cbor(&by_number)), Some(json!({"3": true})));
        assert_eq!(
            decode_new(&cbor(&u128::MAX)),
            Some(json!(u128::MAX.to_string()))
        );
        assert_eq!(
            decode_new(&cbor(&i128::MIN)),
            Some(json!(i128::MIN.to_string()))
        );
    }

    #[test]
    fn an_older_hosts_json_text_decodes() {
        assert_eq!(
            decode_old(b"7"),
            Some(json!(7)),
            "a digit is JSON before CBOR"
        );
        assert_eq!(decode_old(b"42"), Some(json!(42)));
        assert_eq!(decode_old(b"\"word\""), Some(json!("word")));
        assert_eq!(
            decode_old(br#"{"page":"a","n":[1,2]}"#),
            Some(json!({"page": "a", "n": [1, 2]}))
        );
        // Exactly 28 bytes starting with `{`: CBOR too (a 27-byte text), JSON first.
        let object = br#"{"aaaaaaaaaaaaaaaaaaaaaa":1}"#;
        assert_eq!(object.len(), 28);
        assert_eq!(
            decode_old(object),
            Some(json!({"aaaaaaaaaaaaaaaaaaaaaa": 1}))
        );
        // Since every state is CBOR, the same byte is what it is there.
        assert_eq!(decode_new(b"7"), Some(json!(-24)));
    }

    #[test]
    fn anything_else_is_hex() {
        // Plain text: `h` is a CBOR text of 8 bytes, and 4 follow.
        assert_eq!(decode_new(b"hello"), None);
        assert_eq!(shown(b"hello", Stored::Cbor), json!("0x68656c6c6f"));
        // One CBOR item and more bytes after it: not one item.
        assert_eq!(decode_new(&[0x01, 0x02]), None);
        // Eight-byte little-endian 5: CBOR 5 then seven zero bytes.
        assert_eq!(decode_new(&5u64.to_le_bytes()), None);
        assert_eq!(shown(&[], Stored::Cbor), json!("0x"));
        assert_eq!(shown(&[0xff], Stored::Cbor), json!("0xff"));
    }

    #[test]
    fn keys_and_map_keys() {
        assert_eq!(key_text(b"word"), "word");
        assert_eq!(key_text(b"a\tb"), "0x610962");
        assert_eq!(key_text(&[0xc3, 0x28]), "0xc328");
        assert_eq!(map_key(&cbor(&"page"), Stored::Cbor), "page");
        assert_eq!(map_key(b"\"page\"", Stored::JsonOrCbor), "page");
        assert_eq!(map_key(&cbor(&17u32), Stored::Cbor), "17");
        assert_eq!(map_key(&[0xff, 0xfe], Stored::Cbor), "0xfffe");
    }
}
