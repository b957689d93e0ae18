//! Four threads inserting and looking up at once: afterwards the FIFO order and the index
//! agree, and no id is lost, duplicated or kept past its eviction.

use std::collections::HashSet;
use std::sync::Barrier;

use kvreuse::SharedHistory;

const THREADS: u64 = 4;
const PER_THREAD: u64 = 60_000;
const SHARED_POOL: u64 = 500;

/// Thread `t`'s own ids, in the order it inserts them.
fn own_id(t: u64, i: u64) -> u64 {
    (t + 1) << 40 | i
}

/// Ids every thread inserts now and then (duplicates across threads).
fn shared_id(i: u64) -> u64 {
    0xfeed_0000_0000 | (i % SHARED_POOL)
}

#[test]
fn four_threads_leave_fifo_and_index_in_agreement() {
    let capacity = 50_000;
    let history = SharedHistory::with_capacity(capacity).unwrap();
    let barrier = Barrier::new(THREADS as usize);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (history, barrier) = (&history, &barrier);
            scope.spawn(move || {
                barrier.wait();
                let mut i = 0;
                let mut completion = Vec::new();
                while i < PER_THREAD {
                    completion.clear();
                    let size = 1 + (i * 7 + t) % 40;
                    for _ in 0..size.min(PER_THREAD - i) {
                        completion.push(own_id(t, i));
                        if i % 13 == 0 {
                            completion.push(shared_id(i * 31 + t));
                        }
                        i += 1;
                    }
                    let before = history.total_inserted();
                    history.insert_all(&completion);
                    let own: Vec<u64> =
                        completion.iter().copied().filter(|id| id >> 40 == t + 1).collect();
                    let seen = history.seen_prefix_len(&own);
                    // Just inserted: only the other threads' concurrent inserts can have
                    // evicted them, and only if a whole capacity's worth went in meanwhile
                    // (a thread preempted on a busy machine can wait that long).
                    let meanwhile = history.total_inserted() - before;
                    if meanwhile < capacity as u64 {
                        assert_eq!(seen, own.len(), "thread {t} at {i}");
                    }
                    // Lookups of ids that were never inserted find nothing.
                    assert!(!history.contains(own_id(t, PER_THREAD + i)));
                }
            });
        }
    });

    let fifo = history.oldest_first();
    assert_eq!(fifo.len(), capacity);
    assert_eq!(history.len(), capacity);
    let unique: HashSet<u64> = fifo.iter().copied().collect();
    assert_eq!(unique.len(), fifo.len(), "an id is in the FIFO twice");
    for t in 0..THREADS {
        // FIFO eviction keeps a suffix of each thread's own ids, in insertion order.
        let kept: Vec<u64> = fifo.iter().copied().filter(|id| id >> 40 == t + 1).collect();
        let first = kept.first().map_or(PER_THREAD, |id| id & 0xff_ffff_ffff);
        let suffix: Vec<u64> = (first..PER_THREAD).map(|i| own_id(t, i)).collect();
        assert_eq!(kept, suffix, "thread {t}: not a suffix in order");
        // The index agrees with the FIFO for every id ever inserted.
        for i in 0..PER_THREAD {
            let id = own_id(t, i);
            assert_eq!(history.contains(id), unique.contains(&id), "thread {t} id {i}");
        }
    }
    for i in 0..SHARED_POOL {
        let id = shared_id(i);
        assert_eq!(history.contains(id), unique.contains(&id), "shared id {i}");
    }
}
