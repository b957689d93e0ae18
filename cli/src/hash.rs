//! `kvreuse hash`: token ids in (JSON on stdin), block hashes out (JSON on stdout).

use std::io::{self, Read, Write};

use anyhow::{Context, Result, bail};
use clap::Args;
use kvreuse::core::chain::{ChainSpec, DynamoHasher, Scheme, SchemeOption};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Arguments of `kvreuse hash`.
#[derive(Debug, Args)]
pub(crate) struct HashArgs {
    /// Tokens per block.
    #[arg(long, value_name = "N")]
    block_size: usize,
    /// Hash scheme: dynamo, vllm-sha256-cbor, vllm-xxhash-cbor or vllm-legacy-sha256-cbor-64bit.
    #[arg(long, default_value = "dynamo", value_parser = parse_scheme)]
    scheme: Scheme,
    /// LoRA adapter name (empty: the base model).
    #[arg(long, value_name = "S", value_parser = crate::replay::utf8())]
    lora_name: Option<String>,
    /// Dynamo cache namespace.
    #[arg(long, value_name = "S", value_parser = crate::replay::utf8())]
    cache_namespace: Option<String>,
    /// Dynamo Eagle windows (block size + 1 tokens, stride block size).
    #[arg(long)]
    eagle: bool,
    /// vLLM root seed string (the engine's PYTHONHASHSEED); default "vllm-none-hash" (SHA-256
    /// schemes; required for vllm-xxhash-cbor).
    #[arg(long, value_name = "S", value_parser = crate::replay::utf8())]
    hash_seed: Option<String>,
    /// vLLM cache salt (mixed into the first block).
    #[arg(long, value_name = "S", value_parser = crate::replay::utf8())]
    cache_salt: Option<String>,
}

fn parse_scheme(name: &str) -> Result<Scheme, String> {
    Scheme::parse(name).map_err(|e| e.to_string())
}

#[derive(Serialize)]
struct DynamoOutput {
    local_hashes: Vec<u64>,
    sequence_hashes: Vec<u64>,
}

#[derive(Serialize)]
struct VllmOutput {
    sequence_hashes: Vec<u64>,
    digests: Vec<String>,
}

/// The most bytes `kvreuse hash` reads from stdin.
pub(crate) const MAX_STDIN_BYTES: u64 = 256 << 20;

/// The input: a bare array of token ids, or an object with `tokens` and, for Dynamo,
/// `mm_hashes_per_block`.
struct Input {
    tokens: Vec<u32>,
    mm_hashes_per_block: Option<Vec<Option<Vec<u64>>>>,
}

/// The object form: `tokens`, and optionally `mm_hashes_per_block`. A key that is neither, or
/// one given twice, is an error, as in traces.
struct Object {
    tokens: Vec<Value>,
    mm_hashes_per_block: Option<Vec<Option<Vec<u64>>>>,
}

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = Object;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object with \"tokens\"")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Object, A::Error> {
                use serde::de::Error;
                let (mut tokens, mut mm) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "tokens" if tokens.is_some() => {
                            return Err(A::Error::custom("duplicate key \"tokens\""));
                        }
                        "tokens" => {
                            let value: Value = map.next_value()?;
                            let Value::Array(items) = value else {
                                return Err(A::Error::custom(
                                    "\"tokens\" must be an array of token ids",
                                ));
                            };
                            tokens = Some(items);
                        }
                        "mm_hashes_per_block" if mm.is_some() => {
                            return Err(A::Error::custom("duplicate key \"mm_hashes_per_block\""));
                        }
                        "mm_hashes_per_block" => {
                            let value: Option<Vec<Option<Vec<u64>>>> = map.next_value().map_err(|_| {
                                A::Error::custom("\"mm_hashes_per_block\" must be an array of u64 arrays or nulls")
                            })?;
                            mm = Some(value);
                        }
                        other => {
                            return Err(A::Error::custom(format_args!(
                                "unknown key {other:?} (expected \"tokens\", \"mm_hashes_per_block\")"
                            )));
                        }
                    }
                }
                let tokens = tokens
                    .ok_or_else(|| A::Error::custom("the input object needs a \"tokens\" array"))?;
                Ok(Object { tokens, mm_hashes_per_block: mm.flatten() })
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

