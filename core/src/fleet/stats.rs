//! What a simulation counts: the cache-loss funnel in tokens, and latency quantiles.

use alloc::boxed::Box;
use alloc::vec;

/// The cache-loss funnel of a set of requests, in prompt tokens.
///
/// Stages: F0 prompt tokens; F1 in leading blocks computed before (the ceiling's history);
/// F2 cached on the best worker at routing; F3 cached on the selected worker at routing; F4
/// found by the worker's lookup at admission; F5 reused. Each stage is counted raw (F4 may
/// exceed F3 when a request in flight cached blocks after routing).
///
/// Losses charge each prompt token that was not reused to the first stage it missed: **cold**
/// (not in F1: never computed, or forgotten by the history), **retention** (in F1, but no
/// worker holds it: evicted everywhere), **routing** (held by the best worker, not the one
/// chosen), **race** (on the chosen worker at routing, gone or not yet there at admission),
/// **retrieval** (found, not reused: an external tier's loss, none in simulation). So
/// `reused + cold + retention + routing + race + retrieval = F0`, request by request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Funnel {
    /// Prompt tokens.
    pub f0: u64,
    /// In leading blocks computed before.
    pub f1: u64,
    /// Cached on the best worker at routing.
    pub f2: u64,
    /// Cached on the selected worker at routing.
    pub f3: u64,
    /// Found by the worker's lookup at admission.
    pub f4: u64,
    /// Reused.
    pub f5: u64,
    /// Not in F1.
    pub cold: u64,
    /// In F1, not in F2.
    pub retention: u64,
    /// In F2, not in F3.
    pub routing: u64,
    /// In F3, not in F4.
    pub race: u64,
    /// In F4, not in F5.
    pub retrieval: u64,
}

impl Funnel {
    /// One request's funnel from its stages in tokens (`f[0]` = F0, ..., `f[5]` = F5), each
    /// a leading run of its prompt, so at most F0.
    pub fn of_request(f: [u64; 6]) -> Funnel {
        let f0 = f[0];
        let [f1, f2, f3, f4, f5] = [f[1], f[2], f[3], f[4], f[5]].map(|s| s.min(f0));
        // Token `p` was reused iff `p < F5`; else it is charged to the first stage it is not
        // below, in funnel order.
        let span = |from: u64, to: u64| to.saturating_sub(from);
        Funnel {
            f0,
            f1,
            f2,
            f3,
            f4,
            f5,
            cold: span(f1.max(f5), f0),
            retention: span(f2.max(f5), f1),
            routing: span(f3.max(f5), f1.min(f2)),
            race: span(f4.max(f5), f1.min(f2).min(f3)),
            retrieval: span(f5, f1.min(f2).min(f3).min(f4)),
        }
    }

    /// Tokens reused (F5).
    pub fn reused(&self) -> u64 {
        self.f5
    }

    /// Adds another funnel's counts.
    pub fn add(&mut self, other: &Funnel) {
        self.f0 += other.f0;
        self.f1 += other.f1;
        self.f2 += other.f2;
        self.f3 += other.f3;
        self.f4 += other.f4;
        self.f5 += other.f5;
        self.cold += other.cold;
        self.retention += other.retention;
        self.routing += other.routing;
        self.race += other.race;
        self.retrieval += other.retrieval;
    }

    /// The losses, in funnel order: cold, retention, routing, race, retrieval.
    pub fn losses(&self) -> [u64; 5] {
        [self.cold, self.retention, self.routing, self.race, self.retrieval]
    }
}

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
    fn funnels_add_up_stage_by_stage() {
        let one = Funnel {
            f0: 9,
            f1: 8,
            f2: 7,
            f3: 6,
            f4: 5,
            f5: 4,
            cold: 1,
            retention: 1,
            routing: 1,
            race: 1,
            retrieval: 1,
        };
        let mut sum = one;
        sum.add(&one);
        let stages = |f: &Funnel| {
            [
                f.f0,
                f.f1,
                f.f2,
                f.f3,
                f.f4,
                f.f5,
                f.cold,
                f.retention,
                f.routing,
                f.race,
                f.retrieval,
            ]
        };
        assert_eq!(stages(&sum), stages(&one).map(|v| 2 * v));
    }

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

    #[test]
    fn every_token_is_reused_or_lost_once() {
        let f = Funnel::of_request([100, 80, 60, 40, 30, 30]);
        assert_eq!((f.cold, f.retention, f.routing, f.race, f.retrieval), (20, 20, 20, 10, 0));
        // A concurrent request cached more after routing: F4 above F3, no race.
        let f = Funnel::of_request([100, 80, 60, 40, 50, 50]);
        assert_eq!((f.cold, f.retention, f.routing, f.race), (20, 20, 10, 0));
    }

    proptest! {
        #[test]
        fn losses_and_reuse_add_up_to_the_prompt(
            f0 in 0u64..1000, stages in proptest::array::uniform5(0u64..1200),
        ) {
            let mut f = [0u64; 6];
            f[0] = f0;
            f[1..].copy_from_slice(&stages);
            let funnel = Funnel::of_request(f);
            prop_assert_eq!(funnel.reused() + funnel.losses().iter().sum::<u64>(), f0);
        }

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
