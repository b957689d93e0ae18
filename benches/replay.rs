//! Trace replay: kvreuse's one-pass engine against the straightforward way, measured in the
//! same run.
//!
//! The work is the README's peer comparison: the bundled Mooncake trace (loaded once, outside
//! the timed loop, with the library's own loader), FIFO and LRU at 1,000, 10,000, 20,000 and
//! 30,000 blocks, the first half as warm-up. The baseline replays each (policy, capacity)
//! separately with hash-set histories, as an ad-hoc script would: a `HashSet` plus a
//! `VecDeque` for FIFO, a `HashMap` of last-use stamps plus a `BTreeMap` ordered by stamp for
//! LRU. Both must produce the same hit counts, or the comparison means nothing.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kvreuse::core::replay::{Policy, Replay, ReplayConfig};
use kvreuse::core::setup::TraceSettings;
use kvreuse::core::trace::Request;
use kvreuse::trace::{Source, load};

const CAPACITIES: [usize; 4] = [1000, 10_000, 20_000, 30_000];
const BLOCK: usize = 512;

fn config(requests: usize) -> ReplayConfig {
    let capacities: Vec<Option<usize>> = CAPACITIES.iter().map(|&c| Some(c)).collect();
    let mut config = ReplayConfig::grid(BLOCK, &[Policy::Fifo, Policy::Lru], &capacities);
    config.measure_from = requests / 2;
    config
}

/// kvreuse: every history in one pass. Returns F1 tokens per history.
fn one_pass(requests: &[Request]) -> Vec<u64> {
    let mut replay = Replay::new(&config(requests.len())).unwrap();
    for request in requests {
        replay.push(request).unwrap();
    }
    replay.results().iter().map(|row| row.f1_tokens).collect()
}

/// The baseline: one pass per history, hash-set histories.
fn separate_passes(requests: &[Request]) -> Vec<u64> {
    let from = requests.len() / 2;
    let mut out = Vec::new();
    for policy in [Policy::Fifo, Policy::Lru] {
        for capacity in CAPACITIES {
            let mut f1 = 0;
            let mut fifo: (HashSet<u64>, VecDeque<u64>) = Default::default();
            let mut lru: (HashMap<u64, u64>, BTreeMap<u64, u64>, u64) = Default::default();
            for (i, request) in requests.iter().enumerate() {
                let present = |id: &u64| match policy {
                    Policy::Fifo => fifo.0.contains(id),
                    _ => lru.0.contains_key(id),
                };
                if i >= from {
                    let leading = request.prompt_ids.iter().take_while(|id| present(id)).count();
                    f1 += (0..leading).map(|j| request.block_tokens(j, BLOCK)).sum::<u64>();
                }
                for &id in &request.prompt_ids {
                    if policy == Policy::Fifo {
                        if fifo.0.insert(id) {
                            fifo.1.push_back(id);
                            if fifo.1.len() > capacity {
                                let old = fifo.1.pop_front().unwrap();
                                fifo.0.remove(&old);
                            }
                        }
                    } else {
                        lru.2 += 1;
                        if let Some(stamp) = lru.0.insert(id, lru.2) {
                            lru.1.remove(&stamp);
                        } else if lru.0.len() > capacity {
                            let (_, old) = lru.1.pop_first().unwrap();
                            lru.0.remove(&old);
                        }
                        lru.1.insert(lru.2, id);
                    }
                }
            }
            out.push(f1);
        }
    }
    out
}

fn replay(c: &mut Criterion) {
    let (requests, _) = load(vec![Source::Bundled], &TraceSettings::default(), 1).unwrap();
    assert_eq!(one_pass(&requests), separate_passes(&requests), "both must agree");
    let blocks: usize = requests.iter().map(|r| r.prompt_ids.len()).sum();
    let mut group = c.benchmark_group("replay/mooncake_fifo_lru_x4");
    group.throughput(Throughput::Elements((blocks * 8) as u64));
    group.sample_size(20);
    group.bench_function("kvreuse", |b| b.iter(|| one_pass(black_box(&requests))));
    group.bench_function("hash-set histories, one pass each", |b| {
        b.iter(|| separate_passes(black_box(&requests)));
    });
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
