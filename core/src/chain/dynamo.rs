//! NVIDIA Dynamo's KV-router block hashes.
//!
//! The recipe, exactly as `dynamo-kv-router` 1.6 computes it:
//!
//! - **Seed**: `1337`. A non-empty LoRA adapter name adds `xxh3_64_with_seed(name_utf8, 0)`, a
//!   non-empty cache namespace adds `xxh3_64_with_seed(namespace_utf8, 1)` (wrapping adds).
//! - **Windows**: `block_size` tokens with stride `block_size`; in Eagle mode (speculative
//!   decoding) `block_size + 1` tokens with stride `block_size`, so consecutive windows share
//!   one token. A window that is not complete is never hashed.
//! - **Local hash**: `xxh3_64_with_seed(bytes, seed)` where `bytes` are the window's token ids as
//!   `u32` little-endian, followed, for multimodal blocks, by the block's object hashes sorted
//!   ascending as `u64` little-endian.
//! - **Sequence hash**: `seq[0] = local[0]` and
//!   `seq[i] = xxh3_64_with_seed(le(seq[i - 1]) ++ le(local[i]), 1337)`.
//!
//! On little-endian targets the token slice is hashed in place (no copy); big-endian targets
//! stream the converted bytes. [`DynamoChain`] continues a chain from any known parent, which
//! is how generated tokens extend a prompt's chain.

use alloc::vec::Vec;

use xxhash_rust::xxh3::{Xxh3, xxh3_64_with_seed};

use super::{BlockHash, BlockHashes, ChainError, check_block_size};

/// The base seed of every Dynamo hash, and the seed of every chain step.
pub const BASE_SEED: u64 = 1337;

/// The sequence hash of a block whose parent has sequence hash `parent` (`None` for the first
/// block) and whose own content hashes to `local`.
#[inline]
pub fn sequence_hash(parent: Option<u64>, local: u64) -> u64 {
    match parent {
        None => local,
        Some(parent) => {
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&parent.to_le_bytes());
            bytes[8..].copy_from_slice(&local.to_le_bytes());
            xxh3_64_with_seed(&bytes, BASE_SEED)
        }
    }
}

/// XXH3-64 of `tokens` as little-endian `u32` bytes.
#[inline]
fn hash_tokens(tokens: &[u32], seed: u64) -> u64 {
    if cfg!(target_endian = "little") {
        // A `u32` slice already is its little-endian byte string.
        xxh3_64_with_seed(bytemuck::cast_slice(tokens), seed)
    } else {
        hash_tokens_portable(tokens, seed)
    }
}

/// The byte-order independent form of [`hash_tokens`], used on big-endian targets and checked
/// against the fast form in tests.
fn hash_tokens_portable(tokens: &[u32], seed: u64) -> u64 {
    let mut h = Xxh3::with_seed(seed);
    for t in tokens {
        h.update(&t.to_le_bytes());
    }
    h.digest()
}

/// The settings of a Dynamo chain: block size, seed (from LoRA name and cache namespace) and
/// window shape. Cheap to copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DynamoHasher {
    block_size: usize,
    lora_term: u64,
    namespace_term: u64,
    eagle: bool,
}

impl DynamoHasher {
    /// A hasher for blocks of `block_size` tokens, base model, no namespace, no Eagle.
    pub fn new(block_size: usize) -> Result<Self, ChainError> {
        check_block_size(block_size)?;
        Ok(DynamoHasher { block_size, lora_term: 0, namespace_term: 0, eagle: false })
    }

    /// Sets the LoRA adapter name; the empty string means the base model.
    pub fn with_lora_name(mut self, name: &str) -> Self {
        self.lora_term = if name.is_empty() { 0 } else { xxh3_64_with_seed(name.as_bytes(), 0) };
        self
    }

    /// Sets the cache namespace; the empty string means none.
    pub fn with_cache_namespace(mut self, namespace: &str) -> Self {
        self.namespace_term =
            if namespace.is_empty() { 0 } else { xxh3_64_with_seed(namespace.as_bytes(), 1) };
        self
    }

