//! The history against a naive model (a `VecDeque` scanned linearly): random operation
//! sequences at small capacities, every observable checked after every step.

use std::collections::VecDeque;

use kvreuse_core::history::{BoxStorage, History, HistoryError, Inserted, Layout};
use proptest::prelude::*;

/// The specification, written as plainly as possible.
struct Model {
    capacity: usize,
    ids: VecDeque<u64>,
}

impl Model {
    fn insert_all(&mut self, ids: &[u64]) -> Inserted {
        let mut out = Inserted::default();
        for &id in ids {
            if self.ids.contains(&id) {
                continue;
            }
            if self.ids.len() == self.capacity {
                self.ids.pop_front();
                out.evicted += 1;
            }
            self.ids.push_back(id);
            out.new += 1;
        }
        out
    }

    fn seen_prefix_len(&self, ids: &[u64]) -> usize {
        ids.iter().take_while(|id| self.ids.contains(id)).count()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<u64>),
    Lookup(Vec<u64>),
    Clear,
}

/// Ids mostly from a small domain (so duplicates and re-insertions are common), sometimes
/// anywhere in `u64`.
fn id() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..48, 1 => any::<u64>()]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => prop::collection::vec(id(), 0..12).prop_map(Op::Insert),
        4 => prop::collection::vec(id(), 0..8).prop_map(Op::Lookup),
        1 => Just(Op::Clear),
    ]
}

fn capacity() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 1usize..=20, 2 => 21usize..=64, 1 => 65usize..=300]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2500))]

    #[test]
    fn history_matches_the_model(
        capacity in capacity(),
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut history = History::with_capacity(capacity, seed).unwrap();
        let reader = history.reader();
        let mut model = Model { capacity, ids: VecDeque::new() };
        for op in &ops {
            match op {
                Op::Insert(ids) => {
                    prop_assert_eq!(history.insert_all(ids), model.insert_all(ids));
                }
                Op::Lookup(ids) => {
                    let want = model.seen_prefix_len(ids);
                    prop_assert_eq!(history.seen_prefix_len(ids), want);
                    prop_assert_eq!(reader.seen_prefix_len(ids), want);
                }
                Op::Clear => {
                    history.clear();
                    model.ids.clear();
                }
            }
            prop_assert_eq!(history.len(), model.ids.len());
            prop_assert_eq!(reader.len(), model.ids.len());
            prop_assert_eq!(history.is_full(), model.ids.len() == capacity);
            prop_assert!(history.oldest_first().eq(model.ids.iter().copied()));
            for id in 0u64..48 {
                prop_assert_eq!(history.contains(id), model.ids.contains(&id), "id {}", id);
                prop_assert_eq!(reader.contains(id), model.ids.contains(&id), "id {}", id);
            }
            for &id in &model.ids {
                prop_assert!(history.contains(id));
            }
        }
        prop_assert_eq!(history.forced_evictions(), 0);
    }

    #[test]
    fn heap_bytes_never_exceed_the_budget(budget in 200usize..(64 << 20)) {
        let bytes_for = History::<BoxStorage>::bytes_for;
        // The smallest history's size depends on the target (pointer size, alignment):
        // a budget below it is an error naming the budget.
        let smallest = bytes_for(&Layout::for_capacity(1).unwrap());
        if budget < smallest {
            let error = History::with_byte_budget(budget, 1).unwrap_err();
            prop_assert_eq!(error, HistoryError::BudgetTooSmall { bytes: budget });
            return Ok(());
        }
        let history = History::with_byte_budget(budget, 1).unwrap();
        prop_assert!(history.heap_bytes() <= budget);
        // And it is the largest that fits.
        let next = Layout::for_capacity(history.capacity() + 1).unwrap();
        prop_assert!(bytes_for(&next) > budget);
    }
}
