//! The writer's engine: inserting ids into the ring and the index.
//!
//! [`History::insert_all`](super::History::insert_all) walks its ids in batches: the first
//! buckets of a batch load while the previous batch is worked through, and an id found right
//! after the previous one in the ring is a duplicate without a look at the index. A new id is
//! written at the ring's tail, then placed in the index ([`Tables::place`]): its first bucket's
//! next slot (the round-robin fast path), else the first bucket's next free slot in round-robin
//! order, else its second bucket's next slot, else any free slot of the second, else a slot
//! freed by moving a resident from its first bucket to its second (cuckoo style, two levels
//! deep), and only if no move exists the oldest resident of the two buckets gives its slot up.
//! Then the insertion is published, which makes the id live and, when full, evicts the oldest.
//! The summaries of buckets whose fill fell due for a rebuild are rebuilt at the start of the
//! next batch, or of the next call, while that batch's first buckets load ([`Due`]). Every step
//! keeps the order readers rely on (see the module docs of `history` on concurrency).
//!
//! Two more kinds of cache line are fetched ahead:
//!
//! - for the evictions to come, the ring's oldest entries, and the first buckets of those that
//!   had overflowed ([`Tables::prepare_evictions`]), a batch or two ahead, at any size;
//! - in a history too large for the caches ([`LOOK_AHEAD_FROM`]), the ring entries that a
//!   batch's duplicate checks will read, and the second buckets of ids whose class overflowed
//!   ([`Tables::prefetch_duplicates`]). That takes a pass over the batch's first buckets,
//!   which costs more than it saves while everything is in the caches.
//!
//! With both, an all-new insert into a history of 8,388,608 ids took 38 ns rather than 54 on
//! the Intel Xeon VM (with the first alone, 47).

use alloc::vec::Vec;
use core::ops::Range;

use super::bucket::{FIRST_SLOT, Header, PAIRS, SLOTS, rebuild_slots};
#[cfg(test)]
use super::layout::CLASSES;
use super::layout::{BUCKET_SLOTS, BUCKET_WORDS, Home, View};
use super::table::{BATCH, Tables};
use super::word_masks::{self, Pairs};
use super::{History, HistoryError, Inserted, Storage};
use crate::bits::SetBits;
use crate::prefetch::prefetch;
use crate::sync::{AtomicU64, Ordering};

/// How often (in fills of a bucket) the writer rebuilds the bucket's summary: every seven
/// fills, twice per round of its fourteen slots, once the batch of new ids whose fill fell due
/// is placed (see [`Due`]). Rebuilding more often admits fewer absent ids but costs inserts more
/// than the lookups it saves: every four fills took 4.7% more instructions per new id than
/// every seven, for 11% fewer full scans.
const REBUILD_EVERY: usize = 7;

/// The slots whose turn marks a rebuild, every [`REBUILD_EVERY`] fills.
const REBUILD_AT: u32 = rebuild_slots(REBUILD_EVERY);

/// How many ids of a completion have their first buckets prefetched before its first id is
/// looked up alone (see `insert`), and so form its first batch if that id is new: enough to
/// overlap with that lookup's cache miss. A completion of at most this many ids is one batch
/// from the start: the batch checks its first id anyway.
const EARLY: usize = 8;

/// The ring length from which an insert prefetches, a batch at a time, the ring entries its
/// duplicate checks will read. Below it the ring and index fit in the caches and that pass over
/// the batch costs more than it saves. On the Intel Xeon VM an all-new insert took, without the
/// pass and with it: 17 and 21 ns at 131,072 ids; within half a nanosecond of each other
/// (medians) at 1 and 2 Mi; 35 and 32 ns at 4 Mi; 48 and 38 ns at 8 Mi. A machine with smaller
/// caches gains from a smaller size on.
pub(crate) const LOOK_AHEAD_FROM: usize = 1 << 20;

/// How deep the writer searches for a chain of moves that frees a slot.
///
/// No deeper than 2, or overflow counts could pass their largest value. A chain's second step
/// only looks for a free slot, so a chain never comes back to the full bucket it starts from,
/// and the one count a move adds there is the one that [`may_overflow`](Tables::may_overflow)
/// allowed when the move's candidates were collected. A chain of three could come back: it
/// would move another resident of that bucket out first, counted in the same class, and a
/// count at its largest value would carry into the next field (`Header::counted` asserts it
/// does not, in debug builds).
const MOVE_DEPTH: u32 = 2;
const _: () = assert!(MOVE_DEPTH <= 2);

/// A bucket's next slot, free, as [`Tables::next_free`] read it: the bucket's header, the slot,
/// and the 64-bit word holding it and its neighbour, which filling it rewrites.
#[derive(Clone, Copy)]
struct NextSlot {
    header: Header,
    slot: usize,
    /// The pair turned so that the slot's word is its low half.
    turned: u64,
    /// How far it was turned (right): 32 for a slot in the high half, else 0.
    turn: u32,
}

