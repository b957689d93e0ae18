//! Fleet simulation: how much of the reuse ceiling a fleet of workers keeps, and where the
//! rest is lost, for many fleet shapes at once.
//!
//! F1 (the [replay](crate::replay)'s ceiling) counts the prompt tokens computed before
//! anywhere. A fleet reuses fewer: each worker caches only what it computed, evicts under
//! pressure, and the router may send a request away from the worker that holds its prefix.
//! This module replays a trace through simulated fleets and counts the whole cache-loss
//! [`Funnel`]: F1 (seen before), F2 (cached on the best worker at routing), F3 (on the
//! selected worker), F4 (found at admission), F5 (reused), and so the losses between them:
//! cold, retention, routing, race, retrieval.
//!
//! The model is NVIDIA Dynamo's offline replay (the mocker, 1.6.1), which the command line's
//! peer benchmark checks it against:
//!
//! - **Workers** (`worker.rs`): N engines with a prefix cache of C blocks each, vLLM's block
//!   pool (`pool.rs`): blocks of running requests pinned, finished requests' blocks released
//!   tail first into an LRU queue, evictions from its head, full blocks of generated tokens
//!   cached too; vLLM's scheduler step with chunked prefill, preemption and Dynamo's timing
//!   polynomials, or none of that with [`Timing::Instant`].
//! - **Blocks** (`blocks.rs`): the engine's block size may divide the trace's or be a multiple
//!   of it; engine block ids chain what the trace's ids say of their tokens.
//! - **Routers** ([`router`]): round-robin, random, least-loaded, Dynamo's KV router,
//!   SGLang's cache-aware router, smg's prefix hash, and session affinity.
//! - **The ceiling**: a FIFO history of trace block ids (or an unbounded one) that learns a
//!   request's ids when it finishes; with instant timing F1 equals `kvreuse replay`'s FIFO
//!   row at the same capacity.
//!
//! Each shape is an independent simulation (`simulation.rs`) with its own random generator, seeded from
//! the run's seed and the shape itself, so a row's numbers depend neither on the other rows
//! nor on how rows are spread over threads. Memory is the caches, the requests in flight and
//! the ceiling's history, whatever the trace's length.

mod blocks;
mod pool;
pub mod router;
mod simulation;
mod stats;
mod worker;

use alloc::vec::Vec;
use core::fmt;

pub use crate::funnel::Funnel;
pub use router::{Router, RouterError};
pub use worker::{MAX_BATCHED_TOKENS, MAX_NUM_SEQS};

use crate::replay::ReplayError;
use crate::trace::Request;
use blocks::EngineBlocks;
use simulation::Simulation;

/// The most workers one shape may have.
pub const MAX_WORKERS: usize = 1 << 16;

/// The most blocks one worker's cache may have.
pub const MAX_WORKER_CAPACITY: usize = (u32::MAX - 1) as usize;

/// How time passes in a simulation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Timing {
    /// Each request finishes before the next arrives: a pure cache study.
    Instant,
    /// Dynamo's mocker: vLLM's scheduler and its timing polynomials, pass durations divided
    /// by `speedup` (arrivals keep the trace's times).
    Mocker {
        /// Divides every pass's duration (at least a millionth).
        speedup: f64,
    },
}

impl Timing {
    /// The timing's name as the command line writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Timing::Instant => "instant",
            Timing::Mocker { .. } => "mocker",
        }
    }
}

/// One fleet shape: a row of results.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// Workers (at least 1).
    pub workers: usize,
    /// Blocks in each worker's cache (at least 1).
    pub worker_capacity: usize,
    /// How requests are placed.
    pub router: Router,
}

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetConfig {
    /// Tokens per trace block.
    pub block_size: usize,
    /// Tokens per engine block (`None`: the trace's).
    pub engine_block_size: Option<usize>,
    /// The shapes, one row each.
    pub shapes: Vec<Shape>,
    /// How time passes.
    pub timing: Timing,
    /// The ceiling's history in blocks (`None`: unbounded).
    pub history: Option<usize>,
    /// Index of the first counted request (the warm-up ends before it).
    pub measure_from: usize,
    /// Seeds every random choice (below 2^53, so every front end can pass it as a number).
    pub seed: u64,
}

impl FleetConfig {
    /// Every combination of `workers`, `capacities` and `routers`, in that nesting order.
    pub fn grid(workers: &[usize], capacities: &[usize], routers: &[Router]) -> Vec<Shape> {
        let mut shapes = Vec::new();
        for &workers in workers {
            for &worker_capacity in capacities {
                for router in routers {
                    shapes.push(Shape { workers, worker_capacity, router: router.clone() });
                }
            }
        }
        shapes
    }
}

