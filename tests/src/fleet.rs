//! Fleet simulations on fuzzer-chosen traces and settings.
//!
//! Invariants, whatever the trace, fleet, router and timing: every counted prompt token is
//! reused or charged to exactly one loss; every request is counted or rejected; the workers'
//! shares add up to the row; F2 is at least F3; without time there is no race.
//!
//! Models: with instant timing, one worker and engine blocks of the trace's size, the reuse
//! and evictions equal those of a plain LRU block cache written here (prefixes as `Vec` keys,
//! the queue a `Vec` scanned linearly), request by request; and with round-robin, each of N
//! workers sees exactly what a fleet of one sees when fed its share of the requests.

use arbitrary::Unstructured;
use kvreuse_core::fleet::{Fleet, FleetConfig, FleetRow, Router, Shape, Timing};
use kvreuse_core::trace::Request;

#[derive(Debug)]
struct Arb {
    /// Which of a few prefixes the prompt starts with, and for how many blocks.
    family: u8,
    shared: u8,
    tokens: u8,
    output: u8,
    gap_ms: u8,
}

/// Runs a fuzzer-chosen trace and fleet, and checks them.
pub fn fleet(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let Ok(block_size) = input.int_in_range(1usize..=4) else { return };
    let Ok(engine) = input.int_in_range(0u8..=2) else { return };
    let Ok(workers) = input.int_in_range(1usize..=4) else { return };
    let Ok(capacity) = input.int_in_range(1usize..=24) else { return };
    let Ok(router) = input.choose(&Router::NAMES) else { return };
    let Ok(timing) = input.int_in_range(0u8..=3) else { return };
    let Ok(seed) = input.int_in_range(0u64..=1000) else { return };
    // Five bytes a request, every remaining byte used (arbitrary's own collections stop at
    // random, which keeps traces too short to fill a cache).
    let arbs: Vec<Arb> = input
        .take_rest()
        .chunks_exact(5)
        .map(|c| Arb { family: c[0], shared: c[1], tokens: c[2], output: c[3], gap_ms: c[4] })
        .collect();
    let engine_block_size = match engine {
        0 => block_size,
        1 => block_size * 2,
        _ if block_size % 2 == 0 => block_size / 2,
        _ => block_size,
    };
    let timing = match timing {
        0 => Timing::Instant,
        1 => Timing::Mocker { speedup: 0.01 },
        2 => Timing::Mocker { speedup: 1.0 },
        _ => Timing::Mocker { speedup: 1000.0 },
    };
    let requests = trace(&arbs, block_size);
    let config = |workers, router: &str, timing| FleetConfig {
        block_size,
        engine_block_size: Some(engine_block_size),
        shapes: vec![Shape {
            workers,
            worker_capacity: capacity,
            router: Router::parse(router).unwrap(),
        }],
        timing,
        history: Some(capacity * 2),
        measure_from: 0,
        seed,
    };
    let run = |config: &FleetConfig, requests: &[Request]| -> FleetRow {
        let mut fleet = Fleet::new(config).expect("valid settings");
        for r in requests {
            fleet.push(r).expect("small traces fit");
        }
        fleet.finish().expect("small traces fit").remove(0)
    };

    let row = run(&config(workers, router, timing), &requests);
    let f = &row.funnel;
    assert_eq!(f.f5 + f.losses().iter().sum::<u64>(), f.f0, "{row:?}");
    assert_eq!(row.requests + row.rejected_requests, requests.len() as u64);
    assert_eq!(row.per_worker.iter().map(|w| w.prompt_tokens).sum::<u64>(), f.f0);
    assert_eq!(row.per_worker.iter().map(|w| w.reused_tokens).sum::<u64>(), f.f5);
    assert_eq!(row.per_worker.iter().map(|w| w.requests).sum::<u64>(), row.requests);
    assert!(f.f2 >= f.f3 && f.f0 >= f.f1.max(f.f2).max(f.f4), "{row:?}");
    if timing == Timing::Instant {
        assert_eq!(f.race, 0, "{row:?}");
    }

    if timing == Timing::Instant && engine_block_size == block_size {
        let alone = run(&config(1, router, timing), &requests);
        let (reused, evictions) = lru_model(&requests, capacity, block_size);
        assert_eq!((alone.funnel.f5, alone.evictions), (reused, evictions), "{alone:?}");
    }
    if *router == "round-robin" {
        for w in 0..workers {
            let mine: Vec<Request> = requests.iter().skip(w).step_by(workers).cloned().collect();
            let alone = run(&config(1, router, timing), &mine);
            assert_eq!(row.per_worker[w], alone.per_worker[0], "worker {w}");
        }
    }
}

