//! Sizes, the keyed id mix, the slot-word format and the liveness rule.

use super::HistoryError;
use super::word_masks::{self, Interval, Pairs};

/// 32-bit words per bucket: one 64-byte cache line, stored as eight 64-bit words. Words 0 and
/// 1 are the bucket's header (a summary of its tags, overflow counts, the slot it fills next),
/// words 2 to 15 are slots.
pub const BUCKET_WORDS: usize = 16;

/// Slots per bucket.
pub const BUCKET_SLOTS: usize = BUCKET_WORDS - 2;

/// Largest capacity: a slot word holds a key, its insertion number modulo three ring lengths
/// (29 bits at most, the ring having one entry more than the capacity), and at least three tag
/// bits.
pub const MAX_CAPACITY: usize = (1 << 27) - 1;
// Keys (three ring lengths of `MAX_CAPACITY + 1` at most) stay below 2^31, as the SSE2 tests of
// `word_masks` need.
const _: () = assert!(3 * (MAX_CAPACITY + 1) < 1 << 31);

/// Occupied fraction of a full large history's slots, as a ratio: 3/5.
const LOAD: (usize, usize) = (3, 5);

/// Buckets up to which an index runs at 50% load rather than [`LOAD`]: 4 MiB of index.
///
/// Fewer ids per bucket means fewer absent ids let through by the bucket's summary and fewer ids
/// overflowing to their second bucket, so every insert and absent lookup does less work. Where the
/// index is small enough to stay in the caches, that work is a large part of an insert's time, and
/// the extra memory (a sixth of the index at most: 683 KiB here) is small. Against 60% load, a
/// byte budget of up to about 4 MiB buys 14% fewer ids (the smaller of these histories also
/// have a summary directory: [`DIRECTORY_BUCKETS`]), one of about 4.3 to 7.5 MiB 9% fewer,
/// and one of 7.5 to 8.3 MiB from 9% to none fewer ([`Layout::largest_within`]). At 131,072 ids
/// on the AMD EPYC VM (before the directory), 50% rather than 60% took 222.8 rather than 234.6
/// instructions per new id and 54.3 rather than 62.1 per lookup whose first id is absent
/// (`scripts/bench-instructions`, key 7); in two rounds of four interleaved pairs of history
/// bench invocations (`scripts/bench-compare`) kvreuse's all-new inserts ran x1.11-1.13 (4 blocks
/// x1.07), duplicates x0.99-1.00, present lookups x1.04 and x0.97, missing-first lookups
/// x1.01-1.02, for 17.3 rather than 15.8 heap bytes per entry. The bound is where the history
/// bench's latency probe has mostly found reads in the caches: 4 MiB took 16-17 ns on the AMD
/// EPYC VM in most invocations and 36-38 ns on the Intel Xeon VM, 16 MiB 40-150 ns on the AMD VM
/// (the Intel VM has not run this load). Larger histories keep the 60% load's 15.75 bytes per
/// entry. At 50% their all-new inserts of 34 to 834 blocks ran x1.08-1.20
/// too (1,048,576 and 4,194,304 ids, three pairs), but duplicates and present lookups x0.93-0.95 at
/// 1,048,576 ids, for 1.5 bytes per entry more.
const ROOMY_BUCKETS: usize = 1 << 16;

/// Buckets up to which the index ends in a **summary directory**: a copy of every bucket's
/// header, one 8-byte word per bucket, eight to a cache line (146 KiB at 131,072 ids, 256 KiB
/// at most: histories of up to 229,376 ids).
///
/// A lookup whose first id is absent usually needs nothing but that id's first bucket's
/// summary. Read from the bucket, that is one line of the index per lookup; read from the
/// directory, an eighth of the index's size, it is a line that stays in the caches when the
/// index does not (the lookup also prefetches the bucket, which an id let through needs next,
/// without waiting for it). The writer stores every header twice. Against 7d21612 (no
/// directory), three interleaved pairs of history bench invocations each
/// (`scripts/bench-compare`, AMD EPYC VM), kvreuse's rates:
///
/// | ids | missing-first lookups | all-new inserts | duplicates, present lookups |
/// |---|---|---|---|
/// | 131,072 (146 KiB of directory) | x1.37 (1.29-1.60) | x0.93-0.97 | x1.00, x1.01 |
/// | 229,376 (256 KiB; 72828b8, the bound) | x1.19 (1.14-1.24) | x0.92 | x0.96, x1.00 |
/// | 262,144 (293 KiB) | x1.17 (1.15-1.18) | x0.92-0.93 | x0.99, x1.01 |
/// | 458,752 (512 KiB) | x1.03 (1.02-1.06) | x0.89-0.94 | x0.94, x0.92 |
///
/// So the lead shrinks as the directory grows, for the same cost; the bound keeps it where it
/// was measured to pay, a quarter of the AMD VM's 1 MiB of L2 per core. Without the prefetch
/// the directory gained nothing at 131,072 ids (x1.02): the 18% of absent ids that the summary
/// lets through then waited for their bucket. Larger histories read the summary from the
/// bucket.
///
/// Eight bytes a bucket were measured against other sizes at 131,072 ids (four pairs each
/// against this directory, throwaway builds; see `docs/history-performance.md`): 16 (an 8-bit
/// fingerprint of each slot's tag, 6.5% of absent ids let through rather than 17.4%) ran
/// missing-first lookups x0.80, and 4 (the summary folded onto 32 bits, 31.2% let through)
/// x0.70.
const DIRECTORY_BUCKETS: usize = 1 << 15;

/// The shape of a history of a given capacity: how many ids it keeps, how long its ring is
/// and how many buckets its index has.
///
/// A large full history's index runs at 60% load: 14 slots per 64-byte bucket, so
/// `64 / (14 * 0.6) = 7.62` bytes per entry on top of the 8-byte ring. At that load about 2%
/// of ids overflow their first bucket, and a lookup reads one cache line of index (plus, when
/// present, one of ring). Histories of up to 458,752 ids get more room: 50% load, 9.14 bytes
/// of index per entry, while that takes at most 65,536 buckets (4 MiB, which saves work on
/// every insert and absent lookup for a sixth of the index at most); from there the index
/// stays at that size while the load rises, and grows again at 60% from 550,503 ids on.
/// Histories of up to 229,376 ids also have a summary directory of 8 bytes per bucket (see
/// `DIRECTORY_BUCKETS`); just above, its memory goes to buckets instead (36,864, at a load
/// rising from 44% to 50% up to 258,048 ids), so that the footprint never shrinks as the
/// capacity grows.
///
/// The ring has one entry more than the capacity, and the index room for one id more: a new
/// id is written and indexed while the id it evicts is still live for readers, and both
/// changes appear at once when the writer publishes its insertion count (see the module docs
/// on concurrency).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    capacity: usize,
    buckets: usize,
}

