//! A run over a trace that advances in slices: the engine behind the JS `Replay` and `Fleet`,
//! in plain Rust.
//!
//! A browser page must not freeze while a trace of a million lines is read and replayed, so
//! the work is cut into steps the caller schedules. A [`Session`] takes its trace either as
//! one text, which each [`step`](Session::step) reads a slice of, or in chunks of files the
//! caller hands over ([`push`](Session::push), then [`finish`](Session::finish)); the
//! [`Input`] turns either into requests, in any format the command line reads, and each
//! request goes through the [`Engine`] (the replay's histories, or the simulated fleets) as
//! soon as it is read, so no request is kept after its turn. Everything else mirrors the
//! command line exactly, so that the page and `kvreuse` print the same numbers for the same
//! input:
//!
//! - the settings are the shared setup's ([`ReplaySettings`], [`FleetSettings`]), settled by
//!   the first file's format (its block size when none is given);
//! - a warm-up given as a share ends before request `floor(warmup * records)`, the records
//!   counted first: in a whole JSONL text before the run, in kv-cache-tester documents once
//!   all are read; chunked JSONL cannot be counted in advance, so it takes a number of
//!   warm-up requests instead;
//! - heap bytes are a 64-bit router's ([`crate::footprint`]).
//!
//! This module has no JS in it, so the same code runs natively for timing and host tests.

use alloc::vec::Vec;
use core::fmt;

use kvreuse_core::fleet::{Fleet, FleetError, FleetRow};
use kvreuse_core::replay::{Policy, Replay, ReplayConfig, ReplayError, Row};
use kvreuse_core::setup::{FleetSettings, ReplaySettings, SetupError, TraceSettings, Warmup};
use kvreuse_core::trace::{Request, SNIFF_BYTES, sniff};

use crate::footprint;
use crate::input::{Input, InputError, InputStats, count_records};

/// Why a run could not be set up or continued.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SessionError {
    /// A setting is unusable (the shared setup's judgement, as on the command line).
    Setup(SetupError),
    /// The trace could not be read.
    Input(InputError),
    /// The replay engine refused the trace.
    Replay(ReplayError),
    /// The fleet engine refused the trace.
    Fleet(FleetError),
    /// A warm-up share over chunked JSONL, whose requests cannot be counted in advance.
    WarmupNeedsCount,
    /// A chunk for a session given its whole trace.
    WholeText,
}

impl SessionError {
    /// Whether the error is about a value out of its range (a JS `RangeError`) rather than
    /// input of the wrong shape (a `TypeError`).
    pub fn is_range(&self) -> bool {
        match self {
            Self::Setup(error) => error.is_range(),
            Self::Input(error) => error.is_range(),
            Self::Replay(_) | Self::Fleet(_) => true,
            Self::WarmupNeedsCount | Self::WholeText => false,
        }
    }

    /// The trace line the error is about, if it is about one.
    pub fn line(&self) -> Option<u64> {
        match self {
            Self::Input(error) => error.line(),
            _ => None,
        }
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The option's name as this front end spells it, then the shared setup's words.
            Self::Setup(error) => write!(f, "options.{}: {error}", error.setting.js_name()),
            Self::Input(error) => error.fmt(f),
            Self::Replay(error) => error.fmt(f),
            Self::Fleet(error) => error.fmt(f),
            Self::WarmupNeedsCount => f.write_str(
                "options.warmup: a share of the requests needs their number before the first \
                 is replayed, which a trace given in chunks does not tell; give warmupRequests \
                 instead, or the whole text",
            ),
            Self::WholeText => f.write_str(
                "this run was given its whole trace; chunks go to one created with a null trace",
            ),
        }
    }
}

impl core::error::Error for SessionError {}

impl From<SetupError> for SessionError {
    fn from(error: SetupError) -> Self {
        SessionError::Setup(error)
    }
}

impl From<InputError> for SessionError {
    fn from(error: InputError) -> Self {
        SessionError::Input(error)
    }
}

/// What a session runs the requests through: the replay's histories or the simulated fleets.
/// It holds its settings, settled by the session once the first file tells the format, and
/// its engine once started. Called through `dyn`, so that the session's reading code exists
/// once for both engines.
pub trait Engine {
    /// The trace part of the settings.
    fn trace(&self) -> &TraceSettings;

