//! [`StateBytes`]: the bytes of a key or value held by the backend.
//!
//! Most keys and many values are short (words, ids, counters). A short one is stored inline
//! in its table entry: no allocation when it is written, no pointer to chase when it is
//! compared or read, and copying it is a copy of 12 bytes. A longer one is a shared,
//! immutable buffer with a reference count, so that a snapshot pins it by reference instead
//! of copying it.
//!
//! Every value-state entry holds two of these (key and value) beside its 8-byte epoch, so
//! their size is most of an entry's: 12 bytes each makes an entry 32 (`state/table.rs`).
//! That is why this is not an `Arc<[u8]>` (16 bytes, 24 with a tag beside it): a long one is
//! a thin pointer to a block that holds its reference count and its length before the bytes,
//! and the pointer is stored unaligned behind the tag, which leaves 11 bytes inline (a u64
//! and its CBOR head, an 8-byte id, most words).
//!
//! This is the state backend's one module with unsafe code. `scripts/miri` runs its tests
//! under Miri, which checks them for undefined behaviour and leaks: run it after changing it.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::fmt;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering, fence};

use bytes::Bytes;

/// Longest byte string stored inline.
pub(crate) const INLINE_CAPACITY: usize = 11;

/// A key or value: inline if short, shared if long. Immutable once made.
///
/// Twelve bytes, aligned to four: the tag, then either the inline bytes or the length (three
/// bytes, `ADDRESS_AT`) and the address of the shared block. The bytes are `MaybeUninit`
/// only so that copying them copies the address as an address (with its provenance), not as
/// integers; every one of them is initialised.
#[repr(C, align(4))]
pub struct StateBytes {
    tag: Tag,
    data: [MaybeUninit<u8>; INLINE_CAPACITY],
}

/// What a [`StateBytes`] holds: an inline byte string's length, or [`Tag::Shared`]. An enum
/// rather than a `u8` so that `Option<StateBytes>` uses the values left over and a tombstone
/// costs nothing more than a value.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Tag {
    L0,
    L1,
    L2,
    L3,
    L4,
    L5,
    L6,
    L7,
    L8,
    L9,
    L10,
    L11,
    Shared,
}

/// The tag of each inline length.
const INLINE_TAGS: [Tag; INLINE_CAPACITY + 1] = [
    Tag::L0,
    Tag::L1,
    Tag::L2,
    Tag::L3,
    Tag::L4,
    Tag::L5,
    Tag::L6,
    Tag::L7,
    Tag::L8,
    Tag::L9,
    Tag::L10,
    Tag::L11,
];

/// Where in `data` a shared block's address is. The bytes before it hold the length
/// (little-endian), or [`LEN_IN_BLOCK`] if it needs more than those bytes: the length is then
/// read from the block. So a length, and the slice a shared one derefs to, need no read of
/// the block (counting a restored state's bytes reads no value).
const ADDRESS_AT: usize = INLINE_CAPACITY - size_of::<*const Header>();

/// The length a shared handle holds when the block's length does not fit beside the address.
const LEN_IN_BLOCK: u32 = (1 << (8 * ADDRESS_AT)) - 1;

/// Writes `bytes` at the start of `data`.
#[inline]
fn put(data: &mut [MaybeUninit<u8>], bytes: &[u8]) {
    for (d, &b) in data.iter_mut().zip(bytes) {
        *d = MaybeUninit::new(b);
    }
}

/// The start of a shared block; its bytes follow.
#[repr(C)]
struct Header {
    count: AtomicU32,
    len: u32,
}

/// The layout of a shared block of `len` bytes.
fn block_layout(len: usize) -> Layout {
    Layout::from_size_align(size_of::<Header>() + len, align_of::<Header>())
        .expect("a state key or value fits in memory")
}

// SAFETY: the bytes never change once made, and the shared block's reference count is
// atomic, as an `Arc<[u8]>`'s is.
unsafe impl Send for StateBytes {}
// SAFETY: as above.
unsafe impl Sync for StateBytes {}

