//! The anatomy of an index bucket: one 64-byte cache line of eight 64-bit words. Word 0 is the
//! header, words 1 to 7 hold two 32-bit slot words each (14 slots; see the slot-word format in
//! `layout.rs`).
//!
//! The header ([`Header`]) holds, from the low bits up:
//!
//! - a 48-bit **summary**, a small Bloom filter of the tags of the ids that may be in the
//!   bucket or may have overflowed from it (see `layout.rs`). Most lookups of absent ids end
//!   after this one 8-byte read (in small histories, of the header's copy in the summary
//!   directory) and a bit test: a handful of instructions, so consecutive lookups overlap
//!   their cache misses. The writer sets bits as ids arrive and rebuilds the
//!   summary from the live slots every few fills of the bucket, so bits of evicted ids do not
//!   pile up (a class with overflowed ids keeps its bits: see [`Header::overflow_summary`]).
//! - four 3-bit **overflow counts**. Every id has a first bucket and a second; it goes to its
//!   first bucket when that has a free slot, and overflows to its second otherwise. The first
//!   bucket counts its live overflowed ids exactly, per class of summary bits (the writer
//!   decrements a count when such an id is evicted), so a lookup reads the second bucket only
//!   when an id of its own class has overflowed. A count stops at 7: an id of that class
//!   then stays in its first bucket (a resident moves on, or the oldest is evicted early). In
//!   a history of 1,048,576 random ids filled 100 times over, and counted after each fill
//!   from the third, 21 of 49 million counts stood at 7, and no id was evicted early. With
//!   4-bit counts the summary had 4 bits fewer, and let more absent ids through (see
//!   `layout.rs`).
//! - the **next slot** to fill, in the top 4 bits. A bucket fills its slots round-robin, and
//!   ids leave the history in the order they entered it, so the slot a bucket fills next holds
//!   its oldest id: the bucket has room exactly when that one id is dead, which takes one check
//!   rather than fourteen. Only buckets disturbed by a move (rare) need a full scan.

use super::layout::{BUCKET_SLOTS, BUCKET_WORDS, CLASSES, GROUP, SUMMARY_BITS};

/// 64-bit words per bucket: the header, then the slot pairs.
pub(crate) const PAIRS: usize = BUCKET_WORDS / 2;

/// The first slot (32-bit word 0 and 1 are the header).
pub(crate) const FIRST_SLOT: usize = 2;

/// Bits of the slots within a 32-bit word mask (bit `i` is word `i`).
pub(crate) const SLOTS: u32 = ((1 << BUCKET_WORDS) - 1) & !((1 << FIRST_SLOT) - 1);

const SUMMARY: u64 = (1 << SUMMARY_BITS) - 1;
const COUNT_SHIFT: u32 = SUMMARY_BITS;
const COUNT_BITS: u32 = 3;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;
const NEXT_SHIFT: u32 = COUNT_SHIFT + CLASSES * COUNT_BITS;
const NEXT: u64 = 0xf << NEXT_SHIFT;

// A bucket is one cache line, and its header's fields tile one 64-bit word exactly.
const _: () = assert!(BUCKET_WORDS * size_of::<u32>() == 64);
const _: () = assert!(PAIRS * size_of::<u64>() == 64);
const _: () = assert!(SLOTS.count_ones() as usize == BUCKET_SLOTS);
const _: () = assert!(GROUP * CLASSES == SUMMARY_BITS);
const _: () = assert!(NEXT_SHIFT + 4 == u64::BITS);
// The next slot's 4 bits name any slot (the value 0 stands for the first).
const _: () = assert!(BUCKET_WORDS <= 16);

/// The slots whose turn to be filled next marks a summary rebuild when it comes every `every`
/// fills (the first slot's turn always does), as a mask of slot numbers: one bit test per fill
/// rather than a remainder.
pub(crate) const fn rebuild_slots(every: usize) -> u32 {
    let mut mask = 0;
    let mut slot = FIRST_SLOT;
    while slot < BUCKET_WORDS {
        if (slot - FIRST_SLOT).is_multiple_of(every) {
            mask |= 1 << slot;
        }
        slot += 1;
    }
    mask
}

/// A bucket's header word (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header(pub(crate) u64);

impl Header {
    /// Whether the summary has all of `bits` (an id's two bits: it may be here).
    #[inline(always)]
    pub(crate) fn admits(self, bits: u64) -> bool {
        self.0 & bits == bits
    }

    /// The overflow count of `class`.
    #[inline(always)]
    pub(crate) fn count(self, class: u32) -> u64 {
        (self.0 >> (COUNT_SHIFT + COUNT_BITS * class)) & COUNT_MAX
    }

    /// Whether one more id of `class` can be counted (counts are three bits; at the index's
    /// load a count above two is rare).
    #[inline(always)]
    pub(crate) fn can_count(self, class: u32) -> bool {
        self.count(class) < COUNT_MAX
    }

