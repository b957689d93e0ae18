//! One simulated engine: its block pool, its queues, and the scheduler step of vLLM as NVIDIA
//! Dynamo's mocker (1.6.1) replays it.
//!
//! A worker runs one forward pass at a time. A pass is decided, and its effects on the cache
//! made, when it starts; what it tells the router (a first token, a finished request) is
//! delivered when it ends ([`Signal`]). One pass:
//!
//! 1. **Running requests first**, in admission order, while the pass has token budget
//!    ([`MAX_BATCHED_TOKENS`]): a decoding request computes its one new token, one still in
//!    prefill its next chunk (chunked prefill). A request whose blocks cannot be had preempts
//!    the last running request (LIFO), whose blocks return to the pool and which goes back to
//!    the head of the waiting queue; it may be the request itself.
//! 2. **Then the waiting queue**, head first and never skipping it, unless this pass
//!    preempted or [`MAX_NUM_SEQS`] requests run: a new request whose prompt needs more blocks
//!    than the whole cache is rejected; otherwise the head is admitted when the blocks its whole
//!    sequence needs, less its cached prefix blocks already in use, are free or evictable.
//!    Admission looks the prompt up in the cache: the leading full blocks present, at most
//!    `floor((len - 1) / block size)` of them (the last token is always computed, for its
//!    logits), are pinned and reused.
//! 3. **Tokens**: every request whose sequence is now computed gets one new token (the first
//!    one from a finished prefill, else a decode step). A request with all its output tokens
//!    finishes: its blocks are released tail first.
//!
//! Blocks become cached as soon as they are full and computed, so later requests (even in the
//! same pass) reuse them; full blocks of generated tokens are cached too and take room.
//!
//! **Time** (Dynamo's polynomial model, divided by the speedup): a pass lasts its prefill time
//! plus its decode time. Prefill: `T` = the new prompt tokens the pass computes (as Dynamo
//! counts them: requests with a prefill chunk times the difference of the floors of their
//! mean prompt lengths with and without the chunk), `4.209989e-7 T^2 + 1.518344e-2 T +
//! 16.50142` ms when `T > 0`. Decode: `u` = the decoding requests' sequence lengths over the
//! cache's tokens (at most 1), `max(1, -25.74 u^2 + 54.01 u + 5.74)` ms when any request
//! decodes. Times are kept in nanoseconds.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use super::pool::{Content, Pool};
use crate::trace::Request;

/// Requests a worker runs at most at once (vLLM's `max_num_seqs`).
pub const MAX_NUM_SEQS: usize = 256;

/// Tokens one pass computes at most (vLLM's `max_num_batched_tokens`).
pub const MAX_BATCHED_TOKENS: u64 = 8192;

/// What a pass tells the router when it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// The request's first token.
    FirstToken(u32),
    /// The request finished (its blocks are released already).
    Finished(u32),
    /// The request's prompt needs more blocks than the whole cache: it is dropped.
    Rejected(u32),
}

/// A request in flight on a worker.
#[derive(Debug)]
pub(crate) struct Live {
    /// The request's number in the trace (from 0).
    pub(crate) seq: u64,
    /// The request as the trace gave it (its ids teach the ceiling's history at the end).
    pub(crate) request: Request,
    /// Its full engine blocks' ids.
    pub(crate) ids: Vec<u64>,
    pub(crate) worker: u32,
    /// Whether it counts (after the warm-up).
    pub(crate) counted: bool,
    /// Prompt tokens, and output tokens to generate.
    pub(crate) isl: u64,
    pub(crate) osl: u64,
    pub(crate) generated: u64,
    /// Tokens of the sequence computed (in the pool).
    pub(crate) computed: u64,
    /// Its blocks, in order; the first `filled` of them are full and computed.
    pub(crate) lease: Vec<u32>,
    filled: usize,
    /// Whether its last step was a decode step (not a prefill chunk).
    decoding: bool,
    /// Times in ns: arrival, first admission, first token.
    pub(crate) arrival: u64,
    pub(crate) admitted: Option<u64>,
    pub(crate) first_token: Option<u64>,
    /// Funnel stages fixed at routing, in tokens: F1, F2, F3.
    pub(crate) routed: [u64; 3],
    /// Prompt tokens reused: what its first admission found cached.
    pub(crate) reused: u64,
    /// Its share of the worker's queued prefill tokens, until its first token.
    pub(crate) prefill_charge: u64,
}

