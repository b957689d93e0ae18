//! Block-hash chains: from token ids to the 64-bit block ids a router keys on.
//!
//! A prompt is cut into windows of `block_size` tokens. Each complete window gets a *local*
//! hash of its own content, and a *sequence* hash that also covers everything before it:
//! `seq[i] = f(seq[i - 1], local[i])`. Two prompts share the sequence hash of block `i` exactly
//! when they share the first `i + 1` blocks, which is what makes a sequence hash usable as the
//! id of a cached prefix. A trailing partial window is never hashed.
//!
//! Two families are implemented, bit for bit:
//!
//! - [`dynamo`]: NVIDIA Dynamo's KV router (XXH3-64 over little-endian token bytes).
//! - [`vllm`]: vLLM's prefix-caching hashes (SHA-256 or XXH3-128 over canonical CBOR), whose
//!   low 64 bits are the ids vLLM publishes in its KV events (consumed by llm-d and others).
//!
//! Both are specified as bytes fed to named algorithms, never through `core::hash::Hash`, and
//! both come in a one-shot form and an incremental form ([`BlockChain`]) that continues a chain
//! token by token without allocating per block. Golden vectors produced by the reference
//! implementations pin every recipe on every target.

use alloc::vec::Vec;
use core::fmt;

use crate::names::UnknownName;

pub mod dynamo;
pub mod vllm;

mod cbor;

pub use dynamo::{DynamoChain, DynamoHasher};
pub use vllm::{Digest, VllmAlgorithm, VllmChain, VllmHasher};

/// The hashes of one complete Dynamo block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockHash {
    /// Hash of this block's content alone.
    pub local: u64,
    /// The chained id: covers this block and every block before it.
    pub sequence: u64,
}

/// The result of hashing a whole token sequence in one call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockHashes {
    /// Sequence (chained) hashes, one per complete block: the block ids a router keys on.
    pub sequence: Vec<u64>,
    /// Dynamo only: the local (content-only) hash of each block. Empty for vLLM, whose block
    /// hash has no content-only part.
    pub local: Vec<u64>,
    /// vLLM only: each block's full digest (the id is its low 64 bits). Empty for Dynamo.
    pub digests: Vec<Digest>,
}

impl BlockHashes {
    /// Number of complete blocks.
    pub fn len(&self) -> usize {
        self.sequence.len()
    }

    /// Whether no block was complete.
    pub fn is_empty(&self) -> bool {
        self.sequence.is_empty()
    }
}

/// Why a chain could not be configured or fed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChainError {
    /// The block size was zero.
    ZeroBlockSize,
    /// The block size does not fit the scheme (vLLM blocks are at most 2^24 tokens here).
    BlockSizeTooLarge {
        /// The block size that was asked for.
        block_size: usize,
    },
    /// Multimodal object hashes were given for more blocks than the tokens span.
    MultimodalBlocksMismatch {
        /// Number of per-block entries given.
        given: usize,
        /// Number of blocks the tokens span, a partial last one included.
        blocks: usize,
    },
    /// The scheme does not support multimodal object hashes.
    MultimodalUnsupported,
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroBlockSize => f.write_str("block size must be at least 1"),
            Self::BlockSizeTooLarge { block_size } => {
                write!(f, "block size {block_size} is too large (at most 16777216)")
            }
            Self::MultimodalBlocksMismatch { given, blocks } => write!(
                f,
                "multimodal hashes given for {given} blocks, but the tokens span {blocks} blocks"
            ),
            Self::MultimodalUnsupported => {
                f.write_str("this hash scheme does not take multimodal object hashes")
            }
        }
    }
}

impl core::error::Error for ChainError {}

/// Largest block size any scheme accepts; far above any real engine's (16 to 512 tokens).
pub const MAX_BLOCK_SIZE: usize = 1 << 24;

pub(crate) fn check_block_size(block_size: usize) -> Result<(), ChainError> {
    match block_size {
        0 => Err(ChainError::ZeroBlockSize),
        n if n > MAX_BLOCK_SIZE => Err(ChainError::BlockSizeTooLarge { block_size }),
        _ => Ok(()),
    }
}

/// The hash schemes by name, for callers that pick one at run time (the CLI, the browser).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Dynamo's router: XXH3-64.
    Dynamo,
    /// vLLM `sha256_cbor`.
    VllmSha256Cbor,
    /// vLLM `xxhash_cbor` (XXH3-128).
    VllmXxhashCbor,
    /// Older vLLM: `sha256_cbor` chained through the low 64 bits.
    VllmLegacySha256Cbor64,
}

impl Scheme {
    /// Every scheme, in a stable order.
    pub const ALL: [Scheme; 4] = [
        Scheme::Dynamo,
        Scheme::VllmSha256Cbor,
        Scheme::VllmXxhashCbor,
        Scheme::VllmLegacySha256Cbor64,
    ];

