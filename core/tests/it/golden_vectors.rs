//! The reference implementations' own outputs: Dynamo's router crates, vLLM's hash recipes and
//! a KV event published by a real vLLM engine. Every case must match bit for bit.

use kvreuse_core::chain::{
    ChainSpec, DynamoChain, DynamoHasher, Scheme, VllmAlgorithm, VllmChain, VllmHasher,
};
use serde_json::Value;

const DYNAMO: &str = include_str!("../data/dynamo_block_hashes.json");
const VLLM: &str = include_str!("../data/vllm_block_hashes.json");
const VLLM_EVENT: &str = include_str!("../data/vllm_event_qwen3_bs16_seed42.json");

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| u32::try_from(x.as_u64().unwrap()).unwrap()).collect()
}

fn dynamo_hasher(case: &Value) -> DynamoHasher {
    DynamoHasher::new(case["block_size"].as_u64().unwrap() as usize)
        .unwrap()
        .with_lora_name(case["lora_name"].as_str().unwrap_or(""))
        .with_cache_namespace(case["cache_namespace"].as_str().unwrap_or(""))
        .with_eagle(case["is_eagle"].as_bool().unwrap())
}

#[test]
fn dynamo_vectors_one_shot() {
    let doc: Value = serde_json::from_str(DYNAMO).unwrap();
    let cases = doc["vectors"].as_array().unwrap();
    assert_eq!(cases.len(), 18);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let hasher = dynamo_hasher(case);
        assert_eq!(hasher.seed(), case["block_hash_seed"].as_u64().unwrap(), "{name}: seed");
        let tokens = u32s(&case["tokens"]);
        let got = hasher.hash(&tokens);
        assert_eq!(got.local, u64s(&case["local_hashes"]), "{name}: local");
        assert_eq!(got.sequence, u64s(&case["sequence_hashes"]), "{name}: sequence");
        let hex: Vec<String> = got.sequence.iter().map(|h| format!("{h:016x}")).collect();
        let want_hex: Vec<String> = case["sequence_hashes_hex"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(hex, want_hex, "{name}: hex");
        assert_eq!(hasher.complete_blocks(tokens.len()), got.len(), "{name}: blocks");
    }
}

#[test]
fn dynamo_vectors_token_by_token_and_through_the_spec() {
    let doc: Value = serde_json::from_str(DYNAMO).unwrap();
    for case in doc["vectors"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let tokens = u32s(&case["tokens"]);
        let mut chain = DynamoChain::new(dynamo_hasher(case));
        let mut seq = Vec::new();
        for t in &tokens {
            chain.extend(std::slice::from_ref(t), |b| seq.push(b.sequence));
        }
        assert_eq!(seq, u64s(&case["sequence_hashes"]), "{name}");

        let mut spec =
            ChainSpec::new(Scheme::Dynamo, case["block_size"].as_u64().unwrap() as usize);
        spec.lora_name = case["lora_name"].as_str().map(str::to_owned);
        spec.cache_namespace = case["cache_namespace"].as_str().map(str::to_owned);
        spec.eagle = case["is_eagle"].as_bool().unwrap();
        assert_eq!(spec.hash(&tokens).unwrap().sequence, seq, "{name}: spec");
    }
}

fn vllm_chain_case(
    name: &str,
) -> (VllmAlgorithm, &'static str, Option<&'static str>, Option<&'static str>) {
    match name {
        "vllm_sha256_cbor_seed42" => (VllmAlgorithm::Sha256Cbor, "42", None, None),
        "vllm_sha256_cbor_seed42_lora_Alice" => {
            (VllmAlgorithm::Sha256Cbor, "42", Some("Alice"), None)
        }
        "vllm_sha256_cbor_seed42_cache_salt_s1" => {
            (VllmAlgorithm::Sha256Cbor, "42", None, Some("s1"))
        }
        "vllm_xxhash_cbor_seed42" => (VllmAlgorithm::XxhashCbor, "42", None, None),
        "vllm_legacy_sha256_cbor_64bit_seed42" => {
            (VllmAlgorithm::LegacySha256Cbor64, "42", None, None)
        }
        "vllm_sha256_cbor_default_seed_vllm-none-hash" => {
            (VllmAlgorithm::Sha256Cbor, "vllm-none-hash", None, None)
        }
        other => panic!("unknown chain {other}"),
    }
}

