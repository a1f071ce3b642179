//! The increment artifact: one subtask's [`Increment`] as stored.
//!
//! ```text
//! magic     8 bytes  "WEIRINC\0"
//! version   u16 LE   1
//! sections           one per key group with changes: the CBOR of its GroupIncrement
//! index              CBOR of ArtifactIndex: checkpoint, and per group its section's
//!                    offset, length and checksum
//! footer   28 bytes  index offset u64 LE, index length u32 LE, index checksum u64 LE,
//!                    magic again
//! ```
//!
//! Checksums are XXH3-64 of the bytes they cover. A reader restoring some key groups fetches
//! the footer (a ranged read of the last 28 bytes), the index, then only the sections of its
//! groups, and verifies each before decoding it.

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

use crate::ids::CheckpointId;
use crate::partition::{KeyGroup, KeyGroupRange};
use crate::state::{GroupIncrement, Increment};

const MAGIC: &[u8; 8] = b"WEIRINC\0";
/// The format version this code writes and reads.
pub const VERSION: u16 = 1;
const HEADER_LEN: usize = 10;
/// Length of the footer at the end of every artifact.
pub const FOOTER_LEN: usize = 28;

/// Why an artifact could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    #[error("not an increment artifact (bad magic bytes)")]
    BadMagic,
    #[error("increment artifact version {0} is not supported (this Weir reads version {VERSION})")]
    UnsupportedVersion(u16),
    #[error("increment artifact is truncated: {0}")]
    Truncated(&'static str),
    #[error("checksum mismatch in the {0}: the artifact is corrupt")]
    Checksum(String),
    #[error("cannot decode the {what}: {message}")]
    Decode { what: String, message: String },
    #[error("cannot encode the increment: {0}")]
    Encode(String),
}

/// Where a key group's section is, and its checksum.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEntry {
    pub group: KeyGroup,
    pub offset: u64,
    pub len: u64,
    pub checksum: u64,
}

/// The artifact's table of contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactIndex {
    pub checkpoint: CheckpointId,
    /// In ascending key-group order.
    pub groups: Vec<GroupEntry>,
}

impl ArtifactIndex {
    /// The sections a subtask owning `range` needs.
    pub fn groups_in(&self, range: KeyGroupRange) -> impl Iterator<Item = &GroupEntry> {
        self.groups.iter().filter(move |g| range.contains(g.group))
    }
}

/// Where the index is, read from the footer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    pub index_offset: u64,
    pub index_len: u32,
    pub index_checksum: u64,
}

/// Encodes an increment as an artifact.
pub fn encode(increment: &Increment) -> Result<Vec<u8>, FormatError> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    let mut groups = Vec::with_capacity(increment.groups.len());
    for group in &increment.groups {
        let offset = out.len();
        ciborium::into_writer(group, &mut out).map_err(|e| FormatError::Encode(e.to_string()))?;
        groups.push(GroupEntry {
            group: group.group,
            offset: offset as u64,
            len: (out.len() - offset) as u64,
            checksum: xxh3_64(&out[offset..]),
        });
    }
    let index = ArtifactIndex {
        checkpoint: increment.checkpoint,
        groups,
    };
    let index_offset = out.len();
    ciborium::into_writer(&index, &mut out).map_err(|e| FormatError::Encode(e.to_string()))?;
    let index_len = out.len() - index_offset;
    let index_checksum = xxh3_64(&out[index_offset..]);
    out.extend_from_slice(&(index_offset as u64).to_le_bytes());
    out.extend_from_slice(&(index_len as u32).to_le_bytes());
    out.extend_from_slice(&index_checksum.to_le_bytes());
    out.extend_from_slice(MAGIC);
    Ok(out)
}