    /// The scheme's name as the CLI and the browser spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Scheme::Dynamo => "dynamo",
            Scheme::VllmSha256Cbor => "vllm-sha256-cbor",
            Scheme::VllmXxhashCbor => "vllm-xxhash-cbor",
            Scheme::VllmLegacySha256Cbor64 => "vllm-legacy-sha256-cbor-64bit",
        }
    }

    /// The schemes' names, in [`ALL`](Self::ALL)'s order.
    pub const NAMES: [&'static str; 4] = [
        Scheme::ALL[0].name(),
        Scheme::ALL[1].name(),
        Scheme::ALL[2].name(),
        Scheme::ALL[3].name(),
    ];

    /// Looks a scheme up by [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Scheme> {
        Scheme::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The scheme `name` names, or the error both front ends give.
    pub fn parse(name: &str) -> Result<Scheme, UnknownName> {
        Scheme::from_name(name).ok_or_else(|| UnknownName {
            kind: "scheme",
            name: name.into(),
            expected: &Scheme::NAMES,
        })
    }

    /// The vLLM algorithm behind this scheme, if it is a vLLM one.
    pub const fn vllm_algorithm(self) -> Option<VllmAlgorithm> {
        match self {
            Scheme::Dynamo => None,
            Scheme::VllmSha256Cbor => Some(VllmAlgorithm::Sha256Cbor),
            Scheme::VllmXxhashCbor => Some(VllmAlgorithm::XxhashCbor),
            Scheme::VllmLegacySha256Cbor64 => Some(VllmAlgorithm::LegacySha256Cbor64),
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An option of [`ChainSpec`] that only one family of schemes uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemeOption {
    /// `cache_namespace` (Dynamo only).
    CacheNamespace,
    /// `eagle` (Dynamo only).
    Eagle,
    /// `hash_seed` (vLLM only).
    HashSeed,
    /// `cache_salt` (vLLM only).
    CacheSalt,
}

/// A setting under which no engine publishes the ids a [`ChainSpec`] computes: the chain is
/// well defined, but no vLLM version hashes that way, so its ids would match nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoEngineMatch {
    /// `vllm-xxhash-cbor` without a hash seed: unless `PYTHONHASHSEED` is set, vLLM seeds its
    /// non-cryptographic hashes with random bytes, so no default is any engine's.
    XxhashWithoutSeed,
    /// A LoRA name on the legacy 64-bit chain: the vLLM versions that published it keyed a
    /// LoRA adapter by its integer id (names came in with vLLM #27211).
    LegacyLoraName,
}

impl fmt::Display for NoEngineMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::XxhashWithoutSeed => {
                "vllm-xxhash-cbor needs the engine's PYTHONHASHSEED as its hash seed: without it \
                 vLLM seeds xxhash_cbor with random bytes, which no default can match"
            }
            Self::LegacyLoraName => {
                "the legacy 64-bit chain keyed a LoRA adapter by its integer id, not its name: no \
                 vLLM version published these ids for a LoRA name"
            }
        })
    }
}

impl core::error::Error for NoEngineMatch {}

/// Everything that selects a chain, for run-time choice of scheme.
///
/// Fields that a scheme does not use are ignored by it: Dynamo ignores `hash_seed` and
/// `cache_salt`; vLLM ignores `cache_namespace` and `eagle`. A front end that would rather
/// reject such a setting asks [`ignored_option`](ChainSpec::ignored_option).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainSpec {
    /// Which recipe.
    pub scheme: Scheme,
    /// Tokens per block.
    pub block_size: usize,
    /// LoRA adapter name; empty or `None` means the base model.
    pub lora_name: Option<alloc::string::String>,
    /// Dynamo cache namespace; empty or `None` means none.
    pub cache_namespace: Option<alloc::string::String>,
    /// Dynamo Eagle (speculative decoding) windows of `block_size + 1` tokens.
    pub eagle: bool,
    /// vLLM root seed string (`PYTHONHASHSEED`); `None` uses vLLM's fixed default, which vLLM
    /// itself uses for the SHA-256 schemes only (see [`NoEngineMatch`]).
    pub hash_seed: Option<alloc::string::String>,
    /// vLLM `cache_salt`, mixed into the first block only.
    pub cache_salt: Option<alloc::string::String>,
}

impl ChainSpec {
    /// A spec for `scheme` with `block_size` and every option off.
    pub fn new(scheme: Scheme, block_size: usize) -> Self {
        ChainSpec {
            scheme,
            block_size,
            lora_name: None,
            cache_namespace: None,
            eagle: false,
            hash_seed: None,
            cache_salt: None,
        }
    }

