//! The history: a bounded, first-in first-out set of block ids.
//!
//! Each completed request inserts its block ids; each new request asks how long a leading run
//! of its ids is present. The semantics are exact:
//!
//! - fixed capacity in entries, set once;
//! - [`insert_all`](History::insert_all) takes ids in order; an id already present is
//!   skipped (it takes no capacity and does not refresh its age); a new id evicts the oldest
//!   inserted id when the history is full;
//! - [`seen_prefix_len`](History::seen_prefix_len) counts the leading ids that are all present.
//!
//! # Design
//!
//! The cost that matters is random cache lines: on the machines this was measured on, one
//! costs 170 to 250 ns, while everything else an operation does takes a few nanoseconds. So
//! the layout aims at one random line per lookup and per new id (in small histories, one of a
//! small array that stays in the caches first: see the summary directory below), and nothing
//! at all per eviction. Two preallocated arrays, nothing allocated afterwards:
//!
//! - the **ring**: the ids themselves in insertion order (8 bytes each), one entry more than
//!   the capacity. Position `n % (capacity + 1)` receives the `n`-th insertion. In a full
//!   history that insertion evicts the id inserted `capacity` insertions earlier, which sits
//!   in the next position and is overwritten by the next insertion: the spare entry lets a new
//!   id be written while the id it evicts is still live for readers.
//! - the **index**: 64-byte buckets of an 8-byte header and fourteen 32-bit slot words. A
//!   slot word holds its id's insertion number modulo three ring lengths (which gives its ring
//!   position) and a tag. An id goes to its first bucket (chosen by a keyed mix of the id) if
//!   that has room, else to its second. The header holds a small Bloom filter of the
//!   bucket's tags, which answers most lookups of absent ids in one 8-byte read, and counts
//!   of the ids that overflowed, so lookups read the second bucket only when needed. A large
//!   history's index runs at 60% load: full, it costs 15.75 bytes per entry (ring, index, and
//!   one bit per entry recording which ids overflowed). One of up to 458,752 ids, whose index
//!   stays within 4 MiB, runs at 50% (17.27 bytes per entry), which saves work on every insert
//!   and absent lookup. One of up to 229,376 ids also ends its index in a **summary
//!   directory**, a copy of every bucket's header in 8 bytes, from which lookups read the first
//!   id's filter while the bucket is prefetched (18.41 bytes per entry; see `Layout`).
//!
//! Eviction writes nothing to the index: an evicted id's slot word names an insertion the ring
//! has left behind, so every reader already treats it as empty and the next write to that
//! bucket reuses it (see the slot format in `layout.rs`). Only an evicted id that had overflowed
//! costs a write, to its first bucket's count. A lookup reads its first bucket's header (or
//! its copy in the directory, prefetching the bucket) and, when the filter admits the id, the
//! slots; a live slot whose tag matches leads to the ring entry, which confirms the id. After
//! one id is found, the next is first looked for in the next ring position, where a completion
//! that inserted both put it: the blocks of a shared prefix are then confirmed by sequential
//! reads of the ring, without the index. Where the index is needed, lookups work through their
//! ids in batches, prefetching the buckets and ring entries of a whole batch before using them,
//! so that their cache misses overlap; inserts prefetch the first buckets of the next batch
//! while they work through one, and the lines their evictions and, in histories too large for
//! the caches, their duplicate checks will read (see `writer.rs`).
//!
//! When both buckets of a new id are full, a resident moves from its first bucket to its
//! second (cuckoo style, two levels deep). Only if no such move exists, which random ids
//! practically never cause, does the oldest resident of the two buckets lose its slot early;
//! [`forced_evictions`](History::forced_evictions) counts such events (not when that resident
//! is the id the insertion evicts anyway). Such an id leaves the index only: its ring entry
//! stays until its turn, so [`len`](History::len) and [`oldest_first`](History::oldest_first)
//! still count it, a lookup that reaches it by walking the ring from the id before it still
//! finds it, and inserting it again adds a second entry.
//!
//! # Concurrency
//!
//! [`History`] is the single writer (`&mut self`). [`HistoryReader`]s, from
//! [`History::reader`], look up from any thread without locks and without waiting for the
//! writer. Every lookup of one id is linearizable: it reports the id present only if the id
//! was present at some moment during the call, and a later call never reports an id absent
//! that an earlier call found, unless it was evicted in between. (Except where the index is
//! crowded past what any move can fix: an id that a forced eviction took out of the index is
//! missed by lookups that need the index and found by those that walk the ring to it, until
//! its turn; and when the slot given up is that of the id the insertion evicts, the id leaves
//! the index just before that insertion is published. See above.) The writer publishes the
//! insertion count before it overwrites a ring entry, and a reader that found an id re-reads
//! that count and retries if the entry it relied on may have been overwritten meanwhile.
//! The writer sets an id's filter bits, in the header and then in its directory copy, before
//! its slot word appears. A copy is always some earlier value of its header, and every header
//! keeps the bits of the live ids whose first bucket it is, so the copy never rules out an id
//! a lookup could find (the bits a moving id sets in its second bucket's header matter to no
//! lookup's first test, which reads first buckets only). Moves go from an id's first bucket to
//! its second, counted in the first bucket's header before the id leaves it, and readers read
//! a bucket's header after its slots, so a moving id is never missed.

