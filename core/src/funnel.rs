//! The cache-loss funnel, one vocabulary for the fleet simulation and the router library.
//!
//! Stages, in prompt tokens: **F0** the prompt; **F1** in leading blocks computed before (the
//! ceiling's history); **F2** cached on the best worker at routing; **F3** cached on the
//! selected worker at routing; **F4** found by the worker's lookup at admission; **F5**
//! reused. Each is a leading run of the prompt, counted raw: the stages need not shrink in
//! order. F2 exceeds F1 when a worker holds a prefix the history has not learned yet (a
//! request with the same prompt still running, a router restarted beside warm workers); F4
//! exceeds F3 when a request in flight cached blocks after routing, or an external tier holds
//! what the router's index does not.
//!
//! **Losses** are therefore not differences of stages (those go negative on such requests)
//! but charged token by token, within each request: a prompt token below F5 was reused; any
//! other is charged to the first stage, in funnel order, that it is not below. **cold** (not in
//! F1: never computed, or forgotten by the history), **retention** (in F1, but on no worker:
//! evicted everywhere), **routing** (held by the best worker, not by the one chosen), **race**
//! (on the chosen worker at routing, gone or not yet there at admission), **retrieval** (found,
//! not reused: an external tier's loss). So `reused + cold + retention + routing + race +
//! retrieval = F0` for every request, every loss at least 0, and sums of requests keep both.

/// The stages' names, F0 to F5 (metric label values).
pub const STAGES: [&str; 6] = ["f0", "f1", "f2", "f3", "f4", "f5"];

/// The losses' names, in funnel order (metric label values, JSON keys, table columns).
pub const LOSSES: [&str; 5] = ["cold", "retention", "routing", "race", "retrieval"];

/// The cache-loss funnel of a set of requests, in prompt tokens: the stages counted raw, the
/// losses request by request (see the [module docs](self)).
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The simple model: each token of the prompt, one at a time.
    fn charged_token_by_token(f: [u64; 6]) -> (u64, [u64; 5]) {
        let (mut reused, mut losses) = (0, [0u64; 5]);
        for p in 0..f[0] {
            if p < f[5] {
                reused += 1;
            } else if let Some(k) = (1..5).find(|&k| p >= f[k]) {
                losses[k - 1] += 1;
            } else {
                losses[4] += 1;
            }
        }
        (reused, losses)
    }

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
    fn every_token_is_reused_or_lost_once() {
        let f = Funnel::of_request([100, 80, 60, 40, 30, 30]);
        assert_eq!((f.cold, f.retention, f.routing, f.race, f.retrieval), (20, 20, 20, 10, 0));
        // A concurrent request cached more after routing: F4 above F3, no race.
        let f = Funnel::of_request([100, 80, 60, 40, 50, 50]);
        assert_eq!((f.cold, f.retention, f.routing, f.race), (20, 20, 10, 0));
    }

    proptest! {
        #[test]
        fn each_token_is_charged_as_the_model_charges_it(
            f0 in 0u64..300, stages in proptest::array::uniform5(0u64..400),
        ) {
            let mut f = [0u64; 6];
            f[0] = f0;
            f[1..].copy_from_slice(&stages);
            let funnel = Funnel::of_request(f);
            prop_assert_eq!((funnel.reused(), funnel.losses()), charged_token_by_token(f));
        }
    }
}
