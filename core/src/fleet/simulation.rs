//! One fleet shape (workers, cache size, router) simulated over a trace.
//!
//! Requests arrive in trace order at their timestamps (a timestamp before the previous one,
//! or none, counts as the previous one). Before a request is routed, every worker's passes
//! that end by its arrival are played out, in order of their end: what a pass tells the
//! router (first tokens, finished requests) lands at its end, and a worker starts its next
//! pass right away if it has work, so at one instant completions come first, then routing,
//! then new passes (as in Dynamo's replay). Passes that end at one instant are played out in
//! order of their start, then of their worker's number. With `--timing instant` there are no
//! passes: each request is routed, computed and finished before the next arrives.
//!
//! Per request the funnel's stages are fixed as it goes: F1 and F2, F3 when it is routed
//! (the ceiling's history and the caches as they are then), F4 = F5 at its first admission
//! (a request preempted and admitted again finds its own blocks then, which is not reuse), and
//! the request counts when it finishes. The ceiling's history learns a request's ids when it
//! finishes, as a router's does.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::hash::BuildHasherDefault;

use hashbrown::HashMap;
use rustc_hash::FxHasher;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::router::{Candidates, Load, Routing};
use super::stats::Quantiles;
use super::worker::{Live, Signal, Slab, Worker, reusable};
use super::{FleetError, FleetRow, Outcome, Shape, Timing, WorkerShare};
use crate::funnel::Funnel;
use crate::replay::{Policy, Replay, ReplayConfig};
use crate::trace::Request;

/// The latest arrival, in ns from the first (2^62, 146 years): timestamps further apart
/// (a unit mixed up, say) arrive here, leaving the passes after them 3 x 2^62 ns (438 years)
/// before the clock runs out of `u64` ([`FleetError::Clock`]).
const LAST_ARRIVAL_NS: u64 = 1 << 62;

/// Prompt blocks of one worker's requests in flight, with their multiplicity.
type BlockCounts = HashMap<u64, u32, BuildHasherDefault<FxHasher>>;

/// One generator per row, from the seed and what the row is (not where it is).
pub(crate) fn row_rng(shape: &Shape, seed: u64) -> fastrand::Rng {
    let mut identity = Vec::new();
    identity.extend_from_slice(&seed.to_le_bytes());
    identity.extend_from_slice(&(shape.workers as u64).to_le_bytes());
    identity.extend_from_slice(&(shape.worker_capacity as u64).to_le_bytes());
    identity.extend_from_slice(shape.router.as_str().as_bytes());
    fastrand::Rng::with_seed(xxh3_64_with_seed(&identity, 0))
}

/// A simulation of one shape. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Simulation {
    shape: Shape,
    timing: Timing,
    engine_block_size: usize,
    trace_block_size: usize,
    measure_from: u64,
    workers: Vec<Worker>,
    busy: Vec<bool>,
    loads: Vec<Load>,
    /// Per worker, when the router weighs them (`kv`): its requests' prompt blocks.
    in_flight: Option<Vec<BlockCounts>>,
    routing: Routing,
    rng: fastrand::Rng,
    /// F1's history.
    ceiling: Replay,
    slab: Slab,
    /// Passes in flight: (end, start, worker), earliest first.
    passes: BinaryHeap<Reverse<(u64, u64, u32)>>,
    /// The first timestamp (ms), and the latest arrival (ns from it).
    origin: Option<u64>,
    now: u64,
    requests: u64,
    /// Evictions before the first counted request.
    evictions_before: Option<u64>,
    /// An error met while passes played out, reported by the next call.
    failed: Option<FleetError>,
    /// Each finished request's evidence, when asked for.
    outcomes: Option<Vec<Outcome>>,
    cached: Vec<usize>,
    // What is counted.
    funnel: Funnel,
    counted: u64,
    rejected: u64,
    truncated: u64,
    ttft: Quantiles,
    queue_ns: u128,
    queued: u64,
    per_worker: Vec<WorkerShare>,
}

