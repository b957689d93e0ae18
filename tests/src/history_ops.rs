//! `History` against a `VecDeque` model, on operation sequences chosen by the fuzzer.

use std::collections::VecDeque;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use kvreuse_core::history::{History, Inserted, Layout};

#[derive(Arbitrary, Debug)]
enum Op {
    /// Insert ids drawn from a small range (so that duplicates and re-insertions happen).
    Insert(Vec<u8>),
    /// Insert ids from the whole `u64` range.
    InsertWide(Vec<u64>),
    /// Look a run of ids up.
    Lookup(Vec<u8>),
    Contains(u8),
    Clear,
}

/// Runs a fuzzer-chosen capacity, seed and operation sequence against the model, checking
/// every result, `len`, membership of every small id, and the oldest-first order.
///
/// Capacities run from 1 to 40 (small indexes, crowded buckets) and, for one choice in 41,
/// [`large_capacity`]: lookups there take the path of large histories, which have no summary
/// directory. (A first byte below 40 chooses the capacity it chose before that choice was
/// added, so the committed inputs replay as they were found.)
pub fn history_ops(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let Ok(choice) = input.int_in_range(1usize..=41) else { return };
    let capacity = if choice == 41 { large_capacity() } else { choice };
    let Ok(seed) = u64::arbitrary(&mut input) else { return };
    let Ok(ops) = Vec::<Op>::arbitrary(&mut input) else { return };
    let mut history = History::with_capacity(capacity, seed).expect("a valid capacity");
    let reader = history.reader();
    let mut model: VecDeque<u64> = VecDeque::new();
    for op in ops {
        match op {
            Op::Insert(small) => {
                let ids: Vec<u64> = small.iter().map(|&b| u64::from(b % 64)).collect();
                insert(&mut history, &mut model, capacity, &ids);
            }
            Op::InsertWide(ids) => insert(&mut history, &mut model, capacity, &ids),
            Op::Lookup(small) => {
                let ids: Vec<u64> = small.iter().map(|&b| u64::from(b % 64)).collect();
                let want = ids.iter().take_while(|id| model.contains(id)).count();
                assert_eq!(history.seen_prefix_len(&ids), want, "seen_prefix_len({ids:?})");
                assert_eq!(reader.seen_prefix_len(&ids), want, "reader seen_prefix_len({ids:?})");
            }
            Op::Contains(id) => {
                let id = u64::from(id % 64);
                assert_eq!(history.contains(id), model.contains(&id), "contains({id})");
            }
            Op::Clear => {
                history.clear();
                model.clear();
            }
        }
        assert_eq!(history.len(), model.len());
        assert_eq!(reader.len(), model.len());
        assert_eq!(history.is_full(), model.len() == capacity);
        for id in 0..64 {
            assert_eq!(reader.contains(id), model.contains(&id), "contains({id})");
        }
    }
    assert!(history.oldest_first().eq(model.iter().copied()), "oldest-first order");
}

fn insert(history: &mut History, model: &mut VecDeque<u64>, capacity: usize, ids: &[u64]) {
    let mut want = Inserted::default();
    for &id in ids {
        if model.contains(&id) {
            continue;
        }
        if model.len() == capacity {
            model.pop_front();
            want.evicted += 1;
        }
        model.push_back(id);
        want.new += 1;
    }
    assert_eq!(history.insert_all(ids), want, "insert_all({ids:?})");
}

/// The smallest capacity whose index has no summary directory, so that its lookups read the
/// buckets' headers as every large history's do (229,377 ids when this was written). Found
/// from the layouts rather than written down, so the tests follow the bound wherever it moves.
pub fn large_capacity() -> usize {
    static LARGE: OnceLock<usize> = OnceLock::new();
    *LARGE.get_or_init(|| {
        let without = |capacity| Layout::for_capacity(capacity).unwrap().directory_words() == 0;
        // Histories have a directory up to a number of buckets, which grows with the capacity.
        let (mut with, mut past) = (1, 1 << 24);
        assert!(!without(with) && without(past), "no directory bound below {past} ids");
        while past - with > 1 {
            let middle = with + (past - with) / 2;
            if without(middle) { past = middle } else { with = middle }
        }
        past
    })
}
