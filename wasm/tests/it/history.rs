//! The JS `History` against the core history built on wasm32 and against a naive model (a
//! queue and a linear scan); ids cross as `BigInt`s without losing a bit.

use std::collections::VecDeque;

use crate::common::{get_u64, ids, json};
use js_sys::{Array, BigInt, BigUint64Array};
use kvreuse_core::history::History as CoreHistory;
use kvreuse_wasm::History;
use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

const SEED: u64 = 0x5eed_f00d;

fn history(capacity: JsValue) -> History {
    History::new(&capacity, Some(BigInt::from(SEED))).unwrap()
}

fn id_array(ids: &[u64]) -> JsValue {
    BigUint64Array::from(ids).into()
}

/// A splitmix64 stream: deterministic ids spread over all 64 bits.
fn ids_from(mut state: u64, n: usize, modulo: u64) -> Vec<u64> {
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            // Few distinct ids, so that duplicates and re-insertions after eviction happen;
            // spread over the whole range so that the high bits matter.
            (z ^ (z >> 31)) % modulo * (u64::MAX / modulo)
        })
        .collect()
}

#[wasm_bindgen_test]
fn fifo_eviction_in_numbers() {
    let mut h = history(JsValue::from(100));
    assert_eq!((h.len(), h.capacity(), h.is_empty(), h.is_full()), (0, 100, true, false));
    let first: Vec<u64> = (1..=150).collect();
    let done = h.insert_all(&id_array(&first)).unwrap();
    assert_eq!((get_u64(&done, "new"), get_u64(&done, "evicted")), (150, 50));
    assert_eq!((h.len(), h.is_full(), h.is_empty()), (100, true, false));
    assert_eq!(ids(h.oldest_first().into()), (51..=150).collect::<Vec<_>>());
    assert!(!h.contains(&BigInt::from(50u64).into()).unwrap());
    assert!(h.contains(&BigInt::from(51u64).into()).unwrap());
    // Present ids are skipped: no room taken, no age changed.
    let again = h.insert_all(&id_array(&[51, 150])).unwrap();
    assert_eq!((get_u64(&again, "new"), get_u64(&again, "evicted")), (0, 0));
    assert_eq!(h.seen_prefix_len(&id_array(&[60, 61, 7, 62])).unwrap(), 2);
    h.clear();
    assert_eq!((h.len(), h.capacity(), h.is_empty()), (0, 100, true));
    assert_eq!(h.seen_prefix_len(&id_array(&[60])).unwrap(), 0);
}

#[wasm_bindgen_test]
fn ids_keep_all_64_bits() {
    let mut h = history(JsValue::from(8));
    let extremes = [u64::MAX, u64::MAX - 1, 1 << 63, (1 << 53) + 1, 0];
    // An array of BigInts as well as a BigUint64Array.
    let array: Array = extremes.iter().map(|&id| JsValue::from(BigInt::from(id))).collect();
    h.insert_all(&array.into()).unwrap();
    assert_eq!(ids(h.oldest_first().into()), extremes);
    for id in extremes {
        assert!(h.contains(&BigInt::from(id).into()).unwrap(), "{id}");
    }
    // Neighbours that a round trip through a float would confuse with the ids above.
    for id in [u64::MAX - 2, (1 << 53) + 2, 1 << 53] {
        assert!(!h.contains(&BigInt::from(id).into()).unwrap(), "{id}");
    }
    assert_eq!(h.seen_prefix_len(&id_array(&extremes)).unwrap(), extremes.len());
}

#[wasm_bindgen_test]
fn matches_a_naive_model() {
    for capacity in [1usize, 13, 64, 500] {
        let mut h = history(JsValue::from(capacity as f64));
        let mut model: VecDeque<u64> = VecDeque::new();
        let stream = ids_from(capacity as u64, 4_000, 3 * capacity as u64 + 2);
        for (n, batch) in stream.chunks(7).enumerate() {
            let probe = &stream[n * 7 / 2..][..5.min(stream.len() - n * 7 / 2)];
            let want = probe.iter().take_while(|id| model.contains(id)).count();
            assert_eq!(h.seen_prefix_len(&id_array(probe)).unwrap(), want, "cap {capacity}");

            let (mut new, mut evicted) = (0, 0);
            for &id in batch {
                if !model.contains(&id) {
                    if model.len() == capacity {
                        model.pop_front();
                        evicted += 1;
                    }
                    model.push_back(id);
                    new += 1;
                }
            }
            let done = h.insert_all(&id_array(batch)).unwrap();
            assert_eq!((get_u64(&done, "new"), get_u64(&done, "evicted")), (new, evicted));
            assert_eq!(h.len(), model.len());
        }
        assert_eq!(ids(h.oldest_first().into()), model.iter().copied().collect::<Vec<_>>());
    }
}

#[wasm_bindgen_test]
fn capacities_and_heap_as_the_core_has_them() {
    for (capacity, blocks) in [(json("1000"), 1000), (JsValue::from_str("10k"), 10_000)] {
        let h = history(capacity);
        let core = CoreHistory::with_capacity(blocks, SEED).unwrap();
        assert_eq!(h.capacity(), blocks);
        assert_eq!(h.heap_bytes(), core.heap_bytes());
    }
    // A byte budget: the most ids whose heap fits it, here on wasm32.
    let h = history(JsValue::from_str("256KiB"));
    let core = CoreHistory::with_byte_budget(256 << 10, SEED).unwrap();
    assert_eq!((h.capacity(), h.heap_bytes()), (core.capacity(), core.heap_bytes()));
    assert!(h.heap_bytes() <= 256 << 10);
}

#[wasm_bindgen_test]
fn without_a_seed_a_random_one() {
    let mut a = History::new(&JsValue::from(4), None).unwrap();
    a.insert_all(&id_array(&[1, 2, 3])).unwrap();
    assert_eq!(a.seen_prefix_len(&id_array(&[1, 2, 3, 4])).unwrap(), 3);
}