impl NextSlot {
    #[inline(always)]
    fn new(header: Header, slot: usize, pair: u64) -> Self {
        let turn = 32 * (slot as u32 % 2);
        NextSlot { header, slot, turned: pair.rotate_right(turn), turn }
    }

    /// The slot's word.
    #[inline(always)]
    fn word(&self) -> u32 {
        self.turned as u32
    }

    /// The pair with `word` in the slot.
    #[inline(always)]
    fn pair_with(&self, word: u32) -> u64 {
        (self.turned & !0xffff_ffff | u64::from(word)).rotate_left(self.turn)
    }
}

/// The buckets whose summaries fell due for a rebuild (every [`REBUILD_EVERY`] fills) while a
/// batch of new ids was placed: they are rebuilt together when the next batch starts, in this
/// call or the next, once that batch's first buckets are loading. Which fill of a bucket is due
/// cannot be predicted, and a branch on it at every fill was mispredicted about once in seven;
/// noting the bucket takes none. Rebuilding the last batch's buckets at the start of the next
/// call rather than at the end of this one gives their work a cache miss to hide behind: on
/// the Intel Xeon VM, completions of 4 new ids went into a history of 8,388,608 ids x1.06
/// faster.
///
/// Putting a rebuild off is safe: until it happens the summary keeps bits of ids that are gone,
/// which only lets more absent ids through to the bucket's slots.
#[derive(Debug)]
pub(crate) struct Due {
    buckets: [usize; BATCH],
    len: usize,
}

impl Due {
    pub(crate) const fn new() -> Self {
        Due { buckets: [0; BATCH], len: 0 }
    }

    /// Notes `bucket` if `due`, without a branch. At most one bucket is noted per id of a
    /// batch, and the list is emptied before each batch, so it never wraps round.
    #[inline(always)]
    fn note(&mut self, bucket: usize, due: bool) {
        self.buckets[self.len % BATCH] = bucket;
        self.len += usize::from(due);
    }

    /// The buckets noted since the last call, oldest first; empties the list.
    #[inline(always)]
    fn take(&mut self) -> &[usize] {
        let len = core::mem::take(&mut self.len);
        &self.buckets[..len]
    }
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

    /// Clears the flag at `position`; returns whether it was set. (Rarely: the word is written
    /// only then.)
    #[inline(always)]
    pub(crate) fn take(&mut self, position: usize) -> bool {
        let (word, bit) = (&mut self.0[position / 64], 1 << (position % 64));
        let was = *word & bit != 0;
        if was {
            *word &= !bit;
        }
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
        if n > before_wrap {
            self.for_each_set_in(0, n - before_wrap, &mut f);
        }
    }

    fn for_each_set_in(&self, from: usize, to: usize, f: &mut impl FnMut(usize)) {
        let mut i = from;
        while i < to {
            let span = (64 - i % 64).min(to - i);
            let bits = (self.0[i / 64] >> (i % 64)) & (u64::MAX >> (64 - span));
            SetBits(bits).for_each(|bit| f(i + bit));
            i += span;
        }
    }
}

