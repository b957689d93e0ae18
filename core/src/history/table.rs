//! The index and the ring shared by the writer and its readers: lookups, placement, moves.
//!
//! A bucket is one 64-byte cache line: eight 64-bit words. Word 0 is the header, words 1 to 7
//! hold two 32-bit slot words each (14 slots). The header holds:
//!
//! - a 44-bit **summary**, a small Bloom filter of the tags of the ids that may be in the
//!   bucket or may have overflowed from it (see `layout`). Most lookups of absent ids end after
//!   this one 8-byte read and a bit test: a handful of instructions, so consecutive lookups
//!   overlap their cache misses. The writer sets bits as ids arrive and rebuilds the summary
//!   from the live slots every seven fills of the bucket (twice per round of its fourteen
//!   slots), so bits of evicted ids do not pile up. Rebuilding more often admits fewer absent
//!   ids but costs inserts more than the lookups it saves: every four fills took 4.7% more
//!   instructions per new id than every seven, for 11% fewer full scans.
//! - four 4-bit **overflow counts**. Every id has a first bucket and a second; it goes to its
//!   first bucket when that has a free slot, and overflows to its second otherwise. The first
//!   bucket counts its live overflowed ids exactly, per class of summary bits (the writer
//!   decrements a count when such an id is evicted), so a lookup reads the second bucket only
//!   when an id of its own class has overflowed.
//! - the **next slot** to fill. A bucket fills its slots round-robin, and ids leave the
//!   history in the order they entered it, so the slot a bucket fills next holds its oldest
//!   id: the bucket has room exactly when that one id is dead, which takes one check rather
//!   than fourteen. Only buckets disturbed by a move (rare) need a full scan.
//!
//! A full lookup compares two slot tags per 64-bit operation, then confirms a match with the
//! ring entry the slot points to.

use alloc::vec::Vec;

use super::layout::{
    BUCKET_SLOTS, BUCKET_WORDS, CLASSES, Codec, GROUP, Home, Mixer, SUMMARY_BITS, View,
};
use super::{HistoryError, Layout, Storage};
use crate::prefetch::prefetch;
use crate::sync::{AtomicU64, Ordering};

/// Ids a lookup or insert handles per batch. A batch is worked through in stages, each stage
/// issuing the memory accesses the next one needs for every id of the batch at once, so that
/// their cache misses overlap instead of queueing one after another.
pub(crate) const BATCH: usize = 32;

/// How often (in fills of a bucket) the writer rebuilds the bucket's summary.
const REBUILD_EVERY: usize = 7;

/// How deep the writer searches for a chain of moves that frees a slot.
const MOVE_DEPTH: u32 = 2;

/// 64-bit words per bucket.
const PAIRS: usize = BUCKET_WORDS / 2;

/// Bits of the slots within a bucket mask (bit `i` is word `i`; words 0 and 1 are the
/// header).
const SLOTS: u32 = ((1 << BUCKET_WORDS) - 1) & !3;

/// The first slot.
const FIRST_SLOT: usize = 2;

/// The header: the summary in bits 0 to 43, four 4-bit overflow counts in bits 44 to 59, the
/// slot filled next in bits 60 to 63 (`0` meaning the first slot).
const SUMMARY: u64 = (1 << SUMMARY_BITS) - 1;
const COUNT_SHIFT: u32 = SUMMARY_BITS;
const COUNT_BITS: u32 = 4;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;
const NEXT_SHIFT: u32 = 60;
const NEXT: u64 = 0xf << NEXT_SHIFT;

/// What the writer and its readers share.
pub(crate) struct Shared<S> {
    pub(crate) storage: S,
    pub(crate) layout: Layout,
    pub(crate) codec: Codec,
    pub(crate) mixer: Mixer,
    /// Insertions since construction; published before a ring entry is overwritten.
    pub(crate) now: AtomicU64,
    /// `now` at the last `clear`: only insertions after it are live.
    pub(crate) start: AtomicU64,
}

