//! Unit tests of the history against hand-checked cases; the randomized comparison with a
//! naive model lives in `tests/it/history_model.rs`.

use alloc::vec::Vec;

use super::*;
use crate::test_rng::xorshift;
use layout::CLASSES;
use writer::OverflowFlags;

/// The tests' index key.
pub(super) const SEED: u64 = 0x5eed;

fn history(capacity: usize) -> History {
    History::with_capacity(capacity, SEED).unwrap()
}

/// A history of `capacity` keyed by `seed`, without the summary directory small histories have
/// (its lookups read the bucket's header, as a large history's do) when `without` is set.
fn history_with(capacity: usize, seed: u64, without: bool) -> History {
    if without {
        History::without_directory(capacity, seed)
    } else {
        History::with_capacity(capacity, seed).unwrap()
    }
}

#[test]
fn duplicates_take_no_capacity_and_keep_their_age() {
    let mut h = history(3);
    assert_eq!(h.insert_all(&[1, 2, 3]), Inserted { new: 3, evicted: 0 });
    assert_eq!(h.insert_all(&[1, 1, 2]), Inserted { new: 0, evicted: 0 });
    // 1 is still the oldest despite being inserted again.
    assert_eq!(h.insert_all(&[4]), Inserted { new: 1, evicted: 1 });
    assert!(!h.contains(1));
    assert_eq!(h.oldest_first().collect::<Vec<_>>(), [2, 3, 4]);
    assert!(h.is_full());
}

#[test]
fn seen_prefix_stops_at_the_first_miss() {
    let mut h = history(10);
    h.insert_all(&[10, 11, 12, 14]);
    assert_eq!(h.seen_prefix_len(&[10, 11, 12, 13, 14]), 3);
    assert_eq!(h.seen_prefix_len(&[13, 10]), 0);
    assert_eq!(h.seen_prefix_len(&[]), 0);
    assert_eq!(h.reader().seen_prefix_len(&[10, 11, 12, 13, 14]), 3);
}

#[test]
fn capacity_one_keeps_only_the_newest() {
    let mut h = history(1);
    for id in 0..10u64 {
        h.insert_all(&[id]);
        assert!(h.contains(id));
        assert!(id == 0 || !h.contains(id - 1));
        assert_eq!(h.len(), 1);
    }
}

#[test]
fn many_epochs_stay_exact() {
    // Far more insertions than capacity: stale slot words cycle through both parities.
    let capacity = 100;
    let mut h = history(capacity);
    for round in 0..50u64 {
        let ids: Vec<u64> = (round * 37..round * 37 + 120).collect();
        h.insert_all(&ids);
        let present: Vec<u64> = h.oldest_first().collect();
        assert_eq!(present.len(), capacity);
        for id in round * 37..round * 37 + 200 {
            assert_eq!(h.contains(id), present.contains(&id), "round {round} id {id}");
        }
    }
    assert_eq!(h.forced_evictions(), 0);
}

#[test]
fn clear_forgets_everything_and_keeps_working() {
    let mut h = history(4);
    h.insert_all(&[1, 2, 3, 4, 5]);
    let reader = h.reader();
    h.clear();
    assert_eq!(h.len(), 0);
    assert_eq!(reader.len(), 0);
    assert!(!h.contains(5) && !reader.contains(5));
    assert_eq!(h.insert_all(&[5, 6]), Inserted { new: 2, evicted: 0 });
    assert_eq!(h.oldest_first().collect::<Vec<_>>(), [5, 6]);
    assert!(reader.contains(6));
}

#[test]
fn zero_capacity_and_tiny_budgets_are_errors() {
    assert_eq!(History::with_capacity(0, 1).unwrap_err(), HistoryError::ZeroCapacity);
    assert!(matches!(
        History::with_byte_budget(8, 1),
        Err(HistoryError::BudgetTooSmall { bytes: 8 })
    ));
}

