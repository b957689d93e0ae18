//! Where a history's two shared arrays live.
//!
//! The index and the ring are plain arrays of atomics, allocated once.
//! [`BoxStorage`] takes them from the global allocator, zeroed lazily (`calloc`), so pages
//! only become resident once written. The native crate supplies its own [`Storage`] that maps
//! huge pages instead; the history's algorithm is the same code either way.

use alloc::boxed::Box;

use super::HistoryError;
use super::layout::{BUCKET_WORDS, Layout};
use crate::sync::AtomicU64;

/// Memory for a history, zeroed: the index (8 `AtomicU64` per bucket, each holding two 32-bit
/// words, the lower-numbered one in the low half, then the summary directory's words, if any)
/// and the ring (one `AtomicU64` per entry). Words left over from other use would read as ids
/// present (wrong answers, and possibly panics: see [`History::with_storage`]).
///
/// [`History::with_storage`]: super::History::with_storage
pub trait Storage: Sized {
    /// Allocates zeroed storage for `layout`, or fails without aborting.
    fn allocate(layout: &Layout) -> Result<Self, HistoryError>;

    /// The heap bytes [`allocate`](Self::allocate) takes for `layout`: what a byte budget is
    /// checked against. Must grow with capacity.
    fn bytes_for(layout: &Layout) -> usize;

    /// The index: exactly `layout.index_words()` words. Speed wants the first one 64-byte aligned,
    /// so that every bucket is one cache line; correctness does not depend on it.
    fn index(&self) -> &[AtomicU64];

    /// The ring: exactly `layout.ring_len()` ids.
    fn ring(&self) -> &[AtomicU64];
}

/// Storage from the global allocator.
#[derive(Debug)]
pub struct BoxStorage {
    index: Box<[AtomicU64]>,
    /// Index of the first 64-byte aligned word in `index`.
    base: usize,
    len: usize,
    ring: Box<[AtomicU64]>,
}

/// Extra words allocated so that a 64-byte aligned run of buckets fits.
const ALIGN_SLACK: usize = BUCKET_WORDS / 2 - 1;

impl Storage for BoxStorage {
    fn allocate(layout: &Layout) -> Result<Self, HistoryError> {
        let bytes = Self::bytes_for(layout);
        let fail = || HistoryError::AllocationFailed { bytes };
        let index: Box<[AtomicU64]> =
            zeroed(layout.index_words() + ALIGN_SLACK).ok_or_else(fail)?;
        let ring: Box<[AtomicU64]> = zeroed(layout.ring_len()).ok_or_else(fail)?;
        let per_line = BUCKET_WORDS / 2;
        let misalignment = (index.as_ptr() as usize / 8) % per_line;
        let base = (per_line - misalignment) % per_line;
        Ok(BoxStorage { index, base, len: layout.index_words(), ring })
    }

    fn bytes_for(layout: &Layout) -> usize {
        (layout.index_words() + ALIGN_SLACK) * 8 + layout.ring_len() * 8
    }

    #[inline(always)]
    fn index(&self) -> &[AtomicU64] {
        &self.index[self.base..self.base + self.len]
    }

    #[inline(always)]
    fn ring(&self) -> &[AtomicU64] {
        &self.ring
    }
}

/// A zeroed boxed slice, or `None` when the allocator refuses.
#[cfg(not(kvreuse_loom))]
fn zeroed<T: bytemuck::Zeroable>(len: usize) -> Option<Box<[T]>> {
    // `calloc`-backed: the pages are not touched here.
    bytemuck::allocation::try_zeroed_slice_box(len).ok()
}

#[cfg(kvreuse_loom)]
fn zeroed<T: LoomZero>(len: usize) -> Option<Box<[T]>> {
    Some((0..len).map(|_| T::zero()).collect())
}

#[cfg(kvreuse_loom)]
trait LoomZero {
    fn zero() -> Self;
}

#[cfg(kvreuse_loom)]
impl LoomZero for AtomicU64 {
    fn zero() -> Self {
        AtomicU64::new(0)
    }
}