/// The writer's record of which ring positions hold an id that sits in its second bucket,
/// one bit per position: when such an id is evicted, its first bucket's count goes down.
/// Read and written sequentially, alongside the ring.
#[derive(Debug)]
pub(crate) struct OverflowFlags(Vec<u64>);

impl OverflowFlags {
    pub(crate) fn new(capacity: usize) -> Result<Self, HistoryError> {
        let words = capacity.div_ceil(64);
        let mut bits = Vec::new();
        bits.try_reserve_exact(words)
            .map_err(|_| HistoryError::AllocationFailed { bytes: Self::bytes_for(capacity) })?;
        bits.resize(words, 0);
        Ok(OverflowFlags(bits))
    }

    pub(crate) fn bytes_for(capacity: usize) -> usize {
        capacity.div_ceil(64) * 8
    }

    pub(crate) fn set(&mut self, position: usize) {
        self.0[position / 64] |= 1 << (position % 64);
    }

    pub(crate) fn get(&self, position: usize) -> bool {
        self.0[position / 64] & (1 << (position % 64)) != 0
    }

    /// Clears the flag at `position`; returns whether it was set.
    pub(crate) fn take(&mut self, position: usize) -> bool {
        let was = self.get(position);
        self.0[position / 64] &= !(1 << (position % 64));
        was
    }

    pub(crate) fn clear(&mut self) {
        self.0.fill(0);
    }

    /// Calls `f` with each set position among the `n` positions from `start` on, wrapping at
    /// `len` (the ring's length): a word of flags at a time, not a bit.
    pub(crate) fn for_each_set(
        &self,
        start: usize,
        n: usize,
        len: usize,
        mut f: impl FnMut(usize),
    ) {
        let before_wrap = n.min(len - start);
        self.for_each_set_in(start, start + before_wrap, &mut f);
        self.for_each_set_in(0, n - before_wrap, &mut f);
    }

    fn for_each_set_in(&self, from: usize, to: usize, f: &mut impl FnMut(usize)) {
        let mut i = from;
        while i < to {
            let span = (64 - i % 64).min(to - i);
            let mut bits = (self.0[i / 64] >> (i % 64)) & (u64::MAX >> (64 - span));
            while bits != 0 {
                f(i + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
            i += span;
        }
    }
}

/// One pass over a bucket for one id: the slot words read, those carrying its tag, and
/// whether ids of its class have overflowed from it.
///
/// Lookups use the slot words this pass read, never a second read: the header read after
/// them vouches for those words only (see [`Shared::scan`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scan {
    words: [u64; PAIRS],
    tagged: u32,
    overflowed: bool,
}

impl Scan {
    /// Slot word `i` as the scan read it.
    #[inline(always)]
    fn word(&self, i: usize) -> u32 {
        (self.words[i / 2] >> (32 * (i % 2))) as u32
    }
}

/// The overflow count of `class` in a header.
#[inline(always)]
fn count(header: u64, class: u32) -> u64 {
    (header >> (COUNT_SHIFT + COUNT_BITS * class)) & COUNT_MAX
}

/// The slot a header says its bucket fills next.
#[inline(always)]
fn next_slot(header: u64) -> usize {
    let next = ((header & NEXT) >> NEXT_SHIFT) as usize;
    if next == 0 { FIRST_SLOT } else { next }
}

impl<S: Storage> Shared<S> {
    #[inline(always)]
    pub(crate) fn home(&self, id: u64) -> Home {
        self.codec.home(self.mixer.mix(id))
    }

    #[inline(always)]
    fn pairs(&self, bucket: usize) -> &[AtomicU64] {
        &self.storage.index()[bucket * PAIRS..(bucket + 1) * PAIRS]
    }

    #[inline(always)]
    fn prefetch_bucket(&self, bucket: usize) {
        prefetch(&self.storage.index()[bucket * PAIRS]);
    }

    /// Word `i` of `bucket`, for the writer.
    #[inline(always)]
    fn word(&self, bucket: usize, i: usize) -> u32 {
        // Ordering: Relaxed; only the writer stores slot words. (Readers read slots only
        // through `scan`.)
        (self.pairs(bucket)[i / 2].load(Ordering::Relaxed) >> (32 * (i % 2))) as u32
    }

