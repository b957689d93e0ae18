//! Bad input throws a JS `TypeError` (wrong type or shape) or `RangeError` (out of range)
//! with a message that names the problem; nothing panics, and a failed call changes nothing.

use crate::common::{Kind, get, json, thrown, throws};
use js_sys::{BigInt, Uint8Array, Uint32Array};
use kvreuse_core::setup::{ReplaySettings, Setting};
use kvreuse_wasm::{History, Replay, block_hashes};
use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

fn tokens(n: u32) -> JsValue {
    Uint32Array::from(&(0..n).collect::<Vec<_>>()[..]).into()
}

#[wasm_bindgen_test]
fn block_hashes_rejects_bad_options_and_tokens() {
    let hash = |tokens: JsValue, options: &str| block_hashes(&tokens, &json(options));
    throws(hash(tokens(8), r#"{"blockSize": 0}"#), Kind::Range, "block size");
    throws(hash(tokens(8), r#"{"blockSize": 16777217}"#), Kind::Range, "blockSize");
    throws(hash(tokens(8), r#"{"blockSize": 1.5}"#), Kind::Range, "options.blockSize");
    throws(hash(tokens(8), r#"{"blockSize": "16"}"#), Kind::Type, "options.blockSize");
    throws(hash(tokens(8), "{}"), Kind::Type, "options.blockSize is required");
    throws(block_hashes(&tokens(8), &JsValue::UNDEFINED), Kind::Type, "blockSize");
    throws(hash(tokens(8), r#"{"blockSize": 4, "blocksize": 4}"#), Kind::Type, "\"blocksize\"");
    throws(hash(tokens(8), r#"{"blockSize": 4, "scheme": "md5"}"#), Kind::Type, "\"md5\"");
    throws(hash(tokens(8), r#"{"blockSize": 4, "hashSeed": "42"}"#), Kind::Type, "hashSeed");
    let vllm_eagle = r#"{"blockSize": 4, "scheme": "vllm-sha256-cbor", "eagle": true}"#;
    throws(hash(tokens(8), vllm_eagle), Kind::Type, "eagle");
    let unseeded = r#"{"blockSize": 4, "scheme": "vllm-xxhash-cbor"}"#;
    throws(hash(tokens(8), unseeded), Kind::Type, "PYTHONHASHSEED");
    let legacy_lora =
        r#"{"blockSize": 4, "scheme": "vllm-legacy-sha256-cbor-64bit", "loraName": "a"}"#;
    throws(hash(tokens(8), legacy_lora), Kind::Type, "integer id");
    throws(hash(json("[1, -1]"), r#"{"blockSize": 4}"#), Kind::Range, "tokens[1]");
    throws(hash(json("[1, 2.5]"), r#"{"blockSize": 4}"#), Kind::Range, "tokens[1]");
    throws(hash(json("[4294967296]"), r#"{"blockSize": 4}"#), Kind::Range, "tokens[0]");
    throws(hash(json(r#"[1, "2"]"#), r#"{"blockSize": 4}"#), Kind::Type, "tokens[1]");
    throws(hash(JsValue::from_str("1 2 3"), r#"{"blockSize": 4}"#), Kind::Type, "tokens");
    throws(hash(tokens(8), "[16]"), Kind::Type, "options must be an object");
}

#[wasm_bindgen_test]
fn history_rejects_bad_capacities_and_ids() {
    let seed = || Some(BigInt::from(1u64));
    throws(History::new(&JsValue::from(0), seed()), Kind::Range, "capacity");
    throws(History::new(&JsValue::from_str("0"), seed()), Kind::Range, "capacity");
    throws(History::new(&JsValue::from_str("inf"), seed()), Kind::Range, "finite");
    throws(History::new(&JsValue::from_str("ten"), seed()), Kind::Type, "\"ten\"");
    throws(History::new(&JsValue::from(-3), seed()), Kind::Range, "capacity");
    throws(History::new(&JsValue::from(1e12), seed()), Kind::Range, "capacity");
    throws(History::new(&JsValue::TRUE, seed()), Kind::Type, "capacity");
    throws(History::new(&JsValue::from(4), Some(BigInt::from(-1i64))), Kind::Range, "seed");

    let mut h = History::new(&JsValue::from(4), seed()).unwrap();
    // Numbers are not ids: a float cannot hold every 64-bit id.
    throws(h.insert_all(&json("[1, 2]")), Kind::Type, "ids[0] must be a BigInt");
    throws(h.insert_all(&JsValue::from_str("1,2")), Kind::Type, "BigUint64Array");
    throws(h.contains(&JsValue::from(1)), Kind::Type, "id must be a BigInt");
    throws(h.seen_prefix_len(&tokens(3)), Kind::Type, "ids");
    let too_big = BigInt::new(&JsValue::from_str("18446744073709551616")).unwrap();
    throws(h.contains(&too_big.into()), Kind::Range, "outside 0..2^64");
    assert_eq!(h.len(), 0, "failed calls inserted nothing");
}

fn replay(trace: &str, options: &str) -> Result<Replay, JsValue> {
    Replay::new(&JsValue::from_str(trace), &json(options))
}

#[wasm_bindgen_test]
fn replay_rejects_bad_options_before_reading_the_trace() {
    let line = r#"{"tokens": [1, 2, 3, 4]}"#;
    throws(replay(line, r#"{"blockSize": 0}"#), Kind::Range, "block size");
    throws(replay(line, r#"{"warmup": 1.5}"#), Kind::Range, "options.warmup");
    throws(replay(line, r#"{"warmup": "half"}"#), Kind::Type, "options.warmup");
    throws(replay(line, r#"{"policies": "fifo,mru"}"#), Kind::Type, "\"mru\"");
    throws(replay(line, r#"{"policies": [1]}"#), Kind::Type, "options.policies[0]");
    throws(replay(line, r#"{"capacities": "1k,0"}"#), Kind::Range, "\"0\"");
    throws(replay(line, r#"{"capacities": [0]}"#), Kind::Range, "capacity");
    throws(replay(line, r#"{"capacities": "1k,ten"}"#), Kind::Type, "\"ten\"");
    throws(replay(line, r#"{"capacities": "1B"}"#), Kind::Range, "\"1B\"");
    throws(replay(line, r#"{"capacities": [], "policies": "fifo"}"#), Kind::Type, "at least one");
    throws(replay(line, r#"{"capacity": "1k"}"#), Kind::Type, "\"capacity\"");
    throws(replay(line, r#"{"skipInvalid": 1}"#), Kind::Type, "options.skipInvalid");
    throws(Replay::new(&JsValue::from(42), &JsValue::UNDEFINED), Kind::Type, "trace");

    let mut r = replay(line, r#"{"blockSize": 4}"#).unwrap();
    throws(r.step(&JsValue::from(0)), Kind::Range, "maxWork");
    throws(r.step(&JsValue::from(1.5)), Kind::Range, "maxWork");
    throws(r.step(&JsValue::from_str("all")), Kind::Type, "maxWork");
    assert!(r.step(&JsValue::UNDEFINED).unwrap());
}

/// The five bad settings `cli/tests/it/bad_inputs.rs` gives the command line, as options: each
/// throws the shared setup's words after the option's name, as the command line prints them
/// after the flag's.
#[wasm_bindgen_test]
fn setting_mistakes_are_worded_by_the_shared_setup() {
    let line = r#"{"tokens": [1, 2, 3, 4]}"#;
    for (setting, text, option) in [
        (Setting::Capacity, "0", r#"{"capacities": "0"}"#),
        (Setting::Capacity, "10x", r#"{"capacities": "10x"}"#),
        (Setting::Policy, "fifo,mru", r#"{"policies": ["fifo", "mru"]}"#),
        (Setting::Warmup, "1.5", r#"{"warmup": 1.5}"#),
        (Setting::BlockSize, "0", r#"{"blockSize": 0}"#),
    ] {
        let want = ReplaySettings::default().set(setting, text).unwrap_err();
        let kind = if want.is_range() { Kind::Range } else { Kind::Type };
        let error = thrown(replay(line, option), kind);
        assert_eq!(String::from(error.message()), format!("options.{}: {want}", setting.js_name()));
    }
}

#[wasm_bindgen_test]
fn a_bad_trace_line_is_reported_by_number() {
    let trace = [
        r#"{"tokens": [1, 2, 3, 4, 5]}"#,
        "",
        r#"{"tokens": [1, 2, 3, 4, 5]}"#,
        r#"{"tokens": [1, 2, -3]}"#,
        r#"{"tokens": [9, 9, 9, 9]}"#,
    ]
    .join("\n");
    let options = r#"{"blockSize": 4, "capacities": "10", "policies": "fifo"}"#;
    let mut r = replay(&trace, options).unwrap();
    for _ in 0..2 {
        // The replay stays at the bad line: asking again gives the same error.
        let error = thrown(r.step(&JsValue::UNDEFINED), Kind::Type);
        let message = String::from(error.message());
        assert!(message.starts_with("line 4:"), "{message}");
        assert_eq!(get(&error, "line").as_f64(), Some(4.0));
    }
    assert_eq!(r.replayed(), 2.0);

    // Mooncake records whose block count does not fit their length, and lines that are not
    // JSON at all, are errors too.
    let mooncake = r#"{"timestamp": 0, "input_length": 1100, "hash_ids": [1, 2]}"#;
    let error = thrown(replay(mooncake, "{}").unwrap().step(&JsValue::UNDEFINED), Kind::Type);
    assert_eq!(get(&error, "line").as_f64(), Some(1.0));
    let error = thrown(replay("\n{not json", "{}").unwrap().step(&JsValue::UNDEFINED), Kind::Type);
    assert_eq!(get(&error, "line").as_f64(), Some(2.0));

    // Or they are counted and skipped when asked, bytes as well as text.
    let skip = r#"{"blockSize": 4, "capacities": "10", "policies": "fifo", "skipInvalid": true}"#;
    let bytes = Uint8Array::from(trace.as_bytes());
    let mut r = Replay::new(&bytes.into(), &json(skip)).unwrap();
    assert!(r.step(&JsValue::UNDEFINED).unwrap());
    assert_eq!((r.replayed(), r.skipped_lines()), (3.0, 1.0));
}

#[wasm_bindgen_test]
fn invalid_utf8_is_a_line_error_not_a_panic() {
    let mut bytes = br#"{"tokens": [1, 2, 3, 4]}"#.to_vec();
    bytes.extend_from_slice(b"\n{\"tokens\": [1, \xff]}\n");
    let options = json(r#"{"blockSize": 4}"#);
    let mut r = Replay::new(&Uint8Array::from(&bytes[..]).into(), &options).unwrap();
    let error = thrown(r.step(&JsValue::UNDEFINED), Kind::Type);
    assert_eq!(get(&error, "line").as_f64(), Some(2.0));
}
