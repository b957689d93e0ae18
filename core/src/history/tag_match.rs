//! Which slot words of a bucket carry an id's tag: the inner step of every scan
//! ([`Tables::scan`](super::table::Tables::scan)), so of every lookup the summary lets through
//! and of every writer's duplicate check.
//!
//! A slot word keeps its tag in its top bits, so a word carries the tag when its bits under
//! the tag mask equal it. On x86_64 the fourteen slot words (and the header's two, which the
//! caller masks out) are compared four at a time with SSE2, which every x86_64 CPU has; the
//! four results are narrowed to one byte per word and their top bits gathered into the mask
//! in one instruction. Elsewhere (aarch64, wasm32) two words are compared per 64-bit
//! operation. The SSE2 way took 11 instructions fewer per new id at 131,072 ids and 21 fewer
//! at 8,388,608, and 6 and 10 fewer per lookup whose first id is missing
//! (`scripts/bench-instructions`, against the 64-bit way it replaced there).
//!
//! The intrinsics are `unsafe` to call only because the compiler requires a function to list
//! SSE2 among its target features before it calls them safely, even on a target where SSE2 is
//! always enabled, and a listing function cannot be inlined into the scan as it must be. They
//! take no pointers: the words are read (atomically) by the caller.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use super::bucket::PAIRS;

/// The words among `words` (pairs of slot words, word `2i` in pair `i`'s low half) whose bits
/// under `high` equal `tag`, as a mask with bit `s` for word `s`. `tag` has no bits outside
/// `high`, which holds at least the top bit and not the lowest.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn tagged_words(words: &[u64; PAIRS], tag: u32, high: u32) -> u32 {
    // SAFETY: the function only computes on values. SSE2 is part of the x86_64 baseline, so
    // every x86_64 target enables it and every x86_64 CPU runs it.
    unsafe { tagged_words_sse2(words, tag, high) }
}

/// [`tagged_words`] with SSE2: four words per compare.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
fn tagged_words_sse2(words: &[u64; PAIRS], tag: u32, high: u32) -> u32 {
    use core::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi32, _mm_movemask_epi8, _mm_packs_epi16,
        _mm_packs_epi32, _mm_set_epi64x, _mm_set1_epi32,
    };
    let (tag, high) = (_mm_set1_epi32(tag as i32), _mm_set1_epi32(high as i32));
    // All ones in the lanes of words `2i` to `2i + 3` that carry the tag, zero elsewhere.
    let matches = |i: usize| -> __m128i {
        let four = _mm_set_epi64x(words[i + 1] as i64, words[i] as i64);
        _mm_cmpeq_epi32(_mm_and_si128(four, high), tag)
    };
    // Saturating narrowing keeps all ones and zero as they are: a byte per word, in order.
    let bytes = _mm_packs_epi16(
        _mm_packs_epi32(matches(0), matches(2)),
        _mm_packs_epi32(matches(4), matches(6)),
    );
    _mm_movemask_epi8(bytes) as u32
}

/// [`tagged_words`] on any target: two words per 64-bit operation.
#[cfg_attr(target_arch = "x86_64", cfg(test))]
#[inline(always)]
pub(super) fn tagged_words_swar(words: &[u64; PAIRS], tag: u32, high: u32) -> u32 {
    // After masking to the tag bits and shifting right by one, each 32-bit half is zero (a
    // match) or between 2 and 2^31 - 1; subtracting one from each half then sets its top bit
    // exactly when it was zero (a borrow out of a zero low half takes the high half down by
    // one more, which leaves a non-zero high half positive).
    const ONES: u64 = 0x0000_0001_0000_0001;
    const TOPS: u64 = 0x8000_0000_8000_0000;
    let tags = u64::from(tag) | u64::from(tag) << 32;
    let high = u64::from(high) | u64::from(high) << 32;
    let mut zeros = [0u64; PAIRS];
    let mut any = 0;
    for (zero, &pair) in zeros.iter_mut().zip(words) {
        *zero = (((pair ^ tags) & high) >> 1).wrapping_sub(ONES);
        // (Masked to the top bits only where they are used: the common scan, which finds no
        // match, then tests them once, in `any`.)
        any |= *zero;
    }
    if any & TOPS == 0 {
        return 0;
    }
    // Pair i's matches, bits 31 and 63 of its `zeros`, shifted down to bits 2i and 32 + 2i of
    // one word; its high half, shifted down by 31 more, lands between the low half's bits:
    // word 2i + 1 beside word 2i.
    let mut spread = 0;
    for (i, z) in zeros.iter().enumerate() {
        spread |= (z & TOPS) >> (31 - 2 * i);
    }
    spread as u32 | (spread >> 31) as u32
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) use tagged_words_swar as tagged_words;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::xorshift;

    /// Both ways (on x86_64, where both are built) mark exactly the words whose bits under the
    /// mask equal the tag, against a word-by-word model, for tags of 4 to 28 bits and words
    /// that carry the tag, miss it by one bit, are empty or random.
    #[test]
    fn both_ways_mark_exactly_the_words_with_the_tag() {
        let mut state = 0x0bad_cafe_dead_beef_u64;
        let mut next = move || xorshift(&mut state);
        for width in 4..=28 {
            let high = u32::MAX << (32 - width);
            let mut marked = 0;
            for _ in 0..2_000 {
                let tag = next() as u32 & high;
                let mut words = [0u64; PAIRS];
                let mut want = 0;
                for s in 0..2 * PAIRS {
                    let r = next();
                    let key = r as u32 & !high;
                    let word = match (r >> 32) % 4 {
                        0 => tag | key,
                        1 => (tag ^ 1 << (32 - width + (r >> 40) as u32 % width)) | key,
                        2 => 0,
                        _ => (r >> 32) as u32,
                    };
                    words[s / 2] |= u64::from(word) << (32 * (s % 2));
                    want |= u32::from(word & high == tag) << s;
                }
                assert_eq!(tagged_words(&words, tag, high), want, "{words:x?}, tag {tag:x}");
                assert_eq!(tagged_words_swar(&words, tag, high), want, "{words:x?}, tag {tag:x}");
                marked += want.count_ones();
            }
            assert!(marked > 2_000 * 3, "width {width}: {marked} words marked");
        }
    }
}
