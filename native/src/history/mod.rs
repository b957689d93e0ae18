//! [`SharedHistory`]: the history a router shares between its tasks and threads.
//!
//! It is [`kvreuse_core::history::History`] behind one writer lock, plus a lock-free reader:
//! a completion takes the lock once for all its ids (not once per id), and lookups never
//! wait, not even for a writer in the middle of a completion. One global FIFO order holds
//! across all writers. The index is keyed with a random seed per instance, so clients
//! cannot craft ids that collide in it.

#[cfg(target_os = "linux")]
mod pages;
mod reach;
mod snapshot;

pub use snapshot::Loaded;

use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kvreuse_core::history::{History, HistoryError, HistoryReader, Inserted, Storage};

use reach::Reach;

#[cfg(target_os = "linux")]
pub use pages::PageStorage;

/// The storage [`SharedHistory`] uses by default: huge-page-advised mappings on Linux, the
/// global allocator elsewhere.
#[cfg(target_os = "linux")]
pub type DefaultStorage = PageStorage;
/// The storage [`SharedHistory`] uses by default: huge-page-advised mappings on Linux, the
/// global allocator elsewhere.
#[cfg(not(target_os = "linux"))]
pub type DefaultStorage = kvreuse_core::history::BoxStorage;

/// A bounded FIFO history of block ids, shared by reference between threads: the same exact
/// semantics as [`History`], with every operation on `&self`.
#[derive(Debug)]
pub struct SharedHistory<S: Storage = DefaultStorage> {
    writer: Mutex<Writer<S>>,
    reader: HistoryReader<S>,
}

/// The writer's side, behind the lock.
#[derive(Debug)]
struct Writer<S: Storage> {
    history: History<S>,
    reach: Reach,
}

impl<S: Storage> Writer<S> {
    /// Inserts `ids`, noting when for the reach.
    fn insert_all(&mut self, ids: &[u64]) -> Inserted {
        let before = self.history.total_inserted();
        let inserted = self.history.insert_all(ids);
        if inserted.new > 0 {
            self.reach.note(before, self.history.total_inserted(), self.history.len());
        }
        inserted
    }

    fn clear(&mut self) {
        self.history.clear();
        self.reach.clear();
    }
}

/// A fresh random seed for the index key, from the standard library's per-process random
/// hasher keys.
fn random_seed() -> u64 {
    RandomState::new().hash_one(0x006b_7672_6575_7365_u64)
}

impl SharedHistory<DefaultStorage> {
    /// A history of exactly `capacity` ids.
    pub fn with_capacity(capacity: usize) -> Result<Self, HistoryError> {
        Self::with_capacity_in(capacity)
    }

    /// The history with the largest capacity whose heap footprint fits in `bytes`.
    pub fn with_byte_budget(bytes: usize) -> Result<Self, HistoryError> {
        Self::with_byte_budget_in(bytes)
    }
}

impl<S: Storage> SharedHistory<S> {
    /// [`with_capacity`](SharedHistory::with_capacity) with storage of type `S`.
    pub fn with_capacity_in(capacity: usize) -> Result<Self, HistoryError> {
        Ok(Self::from_history(History::with_capacity_in(capacity, random_seed())?))
    }

    /// [`with_byte_budget`](SharedHistory::with_byte_budget) with storage of type `S`.
    pub fn with_byte_budget_in(bytes: usize) -> Result<Self, HistoryError> {
        Ok(Self::from_history(History::with_byte_budget_in(bytes, random_seed())?))
    }

    /// Shares an existing history.
    pub fn from_history(history: History<S>) -> Self {
        let reader = history.reader();
        let reach = Reach::new(history.capacity());
        SharedHistory { writer: Mutex::new(Writer { history, reach }), reader }
    }

    /// The writer. Holding it blocks other writers, never readers.
    fn lock(&self) -> MutexGuard<'_, Writer<S>> {
        // A panic while holding the lock cannot leave the history inconsistent: it updates its
        // state before anything that could panic. So a poisoned lock is still usable.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Inserts `ids` in order under one lock acquisition.
    pub fn insert_all(&self, ids: &[u64]) -> Inserted {
        if ids.is_empty() {
            return Inserted::default();
        }
        self.lock().insert_all(ids)
    }

