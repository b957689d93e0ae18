//! Tests of all of a bucket's words at once: which carry an id's tag, as a mask with a bit per
//! word (the inner step of every scan, [`Tables::scan`](super::table::Tables::scan), so of every
//! lookup the summary lets through and every writer's duplicate check); which lie in the ring's
//! live interval (the writer's slow paths); and the summary bits of those that do (every
//! summary rebuild).
//!
//! A slot word keeps its tag in its top bits and its key below them (see `layout.rs`). On
//! x86_64 the fourteen slot words (and the header's two, which are left out) are tested four
//! at a time with SSE2, which every x86_64 CPU has: each test leaves a lane of all ones or
//! zero, the four results are narrowed to a byte per word, and one instruction gathers the
//! bytes' top bits into the mask. A rebuild computes each word's index into the summary table
//! the same way, four at a time, giving a word outside the interval the index of an entry
//! without bits, and ORs the fourteen entries without a branch. Elsewhere (aarch64, wasm32)
//! the tag test takes two words per 64-bit operation, the others one word at a time.
//!
//! Against those portable ways, with `scripts/bench-instructions` (key 7): the tag test took
//! 11 instructions fewer per new id at 131,072 ids and 21 fewer at 8,388,608, and 6 and 10
//! fewer per lookup whose first id is missing; the rebuild, 11 and 13 fewer per new id.
//!
//! The intrinsics are `unsafe` to call only because the compiler wants a function that lists
//! SSE2 among its target features before it calls them safely, even on a target that always
//! enables SSE2, and such a function cannot be inlined into the scan as it must be. They take
//! no pointers: callers read the words (atomically) and pass them by value.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use super::bucket::PAIRS;

/// A bucket's words as pairs, word `2i` in pair `i`'s low half, word `2i + 1` in its high half.
pub(super) type Pairs = [u64; PAIRS];

/// The words whose bits under `high` equal `tag`, bit `s` for word `s`. `tag` has no bits
/// outside `high`, which holds the top bit and not the lowest.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn tagged(words: &Pairs, tag: u32, high: u32) -> u32 {
    // SAFETY: the function computes on values only. SSE2 is part of the x86_64 baseline:
    // every x86_64 target enables it and every x86_64 CPU runs it.
    unsafe { sse2::tagged(words, tag, high) }
}

/// An interval of keys, `(first, key_mask, keys)`: the words `w` with `(w - first) & key_mask`
/// below `keys` (unsigned, wrapping) lie in it. `key_mask` and `keys` are below 2^31.
pub(super) type Interval = (u32, u32, u32);

/// Whether `word` lies in `interval`, one word: the rule every other interval test here
/// applies to many (and `View::in_interval` to one).
#[inline(always)]
pub(super) fn inside((first, key_mask, keys): Interval, word: u32) -> bool {
    (word.wrapping_sub(first) & key_mask) < keys
}

/// The words in `interval`, bit `s` for word `s`: for a view's live interval, the live words,
/// and the empty ones when it holds key 0 (see `View::in_interval`). Then the words that are 0.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn in_interval(words: &Pairs, (first, key_mask, keys): Interval) -> (u32, u32) {
    // SAFETY: as in `tagged`.
    unsafe { sse2::in_interval(words, first, key_mask, keys) }
}

