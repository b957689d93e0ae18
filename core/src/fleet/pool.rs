//! One worker's KV-cache block pool, as vLLM's prefix cache keeps it (and NVIDIA Dynamo's
//! mocker replays it).
//!
//! The pool has `capacity` slots, one block each. A slot is free, **private** to the request
//! that holds it (being filled, a duplicate of a block already cached, or a partial block),
//! or **cached**: a full, computed block that later requests may reuse. A cached block is
//! indexed by its id unless it holds generated tokens (its content is the request's own, so
//! nobody can ever look it up, but it takes room all the same). Cached blocks in use have
//! references; one without references waits in an LRU queue, oldest release at the head:
//!
//! - a prefix hit pins its blocks (out of the queue, one reference more);
//! - new blocks come from the free slots first, then by evicting the queue's head;
//! - a finished request releases its blocks tail first: private ones become free, cached ones
//!   lose a reference and join the queue's tail when they have none, so the deepest block of
//!   a prompt is evicted before its parents.
//!
//! Slots are allocated as they are first needed, so a pool costs memory in proportion to what
//! the trace puts in it, not to its capacity.

use alloc::vec::Vec;
use core::hash::BuildHasherDefault;

use hashbrown::HashMap;
use rustc_hash::FxHasher;

/// No slot: the ends of the LRU queue, a slot out of it.
const NIL: u32 = u32::MAX;

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nobody's (on the free stack).
    Free,
    /// One request's, not reusable by others.
    Private,
    /// A full computed block others can reuse (if it has an id): in use while it has
    /// references, in the LRU queue otherwise.
    Cached,
}

/// A full block's identity in the pool: its id, or none for blocks of generated tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Content {
    /// A prompt block, named by its chained id.
    Prompt(u64),
    /// A block holding generated tokens: unique to its request.
    Generated,
}

/// A slot's bookkeeping.
#[derive(Clone, Copy, Debug)]
struct Slot {
    state: State,
    /// References of a cached block (0: in the queue); 1 for a private block.
    refs: u32,
    /// The indexed id of a cached prompt block.
    id: Option<u64>,
    /// Neighbours in the LRU queue: towards the head (older), towards the tail (newer).
    older: u32,
    newer: u32,
}

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Pool {
    capacity: u32,
    slots: Vec<Slot>,
    /// Released slots ready for reuse.
    free: Vec<u32>,
    /// Cached prompt blocks by id.
    index: HashMap<u64, u32, BuildHasherDefault<FxHasher>>,
    /// The LRU queue of cached blocks without references: `head` is evicted next.
    head: u32,
    tail: u32,
    queued: u32,
    /// Blocks evicted so far.
    pub(crate) evictions: u64,
}

/// What a prefix lookup found: the leading run of a prompt's blocks that is cached, and how
/// many of those are in use by running requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hit {
    /// Leading blocks cached.
    pub(crate) blocks: usize,
    /// Of these, blocks that have references (not in the LRU queue).
    pub(crate) active: usize,
}

impl Pool {
    /// An empty pool of `capacity` blocks (at least 1, below `u32::MAX`).
    pub(crate) fn new(capacity: u32) -> Pool {
        debug_assert!(capacity > 0 && capacity < NIL);
        Pool {
            capacity,
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::default(),
            head: NIL,
            tail: NIL,
            queued: 0,
            evictions: 0,
        }
    }

    /// Blocks the pool holds at most.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Slots that hold nothing (never used, or released private blocks).
    fn free_slots(&self) -> u32 {
        self.capacity - self.slots.len() as u32 + self.free.len() as u32
    }

    /// Blocks in use by requests: held, pinned or private (neither free nor in the queue).
    pub(crate) fn active_blocks(&self) -> u32 {
        self.capacity - self.free_slots() - self.queued
    }

    /// Cached prompt blocks, in use or not: what the pool would give back to lookups. (The
    /// cached blocks of generated tokens, which no lookup finds, are not counted.)
    pub(crate) fn cached_blocks(&self) -> usize {
        self.index.len()
    }

