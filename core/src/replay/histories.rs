//! The replay's histories, all of them in one structure over dense ids (`0..n`, numbered by
//! [`DenseIds`](super::dense::DenseIds)).
//!
//! A replay asks every history about the same ids, so the state is laid out by id, not by
//! history: one presence bit per history, the bits of an id side by side in `words` words,
//! and the LRU list nodes of an id side by side too. Looking an id up in a dozen histories
//! then reads one cache line instead of a dozen, and learning it mostly touches lines the
//! lookup already brought in. What is private to one history stays with it: a FIFO's ring of
//! ids in insertion order, an LRU's length and list ends.
//!
//! - FIFO (the [`History`](crate::history::History)'s semantics): a present id is skipped; a
//!   new id is written at the ring's position after clearing the bit of the id it overwrites.
//! - LRU: a doubly linked list per history through the nodes; a touched present id moves to
//!   the most recent end, a new one goes there after the least recent is evicted when full.
//! - `inf`: a bit that is never cleared.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use super::Policy;

const NIL: u32 = u32::MAX;

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Histories {
    /// Per history: its policy and the index of its state in `fifos` or `lrus`.
    kinds: Vec<Kind>,
    /// Presence words per id.
    words: usize,
    /// Id `i`'s presence bits are `present[i * words..][..words]`, history `h` at bit `h % 64`
    /// of word `h / 64`.
    present: Vec<u64>,
    fifos: Vec<Fifo>,
    lrus: Vec<Lru>,
    /// Id `i`'s node in LRU `l` is `nodes[i * lrus.len() + l]`.
    nodes: Vec<Node>,
    /// Ids the arrays have room for.
    ids: usize,
    /// Stamp of the first request that taught an `inf` history anything.
    first_stamp: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Fifo(usize),
    Lru(usize),
    Inf,
}

#[derive(Debug)]
struct Fifo {
    /// The ids present, in insertion order from `next` (once full).
    ring: Vec<u32>,
    capacity: usize,
    next: usize,
    /// New insertions so far.
    now: u64,
    /// (insertion count after a request's ids, its stamp), oldest first, for the requests
    /// that still have ids present (at most one per id present).
    spans: VecDeque<(u64, u64)>,
}

#[derive(Debug)]
struct Lru {
    capacity: usize,
    len: usize,
    newest: u32,
    oldest: u32,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    /// Towards the most recent, towards the least recent; `NIL` at the ends.
    newer: u32,
    older: u32,
    /// The stamp of the latest touch (meaningful while present).
    stamp: u64,
}

const EMPTY_NODE: Node = Node { newer: NIL, older: NIL, stamp: 0 };

impl Histories {
    /// One history per `(policy, capacity)`; capacities are checked by the caller (`inf` has
    /// none, the others at least 1).
    pub(crate) fn new(config: &[(Policy, Option<usize>)]) -> Histories {
        let (mut fifos, mut lrus) = (Vec::new(), Vec::new());
        let kinds = config
            .iter()
            .map(|&(policy, capacity)| match (policy, capacity) {
                (Policy::Fifo, Some(capacity)) => {
                    fifos.push(Fifo {
                        ring: Vec::new(),
                        capacity,
                        next: 0,
                        now: 0,
                        spans: VecDeque::new(),
                    });
                    Kind::Fifo(fifos.len() - 1)
                }
                (Policy::Lru, Some(capacity)) => {
                    lrus.push(Lru { capacity, len: 0, newest: NIL, oldest: NIL });
                    Kind::Lru(lrus.len() - 1)
                }
                _ => Kind::Inf,
            })
            .collect();
        Histories {
            kinds,
            words: config.len().div_ceil(64).max(1),
            present: Vec::new(),
            fifos,
            lrus,
            nodes: Vec::new(),
            ids: 0,
            first_stamp: None,
        }
    }

    /// Makes room for ids `0..ids`, twice as many as needed so that regrowing stays
    /// amortized. When the allocator refuses, nothing changes and the error says how many
    /// bytes were asked for.
    pub(crate) fn grow(&mut self, ids: usize) -> Result<(), usize> {
        if ids <= self.ids {
            return Ok(());
        }
        let ids = ids.checked_next_power_of_two().ok_or(usize::MAX)?;
        let words = ids.checked_mul(self.words).ok_or(usize::MAX)?;
        let nodes = ids.checked_mul(self.lrus.len()).ok_or(usize::MAX)?;
        // A FIFO's ring holds at most one entry per distinct id: reserved here too, so that
        // learning an id never allocates.
        let ring = |f: &Fifo| f.capacity.min(ids);
        let rings: usize = self.fifos.iter().map(ring).fold(0, usize::saturating_add);
        let bytes = Self::bytes(words, nodes).saturating_add(rings.saturating_mul(4));
        self.present.try_reserve_exact(words - self.present.len()).map_err(|_| bytes)?;
        self.nodes.try_reserve_exact(nodes - self.nodes.len()).map_err(|_| bytes)?;
        for fifo in &mut self.fifos {
            let want = ring(fifo);
            fifo.ring.try_reserve_exact(want.saturating_sub(fifo.ring.len())).map_err(|_| bytes)?;
        }
        self.present.resize(words, 0);
        self.nodes.resize(nodes, EMPTY_NODE);
        self.ids = ids;
        Ok(())
    }

