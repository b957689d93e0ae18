//! Software prefetch: a hint that a cache line will be read soon.
//!
//! The history's lookups and inserts are bound by random memory access (one or two cache
//! misses per id). Prefetching the lines of the ids a few positions ahead lets those misses
//! overlap; on this project's x86-64 measurements it is a large part of the history's speed.
//! Elsewhere (aarch64, wasm32) the hint is a no-op: correctness never depends on it, and that
//! portable path is what the aarch64 and wasm test suites run.
//!
//! The hint takes an address, not a reference: for an index in range by construction (a bucket
//! number, a ring position), callers point at the slice's element as
//! `slice.as_ptr().wrapping_add(index)`, without the bounds check that taking a reference
//! costs. A hint at an address out of range would be harmless anyway.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

/// Hints that the cache line at `element` will be read soon. The address need not be valid.
#[inline(always)]
pub(crate) fn prefetch<T>(element: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` only hints the cache hierarchy. It never faults, whatever the
    // address, and has no architecturally visible effect; SSE is part of the x86-64 baseline,
    // so the instruction is always available.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(element.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = element;
}
