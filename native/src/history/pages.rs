//! History storage in anonymous memory mappings, with transparent huge pages.
//!
//! A full history's lookups and inserts each touch one or two random cache lines of arrays of
//! hundreds of megabytes. With 4 KiB pages nearly every such access also misses the TLB; with
//! 2 MiB pages the page walk mostly hits the cache. On this project's measurements that was
//! worth about 1.6x on inserts. So arrays of at least 2 MiB are mapped 2 MiB-aligned and
//! advised `MADV_HUGEPAGE` (most distributions run THP in `madvise` mode). Mappings are zero
//! and untouched until written, so memory becomes resident only as the history fills.
//!
//! The accounting is exact: [`PageStorage::bytes_for`] is the mapped length, each array
//! rounded up to whole 4 KiB pages.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ptr::NonNull;

use kvreuse_core::history::{AtomicU64, HistoryError, Layout, Storage};

const PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;

/// One zeroed array of `T` in its own mapping.
#[derive(Debug)]
struct Mapping<T> {
    ptr: NonNull<T>,
    len: usize,
    map_len: usize,
}

// SAFETY: the mapping is owned (unmapped only in `drop`) and only ever reached through `&[T]`
// where `T` is an atomic integer, which is `Send` and `Sync`.
unsafe impl<T: Sync> Send for Mapping<T> {}
// SAFETY: as above; shared access is through `&[T]` of `Sync` atomics.
unsafe impl<T: Sync> Sync for Mapping<T> {}

fn map_len(bytes: usize) -> usize {
    bytes.max(1).div_ceil(PAGE) * PAGE
}

impl<T> Mapping<T> {
    /// Maps `len` zeroed elements. `T` must be valid when all-zero (atomic integers are).
    fn zeroed(len: usize) -> Result<Self, HistoryError> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or(HistoryError::AllocationFailed { bytes: usize::MAX })?;
        let map_len = map_len(bytes);
        let huge = map_len >= HUGE_PAGE;
        // Over-reserve by one huge page so a 2 MiB-aligned start can be cut out of it.
        let reserve = if huge { map_len + HUGE_PAGE } else { map_len };
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
        // existing memory is affected.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(HistoryError::AllocationFailed { bytes: map_len });
        }
        let start = raw as usize;
        let aligned = if huge { start.next_multiple_of(HUGE_PAGE) } else { start };
        if huge {
            let (head, tail) = (aligned - start, start + reserve - (aligned + map_len));
            // SAFETY: both ranges lie inside the reservation just made and outside the part
            // kept, and are page-aligned (the kernel returned a page-aligned `start`).
            unsafe {
                if head > 0 {
                    libc::munmap(raw, head);
                }
                if tail > 0 {
                    libc::munmap((aligned + map_len) as *mut libc::c_void, tail);
                }
                // Advice only: if THP is off, or the kernel (or an emulator) does not know the
                // flag, the mapping simply stays on 4 KiB pages.
                libc::madvise(aligned as *mut libc::c_void, map_len, libc::MADV_HUGEPAGE);
            }
        }
        let ptr = NonNull::new(aligned as *mut T)
            .ok_or(HistoryError::AllocationFailed { bytes: map_len })?;
        Ok(Mapping { ptr, len, map_len })
    }

    fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` starts a live, page-aligned (so `T`-aligned) mapping of at least
        // `len * size_of::<T>()` bytes, zero-initialised by the kernel, and zero is a valid
        // `T` for the atomic integers stored here. The mapping lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for Mapping<T> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range this value owns; no reference into it outlives
        // `self` (slices borrow `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.map_len);
        }
    }
}

/// History storage in huge-page-advised anonymous mappings (Linux).
#[derive(Debug)]
pub struct PageStorage {
    index: Mapping<AtomicU64>,
    ring: Mapping<AtomicU64>,
}

impl Storage for PageStorage {
    fn allocate(layout: &Layout) -> Result<Self, HistoryError> {
        Ok(PageStorage {
            index: Mapping::zeroed(layout.index_words())?,
            ring: Mapping::zeroed(layout.ring_len())?,
        })
    }

    fn bytes_for(layout: &Layout) -> usize {
        map_len(layout.index_words() * 8) + map_len(layout.ring_len() * 8)
    }

    #[inline(always)]
    fn index(&self) -> &[AtomicU64] {
        self.index.as_slice()
    }

    #[inline(always)]
    fn ring(&self) -> &[AtomicU64] {
        self.ring.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn mappings_are_zeroed_aligned_and_writable() {
        for len in [1usize, 1000, 1 << 20] {
            let m: Mapping<AtomicU64> = Mapping::zeroed(len).unwrap();
            let s = m.as_slice();
            assert_eq!(s.len(), len);
            // Ordering: Relaxed; one thread.
            assert!(s.iter().all(|a| a.load(Ordering::Relaxed) == 0));
            s[len - 1].store(7, Ordering::Relaxed);
            assert_eq!(s[len - 1].load(Ordering::Relaxed), 7);
            let align = if m.map_len >= HUGE_PAGE { HUGE_PAGE } else { PAGE };
            assert_eq!(m.ptr.as_ptr() as usize % align, 0);
            assert_eq!(m.map_len, map_len(len * 8));
        }
    }
}