    /// The trace part, to settle.
    fn trace_mut(&mut self) -> &mut TraceSettings;

    /// Checks the settings, settled, as far as can be done before the first request.
    fn check(&self) -> Result<(), SessionError>;

    /// Whether [`start`](Self::start) has been called.
    fn started(&self) -> bool;

    /// Starts the engine for the settled settings, counting from request `measure_from`.
    fn start(&mut self, measure_from: usize) -> Result<(), SessionError>;

    /// Runs one request through the started engine.
    fn push(&mut self, request: &Request) -> Result<(), SessionError>;

    /// Called once after the last request.
    fn done(&mut self) -> Result<(), SessionError>;
}

/// What an engine's `push` and `done` rely on: the session starts an engine before its
/// first request and before its end (engines are built only here, inside sessions).
const STARTED: &str = "the session starts the engine first";

/// The replay's histories (`kvreuse replay`).
#[derive(Debug)]
pub struct ReplayEngine {
    settings: ReplaySettings,
    started: Option<(ReplayConfig, Replay)>,
}

impl ReplayEngine {
    /// An engine for `settings`, not started.
    fn new(settings: &ReplaySettings) -> Self {
        ReplayEngine { settings: settings.clone(), started: None }
    }
}

impl Engine for ReplayEngine {
    fn trace(&self) -> &TraceSettings {
        &self.settings.trace
    }

    fn trace_mut(&mut self) -> &mut TraceSettings {
        &mut self.settings.trace
    }

    fn check(&self) -> Result<(), SessionError> {
        self.settings.grid(footprint::blocks)?;
        self.settings.trace.hasher()?;
        Ok(())
    }

    fn started(&self) -> bool {
        self.started.is_some()
    }

    fn start(&mut self, measure_from: usize) -> Result<(), SessionError> {
        let mut config = self.settings.grid(footprint::blocks)?;
        config.measure_from = measure_from;
        let replay = Replay::new(&config).map_err(SessionError::Replay)?;
        self.started = Some((config, replay));
        Ok(())
    }

    fn push(&mut self, request: &Request) -> Result<(), SessionError> {
        let (_, replay) = self.started.as_mut().expect(STARTED);
        replay.push(request).map_err(SessionError::Replay)
    }

    fn done(&mut self) -> Result<(), SessionError> {
        Ok(())
    }
}

/// The simulated fleets (`kvreuse fleet`).
#[derive(Debug)]
pub struct FleetEngine {
    settings: FleetSettings,
    fleet: Option<Fleet>,
}

impl FleetEngine {
    /// An engine for `settings`, not started.
    fn new(settings: &FleetSettings) -> Self {
        FleetEngine { settings: settings.clone(), fleet: None }
    }
}

impl Engine for FleetEngine {
    fn trace(&self) -> &TraceSettings {
        &self.settings.trace
    }

    fn trace_mut(&mut self) -> &mut TraceSettings {
        &mut self.settings.trace
    }

    fn check(&self) -> Result<(), SessionError> {
        self.settings.config(footprint::blocks)?;
        Ok(())
    }

    fn started(&self) -> bool {
        self.fleet.is_some()
    }

    fn start(&mut self, measure_from: usize) -> Result<(), SessionError> {
        let mut config = self.settings.config(footprint::blocks)?;
        config.measure_from = measure_from;
        self.fleet = Some(Fleet::new(&config).map_err(SessionError::Fleet)?);
        Ok(())
    }

    fn push(&mut self, request: &Request) -> Result<(), SessionError> {
        let fleet = self.fleet.as_mut().expect(STARTED);
        fleet.push(request).map_err(SessionError::Fleet)
    }

    fn done(&mut self) -> Result<(), SessionError> {
        let fleet = self.fleet.as_mut().expect(STARTED);
        fleet.play_out().map_err(SessionError::Fleet)
    }
}

/// Where a session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Reading the trace and running each request through as it is read.
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

/// The summary fields `kvreuse replay --json` and `kvreuse fleet --json` print beside the
/// rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Valid requests run.
    pub requests: u64,
    /// Requests after the warm-up.
    pub measured_requests: u64,
    /// Tokens per block.
    pub block_size: usize,
    /// The warm-up fraction (0 when given as a number of requests).
    pub warmup: f64,
    /// The number of warm-up requests, when given as a number.
    pub warmup_requests: Option<u64>,
    /// Invalid lines skipped.
    pub skipped_lines: u64,
}

