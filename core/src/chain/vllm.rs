//! vLLM's prefix-caching block hashes, and the 64-bit ids vLLM publishes in KV events.
//!
//! The recipe (vLLM v1 `kv_cache_utils.hash_block_tokens` with a `*_cbor` hash function):
//!
//! - **Root**: `NONE_HASH = H(cbor(seed))`, the seed string encoded as a CBOR text string.
//!   With `PYTHONHASHSEED=42` the seed is `"42"`; newer vLLM without it uses the fixed string
//!   `"vllm-none-hash"` ([`DEFAULT_HASH_SEED`]).
//! - **Block**: `H_i = H(canonical_cbor([H_{i-1}, tokens, extra_keys]))`, where `H_{i-1}` is a
//!   CBOR byte string, `tokens` an array of unsigned integers and `extra_keys` either `null` or
//!   an array of text strings: the LoRA adapter name (every block), then the `cache_salt`
//!   (first block only).
//! - **H**: SHA-256 for `sha256_cbor`, XXH3-128 (16 bytes, big-endian canonical form) for
//!   `xxhash_cbor`.
//! - **Legacy 64-bit chain** (older vLLM): SHA-256 over the same CBOR, but the parent enters as
//!   an unsigned integer and every hash is truncated to its low 64 bits.
//! - **Published id**: the low 64 bits of a digest, i.e. its last 8 bytes read big-endian.
//!
//! Only full blocks are hashed. Each block's CBOR payload is written into a buffer that the
//! chain reuses, so hashing does not allocate per block.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use sha2::{Digest as _, Sha256};
use xxhash_rust::xxh3::xxh3_128;

use super::{ChainError, cbor, check_block_size};

/// vLLM's root seed string when `PYTHONHASHSEED` is not set (sha256 variants).
pub const DEFAULT_HASH_SEED: &str = "vllm-none-hash";

/// Which of vLLM's CBOR hash functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VllmAlgorithm {
    /// `sha256_cbor`: SHA-256, 32-byte digests.
    Sha256Cbor,
    /// `xxhash_cbor`: XXH3-128, 16-byte digests.
    XxhashCbor,
    /// Older vLLM's `sha256_cbor_64bit`: SHA-256 chained through the low 64 bits.
    LegacySha256Cbor64,
}

/// A vLLM block hash: 32 bytes (SHA-256), 16 bytes (XXH3-128) or 8 bytes (legacy chain).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest {
    bytes: [u8; 32],
    len: u8,
}

impl Digest {
    fn from_slice(digest: &[u8]) -> Self {
        let mut bytes = [0u8; 32];
        bytes[..digest.len()].copy_from_slice(digest);
        Digest { bytes, len: digest.len() as u8 }
    }

    /// The digest bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The 64-bit id vLLM publishes: the digest's last 8 bytes read big-endian.
    pub fn id(&self) -> u64 {
        let end = usize::from(self.len);
        let mut last = [0u8; 8];
        last.copy_from_slice(&self.bytes[end - 8..end]);
        u64::from_be_bytes(last)
    }
}

impl fmt::LowerHex for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_bytes().iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self:x})")
    }
}

/// The settings of a vLLM chain: algorithm, block size, root and extra keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VllmHasher {
    algorithm: VllmAlgorithm,
    block_size: usize,
    root: Digest,
    lora_name: Option<String>,
    cache_salt: Option<String>,
}

impl VllmHasher {
    /// A hasher for blocks of `block_size` tokens whose root is derived from `seed` (the
    /// `PYTHONHASHSEED` string, or [`DEFAULT_HASH_SEED`]).
    pub fn new(
        algorithm: VllmAlgorithm,
        block_size: usize,
        seed: &str,
    ) -> Result<Self, ChainError> {
        check_block_size(block_size)?;
        let mut payload = Vec::with_capacity(seed.len() + 9);
        cbor::text(&mut payload, seed);
        let root = digest(algorithm, &payload);
        Ok(VllmHasher { algorithm, block_size, root, lora_name: None, cache_salt: None })
    }

    /// Adds the LoRA adapter name to every block's extra keys.
    pub fn with_lora_name(mut self, name: &str) -> Self {
        self.lora_name = Some(name.into());
        self
    }

    /// Adds a `cache_salt` to the first block's extra keys.
    pub fn with_cache_salt(mut self, salt: &str) -> Self {
        self.cache_salt = Some(salt.into());
        self
    }

