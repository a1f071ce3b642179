//! State that evolves: a value state declares the version of its values, and reads older ones
//! through the operator's migration ([`OpenContext::versioned_value_state`]).
//!
//! A value of version 1 is stored as its plain CBOR, as every value state stored it before
//! versions existed, so declaring version 1 (or no version) changes nothing. A value of
//! version 2 or later is stored as the CBOR tag [`VERSION_TAG`] around the array
//! `[version, value]`. A read looks at the first bytes only: a value of the version the code
//! declares decodes as today; an older one goes through the migration once, as it is read,
//! and is written back in the new version at the end of the batch; a newer one (the state of
//! a later version of the operator, after a rollback) is an error, since reading it as the
//! old type would lose what the newer code added.
//!
//! Adding a field that has a default needs no new version: `#[serde(default)]` reads the old
//! values as they are.
//!
//! [`OpenContext::versioned_value_state`]: crate::OpenContext::versioned_value_state

use serde::de::DeserializeOwned;

use crate::{Error, Result, codec};

/// The CBOR tag around a versioned value: "WEIR" in ASCII, in the range CBOR leaves
/// unassigned for applications.
pub const VERSION_TAG: u32 = 0x5745_4952;

/// The tag's head: major type 6 with a four-byte argument, then the tag; then the head of a
/// two-element array.
const HEAD: [u8; 6] = {
    let tag = VERSION_TAG.to_be_bytes();
    [0xda, tag[0], tag[1], tag[2], tag[3], 0x82]
};

/// A stored value of an older version, handed to a migration to decode as the type that
/// version had.
#[derive(Clone, Copy, Debug)]
pub struct OldValue<'a> {
    bytes: &'a [u8],
}

impl OldValue<'_> {
    /// Decodes the value as `U`: the type the state had at that version.
    pub fn decode<U: DeserializeOwned>(&self) -> Result<U> {
        codec::decode(self.bytes)
    }

    /// The value's CBOR bytes.
    pub fn bytes(&self) -> &[u8] {
        self.bytes
    }
}

/// Reads an old value (its version and its bytes) into the type of today's version.
pub type Migration<T> = fn(u32, OldValue<'_>) -> Result<T>;

/// Splits a stored value into its version and its value's bytes.
#[inline]
pub(crate) fn split(bytes: &[u8]) -> Result<(u32, &[u8])> {
    match bytes.strip_prefix(&HEAD) {
        // Version 1, the commonest, has no head.
        None => Ok((1, bytes)),
        Some(rest) => split_versioned(rest),
    }
}

/// [`split`] of a value with a head: `rest` follows the head's tag.
fn split_versioned(rest: &[u8]) -> Result<(u32, &[u8])> {
    let malformed = || Error::new("a versioned state value whose version is not a number");
    let (&first, rest) = rest.split_first().ok_or_else(malformed)?;
    // An unsigned integer: the low five bits, or the next 1, 2 or 4 bytes.
    let width = match first {
        0x00..=0x17 => return Ok((u32::from(first), rest)),
        0x18 => 1,
        0x19 => 2,
        0x1a => 4,
        _ => return Err(malformed()),
    };
    let (number, rest) = rest.split_at_checked(width).ok_or_else(malformed)?;
    let version = number
        .iter()
        .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
    Ok((version, rest))
}

/// Appends the head of a value of `version` (nothing for version 1) to `buf`; the value's
/// CBOR follows it.
pub(crate) fn write_head(version: u32, buf: &mut Vec<u8>) {
    if version <= 1 {
        return;
    }
    buf.extend_from_slice(&HEAD);
    match version {
        0..=0x17 => buf.push(version as u8),
        0x18..=0xff => buf.extend_from_slice(&[0x18, version as u8]),
        0x100..=0xffff => {
            buf.push(0x19);
            buf.extend_from_slice(&(version as u16).to_be_bytes());
        }
        _ => {
            buf.push(0x1a);
            buf.extend_from_slice(&version.to_be_bytes());
        }
    }
}

/// How a value state reads what it stored: the version its code writes, and the migration
/// from older ones.
pub(crate) struct Versioning<T> {
    pub(crate) version: u32,
    pub(crate) migrate: Option<Migration<T>>,
}

impl<T> Clone for Versioning<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Versioning<T> {}

impl<T> Versioning<T> {
    /// The versioning of the state `name` (of `kind`, for errors): versions start at 1.
    pub(crate) fn new(
        kind: &str,
        name: &str,
        version: u32,
        migrate: Option<Migration<T>>,
    ) -> Result<Self> {
        if version == 0 {
            return Err(Error::new(format!(
                "{kind} state `{name}`: versions start at 1"
            )));
        }
        Ok(Self { version, migrate })
    }
}

impl<T: DeserializeOwned> Versioning<T> {
    /// Decodes a stored value; `true` with it when it was migrated (and so must be written
    /// back in this version).
    pub(crate) fn decode(&self, stored: &[u8]) -> Result<(T, bool)> {
        let (version, bytes) = split(stored)?;
        if version == self.version {
            return Ok((codec::decode(bytes)?, false));
        }
        if version > self.version {
            return Err(Error::new(format!(
                "the stored value is of version {version}, newer than this operator's version \
                 {} of the state: it was written by a later version of the operator; run that \
                 version, or restore a checkpoint taken before it",
                self.version
            )));
        }
        let migrate = self.migrate.ok_or_else(|| {
            Error::new(format!(
                "the stored value is of version {version} and the state, of version {}, \
                 declares no migration",
                self.version
            ))
        })?;
        let value = migrate(version, OldValue { bytes })
            .map_err(|e| e.context(format_args!("migrating a value of version {version}")))?;
        Ok((value, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_round_trips_through_the_head_and_plain_values_are_version_1() -> Result<()> {
        for version in [2, 23, 24, 255, 256, 65_535, 65_536, u32::MAX] {
            let mut buf = Vec::new();
            write_head(version, &mut buf);
            codec::encode_into(&"value", &mut buf)?;
            let (read, rest) = split(&buf)?;
            assert_eq!(read, version);
            assert_eq!(codec::decode::<String>(rest)?, "value");
            // It is well-formed CBOR: a tag around [version, value].
            let any: ciborium::Value = codec::decode(&buf)?;
            assert!(matches!(any, ciborium::Value::Tag(t, _) if t == u64::from(VERSION_TAG)));
        }
        let plain = codec::encode(&7u64)?;
        assert_eq!(split(&plain)?, (1, plain.as_slice()));
        let mut head_only = HEAD.to_vec();
        assert!(split(&head_only).is_err());
        head_only.push(0x20);
        assert!(split(&head_only).is_err());
        Ok(())
    }
}