impl Layout {
    /// The layout for `capacity` entries.
    pub fn for_capacity(capacity: usize) -> Result<Self, HistoryError> {
        if capacity == 0 {
            return Err(HistoryError::ZeroCapacity);
        }
        if capacity > MAX_CAPACITY {
            return Err(HistoryError::CapacityTooLarge { capacity });
        }
        let buckets = if capacity < BUCKET_SLOTS {
            // One bucket holds them all, and the id about to be evicted.
            1
        } else {
            let loaded = (capacity * LOAD.1).div_ceil(BUCKET_SLOTS * LOAD.0);
            // At most 50% load while that takes at most `ROOMY_BUCKETS`. Past
            // `DIRECTORY_BUCKETS`, the directory's words become buckets, an eighth more, so
            // that the footprint keeps growing with the capacity (`largest_within` relies on
            // it).
            let roomy = (2 * capacity).div_ceil(BUCKET_SLOTS);
            if roomy <= DIRECTORY_BUCKETS {
                roomy
            } else {
                loaded.max(roomy.min(ROOMY_BUCKETS)).max(DIRECTORY_BUCKETS * 9 / 8)
            }
        };
        Ok(Layout { capacity, buckets })
    }

    /// Ids kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries in the ring: `capacity() + 1`.
    pub fn ring_len(&self) -> usize {
        self.capacity + 1
    }

    /// Buckets in the index.
    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// 64-bit words in the index's buckets: eight per bucket, each holding two 32-bit words.
    pub fn pairs(&self) -> usize {
        self.buckets * BUCKET_WORDS / 2
    }

    /// Whether the index ends in a summary directory (see [`DIRECTORY_BUCKETS`]).
    #[inline(always)]
    pub(crate) fn has_directory(&self) -> bool {
        self.buckets <= DIRECTORY_BUCKETS
    }

    /// 64-bit words in the summary directory after the buckets: one per bucket, or none.
    pub fn directory_words(&self) -> usize {
        if self.has_directory() { self.buckets } else { 0 }
    }

    /// 64-bit words in the index: the buckets', then the directory's.
    pub fn index_words(&self) -> usize {
        self.pairs() + self.directory_words()
    }

    /// The largest capacity whose footprint, as `bytes_for` measures it, fits in `budget`.
    /// `bytes_for` must grow with capacity.
    pub fn largest_within(
        budget: usize,
        bytes_for: impl Fn(&Layout) -> usize,
    ) -> Result<Self, HistoryError> {
        let fits = |capacity: usize| {
            Layout::for_capacity(capacity).ok().filter(|layout| bytes_for(layout) <= budget)
        };
        let Some(mut best) = fits(1) else {
            return Err(HistoryError::BudgetTooSmall { bytes: budget });
        };
        let (mut lo, mut hi) = (1usize, MAX_CAPACITY + 1);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match fits(mid) {
                Some(layout) => {
                    best = layout;
                    lo = mid;
                }
                None => hi = mid,
            }
        }
        Ok(best)
    }
}

/// The per-instance key that re-mixes ids before they pick buckets.
///
/// Block ids are a public hash of user-controlled tokens, so an attacker can craft ids that
/// share any bits they like. Mixing them under a secret key makes bucket choice depend on the
/// secret, which is enough to defeat such flooding. The mix must also spread ids that are far
/// from random (small integers, a stride, a fixed half): the cuckoo moves fail, and residents
/// lose their slots early, when many ids agree on both their buckets, and a mix that is linear
/// in the id (one multiply) makes whole arithmetic progressions of ids agree.
///
/// On x86_64 and aarch64 the mix is two folded multiplies ([`fold`]), keyed in the first; the
/// full 128-bit product takes one instruction on x86_64 (`mul`), two on aarch64 (`mul`,
/// `umulh`). Elsewhere (wasm32 has no instruction for a product's high half, and would make it
/// in a library call) it is two keyed multiply-xorshift rounds, the mix every target used
/// before. Targets may differ: a mix lives only in one process's index, and nothing stored or
/// sent (snapshots, sync) carries it. Against those rounds, with `scripts/bench-instructions`
/// (key 7): 8.3 instructions fewer per new id at 131,072 ids and 9.2 at 8,388,608, and 6.5 and
/// 4.5 fewer per missing-first lookup.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mixer {
    k0: u64,
    k1: u64,
}

const M1: u64 = 0xbf58_476d_1ce4_e5b9;
const M2: u64 = 0x94d0_49bb_1331_11eb;
const M3: u64 = 0x9e37_79b9_7f4a_7c15;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(M3);
    z = (z ^ (z >> 30)).wrapping_mul(M1);
    z = (z ^ (z >> 27)).wrapping_mul(M2);
    z ^ (z >> 31)
}

/// The full product of `a` and `b`, its two halves XOR-ed together. The low half alone would
/// carry only the factors' low bits into its low bits; the high half brings every bit of both
/// down.
#[cfg(any(test, target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    product as u64 ^ (product >> 64) as u64
}

impl Mixer {
    pub(crate) fn new(seed: u64) -> Self {
        let k0 = splitmix(seed);
        // Odd, so never 0: the first fold by a zero key would send every id to one bucket.
        Mixer { k0, k1: splitmix(k0) | 1 }
    }

    /// `id`'s mix, from which its buckets, tag and summary bits are cut (see [`Codec`]).
    #[inline(always)]
    pub(crate) fn mix(&self, id: u64) -> u64 {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        return self.folded(id);
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        return self.shifted(id);
    }

    /// Two folded multiplies, the first by the key. One alone is not enough: for ids that
    /// differ in a few bits, the product's high half hardly moves, and the result is close to
    /// linear in the id (in an experiment the measurement log records, thousands of early
    /// evictions for ids spaced 2^32 apart; the test below fails it).
    #[cfg(any(test, target_arch = "x86_64", target_arch = "aarch64"))]
    #[inline(always)]
    fn folded(&self, id: u64) -> u64 {
        fold(fold(id ^ self.k0, self.k1), M2)
    }

    /// Two keyed multiply-xorshift rounds, for targets without a 64-bit high product.
    #[cfg(any(test, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    #[inline(always)]
    fn shifted(&self, id: u64) -> u64 {
        let mut h = id ^ self.k0;
        h = (h ^ (h >> 32)).wrapping_mul(M1);
        h = (h ^ (h >> 29) ^ self.k1).wrapping_mul(M2);
        h ^ (h >> 32)
    }
}

/// A bucket's tag summary is a small Bloom filter: 48 bits in four groups of 12, one group per
/// overflow class. An id sets two bits of its class's group, both a function of the 7 low bits
/// of its tag (the part every slot word keeps), so the writer can rebuild a summary from the
/// slot words alone. In histories of 131,072 and 1,048,576 random ids filled 30 times over,
/// both at 60% load, 21.3-21.4% of 400,000 random absent ids passed the summaries, against
/// 23.3-23.4% with 44 bits in groups of 11 (when overflow counts took 4 bits each; see
/// `bucket.rs`). At the 50% load that 131,072 ids now get ([`ROOMY_BUCKETS`]), 18.0% did.
pub(crate) const SUMMARY_BITS: u32 = 48;

