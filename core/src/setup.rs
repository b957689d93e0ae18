//! Run settings as people write them, parsed and checked once for every front end.
//!
//! The command line, the browser build and the Python package take the same settings under
//! their own names: `--capacity 1k,10k` on the command line, `capacities: "1k,10k"` in
//! JavaScript, `capacities="1k,10k"` in Python. Each front end only maps its flags or keys onto
//! a [`Setting`] and hands the value here, so a value means the same everywhere, a bad one gets
//! the same message everywhere (the front end puts its own name for the setting in front:
//! [`Setting::flag`], [`Setting::js_name`], [`Setting::python_name`]), and a new setting is
//! added in one place.
//!
//! - [`parse_quantity`] reads "a number with an optional unit", the one syntax for sizes and
//!   counts: history capacities, byte budgets in environment variables, worker caches.
//! - [`ReplaySettings`] holds what `kvreuse replay` is asked for and turns it into the
//!   engine's [`ReplayConfig`]; [`TraceSettings`] is the part every run over a trace shares
//!   (block size, warm-up, invalid lines).

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::chain::{ChainError, DynamoHasher, check_block_size};
use crate::fleet::{FleetConfig, FleetError, Router, RouterError, Timing};
use crate::json::Json;
use crate::names::{Quoted, UnknownName};
use crate::replay::{Capacity, CapacityError, Policy, ReplayConfig};
use crate::trace::{Format, Sniffed};

/// A setting of a run, by the names each front end gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Setting {
    /// Tokens per block.
    BlockSize,
    /// History sizes (a list).
    Capacity,
    /// Eviction policies (a list).
    Policy,
    /// The share of the requests that only warms the histories up.
    Warmup,
    /// The number of requests that only warm the histories up.
    WarmupRequests,
    /// Count and skip invalid records instead of stopping at the first.
    SkipInvalid,
    /// The trace format (detected per file when not given).
    Format,
    /// Seconds between the starts of concurrent conversations (kv-cache-tester documents).
    Stagger,
    /// Workers per fleet (a list).
    Workers,
    /// Blocks (or bytes) of each worker's cache (a list).
    WorkerCapacity,
    /// Routers, with parameters (a list).
    Router,
    /// Tokens per block of the workers' caches.
    EngineBlockSize,
    /// Bytes of KV cache per token, for worker capacities in bytes.
    KvBytesPerToken,
    /// The ceiling's history (F1).
    History,
    /// How time passes: instant or mocker.
    Timing,
    /// Divides the simulated engines' pass times.
    Speedup,
    /// Seeds the simulation's random choices.
    Seed,
}

impl Setting {
    /// Every setting, in declaration order.
    pub const ALL: [Setting; 17] = [
        Setting::BlockSize,
        Setting::Capacity,
        Setting::Policy,
        Setting::Warmup,
        Setting::WarmupRequests,
        Setting::SkipInvalid,
        Setting::Format,
        Setting::Stagger,
        Setting::Workers,
        Setting::WorkerCapacity,
        Setting::Router,
        Setting::EngineBlockSize,
        Setting::KvBytesPerToken,
        Setting::History,
        Setting::Timing,
        Setting::Speedup,
        Setting::Seed,
    ];

    /// The command-line flag: `--capacity`.
    pub const fn flag(self) -> &'static str {
        match self {
            Setting::BlockSize => "--block-size",
            Setting::Capacity => "--capacity",
            Setting::Policy => "--policy",
            Setting::Warmup => "--warmup",
            Setting::WarmupRequests => "--warmup-requests",
            Setting::SkipInvalid => "--skip-invalid",
            Setting::Format => "--format",
            Setting::Stagger => "--stagger",
            Setting::Workers => "--workers",
            Setting::WorkerCapacity => "--worker-capacity",
            Setting::Router => "--router",
            Setting::EngineBlockSize => "--engine-block-size",
            Setting::KvBytesPerToken => "--kv-bytes-per-token",
            Setting::History => "--history",
            Setting::Timing => "--timing",
            Setting::Speedup => "--speedup",
            Setting::Seed => "--seed",
        }
    }

    /// The JavaScript option: the flag in camelCase, plural when it takes a list.
    pub const fn js_name(self) -> &'static str {
        match self {
            Setting::BlockSize => "blockSize",
            Setting::Capacity => "capacities",
            Setting::Policy => "policies",
            Setting::Warmup => "warmup",
            Setting::WarmupRequests => "warmupRequests",
            Setting::SkipInvalid => "skipInvalid",
            Setting::Format => "format",
            Setting::Stagger => "stagger",
            Setting::Workers => "workers",
            Setting::WorkerCapacity => "workerCapacities",
            Setting::Router => "routers",
            Setting::EngineBlockSize => "engineBlockSize",
            Setting::KvBytesPerToken => "kvBytesPerToken",
            Setting::History => "history",
            Setting::Timing => "timing",
            Setting::Speedup => "speedup",
            Setting::Seed => "seed",
        }
    }

    /// The Python keyword: the flag in snake_case, plural when it takes a list.
    pub const fn python_name(self) -> &'static str {
        match self {
            Setting::BlockSize => "block_size",
            Setting::Capacity => "capacities",
            Setting::Policy => "policies",
            Setting::Warmup => "warmup",
            Setting::WarmupRequests => "warmup_requests",
            Setting::SkipInvalid => "skip_invalid",
            Setting::Format => "format",
            Setting::Stagger => "stagger",
            Setting::Workers => "workers",
            Setting::WorkerCapacity => "worker_capacities",
            Setting::Router => "routers",
            Setting::EngineBlockSize => "engine_block_size",
            Setting::KvBytesPerToken => "kv_bytes_per_token",
            Setting::History => "history",
            Setting::Timing => "timing",
            Setting::Speedup => "speedup",
            Setting::Seed => "seed",
        }
    }

    /// What one value of the setting is called in messages.
    const fn noun(self) -> &'static str {
        match self {
            Setting::BlockSize => "block size",
            Setting::Capacity => "capacity",
            Setting::Policy => "policy",
            Setting::Warmup | Setting::WarmupRequests => "warm-up",
            Setting::SkipInvalid => "switch",
            Setting::Format => "format",
            Setting::Stagger => "stagger",
            Setting::Workers => "worker count",
            Setting::WorkerCapacity => "worker capacity",
            Setting::Router => "router",
            Setting::EngineBlockSize => "block size",
            Setting::KvBytesPerToken => "size",
            Setting::History => "history",
            Setting::Timing => "timing",
            Setting::Speedup => "speedup",
            Setting::Seed => "seed",
        }
    }
}