    /// The first option set here that the scheme ignores, in the order Dynamo's `hash_seed`,
    /// `cache_salt`, vLLM's `cache_namespace`, `eagle`.
    pub fn ignored_option(&self) -> Option<SchemeOption> {
        let ignored = if self.scheme == Scheme::Dynamo {
            [
                (self.hash_seed.is_some(), SchemeOption::HashSeed),
                (self.cache_salt.is_some(), SchemeOption::CacheSalt),
            ]
        } else {
            [
                (self.cache_namespace.is_some(), SchemeOption::CacheNamespace),
                (self.eagle, SchemeOption::Eagle),
            ]
        };
        ignored.iter().find(|(set, _)| *set).map(|&(_, option)| option)
    }

    /// Whether the ids this spec computes are ones no engine publishes (a front end refuses
    /// such a spec; the chain itself is well defined).
    pub fn no_engine_match(&self) -> Option<NoEngineMatch> {
        let named = self.lora_name.as_deref().is_some_and(|name| !name.is_empty());
        match self.scheme {
            Scheme::VllmXxhashCbor if self.hash_seed.is_none() => {
                Some(NoEngineMatch::XxhashWithoutSeed)
            }
            Scheme::VllmLegacySha256Cbor64 if named => Some(NoEngineMatch::LegacyLoraName),
            _ => None,
        }
    }

    /// Builds the incremental chain this spec describes, starting from an empty prefix.
    pub fn build(&self) -> Result<BlockChain, ChainError> {
        Ok(match self.scheme.vllm_algorithm() {
            None => {
                let hasher = DynamoHasher::new(self.block_size)?
                    .with_lora_name(self.lora_name.as_deref().unwrap_or(""))
                    .with_cache_namespace(self.cache_namespace.as_deref().unwrap_or(""))
                    .with_eagle(self.eagle);
                BlockChain::Dynamo(DynamoChain::new(hasher))
            }
            Some(algorithm) => {
                let seed = self.hash_seed.as_deref().unwrap_or(vllm::DEFAULT_HASH_SEED);
                let mut hasher = VllmHasher::new(algorithm, self.block_size, seed)?;
                if let Some(lora) = self.lora_name.as_deref().filter(|s| !s.is_empty()) {
                    hasher = hasher.with_lora_name(lora);
                }
                if let Some(salt) = self.cache_salt.as_deref().filter(|s| !s.is_empty()) {
                    hasher = hasher.with_cache_salt(salt);
                }
                BlockChain::Vllm(VllmChain::new(hasher))
            }
        })
    }

    /// Hashes a whole token sequence in one call.
    pub fn hash(&self, tokens: &[u32]) -> Result<BlockHashes, ChainError> {
        Ok(match self.build()? {
            BlockChain::Dynamo(chain) => chain.hasher().hash(tokens),
            BlockChain::Vllm(chain) => {
                let digests = chain.hasher().hash(tokens);
                let sequence = digests.iter().map(Digest::id).collect();
                BlockHashes { sequence, local: Vec::new(), digests }
            }
        })
    }
}

/// An incremental chain of either family: feed tokens in any chunks, get each block as soon as
/// it is complete.
#[derive(Clone, Debug)]
pub enum BlockChain {
    /// A Dynamo chain.
    Dynamo(DynamoChain),
    /// A vLLM chain.
    Vllm(VllmChain),
}

impl BlockChain {
    /// Appends tokens; calls `on_block` with the id (sequence hash) of every block they
    /// complete, in order.
    pub fn extend(&mut self, tokens: &[u32], mut on_block: impl FnMut(u64)) {
        match self {
            BlockChain::Dynamo(c) => c.extend(tokens, |b| on_block(b.sequence)),
            BlockChain::Vllm(c) => c.extend(tokens, on_block),
        }
    }

