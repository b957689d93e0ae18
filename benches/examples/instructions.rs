//! The history's four paths, for `scripts/bench-instructions`, which counts the instructions
//! each executes under valgrind's callgrind. Instruction counts do not depend on the machine's
//! caches or load, so they compare the contenders' work per operation the same way on every VM.
//!
//! `instructions <kvreuse|reference|proposal|none> <operations> [capacity]` fills a history of
//! `capacity` ids (default 131,072) twelve times over with distinct ids, so that every new id
//! evicts one and the history is in the state it keeps in the long run (see [`FILLS`]), then
//! performs `operations` operations on each path, in this order (the lookups and duplicates
//! change nothing, so each path starts from the same state):
//!
//! - `lookup_present`: a lookup of 34 present ids;
//! - `lookup_miss_first`: a lookup of 34 ids whose first is missing;
//! - `insert_duplicate`: a completion of 34 ids all present;
//! - `insert_new`: a completion of 34 ids never seen (34 new ids, 34 evictions).
//!
//! Each path runs in a function of its own name, never inlined, and nothing else runs in it:
//! callgrind's inclusive count of that function is the path's cost, without the fill or the
//! drawing of the ids, so one run (one fill) serves all four paths. Ids are the same for every
//! contender. `reference` is the std-lock replica, `proposal` the proposal as built
//! (`parking_lot`); `none` runs the same loops around a history that does nothing (the calls
//! through the `Contender` interface, the loop), which the script subtracts from the others.

use std::hash::BuildHasher;
use std::hint::black_box;
use std::process::ExitCode;

use kvreuse::SharedHistory;
use kvreuse::core::history::History;
use kvreuse::history::DefaultStorage;
use kvreuse_benches::reference_history::{ProposalHistory, ReferenceHistory};
use kvreuse_benches::{Contender, LONG_RUN_FILLS, SplitMix64};

const BLOCKS: usize = 34;

/// How many times over the history is filled before the operations: until every contender is
/// in its long-run state (see [`LONG_RUN_FILLS`]).
const FILLS: usize = LONG_RUN_FILLS;

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

// Each path's function takes the history through `black_box`: given it plainly, the compiler
// passes the one method each calls instead, and then merges the functions whose code is the same
// but for that method (`lookup_present` with `insert_duplicate`, `lookup_miss_first` with
// `insert_new`), which would count two paths as one.

/// `operations` lookups of `ids`, all present.
#[inline(never)]
fn lookup_present(history: &dyn Contender, ids: &[u64], operations: usize) -> usize {
    let history = black_box(history);
    (0..operations).map(|_| history.seen_prefix_len(black_box(ids))).sum()
}

/// A lookup per prompt of `prompts`, each one's first id missing.
#[inline(never)]
fn lookup_miss_first(history: &dyn Contender, prompts: &[u64]) -> usize {
    let history = black_box(history);
    prompts.chunks(BLOCKS).map(|ids| history.seen_prefix_len(black_box(ids))).sum()
}

/// `operations` completions of `ids`, all present.
#[inline(never)]
fn insert_duplicate(history: &dyn Contender, ids: &[u64], operations: usize) -> usize {
    let history = black_box(history);
    (0..operations).map(|_| history.insert_all(black_box(ids))).sum()
}

/// A completion per chunk of `ids`, all new.
#[inline(never)]
fn insert_new(history: &dyn Contender, ids: &[u64]) -> usize {
    let history = black_box(history);
    ids.chunks(BLOCKS).map(|chunk| history.insert_all(black_box(chunk))).sum()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: instructions <kvreuse|reference|proposal|none> <operations> [capacity]";
    let (Some(contender), Some(operations), None) = (args.first(), args.get(1), args.get(3)) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let Ok(operations) = operations.parse::<usize>() else {
        eprintln!("operations: not a count: {operations}\n{usage}");
        return ExitCode::from(2);
    };
    let capacity = match args.get(2).map(|c| c.parse::<usize>()) {
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
    // long-run state: slots and summaries carry what evictions leave behind, and the references'
    // tables have grown to the size they keep, as in a router that has run for a while, not the
    // tidy state of a first fill. The fill's ids come from one stream, the measured operations'
    // new ids from another.
    let mut filled = SplitMix64::new(1);
    let mut newest = [0u64; BLOCKS];
    for _ in 0..(FILLS * capacity).div_ceil(BLOCKS) {
        newest.fill_with(|| filled.next_u64());
        history.insert_all(&newest);
    }
    // The newest ids stay present until the last path evicts the oldest.
    let mut fresh = SplitMix64::new(2);
    let mut missing_first = newest.repeat(operations);
    for ids in missing_first.chunks_mut(BLOCKS) {
        ids[0] = fresh.next_u64();
    }
    let new_ids: Vec<u64> = (0..operations * BLOCKS).map(|_| fresh.next_u64()).collect();
    let history = &*history;
    let answers = [
        lookup_present(history, &newest, operations),
        lookup_miss_first(history, &missing_first),
        insert_duplicate(history, &newest, operations),
        insert_new(history, &new_ids),
    ];
    // What each path answered, so that none of them can be optimized away; and a check, for
    // a history that holds ids: all present ids found, no missing-first prompt's, no duplicate
    // new, every new id new.
    println!("{answers:?}");
    let ids = operations * BLOCKS;
    if contender != "none" && answers != [ids, 0, 0, ids] {
        eprintln!("{contender} answered {answers:?} where {:?} is right", [ids, 0, 0, ids]);
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