/// A setting that cannot be used, and why. `Display` prints the reason only; each front end
/// puts its name for [`setting`](Self::setting) in front.
#[derive(Clone, Debug, PartialEq)]
pub struct SetupError {
    /// The setting at fault.
    pub setting: Setting,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a setting.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Problem {
    /// A size that cannot be read or used, as written.
    Capacity {
        /// The value as written.
        text: String,
        /// What is wrong with it.
        error: CapacityError,
    },
    /// A name that names nothing of its kind.
    Name(UnknownName),
    /// An empty list.
    Empty,
    /// Not a number in `[0, 1)`, as written.
    NotAFraction(String),
    /// Not a whole number, as written.
    NotACount(String),
    /// Not a number of seconds (a non-negative decimal), as written.
    NotSeconds(String),
    /// A block size the hash chains cannot use.
    BlockSize(ChainError),
    /// The setting does not apply to this kind of run.
    NotASetting,
    /// A router that cannot be read.
    Router(RouterError),
    /// A fleet that cannot be simulated as set.
    Fleet(FleetError),
    /// A worker capacity in bytes without the bytes per token to convert it.
    NeedsKvBytes(String),
    /// Not a positive number, as written.
    NotPositive(String),
    /// Not blocks or bytes, as written.
    NotWorkerCapacity(String),
    /// The setting acts on something the other settings leave out: what it does, and why
    /// there is nothing.
    NothingToActOn(&'static str),
}

impl SetupError {
    fn new(setting: Setting, problem: Problem) -> SetupError {
        SetupError { setting, problem }
    }

    /// Whether the value is out of its range (a JavaScript `RangeError`, a Python
    /// `ValueError`) rather than of the wrong kind (a `TypeError`).
    pub fn is_range(&self) -> bool {
        match &self.problem {
            Problem::Capacity { error, .. } => !matches!(error, CapacityError::Unrecognized),
            Problem::NotAFraction(_)
            | Problem::BlockSize(_)
            | Problem::NotSeconds(_)
            | Problem::Fleet(_)
            | Problem::NotPositive(_) => true,
            Problem::Router(error) => matches!(error, RouterError::Value { .. }),
            Problem::Name(_)
            | Problem::Empty
            | Problem::NotACount(_)
            | Problem::NotASetting
            | Problem::NeedsKvBytes(_)
            | Problem::NotWorkerCapacity(_)
            | Problem::NothingToActOn(_) => false,
        }
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            Problem::Capacity { text, error } => write!(f, "{}: {error}", Quoted(text)),
            Problem::Name(error) => error.fmt(f),
            Problem::Empty => write!(f, "give at least one {}", self.setting.noun()),
            Problem::NotAFraction(text) => write!(f, "{text} is not a fraction in [0, 1)"),
            Problem::NotACount(text) => write!(f, "{} is not a whole number", Quoted(text)),
            Problem::NotSeconds(text) => {
                write!(f, "{} is not a number of seconds (like 60 or 0.5)", Quoted(text))
            }
            Problem::BlockSize(error) => error.fmt(f),
            Problem::NotASetting => write!(f, "not a setting of this kind of run"),
            Problem::Router(error) => error.fmt(f),
            Problem::Fleet(error) => error.fmt(f),
            Problem::NeedsKvBytes(text) => write!(
                f,
                "{} is a size in bytes: it needs the KV cache's bytes per token (layers x 2 x KV \
                 heads x head dimension x bytes per value) to be counted in blocks",
                Quoted(text)
            ),
            Problem::NotPositive(text) => write!(f, "{} is not a positive number", Quoted(text)),
            Problem::NothingToActOn(what) => f.write_str(what),
            Problem::NotWorkerCapacity(text) => write!(
                f,
                "{}: expected blocks (2000, 10k) or bytes (40GiB, with the KV bytes per token)",
                Quoted(text)
            ),
        }
    }
}

impl core::error::Error for SetupError {}

/// A number with an optional unit (see [`parse_quantity`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    /// A plain number, or one with a decimal multiple for counts (`k`, `M`, `G`); what it
    /// counts is the caller's to say (blocks for a capacity, bytes for a byte budget).
    Number(u64),
    /// A number of bytes: with `B`, `KB`, `MB`, `GB`, `TB` (powers of 1000) or `KiB`, `MiB`,
    /// `GiB`, `TiB` (powers of 1024).
    Bytes(u64),
}

/// Why a quantity could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityError {
    /// Not digits followed by a known unit.
    Unrecognized,
    /// Beyond `u64`.
    Overflow,
}

/// Reads "a number with an optional unit": digits, then optionally `k`, `M`, `G` (counts:
/// thousands, millions, billions) or a byte unit, `B`, `KB`, `MB`, `GB`, `TB`, `KiB`, `MiB`,
/// `GiB`, `TiB`. Units are case-insensitive; blanks around the number and the unit are
/// ignored. Zero is returned as it is: whether it is allowed is the caller's to say.
pub fn parse_quantity(text: &str) -> Result<Quantity, QuantityError> {
    let text = text.trim_ascii();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(QuantityError::Unrecognized);
    }
    // Split as bytes (the digits are ASCII), so no string slicing can panic: its panic
    // message alone would bring Unicode tables into the browser build.
    let (number, unit) = text.as_bytes().split_at(digits);
    let number =
        number.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')));
    let number = number.ok_or(QuantityError::Overflow)?;
    let unit = unit.trim_ascii_start();
    // Units are a few ASCII letters; anything longer is not one.
    let mut lower = [0u8; 3];
    if unit.len() > lower.len() {
        return Err(QuantityError::Unrecognized);
    }
    for (l, b) in lower.iter_mut().zip(unit) {
        *l = b.to_ascii_lowercase();
    }
    let (bytes, multiple): (bool, u64) = match &lower[..unit.len()] {
        b"" => (false, 1),
        b"k" => (false, 1_000),
        b"m" => (false, 1_000_000),
        b"g" => (false, 1_000_000_000),
        b"b" => (true, 1),
        b"kb" => (true, 1_000),
        b"mb" => (true, 1_000_000),
        b"gb" => (true, 1_000_000_000),
        b"tb" => (true, 1_000_000_000_000),
        b"kib" => (true, 1 << 10),
        b"mib" => (true, 1 << 20),
        b"gib" => (true, 1 << 30),
        b"tib" => (true, 1 << 40),
        _ => return Err(QuantityError::Unrecognized),
    };
    let value = number.checked_mul(multiple).ok_or(QuantityError::Overflow)?;
    Ok(if bytes { Quantity::Bytes(value) } else { Quantity::Number(value) })
}

/// A byte count: a plain number is bytes, a unit may say otherwise (`256MiB`). For the byte
/// budgets of the environment variables.
pub fn parse_bytes(text: &str) -> Result<u64, QuantityError> {
    match parse_quantity(text)? {
        Quantity::Number(bytes) | Quantity::Bytes(bytes) => Ok(bytes),
    }
}

