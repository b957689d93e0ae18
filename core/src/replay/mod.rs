//! Trace replay: how much prefix reuse a request trace has, at many history sizes at once.
//!
//! The engine takes parsed [`Request`]s, one at a time, and runs each
//! through every configured history in a single pass. Per request, each history is looked up
//! as it stood before the request, then learns the request's ids:
//!
//! - F0 = prompt tokens; F1 ("prefix") = tokens of the longest run of leading ids that are all
//!   present, a partial last block counted by its real token count; "any" = tokens of every
//!   present block (for comparison only).
//! - `fifo` is the history's own semantics ([`History`](crate::history::History)): an id
//!   already present is skipped (no capacity, no refreshed age), a new id evicts the oldest
//!   when full.
//! - `lru`: the lookup reorders nothing; afterwards the request's ids are touched in order, a
//!   present id becoming most recent, a new one inserted as most recent after evicting the
//!   least recent if full.
//! - `inf` never evicts.
//!
//! With a warm-up, requests before [`ReplayConfig::measure_from`] teach the histories but are
//! not counted.
//!
//! The engine keeps nothing per request: its memory is the histories' state and the table of
//! distinct ids, whatever the trace's length, so a week of traffic replays in the memory of
//! its distinct blocks. Time is a clock that only moves forward (the largest timestamp seen),
//! so a trace whose timestamps step back still measures how far back each history reaches. A
//! request without a timestamp is learned at the clock's time; one before any timestamp, at
//! the first timestamp that follows (the earliest its time is known to be bounded by, so a
//! reach is never stretched back to time 0).
//!
//! All histories see the same ids, so the engine gives each distinct id a dense number once,
//! and every history keeps its state in arrays indexed by it: a lookup or an insert is an
//! array access, and one pass drives a dozen histories at little more than the cost of one.

mod capacity;
mod dense;
mod histories;

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

pub use capacity::{Capacity, CapacityError};

use crate::bits::SetBits;
use crate::history::{HistoryError, MAX_CAPACITY};
use crate::names::UnknownName;
use crate::trace::Request;
use dense::DenseIds;
use histories::Histories;

/// An eviction policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Policy {
    /// First in, first out: the history's own semantics.
    Fifo,
    /// Least recently used.
    Lru,
    /// Never evicts.
    Inf,
}

impl Policy {
    /// The policy's name as the CLI and JSON spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Lru => "lru",
            Policy::Inf => "inf",
        }
    }

    /// Every policy, in the order the CLI documents them.
    pub const ALL: [Policy; 3] = [Policy::Fifo, Policy::Lru, Policy::Inf];

    /// The policies' names, in [`ALL`](Self::ALL)'s order.
    pub const NAMES: [&'static str; 3] =
        [Policy::ALL[0].name(), Policy::ALL[1].name(), Policy::ALL[2].name()];

    /// Looks a policy up by [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The policy `text` names (surrounding blanks ignored), or the error both front ends
    /// give.
    pub fn parse(text: &str) -> Result<Policy, UnknownName> {
        Policy::from_name(text.trim_ascii()).ok_or_else(|| UnknownName {
            kind: "policy",
            name: text.into(),
            expected: &Policy::NAMES,
        })
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What to replay against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayConfig {
    /// Tokens per block (for the token counts of blocks).
    pub block_size: usize,
    /// The histories: a policy and a capacity in blocks (`None` for `inf`).
    pub histories: Vec<(Policy, Option<usize>)>,
    /// Index of the first request that is counted (the warm-up ends before it).
    pub measure_from: usize,
}

impl ReplayConfig {
    /// Every policy in `policies` at every capacity in `capacities`, plus one `inf` history
    /// when `inf` is among the capacities or the policies; sorted, without duplicates.
    pub fn grid(
        block_size: usize,
        policies: &[Policy],
        capacities: &[Option<usize>],
    ) -> ReplayConfig {
        let mut histories = Vec::new();
        // Kept sorted and free of duplicates as it grows: a grid has a handful of histories,
        // and a sort here would be one more copy of the sorting code in the browser build.
        let mut add = |history| {
            if let Err(at) = histories.binary_search(&history) {
                histories.insert(at, history);
            }
        };
        for &policy in policies.iter().filter(|&&p| p != Policy::Inf) {
            for &capacity in capacities.iter().flatten() {
                add((policy, Some(capacity)));
            }
        }
        if policies.contains(&Policy::Inf) || capacities.contains(&None) {
            add((Policy::Inf, None));
        }
        ReplayConfig { block_size, histories, measure_from: 0 }
    }

    /// The histories of each policy: FIFO, LRU, `inf`.
    pub fn policy_counts(&self) -> (usize, usize, usize) {
        let count = |p| self.histories.iter().filter(|&&(policy, _)| policy == p).count();
        (count(Policy::Fifo), count(Policy::Lru), count(Policy::Inf))
    }

    /// How many of a trace's `requests` requests are counted (those after the warm-up).
    pub fn counted(&self, requests: usize) -> usize {
        requests - self.measure_from.min(requests)
    }
}

/// Why a replay could not be set up.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayError {
    /// A block size of zero.
    ZeroBlockSize,
    /// A history could not be built.
    History(HistoryError),
    /// A finite policy without a capacity, or `inf` with one.
    BadCapacity(Policy),
    /// The trace has more distinct ids than one replay can number.
    TooManyIds,
    /// The allocator refused the memory the histories need for the trace's distinct ids.
    OutOfMemory {
        /// Bytes asked for.
        bytes: usize,
        /// Distinct ids at that point.
        ids: usize,
        /// Histories of each policy: FIFO, LRU, `inf`.
        histories: (usize, usize, usize),
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroBlockSize => f.write_str("block size must be at least 1"),
            Self::History(e) => e.fmt(f),
            Self::BadCapacity(Policy::Inf) => f.write_str("the inf policy takes no capacity"),
            Self::BadCapacity(policy) => write!(f, "the {policy} policy needs a capacity"),
            Self::OutOfMemory { bytes, ids, histories: (fifo, lru, inf) } => write!(
                f,
                "out of memory: {bytes} bytes asked for the state of {} histories ({fifo} FIFO, \
                 {lru} LRU, {inf} inf) over {ids} distinct block ids; replay fewer capacities or \
                 policies at once",
                fifo + lru + inf
            ),
            Self::TooManyIds => {
                write!(f, "the trace has more than {MAX_DISTINCT_IDS} distinct block ids")
            }
        }
    }
}