impl Simulation {
    pub(crate) fn new(
        shape: &Shape,
        config: &super::FleetConfig,
        engine_block_size: usize,
    ) -> Result<Simulation, FleetError> {
        let history = match config.history {
            Some(capacity) => (Policy::Fifo, Some(capacity)),
            None => (Policy::Inf, None),
        };
        let ceiling = Replay::new(&ReplayConfig {
            block_size: config.block_size,
            histories: vec![history],
            measure_from: 0,
        })
        .map_err(FleetError::History)?;
        let n = shape.workers;
        let kv = shape.router.name() == "kv";
        Ok(Simulation {
            timing: config.timing,
            engine_block_size,
            trace_block_size: config.block_size,
            measure_from: config.measure_from as u64,
            workers: (0..n)
                .map(|_| Worker::new(shape.worker_capacity as u32, engine_block_size))
                .collect(),
            busy: vec![false; n],
            loads: vec![Load::default(); n],
            in_flight: kv.then(|| (0..n).map(|_| BlockCounts::default()).collect()),
            routing: Routing::new(&shape.router, n),
            rng: row_rng(shape, config.seed),
            ceiling,
            slab: Slab::default(),
            passes: BinaryHeap::new(),
            origin: None,
            now: 0,
            requests: 0,
            evictions_before: None,
            failed: None,
            outcomes: None,
            cached: vec![0; n],
            funnel: Funnel::default(),
            counted: 0,
            rejected: 0,
            truncated: 0,
            ttft: Quantiles::default(),
            queue_ns: 0,
            queued: 0,
            per_worker: vec![WorkerShare::default(); n],
            shape: shape.clone(),
        })
    }

    /// Requests in flight (routed, not finished).
    pub(crate) fn in_flight(&self) -> usize {
        self.slab.len()
    }

    /// Heap bytes of the simulation's state: caches and queues, ceiling, router, requests in
    /// flight, passes, statistics.
    pub(crate) fn heap_bytes(&self) -> usize {
        let workers: usize = self.workers.iter().map(Worker::heap_bytes).sum();
        let in_flight: usize =
            self.in_flight.iter().flatten().map(BlockCounts::allocation_size).sum();
        let per_worker = self.workers.capacity() * size_of::<Worker>()
            + self.busy.capacity() // a `bool` is one byte
            + self.loads.capacity() * size_of::<Load>()
            + self.cached.capacity() * size_of::<usize>()
            + self.per_worker.capacity() * size_of::<WorkerShare>()
            + self.in_flight.as_ref().map_or(0, |v| v.capacity() * size_of::<BlockCounts>());
        let outcomes = self.outcomes.as_ref().map_or(0, |o| o.capacity() * size_of::<Outcome>());
        workers
            + in_flight
            + per_worker
            + self.slab.heap_bytes()
            + self.passes.capacity() * size_of::<Reverse<(u64, u64, u32)>>()
            + outcomes
            + self.ceiling.heap_bytes()
            + self.routing.heap_bytes()
            + self.ttft.heap_bytes()
            + self.shape.router.heap_bytes()
    }

    /// The arrival time of a request stamped `timestamp` (ms), in ns from the first, at most
    /// [`LAST_ARRIVAL_NS`].
    fn arrival(&mut self, timestamp: Option<u64>) -> u64 {
        let Some(ms) = timestamp else { return self.now };
        let origin = *self.origin.get_or_insert(ms);
        ms.saturating_sub(origin).saturating_mul(1_000_000).min(LAST_ARRIVAL_NS).max(self.now)
    }