    /// Heap bytes of `words` presence words and `nodes` LRU nodes.
    fn bytes(words: usize, nodes: usize) -> usize {
        words
            .saturating_mul(size_of::<u64>())
            .saturating_add(nodes.saturating_mul(size_of::<Node>()))
    }

    /// Heap bytes held: the per-id arrays, and each FIFO's ring and request spans.
    pub(crate) fn heap_bytes(&self) -> usize {
        let fifo = |f: &Fifo| {
            f.ring.capacity() * size_of::<u32>() + f.spans.capacity() * size_of::<(u64, u64)>()
        };
        let fifos: usize = self.fifos.iter().map(fifo).sum();
        let lists = self.kinds.capacity() * size_of::<Kind>()
            + self.fifos.capacity() * size_of::<Fifo>()
            + self.lrus.capacity() * size_of::<Lru>();
        Self::bytes(self.present.capacity(), self.nodes.capacity()).saturating_add(fifos + lists)
    }

    /// Histories of each policy: FIFO, LRU, `inf`.
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        let (fifo, lru) = (self.fifos.len(), self.lrus.len());
        (fifo, lru, self.kinds.len() - fifo - lru)
    }

    /// Presence words per id.
    pub(crate) fn words(&self) -> usize {
        self.words
    }

    /// Id `id`'s presence words: history `h` is present at bit `h % 64` of word `h / 64`.
    #[inline]
    pub(crate) fn presence(&self, id: u32) -> &[u64] {
        &self.present[id as usize * self.words..][..self.words]
    }

    #[inline]
    fn is_present(&self, id: u32, h: usize) -> bool {
        self.present[id as usize * self.words + h / 64] & (1 << (h % 64)) != 0
    }

    #[inline]
    fn set_present(&mut self, id: u32, h: usize, on: bool) {
        let word = &mut self.present[id as usize * self.words + h / 64];
        if on {
            *word |= 1 << (h % 64);
        } else {
            *word &= !(1 << (h % 64));
        }
    }

    /// Every history learns `ids` for the request stamped `stamp` (its number); each history's
    /// evictions are added to `evictions`.
    pub(crate) fn learn(&mut self, ids: &[u32], stamp: u64, evictions: &mut [u64]) {
        // History by history: each gets a tight loop, and a request's ids are few enough that
        // their lines stay cached from one history to the next.
        for (h, evicted) in evictions.iter_mut().enumerate().take(self.kinds.len()) {
            match self.kinds[h] {
                Kind::Fifo(f) => {
                    let before = self.fifos[f].now;
                    *evicted += ids.iter().map(|&id| self.fifo_insert(h, f, id)).sum::<u64>();
                    self.fifos[f].close_request(before, stamp);
                }
                Kind::Lru(l) => {
                    *evicted += ids.iter().map(|&id| self.lru_touch(h, l, id, stamp)).sum::<u64>();
                }
                Kind::Inf => ids.iter().for_each(|&id| self.set_present(id, h, true)),
            }
        }
        if self.first_stamp.is_none() && !ids.is_empty() {
            self.first_stamp = Some(stamp);
        }
    }

    /// FIFO `f`, history `h`, learns `id`; returns the evictions (0 or 1).
    #[inline]
    fn fifo_insert(&mut self, h: usize, f: usize, id: u32) -> u64 {
        if self.is_present(id, h) {
            return 0;
        }
        self.set_present(id, h, true);
        let fifo = &mut self.fifos[f];
        fifo.now += 1;
        if fifo.ring.len() < fifo.capacity {
            fifo.ring.push(id);
            return 0;
        }
        let victim = core::mem::replace(&mut fifo.ring[fifo.next], id);
        fifo.next = if fifo.next + 1 == fifo.capacity { 0 } else { fifo.next + 1 };
        self.set_present(victim, h, false);
        1
    }

    #[inline]
    fn node(&mut self, id: u32, l: usize) -> &mut Node {
        &mut self.nodes[id as usize * self.lrus.len() + l]
    }

    /// Unlinks `id` from LRU `l`'s list.
    fn lru_unlink(&mut self, l: usize, id: u32) {
        let Node { newer, older, .. } = *self.node(id, l);
        match newer {
            NIL => self.lrus[l].newest = older,
            newer => self.node(newer, l).older = older,
        }
        match older {
            NIL => self.lrus[l].oldest = newer,
            older => self.node(older, l).newer = newer,
        }
    }

    /// LRU `l`, history `h`, touches `id`; returns the evictions (0 or 1).
    #[inline]
    fn lru_touch(&mut self, h: usize, l: usize, id: u32, stamp: u64) -> u64 {
        let mut evicted = 0;
        if self.is_present(id, h) {
            if self.lrus[l].newest == id {
                self.node(id, l).stamp = stamp;
                return 0;
            }
            self.lru_unlink(l, id);
        } else {
            let lru = &mut self.lrus[l];
            if lru.len == lru.capacity {
                let victim = lru.oldest;
                self.lru_unlink(l, victim);
                self.set_present(victim, h, false);
                evicted = 1;
            } else {
                lru.len += 1;
            }
            self.set_present(id, h, true);
        }
        let newest = self.lrus[l].newest;
        *self.node(id, l) = Node { newer: NIL, older: newest, stamp };
        match newest {
            NIL => self.lrus[l].oldest = id,
            newest => self.node(newest, l).newer = id,
        }
        self.lrus[l].newest = id;
        evicted
    }

    /// The stamp of the request that taught history `h` the oldest id it still holds.
    pub(crate) fn oldest_stamp(&self, h: usize) -> Option<u64> {
        match self.kinds[h] {
            Kind::Fifo(f) => self.fifos[f].spans.front().map(|&(_, stamp)| stamp),
            Kind::Lru(l) => {
                let oldest = self.lrus[l].oldest;
                (oldest != NIL).then(|| self.nodes[oldest as usize * self.lrus.len() + l].stamp)
            }
            Kind::Inf => self.first_stamp,
        }
    }
}

