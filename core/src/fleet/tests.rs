use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use proptest::prelude::*;

use super::router::{Candidates, Load, Routing};
use super::simulation::row_rng;
use super::stats::Quantiles;
use super::worker::{Live, Signal, Slab, Worker, reusable};
use super::*;
use crate::replay::{Policy, Replay, ReplayConfig, ReplayError};

/// A trace of `n` requests over a few shared prefixes: prompt `tokens`, ids per block of
/// `bs`, outputs of a few tokens, timestamps `gap_ms` apart.
fn trace(n: usize, bs: u64, gap_ms: u64, seed: u64) -> Vec<Request> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n)
        .map(|i| {
            let family = rng.u64(0..4);
            let shared = rng.usize(0..6);
            let tokens = rng.u64(1..12 * bs);
            let blocks = tokens.div_ceil(bs) as usize;
            let prompt_ids = (0..blocks)
                .map(|j| {
                    if j < shared { family * 100 + j as u64 } else { 1 << 40 | (i * 64 + j) as u64 }
                })
                .collect();
            Request {
                timestamp: Some(i as u64 * gap_ms),
                prompt_tokens: tokens,
                prompt_ids,
                output_tokens: rng.u64(0..3 * bs),
                ..Request::default()
            }
        })
        .collect()
}

fn router(text: &str) -> Router {
    Router::parse(text).unwrap()
}

fn config(shapes: Vec<Shape>, timing: Timing, bs: usize) -> FleetConfig {
    FleetConfig {
        block_size: bs,
        engine_block_size: None,
        shapes,
        timing,
        history: Some(1000),
        measure_from: 0,
        seed: 1,
    }
}

fn run(config: &FleetConfig, requests: &[Request]) -> Vec<FleetRow> {
    let mut fleet = Fleet::new(config).unwrap();
    for r in requests {
        fleet.push(r).unwrap();
        for simulation in &fleet.simulations {
            simulation.check();
        }
    }
    fleet.finish().unwrap()
}

const MOCKER: Timing = Timing::Mocker { speedup: 1.0 };

#[test]
fn instant_f1_is_the_replay_fifo_row() {
    let requests = trace(400, 4, 10, 7);
    let rows = run(
        &config(FleetConfig::grid(&[3], &[20], &[router("kv")]), Timing::Instant, 4),
        &requests,
    );
    let mut replay = Replay::new(&ReplayConfig {
        block_size: 4,
        histories: vec![(Policy::Fifo, Some(1000))],
        measure_from: 0,
    })
    .unwrap();
    for r in &requests {
        replay.push(r).unwrap();
    }
    let want = &replay.results()[0];
    assert_eq!((rows[0].funnel.f0, rows[0].funnel.f1), (want.f0_tokens, want.f1_tokens));
}

#[test]
fn round_robin_workers_are_independent_fleets_of_one() {
    let requests = trace(300, 4, 3, 11);
    for timing in [Timing::Instant, MOCKER] {
        let n = 3;
        let rows = run(
            &config(FleetConfig::grid(&[n], &[12], &[router("round-robin")]), timing, 4),
            &requests,
        );
        for w in 0..n {
            let mine: Vec<Request> = requests.iter().skip(w).step_by(n).cloned().collect();
            let alone = run(
                &config(FleetConfig::grid(&[1], &[12], &[router("round-robin")]), timing, 4),
                &mine,
            );
            assert_eq!(rows[0].per_worker[w], alone[0].per_worker[0], "{timing:?} worker {w}");
        }
    }
}

#[test]
fn seeded_runs_repeat_and_rows_do_not_depend_on_their_neighbours() {
    let requests = trace(300, 4, 2, 5);
    let shapes = FleetConfig::grid(
        &[2, 4],
        &[10, 40],
        &[router("kv"), router("random"), router("cache-aware")],
    );
    let all = run(&config(shapes.clone(), MOCKER, 4), &requests);
    assert_eq!(all, run(&config(shapes.clone(), MOCKER, 4), &requests));
    for (shape, row) in shapes.iter().zip(&all) {
        let alone = run(&config(vec![shape.clone()], MOCKER, 4), &requests);
        assert_eq!(&alone[0], row);
    }
}