    /// Whether `id`'s first bucket's summary rules it out: the cheapest lookup of an absent id,
    /// one 8-byte read.
    #[inline(always)]
    pub(crate) fn summary_rules_out(&self, id: u64) -> bool {
        let (first, bits) = self.codec.first_and_bits(self.mixer.mix(id));
        // Ordering: Acquire pairs with the Release store of a header.
        let header = self.storage.index()[first * PAIRS].load(Ordering::Acquire);
        header & bits != bits
    }

    /// One pass over a bucket for an id with `home`. The header is read last: a resident
    /// moving out of its first bucket is counted in the header before it leaves, so a reader
    /// that misses it in the slots it read sees the count. (Reading a slot again after the
    /// header could miss the resident in both places.)
    #[inline(always)]
    pub(crate) fn scan(&self, bucket: usize, home: &Home) -> Scan {
        // After masking to the tag bits and shifting right by one, each 32-bit half is zero
        // (a match) or between 2 and 2^31 - 1; subtracting one from each half then sets its
        // top bit exactly when it was zero (a borrow out of a zero low half takes the high
        // half down by one more, which leaves a non-zero high half positive).
        const ONES: u64 = 0x0000_0001_0000_0001;
        const TOPS: u64 = 0x8000_0000_8000_0000;
        let p = self.pairs(bucket);
        let tags = u64::from(home.tag) | u64::from(home.tag) << 32;
        let high = u64::from(self.codec.tag(u32::MAX));
        let high = high | high << 32;
        let mut words = [0u64; PAIRS];
        let mut zeros = [0u64; PAIRS];
        let mut any = 0;
        for i in 1..PAIRS {
            // Ordering: Acquire pairs with the Release store of a slot word (`store`): a
            // reader that reads a word reads the ring entry written before it, and, having
            // read an emptied slot, the header count of a resident that moved out (below).
            words[i] = p[i].load(Ordering::Acquire);
            let diff = ((words[i] ^ tags) & high) >> 1;
            zeros[i] = diff.wrapping_sub(ONES) & TOPS;
            any |= zeros[i];
        }
        // Ordering: Acquire; a header zeroed by `clear` synchronizes with the fence there, so
        // a reader that missed an id because of it sees the new start in `still_valid`.
        // (Program order after the slot loads' Acquire already keeps this load after them.)
        let header = p[0].load(Ordering::Acquire);
        let mut tagged = 0;
        if any != 0 {
            for (i, z) in zeros.iter().enumerate() {
                tagged |= ((((z >> 31) & 1) | ((z >> 62) & 2)) as u32) << (2 * i);
            }
        }
        Scan {
            words,
            tagged: tagged & SLOTS,
            overflowed: bucket == home.first && count(header, home.class) != 0,
        }
    }

    /// The first slot word among a scan's tagged slots that carries `home`'s tag and is live:
    /// the id's likely slot, before the ring confirms it.
    #[inline(always)]
    fn candidate(&self, scan: &Scan, home: &Home, view: &View) -> Option<u32> {
        let mut tagged = scan.tagged;
        while tagged != 0 {
            let word = scan.word(tagged.trailing_zeros() as usize);
            tagged &= tagged - 1;
            if self.codec.tag(word) == home.tag && view.is_live(word) {
                return Some(word);
            }
        }
        None
    }

    #[inline(always)]
    fn ring_entry(&self, word: u32) -> &AtomicU64 {
        &self.storage.ring()[self.codec.position(word)]
    }

    /// Whether the ring entry `word` points to holds `id`.
    #[inline(always)]
    fn holds(&self, word: u32, id: u64) -> bool {
        // Ordering: Acquire pairs with the ring store (Release), so a reader that sees a newer
        // id also sees the count published before it (checked by `still_valid`).
        self.ring_entry(word).load(Ordering::Acquire) == id
    }