impl StateBytes {
    /// Copies `bytes` (inline if short enough, else into a new shared block).
    #[inline]
    pub fn copy_from_slice(bytes: &[u8]) -> Self {
        let mut data = [MaybeUninit::new(0); INLINE_CAPACITY];
        if let Some(&tag) = INLINE_TAGS.get(bytes.len()) {
            put(&mut data, bytes);
            return Self { tag, data };
        }
        let len = u32::try_from(bytes.len()).expect("a state key or value is at most 4 GiB");
        let layout = block_layout(bytes.len());
        // SAFETY: the layout is not zero-sized (it holds a header); the header and the
        // bytes are written before the block is read.
        let block = unsafe {
            let block = alloc(layout).cast::<Header>();
            let Some(block) = NonNull::new(block) else {
                handle_alloc_error(layout)
            };
            block.write(Header {
                count: AtomicU32::new(1),
                len,
            });
            ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                block.as_ptr().add(1).cast::<u8>(),
                bytes.len(),
            );
            block
        };
        put(
            &mut data,
            &len.min(LEN_IN_BLOCK).to_le_bytes()[..ADDRESS_AT],
        );
        // SAFETY: `ADDRESS_AT` leaves room for a pointer in `data`; written unaligned, as
        // `data` is only aligned to four.
        unsafe {
            data.as_mut_ptr()
                .add(ADDRESS_AT)
                .cast::<NonNull<Header>>()
                .write_unaligned(block);
        }
        Self {
            tag: Tag::Shared,
            data,
        }
    }

    /// The shared block, if this is a long byte string.
    #[inline]
    fn block(&self) -> Option<NonNull<Header>> {
        if self.tag != Tag::Shared {
            return None;
        }
        // SAFETY: a shared one's `data` holds the block's address at `ADDRESS_AT`
        // (`copy_from_slice`).
        Some(unsafe {
            self.data
                .as_ptr()
                .add(ADDRESS_AT)
                .cast::<NonNull<Header>>()
                .read_unaligned()
        })
    }

    /// Reads a long value's first byte, which starts loading its block (and the reference
    /// count beside it) into cache; an inline value is already where its entry is.
    /// Returns what it read, for the caller to pass to [`std::hint::black_box`].
    #[inline]
    pub(crate) fn touch(&self) -> u64 {
        match self.block() {
            None => 0,
            Some(_) => self.first().map_or(0, |&b| u64::from(b)),
        }
    }

    /// The bytes as a shared buffer (copies an inline value; shares a long one).
    pub fn to_bytes(&self) -> Bytes {
        match self.block() {
            None => Bytes::copy_from_slice(self),
            Some(_) => Bytes::from_owner(self.clone()),
        }
    }
}

impl Clone for StateBytes {
    #[inline]
    fn clone(&self) -> Self {
        if let Some(block) = self.block() {
            // SAFETY: the block lives while this handle does.
            let count = unsafe { &block.as_ref().count };
            // Relaxed, as `Arc::clone`: a new handle is made from an existing one, which
            // keeps the block alive meanwhile.
            let before = count.fetch_add(1, Ordering::Relaxed);
            if before > i32::MAX as u32 {
                // Billions of handles to one value: a leak somewhere. As `Arc`, abort
                // rather than let the count wrap.
                std::process::abort();
            }
        }
        Self {
            tag: self.tag,
            data: self.data,
        }
    }
}

impl Drop for StateBytes {
    #[inline]
    fn drop(&mut self) {
        let Some(block) = self.block() else {
            return;
        };
        // SAFETY: the block lives while this handle does; the last handle frees it, after
        // every other handle's use of it (the release and acquire, as in `Arc::drop`).
        unsafe {
            let header = block.as_ref();
            if header.count.fetch_sub(1, Ordering::Release) != 1 {
                return;
            }
            fence(Ordering::Acquire);
            let layout = block_layout(header.len as usize);
            dealloc(block.as_ptr().cast::<u8>(), layout);
        }
    }
}