mod bucket;
mod layout;
mod storage;
mod table;
mod word_masks;
mod writer;

use core::fmt;

pub use layout::{BUCKET_SLOTS, BUCKET_WORDS, Layout, MAX_CAPACITY};
pub use storage::{BoxStorage, Storage};

pub use crate::sync::AtomicU64;

use crate::sync::{Arc, Ordering, fence};
use layout::{Mixer, View};
use table::{OwnLines, Shared};
use writer::OverflowFlags;

/// Why a history could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HistoryError {
    /// A capacity of zero entries.
    ZeroCapacity,
    /// A capacity above [`MAX_CAPACITY`].
    CapacityTooLarge {
        /// The capacity asked for.
        capacity: usize,
    },
    /// A byte budget too small for even one entry.
    BudgetTooSmall {
        /// The budget given.
        bytes: usize,
    },
    /// The allocator refused the memory.
    AllocationFailed {
        /// Bytes asked for.
        bytes: usize,
    },
    /// A [`Storage`] returned arrays of the wrong length.
    StorageMismatch,
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroCapacity => f.write_str("a history needs a capacity of at least one id"),
            Self::CapacityTooLarge { capacity } => {
                write!(f, "capacity {capacity} exceeds the maximum of {MAX_CAPACITY} ids")
            }
            Self::BudgetTooSmall { bytes } => {
                write!(f, "a budget of {bytes} bytes cannot hold even one id")
            }
            Self::AllocationFailed { bytes } => {
                write!(f, "could not allocate {bytes} bytes for the history")
            }
            Self::StorageMismatch => f.write_str("storage arrays do not match the layout"),
        }
    }
}

impl core::error::Error for HistoryError {}

/// What one [`insert_all`](History::insert_all) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inserted {
    /// Ids that were not present and now are.
    pub new: usize,
    /// Ids evicted (oldest first) to make room.
    pub evicted: usize,
}

/// A bounded FIFO set of block ids; the single writer. See the [module docs](self).
pub struct History<S: Storage = BoxStorage> {
    shared: Arc<Shared<S>>,
    /// The writer's own, always exact, view of the ring.
    view: View,
    start: u64,
    overflowed: OverflowFlags,
    forced: u64,
    /// The insertion number up to which the writer has prepared evictions: those of the
    /// entries inserted before it (see `writer.rs`). Preparing is prefetching only: an entry
    /// counted as prepared that was not (after a `clear` of a history of fewer than 64 ids,
    /// say) only goes without its prefetch.
    prepared: u64,
    /// Whether inserts prefetch what their duplicate checks will read: in histories of at
    /// least [`LOOK_AHEAD_FROM`](writer::LOOK_AHEAD_FROM) ring entries (see `writer.rs`).
    look_ahead: bool,
    /// `insert`'s mixes of the ids of the batch it works through and of the next batch, which
    /// load meanwhile: kept here, so that a call (often of a few ids) neither zeroes nor copies
    /// them.
    mixes: [[u64; table::BATCH]; 2],
    /// The buckets whose summary rebuilds `insert` has put off to the start of its next batch
    /// (in this call or the next).
    due: writer::Due,
}