/// How many classes the ids overflowing one bucket are counted in.
pub(crate) const CLASSES: u32 = 4;

/// Summary bits per class.
pub(crate) const GROUP: u32 = SUMMARY_BITS / CLASSES;

/// Pairs of bits of a group an id's summary bits may be: of the 66, the 32 that the 7 low
/// bits of a tag (four classes, so 32 values per class) can name.
const PAIRS_USED: usize = 128 / CLASSES as usize;

/// Entries of a summary table: the bits of each of the 128 tag values (or mixes' low 7 bits),
/// then none, for the index a summary rebuild gives a slot that is not live
/// ([`Codec::live_summary`]). An index of a byte needs no bounds check.
const MASKS: usize = 256;

/// The summary bits of each 7-bit tag value `v`: class `v % 4`, and pair `v / 4` of
/// [`pair_order`]`(star)`.
///
/// Which pairs a class's values take decides how often an absent id finds both its bits set by
/// other ids. Slot words keep from 3 tag bits (at the largest capacities) up, so a class
/// has from 2 to 32 distinct values, which take that many of the first pairs. With 16 or more
/// values, pairs that use every bit evenly admit the fewest absent ids; with 8 or fewer, pairs
/// that share one bit do (the other bit then names the value, and an absent id passes only
/// where another id has its value). Against the pairs in lexicographic order, which every value
/// count used before, histories in their steady state (filled with four to six times their
/// capacity of random ids) admit fewer of 400,000 random absent ids: 27.9% -> 25.7% at 131,072
/// ids, 31.9% -> 29.5% at 8,388,608 (measured with groups of 11 bits, both at 60% load).
const fn summary_masks(star: u32) -> [u64; MASKS] {
    let order = pair_order(star);
    let mut masks = [0u64; MASKS];
    let mut v = 0;
    while v < 128 {
        let class = (v % CLASSES as usize) as u32;
        let (i, j) = order[v / CLASSES as usize];
        masks[v] = (1 << (class * GROUP + i)) | (1 << (class * GROUP + j));
        v += 1;
    }
    masks
}

/// For tags of at least 6 bits (16 or more values per class): pairs of evenly used bits. Codecs
/// use it as it is from 8 bits up; 6 and 7 bits get [`NARROW_MASKS`] built from it.
static SPREAD_MASKS: [u64; MASKS] = summary_masks(0);

/// For tags of 5 bits or fewer (8 or fewer values per class): the first 8 pairs share a bit.
/// (Only in [`NARROW_MASKS`] outside the tests.)
#[cfg(test)]
static STAR_MASKS: [u64; MASKS] = summary_masks(8);

/// The tag widths below 8 bits that slot words may keep (see [`MAX_CAPACITY`]).
const NARROW_WIDTHS: core::ops::Range<u32> = 3..8;

/// A summary table for a tag width under 8 bits, indexed by a mixed id's low 7 bits rather
/// than its tag's value (see [`Codec::id_bits`]): entry `i` is the masks' entry for the tag that
/// [`Codec::tag_of`] makes of those bits, `i`'s low `width` bits, or the top tag bit alone
/// where they are all zero. Entries of actual tag values are the masks' own, so the same table
/// serves slot words. (Entry 0 also serves the empty word, whose bits a summary rebuild takes
/// when key 0 is live: it now sets the fixed-up tag's pair rather than one no id used. No answer
/// depends on which bits an empty word sets.)
const fn narrow_masks(width: u32) -> [u64; MASKS] {
    let masks = if width >= 6 { summary_masks(0) } else { summary_masks(8) };
    let mut table = [0u64; MASKS];
    let mut i = 0;
    while i < 128 {
        let v = i & ((1 << width) - 1);
        table[i] = masks[if v == 0 { 1 << (width - 1) } else { v }];
        i += 1;
    }
    table
}

/// [`narrow_masks`] of each width of [`NARROW_WIDTHS`], in order.
static NARROW_MASKS: [[u64; MASKS]; 5] =
    [narrow_masks(3), narrow_masks(4), narrow_masks(5), narrow_masks(6), narrow_masks(7)];

/// The order in which a class's values take pairs of its group's bits: first `star` pairs
/// `(0, 1)`, `(0, 2)`, ...; then each time the pair, of those not taken, whose more used bit
/// is least used so far (then whose bits are least used together; then the first such).
const fn pair_order(star: u32) -> [(u32, u32); PAIRS_USED] {
    let mut order = [(0u32, 0u32); PAIRS_USED];
    let mut used = [0u32; GROUP as usize];
    let mut taken = [[false; GROUP as usize]; GROUP as usize];
    let mut n = 0;
    while n < PAIRS_USED {
        let mut best = (0, 0);
        let mut best_key = (u32::MAX, u32::MAX);
        let mut i = 0;
        while i < GROUP {
            let mut j = i + 1;
            while j < GROUP {
                let (a, b) = (used[i as usize], used[j as usize]);
                let key = (if a > b { a } else { b }, a + b);
                let eligible = !taken[i as usize][j as usize]
                    && ((n as u32) >= star || (i == 0 && j == n as u32 + 1));
                if eligible && (key.0 < best_key.0 || (key.0 == best_key.0 && key.1 < best_key.1)) {
                    best = (i, j);
                    best_key = key;
                }
                j += 1;
            }
            i += 1;
        }
        order[n] = best;
        taken[best.0 as usize][best.1 as usize] = true;
        used[best.0 as usize] += 1;
        used[best.1 as usize] += 1;
        n += 1;
    }
    order
}

/// Where an id may live, its tag, its summary bits and its overflow class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Home {
    /// The bucket it goes to when that has room.
    pub(crate) first: usize,
    /// The mixed id, from which [`Codec::second`] works out where it overflows to: only the
    /// paths that need the second bucket (a few percent of ids) pay for it. The writer's rare
    /// paths take it in place of the home and work the home out again (see `writer.rs`).
    pub(crate) mixed: u64,
    /// The tag bits its slot word carries: non-zero, already shifted into place.
    pub(crate) tag: u32,
    /// Its two bits in a bucket's tag summary (a function of the tag; see
    /// [`Codec::id_bits`]).
    pub(crate) bits: u64,
    /// Its overflow class, `0..CLASSES`: its tag's value modulo four.
    pub(crate) class: u32,
}

impl Home {
    /// A placeholder for fixed-size arrays of homes.
    pub(crate) const NONE: Home = Home { first: 0, mixed: 0, tag: 0, bits: 0, class: 0 };
}

/// How many consecutive epochs (runs of `ring_len` insertions) a slot word's key tells apart.
const EPOCHS: u32 = 3;

