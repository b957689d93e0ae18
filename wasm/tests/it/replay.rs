//! The JS `Replay` against kvreuse-core's replay engine run directly in the same test: every
//! field of every row, at the end and after each slice of steps, for Mooncake and token
//! traces, with and without a warm-up.

use crate::common::{get, get_u64, json};
use js_sys::{Array, Uint8Array};
use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::replay::{Capacity, Policy, Replay as Engine, ReplayConfig, Row};
use kvreuse_core::trace::{Request, parse_line};
use kvreuse_wasm::{Replay, footprint};
use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

const SAMPLE: &str = include_str!("../../../traces/mooncake_synthetic_trace.jsonl");
const TOY: &str = include_str!("../../../traces/toy_semantics.jsonl");

/// The trace's requests, read line by line with the core's parser.
fn requests(trace: &str, block_size: usize) -> Vec<Request> {
    let hasher = DynamoHasher::new(block_size).unwrap();
    trace.lines().filter_map(|line| parse_line(line.as_bytes(), &hasher).unwrap()).collect()
}

/// The core engine for `capacities` x `policies`, as `kvreuse replay` configures it. Byte
/// budgets become the capacity a 64-bit router's history fits in them, as on the command line.
fn engine(block_size: usize, capacities: &str, policies: &str, measure_from: usize) -> Engine {
    let capacities: Vec<Option<usize>> = capacities
        .split(',')
        .map(|c| footprint::blocks(Capacity::parse(c).unwrap()).unwrap())
        .collect();
    let policies: Vec<Policy> =
        policies.split(',').map(|p| Policy::from_name(p).unwrap()).collect();
    let mut config = ReplayConfig::grid(block_size, &policies, &capacities);
    config.measure_from = measure_from;
    Engine::new(&config).unwrap()
}

/// `results()` must hold exactly the core's rows, field by field.
#[track_caller]
fn assert_rows(results: &Array, want: &[Row], context: &str) {
    assert_eq!(results.length() as usize, want.len(), "{context}: rows");
    for (got, want) in results.iter().zip(want) {
        let what = format!("{context}: {} {:?}", want.policy.name(), want.capacity);
        assert_eq!(get(&got, "policy").as_string().as_deref(), Some(want.policy.name()), "{what}");
        match want.capacity {
            Some(blocks) => {
                assert_eq!(get_u64(&got, "capacity"), blocks as u64, "{what}");
                // A 64-bit router's heap, whatever this runs on (the browser end-to-end test
                // checks it against the native command line).
                assert_eq!(
                    get_u64(&got, "heap_bytes"),
                    footprint::heap_bytes(blocks) as u64,
                    "{what}"
                );
            }
            None => {
                assert_eq!(get(&got, "capacity").as_string().as_deref(), Some("inf"), "{what}");
                assert!(get(&got, "heap_bytes").is_null(), "{what}");
            }
        }
        assert_eq!(get_u64(&got, "f0_tokens"), want.f0_tokens, "{what}: f0_tokens");
        assert_eq!(get_u64(&got, "f1_tokens"), want.f1_tokens, "{what}: f1_tokens");
        assert_eq!(get_u64(&got, "any_tokens"), want.any_tokens, "{what}: any_tokens");
        assert_eq!(get_u64(&got, "f1_blocks"), want.f1_blocks, "{what}: f1_blocks");
        assert_eq!(get_u64(&got, "evictions"), want.evictions, "{what}: evictions");
        match want.reach_ms {
            Some(ms) => assert_eq!(get_u64(&got, "reach_ms"), ms, "{what}: reach_ms"),
            None => assert!(get(&got, "reach_ms").is_null(), "{what}: reach_ms"),
        }
    }
}

fn options(capacities: &str, policies: &str, block_size: usize, warmup: f64) -> JsValue {
    json(&format!(
        r#"{{"capacities": "{capacities}", "policies": "{policies}", "blockSize": {block_size},
            "warmup": {warmup}}}"#
    ))
}