/// The items of a comma-separated list, blanks around each ignored.
pub fn list_items(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim_ascii)
}

/// Reads a fraction in `[0, 1)`; `text` names it in the error.
pub fn parse_fraction(text: &str) -> Result<f64, Problem> {
    match crate::number::parse_f64(text.trim_ascii()) {
        Some(f) if (0.0..1.0).contains(&f) => Ok(f),
        _ => Err(Problem::NotAFraction(text.into())),
    }
}

/// Which requests only warm the histories up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Warmup {
    /// The first `floor(fraction * requests)` requests, as kvcache-simulator's `--warmup`;
    /// needs the number of requests in advance.
    Fraction(f64),
    /// The first `n` requests.
    Requests(u64),
}

impl Warmup {
    /// The number of the first counted request, for a trace of `requests` requests (which a
    /// fraction needs; `None` when it is not known).
    pub fn measure_from(self, requests: Option<u64>) -> Option<u64> {
        match self {
            // `as` truncates toward zero (and saturates), which is the floor of a product
            // that is not negative.
            Warmup::Fraction(0.0) => Some(0),
            Warmup::Fraction(f) => requests.map(|n| (f * n as f64) as u64),
            Warmup::Requests(n) => Some(n),
        }
    }

    /// Whether the warm-up needs the number of requests before the replay starts.
    pub fn needs_count(self) -> bool {
        matches!(self, Warmup::Fraction(f) if f != 0.0)
    }
}

/// What every run over a trace is asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSettings {
    /// Tokens per block: as given, or the format's (see [`settle`](Self::settle)).
    pub block_size: usize,
    /// Whether the block size was given (rather than the format's default).
    pub block_size_given: bool,
    /// The format, or `None` to tell each file's from its first bytes.
    pub format: Option<Format>,
    /// Which requests only warm up.
    pub warmup: Warmup,
    /// Count and skip invalid records instead of stopping at the first.
    pub skip_invalid: bool,
    /// Milliseconds between the starts of concurrent conversations: document `k` starts at
    /// `k` times this.
    pub stagger_ms: u64,
}

impl Default for TraceSettings {
    /// The command line's defaults.
    fn default() -> Self {
        TraceSettings {
            block_size: Format::Mooncake.default_block_size(),
            block_size_given: false,
            format: None,
            warmup: Warmup::Fraction(0.0),
            skip_invalid: false,
            stagger_ms: 0,
        }
    }
}

impl TraceSettings {
    /// Sets the block size, which the hash chains must be able to use (at least 1).
    pub fn set_block_size(&mut self, block_size: usize) -> Result<(), SetupError> {
        check_block_size(block_size)
            .map_err(|e| SetupError::new(Setting::BlockSize, Problem::BlockSize(e)))?;
        self.block_size = block_size;
        self.block_size_given = true;
        Ok(())
    }

    /// Settles what the first file of the trace that is not blank says (its format, and a
    /// kv-cache-tester document's own block size) into the settings not given: the block size
    /// becomes the document's, or the format's default. A document's block size that no hash chain takes
    /// (0) is left for its reader to report, at its place in the document.
    pub fn settle(&mut self, first: Sniffed) {
        if self.block_size_given {
            return;
        }
        let format = self.format.or(first.format);
        if let Some(block_size) = first
            .block_size
            .filter(|&b| format == Some(Format::KvcacheTester) && check_block_size(b).is_ok())
        {
            self.block_size = block_size;
        } else if let Some(format) = format {
            self.block_size = format.default_block_size();
        }
    }

    /// Sets the format by name.
    pub fn set_format(&mut self, text: &str) -> Result<(), SetupError> {
        let format =
            Format::parse(text).map_err(|e| SetupError::new(Setting::Format, Problem::Name(e)))?;
        self.format = Some(format);
        Ok(())
    }

    /// Sets the stagger from seconds as written (`60`, `0.5`).
    pub fn set_stagger(&mut self, text: &str) -> Result<(), SetupError> {
        let mut json = Json::new(text.trim_ascii().as_bytes());
        let ms = json.decimal(3).and_then(|ms| json.end().map(|()| ms));
        let ms =
            ms.map_err(|_| SetupError::new(Setting::Stagger, Problem::NotSeconds(text.into())))?;
        self.stagger_ms = ms;
        Ok(())
    }

    /// The hasher of token records at this block size.
    pub fn hasher(&self) -> Result<DynamoHasher, SetupError> {
        DynamoHasher::new(self.block_size)
            .map_err(|e| SetupError::new(Setting::BlockSize, Problem::BlockSize(e)))
    }

    /// Sets the warm-up to a share of the requests, `fraction` in `[0, 1)`; `written` is how
    /// the caller's user wrote it, for the error.
    pub fn set_warmup(&mut self, fraction: f64, written: &str) -> Result<(), SetupError> {
        if !(0.0..1.0).contains(&fraction) {
            return Err(SetupError::new(Setting::Warmup, Problem::NotAFraction(written.into())));
        }
        self.warmup = Warmup::Fraction(fraction);
        Ok(())
    }

    /// Sets the warm-up from a fraction as written (`"0.5"`).
    pub fn set_warmup_text(&mut self, text: &str) -> Result<(), SetupError> {
        let fraction = parse_fraction(text).map_err(|p| SetupError::new(Setting::Warmup, p))?;
        self.set_warmup(fraction, text)
    }

    /// Sets the warm-up to the first `requests` requests.
    pub fn set_warmup_requests(&mut self, requests: u64) {
        self.warmup = Warmup::Requests(requests);
    }

