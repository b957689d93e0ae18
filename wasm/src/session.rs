//! A replay that advances in slices: the engine behind the JS `Replay`, in plain Rust.
//!
//! A browser page must not freeze while a trace of a million lines is read and replayed, so
//! the work is cut into steps the caller schedules: first the lines are parsed (a bounded
//! number per step), then the requests are replayed (a bounded number per step). Everything
//! else mirrors `kvreuse replay` exactly, so that the page and the command line print the same
//! numbers for the same input:
//!
//! - lines are split at `\n` and numbered from 1; blank lines are skipped; a line is parsed
//!   by [`parse_line`] with a Dynamo hasher of the block size, and a bad one stops the replay
//!   with its number (or is counted and skipped when asked to);
//! - capacities and policies become a [`ReplayConfig::grid`], the warm-up ends before request
//!   `floor(warmup * requests)`;
//! - each history's heap bytes are a 64-bit router's ([`crate::footprint`]).
//!
//! This module has no JS in it, so the same code runs natively for timing and host tests.

use std::fmt;

use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::replay::{Policy, Replay, ReplayConfig, ReplayError, Row};
use kvreuse_core::setup::{ReplaySettings, SetupError, Warmup};
use kvreuse_core::trace::{MAX_LINE_BYTES, Request, TraceError, parse_line};

use crate::footprint;

/// Why a replay could not be set up or continued.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SessionError {
    /// A setting is unusable (the shared setup's judgement, as on the command line).
    Setup(SetupError),
    /// The engine refused the trace.
    Replay(ReplayError),
    /// A trace line is not a valid record.
    Line {
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        error: TraceError,
    },
    /// A trace line longer than [`MAX_LINE_BYTES`].
    LineTooLong {
        /// 1-based line number.
        line: u64,
    },
}

impl SessionError {
    /// Whether the error is about a value out of its range (a JS `RangeError`) rather than
    /// input of the wrong shape (a `TypeError`).
    pub fn is_range(&self) -> bool {
        match self {
            Self::Setup(error) => error.is_range(),
            Self::Replay(_) | Self::LineTooLong { .. } => true,
            Self::Line { .. } => false,
        }
    }

    /// The trace line the error is about, if it is about one.
    pub fn line(&self) -> Option<u64> {
        match self {
            Self::Line { line, .. } | Self::LineTooLong { line } => Some(*line),
            _ => None,
        }
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The option's name as this front end spells it, then the shared setup's words.
            Self::Setup(error) => write!(f, "options.{}: {error}", error.setting.js_name()),
            Self::Replay(error) => error.fmt(f),
            Self::Line { line, error } => write!(f, "line {line}: {error}"),
            Self::LineTooLong { line } => {
                write!(f, "line {line}: line longer than {MAX_LINE_BYTES} bytes")
            }
        }
    }
}

impl std::error::Error for SessionError {}

impl From<SetupError> for SessionError {
    fn from(error: SetupError) -> Self {
        SessionError::Setup(error)
    }
}

/// Where a session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Reading the trace's lines.
    Parse,
    /// Running the requests through the histories.
    Replay,
    /// Finished: the results are final.
    Done,
}

impl Phase {
    /// The phase's name in JS.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Parse => "parse",
            Phase::Replay => "replay",
            Phase::Done => "done",
        }
    }
}

/// The summary `kvreuse replay --json` prints along with the rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Valid requests in the trace.
    pub requests: usize,
    /// Requests after the warm-up.
    pub measured_requests: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// The warm-up fraction.
    pub warmup: f64,
    /// Invalid lines skipped.
    pub skipped_lines: u64,
}

/// A trace replay advanced in steps. See the [module docs](self).
#[derive(Debug)]
pub struct Session {
    text: Vec<u8>,
    /// Byte offset of the next line to parse.
    cursor: usize,
    /// Number of the next line to parse.
    line: u64,
    hasher: DynamoHasher,
    warmup: Warmup,
    skip_invalid: bool,
    config: ReplayConfig,
    requests: Vec<Request>,
    skipped: u64,
    /// Built when parsing ends, once the warm-up's length is known.
    engine: Option<Replay>,
    replayed: usize,
}

impl Session {
    /// Checks `settings` and prepares to replay `text` (JSONL: Mooncake or token records).
    pub fn new(text: Vec<u8>, settings: &ReplaySettings) -> Result<Session, SessionError> {
        let config = settings.grid(footprint::blocks)?;
        let hasher = settings.trace.hasher()?;
        // Let the engine judge the configuration now rather than after a long parse.
        Replay::new(&config).map_err(SessionError::Replay)?;
        Ok(Session {
            text,
            cursor: 0,
            line: 1,
            hasher,
            warmup: settings.trace.warmup,
            skip_invalid: settings.trace.skip_invalid,
            config,
            requests: Vec::new(),
            skipped: 0,
            engine: None,
            replayed: 0,
        })
    }