impl Deref for StateBytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self.block() {
            // SAFETY: every byte of `data` is initialised, and an inline one's first `tag`
            // bytes are its bytes.
            None => unsafe {
                std::slice::from_raw_parts(self.data.as_ptr().cast::<u8>(), self.tag as usize)
            },
            // SAFETY: every byte of `data` is initialised; the block lives while this handle
            // does, and holds `len` bytes after its header, never changed once written.
            Some(block) => unsafe {
                let mut short_len = [0; 4];
                for (l, d) in short_len.iter_mut().zip(&self.data[..ADDRESS_AT]) {
                    *l = d.assume_init();
                }
                let len = match u32::from_le_bytes(short_len) {
                    LEN_IN_BLOCK => block.as_ref().len,
                    len => len,
                };
                std::slice::from_raw_parts(block.as_ptr().add(1).cast::<u8>(), len as usize)
            },
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
        assert!(short.block().is_none());
        assert_eq!(&*short, b"word");
        let full = StateBytes::copy_from_slice(&[3; INLINE_CAPACITY]);
        assert!(full.block().is_none());
        assert_eq!(&*full, &[3; INLINE_CAPACITY]);
        let long = vec![7u8; INLINE_CAPACITY + 1];
        let shared = StateBytes::copy_from_slice(&long);
        assert!(shared.block().is_some());
        assert_eq!(&*shared, &long[..]);
        assert_eq!(StateBytes::from(Bytes::from_static(b"")).len(), 0);
        assert_eq!(size_of::<StateBytes>(), 12, "three 32-bit words");
        assert_eq!(
            size_of::<Option<StateBytes>>(),
            12,
            "a tombstone costs nothing"
        );
        assert_eq!(&*shared.to_bytes(), &long[..]);
        assert!(StateBytes::copy_from_slice(b"a") < StateBytes::copy_from_slice(&[b'b'; 40]));
    }

    #[test]
    fn a_shared_block_lives_while_any_handle_does() {
        let count = |b: &StateBytes| {
            let block = b.block().expect("shared");
            // SAFETY: `b` keeps the block alive.
            unsafe { block.as_ref().count.load(Ordering::Relaxed) }
        };
        let long: Vec<u8> = (0..100).collect();
        let first = StateBytes::copy_from_slice(&long);
        let second = first.clone();
        assert_eq!(count(&first), 2);
        let bytes = second.to_bytes();
        assert_eq!(count(&first), 3, "the buffer holds a handle");
        drop(first);
        drop(second);
        assert_eq!(&bytes[..], &long[..], "the buffer's handle keeps the bytes");
        let copies: Vec<StateBytes> = (0..10).map(|_| StateBytes::from(bytes.clone())).collect();
        drop(bytes);
        for c in &copies {
            assert_eq!(&c[..], &long[..]);
            assert_eq!(count(c), 1, "a copy from a buffer is a block of its own");
        }
        let just_long = StateBytes::copy_from_slice(&long[..INLINE_CAPACITY + 1]);
        assert_eq!(&just_long[..], &long[..INLINE_CAPACITY + 1]);
        // Lengths that do not fit beside the address are read from the block.
        for len in [LEN_IN_BLOCK as usize - 1, LEN_IN_BLOCK as usize, 1 << 24] {
            let mut huge = vec![9u8; len];
            huge[len - 1] = 1;
            let shared = StateBytes::copy_from_slice(&huge);
            assert_eq!(shared.len(), len);
            assert!(shared[..] == huge[..]);
        }
    }

    #[test]
    fn handles_on_several_threads_share_one_block() {
        let long = StateBytes::copy_from_slice(&[5u8; 40]);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let handle = long.clone();
                std::thread::spawn(move || {
                    let again = handle.clone();
                    drop(handle);
                    again.to_bytes()
                })
            })
            .collect();
        drop(long);
        for thread in threads {
            let bytes = thread.join().expect("thread");
            assert_eq!(&bytes[..], &[5u8; 40]);
        }
        let value = Some(StateBytes::copy_from_slice(b"abc"));
        assert_eq!(value.as_deref(), Some(&b"abc"[..]));
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
