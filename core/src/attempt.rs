//! The accounting of one routed request, exactly once: begun, then complete or incomplete.
//!
//! At [`begin`](Attempt::begin) the prompt's leading run of present blocks is measured (by the
//! caller, against its history) and the observed input tokens grow by the prompt. Then
//! exactly one of:
//!
//! - [`complete`](Attempt::complete): F0 grows by the prompt tokens, F1 by the seen tokens
//!   (seen blocks times the block size), one complete observation is counted, and the prompt's
//!   and the output's block ids are handed back for the history to learn;
//! - [`incomplete`](Attempt::incomplete) (aborted, cancelled, dropped): one incomplete
//!   observation is counted, and nothing else.
//!
//! Both take `self`, so an attempt cannot end twice. The counts go to a [`Ledger`]: a plain
//! [`Tally`] here, Prometheus counters in the native crate; the rules are the same code.
//!
//! **The rest of the funnel**: on the way, the attempt may be given the router's view when it
//! chose a worker ([`observe_route`](Attempt::observe_route): F2 and F3) and the worker's
//! report ([`observe_worker`](Attempt::observe_worker): F4 and F5), each at most once. When it
//! ends, it is counted in exactly one [`FunnelResult`]: `observed` when it completed with a
//! route and an accepted report (only then are its F0-F5 added to the funnel, so every stage
//! counts the same population and any two divide meaningfully), `prompt_mismatch` when a report
//! was refused for counting another prompt, `no_route`, `no_report`, or `incomplete` when it did
//! not complete (whatever evidence it had). Values above the prompt are clamped to it and the
//! clamping is counted per stage. The stages are kept as the evidence gave them, which need not
//! shrink in order (a worker may hold a prefix the history has not learned yet); the losses
//! are charged token by token, as the [`funnel`](crate::funnel) module says, so none is ever
//! negative.

use alloc::vec::Vec;

use crate::funnel::Funnel;
use crate::output::OutputTracker;
use crate::report::{ReportError, Route, WorkerReport};

/// Where an attempt's counts go.
pub trait Ledger {
    /// An attempt began with a prompt of `prompt_tokens`.
    fn begun(&mut self, prompt_tokens: u64);
    /// An attempt completed: F0 grows by `f0_tokens`, F1 by `f1_tokens`.
    fn completed(&mut self, f0_tokens: u64, f1_tokens: u64);
    /// An attempt ended without completing.
    fn ended_incomplete(&mut self);
    /// An ended attempt's place in the funnel (every ended attempt exactly once).
    fn funnel(&mut self, outcome: &FunnelOutcome);
}

/// How an ended attempt counts in the funnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunnelResult {
    /// Completed with a route and an accepted worker report: its stages are counted.
    Observed,
    /// Completed without the router's route evidence.
    NoRoute,
    /// Completed without a worker report.
    NoReport,
    /// Completed, but its worker report counted another prompt and was refused.
    PromptMismatch,
    /// Did not complete.
    Incomplete,
}

impl FunnelResult {
    /// Every result, in the order metrics list them.
    pub const ALL: [FunnelResult; 5] = [
        FunnelResult::Observed,
        FunnelResult::NoRoute,
        FunnelResult::NoReport,
        FunnelResult::PromptMismatch,
        FunnelResult::Incomplete,
    ];

    /// The result's label value.
    pub const fn name(self) -> &'static str {
        match self {
            FunnelResult::Observed => "observed",
            FunnelResult::NoRoute => "no_route",
            FunnelResult::NoReport => "no_report",
            FunnelResult::PromptMismatch => "prompt_mismatch",
            FunnelResult::Incomplete => "incomplete",
        }
    }
}

pub use crate::funnel::{LOSSES, STAGES};

/// An ended attempt's funnel evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunnelOutcome {
    /// How it counts.
    pub result: FunnelResult,
    /// F0 to F5 in tokens (meaningful when observed), each at most F0.
    pub stages: [u64; 6],
    /// Which stages were clamped to F0.
    pub clamped: [bool; 6],
    /// The prompt tokens not reused, charged to the first stage each missed, in [`LOSSES`]'
    /// order ([`Funnel::of_request`] of the stages): with F5 they add up to F0.
    pub losses: [u64; 5],
}