impl<S: Storage> History<S> {
    /// [`insert_all`](History::insert_all)'s engine. Not inlined into callers: kept whole, it
    /// inlines `push` and the placement fast path into one loop.
    pub(super) fn insert(&mut self, ids: &[u64]) -> Inserted {
        let mut out = Inserted::default();
        // The shared part is borrowed alongside the writer's own fields, which `push` changes;
        // its tables are taken once for the whole call (see `Tables`).
        let shared = &*self.shared;
        let s = shared.tables();
        // The writer's view, in a local for the call (written back at the end), like the
        // tables: kept in registers rather than read through `self` after every store.
        let mut view = self.view;
        // Ring position of the previous id (present or just inserted), for the ring walk.
        let mut position = None;
        let mut k = 0;
        // The first id alone, in a completion of more than `EARLY` ids: if it is a duplicate,
        // the ids after it are usually found by walking the ring, and batching them through
        // the index would be wasted work. If it is new, it is inserted at once, not checked
        // again in a batch. The first buckets of a few ids after it start loading meanwhile:
        // they form the first batch if the first id is new, and were loaded for nothing if it
        // is not. A shorter completion is that one batch from the start, its first id
        // included: a look of its own would save it nothing. `loading[i]` is the mix of
        // `ids[ahead.start + i]`; `current` holds the mixes of the batch being worked through.
        let [loading, current] = &mut self.mixes;
        let (mut loading, mut current) = (loading, current);
        let mut ahead = 0..ids.len().min(EARLY);
        s.mix_and_prefetch(&ids[ahead.clone()], loading);
        // The summaries that fell due in the last call's last batch, while these lines load.
        s.rebuild_due(&mut self.due, &view);
        if let Some(&id) = ids.first().filter(|_| ids.len() > EARLY) {
            let home = s.home_of(loading[0]);
            let first = s.header(home.first);
            match first.admits(home.bits).then(|| s.find(id, &home, &view)).flatten() {
                Some(word) => position = Some(s.codec.position(word)),
                None => {
                    out.new += 1;
                    Self::push_apart(
                        &s,
                        &shared.now,
                        &mut view,
                        &mut self.overflowed,
                        &mut self.forced,
                        &mut self.due,
                        id,
                        home.mixed,
                        first,
                    );
                }
            }
            k = 1;
        }
        while k < ids.len() {
            // Ids that sit right after the previous one in the ring are duplicates, found
            // without the index (see `Tables::run`). Where the run stops, the next id is not
            // in the next entry, so the batch starts without a position to walk from.
            if let Some(p) = position.take() {
                k += s.run(p, &ids[k..], &view);
                continue;
            }
            if !ahead.contains(&k) {
                // The ring walk went past the ids already loading: this batch starts at `k`.
                ahead = k..ids.len().min(k + BATCH);
                s.mix_and_prefetch(&ids[ahead.clone()], loading);
            }
            let (end, offset) = (ahead.end, k - ahead.start);
            // This batch's mixes become `current` (the two arrays swap places, no copy), and
            // the next batch's first buckets start loading while this one is worked through.
            core::mem::swap(&mut loading, &mut current);
            ahead = end..ids.len().min(end + BATCH);
            s.mix_and_prefetch(&ids[ahead.clone()], loading);
            let batch = &ids[k..end];
            if view.is_full() {
                // The evictions of this batch and the next, by the insertion numbers of the
                // entries they evict (the oldest is `now - len`).
                let oldest = view.now - u64::from(view.len);
                let want = oldest + (batch.len() + BATCH).min(view.ring as usize) as u64;
                if self.prepared < want {
                    let from = self.prepared.max(oldest);
                    s.prepare_evictions(
                        view.oldest(),
                        view.ring as usize,
                        (from - oldest) as usize..(want - oldest) as usize,
                        &self.overflowed,
                    );
                    self.prepared = want;
                }
            }
            // The summaries that fell due in the batch before, while the next one's lines load.
            s.rebuild_due(&mut self.due, &view);
            // Not for a short batch: its lines would be needed right after they were asked for.
            if self.look_ahead && batch.len() > EARLY {
                s.prefetch_duplicates(current, offset..offset + batch.len(), &view);
            }
            for (&id, &h) in batch.iter().zip(&current[offset..]) {
                // Its home, from its mix: the second bucket, which a few percent of new ids
                // need, is worked out only where they need it (`Codec::second`).
                let home = &s.home_of(h);
                if let Some(found) = position.and_then(|p| s.walk(p, id, &view)) {
                    position = Some(found);
                    continue;
                }
                // Most new ids are ruled out by their first bucket's summary alone. The header
                // read here serves the placement too (only the writer changes it).
                let first = s.header(home.first);
                if first.admits(home.bits)
                    && let Some(word) = s.find(id, home, &view)
                {
                    position = Some(s.codec.position(word));
                    continue;
                }
                out.new += 1;
                // The ring entry after a new id is the tail, never live: no walk from here.
                position = None;
                Self::push(
                    &s,
                    &shared.now,
                    &mut view,
                    &mut self.overflowed,
                    &mut self.forced,
                    &mut self.due,
                    id,
                    home,
                    first,
                );
            }
            k += batch.len();
        }
        // Each new id evicted one exactly when the ring was full: those beyond the room left.
        out.evicted = (self.view.len as usize + out.new).saturating_sub(view.capacity as usize);
        self.view = view;
        out
    }

    /// [`push`](Self::push) for a completion's first id, when it is new, out of line: inlined
    /// there too, it made the insert's set-up heavier for every completion (an all-duplicate
    /// completion of 34 ids took 22.91 instructions per id rather than 22.35). `mixed` is the
    /// id's mix (see `Tables::place_elsewhere` on why not its home).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn push_apart(
        s: &Tables<'_>,
        now: &AtomicU64,
        view: &mut View,
        flags: &mut OverflowFlags,
        forced: &mut u64,
        due: &mut Due,
        id: u64,
        mixed: u64,
        first: Header,
    ) {
        Self::push(s, now, view, flags, forced, due, id, &s.home_of(mixed), first);
    }

    /// Writes a new id into the ring entry at the tail and indexes it, then publishes the
    /// insertion, which makes the id live and, when full, evicts the oldest. `first` is the
    /// id's first bucket's header as the caller read it.
    // The writer's fields and locals, borrowed apart: bundling two of them (returning the
    // forced eviction instead of counting it here) cost 4 instructions more per new id. Always
    // inlined: with a second caller, the compiler otherwise calls it from the insert loop
    // too (46 instructions more per new id).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn push(
        s: &Tables<'_>,
        now: &AtomicU64,
        view: &mut View,
        flags: &mut OverflowFlags,
        forced: &mut u64,
        due: &mut Due,
        id: u64,
        home: &Home,
        first: Header,
    ) {
        let position = view.tail;
        let word = view.word(home.tag);
        // The tail entry is live in no reader's view: it holds the id evicted one insertion
        // ago, or an older one. Ordering: Release; a reader whose view is older than that
        // eviction (or than a `clear`) and reads the new id here (Acquire) also reads the
        // count (or start) published before this store, and `still_valid` rejects its view.
        s.ring[position].store(id, Ordering::Release);
        // Indexed under the current view, in which the id this insertion evicts is still
        // live, so that its slot is not reused while readers may still look it up.
        let placed = s.place(home, first, word, view, flags, due);
        let overflowed = placed.unwrap_or_else(|| {
            let (overflowed, early) = s.give_up_oldest(home.mixed, word, view);
            *forced += u64::from(early);
            overflowed
        });
        if overflowed {
            flags.set(position);
        }
        let evicted = view.advance();
        // The moment of the insertion for readers. Ordering: Release publishes the entry
        // and slot word written above: a reader whose view includes this insertion (its
        // Acquire load read this count or a later one) finds the new id, and no longer
        // counts the evicted one live.
        now.store(view.now, Ordering::Release);
        if let Some(evicted) = evicted
            && flags.take(evicted)
        {
            // The evicted id sat in its second bucket; its first bucket's count goes down
            // only now that no new view counts it. Ordering: Relaxed; the writer reads its
            // own store.
            s.forget_overflow(s.ring[evicted].load(Ordering::Relaxed));
        }
    }
}

