//! A faithful replica of the reference history layout (Dynamo's F1 proposal), the baseline of
//! the history benchmark.
//!
//! 64 shards of `RwLock<FxHashSet<u64>>`, chosen by the top bits of a mixed hash, plus one
//! `Mutex<VecDeque<u64>>` holding the FIFO order. Lock order is FIFO, then shard. A completion
//! whose ids are all present is answered by a read-locked pre-pass without taking the FIFO
//! lock. Sets and deque grow on demand, as they do in the proposal.

use std::collections::VecDeque;
use std::sync::{Mutex, RwLock};

use rustc_hash::FxHashSet;

const SHARDS: usize = 64;

/// The reference layout.
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
        let sets: usize = self
            .shards
            .iter()
            .map(|s| {
                let items = s.read().unwrap().capacity();
                // hashbrown keeps at most 7/8 of its (power of two) buckets full.
                let buckets = if items == 0 { 0 } else { (items * 8 / 7).next_power_of_two() };
                if buckets == 0 { 0 } else { buckets * 9 + 16 }
            })
            .sum();
        sets + self.fifo.lock().unwrap().capacity() * 8
    }
}
