//! Dynamo-scheme block hashing throughput: kvreuse against the published `dynamo-tokens`
//! crate's `TokenBlockSequence` (same seed, same ids), in the same run.
//!
//! Varies the block size (16, 64, 512 tokens) over one 8,192-token prompt. Throughput is in
//! prompt tokens. `dynamo-tokens` takes its tokens by value, so its copy is made in the
//! untimed setup.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use dynamo_tokens::{TokenBlockSequence, Tokens};
use kvreuse_benches::SplitMix64;
use kvreuse_core::chain::DynamoHasher;
use std::hint::black_box;

const PROMPT_TOKENS: usize = 8192;

fn block_hashing(c: &mut Criterion) {
    let tokens = SplitMix64::new(7).tokens(PROMPT_TOKENS);
    for block_size in [16usize, 64, 512] {
        let hasher = DynamoHasher::new(block_size).unwrap();
        // Both sides must produce the same ids, or the comparison means nothing.
        let reference =
            TokenBlockSequence::new(Tokens::from(tokens.clone()), block_size as u32, Some(1337));
        let theirs: Vec<u64> = reference.blocks().iter().map(|b| b.sequence_hash()).collect();
        assert_eq!(hasher.hash(&tokens).sequence, theirs, "block size {block_size}");

        let mut group = c.benchmark_group(format!("dynamo_hash/block_{block_size}"));
        group.throughput(Throughput::Elements(PROMPT_TOKENS as u64));
        group.bench_function("kvreuse", |b| b.iter(|| hasher.hash(black_box(&tokens))));
        group.bench_function("dynamo-tokens", |b| {
            b.iter_batched(
                || Tokens::from(tokens.clone()),
                |t| TokenBlockSequence::new(black_box(t), block_size as u32, Some(1337)),
                BatchSize::SmallInput,
            );
        });
        group.finish();
    }
}

criterion_group!(benches, block_hashing);
criterion_main!(benches);
