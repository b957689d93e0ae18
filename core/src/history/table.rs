//! The index and the ring shared by the writer and its readers, and the lookups.
//!
//! A lookup starts at an id's first bucket (see `bucket.rs` for a bucket's anatomy): its
//! header's summary rules most absent ids out in one 8-byte read. Otherwise one pass over the
//! slot words compares their tags with the id's, several at a time ([`Tables::scan`], with
//! `word_masks.rs`); a live slot whose tag matches leads to the ring entry, which confirms the
//! id. The second bucket is read only when the first counts overflowed ids of the id's class.
//! The writer's side (placing ids, moving residents, rebuilding summaries) is in `writer.rs`.

use super::bucket::{Header, PAIRS, SLOTS};
use super::layout::{Codec, Home, Mixer, View};
use super::word_masks;
use super::{Layout, Storage};
use crate::bits::SetBits;
use crate::prefetch::prefetch;
use crate::sync::{AtomicU64, Ordering};

/// Ids a lookup or insert handles per batch. A batch is worked through in stages, each stage
/// issuing the memory accesses the next one needs for every id of the batch at once, so that
/// their cache misses overlap instead of queueing one after another.
pub(crate) const BATCH: usize = 32;

/// What the writer and its readers share.
pub(crate) struct Shared<S> {
    pub(crate) storage: S,
    pub(crate) layout: Layout,
    pub(crate) codec: Codec,
    pub(crate) mixer: Mixer,
    /// The index word where the directory starts, or 0 when there is none: taken once from
    /// the layout, so that a large history's lookups pay one test for it. (That test, with the
    /// writer's for a copy to store, is not free: at 8,388,608 ids on the AMD EPYC VM, in five
    /// interleaved pairs against the build without a directory, missing-first lookups ran x0.93
    /// and all-new inserts x0.95-0.97, the references moving by x0.91-1.00; see
    /// `docs/history-performance.md`.)
    pub(crate) directory: usize,
    /// Insertions since construction; published before a ring entry is overwritten. The
    /// writer stores it at every insertion, so it sits on cache lines of its own: sharing one
    /// with the fields above, which every lookup reads, would send that line back and forth
    /// between the writer's core and each reader's.
    pub(crate) now: OwnLines<AtomicU64>,
    /// `now` at the last `clear`: only insertions after it are live.
    pub(crate) start: AtomicU64,
}

/// A value alone on its cache lines: 128 bytes, a line and the neighbour that some CPUs'
/// prefetchers fetch along with it.
#[repr(align(128))]
pub(crate) struct OwnLines<T>(pub(crate) T);

impl<T> core::ops::Deref for OwnLines<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// The index and the ring as one operation sees them: the storage's two slices (the index as
/// buckets) and the keys, copied out of [`Shared`].
///
/// `Shared` holds atomics, so after every atomic store made through it the compiler must
/// assume its other fields changed, and reads the storage's slices (pointer and length) again
/// before the next access. The writer's insert takes its tables once per call instead, a local
/// value no store can change: 22 instructions fewer per new id (`scripts/bench-instructions`).
/// Lookups, which store nothing, take them afresh at each step (see [`Shared::prefix`]).
#[derive(Clone, Copy)]
pub(crate) struct Tables<'a> {
    pub(crate) buckets: &'a [[AtomicU64; PAIRS]],
    pub(crate) directory: &'a [AtomicU64],
    pub(crate) ring: &'a [AtomicU64],
    pub(crate) codec: Codec,
    mixer: Mixer,
}