    /// Sets `setting` from its text as a user wrote it (a flag's value). `Ok(false)` when the
    /// setting is not one of a trace's.
    pub fn set(&mut self, setting: Setting, text: &str) -> Result<bool, SetupError> {
        match setting {
            Setting::BlockSize => self.set_block_size(parse_count(setting, text)?)?,
            Setting::Warmup => self.set_warmup_text(text)?,
            Setting::WarmupRequests => self.set_warmup_requests(parse_count(setting, text)?),
            Setting::Format => self.set_format(text)?,
            Setting::Stagger => self.set_stagger(text)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A whole number as written (blanks around it ignored), in the range of `T`.
fn parse_count<T: TryFrom<u64>>(setting: Setting, text: &str) -> Result<T, SetupError> {
    crate::number::parse_u64(text.trim_ascii())
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| SetupError::new(setting, Problem::NotACount(text.into())))
}

/// What `kvreuse replay` is asked for: the trace settings and the grid of histories.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplaySettings {
    /// How the trace is read and counted.
    pub trace: TraceSettings,
    /// History sizes, in the order given.
    pub capacities: Vec<Capacity>,
    /// Eviction policies, in the order given.
    pub policies: Vec<Policy>,
    /// The capacities were given (not the defaults): they need a policy that takes one.
    pub capacities_given: bool,
}

impl Default for ReplaySettings {
    /// The command line's defaults: [`DEFAULT_CAPACITIES`](Self::DEFAULT_CAPACITIES) and
    /// [`DEFAULT_POLICIES`](Self::DEFAULT_POLICIES).
    fn default() -> Self {
        ReplaySettings {
            trace: TraceSettings::default(),
            capacities: vec![
                Capacity::Blocks(1_000),
                Capacity::Blocks(10_000),
                Capacity::Blocks(100_000),
                Capacity::Blocks(1_000_000),
                Capacity::Infinite,
            ],
            policies: vec![Policy::Fifo, Policy::Lru],
            capacities_given: false,
        }
    }
}

impl ReplaySettings {
    /// The default capacities, as the command line's help writes them.
    pub const DEFAULT_CAPACITIES: &'static str = "1k,10k,100k,1M,inf";

    /// The default policies, as the command line's help writes them.
    pub const DEFAULT_POLICIES: &'static str = "fifo,lru";

    /// Parses one capacity as written (`10k`, `256MiB`, `inf`).
    pub fn parse_capacity(text: &str) -> Result<Capacity, SetupError> {
        Capacity::parse(text).map_err(|error| {
            SetupError::new(Setting::Capacity, Problem::Capacity { text: text.into(), error })
        })
    }

    /// Parses one policy name.
    pub fn parse_policy(text: &str) -> Result<Policy, SetupError> {
        Policy::parse(text).map_err(|e| SetupError::new(Setting::Policy, Problem::Name(e)))
    }

    /// Sets the capacities from their texts (the items of a list).
    pub fn set_capacities<'a>(
        &mut self,
        items: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), SetupError> {
        self.capacities = items.into_iter().map(Self::parse_capacity).collect::<Result<_, _>>()?;
        self.capacities_given = true;
        Ok(())
    }

    /// Sets `setting` from its text as a user wrote it: a flag's value, a list comma-separated.
    /// The one way every front end hands a setting over, so that each value reads, and fails,
    /// alike everywhere.
    pub fn set(&mut self, setting: Setting, text: &str) -> Result<(), SetupError> {
        match setting {
            Setting::Capacity | Setting::Policy => self.set_list(setting, text),
            _ => match self.trace.set(setting, text)? {
                true => Ok(()),
                false => Err(SetupError::new(setting, Problem::NotASetting)),
            },
        }
    }

    /// Sets a list setting (capacities, policies) from its comma-separated text. (The browser
    /// build calls this rather than [`set`](Self::set), which would link the parsers of
    /// numbers it never reads as text.)
    pub fn set_list(&mut self, setting: Setting, text: &str) -> Result<(), SetupError> {
        if text.trim_ascii().is_empty() {
            return Err(SetupError::new(setting, Problem::Empty));
        }
        match setting {
            Setting::Capacity => self.set_capacities(list_items(text)),
            Setting::Policy => self.set_policies(list_items(text)),
            _ => Err(SetupError::new(setting, Problem::NotASetting)),
        }
    }

    /// Sets the policies from their names (the items of a list).
    pub fn set_policies<'a>(
        &mut self,
        items: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), SetupError> {
        self.policies = items.into_iter().map(Self::parse_policy).collect::<Result<_, _>>()?;
        Ok(())
    }

    /// The engine's configuration: every policy at every capacity, each capacity converted to
    /// blocks by `blocks` (byte budgets depend on the footprint of the target the numbers are
    /// for). The warm-up is not placed yet (see [`Warmup::measure_from`]).
    pub fn grid(
        &self,
        blocks: impl Fn(Capacity) -> Result<Option<usize>, CapacityError>,
    ) -> Result<ReplayConfig, SetupError> {
        let capacity_error = |capacity: &Capacity, error| {
            let text = alloc::format!("{capacity}");
            SetupError::new(Setting::Capacity, Problem::Capacity { text, error })
        };
        let capacities = self
            .capacities
            .iter()
            .map(|c| blocks(*c).map_err(|error| capacity_error(c, error)))
            .collect::<Result<Vec<_>, _>>()?;
        self.trace.hasher()?;
        if self.policies.is_empty() {
            return Err(SetupError::new(Setting::Policy, Problem::Empty));
        }
        if capacities.is_empty() {
            return Err(SetupError::new(Setting::Capacity, Problem::Empty));
        }
        if self.capacities_given && self.policies.iter().all(|&p| p == Policy::Inf) {
            let problem = Problem::NothingToActOn("needs a fifo or lru policy to size");
            return Err(SetupError::new(Setting::Capacity, problem));
        }
        Ok(ReplayConfig::grid(self.trace.block_size, &self.policies, &capacities))
    }
}

/// What `kvreuse fleet` is asked for: the trace settings, the grid of fleet shapes, and how
/// the fleets are simulated.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSettings {
    /// How the trace is read and counted.
    pub trace: TraceSettings,
    /// Workers per fleet, in the order given.
    pub workers: Vec<usize>,
    /// Each worker's cache, as written and read: blocks, or bytes.
    pub worker_capacities: Vec<(String, Quantity)>,
    /// Routers, in the order given.
    pub routers: Vec<Router>,
    /// Tokens per block of the workers' caches (`None`: the trace's).
    pub engine_block_size: Option<usize>,
    /// Bytes of KV cache per token (for capacities in bytes).
    pub kv_bytes_per_token: Option<u64>,
    /// The ceiling's history.
    pub history: Capacity,
    /// How time passes.
    pub timing: Timing,
    /// A speedup was given: it needs mocker timing.
    pub speedup_given: bool,
    /// Seeds every random choice.
    pub seed: u64,
}

impl Default for FleetSettings {
    /// The command line's defaults.
    fn default() -> Self {
        FleetSettings {
            trace: TraceSettings::default(),
            workers: vec![4, 8],
            worker_capacities: vec![
                ("2k".into(), Quantity::Number(2_000)),
                ("10k".into(), Quantity::Number(10_000)),
            ],
            // Read without an `expect`, whose message would link the error's Debug printing
            // into the browser build.
            routers: Router::parse_list(Router::DEFAULT_LIST).unwrap_or_default(),
            engine_block_size: None,
            kv_bytes_per_token: None,
            history: Capacity::Bytes(256 << 20),
            timing: Timing::Mocker { speedup: 1.0 },
            speedup_given: false,
            seed: 0,
        }
    }
}

