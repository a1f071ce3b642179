//! [`StateBytes`]: the bytes of a key or value held by the backend.
//!
//! Most keys and many values are short (words, ids, counters). A short one is stored inline
//! in its table entry: no allocation when it is written, no pointer to chase when it is
//! compared or read, and copying it is as cheap as bumping a reference count. A longer one
//! is a shared, immutable `Arc<[u8]>`, so that a snapshot pins it by reference instead of
//! copying it.
//!
//! Every entry holds two of these (key and value), so their size is most of an entry's: 24
//! bytes, where a [`Bytes`] alone takes 32. An `Arc<[u8]>` is two words (a [`Bytes`] four),
//! which leaves 22 bytes inline beside the tag and the length.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use bytes::Bytes;

/// Longest byte string stored inline.
pub(crate) const INLINE_CAPACITY: usize = 22;

/// A key or value: inline if short, shared if long. Immutable once made.
#[derive(Clone)]
pub enum StateBytes {
    Inline {
        len: u8,
        data: [u8; INLINE_CAPACITY],
    },
    Shared(Arc<[u8]>),
}

impl StateBytes {
    /// Copies `bytes` (inline if short enough, else into a new shared buffer).
    #[inline]
    pub fn copy_from_slice(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE_CAPACITY {
            let mut data = [0; INLINE_CAPACITY];
            data[..bytes.len()].copy_from_slice(bytes);
            Self::Inline {
                len: bytes.len() as u8,
                data,
            }
        } else {
            Self::Shared(Arc::from(bytes))
        }
    }

    /// Reads a long value's first byte, which starts loading its allocation (and the
    /// reference count beside it) into cache; an inline value is already where its entry is.
    /// Returns what it read, for the caller to pass to [`std::hint::black_box`].
    #[inline]
    pub(crate) fn touch(&self) -> u64 {
        match self {
            Self::Inline { .. } => 0,
            Self::Shared(bytes) => bytes.first().map_or(0, |&b| u64::from(b)),
        }
    }

    /// The bytes as a shared buffer (copies an inline value; shares a long one).
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Self::Inline { .. } => Bytes::copy_from_slice(self),
            Self::Shared(bytes) => Bytes::from_owner(bytes.clone()),
        }
    }
}

impl Deref for StateBytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Self::Inline { len, data } => &data[..*len as usize],
            Self::Shared(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for StateBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Bytes> for StateBytes {
    fn from(bytes: Bytes) -> Self {
        Self::copy_from_slice(&bytes)
    }
}

/// Whether `a` and `b` hold the same bytes. Keys and map keys are mostly a few bytes long:
/// compared here in a short loop, they cost a few cycles instead of a call into the C
/// library's `memcmp` (which, at several comparisons per state access, was 5-7 % of a job
/// firing windows every second). Longer ones go to the library.
#[inline]
pub(crate) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a.len() > SHORT {
        return a == b;
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

/// `a` against `b` as byte strings (as `<[u8]>::cmp`), short ones in a loop: see
/// [`bytes_eq`].
#[inline]
pub(crate) fn bytes_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if a.len() > SHORT || b.len() > SHORT {
        return a.cmp(b);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// Longest byte strings [`bytes_eq`] and [`bytes_cmp`] compare in a loop.
const SHORT: usize = 24;

impl PartialEq for StateBytes {
    fn eq(&self, other: &Self) -> bool {
        bytes_eq(self, other)
    }
}

impl Eq for StateBytes {}

impl PartialOrd for StateBytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Ordered as byte strings, like `[u8]`, so ordered maps can be searched by `&[u8]`.
impl Ord for StateBytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        bytes_cmp(self, other)
    }
}

impl std::hash::Hash for StateBytes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl std::borrow::Borrow<[u8]> for StateBytes {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for StateBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&Bytes::copy_from_slice(self), f)
    }
}

/// Serialised as a byte string (a CBOR byte string, not an array of numbers).
impl serde::Serialize for StateBytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self)
    }
}

impl<'de> serde::Deserialize<'de> for StateBytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = StateBytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<StateBytes, E> {
                Ok(StateBytes::copy_from_slice(v))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<StateBytes, E> {
                Ok(StateBytes::copy_from_slice(&v))
            }
        }
        deserializer.deserialize_bytes(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_bytes_are_inline_and_long_ones_shared() {
        let short = StateBytes::copy_from_slice(b"word");
        assert!(matches!(short, StateBytes::Inline { .. }));
        assert_eq!(&*short, b"word");
        let long = vec![7u8; INLINE_CAPACITY + 1];
        let shared = StateBytes::copy_from_slice(&long);
        assert!(matches!(shared, StateBytes::Shared(_)));
        assert_eq!(&*shared, &long[..]);
        assert_eq!(StateBytes::from(Bytes::from_static(b"")).len(), 0);
        assert_eq!(std::mem::size_of::<StateBytes>(), 24, "three words");
        assert_eq!(
            std::mem::size_of::<Option<StateBytes>>(),
            24,
            "a tombstone costs nothing"
        );
        assert_eq!(&*shared.to_bytes(), &long[..]);
        assert!(StateBytes::copy_from_slice(b"a") < StateBytes::copy_from_slice(&[b'b'; 40]));
    }

    #[test]
    fn short_and_long_byte_strings_compare_as_slices_do() {
        let mut strings: Vec<Vec<u8>> = vec![Vec::new()];
        for len in [1, 2, 7, 8, 9, 23, 24, 25, 40] {
            for fill in [0u8, 1, 0x7f, 0xff] {
                let mut s = vec![fill; len];
                strings.push(s.clone());
                s[len / 2] ^= 0x80;
                strings.push(s.clone());
                s.push(0);
                strings.push(s);
            }
        }
        for a in &strings {
            for b in &strings {
                assert_eq!(bytes_cmp(a, b), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(bytes_eq(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }
}