/// The requests: prompts over four families of shared prefixes, ids unique past them; the
/// last id may stand for a partial block.
fn trace(arbs: &[Arb], block_size: usize) -> Vec<Request> {
    let bs = block_size as u64;
    let mut time = 0;
    arbs.iter()
        .enumerate()
        .map(|(i, a)| {
            time += u64::from(a.gap_ms % 8);
            let tokens = u64::from(a.tokens % 40);
            let blocks = tokens.div_ceil(bs) as usize;
            let family = u64::from(a.family % 4);
            let shared = usize::from(a.shared % 8);
            let prompt_ids = (0..blocks)
                .map(|j| {
                    if j < shared {
                        family * 1000 + j as u64
                    } else {
                        (1 << 40) + (i * 64 + j) as u64
                    }
                })
                .collect();
            Request {
                timestamp: Some(time),
                prompt_tokens: tokens,
                prompt_ids,
                output_tokens: u64::from(a.output % 12),
                ..Request::default()
            }
        })
        .collect()
}

/// One worker's vLLM block pool, one request at a time: (prompt tokens reused, evictions).
fn lru_model(requests: &[Request], capacity: usize, bs: usize) -> (u64, u64) {
    // Cached blocks without references, oldest release first; `None` for generated blocks.
    let mut queue: Vec<Option<Vec<u64>>> = Vec::new();
    let (mut reused, mut evictions) = (0u64, 0u64);
    let bs64 = bs as u64;
    for r in requests {
        let isl = r.prompt_tokens;
        if isl == 0 || isl.div_ceil(bs64) > capacity as u64 {
            continue;
        }
        let most = capacity as u64 * bs64;
        let osl = r.output_tokens.min(most + 1 - isl);
        let last = isl + osl - u64::from(osl > 0);
        let (blocks, full) = (last.div_ceil(bs64) as usize, (last / bs64) as usize);
        let prompt_full = (isl / bs64) as usize;
        let key = |k: usize| r.prompt_ids[..=k].to_vec();
        let cap = ((isl - 1) / bs64) as usize;
        let hits = (0..prompt_full.min(cap)).take_while(|&k| queue.contains(&Some(key(k)))).count();
        reused += (hits * bs) as u64;
        // Pinned hits leave the queue; every other block comes from a free slot or evicts the
        // queue's head.
        queue.retain(|entry| !(0..hits).any(|k| entry.as_ref() == Some(&key(k))));
        // Per block of the request: whether it ends up cached, and as what.
        let mut held: Vec<Option<Option<Vec<u64>>>> =
            (0..hits).map(|k| Some(Some(key(k)))).collect();
        for k in hits..blocks {
            // Blocks `0..k` are this request's, in use.
            if queue.len() + k == capacity {
                queue.remove(0);
                evictions += 1;
            }
            held.push(match k {
                k if k >= full => None,
                k if k < prompt_full => {
                    let content = Some(key(k));
                    // A copy already cached stays the only one; this one is private.
                    (!queue.contains(&content)).then_some(content)
                }
                _ => Some(None),
            });
        }
        for block in held.into_iter().rev().flatten() {
            queue.push(block);
        }
    }
    (reused, evictions)
}