/// Counts over many attempts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Prompt tokens of every begun attempt.
    pub input_tokens: u64,
    /// F0: prompt tokens of completed attempts.
    pub f0_tokens: u64,
    /// F1: tokens in the leading present blocks of completed attempts.
    pub f1_tokens: u64,
    /// Completed attempts.
    pub complete: u64,
    /// Attempts that ended without completing.
    pub incomplete: u64,
    /// F0 to F5 of observed attempts.
    pub funnel: [u64; 6],
    /// The losses of observed attempts, in [`LOSSES`]' order.
    pub losses: [u64; 5],
    /// Ended attempts per [`FunnelResult`], in [`FunnelResult::ALL`]'s order.
    pub results: [u64; 5],
    /// Observed attempts whose stage was clamped to the prompt, per stage.
    pub clamped: [u64; 6],
}

impl Tally {
    /// Attempts that have ended.
    pub fn observations(&self) -> u64 {
        self.complete + self.incomplete
    }
}

impl Ledger for Tally {
    fn begun(&mut self, prompt_tokens: u64) {
        self.input_tokens += prompt_tokens;
    }

    fn completed(&mut self, f0_tokens: u64, f1_tokens: u64) {
        self.f0_tokens += f0_tokens;
        self.f1_tokens += f1_tokens;
        self.complete += 1;
    }

    fn ended_incomplete(&mut self) {
        self.incomplete += 1;
    }

    fn funnel(&mut self, outcome: &FunnelOutcome) {
        let at = FunnelResult::ALL.iter().position(|&r| r == outcome.result).unwrap_or(0);
        self.results[at] += 1;
        if outcome.result == FunnelResult::Observed {
            for k in 0..6 {
                self.funnel[k] += outcome.stages[k];
                self.clamped[k] += u64::from(outcome.clamped[k]);
            }
            for (sum, loss) in self.losses.iter_mut().zip(outcome.losses) {
                *sum += loss;
            }
        }
    }
}

/// One request in flight. See the [module docs](self).
#[derive(Debug)]
#[must_use = "an attempt must end with `complete` or `incomplete`"]
pub struct Attempt {
    prompt_tokens: u64,
    seen_tokens: u64,
    prompt_ids: Vec<u64>,
    output: Option<OutputTracker>,
    route: Option<Route>,
    report: Option<WorkerReport>,
    /// A report was refused for counting another prompt.
    mismatch: bool,
}

/// What a completed attempt teaches the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The prompt's block ids, then the recorded output block ids.
    pub ids: Vec<u64>,
}

impl Attempt {
    /// Begins an attempt for a prompt of `prompt_tokens` tokens whose complete blocks have
    /// `prompt_ids`, of which the first `seen_blocks` were present in the history; output
    /// blocks are tracked when `output` is given.
    pub fn begin(
        ledger: &mut (impl Ledger + ?Sized),
        prompt_tokens: u64,
        prompt_ids: Vec<u64>,
        seen_blocks: usize,
        block_size: usize,
        output: Option<OutputTracker>,
    ) -> Attempt {
        ledger.begun(prompt_tokens);
        let seen_tokens = (seen_blocks.min(prompt_ids.len()) as u64)
            .saturating_mul(block_size as u64)
            .min(prompt_tokens);
        Attempt {
            prompt_tokens,
            seen_tokens,
            prompt_ids,
            output,
            route: None,
            report: None,
            mismatch: false,
        }
    }

    /// Records what the router saw when it chose the worker. A second route is refused
    /// (the first stands).
    pub fn observe_route(&mut self, route: Route) -> Result<(), ReportError> {
        if self.route.is_some() {
            return Err(ReportError::Duplicate("route"));
        }
        self.route = Some(route);
        Ok(())
    }