    /// The phase the next [`step`](Self::step) works in.
    pub fn phase(&self) -> Phase {
        match &self.engine {
            None => Phase::Parse,
            Some(_) if self.replayed < self.requests.len() => Phase::Replay,
            Some(_) => Phase::Done,
        }
    }

    /// Does up to `max` units of work: lines while parsing, then requests. Returns whether
    /// the session is done. After an error the session stays where the error was found.
    pub fn step(&mut self, max: usize) -> Result<bool, SessionError> {
        let max = max.max(1);
        match self.phase() {
            Phase::Parse => self.parse_lines(max)?,
            Phase::Replay => self.replay_requests(max)?,
            Phase::Done => {}
        }
        Ok(self.phase() == Phase::Done)
    }

    /// Runs every remaining step.
    pub fn run(&mut self) -> Result<(), SessionError> {
        while !self.step(usize::MAX)? {}
        Ok(())
    }

    fn parse_lines(&mut self, max: usize) -> Result<(), SessionError> {
        for _ in 0..max {
            if self.cursor >= self.text.len() {
                return self.start_replay();
            }
            let rest = &self.text[self.cursor..];
            let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
            let line = &rest[..end];
            let parsed = if line.len() > MAX_LINE_BYTES {
                Err(SessionError::LineTooLong { line: self.line })
            } else {
                parse_line(line, &self.hasher)
                    .map_err(|error| SessionError::Line { line: self.line, error })
            };
            match parsed {
                Ok(Some(request)) => self.requests.push(request),
                Ok(None) => {}
                Err(_) if self.skip_invalid => self.skipped += 1,
                Err(error) => return Err(error),
            }
            self.cursor += end + 1;
            self.line += 1;
        }
        if self.cursor >= self.text.len() { self.start_replay() } else { Ok(()) }
    }

    fn start_replay(&mut self) -> Result<(), SessionError> {
        self.cursor = self.text.len();
        // The text is no longer needed.
        self.text = Vec::new();
        let total = self.requests.len();
        self.config.measure_from =
            self.warmup.measure_from(Some(total as u64)).map_or(0, |n| n as usize);
        let mut engine = Replay::new(&self.config).map_err(SessionError::Replay)?;
        engine.reserve(self.requests.iter().map(|r| r.prompt_ids.len() + r.output_ids.len()).sum());
        self.engine = Some(engine);
        Ok(())
    }

    fn replay_requests(&mut self, max: usize) -> Result<(), SessionError> {
        let Some(engine) = self.engine.as_mut() else { return Ok(()) };
        let end = self.requests.len().min(self.replayed.saturating_add(max));
        for request in &self.requests[self.replayed..end] {
            engine.push(request).map_err(SessionError::Replay)?;
            self.replayed += 1;
        }
        Ok(())
    }

    /// Bytes of trace text parsed so far, and in all.
    pub fn parsed_bytes(&self) -> (usize, usize) {
        if self.engine.is_some() {
            (self.cursor, self.cursor)
        } else {
            (self.cursor.min(self.text.len()), self.text.len())
        }
    }

    /// Valid requests parsed so far (all of them once parsing is done).
    pub fn requests(&self) -> usize {
        self.requests.len()
    }

    /// Requests replayed so far.
    pub fn replayed(&self) -> usize {
        self.replayed
    }

    /// Invalid lines skipped so far.
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    /// The timestamp of the last replayed request that has one.
    pub fn trace_time_ms(&self) -> Option<u64> {
        self.requests[..self.replayed].iter().rev().find_map(|r| r.timestamp)
    }

    /// The timestamps of the first and the last request that have one.
    pub fn trace_span_ms(&self) -> Option<(u64, u64)> {
        let first = self.requests.iter().find_map(|r| r.timestamp)?;
        let last = self.requests.iter().rev().find_map(|r| r.timestamp)?;
        Some((first, last))
    }

    /// The histories, in row order: a policy and a capacity in blocks (`None` for `inf`).
    pub fn histories(&self) -> &[(Policy, Option<usize>)] {
        &self.config.histories
    }

    /// The rows so far, one per history, in configuration order; all zero before the replay
    /// starts. Heap bytes are a 64-bit router's.
    pub fn results(&self) -> Vec<Row> {
        let mut rows = match &self.engine {
            Some(engine) => engine.results(),
            None => Replay::new(&self.config).map(|e| e.results()).unwrap_or_default(),
        };
        for row in &mut rows {
            row.heap_bytes = row.capacity.map(footprint::heap_bytes);
        }
        rows
    }

