//! The cost a router pays per request for the accounting: a switched-off tracker (must be
//! under 10 ns for begin + complete), and a switched-on one for scale.

use criterion::{Criterion, criterion_group, criterion_main};
use kvreuse::{Config, Tracker};
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

    let registry = prometheus::Registry::new();
    let on = Tracker::new(&Config::new(16).with_history_bytes(64 << 20), &registry).unwrap();
    group.bench_function("enabled begin+complete, 2048-token prompt", |b| {
        b.iter(|| on.begin(black_box(&prompt)).complete());
    });
    group.finish();
}

criterion_group!(benches, guards);
criterion_main!(benches);