    /// Records the worker's report. Refused: a second report (or one after a refused one),
    /// and a report of another prompt (the attempt then counts as `prompt_mismatch`).
    pub fn observe_worker(&mut self, report: WorkerReport) -> Result<(), ReportError> {
        if self.report.is_some() || self.mismatch {
            return Err(ReportError::Duplicate("worker report"));
        }
        if report.prompt_tokens != self.prompt_tokens {
            self.mismatch = true;
            return Err(ReportError::PromptMismatch {
                prompt_tokens: self.prompt_tokens,
                reported: report.prompt_tokens,
            });
        }
        self.report = Some(report);
        Ok(())
    }

    /// The funnel evidence of the attempt as it ends, `completed` or not.
    fn outcome(&self, completed: bool) -> FunnelOutcome {
        let f0 = self.prompt_tokens;
        let route = self.route.unwrap_or_default();
        let report = self.report.unwrap_or_default();
        let raw = [
            f0,
            self.seen_tokens,
            route.best_cached_tokens,
            route.selected_cached_tokens,
            report.found_tokens(),
            report.reused_tokens(),
        ];
        let result = match (completed, self.route, self.report) {
            (false, ..) => FunnelResult::Incomplete,
            (true, _, _) if self.mismatch => FunnelResult::PromptMismatch,
            (true, None, _) => FunnelResult::NoRoute,
            (true, Some(_), None) => FunnelResult::NoReport,
            (true, Some(_), Some(_)) => FunnelResult::Observed,
        };
        let stages = raw.map(|v| v.min(f0));
        let losses = Funnel::of_request(stages).losses();
        FunnelOutcome { result, stages, clamped: raw.map(|v| v > f0), losses }
    }

    /// Prompt tokens.
    pub fn prompt_tokens(&self) -> u64 {
        self.prompt_tokens
    }

    /// Tokens in the leading present blocks, measured at begin (F1 if it completes).
    pub fn seen_tokens(&self) -> u64 {
        self.seen_tokens
    }

    /// Feeds generated tokens of choice `index` to the output tracker (if any).
    pub fn observe_output(&mut self, index: u32, tokens: &[u32]) {
        if let Some(output) = &mut self.output {
            output.observe(index, tokens);
        }
    }

    /// Ends the attempt as complete; returns the ids for the history to learn.
    pub fn complete(self, ledger: &mut (impl Ledger + ?Sized)) -> Completion {
        ledger.completed(self.prompt_tokens, self.seen_tokens);
        ledger.funnel(&self.outcome(true));
        let mut ids = self.prompt_ids;
        if let Some(mut output) = self.output {
            ids.extend(output.take_recorded());
        }
        Completion { ids }
    }