impl FleetSettings {
    /// The default workers, as the command line's help writes them.
    pub const DEFAULT_WORKERS: &'static str = "4,8";

    /// The default worker capacities, as the command line's help writes them.
    pub const DEFAULT_WORKER_CAPACITIES: &'static str = "2k,10k";

    /// The default history, as the command line's help writes it (a router's default budget).
    pub const DEFAULT_HISTORY: &'static str = "256MiB";

    /// Sets `setting` from its text as a user wrote it: a flag's value, a list comma-separated.
    pub fn set(&mut self, setting: Setting, text: &str) -> Result<(), SetupError> {
        let error = |problem| SetupError::new(setting, problem);
        match setting {
            Setting::Workers | Setting::WorkerCapacity | Setting::Router => {
                return self.set_list(setting, text);
            }
            Setting::EngineBlockSize => {
                let size: usize = parse_count(setting, text)?;
                check_block_size(size).map_err(|e| error(Problem::BlockSize(e)))?;
                self.engine_block_size = Some(size);
            }
            Setting::KvBytesPerToken => match parse_quantity(text) {
                Ok(Quantity::Number(n) | Quantity::Bytes(n)) if n > 0 => {
                    self.kv_bytes_per_token = Some(n);
                }
                _ => return Err(error(Problem::NotPositive(text.into()))),
            },
            Setting::History => {
                self.history = Capacity::parse(text)
                    .map_err(|e| error(Problem::Capacity { text: text.into(), error: e }))?;
            }
            Setting::Timing => self.set_timing(text)?,
            Setting::Speedup => {
                // Not a number, or one set_speedup refuses: the same error.
                let speedup = crate::number::parse_f64(text.trim_ascii());
                let speedup = speedup.ok_or_else(|| error(Problem::NotPositive(text.into())))?;
                self.set_speedup(speedup, text)?;
            }
            Setting::Seed => {
                let seed: u64 = parse_count(setting, text)?;
                if seed >= 1 << 53 {
                    return Err(error(Problem::Fleet(FleetError::Seed(seed))));
                }
                self.seed = seed;
            }
            _ => {
                if !self.trace.set(setting, text)? {
                    return Err(error(Problem::NotASetting));
                }
            }
        }
        Ok(())
    }

    /// Sets the timing by name: `instant`, or `mocker` (keeping the speedup).
    pub fn set_timing(&mut self, text: &str) -> Result<(), SetupError> {
        const NAMES: [&str; 2] = ["instant", "mocker"];
        let speedup = match self.timing {
            Timing::Mocker { speedup } => speedup,
            Timing::Instant => 1.0,
        };
        self.timing = match text.trim_ascii() {
            "instant" => Timing::Instant,
            "mocker" => Timing::Mocker { speedup },
            _ => {
                let name = UnknownName { kind: "timing", name: text.into(), expected: &NAMES };
                return Err(SetupError::new(Setting::Timing, Problem::Name(name)));
            }
        };
        Ok(())
    }

    /// Sets the speedup (a positive number; `written` is how the user wrote it). It applies
    /// to mocker timing only.
    pub fn set_speedup(&mut self, speedup: f64, written: &str) -> Result<(), SetupError> {
        if !(speedup.is_finite() && speedup >= 1e-6) {
            return Err(SetupError::new(Setting::Speedup, Problem::NotPositive(written.into())));
        }
        if let Timing::Mocker { speedup: s } = &mut self.timing {
            *s = speedup;
        }
        self.speedup_given = true;
        Ok(())
    }

    /// Sets a list setting (workers, worker capacities, routers) from its comma-separated
    /// text.
    pub fn set_list(&mut self, setting: Setting, text: &str) -> Result<(), SetupError> {
        let error = |problem| SetupError::new(setting, problem);
        if text.trim_ascii().is_empty() {
            return Err(error(Problem::Empty));
        }
        match setting {
            Setting::Workers => {
                self.workers = list_items(text)
                    .map(|item| match parse_quantity(item) {
                        Ok(Quantity::Number(n)) => match usize::try_from(n) {
                            Ok(n) if (1..=crate::fleet::MAX_WORKERS).contains(&n) => Ok(n),
                            _ => Err(error(Problem::Fleet(FleetError::Workers(
                                usize::try_from(n).unwrap_or(usize::MAX),
                            )))),
                        },
                        _ => Err(error(Problem::NotACount(item.into()))),
                    })
                    .collect::<Result<_, _>>()?;
            }
            Setting::WorkerCapacity => {
                self.worker_capacities = list_items(text)
                    .map(|item| match parse_quantity(item) {
                        Ok(Quantity::Number(0) | Quantity::Bytes(0)) => {
                            Err(error(Problem::Capacity {
                                text: item.into(),
                                error: CapacityError::Zero,
                            }))
                        }
                        Ok(quantity) => Ok((item.into(), quantity)),
                        Err(QuantityError::Overflow) => Err(error(Problem::Capacity {
                            text: item.into(),
                            error: CapacityError::Overflow,
                        })),
                        Err(QuantityError::Unrecognized) => {
                            Err(error(Problem::NotWorkerCapacity(item.into())))
                        }
                    })
                    .collect::<Result<_, _>>()?;
            }
            Setting::Router => {
                self.routers = Router::parse_list(text).map_err(|e| error(Problem::Router(e)))?;
            }
            _ => return Err(error(Problem::NotASetting)),
        }
        Ok(())
    }

    /// Each worker capacity in blocks of `engine_block_size` tokens.
    pub fn worker_capacity_blocks(
        &self,
        engine_block_size: usize,
    ) -> Result<Vec<usize>, SetupError> {
        let error = |problem| SetupError::new(Setting::WorkerCapacity, problem);
        self.worker_capacities
            .iter()
            .map(|(text, quantity)| {
                let blocks = match *quantity {
                    Quantity::Number(blocks) => blocks,
                    Quantity::Bytes(bytes) => {
                        let per_token = self
                            .kv_bytes_per_token
                            .ok_or_else(|| error(Problem::NeedsKvBytes(text.clone())))?;
                        bytes / per_token.saturating_mul(engine_block_size as u64)
                    }
                };
                match usize::try_from(blocks) {
                    Ok(b) if (1..=crate::fleet::MAX_WORKER_CAPACITY).contains(&b) => Ok(b),
                    _ => Err(error(Problem::Fleet(FleetError::WorkerCapacity(
                        usize::try_from(blocks).unwrap_or(usize::MAX),
                    )))),
                }
            })
            .collect()
    }

