//! The replay rules on hand-made requests, checked against the toy trace's expected table.

use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::chain::DynamoHasher;
use crate::trace::parse_line;

const TOY: &str = include_str!("../../../traces/toy_semantics.jsonl");

fn toy() -> Vec<Request> {
    let hasher = DynamoHasher::new(512).unwrap();
    TOY.lines().filter_map(|l| parse_line(l.as_bytes(), &hasher).unwrap()).collect()
}

fn run(histories: Vec<(Policy, Option<usize>)>) -> Vec<Row> {
    let mut replay =
        Replay::new(&ReplayConfig { block_size: 512, histories, measure_from: 0 }).unwrap();
    for request in toy() {
        replay.push(&request).unwrap();
    }
    replay.results()
}

#[test]
fn toy_trace_tells_fifo_lru_and_prefix_rules_apart() {
    let rows = run(vec![
        (Policy::Inf, None),
        (Policy::Fifo, Some(3)),
        (Policy::Fifo, Some(4)),
        (Policy::Lru, Some(3)),
        (Policy::Lru, Some(4)),
    ]);
    // (prefix tokens, any tokens, prefix blocks), from traces/README.md.
    let want =
        [(2560, 2560, 5), (1024, 1024, 2), (1024, 1536, 2), (1024, 1024, 2), (1024, 1536, 2)];
    for (row, (f1, any, blocks)) in rows.iter().zip(want) {
        assert_eq!((row.f1_tokens, row.any_tokens, row.f1_blocks), (f1, any, blocks), "{row:?}");
        assert_eq!(row.f0_tokens, 4266);
    }
    // The infinite history reaches back to the first request (t=0) from the last (t=3).
    assert_eq!(rows[0].reach_ms, Some(3));
}

#[test]
fn only_requests_after_the_warmup_are_counted() {
    let mut config = ReplayConfig::grid(512, &[Policy::Fifo], &[Some(10)]);
    for (measure_from, requests, counted) in [(0, 7, 7), (3, 7, 4), (1996, 3993, 1997), (7, 7, 0)] {
        config.measure_from = measure_from;
        assert_eq!(config.counted(requests), counted, "{measure_from} of {requests}");
    }
    // Fewer requests than the warm-up's start: none counted.
    config.measure_from = 5;
    assert_eq!(config.counted(3), 0);
}

#[test]
fn warmup_requests_teach_but_do_not_count() {
    let config =
        ReplayConfig { block_size: 512, histories: vec![(Policy::Inf, None)], measure_from: 3 };
    let mut replay = Replay::new(&config).unwrap();
    for request in toy() {
        replay.push(&request).unwrap();
    }
    let row = &replay.results()[0];
    // Only the last request (1536 tokens, blocks 1,2,3 all seen before) is counted.
    assert_eq!((row.f0_tokens, row.f1_tokens, row.f1_blocks), (1536, 1536, 3));
    assert_eq!(replay.requests(), 4);
}

#[test]
fn grid_builds_every_policy_and_capacity_once() {
    let config = ReplayConfig::grid(16, &[Policy::Lru, Policy::Fifo], &[Some(10), None, Some(5)]);
    assert_eq!(
        config.histories,
        [
            (Policy::Fifo, Some(5)),
            (Policy::Fifo, Some(10)),
            (Policy::Lru, Some(5)),
            (Policy::Lru, Some(10)),
            (Policy::Inf, None),
        ]
    );
}

#[test]
fn bad_configurations_are_errors() {
    let bad = |histories, block_size| {
        Replay::new(&ReplayConfig { block_size, histories, measure_from: 0 }).unwrap_err()
    };
    assert_eq!(bad(vec![], 0), ReplayError::ZeroBlockSize);
    assert_eq!(bad(vec![(Policy::Fifo, None)], 4), ReplayError::BadCapacity(Policy::Fifo));
    assert_eq!(bad(vec![(Policy::Inf, Some(3))], 4), ReplayError::BadCapacity(Policy::Inf));
    assert!(matches!(bad(vec![(Policy::Lru, Some(0))], 4), ReplayError::History(_)));
}