/// Reads the footer from the last [`FOOTER_LEN`] bytes of an artifact.
pub fn read_footer(tail: &[u8]) -> Result<Footer, FormatError> {
    if tail.len() < FOOTER_LEN {
        return Err(FormatError::Truncated("no complete footer"));
    }
    let f = &tail[tail.len() - FOOTER_LEN..];
    if &f[20..28] != MAGIC {
        return Err(FormatError::BadMagic);
    }
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&f[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let mut len = [0u8; 4];
    len.copy_from_slice(&f[8..12]);
    Ok(Footer {
        index_offset: u64_at(0),
        index_len: u32::from_le_bytes(len),
        index_checksum: u64_at(12),
    })
}

/// Checks the header at the start of an artifact.
pub fn check_header(head: &[u8]) -> Result<(), FormatError> {
    if head.len() < HEADER_LEN {
        return Err(FormatError::Truncated("no complete header"));
    }
    if &head[..8] != MAGIC {
        return Err(FormatError::BadMagic);
    }
    match u16::from_le_bytes([head[8], head[9]]) {
        VERSION => Ok(()),
        other => Err(FormatError::UnsupportedVersion(other)),
    }
}

/// Decodes the index, given its bytes as located by the footer.
pub fn decode_index(bytes: &[u8], footer: &Footer) -> Result<ArtifactIndex, FormatError> {
    if bytes.len() != footer.index_len as usize {
        return Err(FormatError::Truncated("index shorter than the footer says"));
    }
    if xxh3_64(bytes) != footer.index_checksum {
        return Err(FormatError::Checksum("index".into()));
    }
    let index: ArtifactIndex = from_cbor(bytes).map_err(|e| FormatError::Decode {
        what: "index".into(),
        message: e,
    })?;
    check_layout(&index, footer)?;
    Ok(index)
}

/// Checks the index against the layout [`encode`] writes: sections between the header and
/// the index, in ascending key-group order, one after the other. A reader of a range of key
/// groups reads their sections as one run of bytes, so it relies on that order; checking it
/// here makes every reader (a restore, `verify`) refuse the same artifacts.
fn check_layout(index: &ArtifactIndex, footer: &Footer) -> Result<(), FormatError> {
    let bad = |message: String| FormatError::Decode {
        what: "index".into(),
        message,
    };
    let mut next = HEADER_LEN as u64;
    let mut previous: Option<KeyGroup> = None;
    for entry in &index.groups {
        if previous.is_some_and(|p| entry.group <= p) {
            return Err(bad(format!(
                "key group {} is listed after key group {}",
                entry.group,
                previous.map_or(0, |p| p.0)
            )));
        }
        let end = entry.offset.checked_add(entry.len);
        match end {
            Some(end) if entry.offset >= next && end <= footer.index_offset => next = end,
            _ => {
                return Err(bad(format!(
                    "the section of key group {} (bytes {} + {}) is not between the previous \
                     section (which ends at byte {next}) and the index (at byte {})",
                    entry.group, entry.offset, entry.len, footer.index_offset
                )));
            }
        }
        previous = Some(entry.group);
    }
    Ok(())
}

/// Decodes CBOR written by [`encode`].
///
/// `ciborium::from_reader` reads a byte or text string into a scratch buffer of 4 KiB and
/// refuses a longer one ("expected bytes"), so a key or value over 4 KiB would make its
/// artifact unreadable. No string can be longer than the bytes that hold it: a scratch buffer
/// of their length reads every string, and costs no more memory than the input itself.
fn from_cbor<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let mut scratch = vec![0u8; bytes.len()];
    ciborium::de::from_reader_with_buffer(bytes, &mut scratch).map_err(|e| e.to_string())
}

/// Decodes one key group's section, given its bytes as located by the index.
pub fn decode_group(bytes: &[u8], entry: &GroupEntry) -> Result<GroupIncrement, FormatError> {
    let what = || format!("section of key group {}", entry.group);
    if bytes.len() as u64 != entry.len {
        return Err(FormatError::Truncated(
            "section shorter than the index says",
        ));
    }
    if xxh3_64(bytes) != entry.checksum {
        return Err(FormatError::Checksum(what()));
    }
    let group = super::section::decode(bytes).map_err(|message| FormatError::Decode {
        what: what(),
        message,
    })?;
    if group.group != entry.group {
        return Err(FormatError::Decode {
            what: what(),
            message: format!("it holds key group {}", group.group),
        });
    }
    Ok(group)
}