/// The slot-word format for one capacity.
///
/// A slot word is `tag | key`: `key` is its insertion number modulo three ring lengths, so the
/// key modulo the ring's length is where the id sits in the ring, and `tag` (the remaining high
/// bits, never zero) filters out most other ids without reading the ring. The word `0` is an
/// empty slot.
///
/// Entries are never deleted when evicted: once `capacity` insertions have followed a slot's
/// insertion, the liveness rule ([`View::is_live`]) rejects its word, and a later
/// write to its bucket reuses the slot. Evicting an id that sits in its first bucket touches
/// no memory at all. A dead word could only look live again (alias) after three epochs without
/// its bucket reusing it; buckets reuse their slots every 1.6 epochs on average (the writer
/// keeps their round-robin moving for that reason, see `Tables::place_elsewhere`), and a
/// lookup that meets such a word still reads the ring before believing it. In a history of
/// 131,072 random ids filled 8 to 40 times over, 0.23% of the words that looked live were
/// aliases (0.045% with four epochs, before the round-robin kept moving).
///
/// Three epochs rather than four, which a 2-bit epoch beside the position's bits told apart
/// before, take one bit less at every capacity from a power of two up to two thirds of the
/// next, and as many elsewhere: a history of 8,388,608 ids keeps 7 tag bits rather than 6.
/// There, filled four times over, 23.5% of 400,000 absent ids passed the summaries rather than
/// 27.4%, and 10.8% the bucket scan rather than 18.9%. Finding the position takes two
/// compare-and-subtracts instead of a mask.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Codec {
    buckets: u64,
    /// Ring entries.
    ring: u32,
    /// The low bits of a word that hold its key.
    key_mask: u32,
    tag_shift: u32,
    /// The summary bits of each tag value, for this capacity's tag width; indexed by a tag's
    /// value or by a mixed id's low bits alike (see [`narrow_masks`]).
    masks: &'static [u64; MASKS],
}

impl Codec {
    pub(crate) fn new(layout: &Layout) -> Self {
        let tag_shift = key_bits(layout.capacity);
        Codec {
            buckets: layout.buckets as u64,
            ring: layout.ring_len() as u32,
            key_mask: (1 << tag_shift) - 1,
            tag_shift,
            masks: match u32::BITS - tag_shift {
                width if NARROW_WIDTHS.contains(&width) => {
                    &NARROW_MASKS[(width - NARROW_WIDTHS.start) as usize]
                }
                _ => &SPREAD_MASKS,
            },
        }
    }

    #[inline(always)]
    pub(crate) fn home(&self, h: u64) -> Home {
        // Multiply-shift range reduction of each 32-bit half picks the two buckets; the tag
        // is the low bits of the low half (see `tag_of`).
        let tag = self.tag_of(h);
        Home {
            first: self.first(h),
            mixed: h,
            tag,
            bits: self.id_bits(h),
            // The tag's value is the mix's low bits, or a power of two of at least 4 (3 bits
            // at the narrowest) where they are all zero: modulo four, the mix's either way.
            class: h as u32 % CLASSES,
        }
    }

    /// The bucket an id with `home` overflows to; never its first when there are two buckets
    /// or more.
    #[inline(always)]
    pub(crate) fn second(&self, home: &Home) -> usize {
        let second = (((home.mixed >> 32) * self.buckets) >> 32) as usize;
        if second != home.first || self.buckets == 1 {
            second
        } else if home.first + 1 == self.buckets as usize {
            0
        } else {
            home.first + 1
        }
    }

    /// The tag of a mixed id, in place; never zero: the lowest `32 - tag_shift` bits of `h`,
    /// shifted up. The first bucket is the top bits of the product of `h`'s low half and the
    /// bucket count, so it is set by the top `log2(buckets)` bits of that half (the others
    /// move it by at most one bucket, at a boundary). The two sets of bits stay apart at every
    /// capacity (together at most 28 of the 32; see the tests), so a bucket's ids get tags as
    /// varied as independent bits would give, without the third multiply this took before.
    #[inline(always)]
    fn tag_of(&self, h: u64) -> u32 {
        let tag = (h as u32) << self.tag_shift;
        tag | u32::from(tag == 0) << 31
    }

    /// The first bucket of a mixed id.
    #[inline(always)]
    pub(crate) fn first(&self, h: u64) -> usize {
        (((h & 0xffff_ffff) * self.buckets) >> 32) as usize
    }

    /// Just the first bucket and the summary bits of a mixed id: all a lookup of an absent id
    /// usually needs.
    #[inline(always)]
    pub(crate) fn first_and_bits(&self, h: u64) -> (usize, u64) {
        (self.first(h), self.id_bits(h))
    }

    /// The summary bits of a mixed id, those of its tag, read off the mix's low 7 bits without
    /// making the tag: a tag's value is the mix's low `32 - tag_shift` bits, or the top tag
    /// bit alone where those are all zero ([`tag_of`](Self::tag_of)). For tags of 8 bits or
    /// more the value's low 7 bits are the mix's either way; narrower tags get a table of
    /// their own that maps the mix's bits to their tag's entry ([`narrow_masks`]). Against
    /// making the tag first: 65.4 rather than 73.9 instructions per lookup whose first id is
    /// absent (`scripts/bench-instructions`, with the 44-bit summary of then).
    #[inline(always)]
    pub(crate) fn id_bits(&self, h: u64) -> u64 {
        self.masks[(h & 127) as usize]
    }

    /// The summary bits of a tag, or of the tag of a slot word (given whole). An id's come
    /// from its mix ([`id_bits`](Self::id_bits)), which gives the same; a rebuild's from
    /// [`live_summary`](Self::live_summary), which the tests check against this.
    #[cfg(test)]
    pub(crate) fn summary_bits(&self, tag: u32) -> u64 {
        self.masks[((tag >> self.tag_shift) & 127) as usize]
    }

    /// The summary bits of the words of `words` that lie in `view`'s live interval (which takes
    /// in empty words while key 0 is live: see [`View::in_interval`]), OR-ed together: a
    /// bucket's summary without its overflow bits. The header's pair is left out.
    #[inline(always)]
    pub(crate) fn live_summary(&self, words: &Pairs, view: &View) -> u64 {
        word_masks::live_summary(words, view.interval(), self.tag_shift, self.masks)
    }

    /// The tag bits of a word.
    #[inline(always)]
    pub(crate) fn tag(&self, word: u32) -> u32 {
        word & !((1 << self.tag_shift) - 1)
    }

    /// The ring position a word points to.
    #[inline(always)]
    pub(crate) fn position(&self, word: u32) -> usize {
        ring_position(word & self.key_mask, self.ring) as usize
    }

    /// The word of an id with `tag` that was insertion number `inserted`, from the format's
    /// definition: the tests' model of what [`View::word`] keeps up step by step.
    #[cfg(test)]
    fn word(&self, tag: u32, inserted: u64) -> u32 {
        tag | (inserted % (u64::from(EPOCHS) * u64::from(self.ring))) as u32
    }
}

/// The ring position of `key`, a key of a ring of `ring` entries (below three times that):
/// the key modulo the ring's length, without a division. Branch-free: which epoch a word
/// records is anyone's guess.
#[inline(always)]
fn ring_position(key: u32, ring: u32) -> u32 {
    let key = key - ring * u32::from(key >= ring);
    key - ring * u32::from(key >= ring)
}