#[test]
fn vllm_chains() {
    let doc: Value = serde_json::from_str(VLLM).unwrap();
    let tokens = u32s(&doc["tokens_first_48"]);
    let chains = doc["chains"].as_object().unwrap();
    assert_eq!(chains.len(), 6);
    for (name, chain) in chains {
        let (algorithm, seed, lora, salt) = vllm_chain_case(name);
        let mut hasher = VllmHasher::new(algorithm, 16, seed).unwrap();
        if let Some(lora) = lora {
            hasher = hasher.with_lora_name(lora);
        }
        if let Some(salt) = salt {
            hasher = hasher.with_cache_salt(salt);
        }
        let entries = chain.as_array().unwrap();
        let digests = hasher.hash(&tokens);
        assert_eq!(digests.len(), 3, "{name}");
        if algorithm == VllmAlgorithm::LegacySha256Cbor64 {
            assert_eq!(hasher.root().id(), entries[0][1].as_u64().unwrap(), "{name}: root");
            for (d, want) in digests.iter().zip(&entries[1..]) {
                assert_eq!(d.id(), want.as_u64().unwrap(), "{name}");
            }
        } else {
            assert_eq!(
                format!("{:x}", hasher.root()),
                entries[0][1].as_str().unwrap(),
                "{name}: root"
            );
            for (d, want) in digests.iter().zip(&entries[1..]) {
                assert_eq!(format!("{d:x}"), want[0].as_str().unwrap(), "{name}: digest");
                assert_eq!(d.id(), want[1].as_u64().unwrap(), "{name}: id");
            }
        }
        // The same chain fed in uneven pieces.
        let mut inc = VllmChain::new(hasher.clone());
        let mut ids = Vec::new();
        for piece in tokens.chunks(7) {
            inc.extend(piece, |id| ids.push(id));
        }
        assert_eq!(ids, digests.iter().map(|d| d.id()).collect::<Vec<_>>(), "{name}: incremental");
    }
}

#[test]
fn vllm_cbor_payload_of_block_zero() {
    let doc: Value = serde_json::from_str(VLLM).unwrap();
    let tokens = u32s(&doc["tokens_first_48"]);
    let hasher = VllmHasher::new(VllmAlgorithm::Sha256Cbor, 16, "42").unwrap();
    let mut buf = Vec::new();
    hasher.block_digest(&hasher.root(), &tokens[..16], true, &mut buf);
    let hex: String = buf.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, doc["cbor_payload_block0_hex"].as_str().unwrap());
}

#[test]
fn real_vllm_event_ids() {
    let doc: Value = serde_json::from_str(VLLM_EVENT).unwrap();
    let want = u64s(&doc["block_hashes"]);
    assert_eq!(want.len(), 25);
    let tokens = u32s(&doc["token_ids"]);
    let mut spec = ChainSpec::new(Scheme::VllmSha256Cbor, 16);
    spec.hash_seed = Some("42".into());
    let got = spec.hash(&tokens).unwrap().sequence;
    assert_eq!(got, want);
}

#[test]
fn dynamo_output_tracking_examples() {
    use kvreuse_core::output::OutputTracker;
    let doc: Value = serde_json::from_str(DYNAMO).unwrap();
    let examples = doc["output_tracking_examples"].as_array().unwrap();
    assert_eq!(examples.len(), 3);
    for (n, example) in examples.iter().enumerate() {
        let hasher = DynamoHasher::new(example["block_size"].as_u64().unwrap() as usize).unwrap();
        let prompt = u32s(&example["prompt"]);
        assert_eq!(hasher.hash(&prompt).sequence, u64s(&example["prompt_sequence_hashes"]));
        let mut tracker = OutputTracker::new(hasher, &prompt);
        for chunk in example["chunks"].as_array().unwrap() {
            let before = tracker.recorded().len();
            tracker.observe(0, &u32s(&chunk["chunk"]));
            assert_eq!(
                tracker.recorded()[before..],
                u64s(&chunk["newly_completed_output_sequence_hashes"])[..],
                "example {n}"
            );
        }
    }
}