impl<S: Storage> Shared<S> {
    /// The tables for one operation.
    #[inline(always)]
    pub(crate) fn tables(&self) -> Tables<'_> {
        // `with_storage` checked that the index is `layout.index_words()` words: whole buckets,
        // then the directory.
        let (buckets, directory) = self.storage.index().split_at(self.layout.pairs());
        let (buckets, _) = buckets.as_chunks::<PAIRS>();
        // What `Tables::in_range` relies on.
        debug_assert_eq!(buckets.len(), self.layout.buckets());
        let (ring, codec, mixer) = (self.storage.ring(), self.codec, self.mixer);
        Tables { buckets, directory, ring, codec, mixer }
    }

    /// `id`'s mix, unless its first bucket's summary rules it out: the cheapest lookup of an
    /// absent id, one 8-byte read. (The mix saves an admitted id's lookup mixing it again.)
    /// With a directory, the summary is read from there, and the bucket prefetched at once,
    /// without waiting for it, for the ids the summary lets through.
    #[inline(always)]
    pub(crate) fn summary_admits(&self, id: u64) -> Option<u64> {
        let h = self.mixer.mix(id);
        let (first, bits) = self.codec.first_and_bits(h);
        // (Straight from the storage, without the tables' set-up: this one read is all of most
        // lookups of an absent id.)
        let index = self.storage.index();
        let summary = if self.directory == 0 {
            &index[first * PAIRS]
        } else {
            prefetch(index.as_ptr().wrapping_add(first * PAIRS));
            &index[self.directory + first]
        };
        // Ordering: Acquire pairs with the Release store of a header (or of its copy).
        let header = summary.load(Ordering::Acquire);
        Header(header).admits(bits).then_some(h)
    }

    /// The leading run of `ids` present under `view`, and the fewest insertions that could
    /// overwrite an entry it relied on (for a concurrent reader's re-check).
    ///
    /// The ids after a found one are first tried against the ring's entries after its position
    /// ([`Tables::run`]). Where the run breaks, ids go through the index: the very first alone,
    /// later ones in batches.
    ///
    /// On `Shared`, not on the [`Tables`]: each step takes the tables afresh, which keeps
    /// the compiler from copying all of them to the stack up front (a lookup usually needs
    /// only a few of their fields, once).
    ///
    /// `first`, when given, is the first id's live slot word under `view`, which the caller
    /// found ([`first_found`](Self::first_found)): the lookup goes on from the id after it.
    pub(crate) fn prefix(&self, ids: &[u64], view: &View, first: Option<u32>) -> (usize, u32) {
        let mut shortest_life = u32::MAX;
        let mut position = None;
        let mut k = 0;
        while k < ids.len() {
            if let Some(p) = position.take() {
                // The run's entries were written after `p`'s, whose life is counted already:
                // they live longer. Where it stops, `ids[k]` is not in the next entry: it goes
                // through the index, which then gives the position to walk from.
                k += self.tables().run(p, &ids[k..], view);
                continue;
            }
            if k == 0 {
                // The first id alone, without batch arrays to set up: a lookup whose first id is
                // absent reads one cache line and nothing speculative.
                let word =
                    first.or_else(|| self.tables().find(ids[0], &self.tables().home(ids[0]), view));
                let Some(word) = word else { break };
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
            *home = self.tables().home(id);
            self.tables().prefetch_bucket(home.first);
        }
        // First buckets: an id that is certainly absent ends the prefix; the others get their
        // ring entry, or their second bucket, fetched.
        let mut end = batch.len();
        let mut second = 0u64;
        for (k, home) in homes.iter().enumerate() {
            let scan = self.tables().scan(home.first, home);
            words[k] = self.tables().candidate(&scan, home, view).unwrap_or(0);
            if words[k] != 0 {
                self.tables().prefetch_entry(words[k]);
            } else if scan.overflowed {
                self.tables().prefetch_bucket(self.codec.second(home));
                second |= 1 << k;
            } else {
                end = k;
                break;
            }
        }
        for k in SetBits(second) {
            let scan = self.tables().scan(self.codec.second(&homes[k]), &homes[k]);
            match self.tables().candidate(&scan, &homes[k], view) {
                Some(word) => {
                    words[k] = word;
                    self.tables().prefetch_entry(word);
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
                word if word != 0 && self.tables().holds(word, id) => Some(word),
                _ => self.tables().find(id, home, view),
            };
            let Some(word) = word else {
                return (k, last);
            };
            *shortest_life = (*shortest_life).min(view.capacity - 1 - view.age(&self.codec, word));
            last = Some(self.codec.position(word));
        }
        (end, last)
    }

    /// A reader's first look at an id, given its mix `h`: its home and its first bucket's
    /// scan, made before the reader reads the ring's state. When the scan
    /// [rules the id out](Scan::rules_out), the lookup ends there; otherwise the scan serves
    /// its first id in [`prefix`](Self::prefix).
    #[inline(always)]
    pub(crate) fn first_scan(&self, h: u64) -> (Home, Scan) {
        let t = self.tables();
        let home = t.home_of(h);
        let scan = t.scan(home.first, &home);
        (home, scan)
    }

    /// `id`'s live slot word under `view`, given its home and a scan of its first bucket made
    /// before `view` was read ([`first_scan`](Self::first_scan)), for a reader's first id.
    /// That serves: a slot word found there only points at a ring entry, which is read after
    /// `view`, must hold the id, and must be live under `view`, exactly as for a scan made
    /// after it; and a miss is the answer at the moment of the scan.
    ///
    /// The scan is taken by value: taken by reference, it was assembled in memory (16 stores)
    /// ahead of the reader's test whether the scan rules the id out, on every admitted lookup.
    #[inline(always)]
    pub(crate) fn first_found(&self, id: u64, home: &Home, scan: Scan, view: &View) -> Option<u32> {
        self.tables().find_from(&scan, id, home, view)
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
}

/// One pass over a bucket for one id: the slot words read, those carrying its tag, and
/// whether ids of its class have overflowed from it.
///
/// Lookups use the slot words this pass read, never a second read: the header read after
/// them vouches for those words only (see [`Tables::scan`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scan {
    words: [u64; PAIRS],
    tagged: u32,
    overflowed: bool,
}

impl Scan {
    /// Whether this scan of an id's first bucket proves the id absent: no slot carries its
    /// tag, and no id of its class overflowed from the bucket. Liveness only matters for a
    /// slot with the tag, so this holds under any view of the ring: a lookup whose first id
    /// passes the summary only by chance (its bits set by other ids) ends here, before it
    /// reads the ring's state.
    #[inline(always)]
    pub(crate) fn rules_out(&self) -> bool {
        self.tagged == 0 && !self.overflowed
    }

    /// Slot word `i` as the scan read it.
    #[inline(always)]
    fn word(&self, i: usize) -> u32 {
        (self.words[i / 2] >> (32 * (i % 2))) as u32
    }
}

/// How many leading `entries` hold the leading `ids`, one by one.
#[inline(always)]
fn matching(entries: &[AtomicU64], ids: &[u64]) -> usize {
    // Ordering: Acquire, like every ring read (see `Tables::holds`).
    entries.iter().zip(ids).take_while(|(entry, id)| entry.load(Ordering::Acquire) == **id).count()
}

impl Tables<'_> {
    #[inline(always)]
    pub(crate) fn home(&self, id: u64) -> Home {
        self.home_of(self.mixer.mix(id))
    }

    /// The home of a mixed id, as [`Codec::home`] makes it, with its first bucket known to
    /// the compiler to be in range: every access to that bucket then goes without a bounds
    /// check (see [`in_range`](Self::in_range)).
    #[inline(always)]
    pub(crate) fn home_of(&self, h: u64) -> Home {
        let home = self.codec.home(h);
        self.in_range(home.first);
        home
    }

    /// [`Codec::first_and_bits`], the bucket known to be in range like
    /// [`home_of`](Self::home_of)'s.
    #[inline(always)]
    pub(crate) fn first_and_bits(&self, h: u64) -> (usize, u64) {
        let (first, bits) = self.codec.first_and_bits(h);
        self.in_range(first);
        (first, bits)
    }

    /// Tells the compiler that `bucket`, a first bucket [`Codec`] made, is one of the buckets,
    /// so that the accesses to it that follow go without a bounds check. Only for numbers
    /// straight from `Codec::first`. Debug builds check the promise (the unit, property and
    /// aarch64 suites); the loom models and the fuzz target build optimized, without it.
    ///
    /// At most one check per id is saved: the first access to a bucket is checked, and the
    /// compiler drops the later ones. But there is one on every path, and the look-ahead pass
    /// reads a batch's first buckets in a loop of sixteen instructions. Without the promise,
    /// `scripts/bench-instructions` (key 7) counted 1.6 to 5.5 instructions more per new id at
    /// 8,388,608 ids, in the builds of 2026-12-05 (the rest of the insert loop's register use
    /// moves the figure), and 0.7 more per missing-first lookup at 131,072 ids.
    #[allow(unsafe_code)]
    #[deny(clippy::undocumented_unsafe_blocks)]
    #[inline(always)]
    fn in_range(&self, bucket: usize) {
        // SAFETY: `Codec::first` is a multiply-shift of a 32-bit value by the codec's bucket
        // count, so below it. That count is the layout's (`Codec::new`); `Shared::tables` cut
        // exactly `layout.pairs()` words into buckets, the layout's count of them (it panics
        // if the storage holds fewer); and a `Shared` keeps its layout and codec unchanged.
        unsafe {
            core::hint::assert_unchecked(bucket < self.buckets.len());
        }
    }

    #[inline(always)]
    pub(super) fn pairs(&self, bucket: usize) -> &[AtomicU64; PAIRS] {
        &self.buckets[bucket]
    }

    /// Prefetches `bucket`'s line. (Without a bounds check: a bucket number comes from
    /// [`Codec`], which keeps it in range, and a prefetch of any address is harmless.)
    #[inline(always)]
    pub(super) fn prefetch_bucket(&self, bucket: usize) {
        prefetch(self.buckets.as_ptr().wrapping_add(bucket));
    }

    /// A bucket's header, for the writer.
    #[inline(always)]
    pub(super) fn header(&self, bucket: usize) -> Header {
        // Ordering: Relaxed; only the writer stores headers.
        Header(self.pairs(bucket)[0].load(Ordering::Relaxed))
    }

    /// One pass over a bucket for an id with `home`. The header is read last: a resident
    /// moving out of its first bucket is counted in the header before it leaves, so a reader
    /// that misses it in the slots it read sees the count. (Reading a slot again after the
    /// header could miss the resident in both places.)
    #[inline(always)]
    pub(crate) fn scan(&self, bucket: usize, home: &Home) -> Scan {
        let p = self.pairs(bucket);
        let high = self.codec.tag(u32::MAX);
        // Built in place, the words read straight into it: built at the end, the compiler
        // copied them from where it had spilled them into the scan (16 instructions), ahead of
        // the caller's test of `tagged`.
        let mut scan = Scan { words: [0u64; PAIRS], tagged: 0, overflowed: false };
        for (word, pair) in scan.words[1..].iter_mut().zip(&p[1..]) {
            // Ordering: Acquire pairs with the Release store of a slot word (`store`): a
            // reader that reads a word reads the ring entry written before it, and, having
            // read an emptied slot, the header count of a resident that moved out (below).
            *word = pair.load(Ordering::Acquire);
        }
        // Ordering: Acquire; a header zeroed by `clear` synchronizes with the fence there, so
        // a reader that missed an id because of it sees the new start in `still_valid`.
        // (Program order after the slot loads' Acquire already keeps this load after them.)
        let header = p[0].load(Ordering::Acquire);
        let tagged = word_masks::tagged(&scan.words, home.tag, high);
        scan.tagged = tagged & SLOTS;
        scan.overflowed = bucket == home.first && Header(header).count(home.class) != 0;
        scan
    }

    /// The first slot word among a scan's tagged slots that carries `home`'s tag and is live:
    /// the id's likely slot, before the ring confirms it.
    #[inline(always)]
    fn candidate(&self, scan: &Scan, home: &Home, view: &View) -> Option<u32> {
        for slot in SetBits(u64::from(scan.tagged)) {
            let word = scan.word(slot);
            if self.codec.tag(word) == home.tag && view.is_live(word) {
                return Some(word);
            }
        }
        None
    }

    #[inline(always)]
    pub(super) fn ring_entry(&self, word: u32) -> &AtomicU64 {
        &self.ring[self.codec.position(word)]
    }

    /// Prefetches the ring entry `word` points to (without a bounds check, like
    /// [`prefetch_bucket`](Self::prefetch_bucket)).
    #[inline(always)]
    pub(super) fn prefetch_entry(&self, word: u32) {
        prefetch(self.ring.as_ptr().wrapping_add(self.codec.position(word)));
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
        for slot in SetBits(u64::from(scan.tagged)) {
            let word = scan.word(slot);
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
            return self.search(&self.scan(self.codec.second(home), home), id, home, view);
        }
        None
    }

    /// The live slot word of `id` under `view`, if any.
    #[inline(always)]
    pub(crate) fn find(&self, id: u64, home: &Home, view: &View) -> Option<u32> {
        self.find_from(&self.scan(home.first, home), id, home, view)
    }

    /// If the ring entry after `position` holds `id` and is live, its position: `id` is then
    /// present without a look at the index. One id at a time, for the writer's batches, where
    /// each id may be new; a run of ids goes through [`run`](Self::run).
    #[inline(always)]
    pub(crate) fn walk(&self, position: usize, id: u64, view: &View) -> Option<usize> {
        let next = view.next_position(position);
        // Ordering: Acquire, like every ring read (see `holds`).
        (view.age_at(next) < view.len && self.ring[next].load(Ordering::Acquire) == id)
            .then_some(next)
    }

    /// How many leading `ids` the ring holds, live, in the entries right after `position`:
    /// exactly as many as [`walk`](Self::walk) would confirm one after another, in a loop of
    /// a load and a compare per id.
    ///
    /// This is the common case for prefix lookups: a completion inserts its new block ids in
    /// order, so the blocks of a prompt that shares that prefix usually sit in consecutive ring
    /// positions, and confirming each after the first takes one sequential read.
    ///
    /// The entries written after a live entry are all live, so one bound, taken up front,
    /// serves the whole run: as many entries as were written after `position`'s (none when
    /// `position`'s was not live, unless it was the one just evicted, whose successor is the
    /// oldest live entry).
    #[inline(always)]
    pub(crate) fn run(&self, position: usize, ids: &[u64], view: &View) -> usize {
        let newer = view.age_at(position);
        let n = if newer <= view.len { ids.len().min(newer as usize) } else { 0 };
        let start = view.next_position(position);
        let ring = self.ring;
        // The run's entries, in at most two pieces (the ring wraps).
        let first = &ring[start..ring.len().min(start + n)];
        let second = &ring[..n - first.len()];
        // No prefetches: the loop's loads do not depend on each other and its branches are
        // predicted to match, so the processor issues the loads of the lines ahead on its own.
        // (Prefetching the run's later lines up front, as the single-step walk did, took 1 to
        // 3 instructions per id more, and was no faster at 8,388,608 ids on the AMD EPYC VM.)
        let found = matching(first, ids);
        if found < first.len() {
            return found;
        }
        found + matching(second, &ids[found..])
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::History;
    use crate::history::bucket::FIRST_SLOT;
    use crate::test_rng::xorshift;

    /// A scan tags exactly the slots whose word carries the id's tag, slot by slot, whatever
    /// the other slots hold (words one tag bit off, empty words, the same key under another
    /// tag), and reads the overflow count of the id's class from the header: against a
    /// slot-by-slot model, at capacities whose tags are 20, 13 and 7 bits wide.
    #[test]
    fn a_scan_tags_exactly_the_slots_whose_word_carries_the_tag() {
        let mut state = 0x1234_5678_9abc_def0_u64;
        let mut next = move || xorshift(&mut state);
        for capacity in [1_000, 131_072, 8_388_608] {
            let h = History::with_capacity(capacity, 7).unwrap();
            let t = h.shared.tables();
            let tag_mask = t.codec.tag(u32::MAX);
            let width = tag_mask.count_ones();
            let mut tagged_seen = 0;
            for _ in 0..4_000 {
                let home = t.codec.home(next());
                let mut words = [0u32; 2 * PAIRS];
                for word in &mut words[FIRST_SLOT..] {
                    let key = next() as u32 & !tag_mask;
                    let r = next();
                    *word = match r % 5 {
                        0 => home.tag | key,
                        // One tag bit off, any of them.
                        1 => home.tag ^ 1 << (32 - width + (r >> 8) as u32 % width) | key,
                        2 => 0,
                        3 => key,
                        _ => (r >> 32) as u32,
                    };
                }
                let header = next();
                let pairs = &t.buckets[home.first];
                pairs[0].store(header, Ordering::Relaxed);
                for i in 1..PAIRS {
                    let pair = u64::from(words[2 * i]) | u64::from(words[2 * i + 1]) << 32;
                    pairs[i].store(pair, Ordering::Relaxed);
                }
                let scan = t.scan(home.first, &home);
                let want = (FIRST_SLOT..2 * PAIRS)
                    .filter(|&s| t.codec.tag(words[s]) == home.tag)
                    .fold(0u32, |mask, s| mask | 1 << s);
                assert_eq!(scan.tagged, want, "capacity {capacity}, words {words:x?}");
                assert_eq!(scan.overflowed, Header(header).count(home.class) != 0);
                for s in SetBits(u64::from(want)) {
                    assert_eq!(scan.word(s), words[s]);
                }
                tagged_seen += want.count_ones();
            }
            assert!(tagged_seen > 4_000, "capacity {capacity}: {tagged_seen} tagged slots");
        }
    }
}