    /// Routes `request` (whose full engine blocks are `ids`) at its arrival.
    pub(crate) fn push(&mut self, request: &Request, ids: &[u64]) -> Result<(), FleetError> {
        let counted = self.requests >= self.measure_from;
        self.requests += 1;
        let now = self.arrival(request.timestamp);
        self.now = now;
        if let Timing::Mocker { .. } = self.timing {
            self.advance(now);
        }
        // The row counts evictions from the first counted arrival on: the passes that ended
        // by then worked for the warm-up's requests alone.
        if counted && self.evictions_before.is_none() {
            self.evictions_before = Some(self.evictions());
        }
        if let Some(error) = self.failed.take() {
            return Err(error);
        }
        let f1 = self.ceiling.look_up(request).map_err(FleetError::History)?[0];
        for (w, worker) in self.workers.iter().enumerate() {
            self.cached[w] = worker.pool.lookup(ids).blocks;
            self.loads[w].cached_blocks = worker.pool.cached_blocks() as u64;
        }
        let in_flight = self.in_flight.as_ref();
        let in_flight_prefix = |w: usize| {
            in_flight
                .map_or(0, |maps| ids.iter().take_while(|id| maps[w].contains_key(*id)).count())
        };
        let candidates = Candidates {
            request,
            ids,
            cached: &self.cached,
            loads: &self.loads,
            in_flight_prefix: &in_flight_prefix,
            engine_block_size: self.engine_block_size,
            trace_block_size: self.trace_block_size,
        };
        let w = self.routing.choose(&candidates, &mut self.rng);

        // The longest sequence a worker holds: its last token is never computed, so a request
        // generates at most one token past it (as vLLM's max_model_len caps it).
        let (isl, bs) = (request.prompt_tokens, self.engine_block_size as u64);
        let most = self.shape.worker_capacity as u64 * bs;
        let osl = match isl <= most {
            true => request.output_tokens.min(most + 1 - isl),
            false => request.output_tokens,
        };
        self.truncated += u64::from(counted && osl < request.output_tokens);
        let best = self.cached.iter().copied().max().unwrap_or(0);
        let reusable = |blocks| reusable(blocks, isl, self.engine_block_size);
        let mut live = Live::new(request.clone(), ids.to_vec(), w as u32, now);
        live.seq = self.requests - 1;
        live.osl = osl;
        live.counted = counted;
        live.routed = [f1, reusable(best), reusable(self.cached[w])];
        live.prefill_charge = isl - isl.min(self.cached[w] as u64 * bs);
        let load = &mut self.loads[w];
        load.requests += 1;
        load.prefill_tokens += live.prefill_charge;
        if let Some(maps) = &mut self.in_flight {
            for &id in ids {
                *maps[w].entry(id).or_insert(0) += 1;
            }
            self.loads[w].active_blocks = maps[w].len() as u64;
        }

        match self.timing {
            // Nothing to compute or reuse: routed and counted, no engine work.
            _ if isl == 0 => self.finish(live)?,
            Timing::Instant => {
                if self.workers[w].run_alone(&mut live) {
                    return self.finish(live);
                }
                self.reject(live);
                return Ok(());
            }
            Timing::Mocker { .. } => {
                let key = self.slab.insert(live);
                self.workers[w].waiting.push_back(key);
            }
        }
        // Every idle worker with work starts its next pass: the one given this request, and
        // any whose pass ended at this very arrival (`advance` leaves those for now, so that
        // their next pass can take what arrives), even when this request gave no work. The
        // next arrival is not known yet: every pass started now stays in flight.
        if let Timing::Mocker { speedup } = self.timing {
            for w in 0..self.workers.len() {
                if !self.busy[w] {
                    self.start(w, now, now, speedup);
                }
            }
        }
        Ok(())
    }

    /// Plays out every pass that ends by `until`; passes that end before it are followed by
    /// the worker's next.
    fn advance(&mut self, until: u64) {
        let Timing::Mocker { speedup } = self.timing else { return };
        while let Some(&Reverse((end, _, w))) = self.passes.peek() {
            if end > until {
                break;
            }
            self.passes.pop();
            let w = w as usize;
            self.busy[w] = false;
            let signals = core::mem::take(&mut self.workers[w].signals);
            for &signal in &signals {
                self.deliver(signal, end);
            }
            self.workers[w].signals = signals;
            if end < until {
                self.start(w, end, until, speedup);
            }
        }
    }

    /// Starts worker `w`'s next pass at `now`, if it has work. Passes that tell nothing
    /// (decode steps, chunks of prefill) and end before `until` are run one after the other
    /// at once: nothing of theirs is delivered, so no other worker's order matters to them.
    /// The first pass that tells something, or ends at or after `until`, is left in flight.
    /// A pass that would end at the clock's last ns or past it is not started: the simulation
    /// fails with [`FleetError::Clock`] instead.
    fn start(&mut self, w: usize, mut now: u64, until: u64, speedup: f64) {
        let worker = &mut self.workers[w];
        while worker.has_work() {
            let Some(duration) = worker.pass(&mut self.slab, now, speedup) else {
                debug_assert!(false, "a worker with work did nothing");
                return;
            };
            // (An end at u64::MAX would be one `advance` never restarts a worker after.)
            let Some(end) = now.checked_add(duration).filter(|&end| end < u64::MAX) else {
                // The simulation stops with the error at the next arrival, or at the end.
                self.failed.get_or_insert(FleetError::Clock);
                return;
            };
            if worker.signals.is_empty() && end < until {
                now = end;
                continue;
            }
            self.busy[w] = true;
            self.passes.push(Reverse((end, now, w as u32)));
            return;
        }
    }

    /// A pass's signal lands at `now`.
    fn deliver(&mut self, signal: Signal, now: u64) {
        match signal {
            Signal::FirstToken(key) => {
                let live = self.slab.get(key);
                live.first_token = Some(now);
                self.loads[live.worker as usize].prefill_tokens -= live.prefill_charge;
                live.prefill_charge = 0;
            }
            Signal::Finished(key) => {
                let live = self.slab.remove(key);
                // The history refuses only beyond 2^32 distinct ids or memory: the error
                // stops the simulation at the next arrival.
                if let Err(error) = self.finish(live) {
                    self.failed.get_or_insert(error);
                }
            }
            Signal::Rejected(key) => {
                let live = self.slab.remove(key);
                self.reject(live);
            }
        }
    }

