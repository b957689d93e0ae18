//! Feeding a request's output in any chunking records the same output blocks, in the same
//! order (model: the output fed one token at a time).

use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::output::OutputTracker;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn any_chunking_records_the_same_blocks(
        block_size in 1usize..9,
        eagle in any::<bool>(),
        prompt in prop::collection::vec(0u32..50, 0..30),
        output in prop::collection::vec(0u32..50, 0..60),
        cuts in prop::collection::vec(0usize..60, 0..10),
    ) {
        let hasher = DynamoHasher::new(block_size).unwrap().with_eagle(eagle);
        let mut one_by_one = OutputTracker::new(hasher, &prompt);
        for token in &output {
            one_by_one.observe(0, std::slice::from_ref(token));
        }
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(output.len())).collect();
        cuts.extend([0, output.len()]);
        cuts.sort_unstable();
        let mut chunked = OutputTracker::new(hasher, &prompt);
        for w in cuts.windows(2) {
            chunked.observe(0, &output[w[0]..w[1]]);
        }
        prop_assert_eq!(chunked.recorded(), one_by_one.recorded());
        // Model: the chain of prompt + output, past the prompt's complete blocks, each block
        // recorded once a token follows its window (Eagle windows already include one).
        let total = prompt.len() + output.len();
        let whole = hasher.hash(&[prompt.as_slice(), output.as_slice()].concat()).sequence;
        let first = hasher.complete_blocks(prompt.len());
        let window = block_size + usize::from(eagle);
        let confirmed = (first..whole.len())
            .filter(|&i| eagle || i * block_size + window < total)
            .count();
        let want = if output.is_empty() { &[][..] } else { &whole[first..first + confirmed] };
        prop_assert_eq!(chunked.recorded(), want);
    }
}