    /// Ends the attempt as incomplete.
    pub fn incomplete(self, ledger: &mut (impl Ledger + ?Sized)) {
        ledger.ended_incomplete();
        ledger.funnel(&self.outcome(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::DynamoHasher;
    use alloc::vec;

    #[test]
    fn complete_counts_f0_f1_and_hands_back_prompt_and_output() {
        let h = DynamoHasher::new(2).unwrap();
        let prompt = [1, 2, 3, 4, 5];
        let ids = h.hash(&prompt).sequence;
        let mut tally = Tally::default();
        let mut a =
            Attempt::begin(&mut tally, 5, ids.clone(), 1, 2, Some(OutputTracker::new(h, &prompt)));
        assert_eq!(tally.input_tokens, 5);
        a.observe_output(0, &[6, 7]);
        let done = a.complete(&mut tally);
        let whole = h.hash(&[1, 2, 3, 4, 5, 6, 7]).sequence;
        assert_eq!(done.ids, [ids, vec![whole[2]]].concat());
        assert_eq!(
            tally,
            Tally {
                input_tokens: 5,
                f0_tokens: 5,
                f1_tokens: 2,
                complete: 1,
                results: [0, 1, 0, 0, 0],
                ..Tally::default()
            }
        );
    }

    #[test]
    fn incomplete_counts_only_the_observation() {
        let mut tally = Tally::default();
        let a = Attempt::begin(&mut tally, 7, vec![1, 2, 3], 3, 2, None);
        assert_eq!(a.seen_tokens(), 6);
        a.incomplete(&mut tally);
        assert_eq!(
            tally,
            Tally { input_tokens: 7, incomplete: 1, results: [0, 0, 0, 0, 1], ..Tally::default() }
        );
        assert_eq!(tally.observations(), 1);
        let b = Attempt::begin(&mut tally, 9, vec![4], 3, 2, None);
        assert_eq!(b.prompt_tokens(), 9);
        b.complete(&mut tally);
        Attempt::begin(&mut tally, 2, vec![], 0, 2, None).complete(&mut tally);
        assert_eq!((tally.complete, tally.incomplete, tally.observations()), (2, 1, 3));
    }

    #[test]
    fn seen_tokens_never_exceed_the_prompt() {
        let mut tally = Tally::default();
        let a = Attempt::begin(&mut tally, 3, vec![9], 5, 4, None);
        assert_eq!(a.seen_tokens(), 3);
        a.incomplete(&mut tally);
    }

    #[test]
    fn a_prefix_the_history_has_not_learned_yet_is_reused_not_a_negative_loss() {
        // A second request with the prompt of one still running: unseen by the history, but
        // cached on the worker it is sent to.
        let mut tally = Tally::default();
        let mut a = Attempt::begin(&mut tally, 1024, vec![], 0, 16, None);
        a.observe_route(Route { best_cached_tokens: 1024, selected_cached_tokens: 1024 }).unwrap();
        let report =
            WorkerReport { prompt_tokens: 1024, gpu_hit_tokens: 1024, ..Default::default() };
        a.observe_worker(report).unwrap();
        a.complete(&mut tally);
        assert_eq!(tally.funnel, [1024, 0, 1024, 1024, 1024, 1024]);
        assert_eq!(tally.losses, [0; 5]);
    }

    #[test]
    fn the_funnel_counts_only_attempts_with_a_route_and_a_report() {
        let mut tally = Tally::default();
        let report = WorkerReport {
            prompt_tokens: 100,
            gpu_hit_tokens: 40,
            cpu_hit_tokens: 10,
            cpu_lookup_tokens: 30,
        };
        let route = Route { best_cached_tokens: 90, selected_cached_tokens: 120 };
        // Observed: stages counted, F3 clamped to the prompt.
        let mut a = Attempt::begin(&mut tally, 100, vec![1, 2], 2, 32, None);
        a.observe_route(route).unwrap();
        assert_eq!(a.observe_route(route), Err(ReportError::Duplicate("route")));
        a.observe_worker(report).unwrap();
        assert_eq!(a.observe_worker(report), Err(ReportError::Duplicate("worker report")));
        a.complete(&mut tally);
        assert_eq!(tally.funnel, [100, 64, 90, 100, 70, 50]);
        assert_eq!(tally.clamped, [0, 0, 0, 1, 0, 0]);
        // F2 and F3 above F1, F4 above F5: of the 50 tokens not reused, 36 were never seen and
        // 14 were found but not reused (differences of stages would say retention -26, routing
        // -10).
        assert_eq!(tally.losses, [36, 0, 0, 0, 14]);
        // A mismatched report is refused and marks the attempt; so does a later one.
        let mut b = Attempt::begin(&mut tally, 50, vec![], 0, 32, None);
        b.observe_route(route).unwrap();
        let mismatch = b.observe_worker(report);
        assert_eq!(mismatch, Err(ReportError::PromptMismatch { prompt_tokens: 50, reported: 100 }));
        let fixed = WorkerReport { prompt_tokens: 50, ..report };
        assert!(b.observe_worker(fixed).is_err());
        b.complete(&mut tally);
        // No route, no report, and a dropped request with full evidence.
        Attempt::begin(&mut tally, 10, vec![], 0, 32, None).complete(&mut tally);
        let mut c = Attempt::begin(&mut tally, 10, vec![], 0, 32, None);
        c.observe_route(route).unwrap();
        c.complete(&mut tally);
        let mut d = Attempt::begin(&mut tally, 100, vec![], 0, 32, None);
        d.observe_route(route).unwrap();
        d.observe_worker(report).unwrap();
        d.incomplete(&mut tally);
        assert_eq!(tally.results, [1, 1, 1, 1, 1]);
        assert_eq!(tally.funnel[0], 100, "only the observed attempt");
    }
}
