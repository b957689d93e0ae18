//! Output blocks: the KV blocks a request's generated tokens create.
//!
//! Generated tokens continue the prompt's block chain: the first output block starts with the
//! prompt's partial tail, and its id chains from the prompt's last complete block, exactly as
//! if prompt and output were one sequence. A block is recorded only once one more token
//! follows it, because the newest token has no KV yet; in Eagle mode the window already spans
//! one token past the block, so no extra token is needed. Each choice (`n > 1` sampling) has
//! its own continuation of the shared prompt.
//!
//! The recorded ids are what a completed request teaches the history besides its prompt.

use alloc::vec::Vec;

use crate::chain::{DynamoChain, DynamoHasher};

/// The output continuation of one choice.
#[derive(Clone, Debug)]
struct Choice {
    index: u32,
    chain: DynamoChain,
    /// A completed block still waiting for the token after it (non-Eagle only).
    held: Option<u64>,
}

/// Tracks the output blocks of one request, per choice index.
#[derive(Clone, Debug)]
pub struct OutputTracker {
    hasher: DynamoHasher,
    /// Sequence hash of the prompt's last complete block.
    parent: Option<u64>,
    /// The prompt's tokens after its last complete block's stride.
    tail: Vec<u32>,
    choices: Vec<Choice>,
    recorded: Vec<u64>,
}

impl OutputTracker {
    /// A tracker for the output of a prompt of `prompt` tokens, hashed with `hasher`.
    pub fn new(hasher: DynamoHasher, prompt: &[u32]) -> Self {
        let blocks = hasher.complete_blocks(prompt.len());
        let mut ids = Vec::with_capacity(blocks);
        hasher.sequence_hashes_into(prompt, &mut ids);
        let tail = &prompt[blocks * hasher.block_size()..];
        Self::resume(hasher, ids.last().copied(), tail)
    }

    /// A tracker given the prompt's last complete block's sequence hash (`None` if it has no
    /// complete block) and its tail: for callers that hashed the prompt already.
    pub fn resume(hasher: DynamoHasher, parent: Option<u64>, tail: &[u32]) -> Self {
        OutputTracker {
            hasher,
            parent,
            tail: tail.to_vec(),
            choices: Vec::new(),
            recorded: Vec::new(),
        }
    }

    /// Feeds generated tokens of choice `index`.
    pub fn observe(&mut self, index: u32, tokens: &[u32]) {
        let position = match self.choices.iter().position(|c| c.index == index) {
            Some(position) => position,
            None => {
                let chain = DynamoChain::resume(self.hasher, self.parent, &self.tail);
                self.choices.push(Choice { index, chain, held: None });
                self.choices.len() - 1
            }
        };
        if tokens.is_empty() {
            return;
        }
        let eagle = self.hasher.is_eagle();
        let choice = &mut self.choices[position];
        let recorded = &mut self.recorded;
        // Any new token confirms a block that was waiting for one.
        if let Some(id) = choice.held.take() {
            recorded.push(id);
        }
        let mut last = None;
        choice.chain.extend(tokens, |block| {
            if let Some(id) = last.replace(block.sequence) {
                recorded.push(id);
            }
        });
        if let Some(id) = last {
            // The newest block is confirmed by a token after it in this chunk (or, in Eagle
            // mode, by its own window); otherwise it waits.
            if eagle || !choice.chain.pending().is_empty() {
                recorded.push(id);
            } else {
                choice.held = Some(id);
            }
        }
    }

    /// The output block ids recorded so far, in the order they were confirmed.
    pub fn recorded(&self) -> &[u64] {
        &self.recorded
    }

    /// Takes the recorded ids, leaving the tracker empty of them.
    pub fn take_recorded(&mut self) -> Vec<u64> {
        core::mem::take(&mut self.recorded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn a_block_waits_for_the_token_after_it() {
        let h = DynamoHasher::new(4).unwrap();
        let mut t = OutputTracker::new(h, &[1, 2, 3, 4]);
        t.observe(0, &[5, 6, 7, 8]);
        assert!(t.recorded().is_empty());
        t.observe(0, &[9]);
        let whole = h.hash(&[1, 2, 3, 4, 5, 6, 7, 8]).sequence;
        assert_eq!(t.recorded(), &whole[1..]);
    }

    #[test]
    fn choices_continue_the_prompt_separately() {
        let h = DynamoHasher::new(2).unwrap();
        let mut t = OutputTracker::new(h, &[1, 2, 3]);
        t.observe(0, &[10, 11]);
        t.observe(1, &[20, 21]);
        let a = h.hash(&[1, 2, 3, 10, 11]).sequence;
        let b = h.hash(&[1, 2, 3, 20, 21]).sequence;
        assert_eq!(t.recorded(), &[a[1], b[1]]);
        assert_ne!(a[1], b[1]);
    }

    #[test]
    fn eagle_blocks_need_no_extra_token() {
        let h = DynamoHasher::new(2).unwrap().with_eagle(true);
        let mut t = OutputTracker::new(h, &[]);
        t.observe(0, &[1, 2, 3]);
        assert_eq!(t.recorded(), &h.hash(&[1, 2, 3]).sequence[..]);
        assert_eq!(t.take_recorded(), vec![h.hash(&[1, 2, 3]).sequence[0]]);
        assert!(t.recorded().is_empty());
    }
}