    /// The router lets go of a request.
    fn unroute(&mut self, live: &Live) {
        let w = live.worker as usize;
        let load = &mut self.loads[w];
        load.requests -= 1;
        load.prefill_tokens -= live.prefill_charge;
        if let Some(maps) = &mut self.in_flight {
            for id in &live.ids {
                if let hashbrown::hash_map::EntryRef::Occupied(mut entry) = maps[w].entry_ref(id) {
                    *entry.get_mut() -= 1;
                    if *entry.get() == 0 {
                        entry.remove();
                    }
                }
            }
            self.loads[w].active_blocks = maps[w].len() as u64;
        }
    }

    /// Keeps each finished (or rejected) request's evidence from now on, for
    /// [`take_outcomes`](Self::take_outcomes).
    pub(crate) fn record_outcomes(&mut self) {
        self.outcomes.get_or_insert_with(Vec::new);
    }

    /// The evidence of the requests finished since the last call.
    pub(crate) fn take_outcomes(&mut self) -> Vec<Outcome> {
        self.outcomes.as_mut().map(core::mem::take).unwrap_or_default()
    }

    fn record(&mut self, live: &Live, rejected: bool) {
        if let Some(outcomes) = &mut self.outcomes {
            outcomes.push(Outcome {
                request: live.seq,
                worker: live.worker as usize,
                prompt_tokens: live.isl,
                best_cached_tokens: live.routed[1],
                selected_cached_tokens: live.routed[2],
                found_tokens: live.reused,
                reused_tokens: live.reused,
                rejected,
            });
        }
    }

    /// A request finished: the history learns it and it is counted.
    fn finish(&mut self, live: Live) -> Result<(), FleetError> {
        self.record(&live, false);
        self.unroute(&live);
        let learned = self.ceiling.learn(&live.request).map_err(FleetError::History);
        if live.counted {
            let [f1, f2, f3] = live.routed;
            let funnel = Funnel::of_request([live.isl, f1, f2, f3, live.reused, live.reused]);
            self.funnel.add(&funnel);
            self.counted += 1;
            let share = &mut self.per_worker[live.worker as usize];
            share.requests += 1;
            share.prompt_tokens += live.isl;
            share.reused_tokens += funnel.f5;
            if let Some(first) = live.first_token {
                self.ttft.record(first - live.arrival);
            }
            if let Some(admitted) = live.admitted {
                self.queue_ns += u128::from(admitted - live.arrival);
                self.queued += 1;
            }
        }
        learned
    }

    /// A request whose prompt no worker's cache can hold is dropped, and counted apart.
    fn reject(&mut self, live: Live) {
        self.record(&live, true);
        self.unroute(&live);
        self.rejected += u64::from(live.counted);
    }

    fn evictions(&self) -> u64 {
        self.workers.iter().map(|w| w.pool.evictions).sum()
    }

    /// Plays every pass out to the end of the trace.
    pub(crate) fn finish_trace(&mut self) -> Result<(), FleetError> {
        self.advance(u64::MAX);
        self.failed.take().map_or(Ok(()), Err)
    }

    /// The row's results (after [`finish_trace`](Self::finish_trace)).
    pub(crate) fn row(&self) -> FleetRow {
        let mocker = matches!(self.timing, Timing::Mocker { .. });
        let ms = |ns: f64| ns / 1e6;
        FleetRow {
            workers: self.shape.workers,
            worker_capacity: self.shape.worker_capacity,
            router: self.shape.router.clone(),
            requests: self.counted,
            rejected_requests: self.rejected,
            truncated_outputs: self.truncated,
            funnel: self.funnel,
            evictions: self.evictions() - self.evictions_before.unwrap_or(self.evictions()),
            ttft_ms_p50: self.ttft.quantile(0.5).filter(|_| mocker).map(ms),
            ttft_ms_p99: self.ttft.quantile(0.99).filter(|_| mocker).map(ms),
            queue_ms_mean: (mocker && self.queued > 0)
                .then(|| ms(self.queue_ns as f64 / self.queued as f64)),
            per_worker: self.per_worker.clone(),
        }
    }

    /// Sets the clock, as if requests had arrived until `now` (tests).
    #[cfg(test)]
    pub(crate) fn set_clock(&mut self, now: u64) {
        self.now = now;
    }

    /// When the first pass in flight ends (tests).
    #[cfg(test)]
    pub(crate) fn first_pass_end(&self) -> Option<u64> {
        self.passes.peek().map(|&Reverse((end, _, _))| end)
    }

    /// Checks the workers' pools (tests).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        for worker in &self.workers {
            worker.pool.check();
            assert!(worker.pool.active_blocks() <= worker.pool.capacity());
        }
    }
}
