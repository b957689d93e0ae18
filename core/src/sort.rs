//! Sorting keys that are all different, with the smallest code: a heap sort.
//!
//! The merge of conversations by time and the consistent-hash ring sort once per run, keys
//! of `(u64, usize)` that never repeat (so every sort gives the same order). The standard
//! library's quicksort is about 3.8 kB of the browser build's module for those two calls;
//! `BinaryHeap`'s heap sort, a few hundred bytes. It is slower (49,334 keys, as many as the
//! largest bundled input's requests: about 5.5 ms natively against 1.6 ms on the Intel Xeon
//! VM, 2026-12-03), once in a run of minutes.

use alloc::collections::BinaryHeap;
use alloc::vec::Vec;

/// `keys` in ascending order. The keys must all differ (else equal ones may come in any
/// order, which is still sorted).
pub(crate) fn sort_unique(keys: Vec<(u64, usize)>) -> Vec<(u64, usize)> {
    BinaryHeap::from(keys).into_sorted_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn sorts_like_the_standard_sort(keys in proptest::collection::vec((0u64..50, 0usize..1000), 0..300)) {
            let mut want = keys.clone();
            want.sort_unstable();
            prop_assert_eq!(sort_unique(keys), want);
        }
    }
}