fn parse_input(text: &[u8]) -> Result<Input> {
    match text.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => {
            let items: Vec<Value> = serde_json::from_slice(text).context("stdin is not JSON")?;
            Ok(Input { tokens: token_ids(&items)?, mm_hashes_per_block: None })
        }
        Some(b'{') => {
            let object: Object = serde_json::from_slice(text).context("stdin")?;
            Ok(Input {
                tokens: token_ids(&object.tokens)?,
                mm_hashes_per_block: object.mm_hashes_per_block,
            })
        }
        _ => {
            serde_json::from_slice::<Value>(text).context("stdin is not JSON")?;
            bail!("expected a JSON array of token ids or an object with \"tokens\"")
        }
    }
}

fn token_ids(items: &[Value]) -> Result<Vec<u32>> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_u64().and_then(|t| u32::try_from(t).ok()).with_context(|| {
                format!("token {i} is {v}, not a token id (an integer in 0..=4294967295)")
            })
        })
        .collect()
}

pub(crate) fn run(args: &HashArgs) -> Result<()> {
    let mut spec = ChainSpec::new(args.scheme, args.block_size);
    let dynamo = args.scheme == Scheme::Dynamo;
    spec.lora_name.clone_from(&args.lora_name);
    spec.cache_namespace.clone_from(&args.cache_namespace);
    spec.eagle = args.eagle;
    spec.hash_seed.clone_from(&args.hash_seed);
    spec.cache_salt.clone_from(&args.cache_salt);
    match spec.ignored_option() {
        None => {}
        Some(SchemeOption::HashSeed) => bail!("--hash-seed applies to the vLLM schemes only"),
        Some(SchemeOption::CacheSalt) => bail!("--cache-salt applies to the vLLM schemes only"),
        Some(SchemeOption::CacheNamespace | SchemeOption::Eagle) => {
            bail!("--cache-namespace and --eagle apply to the dynamo scheme only")
        }
    }
    if let Some(problem) = spec.no_engine_match() {
        bail!("{problem}");
    }
    // Validate the settings before reading what may be a large input.
    spec.build()?;

    let mut text = Vec::new();
    io::stdin().take(MAX_STDIN_BYTES + 1).read_to_end(&mut text).context("cannot read stdin")?;
    if text.len() as u64 > MAX_STDIN_BYTES {
        bail!(
            "stdin holds more than {} MiB, the most `kvreuse hash` reads; hash a long input in \
             pieces",
            MAX_STDIN_BYTES >> 20
        );
    }
    let input = parse_input(&text)?;

    let mut out = io::stdout().lock();
    match (&input.mm_hashes_per_block, dynamo) {
        (Some(_), false) => bail!("\"mm_hashes_per_block\" applies to the dynamo scheme only"),
        (Some(mm), true) => {
            let hasher = DynamoHasher::new(args.block_size)?
                .with_lora_name(args.lora_name.as_deref().unwrap_or(""))
                .with_cache_namespace(args.cache_namespace.as_deref().unwrap_or(""))
                .with_eagle(args.eagle);
            let hashes = hasher.hash_multimodal(&input.tokens, mm)?;
            let output =
                DynamoOutput { local_hashes: hashes.local, sequence_hashes: hashes.sequence };
            serde_json::to_writer(&mut out, &output)?;
        }
        (None, _) => {
            let hashes = spec.hash(&input.tokens)?;
            if dynamo {
                let output =
                    DynamoOutput { local_hashes: hashes.local, sequence_hashes: hashes.sequence };
                serde_json::to_writer(&mut out, &output)?;
            } else {
                let digests = hashes.digests.iter().map(|d| format!("{d:x}")).collect();
                serde_json::to_writer(
                    &mut out,
                    &VllmOutput { sequence_hashes: hashes.sequence, digests },
                )?;
            }
        }
    }
    writeln!(out)?;
    out.flush().context("cannot write stdout")
}