impl Live {
    pub(crate) fn new(request: Request, ids: Vec<u64>, worker: u32, arrival: u64) -> Live {
        Live {
            seq: 0,
            isl: request.prompt_tokens,
            osl: request.output_tokens,
            request,
            ids,
            worker,
            counted: false,
            generated: 0,
            computed: 0,
            lease: Vec::new(),
            filled: 0,
            decoding: false,
            arrival,
            admitted: None,
            first_token: None,
            routed: [0; 3],
            reused: 0,
            prefill_charge: 0,
        }
    }

    /// Tokens of the sequence so far: the prompt and the generated tokens.
    fn len(&self) -> u64 {
        self.isl + self.generated
    }

    /// Whether it still needs a token's logits (so its last token is recomputed).
    fn needs_logits(&self) -> bool {
        self.generated < self.osl
    }
}

/// Prompt tokens a cached prefix of `blocks` blocks lets a request of `len` tokens skip: at
/// most `floor((len - 1) / block_size)` blocks, since the last token is always computed (for
/// its logits).
pub(crate) fn reusable(blocks: usize, len: u64, block_size: usize) -> u64 {
    let bs = block_size as u64;
    (blocks as u64).saturating_mul(bs).min(len.saturating_sub(1) / bs * bs)
}

/// The slab of requests in flight, by key.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    entries: Vec<Option<Live>>,
    vacant: Vec<u32>,
}

impl Slab {
    pub(crate) fn insert(&mut self, live: Live) -> u32 {
        match self.vacant.pop() {
            Some(key) => {
                self.entries[key as usize] = Some(live);
                key
            }
            None => {
                self.entries.push(Some(live));
                self.entries.len() as u32 - 1
            }
        }
    }

    pub(crate) fn remove(&mut self, key: u32) -> Live {
        self.vacant.push(key);
        self.entries[key as usize].take().expect("a live request")
    }

    pub(crate) fn get(&mut self, key: u32) -> &mut Live {
        self.entries[key as usize].as_mut().expect("a live request")
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len() - self.vacant.len()
    }

    /// Heap bytes of the slab and of the requests in it (their ids and leases).
    pub(crate) fn heap_bytes(&self) -> usize {
        let own = self.entries.capacity() * size_of::<Option<Live>>()
            + self.vacant.capacity() * size_of::<u32>();
        let requests: usize = self
            .entries
            .iter()
            .flatten()
            .map(|live| {
                (live.request.prompt_ids.capacity()
                    + live.request.output_ids.capacity()
                    + live.ids.capacity())
                    * size_of::<u64>()
                    + live.lease.capacity() * size_of::<u32>()
            })
            .sum();
        own + requests
    }
}

/// How a request's step went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Scheduled,
    /// No budget, or no blocks even after preempting everything else.
    Blocked,
    /// It was preempted itself to make room.
    Preempted,
}

/// What one pass computed, for its duration.
#[derive(Clone, Copy, Debug, Default)]
struct Work {
    /// Requests with a prefill chunk, their sequence lengths through the chunk, and before it.
    prefills: u64,
    through: u64,
    before: u64,
    /// Decoding requests and the sum of their lengths.
    decodes: u64,
    decode_len: u64,
}

/// One worker. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) pool: Pool,
    block_size: usize,
    /// Admission order.
    pub(crate) running: Vec<u32>,
    pub(crate) waiting: VecDeque<u32>,
    /// What the pass in flight will tell when it ends.
    pub(crate) signals: Vec<Signal>,
}

