//! A replay that advances in slices: the engine behind the JS `Replay`, in plain Rust.
//!
//! A browser page must not freeze while a trace of a million lines is read and replayed, so
//! the work is cut into steps the caller schedules: each step reads a bounded number of lines
//! and replays each request as it is read, so no request is kept after its turn. Everything
//! else mirrors `kvreuse replay` exactly, so that the page and the command line print the same
//! numbers for the same input:
//!
//! - a byte order mark at the start is dropped; lines are split at `\n` and numbered from 1;
//!   blank lines are skipped; a line is parsed by [`parse_line`] with a Dynamo hasher of the
//!   block size, and a bad one stops the replay with its number (or is counted and skipped
//!   when asked to);
//! - capacities and policies become a [`ReplayConfig::grid`] through the shared setup; the
//!   warm-up ends before request `floor(warmup * records)`, the records counted first;
//! - each history's heap bytes are a 64-bit router's ([`crate::footprint`]).
//!
//! This module has no JS in it, so the same code runs natively for timing and host tests.

use std::fmt;

use kvreuse_core::chain::DynamoHasher;
use kvreuse_core::replay::{Policy, Replay, ReplayConfig, ReplayError, Row};
use kvreuse_core::setup::{ReplaySettings, SetupError, Warmup};
use kvreuse_core::trace::lines::numbered;
use kvreuse_core::trace::{TraceError, parse_line};

use crate::footprint;

/// Why a replay could not be set up or continued.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SessionError {
    /// A setting is unusable (the shared setup's judgement, as on the command line).
    Setup(SetupError),
    /// The engine refused the trace.
    Replay(ReplayError),
    /// A trace line is not a valid record (or longer than
    /// [`MAX_LINE_BYTES`](kvreuse_core::trace::MAX_LINE_BYTES)).
    Line {
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        error: TraceError,
    },
}

impl SessionError {
    /// Whether the error is about a value out of its range (a JS `RangeError`) rather than
    /// input of the wrong shape (a `TypeError`).
    pub fn is_range(&self) -> bool {
        match self {
            Self::Setup(error) => error.is_range(),
            Self::Replay(_) => true,
            Self::Line { error, .. } => matches!(error, TraceError::LineTooLong),
        }
    }

    /// The trace line the error is about, if it is about one.
    pub fn line(&self) -> Option<u64> {
        match self {
            Self::Line { line, .. } => Some(*line),
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
            Self::Line { line, error } => match error.column() {
                Some(column) => write!(f, "line {line}:{column}: {error}"),
                None => write!(f, "line {line}: {error}"),
            },
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
    /// Reading the trace's lines and replaying each request as it is read.
    Replay,
    /// Finished: the results are final.
    Done,
}

impl Phase {
    /// The phase's name in JS.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Replay => "replay",
            Phase::Done => "done",
        }
    }
}

/// The summary `kvreuse replay --json` prints along with the rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Valid requests replayed.
    pub requests: u64,
    /// Requests after the warm-up.
    pub measured_requests: u64,
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
    /// Byte offset of the next line to read.
    cursor: usize,
    /// Number of the next line to read.
    line: u64,
    hasher: DynamoHasher,
    warmup: Warmup,
    skip_invalid: bool,
    config: ReplayConfig,
    engine: Replay,
    /// Records (non-blank lines) in the trace, counted when the session starts.
    records: u64,
    replayed: u64,
    skipped: u64,
    /// The first timestamp and the latest, of the requests replayed.
    times: Option<(u64, u64)>,
    /// The timestamp of the last replayed request that has one.
    last_time: Option<u64>,
}

impl Session {
    /// Checks `settings` and prepares to replay `text` (JSONL: Mooncake or token records).
    /// The records are counted now (a scan for line ends, fast): the progress needs their
    /// number, and a warm-up share its place.
    pub fn new(text: Vec<u8>, settings: &ReplaySettings) -> Result<Session, SessionError> {
        let mut config = settings.grid(footprint::blocks)?;
        let hasher = settings.trace.hasher()?;
        let text = match text.strip_prefix(b"\xEF\xBB\xBF") {
            // A byte order mark, as some editors write: not part of the first line.
            Some(rest) => rest.to_vec(),
            None => text,
        };
        let records = count_records(&text, &hasher, settings.trace.skip_invalid);
        let warmup = settings.trace.warmup;
        config.measure_from = warmup.measure_from(Some(records)).unwrap_or(0) as usize;
        let engine = Replay::new(&config).map_err(SessionError::Replay)?;
        Ok(Session {
            text,
            cursor: 0,
            line: 1,
            hasher,
            warmup,
            skip_invalid: settings.trace.skip_invalid,
            config,
            engine,
            records,
            replayed: 0,
            skipped: 0,
            times: None,
            last_time: None,
        })
    }

