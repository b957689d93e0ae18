//! Heap bytes as a router counts them, whatever this code runs on.
//!
//! A replay reports, per capacity, the heap a kvreuse history of that capacity takes, so that
//! an operator can budget a router's memory. Routers run natively on 64-bit machines, where
//! [`Capacity::heap_bytes_of`] is exact. On wasm32 the same call measures a wasm32 history,
//! whose arrays are the same size (they hold `u64`s) but whose fixed part (the shared header,
//! full of pointers and `usize`s) is smaller. So here the fixed
//! part is replaced by the 64-bit one, and the browser prints `kvreuse replay`'s numbers.
//! On a 64-bit target nothing is replaced; the host tests check that the 64-bit fixed part
//! below is still what the core measures.

use kvreuse_core::history::{Layout, MAX_CAPACITY};
use kvreuse_core::replay::{Capacity, CapacityError};

/// Heap bytes of a one-block history on a 64-bit target: its fixed part plus one block's
/// arrays. Checked against the core by `the_fixed_part_is_the_cores` on 64-bit hosts, so a
/// change to the history's layout that changes it fails the host tests until updated here.
#[cfg_attr(target_pointer_width = "64", allow(dead_code))]
const BYTES_OF_ONE_BLOCK_64: usize = 424;

/// Heap bytes a 64-bit router's history of `blocks` blocks takes (`usize::MAX` beyond the
/// largest history).
pub fn heap_bytes(blocks: usize) -> usize {
    let here = Capacity::heap_bytes_of(blocks);
    #[cfg(target_pointer_width = "64")]
    {
        here
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        // Only the fixed part depends on the pointer width, and it does not depend on the
        // capacity: swap this target's for the 64-bit one.
        match here {
            usize::MAX => usize::MAX,
            here => (here - Capacity::heap_bytes_of(1)).saturating_add(BYTES_OF_ONE_BLOCK_64),
        }
    }
}

/// [`Capacity::blocks`], with byte budgets converted by a 64-bit router's footprint. (Not by
/// calling it for the other kinds: that links its conversion by this target's footprint into
/// the page's module for nothing, 432 bytes.)
pub fn blocks(capacity: Capacity) -> Result<Option<usize>, CapacityError> {
    match capacity {
        Capacity::Bytes(bytes) => {
            Capacity::blocks_within(bytes, |l: &Layout| heap_bytes(l.capacity())).map(Some)
        }
        Capacity::Blocks(blocks) if blocks > MAX_CAPACITY => Err(CapacityError::MoreThanLargest),
        Capacity::Blocks(blocks) => Ok(Some(blocks)),
        Capacity::Infinite => Ok(None),
    }
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_part_is_the_cores() {
        assert_eq!(
            Capacity::heap_bytes_of(1),
            BYTES_OF_ONE_BLOCK_64,
            "the history's footprint changed: update BYTES_OF_ONE_BLOCK_64"
        );
    }

    #[test]
    fn capacities_convert_as_the_core_converts_them() {
        for budget in
            ["2KiB", "64KiB", "1MiB", "256MiB", "3GiB", "8GiB", "1000B", "10B", "1k", "inf"]
        {
            let capacity = Capacity::parse(budget).unwrap();
            assert_eq!(blocks(capacity), capacity.blocks(), "{budget}");
        }
        for capacity in [Capacity::Blocks(MAX_CAPACITY), Capacity::Blocks(MAX_CAPACITY + 1)] {
            assert_eq!(blocks(capacity), capacity.blocks(), "{capacity}");
        }
        for n in [1, 13, 1000, 1 << 20] {
            assert_eq!(heap_bytes(n), Capacity::heap_bytes_of(n));
        }
    }
}