/// Why a simulation could not be set up or went on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetError {
    /// A block size of zero.
    ZeroBlockSize,
    /// Engine and trace block sizes of which neither divides the other.
    BlockSizes {
        /// The trace's.
        trace: usize,
        /// The engine's.
        engine: usize,
    },
    /// A number of workers of zero or above [`MAX_WORKERS`].
    Workers(usize),
    /// A worker capacity of zero or above [`MAX_WORKER_CAPACITY`].
    WorkerCapacity(usize),
    /// No shape to simulate.
    NoShapes,
    /// A speedup that is not a positive number.
    Speedup,
    /// A seed at or above 2^53.
    Seed(u64),
    /// The ceiling's history could not be built or grown.
    History(ReplayError),
    /// The simulated clock ran past 2^64 ns (584 years): a speedup far below 1 over a long
    /// trace.
    Clock,
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetError::ZeroBlockSize => f.write_str("block size must be at least 1"),
            FleetError::BlockSizes { trace, engine } => write!(
                f,
                "the engine block size ({engine}) must divide the trace's block size ({trace}) \
                 or be a multiple of it"
            ),
            FleetError::Workers(n) => {
                write!(f, "workers must be between 1 and {MAX_WORKERS}, not {n}")
            }
            FleetError::WorkerCapacity(c) => {
                write!(
                    f,
                    "a worker's capacity must be between 1 and {MAX_WORKER_CAPACITY} blocks, not {c}"
                )
            }
            FleetError::NoShapes => {
                f.write_str("nothing to simulate: no workers, capacities or routers")
            }
            FleetError::Speedup => f.write_str("the speedup must be a positive number"),
            FleetError::Seed(seed) => write!(f, "the seed must be below 2^53, not {seed}"),
            FleetError::History(e) => write!(f, "the ceiling's history: {e}"),
            FleetError::Clock => f.write_str(
                "the simulated clock ran past 2^64 ns (584 years): give a larger speedup",
            ),
        }
    }
}

impl core::error::Error for FleetError {}

/// One worker's share of a row's counted requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerShare {
    /// Requests routed to it.
    pub requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Of these, tokens reused from its cache.
    pub reused_tokens: u64,
}

/// One shape's results, over the counted requests.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetRow {
    /// Workers.
    pub workers: usize,
    /// Blocks per worker.
    pub worker_capacity: usize,
    /// The router.
    pub router: Router,
    /// Requests counted (finished, after the warm-up; rejected ones apart).
    pub requests: u64,
    /// Requests whose prompt needs more blocks than a worker's whole cache: dropped, as
    /// Dynamo's mocker drops them, and outside the funnel.
    pub rejected_requests: u64,
    /// Requests whose output was cut to what a worker's cache holds (vLLM's
    /// `max_model_len`).
    pub truncated_outputs: u64,
    /// The funnel over the counted requests.
    pub funnel: Funnel,
    /// Blocks evicted from the workers' caches while counting.
    pub evictions: u64,
    /// Time to first token, median and 99th percentile, in ms (mocker timing).
    pub ttft_ms_p50: Option<f64>,
    /// See [`ttft_ms_p50`](Self::ttft_ms_p50).
    pub ttft_ms_p99: Option<f64>,
    /// Mean time from arrival to first admission, in ms (mocker timing).
    pub queue_ms_mean: Option<f64>,
    /// Per worker.
    pub per_worker: Vec<WorkerShare>,
}

impl FleetRow {
    /// The row of a shape before any request: every count zero.
    pub fn empty(shape: &Shape) -> FleetRow {
        FleetRow {
            workers: shape.workers,
            worker_capacity: shape.worker_capacity,
            router: shape.router.clone(),
            requests: 0,
            rejected_requests: 0,
            truncated_outputs: 0,
            funnel: Funnel::default(),
            evictions: 0,
            ttft_ms_p50: None,
            ttft_ms_p99: None,
            queue_ms_mean: None,
            per_worker: alloc::vec![WorkerShare::default(); shape.workers],
        }
    }

    /// The row's counts under their `kvreuse fleet --json` names, in that output's order
    /// (between `router` and `ttft_ms_p50`): for front ends that build rows key by key.
    pub fn counts(&self) -> [(&'static str, u64); 15] {
        let f = &self.funnel;
        [
            ("requests", self.requests),
            ("rejected_requests", self.rejected_requests),
            ("truncated_outputs", self.truncated_outputs),
            ("f0_tokens", f.f0),
            ("f1_tokens", f.f1),
            ("f2_tokens", f.f2),
            ("f3_tokens", f.f3),
            ("f4_tokens", f.f4),
            ("f5_tokens", f.f5),
            ("cold_tokens", f.cold),
            ("retention_tokens", f.retention),
            ("routing_tokens", f.routing),
            ("race_tokens", f.race),
            ("retrieval_tokens", f.retrieval),
            ("evictions", self.evictions),
        ]
    }
}

/// One request's funnel evidence as its router and worker would give it: what the router
/// saw when it chose the worker (F2, F3) and what the worker's lookup found and it reused
/// (F4, F5), in prompt tokens. For driving a router's request guards with simulated
/// workers ([`Fleet::record_outcomes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The request's number in the trace, from 0.
    pub request: u64,
    /// The worker it was routed to.
    pub worker: usize,
    /// Its prompt tokens.
    pub prompt_tokens: u64,
    /// Cached on the best worker at routing (F2).
    pub best_cached_tokens: u64,
    /// Cached on the selected worker at routing (F3).
    pub selected_cached_tokens: u64,
    /// Found by the worker's lookup at admission (F4).
    pub found_tokens: u64,
    /// Reused (F5).
    pub reused_tokens: u64,
    /// Dropped for a prompt larger than the worker's cache: no worker report.
    pub rejected: bool,
}