#[test]
fn instant_timing_has_no_race_and_a_slow_fleet_has_some() {
    let requests = trace(300, 4, 1, 3);
    let shapes = FleetConfig::grid(&[2], &[30], &[router("kv")]);
    let instant = run(&config(shapes.clone(), Timing::Instant, 4), &requests);
    assert_eq!(instant[0].funnel.race, 0);
    // Passes far longer than the gaps between arrivals: requests routed to a worker whose
    // cache will hold their prefix only once a request in flight finishes.
    let slow = run(&config(shapes, Timing::Mocker { speedup: 0.01 }, 4), &requests);
    assert!(slow[0].ttft_ms_p50.unwrap() > 1000.0);
    assert!(slow[0].queue_ms_mean.unwrap() > 0.0);
}

#[test]
fn a_fast_engine_with_spaced_arrivals_behaves_as_instant() {
    let requests = trace(300, 4, 1000, 9);
    let shapes =
        FleetConfig::grid(&[1, 3], &[8, 30], &[router("round-robin"), router("least-loaded")]);
    let instant = run(&config(shapes.clone(), Timing::Instant, 4), &requests);
    let mocker = run(&config(shapes, Timing::Mocker { speedup: 1000.0 }, 4), &requests);
    for (i, m) in instant.iter().zip(&mocker) {
        assert_eq!((i.funnel, &i.per_worker, i.evictions), (m.funnel, &m.per_worker, m.evictions));
    }
}

#[test]
fn the_warm_up_fills_caches_but_is_not_counted() {
    let requests = trace(200, 4, 5, 13);
    let shapes = FleetConfig::grid(&[2], &[50], &[router("kv")]);
    let mut warm = config(shapes, MOCKER, 4);
    warm.measure_from = 120;
    let rows = run(&warm, &requests);
    let f0: u64 = requests[120..].iter().map(|r| r.prompt_tokens).sum();
    assert_eq!(rows[0].funnel.f0 + rejected_tokens(&requests[120..], 50 * 4), f0);
    assert_eq!(rows[0].requests + rows[0].rejected_requests, 80);
}

fn rejected_tokens(requests: &[Request], cache_tokens: u64) -> u64 {
    requests.iter().filter(|r| r.prompt_tokens > cache_tokens).map(|r| r.prompt_tokens).sum()
}

#[test]
fn prompts_larger_than_a_cache_are_rejected_and_long_outputs_cut() {
    let requests = trace(200, 4, 5, 17);
    for timing in [Timing::Instant, MOCKER] {
        let rows =
            run(&config(FleetConfig::grid(&[2], &[6], &[router("kv")]), timing, 4), &requests);
        let big = requests.iter().filter(|r| r.prompt_tokens > 24).count() as u64;
        assert!(big > 0);
        assert_eq!(rows[0].rejected_requests, big);
        assert_eq!(rows[0].requests, 200 - big);
        assert!(rows[0].truncated_outputs > 0);
    }
}

#[test]
fn engine_blocks_may_be_finer_or_coarser_than_the_trace() {
    let requests = trace(300, 8, 4, 21);
    let shapes = FleetConfig::grid(&[2], &[200], &[router("kv")]);
    let mut rows = Vec::new();
    for engine in [2, 8, 16] {
        // The same cache in tokens.
        let shapes = FleetConfig::grid(&[2], &[1600 / engine], &[router("kv")]);
        let mut c = config(shapes, Timing::Instant, 8);
        c.engine_block_size = Some(engine);
        c.history = None;
        assert_eq!(Fleet::new(&c).unwrap().engine_block_size(), engine);
        rows.push(run(&c, &requests)[0].clone());
    }
    // Finer blocks reuse parts of partial trace blocks: never less.
    assert!(rows[0].funnel.f5 >= rows[1].funnel.f5);
    assert!(rows[1].funnel.f5 >= rows[2].funnel.f5);
    let mut bad = config(shapes, Timing::Instant, 8);
    bad.engine_block_size = Some(3);
    assert_eq!(Fleet::new(&bad).unwrap_err(), FleetError::BlockSizes { trace: 8, engine: 3 });
}

