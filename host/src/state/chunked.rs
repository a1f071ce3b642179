//! [`ChunkedVec`]: a vector kept in fixed-size chunks, so that a large one holds at most one
//! chunk of unused room.
//!
//! A `Vec` doubles when it fills: a table of entries is on average a third empty, 1.68 times
//! its contents at the unlucky sizes (78 K entries in a capacity of 128 K), and growing copies
//! every entry while old and new buffers both exist. A key group's table of a large state
//! holds tens of thousands of entries, and state in memory is the backend's whole promise: its
//! entries live in chunks of [`CHUNK`] instead. The first chunk grows as a `Vec` does, so a
//! table of a few keys stays a few entries big; every later chunk is allocated full-size.
//! Indexing costs one more load (the chunk's address, from a small array that stays in
//! cache).

/// Entries per chunk: a power of two, so that an index splits with a shift and a mask.
const CHUNK_BITS: u32 = 10;
pub(crate) const CHUNK: usize = 1 << CHUNK_BITS;

/// A growable array of `T` in chunks of [`CHUNK`] elements.
#[derive(Debug)]
pub(crate) struct ChunkedVec<T> {
    /// Every chunk but the last is full (`CHUNK` long, `CHUNK` capacity).
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for ChunkedVec<T> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> ChunkedVec<T> {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    // Lookups sit in the innermost loops of state access (a hash probe's key comparison):
    // they must inline there. No length check is needed: every chunk but the last is full.
    #[inline(always)]
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        self.chunks
            .get(index >> CHUNK_BITS)?
            .get(index & (CHUNK - 1))
    }

    #[inline(always)]
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.chunks
            .get_mut(index >> CHUNK_BITS)?
            .get_mut(index & (CHUNK - 1))
    }

    /// Appends `value`; returns its index.
    #[inline]
    pub(crate) fn push(&mut self, value: T) -> usize {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(value),
            _ => {
                // The first chunk starts small and doubles up to CHUNK (a power of two, so it
                // ends exactly full); later ones are allocated whole.
                let mut chunk = if self.chunks.is_empty() {
                    Vec::new()
                } else {
                    Vec::with_capacity(CHUNK)
                };
                chunk.push(value);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
        self.len - 1
    }

    /// Removes the element at `index`, putting the last one in its place (as
    /// `Vec::swap_remove`). Panics if `index` is out of bounds.
    pub(crate) fn swap_remove(&mut self, index: usize) -> T {
        assert!(
            index < self.len,
            "swap_remove index {index} of {}",
            self.len
        );
        let last_chunk = self.chunks.last_mut().expect("not empty");
        let last = last_chunk.pop().expect("chunks are never empty");
        if last_chunk.is_empty() {
            self.chunks.pop();
        }
        self.len -= 1;
        if index == self.len {
            return last;
        }
        std::mem::replace(
            &mut self.chunks[index >> CHUNK_BITS][index & (CHUNK - 1)],
            last,
        )
    }

    /// Makes room for `additional` more elements, in whole chunks past the first.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let wanted = self.len + additional;
        match self.chunks.as_mut_slice() {
            [] => self.chunks.push(Vec::with_capacity(wanted.min(CHUNK))),
            [first] => first.reserve_exact(wanted.min(CHUNK).saturating_sub(first.len())),
            _ => {}
        }
        // Later chunks are allocated when reached (only the last chunk may have room); the
        // array of them is sized now.
        let chunks = wanted.div_ceil(CHUNK);
        self.chunks
            .reserve(chunks.saturating_sub(self.chunks.len()));
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

impl<T> std::ops::Index<usize> for ChunkedVec<T> {
    type Output = T;

    #[inline(always)]
    fn index(&self, index: usize) -> &T {
        &self.chunks[index >> CHUNK_BITS][index & (CHUNK - 1)]
    }
}

impl<T> std::ops::IndexMut<usize> for ChunkedVec<T> {
    #[inline(always)]
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index >> CHUNK_BITS][index & (CHUNK - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_behaves_as_a_vec_across_chunk_boundaries() {
        let mut ours = ChunkedVec::default();
        let mut oracle = Vec::new();
        for i in 0..3 * CHUNK + 5 {
            assert_eq!(ours.push(i), oracle.len());
            oracle.push(i);
        }
        // Remove from the middle, the very end, and from chunks before the last.
        for index in [7, CHUNK, 3 * CHUNK + 2, 2 * CHUNK - 1, 0] {
            assert_eq!(ours.swap_remove(index), oracle.swap_remove(index));
        }
        while oracle.len() > CHUNK - 2 {
            assert_eq!(ours.swap_remove(3), oracle.swap_remove(3));
        }
        for i in 0..CHUNK + 10 {
            ours.push(i);
            oracle.push(i);
        }
        assert_eq!(ours.len(), oracle.len());
        assert!(ours.iter().eq(oracle.iter()));
        assert_eq!(ours.get(oracle.len()), None);
        ours[5] += 100;
        assert_eq!(ours[5], oracle[5] + 100);
    }

    #[test]
    fn only_the_first_chunk_grows_and_later_ones_are_whole() {
        let mut small = ChunkedVec::default();
        small.push(1u64);
        assert!(
            small.chunks[0].capacity() < CHUNK,
            "a small table stays small"
        );
        let mut large = ChunkedVec::default();
        large.reserve(2 * CHUNK + 1);
        for i in 0..2 * CHUNK + 1 {
            large.push(i as u64);
        }
        assert!(large.chunks.iter().all(|c| c.capacity() == CHUNK));
        assert_eq!(large.chunks.len(), 3);
    }
}
