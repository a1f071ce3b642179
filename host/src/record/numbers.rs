//! [`Numbers`]: a column of fixed-width integers kept as the little-endian bytes the WIT
//! carries them in (`u32s` and `s64s` in `wit/operator.wit`).
//!
//! Keeping the wire form means a batch still lends its columns to a guest call by moving its
//! vectors, with no per-record work; reading an item is one unaligned load.

use std::fmt;
use std::marker::PhantomData;

/// An integer type a [`Numbers`] column holds.
pub trait Number: Copy {
    /// Bytes per item.
    const SIZE: usize;
    /// The item whose little-endian bytes are `bytes` (exactly `SIZE` of them).
    fn from_le(bytes: &[u8]) -> Self;
    /// Appends the item's little-endian bytes to `out`.
    fn put_le(self, out: &mut Vec<u8>);
}

macro_rules! number {
    ($t:ty) => {
        impl Number for $t {
            const SIZE: usize = std::mem::size_of::<$t>();

            #[inline]
            fn from_le(bytes: &[u8]) -> Self {
                let mut le = [0; std::mem::size_of::<$t>()];
                le.copy_from_slice(bytes);
                <$t>::from_le_bytes(le)
            }

            #[inline]
            fn put_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}

number!(u32);
number!(i64);

/// Integers of type `T`, little-endian, back to back.
#[derive(Clone, PartialEq, Eq)]
pub struct Numbers<T> {
    bytes: Vec<u8>,
    item: PhantomData<T>,
}

impl<T> Default for Numbers<T> {
    fn default() -> Self {
        Self {
            bytes: Vec::new(),
            item: PhantomData,
        }
    }
}

impl<T: Number + fmt::Debug> fmt::Debug for Numbers<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Number> Numbers<T> {
    pub fn with_capacity(items: usize) -> Self {
        Self::from_bytes(Vec::with_capacity(items * T::SIZE))
    }

    /// The column whose wire form is `bytes`; a length that is not a whole number of items is
    /// kept, for [`Numbers::is_whole`] to report.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self {
            bytes,
            item: PhantomData,
        }
    }

    /// The wire form.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The wire form, as the generated bindings take a `u32s` or `s64s` argument.
    pub fn as_wit(&self) -> &Vec<u8> {
        &self.bytes
    }

    /// Whole items held (trailing bytes of a partial one are not counted).
    #[inline]
    pub fn len(&self) -> usize {
        self.bytes.len() / T::SIZE
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.len() < T::SIZE
    }

    /// Whether the bytes are a whole number of items.
    pub fn is_whole(&self) -> bool {
        self.bytes.len().is_multiple_of(T::SIZE)
    }

    /// Item `index`; panics past the end, as slice indexing does.
    #[inline]
    pub fn get(&self, index: usize) -> T {
        T::from_le(&self.bytes[index * T::SIZE..][..T::SIZE])
    }

    #[inline]
    pub fn push(&mut self, item: T) {
        item.put_le(&mut self.bytes);
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
    }

    pub fn iter(&self) -> impl Iterator<Item = T> + Clone + '_ {
        self.bytes.chunks_exact(T::SIZE).map(T::from_le)
    }
}

impl<T: Number> FromIterator<T> for Numbers<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut numbers = Self::default();
        for item in items {
            numbers.push(item);
        }
        numbers
    }
}

impl<T: Number> Extend<T> for Numbers<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        for item in items {
            self.push(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_little_endian_and_partial_ones_are_reported() {
        let column: Numbers<u32> = [1, 0x0403_0201, u32::MAX].into_iter().collect();
        assert_eq!(
            column.as_bytes(),
            [1, 0, 0, 0, 1, 2, 3, 4, 255, 255, 255, 255]
        );
        assert_eq!((column.len(), column.get(1)), (3, 0x0403_0201));
        assert_eq!(
            column.iter().collect::<Vec<_>>(),
            [1, 0x0403_0201, u32::MAX]
        );
        let stamps: Numbers<i64> = [-2].into_iter().collect();
        assert_eq!(stamps.as_bytes(), (-2i64).to_le_bytes());
        let partial = Numbers::<u32>::from_bytes(vec![1, 2, 3, 4, 5]);
        assert_eq!((partial.len(), partial.is_whole()), (1, false));
        assert!(column.is_whole() && Numbers::<u32>::default().is_empty());
        assert_eq!(format!("{column:?}"), "[1, 67305985, 4294967295]");
    }
}