    /// The simulation's configuration: every number of workers with every capacity and every
    /// router, the history converted to blocks by `history_blocks` (byte budgets depend on
    /// the history's footprint). The warm-up is not placed yet (see [`Warmup::measure_from`]).
    pub fn config(
        &self,
        history_blocks: impl Fn(Capacity) -> Result<Option<usize>, CapacityError>,
    ) -> Result<FleetConfig, SetupError> {
        let engine = self.engine_block_size.unwrap_or(self.trace.block_size);
        let capacities = self.worker_capacity_blocks(engine)?;
        let history = history_blocks(self.history).map_err(|error| {
            let text = alloc::format!("{}", self.history);
            SetupError::new(Setting::History, Problem::Capacity { text, error })
        })?;
        if let Some(&n) = self.workers.iter().find(|&&n| n > crate::fleet::MAX_WORKERS) {
            return Err(SetupError::new(Setting::Workers, Problem::Fleet(FleetError::Workers(n))));
        }
        if self.speedup_given && self.timing == Timing::Instant {
            let problem = Problem::NothingToActOn("applies to mocker timing only");
            return Err(SetupError::new(Setting::Speedup, problem));
        }
        let config = FleetConfig {
            block_size: self.trace.block_size,
            engine_block_size: self.engine_block_size,
            shapes: FleetConfig::grid(&self.workers, &capacities, &self.routers),
            timing: self.timing,
            history,
            measure_from: 0,
            seed: self.seed,
        };
        // The block sizes must fit each other.
        crate::fleet::Fleet::check_block_sizes(&config)
            .map_err(|e| SetupError::new(Setting::EngineBlockSize, Problem::Fleet(e)))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    use crate::history::MAX_CAPACITY;

    #[test]
    fn fleet_defaults_are_the_documented_texts() {
        let mut parsed = FleetSettings::default();
        parsed.set_list(Setting::Workers, FleetSettings::DEFAULT_WORKERS).unwrap();
        parsed.set_list(Setting::WorkerCapacity, FleetSettings::DEFAULT_WORKER_CAPACITIES).unwrap();
        parsed.set_list(Setting::Router, Router::DEFAULT_LIST).unwrap();
        parsed.set(Setting::History, FleetSettings::DEFAULT_HISTORY).unwrap();
        assert_eq!(parsed, FleetSettings::default());
    }

    #[test]
    fn quantities_read_every_unit_in_any_case() {
        use Quantity::{Bytes, Number};
        for (text, want) in [
            ("0", Number(0)),
            ("123", Number(123)),
            (" 7 ", Number(7)),
            ("10k", Number(10_000)),
            ("10K", Number(10_000)),
            ("3M", Number(3_000_000)),
            ("3m", Number(3_000_000)),
            ("2G", Number(2_000_000_000)),
            ("4096B", Bytes(4096)),
            ("4096 b", Bytes(4096)),
            ("2KB", Bytes(2_000)),
            ("2kb", Bytes(2_000)),
            ("5MB", Bytes(5_000_000)),
            ("5GB", Bytes(5_000_000_000)),
            ("5TB", Bytes(5_000_000_000_000)),
            ("64KiB", Bytes(64 << 10)),
            ("256MiB", Bytes(256 << 20)),
            ("256 mib ", Bytes(256 << 20)),
            ("3GiB", Bytes(3 << 30)),
            ("2TiB", Bytes(2 << 40)),
            ("2tib", Bytes(2 << 40)),
        ] {
            assert_eq!(parse_quantity(text), Ok(want), "{text:?}");
        }
        for bad in ["", "k", "MiB", "10x", "-5", "1.5M", "1e9", "12XB", "10 k k", "5 mibs"] {
            assert_eq!(parse_quantity(bad), Err(QuantityError::Unrecognized), "{bad:?}");
        }
        for huge in ["99999999999999999999", "18446744073709551615k", "16777216TiB"] {
            assert_eq!(parse_quantity(huge), Err(QuantityError::Overflow), "{huge:?}");
        }
        assert_eq!(parse_quantity("16777215TiB"), Ok(Bytes(16_777_215 << 40)));
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("1k"), Ok(1000));
        assert_eq!(parse_bytes("1KiB"), Ok(1024));
    }

    #[test]
    fn every_setting_has_a_name_per_front_end() {
        for setting in Setting::ALL {
            let flag = setting.flag().strip_prefix("--").unwrap();
            let snake = flag.replace('-', "_");
            // Made plural exactly when the setting takes a list (`--workers` is already).
            let list = matches!(
                setting,
                Setting::Capacity
                    | Setting::Policy
                    | Setting::Workers
                    | Setting::WorkerCapacity
                    | Setting::Router
            );
            let plural = setting.python_name() != snake || setting == Setting::Workers;
            assert_eq!(plural, list, "{setting:?}");
            assert!(!list || setting.python_name().ends_with('s'), "{setting:?}");
            assert_eq!(setting.python_name().replace('_', ""), setting.js_name().to_lowercase());
        }
    }

    #[test]
    fn messages_name_the_value_as_written() {
        let mut settings = ReplaySettings::default();
        let error = settings.set_capacities(["1k", "10x"]).unwrap_err();
        assert_eq!(error.setting, Setting::Capacity);
        assert!(!error.is_range());
        assert_eq!(
            error.to_string(),
            "\"10x\": expected blocks (1000, 10k, 1M), bytes (256MiB, 1GiB, 500MB) or inf"
        );
        let error = settings.set_capacities(["0"]).unwrap_err();
        assert!(error.is_range());
        assert_eq!(error.to_string(), "\"0\": a capacity must be positive");
        let error = settings.set_policies(["fifo", "mru"]).unwrap_err();
        assert_eq!(error.to_string(), "unknown policy \"mru\" (expected one of fifo, lru, inf)");
        let error = settings.trace.set_warmup_text("1").unwrap_err();
        assert_eq!(
            (error.setting, error.to_string()),
            (Setting::Warmup, "1 is not a fraction in [0, 1)".into())
        );
        let error = settings.trace.set_warmup(f64::NAN, "NaN").unwrap_err();
        assert_eq!(error.to_string(), "NaN is not a fraction in [0, 1)");
        let error = settings.trace.set_block_size(0).unwrap_err();
        assert_eq!(error.to_string(), "block size must be at least 1");
        let error = settings.trace.set_block_size(1 << 25).unwrap_err();
        assert_eq!(error.to_string(), "block size 33554432 is too large (at most 16777216)");
        settings.policies.clear();
        let error = settings.grid(Capacity::blocks).unwrap_err();
        assert_eq!(error.to_string(), "give at least one policy");
    }

    #[test]
    fn the_defaults_are_what_their_texts_say() {
        let mut written = ReplaySettings::default();
        written.set_capacities(list_items(ReplaySettings::DEFAULT_CAPACITIES)).unwrap();
        written.set_policies(list_items(ReplaySettings::DEFAULT_POLICIES)).unwrap();
        assert!(written.capacities_given);
        assert_eq!(written, ReplaySettings { capacities_given: true, ..ReplaySettings::default() });
    }

