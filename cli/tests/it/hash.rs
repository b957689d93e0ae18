//! `kvreuse hash` end to end: the golden vectors through the binary, and bad input.

use std::io::Write;
use std::process::{Output, Stdio};

use serde_json::Value;

const DYNAMO: &str = include_str!("../../../core/tests/data/dynamo_block_hashes.json");
const VLLM_EVENT: &str = include_str!("../../../core/tests/data/vllm_event_qwen3_bs16_seed42.json");

fn kvreuse_hash(args: &[&str], stdin: &str) -> Output {
    let mut child = kvreuse_tests::support::target_command(env!("CARGO_BIN_EXE_kvreuse"))
        .arg("hash")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The tool may reject its arguments before reading stdin; a closed pipe is fine then.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn sixteen_tokens_print_the_first_vector_block() {
    let doc: Value = serde_json::from_str(DYNAMO).unwrap();
    let case = doc["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "six_blocks_plus_partial4_bs16")
        .unwrap();
    let out =
        json(&kvreuse_hash(&["--block-size", "16"], "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]"));
    assert_eq!(out["local_hashes"][0], case["local_hashes"][0]);
    assert_eq!(out["sequence_hashes"], Value::Array(vec![case["sequence_hashes"][0].clone()]));
}

#[test]
fn every_dynamo_vector_through_the_binary() {
    let doc: Value = serde_json::from_str(DYNAMO).unwrap();
    for case in doc["vectors"].as_array().unwrap() {
        let bs = case["block_size"].to_string();
        let mut args = vec!["--block-size", bs.as_str()];
        if let Some(lora) = case["lora_name"].as_str() {
            args.extend(["--lora-name", lora]);
        }
        if let Some(ns) = case["cache_namespace"].as_str() {
            args.extend(["--cache-namespace", ns]);
        }
        if case["is_eagle"] == Value::Bool(true) {
            args.push("--eagle");
        }
        // Alternate between the two input shapes.
        let input = if bs == "16" {
            format!("{{\"tokens\": {}}}", case["tokens"])
        } else {
            case["tokens"].to_string()
        };
        let out = json(&kvreuse_hash(&args, &input));
        assert_eq!(out["local_hashes"], case["local_hashes"], "{}", case["name"]);
        assert_eq!(out["sequence_hashes"], case["sequence_hashes"], "{}", case["name"]);
    }
}

#[test]
fn real_vllm_event_through_the_binary() {
    let doc: Value = serde_json::from_str(VLLM_EVENT).unwrap();
    let out = json(&kvreuse_hash(
        &["--block-size", "16", "--scheme", "vllm-sha256-cbor", "--hash-seed", "42"],
        &doc["token_ids"].to_string(),
    ));
    assert_eq!(out["sequence_hashes"], doc["block_hashes"]);
    assert_eq!(out["digests"].as_array().unwrap().len(), 25);
}

#[test]
fn multimodal_object_hashes_change_only_their_block() {
    let tokens = "[1,2,3,4,5,6,7,8]";
    let plain = json(&kvreuse_hash(&["--block-size", "4"], tokens));
    let mm = json(&kvreuse_hash(
        &["--block-size", "4"],
        &format!(
            "{{\"tokens\": {tokens}, \"mm_hashes_per_block\": [null, [18446744073709551615, 7]]}}"
        ),
    ));
    assert_eq!(mm["local_hashes"][0], plain["local_hashes"][0]);
    assert_ne!(mm["local_hashes"][1], plain["local_hashes"][1]);
}

#[test]
fn bad_input_is_one_line_on_stderr_and_status_2() {
    let cases: &[(&[&str], &str, &str)] = &[
        (&["--block-size", "16"], "not json", "not JSON"),
        (&["--block-size", "16"], "[1, -1]", "token 1 is -1"),
        (&["--block-size", "16"], "[4294967296]", "token 0 is 4294967296"),
        (&["--block-size", "16"], "[1.5]", "token 0 is 1.5"),
        (&["--block-size", "16"], "{\"tokens\": 3}", "\"tokens\" must be an array"),
        (&["--block-size", "16"], "{\"tokens\": [], \"extra\": 1}", "unknown key \"extra\""),
        (&["--block-size", "16"], "{\"tokens\": [1], \"tokens\": [2]}", "duplicate key \"tokens\""),
        (&["--block-size", "16"], "{}", "needs a \"tokens\" array"),
        (&["--block-size", "16"], "\"text\"", "expected a JSON array"),
        (&["--block-size", "0"], "[1]", "block size must be at least 1"),
        (&["--block-size", "4", "--cache-salt", "x"], "[1]", "vLLM schemes only"),
        (
            &["--block-size", "4", "--scheme", "vllm-sha256-cbor", "--eagle"],
            "[1]",
            "dynamo scheme only",
        ),
        (
            &["--block-size", "4", "--scheme", "vllm-xxhash-cbor", "--hash-seed", "0"],
            "{\"tokens\": [1,2,3,4], \"mm_hashes_per_block\": [[1]]}",
            "dynamo scheme only",
        ),
        // Settings under which no vLLM publishes the ids.
        (&["--block-size", "4", "--scheme", "vllm-xxhash-cbor"], "[1]", "PYTHONHASHSEED"),
        (
            &["--block-size", "4", "--scheme", "vllm-legacy-sha256-cbor-64bit", "--lora-name", "a"],
            "[1]",
            "integer id",
        ),
        (
            &["--block-size", "4"],
            "{\"tokens\": [1,2,3,4], \"mm_hashes_per_block\": [[1], [2]]}",
            "2 blocks",
        ),
    ];
    for (args, input, needle) in cases {
        let out = kvreuse_hash(args, input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {input}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} {input}");
        assert_eq!(stderr.lines().count(), 1, "{args:?} {input}: {stderr}");
        assert!(stderr.contains(needle), "{args:?} {input}: {stderr}");
    }
}
