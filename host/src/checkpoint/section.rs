//! Decoding a key group's section ([`GroupIncrement`]) straight from its CBOR, for restores.
//!
//! Sections are written with serde and ciborium ([`super::format::encode`]): maps of named
//! fields, `Change` as a one-entry map from its variant's name, `StateKind` as its name,
//! keys and values as byte strings, a removal as `null`. Read back through serde, a section
//! cost about 600 ns of CPU per key (field names matched through visitors, every byte
//! string through a scratch buffer), most of a restore. This reader knows the shape and
//! walks the bytes once: each key and value is copied once, from the section into the
//! state. It accepts what ciborium writes (definite lengths, fields in any order) and
//! refuses anything else with an error, never a panic: sections come from storage.

use crate::partition::KeyGroup;
use crate::state::{Change, GroupIncrement, StateBytes, StateChanges, StateKind};

/// Decodes one section (its checksum already verified).
pub(crate) fn decode(bytes: &[u8]) -> Result<GroupIncrement, String> {
    let mut r = Reader { bytes, at: 0 };
    let group = r.group_increment()?;
    if r.at != bytes.len() {
        return Err(format!("{} bytes after the section", bytes.len() - r.at));
    }
    Ok(group)
}

/// A cursor over CBOR bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// CBOR's major types this format uses.
const UNSIGNED: u8 = 0;
const BYTES: u8 = 2;
const TEXT: u8 = 3;
const ARRAY: u8 = 4;
const MAP: u8 = 5;
/// The simple values `false`, `true` and `null`.
const FALSE: u8 = 0xf4;
const TRUE: u8 = 0xf5;
const NULL: u8 = 0xf6;

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.bytes.get(self.at).ok_or("section ends early")?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len())
            .ok_or("section ends early")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// A data item's head of major type `major`: its argument.
    fn head(&mut self, major: u8, what: &str) -> Result<u64, String> {
        let initial = self.byte()?;
        if initial >> 5 != major {
            return Err(format!("expected {what}, found CBOR byte {initial:#04x}"));
        }
        Ok(match initial & 0x1f {
            n @ 0..=23 => u64::from(n),
            24 => u64::from(self.byte()?),
            25 => u64::from(u16::from_be_bytes(self.fixed()?)),
            26 => u64::from(u32::from_be_bytes(self.fixed()?)),
            27 => u64::from_be_bytes(self.fixed()?),
            _ => return Err(format!("{what} of indefinite or reserved length")),
        })
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A length, bounded by the bytes left (every element takes at least one).
    fn len(&mut self, major: u8, what: &str) -> Result<usize, String> {
        let len = self.head(major, what)?;
        usize::try_from(len)
            .ok()
            .filter(|&len| len <= self.bytes.len() - self.at)
            .ok_or_else(|| format!("{what} of {len} elements in a shorter section"))
    }

    fn byte_string(&mut self) -> Result<StateBytes, String> {
        let len = self.head(BYTES, "a byte string")?;
        let len = usize::try_from(len).map_err(|_| "a byte string too long")?;
        Ok(StateBytes::copy_from_slice(self.take(len)?))
    }

    fn optional_byte_string(&mut self) -> Result<Option<StateBytes>, String> {
        if self.bytes.get(self.at) == Some(&NULL) {
            self.at += 1;
            return Ok(None);
        }
        self.byte_string().map(Some)
    }

    fn text(&mut self) -> Result<&'a str, String> {
        std::str::from_utf8(self.name()?).map_err(|e| e.to_string())
    }

    /// A text string's bytes, unchecked: field and variant names, compared with the
    /// expected ones (which are UTF-8), so that nothing else is accepted.
    fn name(&mut self) -> Result<&'a [u8], String> {
        let len = self.head(TEXT, "a text string")?;
        let len = usize::try_from(len).map_err(|_| "a text string too long")?;
        self.take(len)
    }

    fn bool(&mut self) -> Result<bool, String> {
        match self.byte()? {
            FALSE => Ok(false),
            TRUE => Ok(true),
            other => Err(format!("expected a bool, found CBOR byte {other:#04x}")),
        }
    }

    /// A map of named fields: calls `field` with each name, which reads the value.
    fn fields(
        &mut self,
        what: &str,
        mut field: impl FnMut(&mut Self, &[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let count = self.len(MAP, what)?;
        for _ in 0..count {
            let name = self.name()?;
            field(self, name)?;
        }
        Ok(())
    }

    /// An array, each element read by `element`.
    fn array<T>(
        &mut self,
        what: &str,
        mut element: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let count = self.len(ARRAY, what)?;
        let mut all = Vec::with_capacity(count);
        for _ in 0..count {
            all.push(element(self)?);
        }
        Ok(all)
    }

    fn group_increment(&mut self) -> Result<GroupIncrement, String> {
        let (mut group, mut states) = (None, None);
        self.fields("a key group's section", |r, name| {
            match name {
                b"group" => {
                    let n = r.head(UNSIGNED, "a key group")?;
                    group = Some(KeyGroup(
                        u32::try_from(n).map_err(|_| format!("key group {n}"))?,
                    ));
                }
                b"states" => states = Some(r.array("the states", Self::state_changes)?),
                other => return Err(unknown("field", other, "a section")),
            }
            Ok(())
        })?;
        Ok(GroupIncrement {
            group: group.ok_or("a section without its key group")?,
            states: states.ok_or("a section without its states")?,
        })
    }

    fn state_changes(&mut self) -> Result<StateChanges, String> {
        let (mut name, mut kind, mut changes) = (None, None, None);
        self.fields("a state's changes", |r, field| {
            match field {
                b"name" => name = Some(r.text()?.to_owned()),
                b"kind" => {
                    kind = Some(match r.name()? {
                        b"Value" => StateKind::Value,
                        b"Map" => StateKind::Map,
                        b"List" => StateKind::List,
                        other => return Err(unknown("state kind", other, "a state")),
                    })
                }
                b"changes" => changes = Some(r.array("the changes", Self::change)?),
                other => return Err(unknown("field", other, "a state's changes")),
            }
            Ok(())
        })?;
        Ok(StateChanges {
            name: name.ok_or("a state without its name")?,
            kind: kind.ok_or("a state without its kind")?,
            changes: changes.ok_or("a state without its changes")?,
        })
    }

    fn change(&mut self) -> Result<Change, String> {
        if self.len(MAP, "a change")? != 1 {
            return Err("a change is a map of one entry".into());
        }
        let variant = self.name()?;
        let (mut key, mut value, mut cleared) = (None, None, false);
        let (mut entries, mut appended) = (Vec::new(), Vec::new());
        let entry = |r: &mut Self| {
            if r.len(ARRAY, "a map entry")? != 2 {
                return Err("a map entry is a pair".to_owned());
            }
            Ok((r.byte_string()?, r.optional_byte_string()?))
        };
        self.fields("a change", |r, field| {
            match (variant, field) {
                (_, b"key") => key = Some(r.byte_string()?),
                (b"Value", b"value") => value = r.optional_byte_string()?,
                (b"Map" | b"List", b"cleared") => cleared = r.bool()?,
                (b"Map", b"entries") => entries = r.array("a map's entries", entry)?,
                (b"List", b"appended") => {
                    appended = r.array("a list's items", Self::byte_string)?
                }
                (_, field) => return Err(unknown("field", field, "a change")),
            }
            Ok(())
        })?;
        let key = key.ok_or("a change without its key")?;
        Ok(match variant {
            b"Value" => Change::Value { key, value },
            b"Map" => Change::Map {
                key,
                cleared,
                entries,
            },
            b"List" => Change::List {
                key,
                cleared,
                appended,
            },
            other => return Err(unknown("change", other, "a state")),
        })
    }
}

/// The error for a name this format does not have.
fn unknown(what: &str, name: &[u8], inside: &str) -> String {
    format!(
        "unknown {what} `{}` in {inside}",
        String::from_utf8_lossy(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GroupIncrement {
        let b = |s: &[u8]| StateBytes::copy_from_slice(s);
        GroupIncrement {
            group: KeyGroup(70_000),
            states: vec![
                StateChanges {
                    name: "v".into(),
                    kind: StateKind::Value,
                    changes: vec![
                        Change::Value {
                            key: b(b"k"),
                            value: Some(b(&[9; 300])),
                        },
                        Change::Value {
                            key: b(&[1; 40]),
                            value: None,
                        },
                    ],
                },
                StateChanges {
                    name: "m".into(),
                    kind: StateKind::Map,
                    changes: vec![Change::Map {
                        key: b(b"k"),
                        cleared: true,
                        entries: vec![(b(b"a"), Some(b(b"1"))), (b(b"b"), None)],
                    }],
                },
                StateChanges {
                    name: "l".into(),
                    kind: StateKind::List,
                    changes: vec![Change::List {
                        key: b(b""),
                        cleared: false,
                        appended: vec![b(b"x"), b(&[2; 70_000])],
                    }],
                },
            ],
        }
    }

    fn serde_bytes(group: &GroupIncrement) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(group, &mut out).expect("encode");
        out
    }

    #[test]
    fn reads_what_serde_writes() {
        let group = sample();
        assert_eq!(decode(&serde_bytes(&group)), Ok(group));
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_an_error() {
        let bytes = serde_bytes(&sample());
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "truncated to {len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }

    #[test]
    fn a_changed_byte_is_an_error_or_another_section_never_a_panic() {
        let bytes = serde_bytes(&sample());
        for at in 0..bytes.len().min(400) {
            for flip in [0x01, 0x20, 0x80, 0xff] {
                let mut changed = bytes.clone();
                changed[at] ^= flip;
                let _ = decode(&changed);
            }
        }
    }
}