/// A lock-free, read-only handle on a [`History`], for other threads. Cheap to clone.
pub struct HistoryReader<S: Storage = BoxStorage> {
    shared: Arc<Shared<S>>,
}

impl<S: Storage> Clone for HistoryReader<S> {
    fn clone(&self) -> Self {
        HistoryReader { shared: Arc::clone(&self.shared) }
    }
}

impl History<BoxStorage> {
    /// A history of exactly `capacity` ids, its index keyed by `seed` (draw it at random
    /// where ids may come from untrusted input).
    pub fn with_capacity(capacity: usize, seed: u64) -> Result<Self, HistoryError> {
        Self::with_capacity_in(capacity, seed)
    }

    /// The history with the largest capacity whose heap footprint ([`heap_bytes`]) is at most
    /// `bytes`.
    ///
    /// [`heap_bytes`]: History::heap_bytes
    pub fn with_byte_budget(bytes: usize, seed: u64) -> Result<Self, HistoryError> {
        Self::with_byte_budget_in(bytes, seed)
    }
}

impl<S: Storage> History<S> {
    /// [`with_capacity`](History::with_capacity) with storage of type `S`.
    pub fn with_capacity_in(capacity: usize, seed: u64) -> Result<Self, HistoryError> {
        let layout = Layout::for_capacity(capacity)?;
        Self::with_storage(layout, seed, S::allocate(&layout)?)
    }

    /// [`with_byte_budget`](History::with_byte_budget) with storage of type `S`.
    pub fn with_byte_budget_in(bytes: usize, seed: u64) -> Result<Self, HistoryError> {
        let layout = Layout::largest_within(bytes, Self::bytes_for)?;
        Self::with_storage(layout, seed, S::allocate(&layout)?)
    }

    /// The heap bytes a history of `layout` takes: its storage, its overflow flags and its
    /// shared header.
    pub fn bytes_for(layout: &Layout) -> usize {
        // The shared header lives in an `Arc` allocation (two counters plus the header).
        S::bytes_for(layout)
            + OverflowFlags::bytes_for(layout.ring_len())
            + core::mem::size_of::<Shared<S>>()
            + 2 * core::mem::size_of::<usize>()
    }

    /// A history over `storage`, which must be zeroed and sized for `layout`. (Storage of the
    /// wrong size is refused; storage that is not zeroed is not detected: it cannot make the
    /// history unsound, but its answers are then wrong and its calls may panic.)
    pub fn with_storage(layout: Layout, seed: u64, storage: S) -> Result<Self, HistoryError> {
        Self::assemble(layout, seed, storage, layout.has_directory())
    }

    /// [`with_storage`](Self::with_storage), its lookups reading the summary directory or,
    /// when `directory` is false, the buckets' headers. Only the tests and loom models, whose
    /// histories are small, turn it off, to run large histories' lookups too (the writer still
    /// keeps the copies, which no lookup then reads).
    fn assemble(
        layout: Layout,
        seed: u64,
        storage: S,
        directory: bool,
    ) -> Result<Self, HistoryError> {
        if storage.index().len() != layout.index_words()
            || storage.ring().len() != layout.ring_len()
        {
            return Err(HistoryError::StorageMismatch);
        }
        let shared = Shared {
            storage,
            codec: layout::Codec::new(&layout),
            directory: if directory && layout.has_directory() { layout.pairs() } else { 0 },
            layout,
            mixer: Mixer::new(seed),
            now: OwnLines(AtomicU64::new(0)),
            start: AtomicU64::new(0),
        };
        Ok(History {
            shared: Arc::new(shared),
            view: View::new(0, 0, layout.capacity()),
            start: 0,
            overflowed: OverflowFlags::new(layout.ring_len())?,
            forced: 0,
            prepared: 0,
            look_ahead: layout.ring_len() >= writer::LOOK_AHEAD_FROM,
            mixes: [[0; table::BATCH]; 2],
            due: writer::Due::new(),
        })
    }