    /// `id`'s live slot word among a scan's tagged slots, if any.
    #[inline(always)]
    fn search(&self, scan: &Scan, id: u64, home: &Home, view: &View) -> Option<u32> {
        let mut tagged = scan.tagged;
        while tagged != 0 {
            let word = scan.word(tagged.trailing_zeros() as usize);
            tagged &= tagged - 1;
            if self.codec.tag(word) == home.tag && view.is_live(word) && self.holds(word, id) {
                return Some(word);
            }
        }
        None
    }

    /// `id`'s live slot word, given its first bucket's scan: that bucket, then, if ids of its
    /// class have overflowed, the second.
    #[inline(always)]
    fn find_from(&self, first: &Scan, id: u64, home: &Home, view: &View) -> Option<u32> {
        if let Some(word) = self.search(first, id, home, view) {
            return Some(word);
        }
        if first.overflowed {
            return self.search(&self.scan(home.second, home), id, home, view);
        }
        None
    }

    /// The live slot word of `id` under `view`, if any.
    #[inline(always)]
    pub(crate) fn find(&self, id: u64, home: &Home, view: &View) -> Option<u32> {
        self.find_from(&self.scan(home.first, home), id, home, view)
    }

    /// If the ring entry after `position` holds `id` and is live, its position: `id` is then
    /// present without a look at the index.
    ///
    /// This is the common case for prefix lookups: a completion inserts its new block ids in
    /// order, so the blocks of a prompt that shares that prefix usually sit in consecutive ring
    /// positions, and confirming each after the first takes one sequential read.
    #[inline(always)]
    pub(crate) fn walk(&self, position: usize, id: u64, view: &View) -> Option<usize> {
        let next = view.next_position(position);
        let ring = self.storage.ring();
        // Keep the sequential reads a cache line ahead of the walk.
        if let Some(ahead) = ring.get(next + 8) {
            prefetch(ahead);
        }
        // Ordering: Acquire, like every ring read (see `holds`).
        (view.age_at(next) < view.len && ring[next].load(Ordering::Acquire) == id).then_some(next)
    }

    /// The leading run of `ids` present under `view`, and the fewest insertions that could
    /// overwrite an entry it relied on (for a concurrent reader's re-check).
    ///
    /// Each id is first tried by walking the ring from the previous one's position. Where the
    /// walk breaks, ids go through the index: the very first alone, later ones in batches.
    pub(crate) fn prefix(&self, ids: &[u64], view: &View) -> (usize, u32) {
        let mut shortest_life = u32::MAX;
        let mut position = None;
        let mut k = 0;
        while k < ids.len() {
            if let Some(found) = position.and_then(|p| self.walk(p, ids[k], view)) {
                shortest_life = shortest_life.min(view.capacity - 1 - view.age_at(found));
                position = Some(found);
                k += 1;
                continue;
            }
            if k == 0 {
                // The first id alone, without batch arrays to set up: a lookup whose first id is
                // absent reads one cache line and nothing speculative.
                let id = ids[0];
                let Some(word) = self.find(id, &self.home(id), view) else { break };
                shortest_life = view.capacity - 1 - view.age(&self.codec, word);
                position = Some(self.codec.position(word));
                k = 1;
                continue;
            }
            let batch = &ids[k..ids.len().min(k + BATCH)];
            let (found, last) = self.index_batch(batch, view, &mut shortest_life);
            k += found;
            if found < batch.len() {
                break;
            }
            position = last;
        }
        (k, shortest_life)
    }