/// [`View::calm`] for a history that is `full` or not, with a ring of `ring` entries.
fn calm(full: bool, ring: u32) -> usize {
    if full { (ring as usize).saturating_sub(3) } else { 0 }
}

/// [`View::filling`]: how many insertions from length `len` with the tail at `tail` leave the
/// history short of full and the tail short of the ring's end, none of them going to position
/// 0 (where the newest key may jump) and none into an empty history (whose first key is set by
/// that insertion).
fn filling(len: u32, tail: u32, capacity: u32, ring: u32) -> u32 {
    if len == 0 || len >= capacity || tail == 0 || tail >= ring - 1 {
        0
    } else {
        (ring - 1 - tail).min(capacity - 1 - len)
    }
}

/// Bits of a slot word's key: enough for the last key, `3 * ring_len() - 1`.
fn key_bits(capacity: usize) -> u32 {
    usize::BITS - (EPOCHS as usize * (capacity + 1) - 1).leading_zeros()
}

/// What a reader (or the writer) knows of the ring at one moment: enough to tell live slot
/// words from dead ones.
///
/// # Liveness in one comparison
///
/// The low bits of a slot word are its insertion's **key**, the insertion number modulo three
/// ring lengths. Keys of consecutive insertions are consecutive numbers, except that after
/// the last key, `3 * ring - 1`, comes 0, skipping the keys from `3 * ring` to
/// `2^key_bits - 1`, which no word ever holds. So the keys of the live insertions, the last
/// `len`, together with the skipped keys when they lie between them, form one interval modulo
/// `2^key_bits`: a word is live exactly when its key lies in that interval, which takes a
/// subtraction and a comparison (see [`View::is_live`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct View {
    /// Insertions so far.
    pub(crate) now: u64,
    /// Live entries: the last `len` insertions.
    pub(crate) len: u32,
    /// Ring position of the next insertion, `now % ring`.
    pub(crate) tail: usize,
    /// Most live entries.
    pub(crate) capacity: u32,
    /// Ring entries, `capacity + 1`: the entry at the tail is never live.
    pub(crate) ring: u32,
    /// Keys: three ring lengths.
    key_space: u32,
    /// The low bits of a slot word that hold its key.
    key_mask: u32,
    /// The key of the oldest live insertion (of the next one when there is none).
    first_key: u32,
    /// Keys from `first_key` to the newest live insertion's, both included; 0 when empty.
    keys: u32,
    /// The key of the next insertion: its slot word is its tag and this.
    tail_key: u32,
    /// While `tail - 1` is below this, an insertion only moves the view on by one (see
    /// [`advance`](View::advance)): `ring - 3` when full, else 0. (0 in a reader's view,
    /// which never moves on.)
    calm: usize,
    /// Before the history is full: how many insertions to come only add one to the length
    /// and the number of keys as well (see [`advance`](View::advance)). (0 in a reader's
    /// view.)
    filling: u32,
}

impl View {
    /// The writer's view after `now` insertions, the last `now - start` of them kept (at most
    /// `capacity`).
    pub(crate) fn new(now: u64, start: u64, capacity: usize) -> Self {
        let view = View::at(now, start, capacity, (1 << key_bits(capacity)) - 1);
        View {
            calm: calm(view.len == capacity as u32, view.ring),
            filling: filling(view.len, view.tail as u32, capacity as u32, view.ring),
            ..view
        }
    }

    /// A reader's view: the writer's, without what only moving it on needs (`calm`,
    /// `filling`), and with the codec's key mask rather than working it out: 37 fewer
    /// instructions per lookup that reads the ring's state (`scripts/bench-instructions`, whose
    /// present lookups of 34 ids went from 22.0 to 20.9 instructions per id).
    /// Readers never call [`advance`](View::advance).
    #[inline(always)]
    pub(crate) fn reader(now: u64, start: u64, codec: &Codec) -> Self {
        View::at(now, start, codec.ring as usize - 1, codec.key_mask)
    }

    /// What both views hold; `calm` and `filling` left at 0.
    #[inline(always)]
    fn at(now: u64, start: u64, capacity: usize, key_mask: u32) -> Self {
        let ring = capacity as u32 + 1;
        let key_space = EPOCHS * ring;
        let len = (now - start).min(u64::from(capacity as u32)) as u32;
        // One division: the keys needed are of insertions at most a ring's length back.
        let tail_key = (now % u64::from(key_space)) as u32;
        let key = |back: u32| {
            if back <= tail_key { tail_key - back } else { tail_key + key_space - back }
        };
        let first_key = key(len);
        let tail = ring_position(tail_key, ring);
        View {
            now,
            len,
            tail: tail as usize,
            capacity: capacity as u32,
            ring,
            key_space,
            key_mask,
            first_key,
            keys: if len == 0 { 0 } else { (key(1).wrapping_sub(first_key) & key_mask) + 1 },
            tail_key,
            calm: 0,
            filling: 0,
        }
    }

    /// The key following `key`.
    #[inline(always)]
    fn next_key(&self, key: u32) -> u32 {
        if key + 1 == self.key_space { 0 } else { key + 1 }
    }

    /// Moves the view on by one insertion; returns the ring position of the entry it evicts,
    /// if the history was full.
    ///
    /// A full history's oldest entry sits right after the tail (the ring has one entry more
    /// than the capacity). While neither the tail nor the oldest position wraps, and the
    /// newest key does not jump over the keys past the key space's end (it may when the
    /// insertion goes to position 0), the insertion moves the count, the tail and the first
    /// and next keys on by one, and the number of keys in the live interval stays. That is all
    /// but three of every `ring` insertions into a full history. Before it is full, an
    /// insertion that neither wraps the tail nor fills the history moves the length and the
    /// number of keys on by one as well, and the first key stays. The others take the general
    /// step.
    #[inline(always)]
    pub(crate) fn advance(&mut self) -> Option<usize> {
        // One comparison for `1 <= tail < ring - 2`.
        if self.tail.wrapping_sub(1) < self.calm {
            self.now += 1;
            self.tail += 1;
            self.first_key += 1;
            self.tail_key += 1;
            // The oldest entry was the one after the old tail: the new tail.
            return Some(self.tail);
        }
        if self.filling != 0 {
            self.filling -= 1;
            self.now += 1;
            self.tail += 1;
            self.len += 1;
            self.keys += 1;
            self.tail_key += 1;
            return None;
        }
        let evicted = self.is_full().then(|| self.oldest());
        *self = self.advanced();
        evicted
    }