    /// The phase the next [`step`](Self::step) works in.
    pub fn phase(&self) -> Phase {
        if self.cursor < self.text.len() { Phase::Replay } else { Phase::Done }
    }

    /// Reads and replays up to `max` lines. Returns whether the session is done. After an
    /// error the session stays at the line with the error.
    pub fn step(&mut self, max: usize) -> Result<bool, SessionError> {
        for _ in 0..max.max(1) {
            if self.cursor >= self.text.len() {
                break;
            }
            let rest = &self.text[self.cursor..];
            let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
            match parse_line(&rest[..end], &self.hasher) {
                Ok(Some(request)) => {
                    self.engine.push(&request).map_err(SessionError::Replay)?;
                    self.replayed += 1;
                    if let Some(t) = request.timestamp {
                        self.last_time = Some(t);
                        self.times = Some(self.times.map_or((t, t), |(a, b)| (a, b.max(t))));
                    }
                }
                Ok(None) => {}
                Err(_) if self.skip_invalid => self.skipped += 1,
                Err(error) => return Err(SessionError::Line { line: self.line, error }),
            }
            self.cursor += end + 1;
            self.line += 1;
        }
        if self.phase() == Phase::Done {
            // The text is no longer needed.
            self.text = Vec::new();
            self.cursor = 0;
        }
        Ok(self.phase() == Phase::Done)
    }

    /// Runs every remaining step.
    pub fn run(&mut self) -> Result<(), SessionError> {
        while !self.step(usize::MAX)? {}
        Ok(())
    }

    /// Share of the trace's bytes read so far, in `[0, 1]`.
    pub fn progress(&self) -> f64 {
        match self.phase() {
            Phase::Done => 1.0,
            Phase::Replay => self.cursor as f64 / self.text.len() as f64,
        }
    }

    /// Records (non-blank lines) in the trace, counted when the session started.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Requests replayed so far.
    pub fn replayed(&self) -> u64 {
        self.replayed
    }

    /// Invalid lines skipped so far.
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    /// The timestamp of the last replayed request that has one.
    pub fn trace_time_ms(&self) -> Option<u64> {
        self.last_time
    }

    /// The first timestamp and the latest, of the requests replayed so far.
    pub fn trace_span_ms(&self) -> Option<(u64, u64)> {
        self.times
    }

    /// The histories, in row order: a policy and a capacity in blocks (`None` for `inf`).
    pub fn histories(&self) -> &[(Policy, Option<usize>)] {
        &self.config.histories
    }

    /// The rows so far, one per history, in configuration order. Heap bytes are a 64-bit
    /// router's.
    pub fn results(&self) -> Vec<Row> {
        let mut rows = self.engine.results();
        for row in &mut rows {
            row.heap_bytes = row.capacity.map(footprint::heap_bytes);
        }
        rows
    }

    /// The summary fields of `kvreuse replay --json`, as they stand.
    pub fn summary(&self) -> Summary {
        Summary {
            requests: self.replayed,
            measured_requests: self.config.counted(self.replayed as usize) as u64,
            block_size: self.config.block_size,
            warmup: match self.warmup {
                Warmup::Fraction(f) => f,
                Warmup::Requests(_) => 0.0,
            },
            skipped_lines: self.skipped,
        }
    }
}

/// Records in `text`: its non-blank lines, or, when bad lines are to be skipped (and so not
/// counted), its valid records, which takes a parse.
fn count_records(text: &[u8], hasher: &DynamoHasher, skip_invalid: bool) -> u64 {
    let lines = numbered(1, text).map(|(_, line)| line);
    if skip_invalid {
        lines.filter(|l| matches!(parse_line(l, hasher), Ok(Some(_)))).count() as u64
    } else {
        lines.filter(|l| !l.iter().all(u8::is_ascii_whitespace)).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvreuse_core::trace::Request;

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
            assert!(step > 1000 || calls + 1 >= 3993 / step, "{step}: {calls} calls");
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
        assert!(error.to_string().starts_with("line 3:16: "), "{error}");
        assert!(!error.is_range());
        s.trace.skip_invalid = true;
        let mut session = Session::new(text, &s).unwrap();
        session.run().unwrap();
        assert_eq!((session.replayed(), session.skipped_lines()), (2, 1));
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
        assert_eq!(session.phase(), Phase::Replay);
        session.run().unwrap();
        assert_eq!(session.phase(), Phase::Done);
        let rows = session.results();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].f0_tokens, 0);
        assert_eq!(session.summary().measured_requests, 0);
    }
}