impl core::error::Error for ReplayError {}

/// One history's results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The policy.
    pub policy: Policy,
    /// Capacity in blocks (`None` for `inf`).
    pub capacity: Option<usize>,
    /// Heap bytes a kvreuse history of this capacity takes (`None` for `inf`).
    pub heap_bytes: Option<usize>,
    /// Prompt tokens of the counted requests.
    pub f0_tokens: u64,
    /// Prompt tokens in leading blocks that were present.
    pub f1_tokens: u64,
    /// Prompt tokens in any present block.
    pub any_tokens: u64,
    /// Leading blocks that were present.
    pub f1_blocks: u64,
    /// Ids evicted while counting.
    pub evictions: u64,
    /// At the end, how far back the history reached in trace time: the latest timestamp
    /// minus that of the request that inserted the oldest id still present (see the [module
    /// docs](self) for requests without one); `None` when no request has a timestamp.
    pub reach_ms: Option<u64>,
}

impl Row {
    /// The row of a history before any request: every count zero, the heap a kvreuse
    /// history of this capacity takes on this target.
    pub fn empty(policy: Policy, capacity: Option<usize>) -> Row {
        Row {
            policy,
            capacity,
            heap_bytes: capacity.map(Capacity::heap_bytes_of),
            f0_tokens: 0,
            f1_tokens: 0,
            any_tokens: 0,
            f1_blocks: 0,
            evictions: 0,
            reach_ms: None,
        }
    }
}

/// The most distinct ids one replay handles (they are numbered with `u32`s).
pub const MAX_DISTINCT_IDS: usize = u32::MAX as usize - 1;

/// The replay engine. See the [module docs](self).
#[derive(Debug)]
pub struct Replay {
    block_size: usize,
    measure_from: usize,
    requests: usize,
    /// The latest timestamp so far (time never steps back here).
    clock: Option<u64>,
    /// The first timestamp seen: the time of ids learned before it (stamped 0 until then).
    first_time: Option<u64>,
    histories: Histories,
    rows: Vec<Row>,
    /// The dense number of each id seen so far, at most `id_limit` of them.
    dense: DenseIds,
    id_limit: usize,
    /// The current request's prompt and output ids, as dense numbers.
    prompt: Vec<u32>,
    output: Vec<u32>,
    /// Per history, scratch: leading present blocks of the current prompt, and evictions.
    leading: Vec<u64>,
    evictions: Vec<u64>,
    /// Per presence word: the bits of existing histories, and scratch for [`Self::count`].
    all: Vec<u64>,
    still: Vec<u64>,
}