/// The OR of `masks[(w >> shift) & 127]` over the words `w` from word 2 on that lie in
/// `interval`: a bucket's summary bits from its live slots. `masks` holds no bits from entry
/// 128 on.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn live_summary(
    words: &Pairs,
    (first, key_mask, keys): Interval,
    shift: u32,
    masks: &[u64; 256],
) -> u64 {
    // SAFETY: as in `tagged`.
    unsafe { sse2::live_summary(words, first, key_mask, keys, shift, masks) }
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use core::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_andnot_si128, _mm_cmpeq_epi32, _mm_cmpgt_epi32,
        _mm_cvtsi32_si128, _mm_extract_epi16, _mm_movemask_epi8, _mm_or_si128, _mm_packs_epi16,
        _mm_packs_epi32, _mm_set_epi64x, _mm_set1_epi32, _mm_setzero_si128, _mm_srl_epi32,
        _mm_sub_epi32,
    };

    use super::Pairs;

    /// Words `i` to `i + 3`, the lanes of one register.
    #[target_feature(enable = "sse2")]
    #[inline]
    fn four(words: &Pairs, i: usize) -> __m128i {
        _mm_set_epi64x(words[i + 1] as i64, words[i] as i64)
    }

    /// All ones in the lanes of `w` that lie in the interval `(first, key_mask, keys)`
    /// (each broadcast to every lane), as `super::inside` decides for one word. The offsets
    /// are masked below 2^31, so the signed compare orders them as unsigned; `keys` is at most
    /// the key space, below 2^31 too.
    #[target_feature(enable = "sse2")]
    #[inline]
    fn inside(w: __m128i, first: __m128i, key_mask: __m128i, keys: __m128i) -> __m128i {
        _mm_cmpgt_epi32(keys, _mm_and_si128(_mm_sub_epi32(w, first), key_mask))
    }

    /// The mask of sixteen lanes, each all ones or zero, a bit per lane in order.
    #[target_feature(enable = "sse2")]
    #[inline]
    fn gather(lanes: [__m128i; 4]) -> u32 {
        // Saturating narrowing keeps all ones and zero as they are: a byte per word, in order.
        let bytes = _mm_packs_epi16(
            _mm_packs_epi32(lanes[0], lanes[1]),
            _mm_packs_epi32(lanes[2], lanes[3]),
        );
        _mm_movemask_epi8(bytes) as u32
    }

    #[target_feature(enable = "sse2")]
    #[inline]
    pub(super) fn tagged(words: &Pairs, tag: u32, high: u32) -> u32 {
        let (tag, high) = (_mm_set1_epi32(tag as i32), _mm_set1_epi32(high as i32));
        let test = |i| _mm_cmpeq_epi32(_mm_and_si128(four(words, i), high), tag);
        gather([test(0), test(2), test(4), test(6)])
    }

    #[target_feature(enable = "sse2")]
    #[inline]
    pub(super) fn in_interval(words: &Pairs, first: u32, key_mask: u32, keys: u32) -> (u32, u32) {
        let (first, key_mask) = (_mm_set1_epi32(first as i32), _mm_set1_epi32(key_mask as i32));
        let (keys, zero) = (_mm_set1_epi32(keys as i32), _mm_setzero_si128());
        let words = [four(words, 0), four(words, 2), four(words, 4), four(words, 6)];
        let within = |w| inside(w, first, key_mask, keys);
        let empty = |w| _mm_cmpeq_epi32(w, zero);
        (
            gather([within(words[0]), within(words[1]), within(words[2]), within(words[3])]),
            gather([empty(words[0]), empty(words[1]), empty(words[2]), empty(words[3])]),
        )
    }

    #[target_feature(enable = "sse2")]
    #[inline]
    pub(super) fn live_summary(
        words: &Pairs,
        first: u32,
        key_mask: u32,
        keys: u32,
        shift: u32,
        masks: &[u64; 256],
    ) -> u64 {
        let (first, key_mask) = (_mm_set1_epi32(first as i32), _mm_set1_epi32(key_mask as i32));
        let keys = _mm_set1_epi32(keys as i32);
        let (shift, low7, none) =
            (_mm_cvtsi32_si128(shift as i32), _mm_set1_epi32(127), _mm_set1_epi32(128));
        // Each word's table index: its tag value's low 7 bits if it lies in the interval (as
        // in `in_interval`), else 128, an entry without bits. Branch-free: about half the
        // slots are live, unpredictably.
        let index = |i| {
            let w = four(words, i);
            let live = inside(w, first, key_mask, keys);
            let value = _mm_and_si128(_mm_srl_epi32(w, shift), low7);
            _mm_or_si128(_mm_and_si128(live, value), _mm_andnot_si128(live, none))
        };
        let (a, b, c, d) = (index(0), index(2), index(4), index(6));
        // Word `4v + k`'s index is in 16-bit lane `2k` of vector `v`; words 0 and 1 are the
        // header's.
        let bits = |lane: i32| masks[lane as u8 as usize];
        bits(_mm_extract_epi16::<4>(a))
            | bits(_mm_extract_epi16::<6>(a))
            | bits(_mm_extract_epi16::<0>(b))
            | bits(_mm_extract_epi16::<2>(b))
            | bits(_mm_extract_epi16::<4>(b))
            | bits(_mm_extract_epi16::<6>(b))
            | bits(_mm_extract_epi16::<0>(c))
            | bits(_mm_extract_epi16::<2>(c))
            | bits(_mm_extract_epi16::<4>(c))
            | bits(_mm_extract_epi16::<6>(c))
            | bits(_mm_extract_epi16::<0>(d))
            | bits(_mm_extract_epi16::<2>(d))
            | bits(_mm_extract_epi16::<4>(d))
            | bits(_mm_extract_epi16::<6>(d))
    }
}