    /// Looks a batch up through the index: its first buckets, then the ring entries (or second
    /// buckets) they point to, are fetched for the whole batch before any is used. Returns how
    /// many leading ids are present and the ring position of the last of them.
    fn index_batch(
        &self,
        batch: &[u64],
        view: &View,
        shortest_life: &mut u32,
    ) -> (usize, Option<usize>) {
        let mut homes = [Home::NONE; BATCH];
        let mut words = [0u32; BATCH];
        let homes = &mut homes[..batch.len()];
        for (home, &id) in homes.iter_mut().zip(batch) {
            *home = self.home(id);
            self.prefetch_bucket(home.first);
        }
        // First buckets: an id that is certainly absent ends the prefix; the others get their
        // ring entry, or their second bucket, fetched.
        let mut end = batch.len();
        let mut second = 0u64;
        for (k, home) in homes.iter().enumerate() {
            let scan = self.scan(home.first, home);
            words[k] = self.candidate(&scan, home, view).unwrap_or(0);
            if words[k] != 0 {
                prefetch(self.ring_entry(words[k]));
            } else if scan.overflowed {
                self.prefetch_bucket(home.second);
                second |= 1 << k;
            } else {
                end = k;
                break;
            }
        }
        while second != 0 {
            let k = second.trailing_zeros() as usize;
            second &= second - 1;
            let scan = self.scan(homes[k].second, &homes[k]);
            match self.candidate(&scan, &homes[k], view) {
                Some(word) => {
                    words[k] = word;
                    prefetch(self.ring_entry(word));
                }
                None => {
                    end = end.min(k);
                    break;
                }
            }
        }
        // Confirm in order; a candidate whose ring entry holds another id (a tag collision)
        // gets a full search.
        let mut last = None;
        for (k, (&id, home)) in batch.iter().zip(homes.iter()).enumerate().take(end) {
            let word = match words[k] {
                word if word != 0 && self.holds(word, id) => Some(word),
                _ => self.find(id, home, view),
            };
            let Some(word) = word else {
                return (k, last);
            };
            *shortest_life = (*shortest_life).min(view.capacity - 1 - view.age(&self.codec, word));
            last = Some(self.codec.position(word));
        }
        (end, last)
    }

    /// Prefetches, for a batch about to be inserted whose first buckets are loading (see
    /// [`mix_and_prefetch`](Self::mix_and_prefetch)), what its ids will read next: the ring entries of likely
    /// duplicates and the second buckets of ids that will look or go there.
    pub(crate) fn prefetch_for_insert(&self, homes: &[Home], view: &View) {
        for home in homes {
            if self.summary_admits(home) {
                let scan = self.scan(home.first, home);
                if let Some(word) = self.candidate(&scan, home, view) {
                    prefetch(self.ring_entry(word));
                    continue;
                }
                if scan.overflowed {
                    self.prefetch_bucket(home.second);
                    continue;
                }
            }
            if self.next_free(home.first, view).is_none() {
                self.prefetch_bucket(home.second);
            }
        }
    }

    /// Whether `home`'s first bucket's summary admits its id (it may be present). The writer
    /// checks this before a full search: most new ids are ruled out here.
    #[inline(always)]
    pub(crate) fn summary_admits(&self, home: &Home) -> bool {
        self.header(home.first) & home.bits == home.bits
    }

    /// The mixed `ids`, into `mixed`, their first buckets prefetched: all that an id's home
    /// needs, without the rest of it.
    #[inline(always)]
    pub(crate) fn mix_and_prefetch(&self, ids: &[u64], mixed: &mut [u64]) {
        for (h, &id) in mixed.iter_mut().zip(ids) {
            *h = self.mixer.mix(id);
            self.prefetch_bucket(self.codec.first(*h));
        }
    }

    /// Prefetches the first bucket of an id about to be evicted that had overflowed: its count
    /// will go down.
    pub(crate) fn prefetch_for_eviction(&self, evicted: u64) {
        self.prefetch_bucket(self.home(evicted).first);
    }

    /// Whether no entry with at least `life` insertions to go before its eviction under
    /// `view` has been overwritten since, and the history was not cleared.
    pub(crate) fn still_valid(&self, view: &View, life: u32) -> bool {
        // Ordering: Acquire; the ring loads before it saw stores made after this count was
        // published, so it is at least that recent.
        let now = self.now.load(Ordering::Acquire);
        let start = self.start.load(Ordering::Acquire);
        now - view.now <= u64::from(life) && start <= view.now - u64::from(view.len)
    }