    /// A setting whose object the other settings leave out is an error, wherever it is set
    /// from: capacities with the unbounded history only, a speedup with instant timing.
    #[test]
    fn settings_with_nothing_to_act_on_are_errors() {
        let mut replay = ReplaySettings::default();
        replay.set(Setting::Policy, "inf").unwrap();
        assert!(replay.grid(Capacity::blocks).is_ok(), "the default capacities are not given");
        replay.set(Setting::Capacity, "1k").unwrap();
        let error = replay.grid(Capacity::blocks).unwrap_err();
        assert_eq!(error.setting, Setting::Capacity);
        assert_eq!(error.to_string(), "needs a fifo or lru policy to size");
        replay.set(Setting::Policy, "inf,fifo").unwrap();
        assert!(replay.grid(Capacity::blocks).is_ok());

        let mut fleet = FleetSettings::default();
        fleet.set(Setting::Timing, "instant").unwrap();
        assert!(fleet.config(Capacity::blocks).is_ok(), "no speedup given");
        fleet.set(Setting::Speedup, "100").unwrap();
        let error = fleet.config(Capacity::blocks).unwrap_err();
        assert_eq!(error.setting, Setting::Speedup);
        assert!(!error.is_range());
        fleet.set(Setting::Timing, "mocker").unwrap();
        assert!(fleet.config(Capacity::blocks).is_ok());
    }

    #[test]
    fn every_front_end_hands_settings_over_as_text() {
        let mut settings = ReplaySettings::default();
        settings.set(Setting::Capacity, "10, 2KiB ,inf").unwrap();
        settings.set(Setting::Policy, "lru").unwrap();
        settings.set(Setting::BlockSize, " 16").unwrap();
        settings.set(Setting::Warmup, "0.25").unwrap();
        assert_eq!(settings.capacities.len(), 3);
        assert_eq!(settings.policies, [Policy::Lru]);
        assert_eq!(
            (settings.trace.block_size, settings.trace.warmup),
            (16, Warmup::Fraction(0.25))
        );
        settings.set(Setting::WarmupRequests, "7").unwrap();
        assert_eq!(settings.trace.warmup, Warmup::Requests(7));
        for (setting, text, message) in [
            (Setting::BlockSize, "-3", "\"-3\" is not a whole number"),
            (Setting::BlockSize, "0", "block size must be at least 1"),
            (Setting::Capacity, " ", "give at least one capacity"),
            (
                Setting::Capacity,
                "-5",
                "\"-5\": expected blocks (1000, 10k, 1M), bytes (256MiB, 1GiB, 500MB) or inf",
            ),
            (Setting::Policy, "fifo,", "unknown policy \"\" (expected one of fifo, lru, inf)"),
            (Setting::Warmup, "nan", "nan is not a fraction in [0, 1)"),
            (Setting::WarmupRequests, "1.5", "\"1.5\" is not a whole number"),
            (Setting::SkipInvalid, "yes", "not a setting of this kind of run"),
            (
                Setting::Format,
                "csv",
                "unknown format \"csv\" (expected one of mooncake, bailian, kvcache-tester, tokens)",
            ),
            (Setting::Stagger, "-1", "\"-1\" is not a number of seconds (like 60 or 0.5)"),
            (Setting::Stagger, "1 min", "\"1 min\" is not a number of seconds (like 60 or 0.5)"),
        ] {
            let error = settings.clone().set(setting, text).unwrap_err();
            assert_eq!((error.setting, error.to_string()), (setting, message.into()), "{text:?}");
        }
    }

    #[test]
    fn the_block_size_follows_the_format_unless_given() {
        let sniffed =
            |format, block_size| Sniffed { format: Some(format), block_size, blank: false };
        let mut trace = TraceSettings::default();
        trace.settle(sniffed(Format::Bailian, None));
        assert_eq!(trace.block_size, 16);
        let mut trace = TraceSettings::default();
        trace.settle(sniffed(Format::KvcacheTester, Some(32)));
        assert_eq!(trace.block_size, 32);
        // A document's block size that is none is its reader's to report.
        for none in [0, crate::chain::MAX_BLOCK_SIZE + 1] {
            let mut trace = TraceSettings::default();
            trace.settle(sniffed(Format::KvcacheTester, Some(none)));
            assert_eq!(trace.block_size, 64, "{none}");
        }
        let mut trace = TraceSettings::default();
        trace.set_format("kvcache-tester").unwrap();
        trace.settle(Sniffed::default());
        assert_eq!(trace.block_size, 64);
        trace.set_block_size(100).unwrap();
        trace.settle(sniffed(Format::Bailian, None));
        assert_eq!(trace.block_size, 100, "a given block size stays");
        trace.set_stagger("1.5").unwrap();
        assert_eq!(trace.stagger_ms, 1500);
    }

    #[test]
    fn grids_check_every_capacity() {
        let mut settings = ReplaySettings::default();
        settings.set_capacities(["10", "2KiB", "inf"]).unwrap();
        let config = settings.grid(Capacity::blocks).unwrap();
        assert_eq!(config.histories.len(), 5);
        settings.set_capacities(["3B"]).unwrap();
        let error = settings.grid(Capacity::blocks).unwrap_err();
        assert_eq!(error.to_string(), "\"3B\": too few bytes for a history of even one block");
        settings.capacities = vec![Capacity::Blocks(MAX_CAPACITY)];
        assert!(settings.grid(Capacity::blocks).is_ok(), "the largest capacity is accepted");
        settings.capacities = vec![Capacity::Blocks(MAX_CAPACITY + 1)];
        assert!(settings.grid(Capacity::blocks).unwrap_err().is_range());
        settings.capacities.clear();
        assert_eq!(settings.grid(Capacity::blocks).unwrap_err().problem, Problem::Empty);
    }

    #[test]
    fn warmups_place_the_first_counted_request() {
        assert_eq!(Warmup::Fraction(0.0).measure_from(None), Some(0));
        assert_eq!(Warmup::Fraction(0.5).measure_from(None), None);
        assert_eq!(Warmup::Fraction(0.5).measure_from(Some(7)), Some(3));
        assert_eq!(Warmup::Fraction(0.999).measure_from(Some(1000)), Some(999));
        assert_eq!(Warmup::Requests(12).measure_from(None), Some(12));
        assert!(Warmup::Fraction(0.1).needs_count() && !Warmup::Requests(3).needs_count());
    }