    /// A history of `capacity` whose lookups read the buckets' headers, as a large history's
    /// do, whatever its size (see [`assemble`](Self::assemble)).
    #[cfg(test)]
    pub(crate) fn without_directory(capacity: usize, seed: u64) -> Self {
        let layout = Layout::for_capacity(capacity).unwrap();
        Self::assemble(layout, seed, S::allocate(&layout).unwrap(), false).unwrap()
    }

    /// A lock-free read handle for other threads.
    pub fn reader(&self) -> HistoryReader<S> {
        HistoryReader { shared: Arc::clone(&self.shared) }
    }

    /// Inserts `ids` in order (see the [module docs](self) for the exact rules).
    #[inline]
    pub fn insert_all(&mut self, ids: &[u64]) -> Inserted {
        self.insert(ids)
    }

    /// Whether `id` is present.
    pub fn contains(&self, id: u64) -> bool {
        let t = self.shared.tables();
        t.find(id, &t.home(id), &self.view).is_some()
    }

    /// The number of leading `ids` that are all present (stops at the first miss).
    pub fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        self.shared.prefix(ids, &self.view, None).0
    }

    /// Forgets every id. Keeps the capacity and the memory.
    pub fn clear(&mut self) {
        let s = &*self.shared;
        self.start = self.view.now;
        // Ordering: the new start is stored (Relaxed), then a Release fence orders it before
        // every store after it: the index words zeroed below and every later insertion's. A
        // reader whose Acquire load reads any of those also sees the new start, and
        // `still_valid` rejects what it found under the old one: readers see the history
        // before the clear or after it, never partly emptied.
        s.start.store(self.start, Ordering::Relaxed);
        fence(Ordering::Release);
        s.tables().clear();
        // Rebuilds still due would only rewrite emptied buckets.
        self.due = writer::Due::new();
        self.overflowed.clear();
        self.view = View::new(self.view.now, self.start, self.capacity());
    }

    /// Ids present.
    pub fn len(&self) -> usize {
        self.view.len as usize
    }

    /// Whether no id is present.
    pub fn is_empty(&self) -> bool {
        self.view.len == 0
    }

    /// Ids the history can hold.
    pub fn capacity(&self) -> usize {
        self.view.capacity as usize
    }

    /// Whether the next new id will evict the oldest.
    pub fn is_full(&self) -> bool {
        self.view.is_full()
    }

    /// New ids inserted since construction (including evicted and cleared ones). The id at
    /// [`oldest_first`](Self::oldest_first) index `k` was insertion number
    /// `total_inserted() - len() + k`.
    pub fn total_inserted(&self) -> u64 {
        self.view.now
    }

    /// Times an id lost its index slot before its turn because no slot could be freed for a
    /// new id (see the [module docs](self)): such an id is still counted present until its
    /// turn, but lookups through the index miss it. Zero unless the index is pathologically
    /// crowded.
    pub fn forced_evictions(&self) -> u64 {
        self.forced
    }

    /// The heap bytes this history holds (storage, overflow flags, shared header), exactly.
    pub fn heap_bytes(&self) -> usize {
        Self::bytes_for(&self.shared.layout)
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.shared.layout
    }

    /// The ids present, oldest first (the order in which they will be evicted).
    pub fn oldest_first(&self) -> OldestFirst<'_> {
        OldestFirst::new(self.shared.storage.ring(), &self.view)
    }
}

impl<S: Storage> HistoryReader<S> {
    /// The ring as it stands now.
    fn view(&self) -> View {
        let s = &*self.shared;
        // Ordering: Acquire pairs with the writer's Release stores of both counts.
        let now = s.now.load(Ordering::Acquire);
        let start = s.start.load(Ordering::Acquire);
        View::reader(now, start.min(now), &s.codec)
    }