#[test]
fn byte_budget_is_the_largest_that_fits() {
    for budget in [4_000usize, 10_000, 1 << 20] {
        let h = History::with_byte_budget(budget, 1).unwrap();
        assert!(h.heap_bytes() <= budget);
        let bigger = Layout::for_capacity(h.capacity() + 1).unwrap();
        assert!(History::<BoxStorage>::bytes_for(&bigger) > budget);
    }
}

/// Ids whose two buckets are `first` and `second`, for a history of `capacity` with the
/// tests' seed.
pub(super) fn ids_homed_at(capacity: usize, first: usize, second: usize, n: usize) -> Vec<u64> {
    let h = history(capacity);
    let s = h.shared.tables();
    (0u64..)
        .filter(|&id| {
            let home = s.home(id);
            home.first == first && s.codec.second(&home) == second
        })
        .take(n)
        .collect()
}

fn overflow_count(h: &History, bucket: usize) -> u64 {
    h.shared.tables().overflow_count(bucket)
}

#[test]
fn a_full_first_bucket_moves_a_resident_on_and_counts_it() {
    let capacity = 200;
    let ids = ids_homed_at(capacity, 0, 1, BUCKET_SLOTS + 3);
    let mut h = history(capacity);
    h.insert_all(&ids);
    assert_eq!(h.forced_evictions(), 0);
    assert_eq!(h.seen_prefix_len(&ids), ids.len());
    assert_eq!(h.reader().seen_prefix_len(&ids), ids.len());
    assert_eq!(overflow_count(&h, 0), 3);
    // Evicting the overflowed ids brings the count back to zero.
    let others = ids_homed_at(capacity, 5, 6, 60);
    for round in 0..10 {
        let filler: Vec<u64> =
            (0..capacity as u64).map(|i| (round << 32) | (i + 1_000_000)).collect();
        for chunk in filler.chunks(200) {
            h.insert_all(chunk);
            h.shared.tables().check_overflow_counts(&h.view, &h.overflowed);
        }
        for chunk in others.chunks(60) {
            h.insert_all(chunk);
            h.shared.tables().check_overflow_counts(&h.view, &h.overflowed);
        }
        h.shared.tables().check_overflow_counts(&h.view, &h.overflowed);
    }
    assert!(!h.contains(ids[0]));
    assert_eq!(overflow_count(&h, 0), 0);
}

#[test]
fn two_full_buckets_without_a_move_force_out_the_oldest_resident() {
    let capacity = 200;
    let ids = ids_homed_at(capacity, 3, 4, 2 * BUCKET_SLOTS + 1);
    let mut h = history(capacity);
    h.insert_all(&ids);
    assert_eq!(h.forced_evictions(), 1);
    assert!(!h.contains(ids[0]));
    assert_eq!(h.seen_prefix_len(&ids[1..]), 2 * BUCKET_SLOTS);
    // It stays in the ring until its turn (see the module docs), and inserted again, it is new.
    assert_eq!(h.len(), 2 * BUCKET_SLOTS + 1);
    assert_eq!(h.oldest_first().next(), Some(ids[0]));
    h.shared.tables().check_overflow_counts(&h.view, &h.overflowed);
    // (Its buckets are still full: the next oldest gives up its slot in turn.)
    assert_eq!(h.insert_all(&ids[..1]), Inserted { new: 1, evicted: 0 });
    assert_eq!(h.forced_evictions(), 2);
    assert!(h.contains(ids[0]) && !h.contains(ids[1]));
    assert_eq!(h.len(), 2 * BUCKET_SLOTS + 2);
    h.shared.tables().check_overflow_counts(&h.view, &h.overflowed);
}