    /// The view after one more insertion, in general (see [`advance`](View::advance)).
    #[inline(never)]
    fn advanced(&self) -> View {
        let wraps = self.tail + 1 == self.ring as usize;
        let full = self.is_full();
        // The new insertion's key.
        let newest = self.tail_key;
        let first_key = if full { self.next_key(self.first_key) } else { self.first_key };
        let first_key = if self.len == 0 { newest } else { first_key };
        let len = (self.len + 1).min(self.capacity);
        let tail = if wraps { 0 } else { self.tail + 1 };
        View {
            now: self.now + 1,
            len,
            tail,
            capacity: self.capacity,
            ring: self.ring,
            key_space: self.key_space,
            key_mask: self.key_mask,
            first_key,
            keys: (newest.wrapping_sub(first_key) & self.key_mask) + 1,
            tail_key: self.next_key(newest),
            calm: calm(len == self.capacity, self.ring),
            filling: filling(len, tail as u32, self.capacity, self.ring),
        }
    }

    /// The slot word of an id with `tag` (from [`Codec::home`]) inserted next.
    #[inline(always)]
    pub(crate) fn word(&self, tag: u32) -> u32 {
        tag | self.tail_key
    }

    /// Whether the next insertion evicts the oldest entry.
    #[inline(always)]
    pub(crate) fn is_full(&self) -> bool {
        self.len == self.capacity
    }

    /// The ring position of the oldest live entry (of the tail when there is none).
    #[inline(always)]
    pub(crate) fn oldest(&self) -> usize {
        // `tail - len`, modulo the ring; no division, this is on every insertion's path.
        let (tail, len) = (self.tail as u32, self.len);
        let wrapped = u32::from(tail < len);
        tail.wrapping_sub(len).wrapping_add(wrapped * self.ring) as usize
    }

    /// How many insertions ago the current occupant of the word's ring position was written
    /// (0 = the newest).
    #[inline(always)]
    pub(crate) fn age(&self, codec: &Codec, word: u32) -> u32 {
        self.age_at(codec.position(word))
    }

    /// How many insertions ago ring position `position` was written (0 = the newest).
    /// Branch-free: the writer evaluates it for whole buckets.
    #[inline(always)]
    pub(crate) fn age_at(&self, position: usize) -> u32 {
        let position = position as u32;
        let wrapped = u32::from(position >= self.tail as u32);
        (self.tail as u32).wrapping_sub(1).wrapping_sub(position).wrapping_add(wrapped * self.ring)
    }

    /// The ring position after `position`.
    #[inline(always)]
    pub(crate) fn next_position(&self, position: usize) -> usize {
        if position + 1 == self.ring as usize { 0 } else { position + 1 }
    }

    /// Whether `word` names the entry that currently occupies its ring position: its key lies
    /// in the live interval (see the [type docs](View)). The word 0, an empty slot, is never
    /// live.
    #[inline(always)]
    pub(crate) fn is_live(&self, word: u32) -> bool {
        (word != 0) & self.in_interval(word)
    }

    /// [`is_live`](Self::is_live) without its test for the empty slot: the word 0 passes
    /// whenever key 0 lies in the live interval. For summary rebuilds, where an empty slot
    /// taken for live only adds a pair of bits, and empty slots are rare once a bucket's
    /// round-robin has gone round.
    #[inline(always)]
    pub(crate) fn in_interval(&self, word: u32) -> bool {
        word_masks::inside(self.interval(), word)
    }

    /// [`in_interval`](Self::in_interval) for all of a bucket's words at once, as a mask with
    /// bit `s` for word `s`; then the mask of its empty words (0).
    #[inline(always)]
    pub(crate) fn in_interval_words(&self, words: &Pairs) -> (u32, u32) {
        word_masks::in_interval(words, self.interval())
    }