impl Worker {
    /// Heap bytes of the worker's cache and queues (its requests live in the slab).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.pool.heap_bytes()
            + (self.running.capacity() + self.waiting.capacity()) * size_of::<u32>()
            + self.signals.capacity() * size_of::<Signal>()
    }

    pub(crate) fn new(capacity: u32, block_size: usize) -> Worker {
        Worker {
            pool: Pool::new(capacity),
            block_size,
            running: Vec::new(),
            waiting: VecDeque::new(),
            signals: Vec::new(),
        }
    }

    /// Whether it has requests to work on.
    pub(crate) fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    /// Runs one pass starting now; returns its duration in ns at `speedup`, or `None` if it
    /// had nothing to do. Its signals are in [`signals`](Self::signals).
    pub(crate) fn pass(&mut self, slab: &mut Slab, now: u64, speedup: f64) -> Option<u64> {
        self.signals.clear();
        let mut budget = MAX_BATCHED_TOKENS;
        let mut work = Work::default();
        let mut preempted = false;
        let mut i = 0;
        // A request finds no budget left as it finds no blocks: `Blocked`.
        while i < self.running.len() {
            let key = self.running[i];
            match self.step(slab, key, 0, true, &mut budget, &mut work, &mut preempted) {
                Step::Scheduled => i += 1,
                Step::Blocked => break,
                Step::Preempted => {}
            }
        }
        let capacity = u64::from(self.pool.capacity());
        while !preempted && self.running.len() < MAX_NUM_SEQS {
            let Some(&key) = self.waiting.front() else { break };
            let live = slab.get(key);
            let fresh = live.admitted.is_none();
            if fresh && live.isl.div_ceil(self.block_size as u64) > capacity {
                self.waiting.pop_front();
                self.signals.push(Signal::Rejected(key));
                continue;
            }
            let hit = self.pool.lookup(&live.ids);
            let len = live.len();
            let cached = reusable(hit.blocks, len, self.block_size);
            let active = reusable(hit.active, len, self.block_size) / self.block_size as u64;
            let needed = len.div_ceil(self.block_size as u64) - active;
            if needed > capacity - u64::from(self.pool.active_blocks()) {
                break;
            }
            match self.step(slab, key, cached, false, &mut budget, &mut work, &mut preempted) {
                Step::Scheduled => {
                    self.waiting.pop_front();
                    self.running.push(key);
                    let live = slab.get(key);
                    // Counted at the first admission only, as vLLM counts a request's cached
                    // tokens: readmitted after a preemption, a request finds its own blocks
                    // again, which were computed for it, not before it.
                    if live.admitted.is_none() {
                        live.reused = cached.min(live.isl);
                    }
                    live.admitted.get_or_insert(now);
                }
                Step::Blocked | Step::Preempted => break,
            }
        }
        self.emit(slab, &mut work);
        // Every prefill chunk and decode step takes budget.
        if budget == MAX_BATCHED_TOKENS && self.signals.is_empty() {
            return None;
        }
        Some(duration_ns(&work, capacity * self.block_size as u64, speedup))
    }

    /// Schedules `key`'s next tokens: a decode step, or a prefill chunk starting after
    /// `cached` reused tokens (for an admission). Only a running request may preempt others
    /// for its blocks.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        slab: &mut Slab,
        key: u32,
        cached: u64,
        may_preempt: bool,
        budget: &mut u64,
        work: &mut Work,
        preempted: &mut bool,
    ) -> Step {
        let bs = self.block_size as u64;
        let live = slab.get(key);
        let cached = if live.computed == 0 { cached } else { 0 };
        let start = live.computed + cached;
        let want = (live.len() - start).min(*budget);
        if want == 0 {
            return Step::Blocked;
        }
        let target = (start + want).div_ceil(bs) as usize;
        loop {
            let live = slab.get(key);
            let (fresh, queued_hits, hits) = if live.lease.is_empty() {
                let hits = (cached / bs) as usize;
                let hit = self.pool.lookup(&live.ids[..hits]);
                (target - hits, hits - hit.active, hits)
            } else {
                (target.saturating_sub(live.lease.len()), 0, 0)
            };
            if self.pool.can_take(fresh as u32, queued_hits as u32) {
                for &id in &live.ids[..hits] {
                    live.lease.push(self.pool.pin(id));
                }
                live.filled = live.filled.max(hits);
                for _ in 0..fresh {
                    live.lease.push(self.pool.take());
                }
                break;
            }
            let Some(&victim) = self.running.last().filter(|_| may_preempt) else {
                return Step::Blocked;
            };
            self.preempt(slab, victim);
            *preempted = true;
            if victim == key {
                return Step::Preempted;
            }
        }
        let live = slab.get(key);
        live.computed = start + want;
        let full = (live.computed / bs) as usize;
        for k in live.filled..full {
            let content = match live.ids.get(k) {
                Some(&id) => Content::Prompt(id),
                None => Content::Generated,
            };
            self.pool.fill(live.lease[k], content);
        }
        live.filled = live.filled.max(full);
        *budget -= want;
        if !live.decoding {
            work.prefills += 1;
            work.through += start + want;
            work.before += start;
        }
        Step::Scheduled
    }

    /// Preempts `victim` (the last running request): its blocks go back tail first, its
    /// computation is lost, and it waits at the head of the queue.
    fn preempt(&mut self, slab: &mut Slab, victim: u32) {
        let popped = self.running.pop();
        debug_assert_eq!(popped, Some(victim));
        let live = slab.get(victim);
        self.release(live);
        live.computed = 0;
        live.filled = 0;
        live.decoding = false;
        self.waiting.push_front(victim);
    }

    fn release(&mut self, live: &mut Live) {
        for &slot in live.lease.iter().rev() {
            self.pool.release(slot);
        }
        live.lease.clear();
    }

    /// Gives every request whose sequence is computed its next token, and finishes those
    /// with all their tokens.
    fn emit(&mut self, slab: &mut Slab, work: &mut Work) {
        let mut kept = 0;
        for i in 0..self.running.len() {
            let key = self.running[i];
            let live = slab.get(key);
            let mut finished = false;
            if live.computed == live.len() {
                if live.needs_logits() {
                    if live.decoding {
                        work.decodes += 1;
                        work.decode_len += live.len();
                    }
                    if live.generated == 0 {
                        self.signals.push(Signal::FirstToken(key));
                    }
                    live.generated += 1;
                    live.decoding = true;
                }
                finished = live.generated == live.osl;
            }
            if finished {
                self.release(live);
                self.signals.push(Signal::Finished(key));
            } else {
                self.running[kept] = key;
                kept += 1;
            }
        }
        self.running.truncate(kept);
    }

    /// Runs `key` alone from arrival to completion, as if nothing else were in flight
    /// (`--timing instant`): admission, its whole sequence computed, release. `false` if
    /// its prompt needs more blocks than the cache has.
    pub(crate) fn run_alone(&mut self, live: &mut Live) -> bool {
        let bs = self.block_size as u64;
        if live.isl.div_ceil(bs) > u64::from(self.pool.capacity()) {
            return false;
        }
        let hit = self.pool.lookup(&live.ids);
        let cached = reusable(hit.blocks, live.isl, self.block_size);
        live.reused = cached.min(live.isl);
        let hits = (cached / bs) as usize;
        // Blocks at completion: the last generated token is never computed.
        let last = (live.isl + live.osl).saturating_sub(u64::from(live.osl > 0));
        let blocks = last.div_ceil(bs) as usize;
        let full = (last / bs) as usize;
        debug_assert_eq!(self.pool.active_blocks(), 0, "nothing else is in flight");
        for &id in &live.ids[..hits] {
            live.lease.push(self.pool.pin(id));
        }
        for k in hits..blocks {
            let slot = self.pool.take();
            if k < full {
                let content = live.ids.get(k).map_or(Content::Generated, |&id| Content::Prompt(id));
                self.pool.fill(slot, content);
            }
            live.lease.push(slot);
        }
        self.release(live);
        true
    }
}