impl Fifo {
    /// Records the span of the request stamped `stamp` (if it inserted anything) and forgets
    /// the spans of requests whose ids are all evicted.
    fn close_request(&mut self, before: u64, stamp: u64) {
        if self.now > before {
            self.spans.push_back((self.now, stamp));
        }
        let oldest = self.now.saturating_sub(self.capacity as u64);
        while self.spans.front().is_some_and(|&(end, _)| end <= oldest) {
            self.spans.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::xorshift;
    use alloc::vec;

    /// Against naive models (deques of `(id, stamp)`, newest at the back), with enough
    /// histories that the presence bits span two words.
    #[test]
    fn fifo_and_lru_match_naive_models() {
        const IDS: u32 = 30;
        let capacities: Vec<usize> = (1..=40).collect();
        let mut config = vec![(Policy::Inf, None)];
        for &c in &capacities {
            config.push((Policy::Fifo, Some(c)));
            config.push((Policy::Lru, Some(c)));
        }
        let mut histories = Histories::new(&config);
        histories.grow(IDS as usize).unwrap();
        assert_eq!(histories.words(), 2);
        // Each per-id array is reserved exactly: room for the next power of two of ids, no
        // more, also after growing again.
        for ids in [IDS as usize, 100] {
            histories.grow(ids).unwrap();
            let room = ids.next_power_of_two();
            assert_eq!(histories.present.capacity(), room * 2);
            assert_eq!(histories.nodes.capacity(), room * capacities.len());
        }
        let mut fifos = vec![VecDeque::<(u32, u64)>::new(); capacities.len()];
        let mut lrus = fifos.clone();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        // `inf` holds everything from the first request that taught it an id.
        let mut first_taught = None;
        for stamp in 0..3000u64 {
            let ids: Vec<u32> =
                (0..xorshift(&mut rng) % 4).map(|_| (xorshift(&mut rng) % 30) as u32).collect();
            let mut evictions = vec![0; config.len()];
            histories.learn(&ids, stamp, &mut evictions);
            if first_taught.is_none() && !ids.is_empty() {
                first_taught = Some(stamp);
            }
            assert_eq!(histories.oldest_stamp(0), first_taught);
            for (k, &capacity) in capacities.iter().enumerate() {
                let (fifo, lru) = (&mut fifos[k], &mut lrus[k]);
                let (mut fifo_evicted, mut lru_evicted) = (0, 0);
                for &id in &ids {
                    if !fifo.iter().any(|&(x, _)| x == id) {
                        if fifo.len() == capacity {
                            fifo.pop_front();
                            fifo_evicted += 1;
                        }
                        fifo.push_back((id, stamp));
                    }
                    if let Some(i) = lru.iter().position(|&(x, _)| x == id) {
                        lru.remove(i);
                    } else if lru.len() == capacity {
                        lru.pop_front();
                        lru_evicted += 1;
                    }
                    lru.push_back((id, stamp));
                }
                let (f, l) = (1 + 2 * k, 2 + 2 * k);
                assert_eq!((evictions[f], evictions[l]), (fifo_evicted, lru_evicted));
                assert_eq!(histories.oldest_stamp(f), fifo.front().map(|&(_, t)| t));
                assert_eq!(histories.oldest_stamp(l), lru.front().map(|&(_, t)| t));
                for x in 0..IDS {
                    assert_eq!(histories.is_present(x, f), fifo.iter().any(|&(y, _)| y == x));
                    assert_eq!(histories.is_present(x, l), lru.iter().any(|&(y, _)| y == x));
                }
            }
        }
    }
}