    /// Heap bytes of the pool's state.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * size_of::<Slot>()
            + self.free.capacity() * size_of::<u32>()
            + self.index.allocation_size()
    }

    /// The leading run of `ids` that is cached (read only: nothing moves in the queue).
    pub(crate) fn lookup(&self, ids: &[u64]) -> Hit {
        let mut hit = Hit::default();
        for id in ids {
            let Some(&slot) = self.index.get(id) else { break };
            hit.blocks += 1;
            hit.active += usize::from(self.slots[slot as usize].refs > 0);
        }
        hit
    }

    /// Whether `fresh` new blocks can be had, after pinning `queued_hits` blocks that are in
    /// the queue now (they leave it, so they cannot be evicted for the new ones).
    pub(crate) fn can_take(&self, fresh: u32, queued_hits: u32) -> bool {
        fresh.saturating_sub(self.free_slots()) <= self.queued - queued_hits
    }

    /// Pins the cached block `id` for one more request and returns its slot.
    pub(crate) fn pin(&mut self, id: u64) -> u32 {
        let slot = self.index[&id];
        if self.slots[slot as usize].refs == 0 {
            self.unlink(slot);
        }
        self.slots[slot as usize].refs += 1;
        slot
    }

    /// A new private slot: a free one, or the queue's head evicted. The caller has checked
    /// [`can_take`](Self::can_take).
    pub(crate) fn take(&mut self) -> u32 {
        let slot = if let Some(slot) = self.free.pop() {
            slot
        } else if (self.slots.len() as u32) < self.capacity {
            self.slots.push(Slot { state: State::Free, refs: 0, id: None, older: NIL, newer: NIL });
            self.slots.len() as u32 - 1
        } else {
            let slot = self.head;
            assert!(slot != NIL, "a block was taken from a pool with none to give");
            self.unlink(slot);
            if let Some(id) = self.slots[slot as usize].id.take() {
                self.index.remove(&id);
            }
            self.evictions += 1;
            slot
        };
        let s = &mut self.slots[slot as usize];
        s.state = State::Private;
        s.refs = 1;
        slot
    }

    /// A private slot has been filled with `content`: it becomes cached, unless an equal
    /// block is cached already. Then it stays a private duplicate and is freed with its
    /// request. (vLLM v1 keeps such a copy cached under the same hash, as does Dynamo's mocker
    /// in its current source; released, it waits in the LRU queue. Lookups find the first
    /// copy either way.)
    pub(crate) fn fill(&mut self, slot: u32, content: Content) {
        let s = &mut self.slots[slot as usize];
        debug_assert_eq!(s.state, State::Private);
        match content {
            Content::Generated => s.state = State::Cached,
            Content::Prompt(id) => {
                if let hashbrown::hash_map::Entry::Vacant(entry) = self.index.entry(id) {
                    entry.insert(slot);
                    s.state = State::Cached;
                    s.id = Some(id);
                }
            }
        }
    }

    /// A request lets go of `slot`.
    pub(crate) fn release(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        match s.state {
            State::Private => {
                s.state = State::Free;
                s.refs = 0;
                self.free.push(slot);
            }
            State::Cached => {
                s.refs -= 1;
                if s.refs == 0 {
                    self.push_tail(slot);
                }
            }
            State::Free => debug_assert!(false, "a free slot was released"),
        }
    }

    fn unlink(&mut self, slot: u32) {
        let Slot { older, newer, .. } = self.slots[slot as usize];
        match older {
            NIL => self.head = newer,
            o => self.slots[o as usize].newer = newer,
        }
        match newer {
            NIL => self.tail = older,
            n => self.slots[n as usize].older = older,
        }
        self.queued -= 1;
    }

    fn push_tail(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.older = self.tail;
        s.newer = NIL;
        match self.tail {
            NIL => self.head = slot,
            t => self.slots[t as usize].newer = slot,
        }
        self.tail = slot;
        self.queued += 1;
    }

    /// Checks the pool's invariants (tests): the slots' states add up, the queue is a list of
    /// the cached blocks without references, the index names cached slots.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        assert!(self.slots.len() as u32 <= self.capacity);
        let free = self.slots.iter().filter(|s| s.state == State::Free).count();
        assert_eq!(free, self.free.len());
        let idle = self.slots.iter().filter(|s| s.state == State::Cached && s.refs == 0).count();
        assert_eq!(idle as u32, self.queued);
        let (mut walked, mut at, mut last) = (0, self.head, NIL);
        while at != NIL {
            let s = &self.slots[at as usize];
            assert_eq!((s.state, s.refs, s.older), (State::Cached, 0, last));
            (last, at) = (at, s.newer);
            walked += 1;
        }
        assert_eq!((walked, last), (self.queued, self.tail));
        for (&id, &slot) in &self.index {
            let s = &self.slots[slot as usize];
            assert_eq!((s.state, s.id), (State::Cached, Some(id)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins, takes, fills and releases as a request would; returns the slots it held.
    fn run(pool: &mut Pool, ids: &[u64], extra_generated: usize) -> Vec<u32> {
        let hit = pool.lookup(ids);
        let queued_hits = (hit.blocks - hit.active) as u32;
        let fresh = (ids.len() - hit.blocks + extra_generated) as u32;
        assert!(pool.can_take(fresh, queued_hits));
        let mut lease: Vec<u32> = ids[..hit.blocks].iter().map(|&id| pool.pin(id)).collect();
        for &id in &ids[hit.blocks..] {
            let slot = pool.take();
            pool.fill(slot, Content::Prompt(id));
            lease.push(slot);
        }
        for _ in 0..extra_generated {
            let slot = pool.take();
            pool.fill(slot, Content::Generated);
            lease.push(slot);
        }
        pool.check();
        lease
    }

    fn release(pool: &mut Pool, lease: &[u32]) {
        for &slot in lease.iter().rev() {
            pool.release(slot);
        }
        pool.check();
    }

    #[test]
    fn the_deepest_block_of_the_oldest_release_goes_first() {
        let mut pool = Pool::new(4);
        let a = run(&mut pool, &[1, 2], 0);
        release(&mut pool, &a);
        let b = run(&mut pool, &[3, 4], 0);
        release(&mut pool, &b);
        // Queue, head first: 2, 1, 4, 3. One new block evicts 2, the next 1.
        let c = run(&mut pool, &[5], 0);
        assert_eq!(pool.lookup(&[1, 2]), Hit { blocks: 1, active: 0 });
        release(&mut pool, &c);
        let d = run(&mut pool, &[6], 0);
        assert_eq!(pool.lookup(&[1]).blocks, 0);
        assert_eq!(pool.lookup(&[3, 4]).blocks, 2);
        assert_eq!(pool.evictions, 2);
        release(&mut pool, &d);
    }

    #[test]
    fn a_hit_is_pinned_and_cannot_be_evicted() {
        let mut pool = Pool::new(3);
        let a = run(&mut pool, &[1, 2], 0);
        release(&mut pool, &a);
        let b = run(&mut pool, &[1, 2, 3], 0);
        assert_eq!(pool.lookup(&[1, 2, 3]), Hit { blocks: 3, active: 3 });
        assert_eq!(pool.active_blocks(), 3);
        assert!(!pool.can_take(1, 0), "everything is in use");
        release(&mut pool, &b);
        assert_eq!(pool.active_blocks(), 0);
        assert!(pool.can_take(3, 0));
        // Three queued blocks, two of them hits that leave the queue: one left to evict.
        assert!(pool.can_take(1, 2));
        assert!(!pool.can_take(2, 2), "the pinned hits cannot make room");
    }

    #[test]
    fn heap_bytes_grow_with_the_blocks_cached() {
        let filled = |blocks: u64| {
            let mut pool = Pool::new(4000);
            let ids: Vec<u64> = (1..=blocks).collect();
            let lease = run(&mut pool, &ids, 0);
            release(&mut pool, &lease);
            pool.heap_bytes()
        };
        // Each cached block has a slot and an index entry (its id and its slot).
        let per_block = size_of::<Slot>() + size_of::<u64>() + size_of::<u32>();
        let (small, large) = (filled(1000), filled(3000));
        assert!(small >= 1000 * per_block && small <= 4 * 1000 * per_block, "{small}");
        assert!(large >= small + 2000 * size_of::<Slot>(), "{small} then {large}");
        assert_eq!(Pool::new(10).heap_bytes(), 0, "nothing is allocated up front");

        // A full pool: 500 private slots evict cached blocks (no slot is added), and once
        // released they wait in the free list, whose bytes alone are new.
        let mut pool = Pool::new(1000);
        let lease = run(&mut pool, &(1..=1000).collect::<Vec<u64>>(), 0);
        release(&mut pool, &lease);
        let full = pool.heap_bytes();
        let private: Vec<u32> = (0..500).map(|_| pool.take()).collect();
        release(&mut pool, &private);
        let grown = pool.heap_bytes() - full;
        assert!((500 * 4..=1024 * 4).contains(&grown), "the free list took {grown} bytes");
    }

    #[test]
    fn generated_blocks_take_room_but_never_hit() {
        let mut pool = Pool::new(3);
        let a = run(&mut pool, &[1], 2);
        release(&mut pool, &a);
        assert_eq!(pool.cached_blocks(), 1);
        // The two generated blocks (released first, so nearer the head) are evicted first.
        let b = run(&mut pool, &[7, 8], 0);
        assert_eq!(pool.lookup(&[1]).blocks, 1);
        assert_eq!(pool.evictions, 2);
        release(&mut pool, &b);
    }

    #[test]
    fn a_block_cached_twice_keeps_one_copy() {
        let mut pool = Pool::new(4);
        // Two requests compute block 1 at once: the second copy stays private.
        let first = pool.take();
        let second = pool.take();
        pool.fill(first, Content::Prompt(1));
        pool.fill(second, Content::Prompt(1));
        pool.check();
        pool.release(second);
        pool.release(first);
        pool.check();
        assert_eq!(pool.active_blocks(), 0);
        assert_eq!(pool.cached_blocks(), 1);
        assert!(pool.can_take(4, 0));
    }
}