/// A full history whose residents all share their two buckets, so that a new id with the
/// same two can neither find nor make room: the slot given up is that of the oldest resident,
/// which the insertion evicts anyway, so no id is lost early.
#[test]
fn a_forced_placement_in_a_full_history_takes_the_evicted_ids_slot() {
    let capacity = 2 * BUCKET_SLOTS;
    let ids = ids_homed_at(capacity, 1, 2, capacity + 1);
    let (old, new) = ids.split_at(capacity);
    let mut h = history(capacity);
    h.insert_all(old);
    assert!(h.is_full());
    assert_eq!(h.forced_evictions(), 0);
    assert_eq!(h.seen_prefix_len(old), capacity);
    assert_eq!(h.insert_all(new), Inserted { new: 1, evicted: 1 });
    assert_eq!(h.forced_evictions(), 0);
    assert!(!h.contains(old[0]));
    assert_eq!(h.seen_prefix_len(&old[1..]), capacity - 1);
    assert!(h.contains(new[0]));
    h.shared.tables().check_overflow_counts(&h.view, &h.overflowed);
}

#[test]
fn flooded_ids_still_spread_over_buckets() {
    // Ids that share their top 32 bits, or their low 32 bits, must not share buckets.
    let capacity = 1 << 16;
    let mut h = history(capacity);
    let top: Vec<u64> = (0..20_000u64).map(|i| (0xdead_beef << 32) | i).collect();
    let low: Vec<u64> = (0..20_000u64).map(|i| (i << 32) | 0xdead_beef).collect();
    h.insert_all(&top);
    h.insert_all(&low);
    assert_eq!(h.forced_evictions(), 0);
    assert_eq!(h.seen_prefix_len(&top), top.len());
    assert_eq!(h.seen_prefix_len(&low), low.len());
}

/// Random operations on small, crowded histories; after each, every overflow count must
/// match the flagged entries it stands for, and every present id must be found.
#[test]
fn overflow_counts_stay_exact_under_random_churn() {
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = move || xorshift(&mut rng);
    let cases = option_env!("KVREUSE_CHURN_CASES").and_then(|c| c.parse().ok()).unwrap_or(60);
    for case in 0..cases {
        let capacity = 16 + (next() % 300) as usize;
        // Every other pair of cases goes without the summary directory, as a large history.
        let mut h = history_with(capacity, next(), case % 4 >= 2);
        // Every other case prefetches ahead as a history too large for the caches does.
        h.look_ahead = case % 2 == 1;
        // A small id domain makes duplicates and re-insertions common.
        let domain = 1 + next() % (3 * capacity as u64);
        for _ in 0..150 {
            let n = (next() % 40) as usize;
            let ids: Vec<u64> = (0..n).map(|_| next() % domain).collect();
            if next() % 50 == 0 {
                h.clear();
            }
            h.insert_all(&ids);
            h.shared.tables().check_overflow_counts(&h.view, &h.overflowed);
            for id in h.oldest_first().collect::<Vec<_>>() {
                assert!(h.contains(id), "case {case}: {id} lost");
            }
        }
    }
}

/// Ids crowded into a few buckets: moves and forced evictions happen all the time, overflow
/// counts reach their largest value (and refuse more ids), and they must still match their
/// flagged entries.
#[test]
fn overflow_counts_stay_exact_when_buckets_are_crowded() {
    let capacity = 200;
    let h = history(capacity);
    let crowd: Vec<u64> = (0u64..)
        .filter(|&id| {
            let t = h.shared.tables();
            let home = t.home(id);
            home.first < 2 && t.codec.second(&home) < 4
        })
        .take(400)
        .collect();
    drop(h);
    for without in [false, true] {
        crowd_out(capacity, &crowd, without);
    }
}

fn crowd_out(capacity: usize, crowd: &[u64], without_directory: bool) {
    let mut h = history_with(capacity, SEED, without_directory);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut saturated = false;
    for _ in 0..2000 {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let start = (rng >> 33) as usize % crowd.len();
        let n = 1 + (rng >> 20) as usize % 20;
        let ids: Vec<u64> = crowd.iter().cycle().skip(start).take(n).copied().collect();
        h.insert_all(&ids);
        h.shared.tables().check_overflow_counts(&h.view, &h.overflowed);
        let t = h.shared.tables();
        saturated |= (0..2).any(|b| (0..CLASSES).any(|class| !t.header(b).can_count(class)));
    }
    assert!(h.forced_evictions() > 0);
    assert!(saturated, "no overflow count reached its largest value");
}