impl Replay {
    /// An engine for `config`; histories are allocated here.
    pub fn new(config: &ReplayConfig) -> Result<Replay, ReplayError> {
        if config.block_size == 0 {
            return Err(ReplayError::ZeroBlockSize);
        }
        let rows = config
            .histories
            .iter()
            .map(|&(policy, capacity)| {
                match (policy, capacity) {
                    (Policy::Fifo | Policy::Lru, Some(0)) => {
                        return Err(ReplayError::History(HistoryError::ZeroCapacity));
                    }
                    (Policy::Fifo | Policy::Lru, Some(c)) if c > MAX_CAPACITY => {
                        return Err(ReplayError::History(HistoryError::CapacityTooLarge {
                            capacity: c,
                        }));
                    }
                    (Policy::Fifo | Policy::Lru, Some(_)) | (Policy::Inf, None) => {}
                    (policy, _) => return Err(ReplayError::BadCapacity(policy)),
                }
                Ok(Row::empty(policy, capacity))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let n = rows.len();
        let histories = Histories::new(&config.histories);
        let all: Vec<u64> = (0..histories.words())
            .map(|w| match n.saturating_sub(w * 64) {
                64.. => u64::MAX,
                bits => (1u64 << bits) - 1,
            })
            .collect();
        Ok(Replay {
            block_size: config.block_size,
            measure_from: config.measure_from,
            requests: 0,
            clock: None,
            first_time: None,
            histories,
            rows,
            dense: DenseIds::default(),
            id_limit: MAX_DISTINCT_IDS,
            prompt: Vec::new(),
            output: Vec::new(),
            leading: vec![0; n],
            evictions: vec![0; n],
            still: all.clone(),
            all,
        })
    }

    /// The dense numbers of `ids`, numbering new ones.
    fn intern(dense: &mut DenseIds, ids: &[u64], out: &mut Vec<u32>) -> Result<(), usize> {
        out.clear();
        for &id in ids {
            out.push(dense.number(id)?);
        }
        Ok(())
    }

    /// Replays one request against every history. Fails only when the trace holds more
    /// distinct ids than [`MAX_DISTINCT_IDS`], or the allocator refuses the memory their
    /// state needs; nothing is counted for the request then.
    pub fn push(&mut self, request: &Request) -> Result<(), ReplayError> {
        self.number(request)?;
        let counted = self.requests >= self.measure_from;
        self.requests += 1;
        self.tick(request.timestamp);
        if counted {
            self.count(request);
        }
        self.learn_numbered(counted);
        Ok(())
    }

    /// The same engine numbering at most `limit` distinct ids (tests reach the bound with it).
    #[cfg(test)]
    pub(crate) fn with_id_limit(mut self, limit: usize) -> Replay {
        self.id_limit = limit;
        self
    }

    /// Looks `request`'s prompt up in every history as it stands, without counting or
    /// learning anything: the tokens of its leading present blocks, per history in
    /// configuration order. With [`learn`](Self::learn) later, this splits [`push`](Self::push)
    /// for a simulation in which requests are looked up when they arrive and learned when
    /// they complete. Fails as `push` does.
    pub fn look_up(&mut self, request: &Request) -> Result<&[u64], ReplayError> {
        self.number(request)?;
        self.leading_blocks();
        let (bs, tokens) = (self.block_size as u64, request.prompt_tokens);
        for leading in &mut self.leading {
            *leading = bs.saturating_mul(*leading).min(tokens);
        }
        Ok(&self.leading)
    }

    /// Teaches every history `request`'s prompt and output ids, as [`push`](Self::push) does
    /// after counting, at the request's timestamp; evictions count once the warm-up is over.
    /// The request is counted among the requests replayed.
    pub fn learn(&mut self, request: &Request) -> Result<(), ReplayError> {
        self.number(request)?;
        let counted = self.requests >= self.measure_from;
        self.requests += 1;
        self.tick(request.timestamp);
        self.learn_numbered(counted);
        Ok(())
    }

    /// Moves the clock to a request's timestamp, if it has one and it is later.
    fn tick(&mut self, timestamp: Option<u64>) {
        if let Some(t) = timestamp {
            self.first_time.get_or_insert(t);
            self.clock = self.clock.max(Some(t));
        }
    }

    /// Numbers `request`'s ids into `prompt` and `output`, making room for new ones.
    fn number(&mut self, request: &Request) -> Result<(), ReplayError> {
        let ids = request.prompt_ids.len() + request.output_ids.len();
        if self.dense.len().saturating_add(ids) > self.id_limit {
            return Err(ReplayError::TooManyIds);
        }
        let out_of_memory = |bytes, ids, histories: &Histories| ReplayError::OutOfMemory {
            bytes,
            ids,
            histories: histories.counts(),
        };
        Self::intern(&mut self.dense, &request.prompt_ids, &mut self.prompt)
            .and_then(|()| Self::intern(&mut self.dense, &request.output_ids, &mut self.output))
            .map_err(|bytes| out_of_memory(bytes, self.dense.len(), &self.histories))?;
        self.histories
            .grow(self.dense.len())
            .map_err(|bytes| out_of_memory(bytes, self.dense.len(), &self.histories))
    }

    /// Teaches every history the numbered ids, at the clock's time.
    fn learn_numbered(&mut self, counted: bool) {
        let stamp = self.clock.unwrap_or(0);
        self.evictions.fill(0);
        self.histories.learn(&self.prompt, stamp, &mut self.evictions);
        self.histories.learn(&self.output, stamp, &mut self.evictions);
        if counted {
            for (row, evicted) in self.rows.iter_mut().zip(&self.evictions) {
                row.evictions += evicted;
            }
        }
    }

    /// Heap bytes the engine holds: the histories' state, the table of distinct ids, the rows
    /// and the per-request buffers.
    pub fn heap_bytes(&self) -> usize {
        let buffers = self.rows.capacity() * size_of::<Row>()
            + (self.prompt.capacity() + self.output.capacity()) * size_of::<u32>()
            + (self.leading.capacity()
                + self.evictions.capacity()
                + self.all.capacity()
                + self.still.capacity())
                * size_of::<u64>();
        self.histories.heap_bytes().saturating_add(self.dense.heap_bytes()).saturating_add(buffers)
    }

    /// Adds the current request's F0, F1 and "any" counts to every row, looking its prompt up
    /// in all histories at once: one presence word covers 64 of them.
    fn count(&mut self, request: &Request) {
        let bs = self.block_size;
        self.leading.fill(self.prompt.len() as u64);
        // Per presence word, the histories in which every block so far was present.
        self.still.copy_from_slice(&self.all);
        for (j, &id) in self.prompt.iter().enumerate() {
            let tokens = request.block_tokens(j, bs);
            for (w, (&present, still)) in
                self.histories.presence(id).iter().zip(self.still.iter_mut()).enumerate()
            {
                for h in SetBits(*still & !present) {
                    self.leading[w * 64 + h] = j as u64;
                }
                *still &= present;
                for h in SetBits(present) {
                    self.rows[w * 64 + h].any_tokens += tokens;
                }
            }
        }
        for (row, &leading) in self.rows.iter_mut().zip(&self.leading) {
            row.f0_tokens += request.prompt_tokens;
            row.f1_blocks += leading;
            // Blocks hold `block_size` tokens each until the prompt's tokens run out.
            row.f1_tokens += (bs as u64).saturating_mul(leading).min(request.prompt_tokens);
        }
    }

    /// Sets `leading` to the number of leading blocks of the numbered prompt present in each
    /// history ([`count`](Self::count) without the counting, stopping where no history has
    /// the whole prefix so far).
    fn leading_blocks(&mut self) {
        self.leading.fill(self.prompt.len() as u64);
        self.still.copy_from_slice(&self.all);
        for (j, &id) in self.prompt.iter().enumerate() {
            let mut any = 0;
            for (w, (&present, still)) in
                self.histories.presence(id).iter().zip(self.still.iter_mut()).enumerate()
            {
                for h in SetBits(*still & !present) {
                    self.leading[w * 64 + h] = j as u64;
                }
                *still &= present;
                any |= *still;
            }
            if any == 0 {
                break;
            }
        }
    }

    /// Requests replayed so far.
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// The results so far, one row per history, in configuration order.
    pub fn results(&self) -> Vec<Row> {
        let mut rows = self.rows.clone();
        for (h, row) in rows.iter_mut().enumerate() {
            // A stamp of 0 is either the first timestamp itself (0) or an id learned before
            // any timestamp, whose time is the first's.
            let oldest = self
                .histories
                .oldest_stamp(h)
                .map(|t| if t == 0 { self.first_time } else { Some(t) });
            row.reach_ms = self.clock.zip(oldest.flatten()).map(|(last, t)| last.saturating_sub(t));
        }
        rows
    }
}

#[cfg(test)]
mod tests;