    #[test]
    fn fleet_settings_are_set_from_their_text() {
        let mut s = FleetSettings::default();
        s.set(Setting::Workers, "2, 16").unwrap();
        s.set(Setting::WorkerCapacity, "1k,64MiB").unwrap();
        s.set(Setting::Router, "kv").unwrap();
        s.set(Setting::EngineBlockSize, "32").unwrap();
        s.set(Setting::KvBytesPerToken, "128KiB").unwrap();
        s.set(Setting::History, "10k").unwrap();
        s.set(Setting::Timing, "instant").unwrap();
        s.set(Setting::Seed, "7").unwrap();
        s.set(Setting::BlockSize, "64").unwrap();
        assert_eq!(s.workers, [2, 16]);
        let capacities = [("1k", Quantity::Number(1_000)), ("64MiB", Quantity::Bytes(64 << 20))];
        assert_eq!(s.worker_capacities, capacities.map(|(t, q)| (String::from(t), q)));
        assert_eq!(s.routers, Router::parse_list("kv").unwrap());
        assert_eq!(s.engine_block_size, Some(32));
        assert_eq!(s.kv_bytes_per_token, Some(128 << 10));
        assert_eq!(s.history, Capacity::Blocks(10_000));
        assert_eq!(s.timing, Timing::Instant);
        assert_eq!(s.seed, 7);
        assert_eq!((s.trace.block_size, s.trace.block_size_given), (64, true));
        s.set(Setting::Timing, "mocker").unwrap();
        s.set(Setting::Speedup, "100").unwrap();
        assert_eq!(s.timing, Timing::Mocker { speedup: 100.0 });
        s.set_speedup(1e-6, "1e-6").unwrap();
        assert_eq!(s.timing, Timing::Mocker { speedup: 1e-6 });
        for bad in [1e-7, 0.0, -1.0, f64::INFINITY, f64::NAN] {
            let error = s.set_speedup(bad, "x").unwrap_err();
            assert_eq!(error.problem, Problem::NotPositive("x".into()), "{bad}");
        }
        s.set_speedup(100.0, "100").unwrap();

        let before = s.clone();
        for (setting, bad) in [
            (Setting::Workers, "0"),
            (Setting::WorkerCapacity, "0"),
            (Setting::Router, "fastest"),
            (Setting::EngineBlockSize, "0"),
            (Setting::KvBytesPerToken, "0"),
            (Setting::History, "lots"),
            (Setting::Timing, "slow"),
            (Setting::Speedup, "-1"),
            (Setting::Speedup, "0"),
            (Setting::Speedup, "inf"),
            (Setting::Speedup, "fast"),
            (Setting::Seed, "9007199254740992"),
            (Setting::BlockSize, "zero"),
        ] {
            let error = s.set(setting, bad).unwrap_err();
            assert_eq!(error.setting, setting, "{bad}");
            assert_eq!(s, before, "a refused {bad:?} changes nothing");
        }
    }

    #[test]
    fn worker_capacities_in_bytes_need_the_kv_bytes_per_token() {
        use crate::fleet::MAX_WORKER_CAPACITY;
        let mut s = FleetSettings::default();
        s.set(Setting::WorkerCapacity, "1k,1MiB").unwrap();
        let needs = s.worker_capacity_blocks(16).unwrap_err();
        assert_eq!(needs.problem, Problem::NeedsKvBytes("1MiB".into()));
        s.set(Setting::KvBytesPerToken, "1KiB").unwrap();
        // 1 MiB over 1 KiB per token x 16 tokens per block: 64 blocks.
        assert_eq!(s.worker_capacity_blocks(16).unwrap(), [1_000, 64]);
        s.set(Setting::WorkerCapacity, "1KiB").unwrap();
        let none = s.worker_capacity_blocks(16).unwrap_err().problem;
        assert_eq!(none, Problem::Fleet(FleetError::WorkerCapacity(0)));
        s.set(Setting::WorkerCapacity, &MAX_WORKER_CAPACITY.to_string()).unwrap();
        assert_eq!(s.worker_capacity_blocks(16).unwrap(), [MAX_WORKER_CAPACITY]);
        s.set(Setting::WorkerCapacity, &(MAX_WORKER_CAPACITY + 1).to_string()).unwrap();
        let over = s.worker_capacity_blocks(16).unwrap_err().problem;
        assert_eq!(over, Problem::Fleet(FleetError::WorkerCapacity(MAX_WORKER_CAPACITY + 1)));
    }

    #[test]
    fn fleet_configs_cover_the_grid_and_check_what_fits() {
        use crate::fleet::MAX_WORKERS;
        let mut s = FleetSettings::default();
        s.set(Setting::Workers, "1,3").unwrap();
        s.set(Setting::WorkerCapacity, "100,200").unwrap();
        s.set(Setting::Router, "round-robin,kv").unwrap();
        s.set(Setting::Seed, "5").unwrap();
        let config = s.config(Capacity::blocks).unwrap();
        assert_eq!(config.shapes, FleetConfig::grid(&[1, 3], &[100, 200], &s.routers));
        assert_eq!(config.shapes.len(), 8);
        assert_eq!((config.seed, config.block_size, config.timing), (5, 512, s.timing));
        assert_eq!(config.history, Capacity::Bytes(256 << 20).blocks().unwrap());

        s.set(Setting::Workers, &MAX_WORKERS.to_string()).unwrap();
        assert!(s.config(Capacity::blocks).is_ok());
        for bad in ["0".to_string(), (MAX_WORKERS + 1).to_string()] {
            assert_eq!(s.set(Setting::Workers, &bad).unwrap_err().setting, Setting::Workers);
        }
        s.workers = vec![MAX_WORKERS + 1];
        assert_eq!(s.config(Capacity::blocks).unwrap_err().setting, Setting::Workers);
        s.workers = vec![2];
        s.set(Setting::EngineBlockSize, "48").unwrap();
        let unfit = s.config(Capacity::blocks).unwrap_err();
        assert_eq!(unfit.setting, Setting::EngineBlockSize, "48-token blocks do not fit 512");
        s.set(Setting::EngineBlockSize, "64").unwrap();
        assert_eq!(s.config(Capacity::blocks).unwrap().engine_block_size, Some(64));
        s.set(Setting::History, "3B").unwrap();
        assert_eq!(s.config(Capacity::blocks).unwrap_err().setting, Setting::History);
    }

    #[test]
    fn fractions_are_in_zero_to_one() {
        for good in ["0", " 0.5 ", "0.999", "1e-3"] {
            assert!(parse_fraction(good).is_ok_and(|f| (0.0..1.0).contains(&f)), "{good}");
        }
        for bad in ["1", "1.5", "-0.1", "NaN", "inf", "half", ""] {
            assert_eq!(parse_fraction(bad), Err(Problem::NotAFraction(bad.into())), "{bad}");
        }
    }
}