#[test]
fn outcomes_are_the_rows_request_by_request() {
    let requests = trace(300, 4, 1, 23);
    let mut fleet =
        Fleet::new(&config(FleetConfig::grid(&[3], &[6], &[router("kv")]), MOCKER, 4)).unwrap();
    fleet.record_outcomes();
    let mut outcomes = Vec::new();
    for r in &requests {
        fleet.push(r).unwrap();
        outcomes.extend(fleet.take_outcomes(0));
    }
    fleet.play_out().unwrap();
    outcomes.extend(fleet.take_outcomes(0));
    let row = fleet.finish().unwrap().remove(0);
    let mut seen: Vec<u64> = outcomes.iter().map(|o| o.request).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..300).collect::<Vec<_>>(), "each request once");
    let kept: Vec<&Outcome> = outcomes.iter().filter(|o| !o.rejected).collect();
    assert_eq!(kept.len() as u64, row.requests);
    let sum = |f: fn(&Outcome) -> u64| kept.iter().map(|o| f(o)).sum::<u64>();
    assert_eq!(sum(|o| o.prompt_tokens), row.funnel.f0);
    assert_eq!(sum(|o| o.best_cached_tokens), row.funnel.f2);
    assert_eq!(sum(|o| o.selected_cached_tokens), row.funnel.f3);
    assert_eq!(sum(|o| o.found_tokens), row.funnel.f4);
    assert_eq!(sum(|o| o.reused_tokens), row.funnel.f5);
    assert!(row.funnel.race > 0, "passes overlap at this speed: some race");
}

#[test]
fn settings_out_of_range_are_refused() {
    let shape = |workers, worker_capacity| Shape { workers, worker_capacity, router: router("kv") };
    for (c, error) in [
        (config(vec![shape(0, 10)], MOCKER, 4), FleetError::Workers(0)),
        (config(vec![shape(2, 0)], MOCKER, 4), FleetError::WorkerCapacity(0)),
        // A slot number of u32::MAX means "none" in a cache: one block less is the most.
        (
            config(vec![shape(2, 4_294_967_295)], MOCKER, 4),
            FleetError::WorkerCapacity(u32::MAX as usize),
        ),
        (config(vec![], MOCKER, 4), FleetError::NoShapes),
        (config(vec![shape(1, 1)], Timing::Mocker { speedup: 0.0 }, 4), FleetError::Speedup),
        (config(vec![shape(1, 1)], MOCKER, 0), FleetError::ZeroBlockSize),
        (
            FleetConfig { seed: 1 << 53, ..config(vec![shape(1, 1)], MOCKER, 4) },
            FleetError::Seed(1 << 53),
        ),
    ] {
        assert_eq!(Fleet::new(&c).unwrap_err(), error);
    }
    // The bounds themselves are allowed (caches fill lazily: nothing this big is allocated).
    assert!(Fleet::new(&config(vec![shape(2, 4_294_967_294)], MOCKER, 4)).is_ok());
    assert!(Fleet::new(&config(vec![shape(65_536, 1)], MOCKER, 4)).is_ok());
}

/// Requests pushed, and requests in flight: arrivals at one instant cannot finish before the
/// next one, so every request stays in flight in every shape until the fleet plays out.
#[test]
fn requests_and_requests_in_flight_are_counted() {
    let shape = |workers| Shape { workers, worker_capacity: 100, router: router("kv") };
    let mut fleet = Fleet::new(&config(vec![shape(1), shape(2), shape(3)], MOCKER, 4)).unwrap();
    let requests = trace(10, 4, 0, 7);
    for (i, r) in requests.iter().enumerate() {
        fleet.push(r).unwrap();
        assert_eq!((fleet.requests(), fleet.in_flight()), (i + 1, 3 * (i + 1)));
    }
    fleet.play_out().unwrap();
    assert_eq!((fleet.requests(), fleet.in_flight()), (10, 0));
}