    /// Turns Eagle windows (`block_size + 1` tokens, stride `block_size`) on or off.
    pub fn with_eagle(mut self, eagle: bool) -> Self {
        self.eagle = eagle;
        self
    }

    /// Tokens per block (the stride between windows).
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Whether Eagle windows are used.
    pub fn is_eagle(&self) -> bool {
        self.eagle
    }

    /// Tokens hashed per block: `block_size`, or `block_size + 1` in Eagle mode.
    pub fn window_len(&self) -> usize {
        self.block_size + usize::from(self.eagle)
    }

    /// The seed of the local hashes: 1337 plus the LoRA and namespace terms.
    pub fn seed(&self) -> u64 {
        BASE_SEED.wrapping_add(self.lora_term).wrapping_add(self.namespace_term)
    }

    /// Number of complete blocks in a sequence of `tokens` tokens.
    pub fn complete_blocks(&self, tokens: usize) -> usize {
        if tokens < self.window_len() {
            0
        } else {
            (tokens - self.window_len()) / self.block_size + 1
        }
    }

    /// The local hash of one window (exactly [`window_len`](Self::window_len) tokens).
    #[inline]
    pub fn local_hash(&self, window: &[u32]) -> u64 {
        hash_tokens(window, self.seed())
    }

    /// The local hash of one window carrying multimodal objects; `mm_hashes` in any order.
    pub fn local_hash_multimodal(&self, window: &[u32], mm_hashes: &[u64]) -> u64 {
        if mm_hashes.is_empty() {
            return self.local_hash(window);
        }
        let mut sorted: Vec<u64> = mm_hashes.to_vec();
        sorted.sort_unstable();
        let mut h = Xxh3::with_seed(self.seed());
        for t in window {
            h.update(&t.to_le_bytes());
        }
        for m in &sorted {
            h.update(&m.to_le_bytes());
        }
        h.digest()
    }

    /// The complete windows of `tokens`, in order.
    pub fn windows<'a>(&self, tokens: &'a [u32]) -> impl Iterator<Item = &'a [u32]> + 'a {
        let (window, stride) = (self.window_len(), self.block_size);
        let blocks = self.complete_blocks(tokens.len());
        (0..blocks).map(move |i| &tokens[i * stride..i * stride + window])
    }

    /// Hashes a whole token sequence from the empty prefix.
    pub fn hash(&self, tokens: &[u32]) -> BlockHashes {
        let blocks = self.complete_blocks(tokens.len());
        let mut out = BlockHashes::with_capacity(blocks);
        let mut parent = None;
        for window in self.windows(tokens) {
            let local = self.local_hash(window);
            let sequence = sequence_hash(parent, local);
            out.push_dynamo(BlockHash { local, sequence });
            parent = Some(sequence);
        }
        out
    }

    /// Appends the sequence hashes (block ids) of `tokens` to `ids`, from the empty prefix.
    pub fn sequence_hashes_into(&self, tokens: &[u32], ids: &mut Vec<u64>) {
        ids.reserve(self.complete_blocks(tokens.len()));
        let mut parent = None;
        for window in self.windows(tokens) {
            let sequence = sequence_hash(parent, self.local_hash(window));
            ids.push(sequence);
            parent = Some(sequence);
        }
    }

    /// Hashes a multimodal sequence: `mm_per_block[i]` lists the object hashes of block `i`
    /// (`None` or empty for a text-only block); blocks past the end of the list are text-only.
    /// The list may run to the partial last block, as Dynamo's `to_block_level` makes it (one
    /// entry per `block_size` tokens, rounded up); entries of blocks that are not complete are
    /// not hashed. More entries than that is an error.
    pub fn hash_multimodal(
        &self,
        tokens: &[u32],
        mm_per_block: &[Option<Vec<u64>>],
    ) -> Result<BlockHashes, ChainError> {
        let spanned = tokens.len().div_ceil(self.block_size);
        if mm_per_block.len() > spanned {
            let given = mm_per_block.len();
            return Err(ChainError::MultimodalBlocksMismatch { given, blocks: spanned });
        }
        let blocks = self.complete_blocks(tokens.len());
        let mut out = BlockHashes::with_capacity(blocks);
        let mut parent = None;
        for (i, window) in self.windows(tokens).enumerate() {
            let mm = mm_per_block.get(i).and_then(Option::as_deref).unwrap_or(&[]);
            let local = self.local_hash_multimodal(window, mm);
            let sequence = sequence_hash(parent, local);
            out.push_dynamo(BlockHash { local, sequence });
            parent = Some(sequence);
        }
        Ok(out)
    }
}