/// Bytes of a whole text a step hands the input at a time: a few hundred requests of the
/// bundled trace, so a step's work stays close to what it was asked for.
const TEXT_SLICE: usize = 32 << 10;

/// A whole text, read a slice per step.
#[derive(Debug)]
struct Text {
    bytes: Vec<u8>,
    cursor: usize,
}

/// A run over a trace, advanced in steps. See the [module docs](self).
#[derive(Debug)]
pub struct Session<E> {
    engine: E,
    run: Run,
}

/// A replay of the histories.
pub type ReplaySession = Session<ReplayEngine>;

/// A simulation of fleets.
pub type FleetSession = Session<FleetEngine>;

/// The reading and the bookkeeping of a session, the same for both engines.
#[derive(Debug)]
struct Run {
    input: Input,
    /// The trace as one text, or `None` when it comes in chunks.
    text: Option<Text>,
    /// Records in the trace, once known.
    records: Option<u64>,
    /// The first counted request, once placed.
    measure_from: Option<u64>,
    replayed: u64,
    /// The first timestamp and the latest, of the requests run.
    times: Option<(u64, u64)>,
    /// The timestamp of the last request run that has one.
    last_time: Option<u64>,
    /// The error that stopped the run, given again by every later call.
    failed: Option<SessionError>,
    /// Whether the settings have been settled by the first file.
    settled: bool,
    done: bool,
}

impl ReplaySession {
    /// Checks `settings` and prepares to run `text` (a whole trace, in any format). The
    /// format is told and the records of a JSONL trace are counted now (a scan for line
    /// ends, fast): the progress needs their number, and a warm-up share its place.
    pub fn new(text: Vec<u8>, settings: &ReplaySettings) -> Result<Self, SessionError> {
        Session::over_text(text, ReplayEngine::new(settings))
    }

    /// Checks `settings` and prepares to run a trace handed over in chunks.
    pub fn chunked(settings: &ReplaySettings) -> Result<Self, SessionError> {
        Session::over_chunks(ReplayEngine::new(settings))
    }

    /// The settings, settled by the first file.
    pub fn settings(&self) -> &ReplaySettings {
        &self.engine.settings
    }

    /// The histories, in row order: a policy and a capacity in blocks (`None` for `inf`).
    pub fn histories(&self) -> Vec<(Policy, Option<usize>)> {
        self.settings().grid(footprint::blocks).map(|c| c.histories).unwrap_or_default()
    }

    /// The rows so far, one per history, in configuration order. Heap bytes are a 64-bit
    /// router's. Before the first request, every count is zero.
    pub fn results(&self) -> Vec<Row> {
        let mut rows = match &self.engine.started {
            Some((_, replay)) => replay.results(),
            None => self
                .histories()
                .into_iter()
                .map(|(policy, capacity)| Row::empty(policy, capacity))
                .collect(),
        };
        for row in &mut rows {
            row.heap_bytes = row.capacity.map(footprint::heap_bytes);
        }
        rows
    }

    /// The engine's configuration, once started.
    pub fn config(&self) -> Option<&ReplayConfig> {
        self.engine.started.as_ref().map(|(config, _)| config)
    }
}

impl FleetSession {
    /// Checks `settings` and prepares to run `text` (a whole trace, in any format), as
    /// [`ReplaySession::new`] does.
    pub fn new(text: Vec<u8>, settings: &FleetSettings) -> Result<Self, SessionError> {
        Session::over_text(text, FleetEngine::new(settings))
    }

    /// Checks `settings` and prepares to run a trace handed over in chunks.
    pub fn chunked(settings: &FleetSettings) -> Result<Self, SessionError> {
        Session::over_chunks(FleetEngine::new(settings))
    }

    /// The settings, settled by the first file.
    pub fn settings(&self) -> &FleetSettings {
        &self.engine.settings
    }

    /// The rows: final once the run is done; before, as they stand (requests in flight not
    /// counted yet). Before the first request, every count is zero.
    pub fn results(&self) -> Vec<FleetRow> {
        match &self.engine.fleet {
            Some(fleet) => fleet.rows(),
            None => self.settings().config(footprint::blocks).map_or_else(
                |_| Vec::new(),
                |config| config.shapes.iter().map(FleetRow::empty).collect(),
            ),
        }
    }

