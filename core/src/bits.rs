//! The set bits of a word, lowest first: the one loop behind every bit mask the history and the
//! replay walk (tagged slots, overflowed ids, histories that hold an id).

/// Iterator over the indexes of the set bits of a word, lowest first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SetBits(pub(crate) u64);

impl Iterator for SetBits {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let bit = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(bit)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.count_ones() as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for SetBits {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn yields_each_set_bit_once_lowest_first() {
        for word in [0u64, 1, 0b1011_0100, u64::MAX, 1 << 63, 0x8000_0000_0000_0001] {
            let want: Vec<usize> = (0..64).filter(|&i| word >> i & 1 == 1).collect();
            assert_eq!(SetBits(word).collect::<Vec<_>>(), want, "{word:#x}");
            assert_eq!(SetBits(word).len(), want.len());
        }
    }
}