/// Steps through `trace` `slice` units at a time, checking the rows after every step of the
/// replay phase against the core engine fed as many requests.
fn check_stepwise(
    trace: &str,
    block_size: usize,
    capacities: &str,
    policies: &str,
    warmup: f64,
    slice: usize,
) {
    let context = format!("{capacities} x {policies}, warm-up {warmup}, slices of {slice}");
    let requests = requests(trace, block_size);
    assert!(!requests.is_empty());
    let measure_from = (warmup * requests.len() as f64).floor() as usize;
    let mut want = engine(block_size, capacities, policies, measure_from);

    let mut replay =
        Replay::new(&JsValue::from_str(trace), &options(capacities, policies, block_size, warmup))
            .unwrap();
    assert_eq!(replay.phase(), "replay");
    // The records are counted from the start.
    assert_eq!(replay.requests(), Some(requests.len() as f64), "{context}");
    let (mut progress, mut phases, mut steps) = (0.0, vec![replay.phase()], 0);
    loop {
        let done = replay.step(&JsValue::from(slice as f64)).unwrap();
        steps += 1;
        assert!(replay.progress() >= progress && replay.progress() <= 1.0, "{context}");
        progress = replay.progress();
        if phases.last() != Some(&replay.phase()) {
            phases.push(replay.phase());
        }
        for request in &requests[want.requests()..replay.replayed() as usize] {
            want.push(request).unwrap();
        }
        assert_rows(&replay.results().unwrap(), &want.results(), &context);
        if done {
            break;
        }
    }
    assert_eq!(phases, ["replay", "done"], "{context}");
    assert_eq!(progress, 1.0, "{context}");
    assert_eq!(replay.replayed(), requests.len() as f64, "{context}");
    let lines = trace.lines().count();
    assert!(steps >= lines / slice, "{context}: {steps} steps");

    let report = replay.report().unwrap();
    assert_eq!(get_u64(&report, "requests"), requests.len() as u64, "{context}");
    let measured = (requests.len() - measure_from) as u64;
    assert_eq!(get_u64(&report, "measured_requests"), measured, "{context}");
    assert_eq!(get_u64(&report, "block_size"), block_size as u64, "{context}");
    assert_eq!(get(&report, "warmup").as_f64(), Some(warmup), "{context}");
    assert_eq!(get_u64(&report, "skipped_lines"), 0, "{context}");
    assert_rows(&Array::from(&get(&report, "rows")), &want.results(), &context);
}

#[wasm_bindgen_test]
fn the_sample_trace_as_the_page_runs_it() {
    check_stepwise(SAMPLE, 512, "1k,10k,inf", "fifo,lru", 0.0, 1000);
}

#[wasm_bindgen_test]
fn the_sample_trace_with_a_warmup_and_byte_budgets() {
    check_stepwise(SAMPLE, 512, "100,256KiB,2k", "lru,inf,fifo", 0.25, 777);
}

#[wasm_bindgen_test]
fn the_toy_trace_one_unit_at_a_time() {
    check_stepwise(TOY, 512, "1,2,3,inf", "fifo,lru", 0.0, 1);
}

/// A trace of token records: shared system prompts, growing conversations, partial blocks.
fn token_trace() -> String {
    let mut lines = Vec::new();
    let mut state = 7u32;
    let mut next = || {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        state >> 8
    };
    let systems: Vec<Vec<u32>> = (0..3).map(|s| (0..40).map(|t| s * 1000 + t).collect()).collect();
    for request in 0..300 {
        let mut tokens = systems[(next() % 3) as usize].clone();
        let extra = next() % 37;
        tokens.extend((0..extra).map(|_| next() % 50_000));
        let output: Vec<u32> = (0..next() % 9).map(|_| next() % 50_000).collect();
        lines.push(format!(
            r#"{{"timestamp": {}, "tokens": {tokens:?}, "output_tokens": {output:?}}}"#,
            request * 10
        ));
    }
    lines.join("\n")
}

#[wasm_bindgen_test]
fn a_token_trace_hashed_on_wasm32() {
    let trace = token_trace();
    check_stepwise(&trace, 8, "4,16,64,inf", "fifo,lru", 0.1, 50);
    check_stepwise(&trace, 16, "10", "fifo", 0.0, usize::MAX >> 12);
}

#[wasm_bindgen_test]
fn bytes_and_text_replay_alike() {
    let opts = options("1k,inf", "fifo", 512, 0.0);
    let mut text = Replay::new(&JsValue::from_str(SAMPLE), &opts).unwrap();
    let mut bytes = Replay::new(&Uint8Array::from(SAMPLE.as_bytes()).into(), &opts).unwrap();
    assert!(text.step(&JsValue::UNDEFINED).unwrap());
    assert!(bytes.step(&JsValue::UNDEFINED).unwrap());
    let mut want = engine(512, "1k,inf", "fifo", 0);
    requests(SAMPLE, 512).iter().for_each(|r| want.push(r).unwrap());
    assert_rows(&text.results().unwrap(), &want.results(), "text");
    assert_rows(&bytes.results().unwrap(), &want.results(), "bytes");
    let (start, end) = (text.trace_start_ms(), text.trace_end_ms());
    let stamps: Vec<u64> = requests(SAMPLE, 512).iter().filter_map(|r| r.timestamp).collect();
    assert_eq!(start, stamps.first().map(|&t| t as f64));
    assert_eq!(end, stamps.last().map(|&t| t as f64));
    assert_eq!(text.trace_time_ms(), end);
}