    /// How long ago the oldest id present was inserted: how far back the history reaches. It
    /// may overstate the age by the time the history took for 1/64 of its capacity of
    /// insertions (see `reach.rs`).
    pub fn oldest_age(&self) -> Option<Duration> {
        self.lock().reach.oldest_age()
    }

    /// The number of leading `ids` that are all present. Lock-free.
    #[inline]
    pub fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        self.reader.seen_prefix_len(ids)
    }

    /// Whether `id` is present. Lock-free.
    pub fn contains(&self, id: u64) -> bool {
        self.reader.contains(id)
    }

    /// Ids present.
    pub fn len(&self) -> usize {
        self.reader.len()
    }

    /// Whether no id is present.
    pub fn is_empty(&self) -> bool {
        self.reader.is_empty()
    }

    /// Ids the history can hold.
    pub fn capacity(&self) -> usize {
        self.reader.capacity()
    }

    /// Whether the next new id will evict the oldest.
    pub fn is_full(&self) -> bool {
        self.len() == self.capacity()
    }

    /// New ids inserted since construction.
    pub fn total_inserted(&self) -> u64 {
        self.reader.total_inserted()
    }

    /// Forgets every id.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The heap bytes the history holds, exactly (the reach tracking takes none).
    pub fn heap_bytes(&self) -> usize {
        self.reader.heap_bytes()
    }

    /// The ids present, oldest first, as one consistent snapshot (taken under the writer
    /// lock).
    pub fn oldest_first(&self) -> Vec<u64> {
        self.lock().history.oldest_first().collect()
    }

    /// A lock-free read handle that can outlive borrows of `self`.
    pub fn reader(&self) -> HistoryReader<S> {
        self.reader.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvreuse_core::history::BoxStorage;

    fn exercise<S: Storage>(h: &SharedHistory<S>) {
        assert_eq!(h.insert_all(&[1, 2, 3]), Inserted { new: 3, evicted: 0 });
        assert_eq!(h.insert_all(&[3, 4]), Inserted { new: 1, evicted: 1 });
        assert_eq!(h.oldest_first(), [2, 3, 4]);
        assert_eq!(h.seen_prefix_len(&[2, 3, 1]), 2);
        assert!(h.is_full() && !h.contains(1));
        assert!(h.oldest_age().unwrap() < Duration::from_secs(60));
        h.clear();
        assert!(h.is_empty());
        assert_eq!(h.oldest_age(), None);
    }

    #[test]
    fn oldest_age_follows_the_oldest_id_present() {
        let h = SharedHistory::with_capacity(2).unwrap();
        h.insert_all(&[1]);
        std::thread::sleep(Duration::from_millis(30));
        h.insert_all(&[2]);
        let before = h.oldest_age().unwrap();
        assert!(before >= Duration::from_millis(30));
        // Evicting 1 leaves 2 as the oldest, inserted later.
        h.insert_all(&[3]);
        assert!(h.oldest_age().unwrap() < before);
    }

    #[test]
    fn same_semantics_on_every_storage() {
        exercise(&SharedHistory::with_capacity(3).unwrap());
        exercise(&SharedHistory::<BoxStorage>::with_capacity_in(3).unwrap());
    }

    #[test]
    fn byte_budget_holds_for_the_default_storage() {
        for budget in [20_000usize, 3 << 20, 100 << 20] {
            let h = SharedHistory::with_byte_budget(budget).unwrap();
            assert!(h.heap_bytes() <= budget, "{budget}");
            // Page rounding aside, a large budget buys more than one id per 16 bytes; one under
            // about 8.3 MiB, whose index runs at up to 50% load rather than 60% (and has a
            // summary directory under about 4 MiB), one per 18.5.
            let per_id = if budget < 9 << 20 { 18.5 } else { 16.0 };
            let enough = budget < 1 << 20 || h.capacity() as f64 > budget as f64 / per_id;
            assert!(enough, "{budget}: {}", h.capacity());
        }
    }

    #[test]
    fn instances_get_different_seeds() {
        assert_ne!(random_seed(), random_seed());
    }

    #[test]
    fn is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SharedHistory>();
        assert_send_sync::<HistoryReader<DefaultStorage>>();
    }
}