    /// The ceiling's history in blocks (`None`: unbounded), as a 64-bit router's budget
    /// holds them.
    pub fn history_blocks(&self) -> Option<usize> {
        footprint::blocks(self.settings().history).ok().flatten()
    }

    /// Tokens per engine block, once the format is known.
    pub fn engine_block_size(&self) -> usize {
        let settings = self.settings();
        settings.engine_block_size.unwrap_or(settings.trace.block_size)
    }
}

impl<E: Engine> Session<E> {
    fn over_text(text: Vec<u8>, mut engine: E) -> Result<Self, SessionError> {
        let head = &text[..text.len().min(SNIFF_BYTES)];
        engine.trace_mut().settle(sniff(head));
        let records = count_records(&text, engine.trace())?;
        engine.check()?;
        let mut session = Session::over_chunks(engine)?;
        session.run.records = records;
        session.run.text = Some(Text { bytes: text, cursor: 0 });
        session.run.input.begin("")?;
        Ok(session)
    }

    fn over_chunks(engine: E) -> Result<Self, SessionError> {
        // The settings are checked now when the block size is known (given, or a format's),
        // else once the first file's first bytes have told it (`settle`), as the CLI checks
        // them: some depend on it (an engine block size, a capacity in bytes).
        let trace = engine.trace();
        if trace.block_size_given || trace.format.is_some() {
            engine.check()?;
        }
        let run = Run {
            input: Input::new(engine.trace()),
            text: None,
            records: None,
            measure_from: None,
            replayed: 0,
            times: None,
            last_time: None,
            failed: None,
            settled: false,
            done: false,
        };
        Ok(Session { engine, run })
    }

    /// Starts the next file of a chunked trace, named `name` in messages.
    pub fn begin_file(&mut self, name: &str) -> Result<(), SessionError> {
        self.run.begin_file(&mut self.engine, name)
    }

    /// Takes the next chunk of the current file and runs the requests it completes (a
    /// kv-cache-tester document's requests wait for [`finish`](Self::finish)).
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), SessionError> {
        self.run.push(&mut self.engine, chunk)
    }

    /// Ends a chunked trace. The requests still to run (a document set's) are run by
    /// [`step`](Self::step).
    pub fn finish(&mut self) -> Result<(), SessionError> {
        self.run.finish(&mut self.engine)
    }

    /// Runs up to `max` requests (reading the text as needed). Returns whether the run is
    /// done: all of the text, or all of a finished chunked trace, run. After an error every
    /// call gives it again.
    pub fn step(&mut self, max: usize) -> Result<bool, SessionError> {
        self.run.step(&mut self.engine, max)
    }

    /// Runs every remaining step.
    pub fn run(&mut self) -> Result<(), SessionError> {
        while !self.step(usize::MAX)? {
            if self.run.text.is_none() && !self.run.input.is_finished() {
                // A chunked trace waits for its chunks.
                break;
            }
        }
        Ok(())
    }

    /// The phase the next [`step`](Self::step) works in.
    pub fn phase(&self) -> Phase {
        if self.run.done { Phase::Done } else { Phase::Replay }
    }

    /// Share of the work done, in `[0, 1]`, 1 only when done: of the requests run, once
    /// their number is known (a JSONL text's from the start, a chunked trace's after
    /// [`finish`](Self::finish): 0 before, the caller knows the bytes it handed over); for
    /// documents given as one text, half for reading it and half for running them.
    pub fn progress(&self) -> f64 {
        self.run.progress()
    }

    /// Records in the trace, once known: a JSONL text's counted when the session was
    /// created, documents' once all are read.
    pub fn records(&self) -> Option<u64> {
        self.run.records
    }

    /// Requests run so far.
    pub fn replayed(&self) -> u64 {
        self.run.replayed
    }

    /// Invalid lines skipped so far.
    pub fn skipped_lines(&self) -> u64 {
        self.run.input.stats().skipped
    }

    /// What the input has read: the files and their formats.
    pub fn input_stats(&self) -> &InputStats {
        self.run.input.stats()
    }

    /// The timestamp of the last request run that has one.
    pub fn trace_time_ms(&self) -> Option<u64> {
        self.run.last_time
    }

    /// The first timestamp and the latest, of the requests run so far.
    pub fn trace_span_ms(&self) -> Option<(u64, u64)> {
        self.run.times
    }

    /// The summary fields, as they stand.
    pub fn summary(&self) -> Summary {
        self.run.summary(&self.engine)
    }
}