/// Every shape of a configuration, simulated over the same requests on one thread.
#[derive(Debug)]
pub struct Fleet {
    blocks: EngineBlocks,
    simulations: Vec<Simulation>,
    requests: usize,
    ids: Vec<u64>,
}

impl Fleet {
    /// Whether the engine's block size fits the trace's (one divides the other).
    pub fn check_block_sizes(config: &FleetConfig) -> Result<(), FleetError> {
        let engine = config.engine_block_size.unwrap_or(config.block_size);
        EngineBlocks::new(config.block_size, engine).map(|_| ())
    }

    /// The simulations of `config`, judged and set up.
    pub fn new(config: &FleetConfig) -> Result<Fleet, FleetError> {
        let engine = config.engine_block_size.unwrap_or(config.block_size);
        let blocks = EngineBlocks::new(config.block_size, engine)?;
        if config.shapes.is_empty() {
            return Err(FleetError::NoShapes);
        }
        if let Timing::Mocker { speedup } = config.timing
            && !(speedup.is_finite() && speedup >= 1e-6)
        {
            return Err(FleetError::Speedup);
        }
        if config.seed >= 1 << 53 {
            return Err(FleetError::Seed(config.seed));
        }
        let simulations = config
            .shapes
            .iter()
            .map(|shape| {
                if !(1..=MAX_WORKERS).contains(&shape.workers) {
                    return Err(FleetError::Workers(shape.workers));
                }
                if !(1..=MAX_WORKER_CAPACITY).contains(&shape.worker_capacity) {
                    return Err(FleetError::WorkerCapacity(shape.worker_capacity));
                }
                Simulation::new(shape, config, engine)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Fleet { blocks, simulations, requests: 0, ids: Vec::new() })
    }

    /// Routes one request in every simulation, after playing out what happens before it
    /// arrives. Fails only when the ceiling's history cannot grow (see
    /// [`Replay::push`](crate::replay::Replay::push)), or the simulated clock runs out
    /// ([`FleetError::Clock`]).
    pub fn push(&mut self, request: &Request) -> Result<(), FleetError> {
        self.blocks.prompt_ids(request, &mut self.ids);
        self.requests += 1;
        for simulation in &mut self.simulations {
            simulation.push(request, &self.ids)?;
        }
        Ok(())
    }

    /// Requests pushed so far.
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// Tokens per engine block.
    pub fn engine_block_size(&self) -> usize {
        self.blocks.size()
    }

    /// Requests in flight, over all simulations.
    pub fn in_flight(&self) -> usize {
        self.simulations.iter().map(Simulation::in_flight).sum()
    }

    /// Heap bytes the simulations hold.
    pub fn heap_bytes(&self) -> usize {
        self.simulations.capacity() * size_of::<Simulation>()
            + self.ids.capacity() * size_of::<u64>()
            + self.simulations.iter().map(Simulation::heap_bytes).sum::<usize>()
    }

    /// Keeps every finished request's [`Outcome`] from now on, per shape.
    pub fn record_outcomes(&mut self) {
        self.simulations.iter_mut().for_each(Simulation::record_outcomes);
    }

    /// The outcomes of shape `shape`'s requests finished since the last call (in the order
    /// they finished; nothing unless [`record_outcomes`](Self::record_outcomes) was called).
    pub fn take_outcomes(&mut self, shape: usize) -> Vec<Outcome> {
        self.simulations.get_mut(shape).map(Simulation::take_outcomes).unwrap_or_default()
    }

    /// Plays every simulation out to its last request's end, as at the end of the trace (no
    /// request may follow).
    pub fn play_out(&mut self) -> Result<(), FleetError> {
        self.simulations.iter_mut().try_for_each(Simulation::finish_trace)
    }

    /// The rows as they stand, in configuration order: requests still in flight are not
    /// counted yet (see [`play_out`](Self::play_out)).
    pub fn rows(&self) -> Vec<FleetRow> {
        self.simulations.iter().map(Simulation::row).collect()
    }

    /// Plays every simulation out to its last request's end and returns the rows, in
    /// configuration order.
    pub fn finish(mut self) -> Result<Vec<FleetRow>, FleetError> {
        self.play_out()?;
        Ok(self.simulations.iter().map(Simulation::row).collect())
    }
}

#[cfg(test)]
mod tests;
