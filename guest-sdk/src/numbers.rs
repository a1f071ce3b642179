//! The number columns of the WIT, `u32s` and `s64s`: integers as little-endian bytes, back to
//! back (`u32s` 4 bytes an item, `s64s` 8), which interpreted guests can view as numbers in one
//! step where a `list<u32>` would be lifted element by element.
//!
//! Input columns are read through [`Numbers`], a view over the bytes the bindings lifted: no
//! copy, and reading an item is one unaligned load (WebAssembly is little-endian, so
//! `from_le_bytes` is free). Output columns are `Vec<u8>` that [`Number::push_le`] appends to.

use std::fmt;

use crate::{Error, Result};

/// An integer type of a number column: `u32` (`u32s`) or `i64` (`s64s`).
pub(crate) trait Number: Copy {
    /// An item's bytes, `[u8; size_of::<Self>()]`.
    type Bytes: Copy;
    /// Bytes per item.
    const SIZE: usize;
    /// `bytes` as whole items, and the bytes of a trailing partial item (if any).
    fn items(bytes: &[u8]) -> (&[Self::Bytes], &[u8]);
    /// The item whose little-endian bytes are `bytes`.
    fn from_le(bytes: Self::Bytes) -> Self;
    /// Appends the item's little-endian bytes to `column`.
    fn push_le(self, column: &mut Vec<u8>);
}

macro_rules! number {
    ($t:ty, $size:literal) => {
        impl Number for $t {
            type Bytes = [u8; $size];
            const SIZE: usize = $size;

            #[inline]
            fn items(bytes: &[u8]) -> (&[[u8; $size]], &[u8]) {
                bytes.as_chunks::<$size>()
            }

            #[inline]
            fn from_le(bytes: [u8; $size]) -> Self {
                <$t>::from_le_bytes(bytes)
            }

            #[inline]
            fn push_le(self, column: &mut Vec<u8>) {
                column.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}

number!(u32, 4);
number!(i64, 8);

/// A read-only view of a number column, borrowed from the bytes the bindings lifted.
#[derive(Clone, Copy)]
pub(crate) struct Numbers<'a, T: Number> {
    items: &'a [T::Bytes],
}

/// A view of a `u32s` column.
pub(crate) type U32s<'a> = Numbers<'a, u32>;
/// A view of an `s64s` column.
pub(crate) type S64s<'a> = Numbers<'a, i64>;

impl<'a, T: Number> Numbers<'a, T> {
    /// The column whose bytes are `bytes`. A trailing partial item is an error naming the
    /// `column` (callers say whose: "malformed batch", "malformed reply from the host").
    #[inline]
    pub(crate) fn new(bytes: &'a [u8], column: &str) -> Result<Self> {
        match T::items(bytes) {
            (items, []) => Ok(Self { items }),
            (_, _) => Err(Error::new(format!(
                "its {column} are {} bytes, not a whole number of {}-byte items",
                bytes.len(),
                T::SIZE
            ))),
        }
    }

    /// The whole items of `bytes`, ignoring a trailing partial one: for columns the SDK wrote
    /// itself, which hold whole items only.
    #[inline]
    pub(crate) fn whole(bytes: &'a [u8]) -> Self {
        Self {
            items: T::items(bytes).0,
        }
    }

    /// How many items the column holds.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Item `index`, if the column has it.
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<T> {
        self.items.get(index).map(|&bytes| T::from_le(bytes))
    }

    /// The items, in order.
    #[inline]
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = T> + use<'a, T> {
        self.items.iter().map(|&bytes| T::from_le(bytes))
    }
}

impl<T: Number + fmt::Debug> fmt::Debug for Numbers<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// `items` as a number column's bytes (tests build their WIT values with it).
#[cfg(test)]
pub(crate) fn column<T: Number>(items: impl IntoIterator<Item = T>) -> Vec<u8> {
    let mut column = Vec::new();
    for item in items {
        item.push_le(&mut column);
    }
    column
}

/// The items of a column the SDK wrote (tests compare them).
#[cfg(test)]
pub(crate) fn items<T: Number>(bytes: &[u8]) -> Vec<T> {
    Numbers::<T>::whole(bytes).iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_little_endian() -> Result<()> {
        let bytes = column([1u32, 0x0403_0201, u32::MAX]);
        assert_eq!(bytes, [1, 0, 0, 0, 1, 2, 3, 4, 255, 255, 255, 255]);
        let view = U32s::new(&bytes, "ends")?;
        assert_eq!(view.len(), 3);
        assert_eq!((view.get(1), view.get(3)), (Some(0x0403_0201), None));
        assert_eq!(view.iter().collect::<Vec<_>>(), [1, 0x0403_0201, u32::MAX]);
        assert_eq!(format!("{view:?}"), "[1, 67305985, 4294967295]");

        let stamps = column([-2i64, i64::MIN]);
        assert_eq!(&stamps[..8], (-2i64).to_le_bytes());
        assert_eq!(items::<i64>(&stamps), [-2, i64::MIN]);
        assert_eq!(S64s::new(&[], "timestamps")?.len(), 0);
        Ok(())
    }

    #[test]
    fn a_partial_item_is_an_error_not_a_panic() {
        let error = U32s::new(&[1, 0, 0, 0, 2], "key ends").expect_err("5 bytes");
        assert_eq!(
            error.message(),
            "its key ends are 5 bytes, not a whole number of 4-byte items"
        );
        assert!(S64s::new(&[0; 12], "timestamps").is_err());
        assert_eq!(U32s::whole(&[1, 0, 0, 0, 2]).len(), 1);
    }
}
