//! The cost a router pays per request for the accounting: a switched-off tracker (must be
//! under 10 ns for begin + complete, and with the route and the worker report), and a
//! switched-on one for scale.

use criterion::{Criterion, criterion_group, criterion_main};
use kvreuse::{Config, Route, Tracker, WorkerReport};
use kvreuse_benches::SplitMix64;
use std::hint::black_box;

fn guards(c: &mut Criterion) {
    let prompt = SplitMix64::new(3).tokens(2048);
    let mut group = c.benchmark_group("tracker");

    let off = Tracker::new(&Config::disabled(), &prometheus::Registry::new()).unwrap();
    assert!(!off.is_enabled());
    group.bench_function("disabled begin+complete", |b| {
        b.iter(|| off.begin(black_box(&prompt)).complete());
    });
    let route = Route { best_cached_tokens: 1536, selected_cached_tokens: 1024 };
    let report =
        WorkerReport { prompt_tokens: 2048, gpu_hit_tokens: 1024, ..WorkerReport::default() };
    group.bench_function("disabled begin+observe_route+observe_worker+complete", |b| {
        b.iter(|| {
            let mut guard = off.begin(black_box(&prompt));
            guard.observe_route(black_box(route));
            let _ = black_box(guard.observe_worker(black_box(report)));
            guard.complete();
        });
    });

    let registry = prometheus::Registry::new();
    let on = Tracker::new(&Config::new(16).with_history_bytes(64 << 20), &registry).unwrap();
    group.bench_function("enabled begin+complete, 2048-token prompt", |b| {
        b.iter(|| on.begin(black_box(&prompt)).complete());
    });
    group.bench_function(
        "enabled begin+observe_route+observe_worker+complete, 2048-token prompt",
        |b| {
            b.iter(|| {
                let mut guard = on.begin(black_box(&prompt));
                guard.observe_route(black_box(route));
                let _ = black_box(guard.observe_worker(black_box(report)));
                guard.complete();
            });
        },
    );
    group.finish();
}

criterion_group!(benches, guards);
criterion_main!(benches);