/// Decodes a whole artifact held in memory, keeping the key groups in `range` (all if
/// `None`).
pub fn decode(bytes: &[u8], range: Option<KeyGroupRange>) -> Result<Increment, FormatError> {
    check_header(bytes)?;
    let footer = read_footer(bytes)?;
    let slice = |offset: u64, len: u64, what: &'static str| {
        let start = usize::try_from(offset).map_err(|_| FormatError::Truncated(what))?;
        let end = start
            .checked_add(usize::try_from(len).map_err(|_| FormatError::Truncated(what))?)
            .ok_or(FormatError::Truncated(what))?;
        bytes
            .get(start..end)
            .filter(|_| end <= bytes.len() - FOOTER_LEN)
            .ok_or(FormatError::Truncated(what))
    };
    let index_bytes = slice(
        footer.index_offset,
        u64::from(footer.index_len),
        "index out of bounds",
    )?;
    let index = decode_index(index_bytes, &footer)?;
    let mut groups = Vec::new();
    for entry in &index.groups {
        if range.is_some_and(|r| !r.contains(entry.group)) {
            continue;
        }
        groups.push(decode_group(
            slice(entry.offset, entry.len, "section out of bounds")?,
            entry,
        )?);
    }
    Ok(Increment {
        checkpoint: index.checkpoint,
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubtaskIndex;
    use crate::partition::{KeyGroups, hash_key};
    use crate::state::{KeyRef, KeyedStateBackend, StateKind};

    fn sample() -> Increment {
        let groups = KeyGroups::new(16);
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let v = b.declare("count", StateKind::Value).expect("declare");
        let m = b.declare("seen", StateKind::Map).expect("declare");
        for i in 0..200u32 {
            let key = format!("key-{i}");
            let k = KeyRef::new(key.as_bytes(), hash_key(key.as_bytes()));
            b.value_set(v, k, &i.to_le_bytes()).expect("set");
            if i % 3 == 0 {
                b.map_put(m, k, b"x", &[7; 50]).expect("put");
            }
        }
        b.value_remove(v, KeyRef::new(b"key-5", hash_key(b"key-5")))
            .expect("remove");
        b.snapshot()
    }

    #[test]
    fn round_trips_and_reads_only_the_groups_asked_for() {
        let increment = sample();
        let bytes = encode(&increment).expect("encode");
        assert_eq!(decode(&bytes, None).expect("decode"), increment);
        let range = KeyGroupRange { start: 4, end: 8 };
        let part = decode(&bytes, Some(range)).expect("decode part");
        assert!(!part.groups.is_empty());
        assert!(part.groups.iter().all(|g| range.contains(g.group)));
        let expected: Vec<_> = increment
            .groups
            .iter()
            .filter(|g| range.contains(g.group))
            .cloned()
            .collect();
        assert_eq!(part.groups, expected);
    }

    #[test]
    fn ranged_reads_need_only_footer_index_and_sections() {
        let increment = sample();
        let bytes = encode(&increment).expect("encode");
        let footer = read_footer(&bytes[bytes.len() - FOOTER_LEN..]).expect("footer");
        let start = footer.index_offset as usize;
        let index =
            decode_index(&bytes[start..start + footer.index_len as usize], &footer).expect("index");
        let entry = &index.groups[1];
        let (o, l) = (entry.offset as usize, entry.len as usize);
        assert_eq!(
            decode_group(&bytes[o..o + l], entry).expect("group"),
            increment.groups[1]
        );
    }

    #[test]
    fn keys_and_values_longer_than_four_kib_round_trip() {
        let groups = KeyGroups::new(4);
        let mut b = KeyedStateBackend::new(groups, groups.range_of(SubtaskIndex(0), 1));
        let v = b.declare("blob", StateKind::Value).expect("declare");
        let l = b.declare("items", StateKind::List).expect("declare");
        let key = vec![b'k'; 5000];
        let k = KeyRef::new(&key, hash_key(&key));
        b.value_set(v, k, &vec![9; 100_000]).expect("set");
        b.list_append(l, k, &vec![8; 4097]).expect("append");
        let increment = b.snapshot();
        let bytes = encode(&increment).expect("encode");
        assert_eq!(decode(&bytes, None).expect("decode"), increment);
    }

    /// `bytes` with its index replaced by `index` (checksum and footer made right).
    fn with_index(bytes: &[u8], index: &ArtifactIndex) -> Vec<u8> {
        let footer = read_footer(bytes).expect("footer");
        let mut out = bytes[..footer.index_offset as usize].to_vec();
        let index_offset = out.len();
        ciborium::into_writer(index, &mut out).expect("encode");
        let index_len = out.len() - index_offset;
        let checksum = xxh3_64(&out[index_offset..]);
        out.extend_from_slice(&(index_offset as u64).to_le_bytes());
        out.extend_from_slice(&(index_len as u32).to_le_bytes());
        out.extend_from_slice(&checksum.to_le_bytes());
        out.extend_from_slice(MAGIC);
        out
    }

    #[test]
    fn an_index_that_does_not_fit_the_layout_is_refused() {
        let bytes = encode(&sample()).expect("encode");
        let footer = read_footer(&bytes).expect("footer");
        let start = footer.index_offset as usize;
        let index =
            decode_index(&bytes[start..start + footer.index_len as usize], &footer).expect("index");
        let changes: [fn(&mut ArtifactIndex); 4] = [
            // Groups out of order: a ranged reader reads the wrong bytes for them.
            |i| i.groups.swap(0, 1),
            |i| {
                let first = i.groups[0].clone();
                i.groups.insert(1, first);
            },
            // A section overlapping the index, or ending past u64.
            |i| i.groups[0].len = u64::MAX,
            |i| i.groups[1].offset = 0,
        ];
        for change in changes {
            let mut bad = index.clone();
            change(&mut bad);
            let err = decode(&with_index(&bytes, &bad), None).expect_err("refused");
            assert!(matches!(err, FormatError::Decode { .. }), "{err}");
        }
        assert_eq!(
            decode(&with_index(&bytes, &index), None).expect("decode"),
            sample()
        );
    }

    #[test]
    fn corruption_truncation_and_other_versions_are_detected() {
        let bytes = encode(&sample()).expect("encode");
        for at in [
            HEADER_LEN + 3,
            bytes.len() / 2,
            bytes.len() - FOOTER_LEN - 2,
        ] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            let err = decode(&bad, None).expect_err("corrupt");
            assert!(
                matches!(err, FormatError::Checksum(_) | FormatError::Decode { .. }),
                "{err}"
            );
        }
        assert!(decode(&bytes[..bytes.len() - 1], None).is_err());
        assert_eq!(
            decode(&bytes[..5], None),
            Err(FormatError::Truncated("no complete header"))
        );
        let mut v2 = bytes.clone();
        v2[8] = 2;
        assert_eq!(decode(&v2, None), Err(FormatError::UnsupportedVersion(2)));
        assert_eq!(
            decode(
                b"just some bytes that are long enough to hold a footer",
                None
            ),
            Err(FormatError::BadMagic)
        );
    }
}
