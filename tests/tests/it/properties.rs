//! Property tests of the native surfaces against simple models: the shared history under
//! four threads, the request lifecycle under random interleavings, and the byte budget.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kvreuse::SharedHistory;
use kvreuse::core::history::HistoryError;
use proptest::prelude::*;

/// Ids at or above this are never inserted: a reader must never see one.
const PHANTOM: u64 = 1 << 40;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Two writers and two readers at once. Writers insert batches through the shared
    /// history (recording the order in which their inserts took effect); readers look up
    /// inserted and never-inserted ids meanwhile. Afterwards the history equals a `VecDeque`
    /// replay of the recorded order: no id lost, duplicated, or kept past its eviction, and
    /// the index agrees with the FIFO. One case in eight has a capacity past the summary
    /// directory's bound, where lookups read the buckets' headers instead (nothing is evicted
    /// there: the other cases cover evictions).
    #[test]
    fn four_threads_leave_the_fifo_and_the_index_in_agreement(
        capacity in prop_oneof![
            7 => 1usize..300,
            1 => kvreuse_tests::large_capacity()..kvreuse_tests::large_capacity() + 300,
        ],
        batches in prop::collection::vec(
            (0usize..2, prop::collection::vec(0u64..600, 0..40)), 1..120),
    ) {
        let history = Arc::new(SharedHistory::with_capacity(capacity).unwrap());
        let log: Arc<Mutex<Vec<Vec<u64>>>> = Arc::new(Mutex::new(Vec::new()));
        let writing = Arc::new(AtomicBool::new(true));
        let phantom_seen = std::thread::scope(|scope| {
            let readers: Vec<_> = (0..2u64)
                .map(|r| {
                    let (history, writing) = (Arc::clone(&history), Arc::clone(&writing));
                    scope.spawn(move || {
                        let mut wrong = 0;
                        let mut i = r;
                        while writing.load(Ordering::Acquire) {
                            i = i.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                            let ids = [i % 600, (i >> 20) % 600, PHANTOM + i % 7];
                            let seen = history.seen_prefix_len(&ids);
                            wrong += usize::from(seen == 3 || history.contains(PHANTOM + i % 5));
                        }
                        wrong
                    })
                })
                .collect();
            let writers: Vec<_> = (0..2)
                .map(|w| {
                    let (history, log) = (Arc::clone(&history), Arc::clone(&log));
                    let mine: Vec<Vec<u64>> =
                        batches.iter().filter(|(t, _)| *t == w).map(|(_, ids)| ids.clone()).collect();
                    scope.spawn(move || {
                        for ids in mine {
                            // The log's lock orders the inserts as the history applies them.
                            let mut log = log.lock().unwrap();
                            history.insert_all(&ids);
                            log.push(ids);
                        }
                    })
                })
                .collect();
            writers.into_iter().for_each(|w| w.join().unwrap());
            writing.store(false, Ordering::Release);
            readers.into_iter().map(|r| r.join().unwrap()).sum::<usize>()
        });
        prop_assert_eq!(phantom_seen, 0, "a reader saw an id that was never inserted");
        let mut model: VecDeque<u64> = VecDeque::new();
        let mut new = 0u64;
        for ids in log.lock().unwrap().iter() {
            for &id in ids {
                if !model.contains(&id) {
                    if model.len() == capacity {
                        model.pop_front();
                    }
                    model.push_back(id);
                    new += 1;
                }
            }
        }
        let present = history.oldest_first();
        prop_assert_eq!(&present, &model.iter().copied().collect::<Vec<_>>());
        prop_assert_eq!(history.len(), model.len());
        prop_assert_eq!(history.total_inserted(), new);
        for id in 0..600 {
            prop_assert_eq!(history.contains(id), model.contains(&id), "index vs FIFO for {}", id);
        }
    }

    /// `heap_bytes()` never exceeds the budget a history was built from, and the capacity is
    /// the largest that fits (one more entry would not).
    #[test]
    fn heap_bytes_stay_within_random_budgets(log_budget in 10.0f64..27.0) {
        let budget = 2f64.powf(log_budget) as usize;
        match SharedHistory::with_byte_budget(budget) {
            Ok(history) => {
                prop_assert!(history.heap_bytes() <= budget, "{} > {}", history.heap_bytes(), budget);
                let bigger = SharedHistory::with_capacity(history.capacity() + 1).unwrap();
                prop_assert!(bigger.heap_bytes() > budget, "capacity {} is not the largest", history.capacity());
            }
            Err(HistoryError::BudgetTooSmall { .. }) => {
                prop_assert!(SharedHistory::with_capacity(1).unwrap().heap_bytes() > budget);
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The request lifecycle under random interleavings of many requests (begin, output on
    /// several choices, complete, incomplete, drop): observations equal requests begun, F0 and
    /// F1 equal the sums over completed requests, and the history learns only from those.
    /// The script and its model are the `attempts` fuzz target's.
    #[test]
    fn the_request_lifecycle_counts_exactly_once(script in prop::collection::vec(any::<u8>(), 0..4096)) {
        kvreuse_tests::attempts(&script);
    }

    /// Fleet simulations on random traces and settings: conservation, a plain LRU block
    /// cache, round-robin workers as fleets of one (the `fleet` target).
    #[test]
    fn fleets_account_for_every_token_and_match_the_models(script in prop::collection::vec(any::<u8>(), 0..4096)) {
        kvreuse_tests::fleet(&script);
    }

    /// History operation sequences against the `VecDeque` model (the `history_ops` target).
    #[test]
    fn history_operations_match_the_model(script in prop::collection::vec(any::<u8>(), 0..4096)) {
        kvreuse_tests::history_ops(&script);
    }
}
