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

use alloc::vec::Vec;

use crate::output::OutputTracker;

/// Where an attempt's counts go.
pub trait Ledger {
    /// An attempt began with a prompt of `prompt_tokens`.
    fn begun(&mut self, prompt_tokens: u64);
    /// An attempt completed: F0 grows by `f0_tokens`, F1 by `f1_tokens`.
    fn completed(&mut self, f0_tokens: u64, f1_tokens: u64);
    /// An attempt ended without completing.
    fn ended_incomplete(&mut self);
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
}

/// One request in flight. See the [module docs](self).
#[derive(Debug)]
#[must_use = "an attempt must end with `complete` or `incomplete`"]
pub struct Attempt {
    prompt_tokens: u64,
    seen_tokens: u64,
    prompt_ids: Vec<u64>,
    output: Option<OutputTracker>,
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
        Attempt { prompt_tokens, seen_tokens, prompt_ids, output }
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
        let mut ids = self.prompt_ids;
        if let Some(mut output) = self.output {
            ids.extend(output.take_recorded());
        }
        Completion { ids }
    }

    /// Ends the attempt as incomplete.
    pub fn incomplete(self, ledger: &mut (impl Ledger + ?Sized)) {
        ledger.ended_incomplete();
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
            Tally { input_tokens: 5, f0_tokens: 5, f1_tokens: 2, complete: 1, incomplete: 0 }
        );
    }

    #[test]
    fn incomplete_counts_only_the_observation() {
        let mut tally = Tally::default();
        let a = Attempt::begin(&mut tally, 7, vec![1, 2, 3], 3, 2, None);
        assert_eq!(a.seen_tokens(), 6);
        a.incomplete(&mut tally);
        assert_eq!(tally, Tally { input_tokens: 7, incomplete: 1, ..Tally::default() });
        assert_eq!(tally.observations(), 1);
    }

    #[test]
    fn seen_tokens_never_exceed_the_prompt() {
        let mut tally = Tally::default();
        let a = Attempt::begin(&mut tally, 3, vec![9], 5, 4, None);
        assert_eq!(a.seen_tokens(), 3);
        a.incomplete(&mut tally);
    }
}