    /// The slot the bucket fills next.
    #[inline(always)]
    pub(crate) fn next_slot(self) -> usize {
        let next = ((self.0 & NEXT) >> NEXT_SHIFT) as usize;
        if next == 0 { FIRST_SLOT } else { next }
    }

    /// With an id's summary `bits` set.
    #[inline(always)]
    pub(crate) fn with_bits(self, bits: u64) -> Header {
        Header(self.0 | bits)
    }

    /// With the slot after `slot` (round-robin) as the next to fill; also returns whether the
    /// summary is due for a rebuild, which it is when that next slot is in `rebuild_at` (see
    /// [`rebuild_slots`]).
    #[inline(always)]
    pub(crate) fn filled(self, slot: usize, rebuild_at: u32) -> (Header, bool) {
        let next = if slot + 1 == BUCKET_WORDS { FIRST_SLOT } else { slot + 1 };
        let header = Header(self.0 & !NEXT | (next as u64) << NEXT_SHIFT);
        (header, (rebuild_at >> next) & 1 != 0)
    }

    /// With the summary replaced by `summary`.
    #[inline(always)]
    pub(crate) fn with_summary(self, summary: u64) -> Header {
        Header(self.0 & !SUMMARY | summary)
    }

    /// With one more overflowed id of `class`, whose summary `bits` are set. The count must
    /// have room ([`can_count`](Self::can_count)).
    #[inline(always)]
    pub(crate) fn counted(self, class: u32, bits: u64) -> Header {
        debug_assert!(self.can_count(class), "overflow count of class {class} is full");
        Header((self.0 + (1 << (COUNT_SHIFT + COUNT_BITS * class))) | bits)
    }

    /// With one overflowed id of `class` fewer.
    #[inline(always)]
    pub(crate) fn uncounted(self, class: u32) -> Header {
        Header(self.0 - (1 << (COUNT_SHIFT + COUNT_BITS * class)))
    }

    /// The summary bits a rebuild keeps for overflowed ids: those set now in each class that
    /// counts any. An id's bits are set in its first bucket when it overflows, and its class
    /// keeps them through every rebuild while its count stays above zero, so they are among
    /// these (an overflowed id's bits are kept nowhere else). Keeping only the bits set, not
    /// all of such a class's bits, let 23.7% rather than 25.6% of random absent ids through a
    /// 100,000-id history's summaries in its steady state (with the 44-bit summary of that time).
    #[inline(always)]
    pub(crate) fn overflow_summary(self) -> u64 {
        let classes = (0..CLASSES)
            .filter(|&class| self.count(class) != 0)
            .fold(0, |summary, class| summary | ((1 << GROUP) - 1) << (GROUP * class));
        self.0 & classes
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    #[test]
    fn header_fields_do_not_overlap() {
        let mut header = Header(0).with_bits(SUMMARY);
        for class in 0..CLASSES {
            for _ in 0..=class {
                header = header.counted(class, 0);
            }
        }
        let (header, rebuild) = header.filled(BUCKET_WORDS - 2, rebuild_slots(7));
        assert_eq!(header.next_slot(), BUCKET_WORDS - 1);
        assert!(!rebuild);
        for class in 0..CLASSES {
            assert_eq!(header.count(class), u64::from(class) + 1);
        }
        assert!(header.admits(SUMMARY));
        assert_eq!(header.overflow_summary(), SUMMARY);
        // Only the bits set stay, and only in classes that count overflowed ids.
        let sparse = Header(0).with_bits(0b101).counted(0, 0).with_bits(1 << GROUP);
        assert_eq!(sparse.overflow_summary(), 0b101);
        let header = header.with_summary(0b101);
        assert!(header.admits(0b101) && !header.admits(0b110));
        assert_eq!(header.uncounted(2).count(2), 2);
        assert_eq!(header.next_slot(), BUCKET_WORDS - 1);
        // Wrapping round: after the last slot comes the first, and every seventh fill
        // rebuilds.
        let (wrapped, rebuild) = header.filled(BUCKET_WORDS - 1, rebuild_slots(7));
        assert_eq!(wrapped.next_slot(), FIRST_SLOT);
        assert!(rebuild);
        assert_eq!(Header(0).next_slot(), FIRST_SLOT);
        // Filling round after round, a rebuild comes exactly every `every` fills that divides
        // the slots, starting with the first slot's turn.
        for every in [1, 2, 7, BUCKET_SLOTS] {
            let mut header = Header(0);
            let due: Vec<usize> = (0..3 * BUCKET_SLOTS)
                .filter(|_| {
                    let (next, rebuild) = header.filled(header.next_slot(), rebuild_slots(every));
                    header = next;
                    rebuild
                })
                .collect();
            let expected: Vec<usize> =
                (0..3 * BUCKET_SLOTS).filter(|i| (i + 1) % every == 0).collect();
            assert_eq!(due, expected, "every {every}");
        }
        let full = (0..COUNT_MAX).fold(Header(0), |h, _| h.counted(0, 0));
        assert!(!full.can_count(0) && full.can_count(1));
    }
}