#[test]
fn errors_and_timings_say_what_they_are() {
    assert_eq!((Timing::Instant.name(), MOCKER.name()), ("instant", "mocker"));
    for (error, text) in [
        (FleetError::ZeroBlockSize, "block size must be at least 1"),
        (
            FleetError::BlockSizes { trace: 16, engine: 24 },
            "the engine block size (24) must divide the trace's block size (16) or be a \
             multiple of it",
        ),
        (FleetError::Workers(0), "workers must be between 1 and 65536, not 0"),
        (
            FleetError::WorkerCapacity(0),
            "a worker's capacity must be between 1 and 4294967294 blocks, not 0",
        ),
        (FleetError::NoShapes, "nothing to simulate: no workers, capacities or routers"),
        (FleetError::Speedup, "the speedup must be a positive number"),
        (FleetError::Seed(1 << 53), "the seed must be below 2^53, not 9007199254740992"),
        (
            FleetError::History(ReplayError::ZeroBlockSize),
            "the ceiling's history: block size must be at least 1",
        ),
    ] {
        assert_eq!(error.to_string(), text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the trace, fleet and timing: every counted prompt token is reused or lost
    /// exactly once, per request and so per row; caches stay within their capacity (checked
    /// after every request); every request is counted or rejected.
    #[test]
    fn every_token_is_accounted_for(
        seed in any::<u64>(),
        n in 1usize..150,
        gap in 0u64..50,
        workers in 1usize..5,
        capacity in 1usize..40,
        router_index in 0usize..Router::NAMES.len(),
        speedup in prop_oneof![
            Just(None), Just(Some(1e12)), Just(Some(1.0)), Just(Some(0.05)), Just(Some(1000.0))
        ],
        bursty in any::<bool>(),
    ) {
        // Bursty traces have empty prompts, and passes of no time (1e12) make every tie
        // between an arrival and a pass's end happen.
        let requests = if bursty { bursty_trace(n, 4, seed) } else { trace(n, 4, gap, seed) };
        let timing = speedup.map_or(Timing::Instant, |speedup| Timing::Mocker { speedup });
        let shapes = FleetConfig::grid(&[workers], &[capacity], &[router(Router::NAMES[router_index])]);
        let row = &run(&config(shapes, timing, 4), &requests)[0];
        let f = &row.funnel;
        prop_assert_eq!(f.f5 + f.losses().iter().sum::<u64>(), f.f0);
        prop_assert_eq!(row.requests + row.rejected_requests, n as u64);
        let shares: u64 = row.per_worker.iter().map(|w| w.prompt_tokens).sum();
        prop_assert_eq!(shares, f.f0);
        let reused: u64 = row.per_worker.iter().map(|w| w.reused_tokens).sum();
        prop_assert_eq!(reused, f.f5);
        prop_assert!(f.f2 >= f.f3);
    }
}

/// The simulation written the slow, obvious way, to check [`Simulation`] against. Every pass
/// is an event of its own (none is run ahead), the next pass to end is found by a scan, and
/// what the router sees of each worker (requests, prefill tokens not yet through their first
/// token, distinct prompt blocks in flight, in-flight prefixes) is counted afresh from the
/// requests in flight at every arrival. It shares the parts tested on their own: the worker's
/// pass, the router's choice, the ceiling's history, the funnel and the quantiles.
struct Model {
    shape: Shape,
    speedup: Option<f64>,
    bs: u64,
    trace_bs: usize,
    measure_from: u64,
    blocks: super::blocks::EngineBlocks,
    workers: Vec<Worker>,
    /// Per worker, its pass in flight: (end, start).
    passes: Vec<Option<(u64, u64)>>,
    slab: Slab,
    routing: Routing,
    rng: fastrand::Rng,
    ceiling: Replay,
    /// Requests routed and not finished: slab key, worker, ids, prompt tokens charged until
    /// the first token.
    routed: Vec<(u32, usize, Vec<u64>, u64)>,
    origin: Option<u64>,
    now: u64,
    seq: u64,
    evictions_before: Option<u64>,
    // What it counts.
    outcomes: Vec<Outcome>,
    funnel: Funnel,
    counted: u64,
    rejected: u64,
    truncated: u64,
    ttft: Quantiles,
    queue_ns: u128,
    queued: u64,
    per_worker: Vec<WorkerShare>,
}

impl Model {
    fn new(config: &FleetConfig) -> Model {
        let shape = config.shapes[0].clone();
        let engine = config.engine_block_size.unwrap_or(config.block_size);
        let history = config.history.map_or((Policy::Inf, None), |c| (Policy::Fifo, Some(c)));
        let n = shape.workers;
        Model {
            speedup: match config.timing {
                Timing::Instant => None,
                Timing::Mocker { speedup } => Some(speedup),
            },
            bs: engine as u64,
            trace_bs: config.block_size,
            measure_from: config.measure_from as u64,
            blocks: super::blocks::EngineBlocks::new(config.block_size, engine).unwrap(),
            workers: (0..n).map(|_| Worker::new(shape.worker_capacity as u32, engine)).collect(),
            passes: vec![None; n],
            slab: Slab::default(),
            routing: Routing::new(&shape.router, n),
            rng: row_rng(&shape, config.seed),
            ceiling: Replay::new(&ReplayConfig {
                block_size: config.block_size,
                histories: vec![history],
                measure_from: 0,
            })
            .unwrap(),
            routed: Vec::new(),
            origin: None,
            now: 0,
            seq: 0,
            evictions_before: None,
            outcomes: Vec::new(),
            funnel: Funnel::default(),
            counted: 0,
            rejected: 0,
            truncated: 0,
            ttft: Quantiles::default(),
            queue_ns: 0,
            queued: 0,
            per_worker: vec![WorkerShare::default(); n],
            shape,
        }
    }

    fn evictions(&self) -> u64 {
        self.workers.iter().map(|w| w.pool.evictions).sum()
    }

    fn push(&mut self, request: &Request) {
        let mut ids = Vec::new();
        self.blocks.prompt_ids(request, &mut ids);
        let counted = self.seq >= self.measure_from;
        if let Some(ms) = request.timestamp {
            let origin = *self.origin.get_or_insert(ms);
            self.now = self.now.max((ms - origin.min(ms)).saturating_mul(1_000_000).min(1 << 62));
        }
        let now = self.now;
        if self.speedup.is_some() {
            self.play(now);
        }
        if counted && self.evictions_before.is_none() {
            self.evictions_before = Some(self.evictions());
        }
        let f1 = self.ceiling.look_up(request).unwrap()[0];
        let n = self.workers.len();
        let kv = self.shape.router.name() == "kv";
        let cached: Vec<usize> = self.workers.iter().map(|w| w.pool.lookup(&ids).blocks).collect();
        let loads: Vec<Load> = (0..n)
            .map(|w| {
                let mine: Vec<_> = self.routed.iter().filter(|r| r.1 == w).collect();
                let mut blocks: Vec<u64> = mine.iter().flat_map(|r| r.2.iter().copied()).collect();
                blocks.sort_unstable();
                blocks.dedup();
                Load {
                    requests: mine.len() as u64,
                    prefill_tokens: mine.iter().map(|r| r.3).sum(),
                    active_blocks: if kv { blocks.len() as u64 } else { 0 },
                    cached_blocks: self.workers[w].pool.cached_blocks() as u64,
                }
            })
            .collect();
        let routed = &self.routed;
        let prefix = |w: usize| match kv {
            true => ids
                .iter()
                .take_while(|id| routed.iter().any(|r| r.1 == w && r.2.contains(id)))
                .count(),
            false => 0,
        };
        let candidates = Candidates {
            request,
            ids: &ids,
            cached: &cached,
            loads: &loads,
            in_flight_prefix: &prefix,
            engine_block_size: self.bs as usize,
            trace_block_size: self.trace_bs,
        };
        let w = self.routing.choose(&candidates, &mut self.rng);

        let (isl, bs) = (request.prompt_tokens, self.bs);
        // A worker holds at most its cache's tokens, the last of them never computed.
        let most = self.shape.worker_capacity as u64 * bs;
        let osl = if isl <= most {
            request.output_tokens.min(most + 1 - isl)
        } else {
            request.output_tokens
        };
        if counted && osl < request.output_tokens {
            self.truncated += 1;
        }
        let best = *cached.iter().max().unwrap();
        let mut live = Live::new(request.clone(), ids.clone(), w as u32, now);
        live.seq = self.seq;
        live.osl = osl;
        live.counted = counted;
        live.routed = [f1, reusable(best, isl, bs as usize), reusable(cached[w], isl, bs as usize)];
        self.seq += 1;
        let Some(speedup) = self.speedup else {
            return match isl == 0 || self.workers[w].run_alone(&mut live) {
                true => self.finish(live),
                false => self.reject(live),
            };
        };
        if isl == 0 {
            self.finish(live);
        } else {
            let charge = isl - isl.min(cached[w] as u64 * bs);
            let key = self.slab.insert(live);
            self.routed.push((key, w, ids, charge));
            self.workers[w].waiting.push_back(key);
        }
        // Every idle worker with work, after every arrival.
        for v in 0..n {
            if self.passes[v].is_none() && self.workers[v].has_work() {
                self.begin(v, now, speedup);
            }
        }
    }

    fn begin(&mut self, w: usize, at: u64, speedup: f64) {
        let duration = self.workers[w].pass(&mut self.slab, at, speedup).unwrap();
        self.passes[w] = Some((at + duration, at));
    }

    /// Plays out, one by one, every pass that ends by `until`.
    fn play(&mut self, until: u64) {
        loop {
            let next = (0..self.workers.len())
                .filter_map(|w| self.passes[w].map(|(end, start)| (end, start, w)))
                .filter(|&(end, _, _)| end <= until)
                .min();
            let Some((end, _, w)) = next else { return };
            self.passes[w] = None;
            for signal in core::mem::take(&mut self.workers[w].signals) {
                let position = |key| self.routed.iter().position(|r| r.0 == key).unwrap();
                match signal {
                    Signal::FirstToken(key) => {
                        self.slab.get(key).first_token = Some(end);
                        let i = position(key);
                        self.routed[i].3 = 0;
                    }
                    Signal::Finished(key) => {
                        self.routed.remove(position(key));
                        let live = self.slab.remove(key);
                        self.finish(live);
                    }
                    Signal::Rejected(key) => {
                        self.routed.remove(position(key));
                        let live = self.slab.remove(key);
                        self.reject(live);
                    }
                }
            }
            if end < until && self.workers[w].has_work() {
                self.begin(w, end, self.speedup.unwrap());
            }
        }
    }

    fn outcome(live: &Live, rejected: bool) -> Outcome {
        Outcome {
            request: live.seq,
            worker: live.worker as usize,
            prompt_tokens: live.isl,
            best_cached_tokens: live.routed[1],
            selected_cached_tokens: live.routed[2],
            found_tokens: live.reused,
            reused_tokens: live.reused,
            rejected,
        }
    }

    fn finish(&mut self, live: Live) {
        self.outcomes.push(Model::outcome(&live, false));
        self.ceiling.learn(&live.request).unwrap();
        if !live.counted {
            return;
        }
        let [f1, f2, f3] = live.routed;
        self.funnel.add(&Funnel::of_request([live.isl, f1, f2, f3, live.reused, live.reused]));
        self.counted += 1;
        let share = &mut self.per_worker[live.worker as usize];
        share.requests += 1;
        share.prompt_tokens += live.isl;
        share.reused_tokens += live.reused.min(live.isl);
        if let Some(first) = live.first_token {
            self.ttft.record(first - live.arrival);
        }
        if let Some(admitted) = live.admitted {
            self.queue_ns += u128::from(admitted - live.arrival);
            self.queued += 1;
        }
    }

    fn reject(&mut self, live: Live) {
        self.outcomes.push(Model::outcome(&live, true));
        self.rejected += u64::from(live.counted);
    }

    fn row(&mut self) -> FleetRow {
        let mocker = self.speedup.is_some();
        if mocker {
            self.play(u64::MAX);
        }
        let evictions = self.evictions();
        let ms = |ns: f64| ns / 1e6;
        FleetRow {
            workers: self.shape.workers,
            worker_capacity: self.shape.worker_capacity,
            router: self.shape.router.clone(),
            requests: self.counted,
            rejected_requests: self.rejected,
            truncated_outputs: self.truncated,
            funnel: self.funnel,
            evictions: evictions - self.evictions_before.unwrap_or(evictions),
            ttft_ms_p50: if mocker { self.ttft.quantile(0.5).map(ms) } else { None },
            ttft_ms_p99: if mocker { self.ttft.quantile(0.99).map(ms) } else { None },
            queue_ms_mean: match mocker && self.queued > 0 {
                true => Some(ms(self.queue_ns as f64 / self.queued as f64)),
                false => None,
            },
            per_worker: self.per_worker.clone(),
        }
    }
}

/// A trace with bursts (many requests at one instant), pauses, requests without a timestamp
/// or stamped before the previous one, empty prompts and empty outputs.
fn bursty_trace(n: usize, bs: u64, seed: u64) -> Vec<Request> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut ms = 1000;
    trace(n, bs, 0, seed)
        .into_iter()
        .map(|mut r| {
            ms += [0, 0, 0, 1, 3, 20, 200][rng.usize(..7)];
            r.timestamp = match rng.u8(..20) {
                0 => None,
                1 => Some(ms - 500),
                _ => Some(ms),
            };
            if rng.u8(..30) == 0 {
                r.prompt_tokens = 0;
                r.prompt_ids.clear();
            }
            r
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The simulation gives the slow model's row and outcomes (in the same order), and as
    /// many requests in flight after every arrival, whatever the trace, fleet, router,
    /// timing (passes of no time at all make every tie between ends and arrivals happen),
    /// warm-up and history.
    #[test]
    fn the_simulation_is_its_slow_model(
        seed in any::<u64>(),
        n in 1usize..100,
        workers in 1usize..4,
        capacity in 1usize..40,
        router_index in 0usize..Router::NAMES.len(),
        speedup in prop_oneof![
            Just(None), Just(Some(1e12)), Just(Some(1.0)), Just(Some(0.05)), Just(Some(100.0))
        ],
        engine in prop_oneof![Just(4usize), Just(2), Just(8)],
        measure_from in 0usize..50,
        history in prop_oneof![Just(None), Just(Some(16usize)), Just(Some(1000))],
    ) {
        let requests = bursty_trace(n, 4, seed);
        let timing = speedup.map_or(Timing::Instant, |speedup| Timing::Mocker { speedup });
        let shapes =
            FleetConfig::grid(&[workers], &[capacity], &[router(Router::NAMES[router_index])]);
        let mut config = config(shapes, timing, 4);
        config.engine_block_size = Some(engine);
        config.measure_from = measure_from;
        config.history = history;
        config.seed = seed >> 12;
        let mut fleet = Fleet::new(&config).unwrap();
        fleet.record_outcomes();
        let mut model = Model::new(&config);
        let mut outcomes = Vec::new();
        for r in &requests {
            fleet.push(r).unwrap();
            model.push(r);
            prop_assert_eq!(fleet.in_flight(), model.routed.len());
            outcomes.extend(fleet.take_outcomes(0));
        }
        fleet.play_out().unwrap();
        outcomes.extend(fleet.take_outcomes(0));
        let row = fleet.finish().unwrap().remove(0);
        prop_assert_eq!(row, model.row());
        prop_assert_eq!(outcomes, model.outcomes);
    }
}

/// Timestamps ages apart (epoch microseconds after a zero, say) arrive at most 2^62 ns after
/// the first: every pass still ends within a `u64` and plays out, and every request is
/// counted, with a time to first token of the passes' own length.
#[test]
fn arrivals_ages_apart_still_play_out() {
    let mut requests = trace(8, 4, 1, 7);
    requests[4].timestamp = Some(u64::MAX / 2);
    for r in &mut requests[5..] {
        r.timestamp = Some(u64::MAX);
    }
    for timing in [MOCKER, Timing::Mocker { speedup: 1e12 }] {
        let shape = Shape { workers: 2, worker_capacity: 40, router: router("kv") };
        let row = &run(&config(vec![shape], timing, 4), &requests)[0];
        assert_eq!(row.requests + row.rejected_requests, 8);
        assert!(row.ttft_ms_p99.unwrap() < 1e6, "{:?}", row.ttft_ms_p99);
    }
}

/// A clock run past 2^64 ns (a speedup far below 1 over a long trace) is an error, rather
/// than a time that wraps or passes that never end.
#[test]
fn a_clock_past_u64_is_an_error() {
    let shape = Shape { workers: 1, worker_capacity: 40, router: router("kv") };
    let mut fleet = Fleet::new(&config(vec![shape], Timing::Mocker { speedup: 1e-6 }, 4)).unwrap();
    fleet.simulations[0].set_clock(u64::MAX - 1000);
    let result = trace(3, 4, 0, 7)
        .iter()
        .try_for_each(|r| fleet.push(r))
        .and_then(|()| fleet.finish().map(drop));
    assert_eq!(result, Err(FleetError::Clock));
    // A first pass that would end at the clock's very last ns is refused too: `advance`
    // never restarts a worker after a pass that ends at its bound, u64::MAX at the end.
    let request = Request { timestamp: None, output_tokens: 2, ..trace(1, 4, 0, 7).remove(0) };
    let shape = Shape { workers: 1, worker_capacity: 40, router: router("kv") };
    let timing = Timing::Mocker { speedup: 1e-6 };
    let mut probe = Fleet::new(&config(vec![shape.clone()], timing, 4)).unwrap();
    probe.push(&request).unwrap();
    let first_pass = probe.simulations[0].first_pass_end().unwrap();
    let mut fleet = Fleet::new(&config(vec![shape], timing, 4)).unwrap();
    fleet.simulations[0].set_clock(u64::MAX - first_pass);
    let result = fleet.push(&request).and_then(|()| fleet.finish().map(drop));
    assert_eq!(result, Err(FleetError::Clock));
    assert_eq!(
        FleetError::Clock.to_string(),
        "the simulated clock ran past 2^64 ns (584 years): give a larger speedup"
    );
}

/// Each count under its `--json` name: distinct values, so a swapped pair shows.
#[test]
fn counts_carry_the_json_names() {
    let shape = Shape { workers: 2, worker_capacity: 9, router: router("round-robin") };
    let mut row = FleetRow::empty(&shape);
    assert_eq!(row.per_worker.len(), 2);
    assert!(row.counts().iter().all(|&(_, v)| v == 0));
    (row.requests, row.rejected_requests, row.truncated_outputs) = (1, 2, 3);
    row.funnel = Funnel {
        f0: 4,
        f1: 5,
        f2: 6,
        f3: 7,
        f4: 8,
        f5: 9,
        cold: 10,
        retention: 11,
        routing: 12,
        race: 13,
        retrieval: 14,
    };
    row.evictions = 15;
    let names: Vec<&str> = row.counts().iter().map(|&(k, _)| k).collect();
    assert_eq!(
        names,
        [
            "requests",
            "rejected_requests",
            "truncated_outputs",
            "f0_tokens",
            "f1_tokens",
            "f2_tokens",
            "f3_tokens",
            "f4_tokens",
            "f5_tokens",
            "cold_tokens",
            "retention_tokens",
            "routing_tokens",
            "race_tokens",
            "retrieval_tokens",
            "evictions",
        ]
    );
    assert_eq!(row.counts().map(|(_, v)| v), core::array::from_fn(|i| i as u64 + 1));
}