impl Run {
    fn begin_file(&mut self, engine: &mut dyn Engine, name: &str) -> Result<(), SessionError> {
        if self.text.is_some() {
            return Err(SessionError::WholeText);
        }
        self.guard(|s| {
            let read = s.input.begin(name);
            s.settle(engine)?;
            s.run_pending(engine)?;
            Ok(read?)
        })
    }

    fn push(&mut self, engine: &mut dyn Engine, chunk: &[u8]) -> Result<(), SessionError> {
        if self.text.is_some() {
            return Err(SessionError::WholeText);
        }
        self.guard(|s| {
            let read = s.input.push(chunk);
            s.settle(engine)?;
            // The requests before a bad line run first, as on the command line.
            s.run_pending(engine)?;
            Ok(read?)
        })
    }

    fn finish(&mut self, engine: &mut dyn Engine) -> Result<(), SessionError> {
        if self.text.is_some() {
            return Err(SessionError::WholeText);
        }
        self.guard(|s| {
            let read = s.input.finish();
            if read.is_err() {
                s.run_pending(engine)?;
            }
            read?;
            s.input_finished(engine)
        })
    }

    fn step(&mut self, engine: &mut dyn Engine, max: usize) -> Result<bool, SessionError> {
        self.guard(|s| s.step_inner(engine, max.max(1)))
    }