    /// The number of leading `ids` that are all present (stops at the first miss). Does not
    /// wait for a concurrent writer.
    #[inline]
    pub fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        // The common miss first, without even reading the ring's state: a first id whose bits
        // are clear in its first bucket's summary is absent. Kept small so that consecutive
        // lookups overlap their cache misses.
        match ids.first().and_then(|&id| self.shared.summary_admits(id)) {
            None => 0,
            Some(h) => self.seen_prefix_len_slow(ids, h),
        }
    }

    /// [`seen_prefix_len`](Self::seen_prefix_len) past the first id's summary; `h` is that
    /// id's mix.
    #[inline(never)]
    fn seen_prefix_len_slow(&self, ids: &[u64], h: u64) -> usize {
        // Most first ids that pass the summary are absent all the same (its bits were set by
        // other ids): one pass over the bucket tells, before the ring's state is read. Such a
        // miss needs no re-check, like any lookup that finds nothing.
        let (home, scan) = self.shared.first_scan(h);
        if scan.rules_out() {
            return 0;
        }
        // Otherwise the scan found slots with the id's tag, or ids of its class overflowed.
        // The first id is looked up through it before the rest of the lookup is set up: one
        // that is absent (its tag matched by chance) is again the answer.
        let mut view = self.view();
        let Some(word) =
            ids.first().and_then(|&id| self.shared.first_found(id, &home, scan, &view))
        else {
            return 0;
        };
        // The scan serves the first attempt only; a retry scans afresh.
        let mut first = Some(word);
        loop {
            let (seen, shortest_life) = self.shared.prefix(ids, &view, first.take());
            if seen == 0 || self.shared.still_valid(&view, shortest_life) {
                return seen;
            }
            view = self.view();
        }
    }

    /// Whether `id` is present. Does not wait for a concurrent writer.
    pub fn contains(&self, id: u64) -> bool {
        self.seen_prefix_len(core::slice::from_ref(&id)) == 1
    }

    /// Ids present.
    pub fn len(&self) -> usize {
        self.view().len as usize
    }

    /// Whether no id is present.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ids the history can hold.
    pub fn capacity(&self) -> usize {
        self.shared.layout.capacity()
    }

    /// Insertions since construction, as last published.
    pub fn total_inserted(&self) -> u64 {
        self.view().now
    }

    /// The heap bytes of the history.
    pub fn heap_bytes(&self) -> usize {
        History::<S>::bytes_for(&self.shared.layout)
    }

    /// The ids present, oldest first. With a concurrent writer, ids at the old end may be
    /// replaced by newer ones while iterating; every id yielded was present at some moment.
    pub fn oldest_first(&self) -> OldestFirst<'_> {
        OldestFirst::new(self.shared.storage.ring(), &self.view())
    }
}

/// The ids of a history, oldest first; from [`History::oldest_first`].
#[derive(Clone, Debug)]
pub struct OldestFirst<'a> {
    ring: &'a [AtomicU64],
    next: usize,
    remaining: usize,
}

impl<'a> OldestFirst<'a> {
    fn new(ring: &'a [AtomicU64], view: &View) -> Self {
        OldestFirst { ring, next: view.oldest(), remaining: view.len as usize }
    }
}

impl Iterator for OldestFirst<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.remaining == 0 {
            return None;
        }
        // Ordering: Acquire, like every reader's ring load.
        let id = self.ring[self.next].load(Ordering::Acquire);
        self.next = if self.next + 1 == self.ring.len() { 0 } else { self.next + 1 };
        self.remaining -= 1;
        Some(id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for OldestFirst<'_> {}

impl<S: Storage> fmt::Debug for History<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("History")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("heap_bytes", &self.heap_bytes())
            .finish_non_exhaustive()
    }
}

impl<S: Storage> fmt::Debug for HistoryReader<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistoryReader")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;

#[cfg(all(test, kvreuse_loom))]
mod loom_models;
