//! Latency quantiles of a simulation (its funnel is [`crate::funnel::Funnel`]).

use alloc::boxed::Box;
use alloc::vec;

/// Buckets per power of two (the relative error of a quantile is below half of one over
/// this).
const SUB_BUCKETS: u64 = 128;
const SUB_BITS: u32 = SUB_BUCKETS.trailing_zeros();

/// Quantiles of a stream of durations in ns, in constant memory: a log-linear histogram
/// (128 buckets per power of two, so a quantile is within 0.4% of the exact one).
#[derive(Clone, Debug, Default)]
pub(crate) struct Quantiles {
    counts: Option<Box<[u64]>>,
    total: u64,
}

fn bucket(value: u64) -> usize {
    if value < SUB_BUCKETS {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros();
    let shift = exponent - SUB_BITS;
    let mantissa = (value >> shift) - SUB_BUCKETS;
    ((u64::from(shift) + 1) * SUB_BUCKETS + mantissa) as usize
}

/// The middle of a bucket's values.
fn value_of(bucket: usize) -> f64 {
    let bucket = bucket as u64;
    if bucket < SUB_BUCKETS {
        return bucket as f64;
    }
    let shift = bucket / SUB_BUCKETS - 1;
    let low = (SUB_BUCKETS + bucket % SUB_BUCKETS) << shift;
    low as f64 + ((1u64 << shift) as f64 - 1.0) / 2.0
}

impl Quantiles {
    pub(crate) fn record(&mut self, value: u64) {
        let counts = self.counts.get_or_insert_with(|| vec![0; bucket(u64::MAX) + 1].into());
        counts[bucket(value)] += 1;
        self.total += 1;
    }

    /// The `q`-quantile (`0 <= q <= 1`): the value of rank `ceil(q * n)` (at least 1), or
    /// `None` when nothing was recorded.
    pub(crate) fn quantile(&self, q: f64) -> Option<f64> {
        let counts = self.counts.as_ref()?;
        let rank = (libm::ceil(q * self.total as f64) as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(value_of(b));
            }
        }
        None
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.counts.as_ref().map_or(0, |c| c.len() * size_of::<u64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    #[test]
    fn the_histogram_is_allocated_at_the_first_value() {
        let mut sketch = Quantiles::default();
        assert_eq!(sketch.heap_bytes(), 0);
        sketch.record(5);
        // A counter for every bucket up to the largest value's.
        assert_eq!(sketch.heap_bytes(), (bucket(u64::MAX) + 1) * size_of::<u64>());
    }

    #[test]
    fn each_bucket_reports_the_middle_of_its_values() {
        // Every value up to 2^16, grouped by bucket: small values have a bucket each, and a
        // bucket's value is the midpoint of the values it holds.
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for v in 0..1u64 << 16 {
            let b = bucket(v);
            if b == ranges.len() {
                ranges.push((v, v));
            }
            assert_eq!(b + 1, ranges.len(), "buckets follow the values' order");
            ranges[b].1 = v;
        }
        for (b, &(low, high)) in ranges.iter().enumerate() {
            if (b as u64) < SUB_BUCKETS {
                assert_eq!(low, high, "values below {SUB_BUCKETS} are exact");
            }
            assert_eq!(value_of(b), (low + high) as f64 / 2.0, "bucket {b}: {low}..={high}");
        }
    }

    proptest! {
        #[test]
        fn quantiles_are_within_their_precision(values in proptest::collection::vec(0u64..1 << 40, 1..300), q in 0.0f64..=1.0) {
            let mut sketch = Quantiles::default();
            for &v in &values {
                sketch.record(v);
            }
            let mut sorted: Vec<u64> = values.clone();
            sorted.sort_unstable();
            let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
            let exact = sorted[rank - 1] as f64;
            let got = sketch.quantile(q).unwrap();
            prop_assert!((got - exact).abs() <= exact / 256.0 + 0.5, "{} vs {}", got, exact);
        }
    }
}