/// A Dynamo chain fed incrementally: tokens arrive in chunks of any size, each block is hashed
/// as soon as its window is complete. Holds at most one window of pending tokens; its buffer
/// is allocated once, so feeding does not allocate per block.
#[derive(Clone, Debug)]
pub struct DynamoChain {
    hasher: DynamoHasher,
    parent: Option<u64>,
    pending: Vec<u32>,
    blocks: usize,
}

impl DynamoChain {
    /// An empty chain.
    pub fn new(hasher: DynamoHasher) -> Self {
        Self::resume(hasher, None, &[])
    }

    /// A chain continuing after a known prefix: `parent` is the sequence hash of the prefix's
    /// last complete block (`None` if it has none) and `pending` its tokens after that block
    /// (the partial tail; in Eagle mode, including the token shared with the next window).
    /// Tokens beyond one window are hashed at once, as if fed through [`extend`](Self::extend).
    pub fn resume(hasher: DynamoHasher, parent: Option<u64>, pending: &[u32]) -> Self {
        let mut chain = DynamoChain {
            hasher,
            parent,
            pending: Vec::with_capacity(hasher.window_len()),
            blocks: 0,
        };
        chain.extend(pending, |_| {});
        chain.blocks = 0;
        chain
    }

    /// The settings.
    pub fn hasher(&self) -> &DynamoHasher {
        &self.hasher
    }

    /// Sequence hash of the last complete block, if any.
    pub fn parent(&self) -> Option<u64> {
        self.parent
    }

    /// Tokens received after the last complete block's stride.
    pub fn pending(&self) -> &[u32] {
        &self.pending
    }

    /// Blocks completed through this chain (not counting a resumed prefix).
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    #[inline]
    fn emit(&mut self, window: &[u32], on_block: &mut impl FnMut(BlockHash)) {
        let local = self.hasher.local_hash(window);
        let sequence = sequence_hash(self.parent, local);
        self.parent = Some(sequence);
        self.blocks += 1;
        on_block(BlockHash { local, sequence });
    }

    /// Appends tokens; calls `on_block` for each block they complete, in order.
    pub fn extend(&mut self, mut tokens: &[u32], mut on_block: impl FnMut(BlockHash)) {
        let (window, stride) = (self.hasher.window_len(), self.hasher.block_size);
        // Finish a window started by an earlier call.
        while !self.pending.is_empty() && !tokens.is_empty() {
            let take = (window - self.pending.len()).min(tokens.len());
            self.pending.extend_from_slice(&tokens[..take]);
            tokens = &tokens[take..];
            if self.pending.len() < window {
                return;
            }
            let full = core::mem::take(&mut self.pending);
            self.emit(&full, &mut on_block);
            self.pending = full;
            // Keep the token an Eagle window shares with the next one.
            self.pending.drain(..stride);
        }
        // Whole windows straight from the caller's slice.
        while tokens.len() >= window {
            self.emit(&tokens[..window], &mut on_block);
            tokens = &tokens[stride..];
        }
        self.pending.extend_from_slice(tokens);
    }
}

impl BlockHashes {
    fn with_capacity(blocks: usize) -> Self {
        BlockHashes {
            local: Vec::with_capacity(blocks),
            sequence: Vec::with_capacity(blocks),
            digests: Vec::new(),
        }
    }

