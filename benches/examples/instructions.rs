//! One history path, run a given number of times, for `scripts/bench-instructions`, which
//! counts the instructions it executes under valgrind's cachegrind. Instruction counts do not
//! depend on the machine's caches or load, so they compare the contenders' work per operation
//! the same way on every VM.
//!
//! `instructions <kvreuse|reference|proposal|none> <path> <operations> [capacity]` fills a
//! history of `capacity` ids (default 131,072) four times over with distinct ids, so that every
//! new id evicts one and the history is in its steady state, then performs `operations`
//! operations on one path:
//!
//! - `insert-new`: a completion of 34 ids never seen (34 new ids, 34 evictions);
//! - `insert-duplicate`: a completion of 34 ids all present;
//! - `lookup-present`: a lookup of 34 present ids;
//! - `lookup-miss-first`: a lookup of 34 ids whose first is missing.
//!
//! The script runs each twice, with n and 2n operations: the difference is the cost of n
//! operations, without the set-up. Ids are the same for every contender. `reference` is the
//! std-lock replica, `proposal` the proposal as built (`parking_lot`); `none` does the same
//! work around a history that does nothing (drawing the ids, the loop), which the script
//! subtracts from the others.

use std::hash::BuildHasher;
use std::hint::black_box;
use std::process::ExitCode;

use kvreuse::SharedHistory;
use kvreuse::core::history::History;
use kvreuse::history::DefaultStorage;
use kvreuse_benches::reference_history::{ProposalHistory, ReferenceHistory};
use kvreuse_benches::{Contender, SplitMix64};

const BLOCKS: usize = 34;

/// How many times over the history is filled before the operations.
const FILLS: usize = 4;

/// kvreuse's index key: `KVREUSE_INSTRUCTIONS_SEED` when set (the counts then repeat exactly,
/// for comparing two builds), else a random one, as a router's history draws.
fn seed() -> u64 {
    match std::env::var("KVREUSE_INSTRUCTIONS_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => seed,
        None => std::hash::RandomState::new().hash_one(0u64),
    }
}

/// A history that holds nothing: the cost of the harness around the operations.
struct Nothing;

impl Contender for Nothing {
    fn insert_all(&self, ids: &[u64]) -> usize {
        black_box(ids).len()
    }
    fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        black_box(ids).len()
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: instructions <kvreuse|reference|proposal|none> \
                 <insert-new|insert-duplicate|lookup-present|lookup-miss-first> <operations> \
                 [capacity]";
    let (Some(contender), Some(path), Some(operations)) = (args.first(), args.get(1), args.get(2))
    else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let Ok(operations) = operations.parse::<usize>() else {
        eprintln!("operations: not a count: {operations}\n{usage}");
        return ExitCode::from(2);
    };
    let capacity = match args.get(3).map(|c| c.parse::<usize>()) {
        None => 131_072,
        Some(Ok(c)) if c >= BLOCKS => c,
        Some(_) => {
            eprintln!("capacity: a count of at least {BLOCKS}\n{usage}");
            return ExitCode::from(2);
        }
    };
    let history: Box<dyn Contender> = match contender.as_str() {
        "kvreuse" => match History::with_capacity_in(capacity, seed()) {
            Ok(history) => Box::new(SharedHistory::<DefaultStorage>::from_history(history)),
            Err(error) => {
                eprintln!("capacity {capacity}: {error}");
                return ExitCode::from(2);
            }
        },
        "reference" => Box::new(ReferenceHistory::with_capacity(capacity)),
        "proposal" => Box::new(ProposalHistory::with_capacity(capacity)),
        "none" => Box::new(Nothing),
        other => {
            eprintln!("unknown contender {other}\n{usage}");
            return ExitCode::from(2);
        }
    };
    // Filled FILLS times over, so that every new id evicts the oldest and the history is in its
    // steady state: slots and summaries carry what evictions leave behind, as in a router that
    // has run for a while, not the tidy state of a first fill. The fill's ids come from one
    // stream, the measured operations' new ids from another.
    let mut filled = SplitMix64::new(1);
    let mut chunk = [0u64; BLOCKS];
    for _ in 0..(FILLS * capacity).div_ceil(BLOCKS) {
        chunk.fill_with(|| filled.next_u64());
        history.insert_all(&chunk);
    }
    let mut fresh = SplitMix64::new(2);
    let mut new_ids = |n: usize| -> Vec<u64> { (0..n).map(|_| fresh.next_u64()).collect() };
    // The newest ids stay present however many operations evict the oldest.
    let newest = &chunk[..];
    let mut answer = 0usize;
    match path.as_str() {
        "insert-new" => {
            let ids = new_ids(operations * BLOCKS);
            for chunk in ids.chunks(BLOCKS) {
                answer += history.insert_all(black_box(chunk));
            }
        }
        "insert-duplicate" => {
            for _ in 0..operations {
                answer += history.insert_all(black_box(newest));
            }
        }
        "lookup-present" => {
            for _ in 0..operations {
                answer += history.seen_prefix_len(black_box(newest));
            }
        }
        "lookup-miss-first" => {
            let firsts = new_ids(operations);
            let mut ids = newest.to_vec();
            for &first in &firsts {
                ids[0] = first;
                answer += history.seen_prefix_len(black_box(&ids));
            }
        }
        other => {
            eprintln!("unknown path {other}\n{usage}");
            return ExitCode::from(2);
        }
    }
    println!("{answer}");
    ExitCode::SUCCESS
}
