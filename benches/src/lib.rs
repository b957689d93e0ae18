//! Shared pieces of the kvreuse benchmarks: deterministic inputs, and faithful replicas of the
//! baselines that are measured in the same run as kvreuse.

/// A deterministic stream of pseudo-random values (SplitMix64), so every run and every
/// contender sees the same inputs.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `n` token ids below a 152k vocabulary, as a real tokenizer would produce.
    pub fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| (self.next_u64() % 152_064) as u32).collect()
    }
}

pub mod reference_history;
