use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use proptest::prelude::*;

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
        speedup in prop_oneof![Just(None), Just(Some(1.0)), Just(Some(0.05)), Just(Some(1000.0))],
    ) {
        let requests = trace(n, 4, gap, seed);
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