    /// Number of complete blocks so far.
    pub fn blocks(&self) -> usize {
        match self {
            BlockChain::Dynamo(c) => c.blocks(),
            BlockChain::Vllm(c) => c.blocks(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::{String, ToString};

    /// Each option is ignored by exactly the family that does not use it, and the first one
    /// set is reported.
    #[test]
    fn ignored_options_are_those_of_the_other_family() {
        for scheme in Scheme::ALL {
            let dynamo = scheme == Scheme::Dynamo;
            let spec = ChainSpec::new(scheme, 16);
            assert_eq!(spec.ignored_option(), None, "{scheme}");
            let with_lora = ChainSpec { lora_name: Some("adapter".into()), ..spec.clone() };
            assert_eq!(with_lora.ignored_option(), None, "LoRA applies to {scheme}");
            let cases = [
                (ChainSpec { hash_seed: Some("0".into()), ..spec.clone() }, SchemeOption::HashSeed),
                (
                    ChainSpec { cache_salt: Some("s".into()), ..spec.clone() },
                    SchemeOption::CacheSalt,
                ),
                (
                    ChainSpec { cache_namespace: Some("ns".into()), ..spec.clone() },
                    SchemeOption::CacheNamespace,
                ),
                (ChainSpec { eagle: true, ..spec.clone() }, SchemeOption::Eagle),
            ];
            for (set, option) in cases {
                let dynamo_only =
                    matches!(option, SchemeOption::CacheNamespace | SchemeOption::Eagle);
                let expected = (dynamo != dynamo_only).then_some(option);
                assert_eq!(set.ignored_option(), expected, "{scheme} with {option:?}");
            }
            let both = ChainSpec {
                hash_seed: Some("0".into()),
                cache_salt: Some("s".into()),
                cache_namespace: Some("ns".into()),
                eagle: true,
                ..spec
            };
            let first = if dynamo { SchemeOption::HashSeed } else { SchemeOption::CacheNamespace };
            assert_eq!(both.ignored_option(), Some(first), "{scheme}");
        }
    }

    /// A scheme's name is the one both front ends document, and reads back to the scheme;
    /// an unknown name is an error that lists them.
    #[test]
    fn scheme_names_read_back_and_unknown_ones_list_them() {
        let names =
            ["dynamo", "vllm-sha256-cbor", "vllm-xxhash-cbor", "vllm-legacy-sha256-cbor-64bit"];
        assert_eq!(Scheme::NAMES, names);
        for (scheme, name) in Scheme::ALL.into_iter().zip(names) {
            assert_eq!(scheme.name(), name);
            assert_eq!(scheme.to_string(), name);
            assert_eq!(Scheme::parse(name), Ok(scheme));
        }
        let unknown = Scheme::parse("md5").unwrap_err();
        assert_eq!(
            (unknown.kind, unknown.name.as_str(), unknown.expected),
            ("scheme", "md5", &names[..])
        );
    }

    /// Block sizes from 1 to `MAX_BLOCK_SIZE` are accepted, each bound exactly.
    #[test]
    fn block_sizes_are_accepted_from_one_to_the_maximum() {
        assert_eq!(check_block_size(0), Err(ChainError::ZeroBlockSize));
        assert_eq!(check_block_size(1), Ok(()));
        assert_eq!(check_block_size(MAX_BLOCK_SIZE), Ok(()));
        let over = MAX_BLOCK_SIZE + 1;
        assert_eq!(check_block_size(over), Err(ChainError::BlockSizeTooLarge { block_size: over }));
    }

    /// A whole sequence's hashes count its complete blocks, in every scheme.
    #[test]
    fn block_hashes_count_complete_blocks_only() {
        for scheme in Scheme::ALL {
            let spec = ChainSpec::new(scheme, 4);
            for (tokens, blocks) in [(0, 0), (3, 0), (4, 1), (9, 2)] {
                let ids: Vec<u32> = (0..tokens).collect();
                let hashes = spec.hash(&ids).unwrap();
                assert_eq!((hashes.len(), hashes.is_empty()), (blocks, blocks == 0), "{scheme}");
            }
        }
    }

    /// A spec's vLLM options reach the hasher as its own builder sets them; an empty LoRA
    /// name or salt is the same as none.
    #[test]
    fn vllm_options_reach_the_hasher_and_empty_ones_are_none() {
        let tokens: Vec<u32> = (0..40).collect();
        for scheme in Scheme::ALL {
            let Some(algorithm) = scheme.vllm_algorithm() else { continue };
            let spec = ChainSpec::new(scheme, 16);
            let hasher = || VllmHasher::new(algorithm, 16, vllm::DEFAULT_HASH_SEED).unwrap();
            let ids = |h: VllmHasher| h.hash(&tokens).iter().map(Digest::id).collect::<Vec<_>>();
            let of = |spec: ChainSpec| spec.hash(&tokens).unwrap().sequence;
            let base = of(spec.clone());
            assert_eq!(base, ids(hasher()), "{scheme}");
            let lora = of(ChainSpec { lora_name: Some("adapter".into()), ..spec.clone() });
            assert_eq!(lora, ids(hasher().with_lora_name("adapter")), "{scheme}");
            let salted = of(ChainSpec { cache_salt: Some("salt".into()), ..spec.clone() });
            assert_eq!(salted, ids(hasher().with_cache_salt("salt")), "{scheme}");
            assert!(lora != base && salted != base, "{scheme}");
            let empty_lora = ChainSpec { lora_name: Some(String::new()), ..spec.clone() };
            let empty_salt = ChainSpec { cache_salt: Some(String::new()), ..spec.clone() };
            assert_eq!((of(empty_lora), of(empty_salt)), (base.clone(), base), "{scheme}");
        }
    }
}
