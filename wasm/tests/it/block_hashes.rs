//! `blockHashes` on wasm32 reproduces every Dynamo and vLLM golden vector in the repository
//! (the reference implementations' own outputs), through JS values as a page passes them.

use crate::common::{get, ids, json};
use js_sys::{Array, Uint32Array};
use kvreuse_wasm::block_hashes;
use serde_json::{Value, json as object};
use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

const DYNAMO: &str = include_str!("../../../core/tests/data/dynamo_block_hashes.json");
const VLLM: &str = include_str!("../../../core/tests/data/vllm_block_hashes.json");
const VLLM_EVENT: &str = include_str!("../../../core/tests/data/vllm_event_qwen3_bs16_seed42.json");

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| u32::try_from(x.as_u64().unwrap()).unwrap()).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_owned()).collect()
}

/// `blockHashes(tokens, options)` with the tokens as a `Uint32Array`.
fn hash(tokens: &[u32], options: &Value) -> JsValue {
    let tokens = Uint32Array::from(tokens);
    block_hashes(&tokens.into(), &json(&options.to_string()))
        .unwrap_or_else(|e| panic!("blockHashes({options}) threw {e:?}"))
}

fn digests(result: &JsValue) -> Vec<String> {
    Array::from(&get(result, "digests")).iter().map(|d| d.as_string().unwrap()).collect()
}

#[wasm_bindgen_test]
fn dynamo_vectors() {
    let doc: Value = serde_json::from_str(DYNAMO).unwrap();
    let cases = doc["vectors"].as_array().unwrap();
    assert_eq!(cases.len(), 18);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let mut options = object!({ "blockSize": case["block_size"], "eagle": case["is_eagle"] });
        for (key, field) in [("loraName", "lora_name"), ("cacheNamespace", "cache_namespace")] {
            if !case[field].is_null() {
                options[key] = case[field].clone();
            }
        }
        let tokens = u32s(&case["tokens"]);
        let got = hash(&tokens, &options);
        assert_eq!(get(&got, "scheme").as_string().as_deref(), Some("dynamo"), "{name}");
        let local = ids(get(&got, "localHashes"));
        let sequence = ids(get(&got, "sequenceHashes"));
        assert_eq!(local, u64s(&case["local_hashes"]), "{name}: local");
        assert_eq!(sequence, u64s(&case["sequence_hashes"]), "{name}: sequence");
        let hex: Vec<String> = sequence.iter().map(|h| format!("{h:016x}")).collect();
        assert_eq!(hex, strings(&case["sequence_hashes_hex"]), "{name}: hex");
        assert!(get(&got, "digests").is_undefined(), "{name}: dynamo has no digests");

        // The same tokens as a plain array of numbers.
        let plain =
            block_hashes(&json(&case["tokens"].to_string()), &json(&options.to_string())).unwrap();
        assert_eq!(ids(get(&plain, "sequenceHashes")), sequence, "{name}: array input");
    }
}

#[wasm_bindgen_test]
fn dynamo_output_tracking_prompts() {
    let doc: Value = serde_json::from_str(DYNAMO).unwrap();
    let examples = doc["output_tracking_examples"].as_array().unwrap();
    assert_eq!(examples.len(), 3);
    for (n, example) in examples.iter().enumerate() {
        let got = hash(&u32s(&example["prompt"]), &object!({ "blockSize": example["block_size"] }));
        let sequence = ids(get(&got, "sequenceHashes"));
        assert_eq!(sequence, u64s(&example["prompt_sequence_hashes"]), "example {n}");
        let hex: Vec<String> = sequence.iter().map(|h| format!("{h:016x}")).collect();
        assert_eq!(hex, strings(&example["prompt_sequence_hashes_hex"]), "example {n}: hex");
    }
}

#[wasm_bindgen_test]
fn vllm_chains() {
    let doc: Value = serde_json::from_str(VLLM).unwrap();
    let tokens = u32s(&doc["tokens_first_48"]);
    let chains = doc["chains"].as_object().unwrap();
    assert_eq!(chains.len(), 6);
    for (name, chain) in chains {
        let (scheme, seed, extra) = match name.as_str() {
            "vllm_sha256_cbor_seed42" => ("vllm-sha256-cbor", "42", None),
            "vllm_sha256_cbor_seed42_lora_Alice" => {
                ("vllm-sha256-cbor", "42", Some(("loraName", "Alice")))
            }
            "vllm_sha256_cbor_seed42_cache_salt_s1" => {
                ("vllm-sha256-cbor", "42", Some(("cacheSalt", "s1")))
            }
            "vllm_xxhash_cbor_seed42" => ("vllm-xxhash-cbor", "42", None),
            "vllm_legacy_sha256_cbor_64bit_seed42" => ("vllm-legacy-sha256-cbor-64bit", "42", None),
            "vllm_sha256_cbor_default_seed_vllm-none-hash" => ("vllm-sha256-cbor", "", None),
            other => panic!("a chain this test does not know: {other}"),
        };
        let mut options = object!({ "blockSize": 16, "scheme": scheme });
        // The default seed is tested by leaving the option out.
        if !seed.is_empty() {
            options["hashSeed"] = seed.into();
        }
        if let Some((key, value)) = extra {
            options[key] = value.into();
        }
        let got = hash(&tokens, &options);
        assert_eq!(get(&got, "scheme").as_string().as_deref(), Some(scheme), "{name}");
        assert!(get(&got, "localHashes").is_undefined(), "{name}: vLLM has no local hashes");
        let sequence = ids(get(&got, "sequenceHashes"));
        // Entry 0 is the root (NONE_HASH); then one entry per block.
        let blocks = &chain.as_array().unwrap()[1..];
        assert_eq!(blocks.len(), 3, "{name}");
        if scheme == "vllm-legacy-sha256-cbor-64bit" {
            let want: Vec<u64> = blocks.iter().map(|b| b.as_u64().unwrap()).collect();
            assert_eq!(sequence, want, "{name}");
        } else {
            let want: Vec<u64> = blocks.iter().map(|b| b[1].as_u64().unwrap()).collect();
            let want_digests: Vec<String> =
                blocks.iter().map(|b| b[0].as_str().unwrap().to_owned()).collect();
            assert_eq!(sequence, want, "{name}: ids");
            assert_eq!(digests(&got), want_digests, "{name}: digests");
        }
    }
}

#[wasm_bindgen_test]
fn a_real_vllm_engines_published_ids() {
    let doc: Value = serde_json::from_str(VLLM_EVENT).unwrap();
    let want = u64s(&doc["block_hashes"]);
    assert_eq!(want.len(), 25);
    let options = object!({
        "blockSize": doc["block_size"],
        "scheme": "vllm-sha256-cbor",
        "hashSeed": doc["hash_seed"],
    });
    let got = hash(&u32s(&doc["token_ids"]), &options);
    assert_eq!(ids(get(&got, "sequenceHashes")), want);
    assert_eq!(digests(&got).len(), want.len());
}
