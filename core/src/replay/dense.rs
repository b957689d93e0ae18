//! Dense numbering of block ids: the first distinct id seen becomes 0, the next 1, and so on,
//! so that every replay history can keep its state in plain arrays.
//!
//! Ids from hashed tokens are spread over all of `u64` and go through a hash map. Many public
//! traces (Mooncake's among them) instead number their blocks densely from 0; such small ids
//! index an array directly, which avoids a cache miss per lookup. The array covers
//! `0..direct.len()` and grows geometrically while it stays within a few times the number of
//! distinct ids; an id is in exactly one of the two places, so growing moves any ids the new
//! range covers out of the map.

use alloc::vec::Vec;

const NONE: u32 = u32::MAX;
/// The direct array may cover up to this many slots per distinct id (plus `MIN_DIRECT`).
const DIRECT_SLACK: usize = 4;
const MIN_DIRECT: usize = 1 << 16;

/// See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct DenseIds {
    direct: Vec<u32>,
    map: hashbrown::HashMap<u64, u32, rustc_hash::FxBuildHasher>,
    len: usize,
}

impl DenseIds {
    /// How many distinct ids have been numbered.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The dense number of `id`, numbering it if new. The caller keeps the count of distinct
    /// ids below `u32::MAX`. When the allocator refuses room for a new id, nothing changes and
    /// the error is the number of bytes asked for.
    #[inline]
    pub(crate) fn number(&mut self, id: u64) -> Result<u32, usize> {
        let next = self.len as u32;
        if let Some(slot) = usize::try_from(id).ok().and_then(|i| self.direct.get_mut(i)) {
            if *slot == NONE {
                *slot = next;
                self.len += 1;
            }
            return Ok(*slot);
        }
        self.number_slow(id, next)
    }

    #[inline(never)]
    fn number_slow(&mut self, id: u64, next: u32) -> Result<u32, usize> {
        let limit = DIRECT_SLACK * (self.len + 1) + MIN_DIRECT;
        if id < limit as u64 {
            self.grow_direct((id as usize + 1).next_power_of_two().min(limit))?;
            return self.number(id);
        }
        if self.map.len() == self.map.capacity() {
            // Room for as many again (16 at least), so that inserting never allocates.
            let more = self.map.len().max(16);
            self.map.try_reserve(more).map_err(|error| match error {
                hashbrown::TryReserveError::AllocError { layout } => layout.size(),
                hashbrown::TryReserveError::CapacityOverflow => usize::MAX,
            })?;
        }
        let number = *self.map.entry(id).or_insert(next);
        if number == next {
            self.len += 1;
        }
        Ok(number)
    }

    /// Heap bytes held: the array's and the map's allocations.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.direct.capacity() * size_of::<u32>() + self.map.allocation_size()
    }

    /// Extends the direct array to `size` slots, moving the ids it now covers out of the map.
    fn grow_direct(&mut self, size: usize) -> Result<(), usize> {
        let old = self.direct.len();
        let bytes = size * size_of::<u32>();
        self.direct.try_reserve_exact(size - old).map_err(|_| bytes)?;
        self.direct.resize(size, NONE);
        let direct = &mut self.direct;
        self.map.retain(|&id, &mut number| {
            if id >= old as u64 && id < size as u64 {
                direct[id as usize] = number;
                false
            } else {
                true
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::xorshift;
    use alloc::collections::BTreeMap;

    /// Against a map that numbers ids in order of first appearance, on ids that mix small
    /// values (direct array, with growth), values just past the array, and huge ones.
    #[test]
    fn numbers_ids_in_order_of_first_appearance() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || xorshift(&mut state);
        let mut dense = DenseIds::default();
        let mut model = BTreeMap::new();
        for step in 0..200_000u64 {
            let r = next();
            let id = match r % 4 {
                0 => r >> 48,                      // small: direct
                1 => (r >> 40) % (8 * (step + 1)), // around the array's edge
                2 => u64::MAX - (r >> 50),         // huge: map
                _ => step / 2,                     // ascending, as in Mooncake traces
            };
            let want = model.len() as u32;
            let want = *model.entry(id).or_insert(want);
            assert_eq!(dense.number(id), Ok(want), "id {id} at step {step}");
            assert_eq!(dense.len(), model.len());
        }
        assert!(!dense.direct.is_empty() && !dense.map.is_empty());
    }

    /// Where each new id goes, at the edges of the rule: the array while the id stays below
    /// `DIRECT_SLACK` slots per distinct id plus `MIN_DIRECT`, grown to the next power of
    /// two but never past that limit; the map from the limit on, reserving 16 entries at a
    /// time; ids the grown array covers move out of the map with their numbers.
    #[test]
    fn ids_go_to_the_array_below_the_limit_and_to_the_map_from_it() {
        // 4 slots per distinct id, plus 2^16 (written out: the constants are under test).
        let limit = |distinct: usize| 4 * (distinct + 1) + 65_536;
        let mut dense = DenseIds::default();
        let mut placed = |id: u64, number: u32, direct: usize, map: usize| {
            assert_eq!(dense.number(id), Ok(number), "id {id}");
            assert_eq!((dense.direct.len(), dense.map.len()), (direct, map), "id {id}");
            // The array is reserved exactly, so its heap bytes are the slots it covers.
            assert_eq!(dense.direct.capacity(), direct, "id {id}");
            dense.map.capacity()
        };
        // Just below the first limit: the array, cut at the limit (not 2^17).
        let first = limit(0) as u64 - 1;
        placed(first, 0, limit(0), 0);
        // One distinct id later the limit is higher: the array again.
        let second = limit(1) as u64 - 1;
        placed(second, 1, limit(1), 0);
        // Exactly at the limit: the map, with room for 16 at once.
        let third = limit(2) as u64;
        assert!(placed(third, 2, limit(1), 1) >= 16);
        // The array grows past `third`, which moves into it, number kept.
        let fourth = limit(3) as u64 - 1;
        placed(fourth, 3, limit(3), 0);
        placed(third, 2, limit(3), 0);
        assert_eq!(dense.direct[third as usize], 2);
    }
}