    /// The summary fields of `kvreuse replay --json`, as they stand.
    pub fn summary(&self) -> Summary {
        let requests = self.requests.len();
        Summary {
            requests,
            // None until parsing ends and the warm-up is placed.
            measured_requests: if self.engine.is_some() {
                self.config.counted(requests)
            } else {
                0
            },
            block_size: self.config.block_size,
            warmup: match self.warmup {
                Warmup::Fraction(f) => f,
                Warmup::Requests(_) => 0.0,
            },
            skipped_lines: self.skipped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &[u8] = include_bytes!("../../traces/mooncake_synthetic_trace.jsonl");

    fn settings(capacities: &str, policies: &str, warmup: f64) -> ReplaySettings {
        let mut settings = ReplaySettings::default();
        settings.set_capacities(capacities.split(',')).unwrap();
        settings.set_policies(policies.split(',')).unwrap();
        settings.trace.set_warmup(warmup, "").unwrap();
        settings
    }

    /// Stepping in slices of any size gives what the core engine gives when fed the whole
    /// trace at once, as `kvreuse replay` feeds it.
    #[test]
    fn steps_of_any_size_give_the_engines_rows() {
        let hasher = DynamoHasher::new(512).unwrap();
        let requests: Vec<Request> =
            TRACE.split(|&b| b == b'\n').filter_map(|l| parse_line(l, &hasher).unwrap()).collect();
        let settings = settings("1k,10k,256KiB,inf", "fifo,lru", 0.25);
        let capacities: Vec<Option<usize>> =
            settings.capacities.iter().map(|c| c.blocks().unwrap()).collect();
        let mut config = ReplayConfig::grid(512, &settings.policies, &capacities);
        config.measure_from = requests.len() / 4;
        let mut engine = Replay::new(&config).unwrap();
        requests.iter().for_each(|r| engine.push(r).unwrap());
        let want = engine.results();
        for step in [1, 7, 1000, usize::MAX] {
            let mut session = Session::new(TRACE.to_vec(), &settings).unwrap();
            let mut calls = 0;
            while !session.step(step).unwrap() {
                calls += 1;
            }
            assert!(step > 1000 || calls >= 3993 / step, "{step}: {calls} calls");
            assert_eq!(session.results(), want, "step {step}");
            let summary = session.summary();
            assert_eq!((summary.requests, summary.measured_requests), (3993, 3993 - 998));
            assert_eq!(session.replayed(), 3993);
        }
    }

    #[test]
    fn bad_lines_are_reported_by_number_or_skipped() {
        let text = b"{\"tokens\": [1,2,3,4]}\n\n{\"tokens\": [1, -1]}\n{\"tokens\": [5]}".to_vec();
        let mut s = settings("10", "fifo", 0.0);
        s.trace.block_size = 4;
        let mut session = Session::new(text.clone(), &s).unwrap();
        let error = session.run().unwrap_err();
        assert_eq!(error.line(), Some(3));
        assert!(error.to_string().starts_with("line 3: "), "{error}");
        assert!(!error.is_range());
        s.trace.skip_invalid = true;
        let mut session = Session::new(text, &s).unwrap();
        session.run().unwrap();
        assert_eq!((session.requests(), session.skipped_lines()), (2, 1));
        assert_eq!(session.results()[0].f0_tokens, 5);
    }

    #[test]
    fn settings_are_checked_before_any_work() {
        let ok = settings("10", "fifo", 0.0);
        let check = |s: &ReplaySettings| Session::new(Vec::new(), s).map(|_| ()).unwrap_err();
        let mut zero = ok.clone();
        zero.trace.block_size = 0;
        let error = check(&zero);
        assert!(error.is_range());
        assert_eq!(error.to_string(), "options.blockSize: block size must be at least 1");
        let none = ReplaySettings { policies: vec![], ..ok.clone() };
        assert_eq!(check(&none).to_string(), "options.policies: give at least one policy");
        let huge = ReplaySettings {
            capacities: vec![kvreuse_core::replay::Capacity::Blocks(
                kvreuse_core::history::MAX_CAPACITY + 1,
            )],
            ..ok
        };
        assert!(check(&huge).is_range());
    }

    /// An empty trace replays to zero rows, like the command line's.
    #[test]
    fn an_empty_trace_gives_zero_rows() {
        let mut session = Session::new(b"\n\n".to_vec(), &settings("10", "fifo", 0.5)).unwrap();
        assert_eq!(session.phase(), Phase::Parse);
        session.run().unwrap();
        assert_eq!(session.phase(), Phase::Done);
        let rows = session.results();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].f0_tokens, 0);
        assert_eq!(session.summary().measured_requests, 0);
    }
}