/// [`tagged`] on any target: two words per 64-bit operation.
#[cfg_attr(target_arch = "x86_64", cfg(test))]
#[inline(always)]
pub(super) fn tagged_swar(words: &Pairs, tag: u32, high: u32) -> u32 {
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

/// [`in_interval`] on any target: a word at a time, without a branch.
#[cfg_attr(target_arch = "x86_64", cfg(test))]
#[inline(always)]
pub(super) fn in_interval_words(words: &Pairs, interval: Interval) -> (u32, u32) {
    let (mut inside_mask, mut empty) = (0, 0);
    for (i, &pair) in words.iter().enumerate() {
        for (half, word) in [pair as u32, (pair >> 32) as u32].into_iter().enumerate() {
            let s = 2 * i + half;
            inside_mask |= u32::from(inside(interval, word)) << s;
            empty |= u32::from(word == 0) << s;
        }
    }
    (inside_mask, empty)
}

/// [`live_summary`] on any target: a word at a time, without a branch.
#[cfg_attr(target_arch = "x86_64", cfg(test))]
#[inline(always)]
pub(super) fn live_summary_words(
    words: &Pairs,
    interval: Interval,
    shift: u32,
    masks: &[u64; 256],
) -> u64 {
    let mut summary = 0;
    for &pair in &words[1..] {
        for word in [pair as u32, (pair >> 32) as u32] {
            // Branch-free (a select: a mask multiplied out was compiled into a branch around
            // the load): about half the slots are live, unpredictably.
            summary |= core::hint::select_unpredictable(
                inside(interval, word),
                masks[((word >> shift) & 127) as usize],
                0,
            );
        }
    }
    summary
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) use {
    in_interval_words as in_interval, live_summary_words as live_summary, tagged_swar as tagged,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bits::SetBits;
    use crate::test_rng::xorshift;
    use alloc::format;

    /// Sixteen words from `word`, called with each word's index.
    fn pairs(mut word: impl FnMut(usize) -> u32) -> Pairs {
        let mut words = [0u64; PAIRS];
        for s in 0..2 * PAIRS {
            words[s / 2] |= u64::from(word(s)) << (32 * (s % 2));
        }
        words
    }

    /// Both tag tests (on x86_64, where both are built) mark exactly the words whose bits
    /// under the mask equal the tag, against a word-by-word model, for tags of 4 to 28 bits
    /// and words that carry the tag, miss it by one bit, are empty or random.
    #[test]
    fn both_tag_tests_mark_exactly_the_words_with_the_tag() {
        let mut state = 0x0bad_cafe_dead_beef_u64;
        let mut next = move || xorshift(&mut state);
        for width in 4..=28 {
            let high = u32::MAX << (32 - width);
            let mut marked = 0;
            for _ in 0..2_000 {
                let tag = next() as u32 & high;
                let words = pairs(|_| {
                    let r = next();
                    let key = r as u32 & !high;
                    match (r >> 32) % 4 {
                        0 => tag | key,
                        1 => (tag ^ 1 << (32 - width + (r >> 40) as u32 % width)) | key,
                        2 => 0,
                        _ => (r >> 32) as u32,
                    }
                });
                let want = (0..2 * PAIRS)
                    .filter(|&s| (words[s / 2] >> (32 * (s % 2))) as u32 & high == tag)
                    .fold(0u32, |mask, s| mask | 1 << s);
                assert_eq!(tagged(&words, tag, high), want, "{words:x?}, tag {tag:x}");
                assert_eq!(tagged_swar(&words, tag, high), want, "{words:x?}, tag {tag:x}");
                marked += want.count_ones();
            }
            assert!(marked > 2_000 * 3, "width {width}: {marked} words marked");
        }
    }

    /// Both interval tests mark exactly the words whose key lies in the interval, and the
    /// empty words, and both summaries OR exactly those words' table entries, against a
    /// word-by-word model: for key widths of 4 to 29 bits, intervals that wrap round the key
    /// space or not, that are empty, hold key 0 or nearly all keys, and words at the
    /// interval's edges, just outside them, empty or random.
    #[test]
    fn both_interval_tests_and_summaries_take_exactly_the_words_in_the_interval() {
        let mut state = 0x5eed_1234_abcd_ef01_u64;
        let mut next = move || xorshift(&mut state);
        // A table of random bits for each of the 128 values, none after them.
        let mut masks = [0u64; 256];
        masks[..128].fill_with(&mut next);
        for width in 4..=29 {
            let key_mask = (1u32 << width) - 1;
            let (mut inside_seen, mut outside_seen) = (0, 0);
            for _ in 0..2_000 {
                let first = next() as u32 & key_mask;
                let keys = match next() % 4 {
                    0 => 0,
                    1 => key_mask,
                    2 => key_mask + 1 - first,
                    _ => next() as u32 & key_mask,
                };
                let words = pairs(|_| {
                    let r = next();
                    let tag = (r >> 32) as u32 & !key_mask;
                    let key = match r % 6 {
                        0 => first,
                        1 => first.wrapping_add(keys).wrapping_sub(1),
                        2 => first.wrapping_add(keys),
                        3 => first.wrapping_sub(1),
                        4 => return 0,
                        _ => (r >> 8) as u32,
                    };
                    tag | key & key_mask
                });
                let word = |s: usize| (words[s / 2] >> (32 * (s % 2))) as u32;
                let model = |test: &dyn Fn(u32) -> bool| {
                    (0..2 * PAIRS).filter(|&s| test(word(s))).fold(0u32, |m, s| m | 1 << s)
                };
                let want = (
                    model(&|w| u64::from(w.wrapping_sub(first) & key_mask) < u64::from(keys)),
                    model(&|w| w == 0),
                );
                let context = format!("{words:x?}, first {first:x}, keys {keys:x}");
                let interval = (first, key_mask, keys);
                assert_eq!(in_interval(&words, interval), want, "{context}");
                assert_eq!(in_interval_words(&words, interval), want, "{context}");
                // The summary of the same words: the table entries of those in the interval,
                // from word 2 on.
                let summary = SetBits(u64::from(want.0 & !3))
                    .fold(0, |bits, s| bits | masks[(word(s) >> width & 127) as usize]);
                assert_eq!(live_summary(&words, interval, width, &masks), summary, "{context}");
                let words_way = live_summary_words(&words, interval, width, &masks);
                assert_eq!(words_way, summary, "{context}");
                inside_seen += want.0.count_ones();
                outside_seen += (!want.0).count_ones();
            }
            assert!(inside_seen > 2_000 * 4 && outside_seen > 2_000 * 4, "width {width}");
        }
    }
}