/// A pass's duration in ns: Dynamo's polynomial model (see the [module docs](self)).
fn duration_ns(work: &Work, cache_tokens: u64, speedup: f64) -> u64 {
    let mut ms = 0.0;
    if work.prefills > 0 {
        let t =
            (work.prefills * (work.through / work.prefills - work.before / work.prefills)) as f64;
        if t > 0.0 {
            ms += 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142;
        }
    }
    if work.decodes > 0 {
        let u = (work.decode_len as f64 / cache_tokens as f64).min(1.0);
        ms += (-25.74 * u * u + 54.01 * u + 5.74).max(1.0);
    }
    (ms / speedup * 1e6) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn the_last_prompt_token_is_recomputed() {
        assert_eq!(reusable(4, 16, 4), 12, "a fully cached prompt recomputes a block");
        assert_eq!(reusable(4, 17, 4), 16);
        assert_eq!(reusable(9, 17, 4), 16);
        assert_eq!(reusable(1, 0, 4), 0);
    }

    #[test]
    fn durations_follow_the_polynomials() {
        for (tokens, want) in [(512, 24.3857), (8192, 169.1368)] {
            let ms = prefill_ns(1, tokens, 0, 1 << 20) as f64 / 1e6;
            assert!((ms - want).abs() < 1e-3, "{ms}");
        }
        let ms = decode_ns(2, 1 << 19, 1 << 20) as f64 / 1e6;
        let u = 0.5;
        assert!((ms - (-25.74 * u * u + 54.01 * u + 5.74)).abs() < 1e-6);
        // An almost empty cache: 5.74 ms, a thousand times faster.
        assert_eq!(
            duration_ns(&Work { decodes: 1, decode_len: 1, ..Work::default() }, 1 << 30, 1000.0),
            5740
        );
    }

    fn live(slab: &mut Slab, isl: u64, osl: u64, ids: Vec<u64>) -> u32 {
        let request = Request { prompt_tokens: isl, output_tokens: osl, ..Request::default() };
        slab.insert(Live::new(request, ids, 0, 0))
    }

    /// Runs passes until the worker is idle; returns the signals in order.
    fn drain(worker: &mut Worker, slab: &mut Slab) -> Vec<Signal> {
        let mut all = vec![];
        while worker.has_work() {
            worker.pass(slab, 0, 1.0).expect("a worker with work does something");
            check(worker, slab);
            all.extend_from_slice(&worker.signals);
        }
        all
    }

    /// The pool's own invariants; a waiting request holds nothing and has nothing computed;
    /// a running one holds a block for each started block of what it computed.
    fn check(worker: &Worker, slab: &mut Slab) {
        worker.pool.check();
        for &key in &worker.waiting {
            let live = slab.get(key);
            assert_eq!((live.lease.len(), live.computed, live.filled), (0, 0, 0), "{key}");
        }
        for &key in &worker.running {
            let live = slab.get(key);
            assert!(live.lease.len() as u64 >= live.computed.div_ceil(worker.block_size as u64));
            assert!(live.filled <= live.lease.len());
        }
    }

    fn prefill_ns(prefills: u64, through: u64, before: u64, cache_tokens: u64) -> u64 {
        duration_ns(&Work { prefills, through, before, ..Work::default() }, cache_tokens, 1.0)
    }

    fn decode_ns(decodes: u64, decode_len: u64, cache_tokens: u64) -> u64 {
        duration_ns(&Work { decodes, decode_len, ..Work::default() }, cache_tokens, 1.0)
    }

    #[test]
    fn prefills_of_several_requests_count_as_dynamo_counts_them() {
        // Two chunks, of 201 and 200 tokens, from lengths 100 and 0: the floors of the mean
        // lengths (200 and 50) differ by 150, times two requests.
        let t = 300.0;
        let ms = 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142;
        assert_eq!(prefill_ns(2, 401, 100, 1 << 20), (ms * 1e6) as u64);
        // The floors are equal (50 and 50): no prefill time, not the constant alone.
        assert_eq!(prefill_ns(2, 101, 100, 1 << 20), 0);
    }

    #[test]
    fn a_long_prompt_prefills_in_chunks_of_the_pass_budget_then_decodes() {
        let (capacity, bs) = (4096, 16);
        let cache_tokens = capacity * bs;
        let mut worker = Worker::new(capacity as u32, bs as usize);
        let mut slab = Slab::default();
        let ids: Vec<u64> = (0..1250).collect();
        let a = live(&mut slab, 20_000, 2, ids.clone());
        worker.waiting.push_back(a);
        for (through, before) in [(8192, 0), (16_384, 8192), (20_000, 16_384)] {
            let ns = worker.pass(&mut slab, 0, 1.0);
            assert_eq!(ns, Some(prefill_ns(1, through, before, cache_tokens)));
            check(&worker, &mut slab);
        }
        assert_eq!(worker.signals, [Signal::FirstToken(a)]);
        // One decode step over the prompt and the first token, with the cache's share.
        assert_eq!(worker.pass(&mut slab, 0, 1.0), Some(decode_ns(1, 20_001, cache_tokens)));
        assert_eq!(worker.signals, [Signal::Finished(a)]);
        // The same prompt again: all of it cached but its last block, recomputed for the
        // last token's logits.
        let b = live(&mut slab, 20_000, 1, ids);
        worker.waiting.push_back(b);
        let ns = worker.pass(&mut slab, 0, 1.0);
        assert_eq!(ns, Some(prefill_ns(1, 20_000, 19_984, cache_tokens)));
        assert_eq!(worker.signals, [Signal::FirstToken(b), Signal::Finished(b)]);
        assert_eq!(slab.get(b).reused, 19_984);
    }

    #[test]
    fn running_requests_decode_together() {
        let mut worker = Worker::new(16, 4);
        let mut slab = Slab::default();
        let a = live(&mut slab, 4, 3, vec![1]);
        let b = live(&mut slab, 4, 3, vec![2]);
        worker.waiting.extend([a, b]);
        assert_eq!(worker.pass(&mut slab, 0, 1.0), Some(prefill_ns(2, 8, 0, 64)));
        assert_eq!(worker.signals, [Signal::FirstToken(a), Signal::FirstToken(b)]);
        // Both decode, each over its 5 tokens.
        assert_eq!(worker.pass(&mut slab, 0, 1.0), Some(decode_ns(2, 10, 64)));
        assert_eq!((slab.get(a).generated, slab.get(b).generated), (2, 2));
        assert_eq!(drain(&mut worker, &mut slab), [Signal::Finished(a), Signal::Finished(b)]);
    }

    #[test]
    fn at_most_max_num_seqs_requests_run() {
        let mut worker = Worker::new(1 << 12, 4);
        let mut slab = Slab::default();
        let keys: Vec<u32> = (0..300).map(|i| live(&mut slab, 1, 5, vec![i])).collect();
        worker.waiting.extend(&keys);
        worker.pass(&mut slab, 0, 1.0);
        assert_eq!(worker.running, keys[..MAX_NUM_SEQS]);
        assert_eq!(worker.waiting.len(), 300 - MAX_NUM_SEQS);
        assert_eq!(worker.signals.len(), MAX_NUM_SEQS, "first tokens");
        assert_eq!(drain(&mut worker, &mut slab).len(), 600 - MAX_NUM_SEQS);
    }

    #[test]
    fn the_last_admitted_preempts_itself_and_no_other() {
        // a (1 block) and b (2 blocks) fill a 3-block cache; at b's next block it is the
        // last admitted, so it preempts itself, and a finishes in the same pass.
        let mut worker = Worker::new(3, 2);
        let mut slab = Slab::default();
        let a = live(&mut slab, 1, 2, vec![]);
        let b = live(&mut slab, 4, 3, vec![1, 2]);
        worker.waiting.extend([a, b]);
        worker.pass(&mut slab, 0, 1.0);
        assert_eq!(worker.signals, [Signal::FirstToken(a), Signal::FirstToken(b)]);
        assert_eq!(worker.pool.active_blocks(), 3);
        worker.pass(&mut slab, 0, 1.0);
        check(&worker, &mut slab);
        assert_eq!(worker.signals, [Signal::Finished(a)]);
        assert_eq!((worker.running.len(), &worker.waiting), (0, &VecDeque::from([b])));
        // Readmitted, b finds its own two blocks again: computed for it, so not reuse (its
        // first admission found nothing).
        let signals = drain(&mut worker, &mut slab);
        assert_eq!((slab.get(b).reused, &signals[..]), (0, &[Signal::Finished(b)][..]));
    }

    /// A request is admitted when the blocks of its whole sequence, less its cached prefix
    /// already in use, are free, even if the chunk this pass computes needs fewer.
    #[test]
    fn admission_needs_room_for_the_whole_sequence_less_blocks_in_use() {
        for (capacity, admitted) in [(540, true), (519, false)] {
            let mut worker = Worker::new(capacity, 16);
            let mut slab = Slab::default();
            // a takes 8000 of the pass's 8192 tokens and 500 blocks; b shares its 500
            // blocks and needs 20 more, of which this pass's 192 tokens fill 12.
            let a = live(&mut slab, 8000, 100, (0..500).collect());
            let b = live(&mut slab, 8320, 1, (0..500).chain(1000..1020).collect());
            worker.waiting.extend([a, b]);
            worker.pass(&mut slab, 0, 1.0);
            check(&worker, &mut slab);
            let want: &[u32] = if admitted { &[a, b] } else { &[a] };
            assert_eq!(worker.running, want, "capacity {capacity}");
            assert_eq!(slab.get(b).computed, if admitted { 8192 } else { 0 });
        }
        // No cached prefix: b needs all its 32 blocks, and 20 are free.
        let mut worker = Worker::new(520, 16);
        let mut slab = Slab::default();
        let a = live(&mut slab, 8000, 100, (0..500).collect());
        let b = live(&mut slab, 500, 1, (1000..1031).collect());
        worker.waiting.extend([a, b]);
        worker.pass(&mut slab, 0, 1.0);
        assert_eq!((&worker.running[..], worker.waiting.len()), (&[a][..], 1));
    }

    #[test]
    fn a_request_prefills_in_chunks_then_decodes_then_frees_its_blocks() {
        let mut worker = Worker::new(8, 4);
        let mut slab = Slab::default();
        let a = live(&mut slab, 10, 3, vec![1, 2]);
        worker.waiting.push_back(a);
        assert_eq!(drain(&mut worker, &mut slab), [Signal::FirstToken(a), Signal::Finished(a)]);
        // 10 + 3 - 1 = 12 tokens computed: three full blocks, the prompt's two and one with
        // the prompt's tail and generated tokens.
        assert_eq!(worker.pool.cached_blocks(), 2);
        assert_eq!(worker.pool.active_blocks(), 0);
        let b = live(&mut slab, 10, 1, vec![1, 2]);
        worker.waiting.push_back(b);
        drain(&mut worker, &mut slab);
        assert_eq!(slab.get(b).reused, 8);
    }

    #[test]
    fn a_prompt_larger_than_the_cache_is_rejected_and_outputs_fit() {
        let mut worker = Worker::new(2, 4);
        let mut slab = Slab::default();
        let big = live(&mut slab, 9, 1, vec![1, 2]);
        worker.waiting.push_back(big);
        assert_eq!(drain(&mut worker, &mut slab), [Signal::Rejected(big)]);
    }

    #[test]
    fn a_full_cache_preempts_the_last_admitted() {
        // Two requests whose sequences grow past the cache together: the later one is
        // preempted, recomputed after the first finishes, and both finish.
        let mut worker = Worker::new(4, 2);
        let mut slab = Slab::default();
        let a = live(&mut slab, 2, 5, vec![1]);
        let b = live(&mut slab, 2, 5, vec![7]);
        worker.waiting.extend([a, b]);
        let signals = drain(&mut worker, &mut slab);
        let finished: Vec<_> = signals
            .iter()
            .filter_map(|s| if let Signal::Finished(k) = s { Some(*k) } else { None })
            .collect();
        assert_eq!(finished, [a, b]);
        assert!(slab.get(b).computed > 0);
    }
}
