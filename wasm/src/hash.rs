//! `blockHashes`: token ids in, block ids out, under the scheme a deployment uses.

use alloc::format;
use js_sys::{Array, Object};
use kvreuse_core::chain::{ChainSpec, Scheme, SchemeOption};
use wasm_bindgen::prelude::*;

use crate::js::{self, Options, range_error, type_error};

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = r#"
/** Options of `blockHashes`. Options a scheme does not use are errors, not ignored. */
export interface BlockHashOptions {
  /** Tokens per block (the engine's `block_size`). Required. */
  blockSize: number;
  /** "dynamo" (default), "vllm-sha256-cbor", "vllm-xxhash-cbor" or "vllm-legacy-sha256-cbor-64bit". */
  scheme?: "dynamo" | "vllm-sha256-cbor" | "vllm-xxhash-cbor" | "vllm-legacy-sha256-cbor-64bit";
  /** LoRA adapter name; empty or absent means the base model. */
  loraName?: string;
  /** Dynamo only: the cache namespace. */
  cacheNamespace?: string;
  /** Dynamo only: Eagle windows of `blockSize + 1` tokens, stride `blockSize`. */
  eagle?: boolean;
  /** vLLM only: the root seed string (the engine's PYTHONHASHSEED); default "vllm-none-hash" (SHA-256 schemes; required for vllm-xxhash-cbor). */
  hashSeed?: string;
  /** vLLM only: the cache salt, mixed into the first block. */
  cacheSalt?: string;
}

/** The ids of the complete blocks of a token sequence. */
export type BlockHashes =
  | {
      scheme: "dynamo";
      /** Each block's content-only hash. */
      localHashes: BigUint64Array;
      /** The chained ids a router keys on. */
      sequenceHashes: BigUint64Array;
    }
  | {
      scheme: "vllm-sha256-cbor" | "vllm-xxhash-cbor" | "vllm-legacy-sha256-cbor-64bit";
      /** The ids vLLM publishes in KV events: each digest's low 64 bits. */
      sequenceHashes: BigUint64Array;
      /** Each block's full digest, in hex. */
      digests: string[];
    };
"#;

const KEYS: [&str; 7] =
    ["blockSize", "scheme", "loraName", "cacheNamespace", "eagle", "hashSeed", "cacheSalt"];

/// The block ids of `tokens` (a `Uint32Array` or an array of integers): one per complete
/// block, a trailing partial block is not hashed.
///
/// Dynamo results carry `localHashes` and `sequenceHashes`; vLLM ones `sequenceHashes` (the
/// published ids) and `digests` (hex), since a vLLM block hash has no content-only part.
/// Throws a `TypeError` for input of the wrong type or an option the scheme does not take, a
/// `RangeError` for a block size of 0 or above 2^24 or a token outside `0..2^32`.
#[wasm_bindgen(js_name = blockHashes, unchecked_return_type = "BlockHashes")]
pub fn block_hashes(
    #[wasm_bindgen(unchecked_param_type = "Uint32Array | number[]")] tokens: &JsValue,
    #[wasm_bindgen(unchecked_param_type = "BlockHashOptions")] options: &JsValue,
) -> Result<JsValue, JsValue> {
    let options = Options::new(options, "options", &KEYS)?;
    let Some(block_size) = options.integer("blockSize")? else {
        return Err(type_error("options.blockSize is required"));
    };
    let scheme = match options.string("scheme")? {
        None => Scheme::Dynamo,
        Some(name) => Scheme::parse(&name).map_err(type_error)?,
    };
    let mut spec = ChainSpec::new(scheme, block_size);
    spec.lora_name = options.string("loraName")?;
    spec.cache_namespace = options.string("cacheNamespace")?;
    spec.eagle = options.boolean("eagle")?.unwrap_or(false);
    spec.hash_seed = options.string("hashSeed")?;
    spec.cache_salt = options.string("cacheSalt")?;
    let dynamo = scheme == Scheme::Dynamo;
    if let Some(option) = spec.ignored_option() {
        let key = match option {
            SchemeOption::HashSeed => "hashSeed",
            SchemeOption::CacheSalt => "cacheSalt",
            SchemeOption::CacheNamespace => "cacheNamespace",
            SchemeOption::Eagle => "eagle",
        };
        let family = if dynamo { "the vLLM schemes" } else { "the dynamo scheme" };
        return Err(type_error(format_args!("options.{key} applies to {family} only")));
    }
    if let Some(problem) = spec.no_engine_match() {
        return Err(type_error(format_args!("options: {problem}")));
    }
    // Settings first: a bad block size is reported before a large input is read.
    spec.build().map_err(|e| range_error(format_args!("options.blockSize: {e}")))?;
    let tokens = js::tokens(tokens, "tokens")?;

    let out = Object::new();
    js::set(&out, "scheme", scheme.name());
    let hashes = spec.hash(&tokens).map_err(range_error)?;
    js::set(&out, "sequenceHashes", js::id_array(&hashes.sequence));
    if dynamo {
        js::set(&out, "localHashes", js::id_array(&hashes.local));
    } else {
        let digests: Array =
            hashes.digests.iter().map(|d| JsValue::from(format!("{d:x}"))).collect();
        js::set(&out, "digests", digests);
    }
    Ok(out.into())
}
