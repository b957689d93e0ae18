//! Hashing a sequence in one call equals feeding it in arbitrary pieces, for every scheme and
//! option (model: the one-shot recompute).

use kvreuse_core::chain::{BlockChain, ChainSpec, Scheme};
use proptest::prelude::*;

fn spec() -> impl Strategy<Value = ChainSpec> {
    (
        prop::sample::select(Scheme::ALL.to_vec()),
        1usize..20,
        prop::option::of("[a-z]{0,4}"),
        prop::option::of("[a-z]{0,4}"),
        any::<bool>(),
        prop::option::of("[0-9]{1,3}"),
        prop::option::of("[a-z]{0,3}"),
    )
        .prop_map(|(scheme, block_size, lora, ns, eagle, seed, salt)| ChainSpec {
            scheme,
            block_size,
            lora_name: lora,
            cache_namespace: ns,
            eagle,
            hash_seed: seed,
            cache_salt: salt,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn one_call_equals_any_split(
        spec in spec(),
        tokens in prop::collection::vec(any::<u32>(), 0..200),
        cuts in prop::collection::vec(0usize..200, 0..12),
    ) {
        let whole = spec.hash(&tokens).unwrap().sequence;
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(tokens.len())).collect();
        cuts.push(0);
        cuts.push(tokens.len());
        cuts.sort_unstable();
        let mut chain: BlockChain = spec.build().unwrap();
        let mut pieces = Vec::new();
        for w in cuts.windows(2) {
            chain.extend(&tokens[w[0]..w[1]], |id| pieces.push(id));
        }
        prop_assert_eq!(chain.blocks(), whole.len());
        prop_assert_eq!(pieces, whole);
    }
}