/// At full load the bucket summaries must rule out most absent ids on their own; that is
/// what keeps lookups of new prompts to one 8-byte read.
#[test]
fn summaries_rule_out_most_absent_ids_at_full_load() {
    let capacity = 100_000;
    let mut h = history(capacity);
    let ids: Vec<u64> =
        (0..3 * capacity as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
    for chunk in ids.chunks(417) {
        h.insert_all(chunk);
    }
    let absent = (0..100_000u64).map(|i| i ^ 0xdead_beef_0000_0000);
    let admitted = absent.filter(|&id| h.shared.summary_admits(id).is_some()).count();
    // About a quarter pass the filter with the layout's load and rebuild rate.
    assert!(admitted < 35_000, "{admitted} of 100000 absent ids pass the summaries");
}

/// `OverflowFlags::for_each_set` visits exactly the set positions of a wrapping window, in
/// order, against a bit-by-bit model.
#[test]
fn overflow_flags_visit_the_set_positions_of_a_wrapping_window() {
    for len in [1usize, 63, 64, 65, 130, 200] {
        let mut flags = OverflowFlags::new(len).unwrap();
        let set: Vec<usize> = (0..len).filter(|p| (p * 7 + len) % 5 < 2).collect();
        for &p in &set {
            flags.set(p);
        }
        for start in [0, len / 3, len - 1] {
            for n in [0, 1, 31, 32, 64, len] {
                let n = n.min(len);
                let mut seen = Vec::new();
                flags.for_each_set(start, n, len, |p| seen.push(p));
                let want: Vec<usize> =
                    (0..n).map(|i| (start + i) % len).filter(|p| set.contains(p)).collect();
                assert_eq!(seen, want, "len {len} start {start} n {n}");
            }
        }
    }
}

/// A completion that repeats a long stored prefix, then goes on with new ids: the repeated
/// ids are found by walking the ring (past the first batch the writer loaded), the new ones
/// are inserted after them, in order, whether the walk breaks inside or after the first batch.
#[test]
fn a_repeated_prefix_of_any_length_then_new_ids() {
    for repeated in [1u64, 5, 31, 32, 33, 40, 64, 70] {
        let mut h = history(1000);
        let prefix: Vec<u64> = (0..repeated).map(|i| 1000 + i).collect();
        h.insert_all(&prefix);
        let mut completion = prefix.clone();
        completion.extend((0..45).map(|i| 5000 + i));
        assert_eq!(h.insert_all(&completion), Inserted { new: 45, evicted: 0 }, "{repeated}");
        assert_eq!(h.oldest_first().collect::<Vec<_>>(), completion, "{repeated}");
        assert_eq!(h.seen_prefix_len(&completion), completion.len(), "{repeated}");
    }
}

/// `run` confirms exactly the ids that repeated `walk`s would, from every ring position
/// (live, just evicted, never written), for runs that match, stop early, wrap round the ring's
/// end or reach past the newest entry: in a filling history, a full one and one after `clear`.
#[test]
fn a_run_confirms_what_repeated_walks_would() {
    let capacity = 11;
    let mut h = history(capacity);
    let ring_len = h.layout().ring_len();
    let check = |h: &History| {
        let t = h.shared.tables();
        let ring: Vec<u64> =
            t.ring.iter().map(|entry| entry.load(core::sync::atomic::Ordering::Relaxed)).collect();
        for position in 0..ring_len {
            for len in 0..=ring_len + 1 {
                // As the ring has them; with a stranger at `at`; or going on from the ring's
                // position 0 at `at`, as if the run had wrapped there.
                let variants =
                    [None, Some((0, false)), Some((len / 2, false)), Some((len / 2, true))];
                for variant in variants {
                    let mut ids: Vec<u64> =
                        (1..=len).map(|i| ring[(position + i) % ring_len]).collect();
                    match variant {
                        Some((at, false)) if at < len => ids[at] = u64::MAX,
                        Some((at, true)) => {
                            for (i, id) in ids.iter_mut().enumerate().skip(at) {
                                *id = ring[(i - at) % ring_len];
                            }
                        }
                        _ => {}
                    }
                    let mut walked = 0;
                    let mut p = position;
                    while let Some(next) = ids.get(walked).and_then(|&id| t.walk(p, id, &h.view)) {
                        (p, walked) = (next, walked + 1);
                    }
                    assert_eq!(t.run(position, &ids, &h.view), walked, "{position} {ids:?}");
                }
            }
        }
    };
    check(&h);
    let mut next = 100u64;
    for round in 0..30 {
        let ids: Vec<u64> = (next..next + round % 4 + 1).collect();
        next += ids.len() as u64;
        h.insert_all(&ids);
        check(&h);
        if round == 20 {
            h.clear();
            check(&h);
        }
    }
}

/// A prefix reports, for a reader's re-check, the shortest life among the entries it relied
/// on: `capacity - 1 - age` of the oldest id it found, whether it found it by walking the ring
/// or through the index; `u32::MAX` when it found none.
#[test]
fn a_prefix_reports_the_shortest_life_of_what_it_found() {
    let capacity = 40;
    let mut h = history(capacity);
    // Completions of 7, some ids repeated, so that the ring holds runs broken in places.
    for start in (0..90u64).step_by(7) {
        let ids: Vec<u64> = (start..start + 7).chain([start / 2]).collect();
        h.insert_all(&ids);
    }
    let present: Vec<u64> = h.oldest_first().collect();
    let age = |id: u64| present.len() - 1 - present.iter().position(|&p| p == id).unwrap();
    let life = |ids: &[u64]| {
        ids.iter().map(|&id| (capacity - 1 - age(id)) as u32).min().unwrap_or(u32::MAX)
    };
    for start in 0..present.len() {
        for len in 0..=12.min(present.len() - start) {
            let run = &present[start..start + len];
            // In ring order (walked), backwards (each through the index), then an absent id.
            let backwards: Vec<u64> = run.iter().rev().copied().collect();
            for mut ids in [run.to_vec(), backwards] {
                assert_eq!(h.shared.prefix(&ids, &h.view, None), (len, life(&ids)), "{ids:?}");
                ids.push(1_000_000);
                assert_eq!(h.shared.prefix(&ids, &h.view, None), (len, life(&ids[..len])));
            }
        }
    }
}

/// A history just past the directory's bound (its lookups read the buckets' headers, as every
/// large history's do) answers as a model of its last `capacity` ids does.
#[test]
fn a_history_past_the_directory_bound_keeps_exactly_its_last_ids() {
    let capacity = 229_377;
    let mut h = history(capacity);
    assert!(!h.layout().has_directory() && h.shared.directory == 0);
    let ids: Vec<u64> = (1..=2 * capacity as u64 + 1000)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555)
        .collect();
    for chunk in ids.chunks(34) {
        h.insert_all(chunk);
    }
    let reader = h.reader();
    let (evicted, kept) = ids.split_at(ids.len() - capacity);
    for (k, &id) in kept.iter().enumerate().step_by(97) {
        assert!(reader.contains(id), "{k}: {id} lost");
    }
    for &id in evicted.iter().step_by(97) {
        assert!(!reader.contains(id), "{id} kept past its eviction");
    }
    assert_eq!(reader.seen_prefix_len(&kept[..1000]), 1000);
    assert_eq!(reader.seen_prefix_len(&[evicted[0], kept[0]]), 0);
}