impl Tables<'_> {
    /// Word `i` of `bucket`, for the writer.
    #[inline(always)]
    pub(super) fn word(&self, bucket: usize, i: usize) -> u32 {
        // Ordering: Relaxed; only the writer stores slot words. (Readers read slots only
        // through `scan`.)
        (self.pairs(bucket)[i / 2].load(Ordering::Relaxed) >> (32 * (i % 2))) as u32
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

    #[inline(always)]
    fn store_header(&self, bucket: usize, header: Header) {
        // Ordering: Release; a reader that sees a count sees the slot it counts written.
        self.pairs(bucket)[0].store(header.0, Ordering::Release);
        // Then its copy in the directory, if any, from which lookups read the summary: until
        // that store, a new id is not yet published (the insertion count follows it), and
        // bits a rebuild clears stay set a moment longer, which only lets more ids through.
        if let Some(copy) = self.directory.get(bucket) {
            copy.store(header.0, Ordering::Release);
        }
    }

    /// Whether one more id of `home`'s class may be counted as overflowed from its first
    /// bucket to `second`, its second bucket (`Codec::second`).
    fn may_overflow(&self, home: &Home, second: usize) -> bool {
        second != home.first && self.header(home.first).can_count(home.class)
    }

    /// Counts `home`'s id as overflowed from its first bucket (and sets its summary bits
    /// there).
    fn count_overflow(&self, home: &Home) {
        self.store_header(home.first, self.header(home.first).counted(home.class, home.bits));
    }

    /// Counts `home`'s id as no longer overflowed from its first bucket.
    fn uncount_overflow(&self, home: &Home) {
        self.store_header(home.first, self.header(home.first).uncounted(home.class));
    }

    /// The writer's side of an eviction: the id leaving the ring had overflowed, so its first
    /// bucket's count goes down.
    pub(crate) fn forget_overflow(&self, evicted: u64) {
        self.uncount_overflow(&self.home(evicted));
    }

    /// The slot `bucket` fills next, if it is free (its id dead): the fast path of every
    /// insert. `header` is the bucket's header as the writer last read it.
    #[inline(always)]
    fn next_free(&self, bucket: usize, header: Header, view: &View) -> Option<NextSlot> {
        let slot = header.next_slot();
        // Ordering: Relaxed; only the writer stores slot words.
        let pair = self.pairs(bucket)[slot / 2].load(Ordering::Relaxed);
        let next = NextSlot::new(header, slot, pair);
        (!view.is_live(next.word())).then_some(next)
    }

    /// Puts `word` of an id with `home` into `next`, the slot `bucket` fills next, and moves
    /// the bucket's round-robin on. Returns whether the bucket's summary is due for a rebuild
    /// from what is live (every few fills, so that bits of evicted ids go). The header is
    /// stored first, then the word, so that a reader that finds the word also finds the
    /// summary bits.
    #[inline(always)]
    fn fill_next(&self, bucket: usize, next: NextSlot, word: u32, home: &Home) -> bool {
        let (header, rebuild) = next.header.with_bits(home.bits).filled(next.slot, REBUILD_AT);
        self.store_header(bucket, header);
        // Ordering: Release, as in `store`.
        self.pairs(bucket)[next.slot / 2].store(next.pair_with(word), Ordering::Release);
        rebuild
    }

    /// [`fill_next`](Self::fill_next), rebuilding the summary at once if due (the slow paths).
    /// The new id is not live under `view`, which it has not yet entered: its bits are kept.
    fn fill_next_now(&self, bucket: usize, next: NextSlot, word: u32, home: &Home, view: &View) {
        if self.fill_next(bucket, next, word, home) {
            self.rebuild(bucket, view, home.bits);
        }
    }

    /// Rebuilds the summaries of the buckets `due` noted, from what is live under `view`, and
    /// empties it.
    #[inline(always)]
    fn rebuild_due(&self, due: &mut Due, view: &View) {
        for &bucket in due.take() {
            self.rebuild(bucket, view, 0);
        }
    }

    /// Rebuilds `bucket`'s summary from its slots live under `view`, plus `bits`.
    #[inline(never)]
    fn rebuild(&self, bucket: usize, view: &View, bits: u64) {
        let header = self.header(bucket);
        self.store_header(bucket, header.with_summary(self.summary(bucket, header, view) | bits));
    }

    /// Puts `word` of an id with `home` into `slot`, any free slot of `bucket` (after a move,
    /// or over a resident given up): the bucket's round-robin stays where it was.
    fn fill_at(&self, bucket: usize, slot: usize, word: u32, home: &Home) {
        self.store_header(bucket, self.header(bucket).with_bits(home.bits));
        self.store(bucket, slot, word);
    }

    /// The summary of a bucket: the bits of its live slots (and of its empty ones, when key 0
    /// is live: see `View::in_interval`) and, for every class with overflowed ids, the bits it
    /// has set.
    #[inline(always)]
    fn summary(&self, bucket: usize, header: Header, view: &View) -> u64 {
        self.codec.live_summary(&self.words(bucket), view) | header.overflow_summary()
    }

    /// `bucket`'s slot words as pairs, the header's pair left 0.
    #[inline(always)]
    fn words(&self, bucket: usize) -> Pairs {
        let mut words = [0; PAIRS];
        for (word, pair) in words[1..].iter_mut().zip(&self.pairs(bucket)[1..]) {
            // Ordering: Relaxed; the writer reads its own stores.
            *word = pair.load(Ordering::Relaxed);
        }
        words
    }

    /// The first free slot of `bucket` after its next slot, in round-robin order (the next
    /// slot itself being taken).
    fn later_free(&self, bucket: usize, header: Header, view: &View) -> Option<NextSlot> {
        let free = !self.live(bucket, view) & SLOTS;
        if free == 0 {
            return None;
        }
        let after = free & !((1 << header.next_slot()) - 1);
        let slot = if after != 0 { after } else { free }.trailing_zeros() as usize;
        // Ordering: Relaxed; only the writer stores slot words.
        let pair = self.pairs(bucket)[slot / 2].load(Ordering::Relaxed);
        Some(NextSlot::new(header, slot, pair))
    }

    /// The live slots of `bucket`, as a mask (the slow path: every slot's age).
    fn live(&self, bucket: usize, view: &View) -> u32 {
        let (inside, empty) = view.in_interval_words(&self.words(bucket));
        inside & !empty & SLOTS
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
    /// Preference order: the first bucket's next slot, its next free slot in round-robin order,
    /// the second bucket's next slot, any free slot of the second, then a slot freed by moving
    /// residents (rare: it reads their ring entries).
    #[inline(always)]
    pub(crate) fn place(
        &self,
        home: &Home,
        first: Header,
        word: u32,
        view: &View,
        flags: &mut OverflowFlags,
        due: &mut Due,
    ) -> Option<bool> {
        if let Some(next) = self.next_free(home.first, first, view) {
            due.note(home.first, self.fill_next(home.first, next, word, home));
            return Some(false);
        }
        self.place_elsewhere(home.mixed, first, word, view, flags)
    }

    /// [`place`](Self::place) when the first bucket's next slot is taken (a few percent of
    /// new ids).
    ///
    /// The round-robin moves on to the first bucket's next free slot, if it has one, rather
    /// than sending the id to its second bucket while the next slot stays taken. That could
    /// last up to an epoch, in which the bucket's other slots keep ever older dead words, which
    /// then may alias (see `Codec`) and hold the round-robin up in turn. Fewer ids overflow,
    /// so fewer lookups read second buckets and fewer summaries keep overflowed ids' bits:
    /// in a history of 131,072 random ids (at 60% load) filled 64 times over, during the next
    /// fill 2.6% of new ids went past their first bucket rather than 3.4%, and of 400,000
    /// absent ids 23.3% passed the summaries rather than 23.8%, 2.4% the scans rather than
    /// 2.9%.
    ///
    /// It takes the id's mix and works the home out again, rather than a reference to the
    /// home: for that reference the insert loop wrote every new id's home to the stack (five
    /// stores), and its registers came out worse. With the mix (here, in `give_up_oldest` and
    /// in `push_apart`), `scripts/bench-instructions` (key 7) counted 3.7 to 3.9 fewer
    /// instructions per new id at both sizes, and 0.1 and 0.6 more per duplicate.
    #[inline(never)]
    fn place_elsewhere(
        &self,
        mixed: u64,
        first: Header,
        word: u32,
        view: &View,
        flags: &mut OverflowFlags,
    ) -> Option<bool> {
        let home = &self.home_of(mixed);
        if let Some(next) = self.later_free(home.first, first, view) {
            self.fill_next_now(home.first, next, word, home, view);
            return Some(false);
        }
        let second = self.codec.second(home);
        let may_overflow = self.may_overflow(home, second);
        if let Some(next) =
            self.next_free(second, self.header(second), view).filter(|_| may_overflow)
        {
            // Counted (and the summary bit set) in the first bucket before the word appears in
            // the second, so a reader that finds the id also knows to look there. (`next` holds
            // the second bucket's header and slot pair, which this leaves as they were.)
            self.count_overflow(home);
            self.fill_next_now(second, next, word, home, view);
            return Some(true);
        }
        for (bucket, overflows) in [(home.first, false), (second, true)] {
            if overflows && !may_overflow {
                break;
            }
            // The first bucket has no free slot (`later_free` found none).
            let free = if overflows { self.any_free(bucket, view) } else { None };
            let slot = free.or_else(|| {
                self.make_room(bucket, MOVE_DEPTH, view, flags)
                    .then(|| self.any_free(bucket, view))
                    .flatten()
            });
            if let Some(slot) = slot {
                if overflows {
                    self.count_overflow(home);
                }
                self.fill_at(bucket, slot, word, home);
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
        // Residents that may move: their slot, home and second bucket.
        let mut movable = [(0usize, Home::NONE, 0usize); BUCKET_SLOTS];
        let mut count = 0;
        for (slot, &word) in words.iter().enumerate().skip(FIRST_SLOT) {
            let position = self.codec.position(word);
            // Ordering: Relaxed; the writer reads its own stores.
            let id = self.ring[position].load(Ordering::Relaxed);
            let home = self.home(id);
            let second = self.codec.second(&home);
            // A dead word aliasing a live ring position names no resident: its id has another
            // tag, or other buckets, or (rarely: the same tag too) is the live id of the
            // position but overflowed, so that its word sits in its second bucket, not here.
            // Moved as a resident, such a word would count its id overflowed a second time.
            if self.codec.tag(word) != home.tag
                || (home.first != bucket && second != bucket)
                || (home.first == bucket && flags.get(position))
            {
                self.store(bucket, slot, 0);
                return true;
            }
            if home.first == bucket && self.may_overflow(&home, second) {
                movable[count] = (slot, home, second);
                count += 1;
            }
        }
        for pass in 0..2 {
            for &(slot, home, second) in &movable[..count] {
                if self.word(bucket, slot) != words[slot] {
                    // A deeper move went through this bucket; it may have room now.
                    if self.any_free(bucket, view).is_some() {
                        return true;
                    }
                    continue;
                }
                let room =
                    pass == 0 || (depth > 1 && self.make_room(second, depth - 1, view, flags));
                let Some(target) = room.then(|| self.any_free(second, view)).flatten() else {
                    continue;
                };
                // Into the second bucket, counted, and only then out of the first: a reader
                // that misses it in the first bucket's slots sees the count.
                self.fill_at(second, target, words[slot], &home);
                self.count_overflow(&home);
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
    ///
    /// In a full history the oldest is that id, and then nothing is lost, though its slot goes
    /// a moment before the insertion that evicts it is published: a concurrent reader may miss
    /// it in the index meanwhile (see the module docs). Sparing it for the next oldest was
    /// tried (9629513) and undone: that id then loses its slot for good, up to a whole turn of
    /// the ring early, which every caller, not only a concurrent reader, sees.
    ///
    /// `mixed` is the new id's mix (see `place_elsewhere` on why not its home).
    pub(crate) fn give_up_oldest(&self, mixed: u64, word: u32, view: &View) -> (bool, bool) {
        let home = &self.home_of(mixed);
        let second = self.codec.second(home);
        let buckets: &[usize] =
            if self.may_overflow(home, second) { &[home.first, second] } else { &[home.first] };
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
            self.count_overflow(home);
        }
        self.fill_at(best.0, best.1, word, home);
        let due = view.is_full() && best.2 == view.len - 1;
        (overflowed, !due)
    }

    /// Prefetches, for a batch of ids about to be inserted (their mixes, `mixes[batch]`), the
    /// ring entries their duplicate checks will read, and the second buckets of those whose
    /// class overflowed. First a pass over the batch's first buckets, which are loaded or
    /// loading, finds which ids their summaries admit: without a branch on what it reads, so
    /// that the batch's loads overlap; then the admitted ones (a fifth of new ids in
    /// `scripts/bench-instructions` at 1 and 8 Mi ids) are scanned for live slots with their
    /// tag.
    #[inline(never)]
    fn prefetch_duplicates(&self, mixes: &[u64; BATCH], batch: Range<usize>, view: &View) {
        const _: () = assert!(BATCH <= u64::BITS as usize);
        let mut admitted = 0u64;
        for (i, &h) in mixes[batch.clone()].iter().enumerate() {
            let (first, bits) = self.first_and_bits(h);
            admitted |= u64::from(self.header(first).admits(bits)) << i;
        }
        for i in SetBits(admitted << batch.start) {
            // (`i % BATCH` is `i`, and tells the compiler so: no bounds check.)
            self.prefetch_candidates(&self.home_of(mixes[i % BATCH]), view);
        }
    }

    /// Prefetches what the duplicate check of an id with `home`, which its first bucket's
    /// summary admits, will read: the ring entries its live tagged slots point to and, if ids
    /// of its class overflowed, its second bucket. Like a lookup's scan, but the writer's:
    /// the words are read again where a tag matches (rarely) rather than kept.
    #[inline(always)]
    fn prefetch_candidates(&self, home: &Home, view: &View) {
        let words = self.words(home.first);
        let tagged = word_masks::tagged(&words, home.tag, self.codec.tag(u32::MAX)) & SLOTS;
        for slot in SetBits(u64::from(tagged)) {
            let word = self.word(home.first, slot);
            if view.is_live(word) {
                self.prefetch_entry(word);
            }
        }
        if self.header(home.first).count(home.class) != 0 {
            self.prefetch_bucket(self.codec.second(home));
        }
    }

    /// Prepares the evictions of the entries `ahead` (counted from the oldest, at ring position
    /// `oldest`, of a ring of `len` entries) of a full history.
    ///
    /// An entry that had overflowed ([`OverflowFlags`]) will, when evicted, take its first
    /// bucket's count down: that bucket is prefetched. Finding it reads the entry's id from the
    /// ring, whose oldest entries were written a whole ring of insertions ago and are long out
    /// of the caches; and the flags are sparse, so the hardware's stream prefetch does not
    /// fetch those lines in time. So the ring's lines are prefetched a batch further ahead
    /// still, for the reads of later batches.
    #[inline(always)]
    pub(crate) fn prepare_evictions(
        &self,
        oldest: usize,
        len: usize,
        ahead: core::ops::Range<usize>,
        flags: &OverflowFlags,
    ) {
        let wrap = |p: usize| if p >= len { p - len } else { p };
        // One entry per cache line of the ring (8 entries of 8 bytes).
        let mut next = ahead.start + BATCH;
        while next < (ahead.end + BATCH).min(len) {
            prefetch(&self.ring[wrap(oldest + next)]);
            next += 8;
        }
        flags.for_each_set(wrap(oldest + ahead.start), ahead.len(), len, |position| {
            // Ordering: Relaxed; the writer reads its own stores.
            let evicted = self.ring[position].load(Ordering::Relaxed);
            self.prefetch_bucket(self.home(evicted).first);
        });
    }

    /// Empties every bucket.
    ///
    /// Words already zero are only read, not written: clearing a history that never filled
    /// leaves the pages it never touched untouched (not resident), and a clear costs readers
    /// (and the loom models) only the words that held something.
    pub(crate) fn clear(&self) {
        for word in self.buckets.iter().flatten().chain(self.directory) {
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
impl Tables<'_> {
    /// The total overflow count of a bucket, over its classes.
    pub(crate) fn overflow_count(&self, bucket: usize) -> u64 {
        let header = self.header(bucket);
        (0..CLASSES).map(|class| header.count(class)).sum()
    }

    /// Checks that every bucket's counts are exactly the live ids flagged as overflowed whose
    /// first bucket it is, class by class, that every live id's summary bit is set in its
    /// first bucket (and, when it sits there, in its second), and that the directory, if any,
    /// holds every header as it is; panics otherwise.
    pub(crate) fn check_overflow_counts(&self, view: &View, flags: &OverflowFlags) {
        let buckets = self.buckets.len();
        let mut expected = alloc::vec![[0u64; CLASSES as usize]; buckets];
        let ring = view.ring as usize;
        for age in 0..view.len as usize {
            let position = (view.tail + ring - 1 - age) % ring;
            // Ordering: Relaxed; a check run by the writer, which reads its own stores.
            let id = self.ring[position].load(Ordering::Relaxed);
            let home = self.home(id);
            assert!(self.header(home.first).admits(home.bits), "summary bits of {id}");
            if flags.get(position) {
                expected[home.first][home.class as usize] += 1;
                assert!(
                    self.header(self.codec.second(&home)).admits(home.bits),
                    "summary bits of {id}"
                );
            }
        }
        for (bucket, want) in expected.iter().enumerate() {
            let header = self.header(bucket);
            for (class, &want) in want.iter().enumerate() {
                assert_eq!(header.count(class as u32), want, "bucket {bucket} class {class}");
            }
            if let Some(copy) = self.directory.get(bucket) {
                // Ordering: Relaxed, as above.
                assert_eq!(copy.load(Ordering::Relaxed), header.0, "directory of {bucket}");
            }
        }
        assert!(self.directory.is_empty() || self.directory.len() == buckets);
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::history::tests::{SEED, ids_homed_at};
    use crate::test_rng::xorshift;

    /// The due list keeps exactly the buckets noted as due, in order, for batches of any
    /// length up to a full one, against a filtered list.
    #[test]
    fn the_due_list_keeps_the_buckets_noted_due() {
        let mut due = Due::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for case in 0..500 {
            xorshift(&mut rng);
            let notes: Vec<(usize, bool)> = (0..case % (BATCH + 1))
                .map(|i| (i * 31 + case, rng >> (i % 64) & 1 != 0))
                .collect();
            for &(bucket, is_due) in &notes {
                due.note(bucket, is_due);
            }
            let want: Vec<usize> =
                notes.iter().filter(|(_, is_due)| *is_due).map(|&(b, _)| b).collect();
            assert_eq!(due.take(), &want[..], "case {case}");
            assert!(due.take().is_empty(), "case {case}");
        }
    }

    /// A dead slot word can name a live ring position again, with its tag (an alias: see
    /// `Codec` in `layout.rs`). When the position's id overflowed, so that its own word sits in
    /// its second bucket, such a copy in its first bucket is no resident: making room there
    /// must drop it, not move it on and count the id overflowed twice.
    #[test]
    fn making_room_drops_a_dead_copy_of_an_overflowed_ids_word() {
        let capacity = 200;
        let mut h = History::with_capacity(capacity, SEED).unwrap();
        // Bucket 1 full; `z` overflows to bucket 2; bucket 3 full; then ids homed elsewhere,
        // until the first of bucket 1 has been evicted.
        let ones = ids_homed_at(capacity, 1, 2, BUCKET_SLOTS + 1);
        let (residents, z) = (&ones[..BUCKET_SLOTS], ones[BUCKET_SLOTS]);
        let threes = ids_homed_at(capacity, 3, 4, BUCKET_SLOTS);
        let new = ids_homed_at(capacity, 1, 3, 1)[0];
        let others: Vec<u64> = {
            let s = h.shared.tables();
            (1u64 << 40..)
                .filter(|&id| {
                    let home = s.home(id);
                    home.first > 4 && s.codec.second(&home) > 4
                })
                .take(capacity - 2 * BUCKET_SLOTS)
                .collect()
        };
        h.insert_all(&ones);
        h.insert_all(&threes);
        h.insert_all(&others);
        assert!(!h.contains(residents[0]) && h.contains(residents[1]) && h.contains(z));
        let (s, view) = (h.shared.tables(), h.view);
        // The evicted resident's dead word becomes a copy of `z`'s, in the bucket's first slot.
        let z_word = s.find(z, &s.home(z), &view).unwrap();
        let dead = (FIRST_SLOT..BUCKET_WORDS).find(|&i| !view.is_live(s.word(1, i))).unwrap();
        s.store(1, dead, s.word(1, FIRST_SLOT));
        s.store(1, FIRST_SLOT, z_word);
        assert!(h.overflowed.get(s.codec.position(z_word)));
        s.check_overflow_counts(&view, &h.overflowed);

        // Both of the new id's buckets are full, as far as live words go. (Its insertion
        // evicts the next resident.)
        h.insert_all(&[new]);
        h.shared.tables().check_overflow_counts(&h.view, &h.overflowed);
        assert_eq!(h.forced_evictions(), 0);
        assert_eq!(h.seen_prefix_len(&residents[2..]), BUCKET_SLOTS - 2);
        assert!(h.contains(z) && h.contains(new));
    }

    /// A bucket whose next slot is taken moves its round-robin on to the first free slot after
    /// it, wrapping round: checked against that rule over random sets of live slots.
    #[test]
    fn the_round_robin_moves_on_to_the_first_free_slot_after_the_next() {
        let mut h = History::with_capacity(1000, 7).unwrap();
        h.insert_all(&(0..1000).collect::<Vec<u64>>());
        let (s, view) = (h.shared.tables(), h.view);
        let live = (FIRST_SLOT..BUCKET_WORDS)
            .map(|slot| s.word(0, slot))
            .find(|&word| view.is_live(word))
            .unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for case in 0..2000 {
            xorshift(&mut rng);
            let taken = rng as u32 & SLOTS;
            for slot in FIRST_SLOT..BUCKET_WORDS {
                s.store(0, slot, if taken >> slot & 1 != 0 { live } else { 0 });
            }
            let next = FIRST_SLOT + case % BUCKET_SLOTS;
            let before = if next == FIRST_SLOT { BUCKET_WORDS - 1 } else { next - 1 };
            let (header, _) = Header(0).filled(before, 0);
            assert_eq!(header.next_slot(), next);
            let want = (0..BUCKET_SLOTS)
                .map(|k| FIRST_SLOT + (next - FIRST_SLOT + k) % BUCKET_SLOTS)
                .find(|&slot| taken >> slot & 1 == 0);
            let got = s.later_free(0, header, &view).map(|free| free.slot);
            assert_eq!(got, want, "{taken:#x} {next}");
        }
    }
}
