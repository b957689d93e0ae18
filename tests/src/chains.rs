//! Block-hash chains: hashing in one call equals feeding the same tokens in fuzzer-chosen
//! pieces, for every scheme and option.

use arbitrary::{Arbitrary, Unstructured};
use kvreuse_core::chain::{ChainSpec, Scheme};

#[derive(Arbitrary, Debug)]
struct Input {
    scheme: u8,
    block_size: u8,
    lora_name: Option<String>,
    cache_namespace: Option<String>,
    eagle: bool,
    hash_seed: Option<String>,
    cache_salt: Option<String>,
    tokens: Vec<u32>,
    cuts: Vec<u16>,
}

/// Checks one-shot against incremental hashing; also that ids are one per complete window.
pub fn chains(data: &[u8]) {
    let Ok(input) = Input::arbitrary(&mut Unstructured::new(data)) else { return };
    let scheme = Scheme::ALL[usize::from(input.scheme) % Scheme::ALL.len()];
    let spec = ChainSpec {
        scheme,
        // Block size 0 is a (checked) error; keep the rest small so blocks complete.
        block_size: usize::from(input.block_size % 33),
        lora_name: input.lora_name,
        cache_namespace: input.cache_namespace,
        eagle: input.eagle,
        hash_seed: input.hash_seed,
        cache_salt: input.cache_salt,
    };
    let tokens = &input.tokens;
    let whole = match spec.hash(tokens) {
        Ok(hashes) => hashes,
        Err(e) => {
            assert_eq!(spec.block_size, 0, "only a zero block size is invalid, got {e}");
            return;
        }
    };
    let mut chain = spec.build().expect("hash succeeded");
    let mut cuts: Vec<usize> =
        input.cuts.iter().map(|&c| usize::from(c).min(tokens.len())).collect();
    cuts.extend([0, tokens.len()]);
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    for w in cuts.windows(2) {
        chain.extend(&tokens[w[0]..w[1]], |id| pieces.push(id));
    }
    assert_eq!(pieces, whole.sequence, "{spec:?}");
    assert_eq!(chain.blocks(), whole.sequence.len());
    let window = spec.block_size + usize::from(spec.eagle && scheme == Scheme::Dynamo);
    let complete =
        if tokens.len() < window { 0 } else { (tokens.len() - window) / spec.block_size + 1 };
    assert_eq!(whole.sequence.len(), complete, "one id per complete window: {spec:?}");
}