    /// The live interval of keys, for [`word_masks`].
    #[inline(always)]
    pub(crate) fn interval(&self) -> Interval {
        (self.first_key, self.key_mask, self.keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_grow_with_capacity_and_approach_the_target_load() {
        let mut last = 0;
        for capacity in (1..5000)
            .chain([229_376, 229_377, 258_048, 258_049, 458_752, 458_753, 550_502])
            .chain([550_503, 1 << 20, 8_388_608, MAX_CAPACITY])
        {
            let layout = Layout::for_capacity(capacity).unwrap();
            // Room for the capacity and the id an insertion is about to evict.
            assert!(layout.buckets() * BUCKET_SLOTS > capacity, "{capacity}");
            assert!(layout.buckets() >= last, "{capacity}");
            last = layout.buckets();
        }
        let load = |capacity: usize| {
            capacity as f64
                / (Layout::for_capacity(capacity).unwrap().buckets() * BUCKET_SLOTS) as f64
        };
        assert!((0.59..=0.6).contains(&load(8_388_608)), "{}", load(8_388_608));
        // Roomy up to `ROOMY_BUCKETS`, the load rising to 60% across the step, then 60%.
        for capacity in [5000, 131_072, 229_376, 258_049, 458_752] {
            assert!((0.499..=0.5).contains(&load(capacity)), "{capacity}: {}", load(capacity));
        }
        // Past the directory's bound, its words as buckets while the load rises back to 50%.
        for capacity in [229_377, 258_048] {
            let buckets = Layout::for_capacity(capacity).unwrap().buckets();
            assert_eq!(buckets, DIRECTORY_BUCKETS * 9 / 8, "{capacity}");
            assert!((0.44..=0.5).contains(&load(capacity)), "{capacity}: {}", load(capacity));
        }
        assert!(Layout::for_capacity(258_049).unwrap().buckets() > DIRECTORY_BUCKETS * 9 / 8);
        for capacity in [458_753, 500_000, 550_502] {
            assert_eq!(Layout::for_capacity(capacity).unwrap().buckets(), ROOMY_BUCKETS);
            assert!((0.5..=0.6).contains(&load(capacity)), "{capacity}: {}", load(capacity));
        }
        for capacity in [550_503, 1 << 20] {
            assert!(Layout::for_capacity(capacity).unwrap().buckets() > ROOMY_BUCKETS);
            assert!((0.59..=0.6).contains(&load(capacity)), "{capacity}: {}", load(capacity));
        }
        assert_eq!(Layout::for_capacity(0), Err(HistoryError::ZeroCapacity));
        assert!(Layout::for_capacity(MAX_CAPACITY + 1).is_err());
    }

    /// Histories whose index has at most `DIRECTORY_BUCKETS` buckets end it in a directory of
    /// one word per bucket, read in place of the bucket's header; larger ones have none.
    #[test]
    fn small_indexes_end_in_a_directory() {
        for capacity in [1, 13, 14, 5000, 131_072, 229_376, 229_377, 458_752, 8_388_608] {
            let layout = Layout::for_capacity(capacity).unwrap();
            let buckets = layout.buckets();
            let directory = buckets <= DIRECTORY_BUCKETS;
            assert_eq!(layout.has_directory(), directory, "{capacity}");
            assert_eq!(layout.directory_words(), if directory { buckets } else { 0 });
            assert_eq!(layout.index_words(), buckets * 8 + layout.directory_words());
        }
        assert!(Layout::for_capacity(229_376).unwrap().has_directory());
        assert!(!Layout::for_capacity(229_377).unwrap().has_directory());
        // The words the directory took go to buckets: the index's footprint never shrinks.
        let words = |c: usize| Layout::for_capacity(c).unwrap().index_words();
        assert_eq!(words(229_376), 9 * DIRECTORY_BUCKETS);
        assert_eq!(words(229_377), words(229_376));
        let mut last = 0;
        for capacity in 1..600_000 {
            assert!(words(capacity) >= last, "{capacity}");
            last = words(capacity);
        }
    }

    #[test]
    fn summary_masks_are_two_bits_of_their_class_group() {
        for masks in [&SPREAD_MASKS, &STAR_MASKS] {
            let mut seen = alloc::collections::BTreeSet::new();
            assert!(masks[128..].iter().all(|&mask| mask == 0), "none after the values");
            for (v, &mask) in masks[..128].iter().enumerate() {
                let class = v as u32 % CLASSES;
                assert_eq!(mask.count_ones(), 2, "{v}");
                assert_eq!(mask >> (class * GROUP) << (class * GROUP), mask, "{v}");
                assert!(mask >> ((class + 1) * GROUP) == 0, "{v}");
                seen.insert(mask);
            }
            assert_eq!(seen.len(), 128, "every tag value has its own pair");
        }
    }

    /// How often each bit of a group appears in the first `n` pairs of an order.
    fn bit_uses(order: &[(u32, u32)], n: usize) -> alloc::vec::Vec<u32> {
        let mut uses = alloc::vec![0; GROUP as usize];
        for &(i, j) in &order[..n] {
            uses[i as usize] += 1;
            uses[j as usize] += 1;
        }
        uses
    }

    #[test]
    fn pair_orders_spread_their_bits_or_share_one() {
        // Spread: whatever the tag width, the values in use (16 or 32 per class at 6 or 7
        // bits) use every bit of the group as evenly as whole pairs allow.
        let spread = pair_order(0);
        for n in [16, 32] {
            let uses = bit_uses(&spread, n);
            let (least, most) = (uses.iter().min().unwrap(), uses.iter().max().unwrap());
            assert!(most - least <= 1, "first {n} pairs: {uses:?}");
        }
        // Star: the first 8 pairs share bit 0, each with its own other bit.
        let star = pair_order(8);
        for (n, &(i, j)) in star[..8].iter().enumerate() {
            assert_eq!((i, j), (0, n as u32 + 1));
        }
        for order in [spread, star] {
            let distinct: alloc::collections::BTreeSet<_> = order.iter().collect();
            assert_eq!(distinct.len(), PAIRS_USED);
            assert!(order.iter().all(|&(i, j)| i < j && j < GROUP));
        }
        // Which pairs a codec's tags take follows its tag width.
        for (capacity, spread) in [(131_072, true), (8_388_608, true), (1 << 25, false)] {
            let codec = Codec::new(&Layout::for_capacity(capacity).unwrap());
            let masks = if spread { &SPREAD_MASKS } else { &STAR_MASKS };
            let width = u32::BITS - codec.tag_shift;
            for v in 1..(1u32 << width.min(7)) {
                assert_eq!(codec.summary_bits(v << codec.tag_shift), masks[v as usize]);
            }
        }
    }

    /// An id's summary bits and class, read off its mix, are those of its tag, at every tag
    /// width a capacity can give (3 to 29 bits), tags of all-zero low bits included.
    #[test]
    fn ids_get_the_summary_bits_and_class_of_their_tag() {
        let capacities = (0..27).map(|k| 1usize << k).chain([3, 100, 131_072 * 3, MAX_CAPACITY]);
        let mut widths = alloc::collections::BTreeSet::new();
        let mut x = 0u64;
        for capacity in capacities {
            let codec = Codec::new(&Layout::for_capacity(capacity).unwrap());
            widths.insert(u32::BITS - codec.tag_shift);
            for i in 0..2000u64 {
                x = splitmix(x);
                // Random mixes, and mixes whose low 3, 7 or tag-width bits are all zero.
                let h = match i % 4 {
                    0 => x,
                    1 => x & !0x7,
                    2 => x & !0x7f,
                    _ => x & !u64::from(codec.tag(u32::MAX) >> codec.tag_shift),
                };
                let tag = codec.tag_of(h);
                assert_eq!(codec.id_bits(h), codec.summary_bits(tag), "{capacity} {h:#x}");
                assert_eq!(codec.home(h).class, (tag >> codec.tag_shift) % CLASSES, "{h:#x}");
            }
        }
        assert_eq!(widths, (3..=29).collect(), "every tag width");
    }

    /// Ids far from random, as tests and crafted traces produce them, must spread like random
    /// ones under both mixes: first buckets as even as random ids' (a chi-square test), the
    /// summary bits' source (the mix's low 7 bits) as well, and no more ids sharing both
    /// buckets than chance gives. A single folded multiply fails this: it is close to linear in
    /// the id.
    #[test]
    fn structured_ids_spread_like_random_ones() {
        type Shape = fn(u64) -> u64;
        let shapes: [(&str, Shape); 13] = [
            ("dense", |i| i),
            ("offset", |i| i + 1_000_000_007),
            ("stride 2^8", |i| i << 8),
            ("stride 2^16", |i| i << 16),
            ("stride 2^24", |i| i << 24),
            ("stride 2^32", |i| i << 32),
            ("stride 2^40", |i| i << 40),
            ("fixed top half", |i| (0xdead_beef << 32) | i),
            ("fixed low half", |i| (i << 32) | 0xdead_beef),
            ("both halves", |i| i.wrapping_mul((1 << 32) + 1)),
            ("gray code", |i| i ^ (i >> 1)),
            ("bits reversed", |i| i.reverse_bits()),
            ("random", splitmix),
        ];
        type Mix = fn(&Mixer, u64) -> u64;
        for (mix_name, mix) in [("folded", Mixer::folded as Mix), ("shifted", Mixer::shifted)] {
            for capacity in [4096, 65_536] {
                let layout = Layout::for_capacity(capacity).unwrap();
                let (codec, buckets) = (Codec::new(&layout), layout.buckets());
                let n = capacity;
                for (shape, id) in shapes {
                    for seed in 1..=2 {
                        let mixer = Mixer::new(seed);
                        let mut loads = alloc::vec![0u64; buckets];
                        let mut low_bits = [0u64; 128];
                        let mut pairs = alloc::collections::BTreeMap::new();
                        for i in 0..n as u64 {
                            let h = mix(&mixer, id(i));
                            let home = codec.home(h);
                            loads[home.first] += 1;
                            low_bits[(h & 127) as usize] += 1;
                            let second = codec.second(&home);
                            let pair = (home.first.min(second), home.first.max(second));
                            *pairs.entry(pair).or_insert(0u64) += 1;
                        }
                        let context = alloc::format!("{mix_name}, {shape}, {capacity}, {seed}");
                        // Chi-square with k - 1 degrees of freedom: mean k - 1, deviation
                        // sqrt(2 (k - 1)); random ids come within 6 deviations.
                        let chi_square = |counts: &[u64]| {
                            let expected = n as f64 / counts.len() as f64;
                            let x: f64 = counts
                                .iter()
                                .map(|&c| (c as f64 - expected) * (c as f64 - expected) / expected)
                                .sum();
                            let k = counts.len() as f64 - 1.0;
                            (x - k) / libm::sqrt(2.0 * k)
                        };
                        assert!(chi_square(&loads) < 6.0, "first buckets: {context}");
                        assert!(chi_square(&low_bits) < 6.0, "low bits: {context}");
                        // Ids sharing both buckets, pair by pair: with p pairs of buckets,
                        // n (n - 1) / 2p expected, a Poisson count.
                        let shared: u64 = pairs.values().map(|&c| c * (c - 1) / 2).sum();
                        let p = (buckets * (buckets - 1) / 2) as f64;
                        let expected = (n * (n - 1)) as f64 / 2.0 / p;
                        assert!(
                            (shared as f64) < expected + 6.0 * libm::sqrt(expected) + 6.0,
                            "{shared} ids share both buckets, {expected:.0} expected: {context}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn largest_within_is_the_largest_that_fits() {
        let bytes = |l: &Layout| l.capacity() * 8 + l.index_words() * 8;
        // Among them budgets about the directory's bound (229,376 ids take 4 MiB this way).
        for budget in [200usize, 1000, 4096, 1 << 20, 3 << 20, 4 << 20, (4 << 20) + 8, 9 << 20] {
            let best = Layout::largest_within(budget, bytes).unwrap();
            assert!(bytes(&best) <= budget);
            let next = Layout::for_capacity(best.capacity() + 1).unwrap();
            assert!(bytes(&next) > budget, "{budget}");
        }
        assert_eq!(
            Layout::largest_within(10, bytes),
            Err(HistoryError::BudgetTooSmall { bytes: 10 })
        );
    }

    /// The tag and the first bucket come from disjoint bits of the mix's low half (see
    /// `Codec::tag_of`).
    #[test]
    fn tags_and_first_buckets_use_apart_bits() {
        let capacities = (1..100_000).chain((17..27).flat_map(|k| [(1 << k) - 1, 1 << k]));
        for capacity in capacities.chain([MAX_CAPACITY]) {
            let layout = Layout::for_capacity(capacity).unwrap();
            let codec = Codec::new(&layout);
            let bucket_bits = usize::BITS - (layout.buckets() - 1).leading_zeros();
            let tag_bits = u32::BITS - codec.tag_shift;
            assert!(bucket_bits + tag_bits <= 28 || layout.buckets() == 1, "{capacity}");
        }
    }

    #[test]
    fn homes_have_two_buckets_and_a_tag() {
        for capacity in [1, 2, 3, 16, 17, 1000, MAX_CAPACITY] {
            let layout = Layout::for_capacity(capacity).unwrap();
            let codec = Codec::new(&layout);
            let mixer = Mixer::new(capacity as u64);
            for id in 0..200u64 {
                let home = codec.home(mixer.mix(id));
                let second = codec.second(&home);
                assert!(home.first < layout.buckets() && second < layout.buckets());
                assert!(home.first != second || layout.buckets() == 1);
                assert_ne!(home.tag, 0);
                assert_eq!(home.bits.count_ones(), 2);
                assert!(home.bits < 1 << SUMMARY_BITS && home.class < CLASSES);
                assert_eq!(codec.first_and_bits(mixer.mix(id)), (home.first, home.bits));
                let ring = layout.ring_len() as u64;
                // Insertion numbers in every epoch the key tells apart, and past them.
                let inserted = id * 7919 % (7 * ring);
                let word = codec.word(home.tag, inserted);
                assert_eq!(codec.tag(word), home.tag);
                assert_eq!(codec.position(word) as u64, inserted % ring);
            }
        }
    }

    /// A key takes the fewest bits that hold three ring lengths of keys; the tags have the
    /// rest.
    #[test]
    fn keys_take_the_fewest_bits_that_hold_three_rings() {
        let capacities = (1..100_000).chain((17..27).flat_map(|k| [(1 << k) - 1, 1 << k]));
        for capacity in capacities.chain([MAX_CAPACITY]) {
            let codec = Codec::new(&Layout::for_capacity(capacity).unwrap());
            let keys = 3 * (capacity as u64 + 1);
            assert!(keys <= 1 << codec.tag_shift && keys > 1 << (codec.tag_shift - 1));
        }
        for (capacity, tag_bits) in
            [(131_072, 13), (8_388_607, 7), (8_388_608, 7), (8_388_609, 7), (MAX_CAPACITY, 3)]
        {
            let codec = Codec::new(&Layout::for_capacity(capacity).unwrap());
            assert_eq!(u32::BITS - codec.tag_shift, tag_bits, "{capacity}");
        }
    }

    /// Within three epochs of its insertion a word is live exactly while the insertion is
    /// among the last `capacity`; after that it aliases, which lookups catch by reading the
    /// ring.
    #[test]
    fn a_word_is_live_exactly_while_its_insertion_is_among_the_last_capacity() {
        for capacity in [1usize, 2, 3, 5, 7, 8, 12] {
            let codec = Codec::new(&Layout::for_capacity(capacity).unwrap());
            let ring = capacity as u64 + 1;
            let window = 3 * ring;
            for start in [0u64, 3] {
                for inserted in start..start + 10 * ring {
                    let word = codec.word(1 << 31, inserted);
                    let mut view = View::new(inserted + 1, start, capacity);
                    for now in inserted + 1..=inserted + window {
                        assert_eq!(view.now, now);
                        let fresh = View::new(now, start, capacity);
                        let fields = |v: &View| {
                            (v.len, v.tail, v.first_key, v.keys, v.tail_key, v.calm, v.filling)
                        };
                        assert_eq!(fields(&view), fields(&fresh), "{capacity} {start} {now}");
                        // A reader's view differs in what only moving on needs.
                        let reader = View::reader(now, start, &codec);
                        let shared = |v: &View| {
                            let keys = (v.key_space, v.key_mask, v.first_key, v.keys, v.tail_key);
                            (v.now, v.len, v.tail, v.capacity, v.ring, keys)
                        };
                        assert_eq!(shared(&reader), shared(&fresh), "{capacity} {start} {now}");
                        assert_eq!(view.oldest() as u64, (now - u64::from(view.len)) % ring);
                        assert_eq!(view.word(1 << 31), codec.word(1 << 31, now));
                        let live = now - inserted <= capacity as u64;
                        assert_eq!(view.is_live(word), live, "{capacity} {start} {inserted} {now}");
                        if live {
                            assert_eq!(u64::from(view.age(&codec, word)), now - 1 - inserted);
                        }
                        let oldest = view.oldest();
                        let evicted = view.advance();
                        assert_eq!(evicted, (fresh.len == capacity as u32).then_some(oldest));
                    }
                    // Three ring lengths on, the key is the newest insertion's.
                    assert!(view.is_live(word), "{capacity} {start} {inserted}");
                }
            }
            assert!(!View::new(0, 0, capacity).is_live(0));
            assert!(!View::new(5, 0, capacity).is_live(0));
        }
    }
}
