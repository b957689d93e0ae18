//! Faithful replicas of the reference history layout (Dynamo's F1 proposal), the baselines of
//! the history benchmarks.
//!
//! 64 shards of `RwLock<FxHashSet<u64>>` plus one `Mutex<VecDeque<u64>>` holding the FIFO
//! order. Lock order is FIFO, then shard. A completion whose ids are all present is answered
//! by a read-locked pre-pass without taking the FIFO lock. Sets and deque grow on demand, as
//! they do in the proposal. Two builds, which differ only in their locks and shard index:
//!
//! - [`ReferenceHistory`]: standard-library locks, the shard chosen by the top 6 bits of a
//!   multiplicative mix: the replica every earlier measurement of this project used, kept
//!   unchanged so that those stay comparable;
//! - [`ProposalHistory`]: the proposal exactly as built, with `parking_lot` locks and the
//!   shard chosen by the low 6 bits of MurmurHash3's 64-bit finalizer (`fmix64`).
//!
//! The std replica's source is unchanged, but its machine code is not quite: since the crate
//! also holds the proposal, LLVM no longer inlines hashbrown's `insert` and `remove` into it,
//! which costs it about 28 instructions per new id (274 instead of 246, harness included).

use std::collections::VecDeque;
use std::sync::{Mutex, RwLock};

use rustc_hash::FxHashSet;

const SHARDS: usize = 64;

/// The heap bytes of a hashbrown set with room for `items` ids: 8-byte buckets plus one control
/// byte each and a 16-byte group tail, at most 7/8 of its (power of two) buckets full.
fn set_bytes(items: usize) -> usize {
    if items == 0 { 0 } else { (items * 8 / 7).next_power_of_two() * 9 + 16 }
}

/// The reference layout with standard-library locks.
#[derive(Debug)]
pub struct ReferenceHistory {
    shards: Vec<RwLock<FxHashSet<u64>>>,
    fifo: Mutex<VecDeque<u64>>,
    capacity: usize,
}

impl ReferenceHistory {
    /// An empty history of `capacity` ids.
    pub fn with_capacity(capacity: usize) -> Self {
        ReferenceHistory {
            shards: (0..SHARDS).map(|_| RwLock::new(FxHashSet::default())).collect(),
            fifo: Mutex::new(VecDeque::new()),
            capacity,
        }
    }

    fn shard(&self, id: u64) -> &RwLock<FxHashSet<u64>> {
        let mixed = (id ^ (id >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.shards[(mixed >> 58) as usize]
    }

    /// Inserts `ids` in order; returns how many were new.
    pub fn insert_all(&self, ids: &[u64]) -> usize {
        if ids.iter().all(|id| self.shard(*id).read().unwrap().contains(id)) {
            return 0;
        }
        let mut fifo = self.fifo.lock().unwrap();
        let mut new = 0;
        for &id in ids {
            if !self.shard(id).write().unwrap().insert(id) {
                continue;
            }
            new += 1;
            if fifo.len() == self.capacity {
                let oldest = fifo.pop_front().unwrap();
                self.shard(oldest).write().unwrap().remove(&oldest);
            }
            fifo.push_back(id);
        }
        new
    }

    /// The number of leading ids that are all present.
    pub fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        ids.iter().take_while(|id| self.shard(**id).read().unwrap().contains(id)).count()
    }

    /// Heap bytes: each shard's hashbrown table (8-byte buckets plus one control byte each
    /// and a 16-byte group tail) and the deque's buffer.
    pub fn heap_bytes(&self) -> usize {
        let sets: usize = self.shards.iter().map(|s| set_bytes(s.read().unwrap().capacity())).sum();
        sets + self.fifo.lock().unwrap().capacity() * 8
    }
}

/// The reference layout as the proposal builds it: `parking_lot` locks, `fmix64` shard index.
#[derive(Debug)]
pub struct ProposalHistory {
    shards: Vec<parking_lot::RwLock<FxHashSet<u64>>>,
    fifo: parking_lot::Mutex<VecDeque<u64>>,
    capacity: usize,
}

/// MurmurHash3's 64-bit finalizer.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl ProposalHistory {
    /// An empty history of `capacity` ids.
    pub fn with_capacity(capacity: usize) -> Self {
        ProposalHistory {
            shards: (0..SHARDS).map(|_| parking_lot::RwLock::new(FxHashSet::default())).collect(),
            fifo: parking_lot::Mutex::new(VecDeque::new()),
            capacity,
        }
    }

    fn shard(&self, id: u64) -> &parking_lot::RwLock<FxHashSet<u64>> {
        &self.shards[(fmix64(id) & (SHARDS as u64 - 1)) as usize]
    }

    /// Inserts `ids` in order; returns how many were new.
    pub fn insert_all(&self, ids: &[u64]) -> usize {
        if ids.iter().all(|id| self.shard(*id).read().contains(id)) {
            return 0;
        }
        let mut fifo = self.fifo.lock();
        let mut new = 0;
        for &id in ids {
            if !self.shard(id).write().insert(id) {
                continue;
            }
            new += 1;
            if fifo.len() == self.capacity
                && let Some(oldest) = fifo.pop_front()
            {
                self.shard(oldest).write().remove(&oldest);
            }
            fifo.push_back(id);
        }
        new
    }

    /// The number of leading ids that are all present.
    pub fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        ids.iter().take_while(|id| self.shard(**id).read().contains(id)).count()
    }

    /// Heap bytes, counted as for [`ReferenceHistory::heap_bytes`].
    pub fn heap_bytes(&self) -> usize {
        let sets: usize = self.shards.iter().map(|s| set_bytes(s.read().capacity())).sum();
        sets + self.fifo.lock().capacity() * 8
    }
}