    /// Runs `work` unless an error stopped the run, and keeps the error it returns.
    fn guard<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, SessionError>,
    ) -> Result<T, SessionError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        work(self).inspect_err(|error| self.failed = Some(error.clone()))
    }

    fn step_inner(&mut self, engine: &mut dyn Engine, max: usize) -> Result<bool, SessionError> {
        let mut work = 0;
        while work < max && !self.done {
            if let Some(request) = self.input.next_request() {
                self.run_one(engine, request)?;
                work += 1;
                continue;
            }
            match &mut self.text {
                Some(text) if text.cursor < text.bytes.len() => {
                    let end = (text.cursor + TEXT_SLICE).min(text.bytes.len());
                    let slice = &text.bytes[text.cursor..end];
                    text.cursor = end;
                    let read = self.input.push(slice);
                    self.settle(engine)?;
                    if let Err(error) = read {
                        // The requests before a bad line run first, as on the command line.
                        self.run_pending(engine)?;
                        return Err(error.into());
                    }
                }
                Some(text) if !self.input.is_finished() => {
                    // The text is no longer needed.
                    text.bytes = Vec::new();
                    text.cursor = 0;
                    let read = self.input.finish();
                    if let Err(error) = read {
                        self.run_pending(engine)?;
                        return Err(error.into());
                    }
                    self.input_finished(engine)?;
                }
                _ if self.input.is_finished() => {
                    self.start(engine)?;
                    engine.done()?;
                    self.done = true;
                }
                // A chunked trace waits for its next chunk.
                _ => break,
            }
        }
        Ok(self.done)
    }

    /// Once the first file has told the format: the settings settled and checked again.
    fn settle(&mut self, engine: &mut dyn Engine) -> Result<(), SessionError> {
        if self.input.settled() && !self.settled {
            self.settled = true;
            *engine.trace_mut() = self.input.settings().clone();
            engine.check()?;
        }
        Ok(())
    }

    /// Once the input has ended: the settings settled (an empty trace settles nothing), and
    /// the number of records known.
    fn input_finished(&mut self, engine: &mut dyn Engine) -> Result<(), SessionError> {
        self.settle(engine)?;
        self.records.get_or_insert(self.input.stats().records);
        Ok(())
    }

    /// Runs the requests read (a chunk's; a document set's wait for the steps after
    /// [`finish`](Session::finish)).
    fn run_pending(&mut self, engine: &mut dyn Engine) -> Result<(), SessionError> {
        while let Some(request) = self.input.next_request() {
            self.run_one(engine, request)?;
        }
        Ok(())
    }

    /// Starts the engine when the first request is to run (or the trace ends without one),
    /// counting from the warm-up's end.
    fn start(&mut self, engine: &mut dyn Engine) -> Result<(), SessionError> {
        if engine.started() {
            return Ok(());
        }
        let warmup = engine.trace().warmup;
        let records =
            if self.input.is_finished() { Some(self.input.stats().records) } else { self.records };
        let from = match (warmup.measure_from(records), records) {
            (Some(from), _) => from,
            (None, None) => return Err(SessionError::WarmupNeedsCount),
            (None, Some(_)) => 0,
        };
        self.measure_from = Some(from);
        engine.start(usize::try_from(from).unwrap_or(usize::MAX))
    }

    fn run_one(&mut self, engine: &mut dyn Engine, request: Request) -> Result<(), SessionError> {
        self.start(engine)?;
        engine.push(&request)?;
        self.replayed += 1;
        if let Some(t) = request.timestamp {
            self.last_time = Some(t);
            self.times = Some(self.times.map_or((t, t), |(a, b)| (a, b.max(t))));
        }
        Ok(())
    }

    fn progress(&self) -> f64 {
        if self.done {
            return 1.0;
        }
        let run = |records: u64| self.replayed as f64 / records.max(1) as f64;
        let share = match (&self.text, self.records) {
            (Some(_), Some(records)) if self.input.has_documents() => 0.5 + run(records) / 2.0,
            (Some(text), None) => text.cursor as f64 / text.bytes.len().max(1) as f64 / 2.0,
            (_, Some(records)) => run(records),
            (None, None) => 0.0,
        };
        // Requests still in flight are played out after the last one is routed.
        share.min(1.0 - f64::EPSILON)
    }

    fn summary(&self, engine: &dyn Engine) -> Summary {
        let trace = engine.trace();
        let (warmup, warmup_requests) = match trace.warmup {
            Warmup::Fraction(f) => (f, None),
            Warmup::Requests(n) => (0.0, Some(n)),
        };
        Summary {
            requests: self.replayed,
            measured_requests: self.replayed.saturating_sub(self.measure_from.unwrap_or(0)),
            block_size: trace.block_size,
            warmup,
            warmup_requests,
            skipped_lines: self.input.stats().skipped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;
    use kvreuse_core::chain::DynamoHasher;
    use kvreuse_core::fleet::FleetConfig;
    use kvreuse_core::setup::Setting;
    use kvreuse_core::trace::parse_line;

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
            let mut session = ReplaySession::new(TRACE.to_vec(), &settings).unwrap();
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
        let mut session = ReplaySession::new(text.clone(), &s).unwrap();
        let error = session.run().unwrap_err();
        assert_eq!(error.line(), Some(3));
        assert!(error.to_string().starts_with("line 3:16: "), "{error}");
        assert!(!error.is_range());
        s.trace.skip_invalid = true;
        let mut session = ReplaySession::new(text, &s).unwrap();
        session.run().unwrap();
        assert_eq!((session.replayed(), session.skipped_lines()), (2, 1));
        assert_eq!(session.results()[0].f0_tokens, 5);
    }

    #[test]
    fn settings_are_checked_before_any_work() {
        let ok = settings("10", "fifo", 0.0);
        let check = |s: &ReplaySettings| ReplaySession::new(Vec::new(), s).map(|_| ()).unwrap_err();
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
        let mut session =
            ReplaySession::new(b"\n\n".to_vec(), &settings("10", "fifo", 0.5)).unwrap();
        assert_eq!(session.phase(), Phase::Replay);
        session.run().unwrap();
        assert_eq!(session.phase(), Phase::Done);
        let rows = session.results();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].f0_tokens, 0);
        assert_eq!(session.summary().measured_requests, 0);
    }

    fn requests() -> Vec<Request> {
        let hasher = DynamoHasher::new(512).unwrap();
        TRACE.split(|&b| b == b'\n').filter_map(|l| parse_line(l, &hasher).unwrap()).collect()
    }

    /// A trace handed over in chunks of any size, in one file or cut into two, gives the
    /// rows of the whole text.
    #[test]
    fn chunks_give_the_rows_of_the_whole_text() {
        let mut settings = settings("1k,inf", "fifo,lru", 0.0);
        settings.trace.set_warmup_requests(500);
        let mut whole = ReplaySession::new(TRACE.to_vec(), &settings).unwrap();
        whole.run().unwrap();
        let cut = TRACE.len() / 2
            + TRACE[TRACE.len() / 2..].iter().position(|&b| b == b'\n').unwrap()
            + 1;
        for chunk in [1000, 1 << 20] {
            let mut chunked = ReplaySession::chunked(&settings).unwrap();
            chunked.begin_file("a.jsonl").unwrap();
            TRACE[..cut].chunks(chunk).for_each(|c| chunked.push(c).unwrap());
            chunked.begin_file("b.jsonl").unwrap();
            TRACE[cut..].chunks(chunk).for_each(|c| chunked.push(c).unwrap());
            assert_eq!(chunked.replayed(), 3993, "JSONL requests run as their chunks arrive");
            assert_eq!(chunked.phase(), Phase::Replay);
            chunked.finish().unwrap();
            assert!(chunked.step(1).unwrap());
            assert_eq!(chunked.results(), whole.results());
            assert_eq!(chunked.summary(), whole.summary());
        }
    }

    #[test]
    fn a_warmup_share_needs_the_whole_text_or_documents() {
        let settings = settings("1k", "fifo", 0.5);
        let mut chunked = ReplaySession::chunked(&settings).unwrap();
        let error = chunked.push(TRACE).unwrap_err();
        assert_eq!(error, SessionError::WarmupNeedsCount);
        assert_eq!(chunked.step(1).unwrap_err(), error, "the error stays");
        let mut whole = ReplaySession::new(TRACE.to_vec(), &settings).unwrap();
        assert_eq!(whole.push(b"{}").unwrap_err(), SessionError::WholeText);
    }

    /// The fleet session gives the core engine's rows, stepped or not.
    #[test]
    fn fleet_steps_give_the_engines_rows() {
        let mut settings = FleetSettings::default();
        settings.set(Setting::Workers, "2,3").unwrap();
        settings.set(Setting::WorkerCapacity, "300,3k").unwrap();
        settings.set(Setting::Router, "round-robin,kv,session").unwrap();
        settings.set(Setting::Speedup, "100").unwrap();
        settings.set(Setting::Warmup, "0.1").unwrap();
        let mut config: FleetConfig = settings.config(footprint::blocks).unwrap();
        config.measure_from = 399;
        let mut engine = Fleet::new(&config).unwrap();
        requests().iter().for_each(|r| engine.push(r).unwrap());
        let want = engine.finish().unwrap();
        for step in [97, usize::MAX] {
            let mut session = FleetSession::new(TRACE.to_vec(), &settings).unwrap();
            while !session.step(step).unwrap() {}
            assert_eq!(session.results(), want, "step {step}");
            assert_eq!(session.summary().measured_requests, 3993 - 399);
        }
    }

    /// A chunked session checks the settings that depend on the block size once the first
    /// file has told it, as the command line does: engine blocks of 48 tokens suit a Bailian
    /// trace's 16, not the default 512.
    #[test]
    fn a_chunked_fleet_checks_its_settings_against_the_told_block_size() {
        let line = |k: u64| {
            alloc::format!(
                "{{\"chat_id\": {k}, \"parent_chat_id\": -1, \"timestamp\": {k}.5, \"input_length\": 40, \"output_length\": 7, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [{}, {}, {}]}}\n",
                k % 5,
                k % 5 * 10 + 1,
                k * 10 + 2
            )
        };
        let text: alloc::string::String = (0..60).map(line).collect();
        let mut settings = FleetSettings::default();
        settings.set(Setting::EngineBlockSize, "48").unwrap();
        let mut whole = FleetSession::new(text.clone().into_bytes(), &settings).unwrap();
        while !whole.step(usize::MAX).unwrap() {}
        let mut chunked = FleetSession::chunked(&settings).unwrap();
        chunked.begin_file("b.jsonl").unwrap();
        text.as_bytes().chunks(100).for_each(|c| chunked.push(c).unwrap());
        chunked.finish().unwrap();
        while !chunked.step(usize::MAX).unwrap() {}
        assert_eq!(chunked.results(), whole.results());
        assert!(whole.results()[0].funnel.f0 > 0);
        // Against blocks of 512, given, 48 is refused at once.
        settings.set(Setting::BlockSize, "512").unwrap();
        assert!(FleetSession::chunked(&settings).is_err());
    }
}
