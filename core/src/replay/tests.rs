//! The replay rules on hand-made requests, checked against the toy trace's expected table.

use alloc::format;
use alloc::string::ToString;
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
    assert_eq!(config.policy_counts(), (2, 2, 1));
    let fifo_only = ReplayConfig::grid(16, &[Policy::Fifo], &[Some(1), Some(2), Some(3)]);
    assert_eq!(fifo_only.policy_counts(), (3, 0, 0));
    assert_eq!(ReplayConfig::grid(16, &[Policy::Inf], &[]).policy_counts(), (0, 0, 1));
}

#[test]
fn policies_print_as_they_are_written() {
    for policy in [Policy::Fifo, Policy::Lru, Policy::Inf] {
        assert_eq!(policy.to_string(), policy.name());
        assert_eq!(Policy::parse(&policy.to_string()), Ok(policy));
    }
    assert_eq!(Policy::Lru.to_string(), "lru");
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

fn request(prompt_ids: Vec<u64>, output_ids: Vec<u64>) -> Request {
    let prompt_tokens = 512 * prompt_ids.len() as u64;
    let output_tokens = 512 * output_ids.len() as u64;
    Request { prompt_tokens, prompt_ids, output_tokens, output_ids, ..Request::default() }
}

#[test]
fn the_distinct_id_bound_refuses_the_request_that_would_cross_it() {
    let config = ReplayConfig::grid(512, &[Policy::Fifo], &[Some(100), None]);
    let mut replay = Replay::new(&config).unwrap().with_id_limit(10);
    // Prompt and output ids together reach the bound exactly: accepted.
    replay.push(&request((1..=6).collect(), (7..=10).collect())).unwrap();
    let before = replay.results();
    // One more id would cross it: refused, and nothing of the request counted or learned.
    assert_eq!(replay.push(&request(vec![1, 11], vec![])), Err(ReplayError::TooManyIds));
    assert_eq!(replay.learn(&request(vec![11], vec![])), Err(ReplayError::TooManyIds));
    assert_eq!(replay.results(), before);
    assert_eq!(replay.requests(), 1);
}

#[test]
fn learned_requests_count_towards_the_warmup() {
    let mut config = ReplayConfig::grid(512, &[Policy::Fifo], &[Some(100)]);
    config.measure_from = 2;
    let mut replay = Replay::new(&config).unwrap();
    // Evictions during the warm-up are not counted.
    replay.learn(&request((1..=100).collect(), vec![])).unwrap();
    replay.learn(&request(vec![101], vec![])).unwrap();
    assert_eq!(replay.requests(), 2);
    assert_eq!(replay.results()[0].evictions, 0);
    // The third request is past the warm-up: counted, and its first block was learned.
    replay.push(&request(vec![2, 200], vec![])).unwrap();
    let row = &replay.results()[0];
    assert_eq!((row.f0_tokens, row.f1_tokens, row.evictions), (1024, 512, 1));
    replay.learn(&request(vec![201, 202], vec![])).unwrap();
    assert_eq!(replay.results()[0].evictions, 3);
}

#[test]
fn dense_numbers_stay_below_the_reserved_one() {
    assert!(u32::try_from(MAX_DISTINCT_IDS).is_ok_and(|n| n < u32::MAX));
}

#[test]
fn replay_errors_say_what_to_do() {
    let cases = [
        (ReplayError::ZeroBlockSize, "block size must be at least 1".to_string()),
        (ReplayError::BadCapacity(Policy::Inf), "the inf policy takes no capacity".into()),
        (ReplayError::BadCapacity(Policy::Lru), "the lru policy needs a capacity".into()),
        (
            ReplayError::TooManyIds,
            format!("the trace has more than {MAX_DISTINCT_IDS} distinct block ids"),
        ),
        (
            ReplayError::OutOfMemory { bytes: 4096, ids: 7, histories: (1, 2, 3) },
            "out of memory: 4096 bytes asked for the state of 6 histories (1 FIFO, 2 LRU, 3 inf) \
             over 7 distinct block ids; replay fewer capacities or policies at once"
                .into(),
        ),
        (ReplayError::History(HistoryError::ZeroCapacity), HistoryError::ZeroCapacity.to_string()),
    ];
    for (error, message) in cases {
        assert_eq!(error.to_string(), message);
        assert!(!message.is_empty());
    }
}

#[test]
fn heap_bytes_grow_with_the_distinct_ids() {
    let config = ReplayConfig::grid(512, &[Policy::Fifo, Policy::Lru], &[Some(100), None]);
    let mut replay = Replay::new(&config).unwrap();
    let empty = replay.heap_bytes();
    for i in 0..1_000u64 {
        replay.push(&request((i * 10..i * 10 + 10).collect(), vec![])).unwrap();
    }
    // 10,000 distinct ids: each has at least its 4-byte dense number, and nothing holds a
    // copy of every request.
    let full = replay.heap_bytes();
    assert!(full >= empty + 10_000 * 4, "{empty} -> {full}");
    assert!(full < 10_000 * 256, "{full} bytes for 10,000 ids");
}

/// `look_up` (used by the fleet simulation) and the counting in `push` walk the histories'
/// presence words separately: with more than 64 histories (two words), the tokens `look_up`
/// reports must be exactly what `push` then adds to F1.
#[test]
fn look_up_agrees_with_counting_across_many_histories() {
    let capacities: Vec<Option<usize>> = (1..=70).map(Some).collect();
    let config = ReplayConfig::grid(512, &[Policy::Fifo], &capacities);
    let mut replay = Replay::new(&config).unwrap();
    let mut varied = false;
    for i in 0..300u64 {
        // Prefixes of 13 documents, so longer histories keep more of them.
        let (document, blocks) = (i * 7 % 13, i % 9 + 1);
        let req = request((0..blocks).map(|j| document * 100 + j).collect(), vec![]);
        let looked = replay.look_up(&req).unwrap().to_vec();
        let before: Vec<u64> = replay.results().iter().map(|r| r.f1_tokens).collect();
        replay.push(&req).unwrap();
        let after: Vec<u64> = replay.results().iter().map(|r| r.f1_tokens).collect();
        let added: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(looked, added, "request {i}");
        varied |= looked[0] != looked[69] && looked[64] != looked[0];
    }
    assert!(varied, "histories of different sizes must disagree somewhere");
}

/// A request without a timestamp is learned at the clock's time, or before any timestamp at
/// the first one: the reach is how far back the stamped time goes, never back to time 0.
#[test]
fn requests_without_timestamps_do_not_stretch_the_reach() {
    let request = |id: u64, timestamp: Option<u64>| Request {
        timestamp,
        prompt_tokens: 4,
        prompt_ids: vec![id],
        ..Request::default()
    };
    let reach = |requests: &[Request]| {
        let histories = vec![(Policy::Inf, None), (Policy::Fifo, Some(8)), (Policy::Lru, Some(8))];
        let mut replay =
            Replay::new(&ReplayConfig { block_size: 4, histories, measure_from: 0 }).unwrap();
        for r in requests {
            replay.push(r).unwrap();
        }
        replay.results().iter().map(|row| row.reach_ms).collect::<Vec<_>>()
    };
    let late = 1_700_000_000_000;
    // The unstamped request came before the first timestamp: learned at it.
    assert_eq!(reach(&[request(1, None), request(2, Some(late))]), [Some(0); 3]);
    assert_eq!(reach(&[request(1, Some(late)), request(2, None)]), [Some(0); 3]);
    assert_eq!(
        reach(&[request(1, None), request(2, Some(late)), request(3, Some(late + 40))]),
        [Some(40); 3]
    );
    // Between two stamped requests: at the earlier one's time.
    assert_eq!(
        reach(&[request(1, Some(1000)), request(2, None), request(3, Some(5000))]),
        [Some(4000); 3]
    );
    // A trace that starts at time 0 reaches back to it.
    assert_eq!(reach(&[request(1, Some(0)), request(2, None), request(3, Some(7))]), [Some(7); 3]);
    // No timestamps at all: no reach.
    assert_eq!(reach(&[request(1, None), request(2, None)]), [None; 3]);
}