    /// The algorithm.
    pub fn algorithm(&self) -> VllmAlgorithm {
        self.algorithm
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// `NONE_HASH`, the parent of the first block.
    pub fn root(&self) -> Digest {
        self.root
    }

    /// The hash of one full block of `tokens` after `parent`; `first` says whether it is the
    /// sequence's first block (the one that carries the cache salt). `buf` is scratch space.
    pub fn block_digest(
        &self,
        parent: &Digest,
        tokens: &[u32],
        first: bool,
        buf: &mut Vec<u8>,
    ) -> Digest {
        buf.clear();
        cbor::array(buf, 3);
        match self.algorithm {
            VllmAlgorithm::LegacySha256Cbor64 => cbor::unsigned(buf, parent.id()),
            _ => cbor::bytes(buf, parent.as_bytes()),
        }
        cbor::array(buf, tokens.len());
        for &t in tokens {
            cbor::unsigned(buf, u64::from(t));
        }
        let salt = self.cache_salt.as_deref().filter(|_| first);
        let extra = [self.lora_name.as_deref(), salt];
        let extra_len = extra.iter().flatten().count();
        if extra_len == 0 {
            cbor::null(buf);
        } else {
            cbor::array(buf, extra_len);
            extra.iter().flatten().for_each(|key| cbor::text(buf, key));
        }
        digest(self.algorithm, buf)
    }

    /// Hashes a whole token sequence from the root; one digest per full block.
    pub fn hash(&self, tokens: &[u32]) -> Vec<Digest> {
        let mut out = Vec::with_capacity(tokens.len() / self.block_size);
        let mut buf = Vec::new();
        let mut parent = self.root;
        for (i, block) in tokens.chunks_exact(self.block_size).enumerate() {
            parent = self.block_digest(&parent, block, i == 0, &mut buf);
            out.push(parent);
        }
        out
    }
}

fn digest(algorithm: VllmAlgorithm, payload: &[u8]) -> Digest {
    match algorithm {
        VllmAlgorithm::Sha256Cbor => Digest::from_slice(&Sha256::digest(payload)),
        VllmAlgorithm::XxhashCbor => Digest::from_slice(&xxh3_128(payload).to_be_bytes()),
        VllmAlgorithm::LegacySha256Cbor64 => {
            let full = Digest::from_slice(&Sha256::digest(payload));
            Digest::from_slice(&full.id().to_be_bytes())
        }
    }
}

/// A vLLM chain fed incrementally; each block is hashed as soon as it is full. The pending
/// tokens and the CBOR buffer are allocated once and reused.
#[derive(Clone, Debug)]
pub struct VllmChain {
    hasher: VllmHasher,
    parent: Digest,
    first: bool,
    pending: Vec<u32>,
    buf: Vec<u8>,
    blocks: usize,
}

impl VllmChain {
    /// An empty chain (the next block is the sequence's first).
    pub fn new(hasher: VllmHasher) -> Self {
        let root = hasher.root;
        let mut chain = Self::resume(hasher, root, &[]);
        chain.first = true;
        chain
    }

    /// A chain continuing after a known prefix of at least one block, whose last full block has
    /// digest `parent`, with `pending` tokens after it.
    pub fn resume(hasher: VllmHasher, parent: Digest, pending: &[u32]) -> Self {
        let mut chain = VllmChain {
            pending: Vec::with_capacity(hasher.block_size),
            buf: Vec::new(),
            hasher,
            parent,
            first: false,
            blocks: 0,
        };
        chain.extend_digests(pending, |_| {});
        chain.blocks = 0;
        chain
    }

    /// The settings.
    pub fn hasher(&self) -> &VllmHasher {
        &self.hasher
    }

    /// Digest of the last full block (the root if there is none).
    pub fn parent(&self) -> Digest {
        self.parent
    }

    /// Blocks completed through this chain.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Appends tokens; calls `on_block` with each full block's digest, in order.
    pub fn extend_digests(&mut self, mut tokens: &[u32], mut on_block: impl FnMut(&Digest)) {
        let size = self.hasher.block_size;
        while !tokens.is_empty() {
            let block: &[u32] = if self.pending.is_empty() && tokens.len() >= size {
                let (block, rest) = tokens.split_at(size);
                tokens = rest;
                block
            } else {
                let take = (size - self.pending.len()).min(tokens.len());
                self.pending.extend_from_slice(&tokens[..take]);
                tokens = &tokens[take..];
                if self.pending.len() < size {
                    return;
                }
                &self.pending
            };
            self.parent = self.hasher.block_digest(&self.parent, block, self.first, &mut self.buf);
            self.first = false;
            self.blocks += 1;
            self.pending.clear();
            on_block(&self.parent);
        }
    }

    /// Appends tokens; calls `on_block` with each full block's published 64-bit id.
    pub fn extend(&mut self, tokens: &[u32], mut on_block: impl FnMut(u64)) {
        self.extend_digests(tokens, |d| on_block(d.id()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn id_is_the_low_64_bits() {
        let mut bytes = [0u8; 32];
        bytes[24..].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        assert_eq!(Digest::from_slice(&bytes).id(), 0x0102_0304_0506_0708);
    }

    #[test]
    fn cache_salt_changes_only_the_first_block_input() {
        let base = VllmHasher::new(VllmAlgorithm::Sha256Cbor, 2, "42").unwrap();
        let salted = base.clone().with_cache_salt("s");
        let tokens = [1, 2, 3, 4];
        let (a, b) = (base.hash(&tokens), salted.hash(&tokens));
        assert_ne!(a[0], b[0]);
        // Block 1 differs only through its parent.
        let mut buf = Vec::new();
        assert_eq!(b[1], base.block_digest(&b[0], &tokens[2..], false, &mut buf));
    }

    /// A digest prints as its hex bytes, in `Debug` as `Digest(...)` too.
    #[test]
    fn digests_print_as_hex() {
        let digest = Digest::from_slice(&[0x00, 0x1f, 0xa0, 0xff, 1, 2, 3, 4]);
        assert_eq!(format!("{digest:x}"), "001fa0ff01020304");
        assert_eq!(format!("{digest:?}"), "Digest(001fa0ff01020304)");
    }

    /// The accessors give back the settings a hasher was made with.
    #[test]
    fn a_hasher_keeps_its_settings() {
        for (algorithm, block_size) in
            [(VllmAlgorithm::Sha256Cbor, 16), (VllmAlgorithm::XxhashCbor, 3)]
        {
            let hasher = VllmHasher::new(algorithm, block_size, DEFAULT_HASH_SEED).unwrap();
            assert_eq!((hasher.algorithm(), hasher.block_size()), (algorithm, block_size));
        }
    }
}