    /// Stores slot word `i` of `bucket`.
    #[inline(always)]
    fn store(&self, bucket: usize, i: usize, word: u32) {
        let pair = &self.pairs(bucket)[i / 2];
        let shift = 32 * (i % 2);
        // Ordering: Relaxed load, the writer reads its own stores; Release store, so that a
        // reader that sees a slot word sees the ring entry written before it, and one that
        // sees a resident gone sees the count that sends it to the second bucket.
        let old = pair.load(Ordering::Relaxed);
        pair.store(old & !(0xffff_ffff << shift) | u64::from(word) << shift, Ordering::Release);
    }

    /// A bucket's header, for the writer.
    #[inline(always)]
    fn header(&self, bucket: usize) -> u64 {
        // Ordering: Relaxed; only the writer stores headers.
        self.pairs(bucket)[0].load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn store_header(&self, bucket: usize, header: u64) {
        // Ordering: Release; a reader that sees a count sees the slot it counts written.
        self.pairs(bucket)[0].store(header, Ordering::Release);
    }

    /// Whether one more id of `home`'s class may be counted as overflowed from its first
    /// bucket (counts are four bits; at the index's load a count above two is rare).
    fn may_overflow(&self, home: &Home) -> bool {
        home.second != home.first && count(self.header(home.first), home.class) < COUNT_MAX
    }

    /// Counts `home`'s id as overflowed from its first bucket (`up`), or no longer.
    fn count_overflow(&self, home: &Home, up: bool) {
        let header = self.header(home.first);
        let one = 1u64 << (COUNT_SHIFT + COUNT_BITS * home.class);
        let header = if up { (header + one) | home.bits } else { header - one };
        self.store_header(home.first, header);
    }

    /// The writer's side of an eviction: the id leaving the ring had overflowed, so its first
    /// bucket's count goes down.
    pub(crate) fn forget_overflow(&self, evicted: u64) {
        self.count_overflow(&self.home(evicted), false);
    }

    /// The slot `bucket` fills next, if it is free (its id dead): the fast path of every
    /// insert.
    #[inline(always)]
    fn next_free(&self, bucket: usize, view: &View) -> Option<usize> {
        let slot = next_slot(self.header(bucket));
        (!view.is_live(self.word(bucket, slot))).then_some(slot)
    }

    /// Puts `word` of an id with `home` into slot `slot` of `bucket`: the header first (its
    /// summary bit, and with `advance` the next slot), then the word, so that a reader that
    /// finds the word also finds the bit.
    #[inline(always)]
    fn fill(&self, bucket: usize, slot: usize, word: u32, home: &Home, view: &View, advance: bool) {
        let mut header = self.header(bucket) | home.bits;
        if advance {
            let next = if slot + 1 == BUCKET_WORDS { FIRST_SLOT } else { slot + 1 };
            header = header & !NEXT | (next as u64) << NEXT_SHIFT;
            if (next - FIRST_SLOT).is_multiple_of(REBUILD_EVERY) {
                // Every few fills, rebuild the summary from what is live, so bits of evicted
                // ids go.
                header = header & !SUMMARY | self.summary(bucket, slot, header, view) | home.bits;
            }
        }
        self.store_header(bucket, header);
        self.store(bucket, slot, word);
    }

    /// The summary of a bucket: the bits of its live slots (but `skip`, about to be
    /// overwritten) and, for every class with overflowed ids, all of that class's bits.
    #[inline(never)]
    fn summary(&self, bucket: usize, skip: usize, header: u64, view: &View) -> u64 {
        let p = self.pairs(bucket);
        let mut words = [0u32; BUCKET_WORDS];
        for (i, pair) in p.iter().enumerate().skip(1) {
            // Ordering: Relaxed; the writer reads its own stores.
            let pair = pair.load(Ordering::Relaxed);
            words[2 * i] = pair as u32;
            words[2 * i + 1] = (pair >> 32) as u32;
        }
        // The slot about to be overwritten counts as empty.
        words[skip] = 0;
        let mut summary = 0;
        for &word in &words[FIRST_SLOT..] {
            // Branch-free: about half the slots are live, unpredictably.
            summary |=
                self.codec.summary_bits(word) & 0u64.wrapping_sub(u64::from(view.is_live(word)));
        }
        for class in 0..CLASSES {
            if count(header, class) != 0 {
                summary |= ((1 << GROUP) - 1) << (GROUP * class);
            }
        }
        summary
    }

    /// The live slots of `bucket`, as a mask (the slow path: every slot's age).
    fn live(&self, bucket: usize, view: &View) -> u32 {
        (FIRST_SLOT..BUCKET_WORDS)
            .filter(|&i| view.is_live(self.word(bucket, i)))
            .fold(0, |mask, i| mask | 1 << i)
    }

    /// Any free slot of `bucket` (the slow path, after moves or forced evictions disturbed
    /// the round-robin order).
    fn any_free(&self, bucket: usize, view: &View) -> Option<usize> {
        let free = !self.live(bucket, view) & SLOTS;
        (free != 0).then(|| free.trailing_zeros() as usize)
    }

    /// Indexes a new id whose ring entry is written. Returns whether it overflowed to its
    /// second bucket, or `None` if no slot could be freed for it.
    ///
    /// Preference order: the first bucket's next slot, the second bucket's next slot, any free
    /// slot of either, then a slot freed by moving residents (rare: it reads their ring
    /// entries).
    #[inline(always)]
    pub(crate) fn place(
        &self,
        home: &Home,
        word: u32,
        view: &View,
        flags: &mut OverflowFlags,
    ) -> Option<bool> {
        if let Some(slot) = self.next_free(home.first, view) {
            self.fill(home.first, slot, word, home, view, true);
            return Some(false);
        }
        self.place_elsewhere(home, word, view, flags)
    }

    /// [`place`](Self::place) when the first bucket's next slot is taken (a few percent of
    /// new ids).
    #[inline(never)]
    fn place_elsewhere(
        &self,
        home: &Home,
        word: u32,
        view: &View,
        flags: &mut OverflowFlags,
    ) -> Option<bool> {
        let may_overflow = self.may_overflow(home);
        if let Some(slot) = self.next_free(home.second, view).filter(|_| may_overflow) {
            // Counted (and the summary bit set) in the first bucket before the word appears in
            // the second, so a reader that finds the id also knows to look there.
            self.count_overflow(home, true);
            self.fill(home.second, slot, word, home, view, true);
            return Some(true);
        }
        for (bucket, overflows) in [(home.first, false), (home.second, true)] {
            if overflows && !may_overflow {
                break;
            }
            let slot = self.any_free(bucket, view).or_else(|| {
                self.make_room(bucket, MOVE_DEPTH, view, flags)
                    .then(|| self.any_free(bucket, view))
                    .flatten()
            });
            if let Some(slot) = slot {
                if overflows {
                    self.count_overflow(home, true);
                }
                self.fill(bucket, slot, word, home, view, false);
                return Some(overflows);
            }
        }
        None
    }

    /// Frees a slot in `bucket` (which is full) by moving one of its residents that sits in
    /// its first bucket to its second, making room there recursively up to `depth` levels.
    /// The moved resident overflows, which `flags` records for its eviction.
    fn make_room(&self, bucket: usize, depth: u32, view: &View, flags: &mut OverflowFlags) -> bool {
        if self.live(bucket, view) != SLOTS {
            return true;
        }
        let words: [u32; BUCKET_WORDS] = core::array::from_fn(|i| self.word(bucket, i));
        let mut movable = [(0usize, Home::NONE); BUCKET_SLOTS];
        let mut count = 0;
        for (slot, &word) in words.iter().enumerate().skip(FIRST_SLOT) {
            // Ordering: Relaxed; the writer reads its own stores.
            let id = self.ring_entry(word).load(Ordering::Relaxed);
            let home = self.home(id);
            if self.codec.tag(word) != home.tag || (home.first != bucket && home.second != bucket) {
                // A dead word aliasing a live ring position: it names no resident.
                self.store(bucket, slot, 0);
                return true;
            }
            if home.first == bucket && self.may_overflow(&home) {
                movable[count] = (slot, home);
                count += 1;
            }
        }
        for pass in 0..2 {
            for &(slot, home) in &movable[..count] {
                if self.word(bucket, slot) != words[slot] {
                    // A deeper move went through this bucket; it may have room now.
                    if self.any_free(bucket, view).is_some() {
                        return true;
                    }
                    continue;
                }
                let room =
                    pass == 0 || (depth > 1 && self.make_room(home.second, depth - 1, view, flags));
                let Some(target) = room.then(|| self.any_free(home.second, view)).flatten() else {
                    continue;
                };
                // Into the second bucket, counted, and only then out of the first: a reader
                // that misses it in the first bucket's slots sees the count.
                self.fill(home.second, target, words[slot], &home, view, false);
                self.count_overflow(&home, true);
                self.store(bucket, slot, 0);
                flags.set(self.codec.position(words[slot]));
                return true;
            }
        }
        false
    }

    /// Writes `word` over the oldest live resident of `home`'s two buckets (no slot could be
    /// freed). Returns whether the new word went to the second bucket, and whether the
    /// resident lost its slot early: it is not the id the insertion under way evicts anyway.
    pub(crate) fn give_up_oldest(&self, home: &Home, word: u32, view: &View) -> (bool, bool) {
        let buckets: &[usize] =
            if self.may_overflow(home) { &[home.first, home.second] } else { &[home.first] };
        let mut best = (home.first, FIRST_SLOT, 0);
        for &bucket in buckets {
            for slot in FIRST_SLOT..BUCKET_WORDS {
                let age = view.age(&self.codec, self.word(bucket, slot));
                if age >= best.2 {
                    best = (bucket, slot, age);
                }
            }
        }
        let overflowed = best.0 != home.first;
        if overflowed {
            self.count_overflow(home, true);
        }
        self.fill(best.0, best.1, word, home, view, false);
        let due = view.is_full() && best.2 == view.len - 1;
        (overflowed, !due)
    }

    /// Empties every bucket.
    ///
    /// Words already zero are only read, not written: clearing a history that never filled
    /// leaves the pages it never touched untouched (not resident), and a clear costs readers
    /// (and the loom models) only the words that held something.
    pub(crate) fn clear(&self) {
        for word in self.storage.index() {
            // Ordering: Relaxed load; the writer reads its own stores. Relaxed store; the
            // Release fence before it in `History::clear` makes a reader that reads this zero
            // (Acquire) see the new start.
            if word.load(Ordering::Relaxed) != 0 {
                word.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
impl<S: Storage> Shared<S> {
    /// The total overflow count of a bucket, over its classes.
    pub(crate) fn overflow_count(&self, bucket: usize) -> u64 {
        let header = self.header(bucket);
        (0..CLASSES).map(|class| count(header, class)).sum()
    }

    /// Checks that every bucket's counts are exactly the live ids flagged as overflowed whose
    /// first bucket it is, class by class, and that every live id's summary bit is set in its
    /// first bucket (and, when it sits there, in its second); panics otherwise.
    pub(crate) fn check_overflow_counts(&self, view: &View, flags: &OverflowFlags) {
        let buckets = self.layout.buckets();
        let mut expected = alloc::vec![[0u64; CLASSES as usize]; buckets];
        let ring = view.ring as usize;
        for age in 0..view.len as usize {
            let position = (view.tail + ring - 1 - age) % ring;
            // Ordering: Relaxed; a check run by the writer, which reads its own stores.
            let id = self.storage.ring()[position].load(Ordering::Relaxed);
            let home = self.home(id);
            assert_eq!(self.header(home.first) & home.bits, home.bits, "summary bits of {id}");
            if flags.get(position) {
                expected[home.first][home.class as usize] += 1;
                assert_eq!(self.header(home.second) & home.bits, home.bits, "summary bits of {id}");
            }
        }
        for (bucket, want) in expected.iter().enumerate() {
            let header = self.header(bucket);
            for (class, &want) in want.iter().enumerate() {
                assert_eq!(count(header, class as u32), want, "bucket {bucket} class {class}");
            }
        }
    }
}