    fn push_dynamo(&mut self, block: BlockHash) {
        self.local.push(block.local);
        self.sequence.push(block.sequence);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_token_bytes_match_the_in_place_form() {
        let tokens: Vec<u32> = (0..100u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        for len in [0, 1, 15, 16, 17, 100] {
            assert_eq!(
                hash_tokens(&tokens[..len], 1337),
                hash_tokens_portable(&tokens[..len], 1337)
            );
        }
    }

    #[test]
    fn complete_blocks_counts_whole_windows_only() {
        let plain = DynamoHasher::new(16).unwrap();
        let eagle = plain.with_eagle(true);
        for (tokens, p, e) in
            [(0, 0, 0), (15, 0, 0), (16, 1, 0), (17, 1, 1), (32, 2, 1), (33, 2, 2)]
        {
            assert_eq!(plain.complete_blocks(tokens), p, "plain {tokens}");
            assert_eq!(eagle.complete_blocks(tokens), e, "eagle {tokens}");
        }
    }

    #[test]
    fn zero_block_size_is_rejected() {
        assert_eq!(DynamoHasher::new(0), Err(ChainError::ZeroBlockSize));
    }

    #[test]
    fn resume_continues_the_same_chain() {
        let h = DynamoHasher::new(4).unwrap();
        let tokens: Vec<u32> = (0..23).collect();
        let whole = h.hash(&tokens).sequence;
        // Resume after 2 blocks plus a partial tail of 3 tokens.
        let mut chain = DynamoChain::resume(h, Some(whole[1]), &tokens[8..11]);
        let mut rest = Vec::new();
        chain.extend(&tokens[11..], |b| rest.push(b.sequence));
        assert_eq!(rest, whole[2..]);
    }

    #[test]
    fn multimodal_hashes_are_order_independent_and_change_the_block() {
        let h = DynamoHasher::new(4).unwrap();
        let tokens = [1, 2, 3, 4, 5, 6, 7, 8];
        let a = h.hash_multimodal(&tokens, &[None, Some(alloc::vec![9, 3])]).unwrap();
        let b =
            h.hash_multimodal(&tokens, &[Some(alloc::vec![]), Some(alloc::vec![3, 9])]).unwrap();
        let plain = h.hash(&tokens);
        assert_eq!(a, b);
        assert_eq!(a.local[0], plain.local[0]);
        assert_ne!(a.local[1], plain.local[1]);
        assert_eq!(
            h.hash_multimodal(&tokens, &[None, None, None]),
            Err(ChainError::MultimodalBlocksMismatch { given: 3, blocks: 2 })
        );
        // An entry for the partial last block, as Dynamo's per-block list has one, is not
        // hashed: the complete blocks' ids are as without it.
        let longer = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let with_tail = [None, Some(alloc::vec![9, 3]), Some(alloc::vec![5])];
        assert_eq!(h.hash_multimodal(&longer, &with_tail), Ok(a));
        assert_eq!(
            h.hash_multimodal(&longer, &[None, None, None, None]),
            Err(ChainError::MultimodalBlocksMismatch { given: 4, blocks: 3 })
        );
    }

    /// Eagle mode is kept and widens the window by one token.
    #[test]
    fn eagle_windows_are_one_token_wider() {
        let plain = DynamoHasher::new(16).unwrap();
        let eagle = plain.with_eagle(true);
        assert_eq!((plain.is_eagle(), plain.window_len()), (false, 16));
        assert_eq!((eagle.is_eagle(), eagle.window_len(), eagle.block_size()), (true, 17, 16));
    }

    /// A chain's parent is the last complete block's sequence hash, whatever the chunks.
    #[test]
    fn the_parent_is_the_last_complete_block() {
        let h = DynamoHasher::new(4).unwrap();
        let tokens: Vec<u32> = (0..19).collect();
        let whole = h.hash(&tokens).sequence;
        let mut chain = DynamoChain::new(h);
        assert_eq!(chain.parent(), None);
        for (end, blocks) in [(3, 0), (4, 1), (11, 2), (19, 4)] {
            let start = chain.blocks() * 4 + chain.pending().len();
            chain.extend(&tokens[start..end], |_| {});
            assert_eq!(chain.blocks(), blocks);
            assert_eq!(chain.parent(), blocks.checked_sub(1).map(|b| whole[b]), "after {end}");
        }
    }
}
