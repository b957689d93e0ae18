//! The replay engine against simpler computations of the same numbers: one pass over many
//! histories equals separate passes, and a FIFO row equals looking up and inserting into a
//! `History` by hand (and an LRU row a naive LRU).

use std::collections::VecDeque;

use kvreuse_core::history::History;
use kvreuse_core::replay::{Policy, Replay, ReplayConfig, Row};
use kvreuse_core::trace::Request;
use proptest::prelude::*;

const BLOCK: usize = 4;

fn request() -> impl Strategy<Value = Request> {
    (
        prop::collection::vec(0u64..40, 0..10),
        0u64..4,
        prop::collection::vec(100u64..120, 0..3),
        prop::option::of(0u64..1000),
    )
        .prop_map(|(prompt_ids, partial, output_ids, timestamp)| {
            let full = (prompt_ids.len() as u64).saturating_sub(1) * BLOCK as u64;
            let last = if prompt_ids.is_empty() { 0 } else { BLOCK as u64 - partial };
            Request {
                timestamp,
                prompt_tokens: full + last,
                prompt_ids,
                output_ids,
                ..Request::default()
            }
        })
}

fn replay(histories: Vec<(Policy, Option<usize>)>, requests: &[Request]) -> Vec<Row> {
    replay_from(histories, requests, 0)
}

fn replay_from(
    histories: Vec<(Policy, Option<usize>)>,
    requests: &[Request],
    measure_from: usize,
) -> Vec<Row> {
    let config = ReplayConfig { block_size: BLOCK, histories, measure_from };
    let mut replay = Replay::new(&config).unwrap();
    requests.iter().for_each(|r| replay.push(r).unwrap());
    replay.results()
}

/// (f1 tokens, any tokens, f1 blocks) of one request given which of its blocks are present.
fn count(request: &Request, present: &[bool]) -> (u64, u64, u64) {
    let mut out = (0, 0, 0);
    let mut leading = true;
    for (j, &p) in present.iter().enumerate() {
        let tokens = request.block_tokens(j, BLOCK);
        leading &= p;
        if p {
            out.1 += tokens;
        }
        if leading {
            out.0 += tokens;
            out.2 += 1;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn one_pass_equals_separate_passes(
        requests in prop::collection::vec(request(), 0..40),
        capacities in prop::collection::vec(1usize..30, 1..40),
        measure_from in 0usize..20,
    ) {
        // Up to 79 histories: the engine's presence bits then span two words.
        let mut histories = vec![(Policy::Inf, None)];
        for &c in &capacities {
            histories.push((Policy::Fifo, Some(c)));
            histories.push((Policy::Lru, Some(c)));
        }
        let together = replay_from(histories.clone(), &requests, measure_from);
        for (history, row) in histories.into_iter().zip(together) {
            let alone = replay_from(vec![history], &requests, measure_from);
            prop_assert_eq!(&alone[0], &row);
        }
    }

    #[test]
    fn fifo_rows_equal_a_history_used_by_hand(
        requests in prop::collection::vec(request(), 0..40),
        capacity in 1usize..30,
    ) {
        let row = &replay(vec![(Policy::Fifo, Some(capacity))], &requests)[0];
        let mut history = History::with_capacity(capacity, 99).unwrap();
        let (mut f0, mut f1, mut any, mut blocks, mut evicted) = (0, 0, 0, 0, 0);
        for r in &requests {
            let present: Vec<bool> = r.prompt_ids.iter().map(|&id| history.contains(id)).collect();
            let (a, b, c) = count(r, &present);
            prop_assert_eq!(history.seen_prefix_len(&r.prompt_ids) as u64, c);
            f0 += r.prompt_tokens;
            f1 += a;
            any += b;
            blocks += c;
            evicted += history.insert_all(&r.prompt_ids).evicted as u64;
            evicted += history.insert_all(&r.output_ids).evicted as u64;
        }
        prop_assert_eq!(
            (row.f0_tokens, row.f1_tokens, row.any_tokens, row.f1_blocks, row.evictions),
            (f0, f1, any, blocks, evicted)
        );
    }

    #[test]
    fn lru_rows_equal_a_naive_lru(
        requests in prop::collection::vec(request(), 0..40),
        capacity in 1usize..30,
    ) {
        let row = &replay(vec![(Policy::Lru, Some(capacity))], &requests)[0];
        // Most recent at the back.
        let mut lru: VecDeque<u64> = VecDeque::new();
        let (mut f1, mut any, mut evicted) = (0, 0, 0);
        for r in &requests {
            let present: Vec<bool> = r.prompt_ids.iter().map(|id| lru.contains(id)).collect();
            let (a, b, _) = count(r, &present);
            f1 += a;
            any += b;
            for &id in r.prompt_ids.iter().chain(&r.output_ids) {
                if let Some(i) = lru.iter().position(|&x| x == id) {
                    lru.remove(i);
                } else if lru.len() == capacity {
                    lru.pop_front();
                    evicted += 1;
                }
                lru.push_back(id);
            }
        }
        prop_assert_eq!((row.f1_tokens, row.any_tokens, row.evictions), (f1, any, evicted));
    }
}
