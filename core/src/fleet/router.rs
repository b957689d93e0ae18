//! The routers a fleet is simulated with: how each picks a worker for a request.
//!
//! Each router is named as the command line writes it, with parameters after a colon
//! (`kv:temperature=0.5,overlap_score_credit=0.8`); the defaults are the source systems'.
//! All see the same inputs: every worker's cached prefix for the request (the exact
//! cache contents, as the mocker's router sees them: Dynamo's KV events arrive at the end of
//! the pass that made them, which is microseconds at the speedups replays use) and its load.
//!
//! - `round-robin`: request `i` to worker `i mod N`.
//! - `random`: a worker drawn uniformly.
//! - `least-loaded`: the fewest requests in flight (routed, not finished), ties at random.
//! - `kv`: NVIDIA Dynamo's KV router (1.6.1 defaults): per worker, cost =
//!   `prefill_load_scale * max(0, (queued prefill tokens + prompt tokens) / block size -
//!   overlap_score_credit * cached prefix blocks) + active prompt blocks + prompt blocks not
//!   among them`; the lowest cost wins, exact ties at random. With `temperature > 0` a worker
//!   is drawn with probability proportional to `exp(-(cost - min) / ((max - min) *
//!   temperature))` instead.
//! - `cache-aware`: SGLang's router. When the fleet is imbalanced (the most and least loaded
//!   workers differ by more than `balance_abs_threshold` requests and by a factor of more
//!   than `balance_rel_threshold`) the least loaded worker; otherwise the worker with the
//!   longest cached prefix if it covers more than `cache_threshold` of the prompt, else the
//!   worker caching the least. SGLang keeps an approximate tree of what it sent where; this
//!   one sees the caches themselves.
//! - `prefix-hash`: smg's `prefix_hash`: a consistent-hash ring (150 virtual nodes per
//!   worker) keyed by the first `prefix_tokens` tokens' blocks (at least one); when that
//!   worker's load exceeds `load_factor` times the average (plus one), the least loaded worker
//!   among those within it.
//! - `session`: sticky per conversation (a Bailian chat's first turn, a kv-cache-tester
//!   document): a conversation's first request is placed as `prefix-hash` would, the rest
//!   follow it. Requests of formats without conversations are placed by `prefix-hash`.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::hash::BuildHasherDefault;

use hashbrown::HashMap;
use rustc_hash::FxHasher;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::names::{Quoted, UnknownName};
use crate::number::parse_u64;
use crate::trace::{Request, Session};

/// A router and its parameters. See the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct Router {
    kind: Kind,
    /// The router as written, blanks removed (the row's name).
    text: String,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    RoundRobin,
    Random,
    LeastLoaded,
    Kv { overlap_score_credit: f64, prefill_load_scale: f64, temperature: f64 },
    CacheAware { cache_threshold: f64, balance_abs_threshold: u64, balance_rel_threshold: f64 },
    PrefixHash(PrefixHash),
    Session(PrefixHash),
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct PrefixHash {
    prefix_tokens: u64,
    load_factor: f64,
}

const PREFIX_HASH: PrefixHash = PrefixHash { prefix_tokens: 256, load_factor: 1.25 };

/// Why a router could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouterError {
    /// No such router.
    Name(UnknownName),
    /// A parameter the router does not have.
    Parameter {
        /// The router.
        router: &'static str,
        /// The parameter as written.
        key: String,
        /// The router's parameters.
        expected: &'static [&'static str],
    },
    /// A parameter's value that cannot be used.
    Value {
        /// The parameter.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// `key=value` expected.
    Syntax(String),
}

impl fmt::Display for RouterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouterError::Name(name) => name.fmt(f),
            RouterError::Parameter { router, key, expected } => {
                write!(f, "the {router} router has no parameter {}", Quoted(key))?;
                match expected {
                    [] => f.write_str(" (it takes none)"),
                    _ => write!(f, " (expected one of {})", expected.join(", ")),
                }
            }
            RouterError::Value { key, value, expected } => {
                write!(f, "{key} must be {expected}, not {}", Quoted(value))
            }
            RouterError::Syntax(text) => {
                write!(f, "expected key=value after the router's name, not {}", Quoted(text))
            }
        }
    }
}

impl core::error::Error for RouterError {}

impl Router {
    /// The default router list of `kvreuse fleet`.
    pub const DEFAULT_LIST: &'static str = "round-robin,kv";

    /// The routers' names, in the order the documentation lists them.
    pub const NAMES: [&'static str; 7] =
        ["round-robin", "random", "least-loaded", "kv", "cache-aware", "prefix-hash", "session"];

    /// Reads one router: a name, then optionally `:key=value,key=value`.
    pub fn parse(text: &str) -> Result<Router, RouterError> {
        let compact: String = text.split_ascii_whitespace().collect();
        let (name, parameters) = match compact.split_once(':') {
            Some((name, parameters)) => (name, Some(parameters)),
            None => (compact.as_str(), None),
        };
        let mut kind = match name {
            "round-robin" => Kind::RoundRobin,
            "random" => Kind::Random,
            "least-loaded" => Kind::LeastLoaded,
            "kv" => {
                Kind::Kv { overlap_score_credit: 1.0, prefill_load_scale: 1.0, temperature: 0.0 }
            }
            "cache-aware" => Kind::CacheAware {
                cache_threshold: 0.3,
                balance_abs_threshold: 64,
                balance_rel_threshold: 1.5,
            },
            "prefix-hash" => Kind::PrefixHash(PREFIX_HASH),
            "session" => Kind::Session(PREFIX_HASH),
            _ => {
                return Err(RouterError::Name(UnknownName {
                    kind: "router",
                    name: text.trim_ascii().into(),
                    expected: &Router::NAMES,
                }));
            }
        };
        for pair in parameters.into_iter().flat_map(|p| p.split(',')) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(RouterError::Syntax(pair.into()));
            };
            kind.set(name_of(name), key, value)?;
        }
        Ok(Router { kind, text: compact })
    }

    /// Reads a comma-separated list of routers. A parameter belongs to the router before it:
    /// `kv:temperature=0.5,overlap_score_credit=0.8,round-robin` is two routers.
    pub fn parse_list(text: &str) -> Result<Vec<Router>, RouterError> {
        let mut items: Vec<String> = Vec::new();
        for item in text.split(',') {
            match items.last_mut() {
                Some(last) if item.contains('=') && !item.contains(':') => {
                    last.push(',');
                    last.push_str(item);
                }
                _ => items.push(item.into()),
            }
        }
        items.iter().map(|item| Router::parse(item)).collect()
    }

    /// The router as written (without blanks): the row's name.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Heap bytes of the router's name.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.text.capacity()
    }

    /// The router's name without parameters.
    pub fn name(&self) -> &'static str {
        match self.kind {
            Kind::RoundRobin => "round-robin",
            Kind::Random => "random",
            Kind::LeastLoaded => "least-loaded",
            Kind::Kv { .. } => "kv",
            Kind::CacheAware { .. } => "cache-aware",
            Kind::PrefixHash(_) => "prefix-hash",
            Kind::Session(_) => "session",
        }
    }
}

fn name_of(name: &str) -> &'static str {
    Router::NAMES.iter().find(|&&n| n == name).copied().unwrap_or("")
}

impl fmt::Display for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Kind {
    fn set(&mut self, router: &'static str, key: &str, text: &str) -> Result<(), RouterError> {
        let unknown = |expected| RouterError::Parameter { router, key: key.into(), expected };
        let number = |key: &'static str, min_exclusive: Option<f64>| {
            let value = crate::number::parse_f64(text).filter(|v| v.is_finite() && *v >= 0.0);
            match (value, min_exclusive) {
                (Some(v), Some(min)) if v <= min => None,
                (v, _) => v,
            }
            .ok_or_else(|| RouterError::Value {
                key,
                value: text.into(),
                expected: if min_exclusive.is_some() {
                    "a positive number"
                } else {
                    "a number at least 0"
                },
            })
        };
        match self {
            Kind::RoundRobin | Kind::Random | Kind::LeastLoaded => return Err(unknown(&[])),
            Kind::Kv { overlap_score_credit, prefill_load_scale, temperature } => match key {
                "overlap_score_credit" => {
                    *overlap_score_credit = number("overlap_score_credit", None)?;
                }
                "prefill_load_scale" => *prefill_load_scale = number("prefill_load_scale", None)?,
                "temperature" => *temperature = number("temperature", None)?,
                _ => {
                    return Err(unknown(&[
                        "overlap_score_credit",
                        "prefill_load_scale",
                        "temperature",
                    ]));
                }
            },
            Kind::CacheAware { cache_threshold, balance_abs_threshold, balance_rel_threshold } => {
                match key {
                    "cache_threshold" => *cache_threshold = number("cache_threshold", None)?,
                    "balance_abs_threshold" => {
                        *balance_abs_threshold =
                            parse_u64(text).ok_or_else(|| RouterError::Value {
                                key: "balance_abs_threshold",
                                value: text.into(),
                                expected: "a whole number of requests",
                            })?;
                    }
                    "balance_rel_threshold" => {
                        *balance_rel_threshold = number("balance_rel_threshold", None)?;
                    }
                    _ => {
                        return Err(unknown(&[
                            "cache_threshold",
                            "balance_abs_threshold",
                            "balance_rel_threshold",
                        ]));
                    }
                }
            }
            Kind::PrefixHash(p) | Kind::Session(p) => match key {
                "prefix_tokens" => {
                    p.prefix_tokens =
                        parse_u64(text).filter(|&t| t > 0).ok_or_else(|| RouterError::Value {
                            key: "prefix_tokens",
                            value: text.into(),
                            expected: "a whole number of tokens, at least 1",
                        })?;
                }
                "load_factor" => p.load_factor = number("load_factor", Some(0.0))?,
                _ => return Err(unknown(&["prefix_tokens", "load_factor"])),
            },
        }
        Ok(())
    }
}

/// What a router sees of one worker.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Load {
    /// Requests routed to it and not finished.
    pub(crate) requests: u64,
    /// Prompt tokens it has yet to prefill for requests whose first token is not out:
    /// each request's prompt minus its cached prefix at routing (Dynamo's active prefill
    /// tokens).
    pub(crate) prefill_tokens: u64,
    /// Distinct full prompt blocks of its requests in flight.
    pub(crate) active_blocks: u64,
    /// Blocks in its cache.
    pub(crate) cached_blocks: u64,
}

/// Everything a router may look at to place one request.
pub(crate) struct Candidates<'a> {
    /// The request.
    pub(crate) request: &'a Request,
    /// Its full engine blocks' ids.
    pub(crate) ids: &'a [u64],
    /// Per worker: leading engine blocks of the prompt in its cache.
    pub(crate) cached: &'a [usize],
    /// Per worker: its load.
    pub(crate) loads: &'a [Load],
    /// Per worker, computed on demand (the `kv` router): leading engine blocks of the prompt
    /// among the prompts of its requests in flight.
    pub(crate) in_flight_prefix: &'a dyn Fn(usize) -> usize,
    /// Tokens per engine block, and per trace block.
    pub(crate) engine_block_size: usize,
    pub(crate) trace_block_size: usize,
}

/// Positions on the consistent-hash ring per worker (smg's default).
const VIRTUAL_NODES: u64 = 150;
const RING_SEED: u64 = 0x7269_6e67;

/// A router's state in one simulation.
#[derive(Debug)]
pub(crate) struct Routing {
    kind: Kind,
    /// Requests routed so far (round-robin).
    routed: u64,
    /// The ring: (position, worker), sorted (prefix-hash, session).
    ring: Vec<(u64, usize)>,
    /// Session: each chat's conversation (its first turn's chat id), and each conversation's
    /// worker.
    roots: HashMap<u64, u64, BuildHasherDefault<FxHasher>>,
    sticky: HashMap<u64, u32, BuildHasherDefault<FxHasher>>,
}

impl Routing {
    pub(crate) fn new(router: &Router, workers: usize) -> Routing {
        let mut ring = Vec::new();
        if let Kind::PrefixHash(_) | Kind::Session(_) = router.kind {
            for w in 0..workers as u64 {
                for v in 0..VIRTUAL_NODES {
                    let bytes = [w.to_le_bytes(), v.to_le_bytes()].concat();
                    ring.push((xxh3_64_with_seed(&bytes, RING_SEED), w as usize));
                }
            }
            ring = crate::sort::sort_unique(ring);
        }
        Routing {
            kind: router.kind,
            routed: 0,
            ring,
            roots: HashMap::default(),
            sticky: HashMap::default(),
        }
    }

    /// Heap bytes of the router's state.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.ring.capacity() * size_of::<(u64, usize)>()
            + self.roots.allocation_size()
            + self.sticky.allocation_size()
    }

    /// The worker for `c.request`.
    pub(crate) fn choose(&mut self, c: &Candidates<'_>, rng: &mut fastrand::Rng) -> usize {
        let n = c.loads.len();
        self.routed += 1;
        match self.kind {
            Kind::RoundRobin => ((self.routed - 1) % n as u64) as usize,
            Kind::Random => uniform(rng, n),
            Kind::LeastLoaded => pick_min(n, rng, |w| c.loads[w].requests as f64),
            Kind::Kv { overlap_score_credit, prefill_load_scale, temperature } => {
                let bs = c.engine_block_size as f64;
                let isl = c.request.prompt_tokens as f64;
                let cost = |w: usize| {
                    let load = &c.loads[w];
                    let prefill = ((load.prefill_tokens as f64 + isl) / bs
                        - overlap_score_credit * c.cached[w] as f64)
                        .max(0.0);
                    let decode =
                        load.active_blocks + (c.ids.len() - (c.in_flight_prefix)(w)) as u64;
                    prefill_load_scale * prefill + decode as f64
                };
                if temperature > 0.0 {
                    softmax(n, temperature, rng, cost)
                } else {
                    pick_min(n, rng, cost)
                }
            }
            Kind::CacheAware { cache_threshold, balance_abs_threshold, balance_rel_threshold } => {
                let loads = c.loads.iter().map(|l| l.requests);
                let (min, max) = (loads.clone().min().unwrap_or(0), loads.max().unwrap_or(0));
                if max - min > balance_abs_threshold
                    && max as f64 > balance_rel_threshold * min as f64
                {
                    // SGLang takes the first least loaded worker.
                    return (0..n).min_by_key(|&w| c.loads[w].requests).unwrap_or(0);
                }
                let best = pick_min(n, rng, |w| -(c.cached[w] as f64));
                let matched = (c.cached[best] * c.engine_block_size) as f64;
                if c.request.prompt_tokens > 0
                    && matched / c.request.prompt_tokens as f64 > cache_threshold
                {
                    best
                } else {
                    pick_min(n, rng, |w| c.loads[w].cached_blocks as f64)
                }
            }
            Kind::PrefixHash(p) => self.prefix_hash(p, c),
            Kind::Session(p) => {
                let conversation = match c.request.session {
                    Session::Unknown => None,
                    Session::Conversation(key) => Some(key),
                    Session::Chat { id, parent } => {
                        let root = parent.map_or(id, |p| self.roots.get(&p).copied().unwrap_or(p));
                        self.roots.insert(id, root);
                        Some(root)
                    }
                };
                match conversation {
                    None => self.prefix_hash(p, c),
                    Some(key) => match self.sticky.get(&key) {
                        Some(&w) => w as usize,
                        None => {
                            let w = self.prefix_hash(p, c);
                            self.sticky.insert(key, w as u32);
                            w
                        }
                    },
                }
            }
        }
    }

    /// smg's `prefix_hash`: the ring's worker for the prompt's first blocks, unless its load
    /// is more than `load_factor` times the average (plus one): then the least loaded worker
    /// among those that are not (the first on ties), or the ring's if none is.
    fn prefix_hash(&self, p: PrefixHash, c: &Candidates<'_>) -> usize {
        let blocks = p.prefix_tokens.div_ceil(c.trace_block_size as u64).max(1) as usize;
        let ids = &c.request.prompt_ids[..blocks.min(c.request.prompt_ids.len())];
        let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        let key = xxh3_64_with_seed(&bytes, RING_SEED);
        let at = self.ring.partition_point(|&(position, _)| position < key);
        let ring_worker = self.ring[at % self.ring.len()].1;
        let total: u64 = c.loads.iter().map(|l| l.requests).sum();
        if total == 0 {
            return ring_worker;
        }
        let bound = p.load_factor * (total + 1) as f64 / c.loads.len() as f64;
        let ok = |w: usize| c.loads[w].requests as f64 <= bound;
        if ok(ring_worker) {
            return ring_worker;
        }
        (0..c.loads.len())
            .filter(|&w| ok(w))
            .min_by_key(|&w| c.loads[w].requests)
            .unwrap_or(ring_worker)
    }
}

/// The worker of least `key`, exact ties broken uniformly at random (by reservoir sampling,
/// as Dynamo does).
fn pick_min(n: usize, rng: &mut fastrand::Rng, key: impl Fn(usize) -> f64) -> usize {
    let (mut best, mut best_key, mut ties) = (0, f64::INFINITY, 0u32);
    for w in 0..n {
        let k = key(w);
        if k < best_key {
            (best, best_key, ties) = (w, k, 1);
        } else if k == best_key {
            ties += 1;
            if rng.u32(..ties) == 0 {
                best = w;
            }
        }
    }
    best
}

/// A worker in `0..n` drawn uniformly, the same on every machine: `Rng::usize` draws 32 bits
/// on a 32-bit target (the browser's wasm32) and 64 on a 64-bit one, which would send the
/// browser's requests elsewhere than the command line's.
fn uniform(rng: &mut fastrand::Rng, n: usize) -> usize {
    rng.u64(..n as u64) as usize
}

/// A worker drawn with probability `exp(-(cost - min) / ((max - min) * temperature))`
/// (uniformly when all costs are equal), as Dynamo's router samples.
fn softmax(
    n: usize,
    temperature: f64,
    rng: &mut fastrand::Rng,
    cost: impl Fn(usize) -> f64,
) -> usize {
    let costs: Vec<f64> = (0..n).map(cost).collect();
    let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = costs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max <= min {
        return uniform(rng, n);
    }
    let weights: Vec<f64> =
        costs.iter().map(|c| libm::exp(-(c - min) / ((max - min) * temperature))).collect();
    let mut draw = rng.f64() * weights.iter().sum::<f64>();
    for (w, weight) in weights.iter().enumerate() {
        if draw < *weight {
            return w;
        }
        draw -= weight;
    }
    n - 1
}

impl core::str::FromStr for Router {
    type Err = RouterError;
    fn from_str(text: &str) -> Result<Router, RouterError> {
        Router::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec;

    #[test]
    fn routers_read_with_parameters_and_name_themselves_as_written() {
        let list = Router::parse_list(
            "round-robin, kv:temperature=0.5,overlap_score_credit=0.8,prefix-hash",
        )
        .unwrap();
        let names: Vec<&str> = list.iter().map(Router::as_str).collect();
        assert_eq!(
            names,
            ["round-robin", "kv:temperature=0.5,overlap_score_credit=0.8", "prefix-hash"]
        );
        assert_eq!(
            list[1].kind,
            Kind::Kv { overlap_score_credit: 0.8, prefill_load_scale: 1.0, temperature: 0.5 }
        );
        for (text, message) in [
            (
                "mru",
                "unknown router \"mru\" (expected one of round-robin, random, least-loaded, kv, cache-aware, prefix-hash, session)",
            ),
            (
                "kv:credit=1",
                "the kv router has no parameter \"credit\" (expected one of overlap_score_credit, prefill_load_scale, temperature)",
            ),
            ("random:seed=1", "the random router has no parameter \"seed\" (it takes none)"),
            ("kv:temperature=-1", "temperature must be a number at least 0, not \"-1\""),
            (
                "prefix-hash:prefix_tokens=0",
                "prefix_tokens must be a whole number of tokens, at least 1, not \"0\"",
            ),
            ("prefix-hash:load_factor=0", "load_factor must be a positive number, not \"0\""),
            ("kv:temperature", "expected key=value after the router's name, not \"temperature\""),
        ] {
            assert_eq!(Router::parse_list(text).unwrap_err().to_string(), message, "{text}");
        }
    }

    #[test]
    fn every_parameter_is_read_into_its_field() {
        let read = |text: &str| Router::parse(text).unwrap().kind;
        assert_eq!(
            read("kv:overlap_score_credit=0.25,prefill_load_scale=2,temperature=0.5"),
            Kind::Kv { overlap_score_credit: 0.25, prefill_load_scale: 2.0, temperature: 0.5 }
        );
        assert_eq!(
            read(
                "cache-aware:cache_threshold=0.5,balance_abs_threshold=32,balance_rel_threshold=2"
            ),
            Kind::CacheAware {
                cache_threshold: 0.5,
                balance_abs_threshold: 32,
                balance_rel_threshold: 2.0
            }
        );
        let hash = PrefixHash { prefix_tokens: 64, load_factor: 0.5 };
        assert_eq!(read("prefix-hash:prefix_tokens=64,load_factor=0.5"), Kind::PrefixHash(hash));
        assert_eq!(read("session:prefix_tokens=64,load_factor=0.5"), Kind::Session(hash));
    }

    #[test]
    fn a_router_has_its_name_and_prints_as_written() {
        for name in Router::NAMES {
            let router = Router::parse(name).unwrap();
            assert_eq!(router.name(), name);
            assert_eq!(router.to_string(), name);
        }
        let router = Router::parse(" kv : temperature = 0.5 ").unwrap();
        assert_eq!((router.name(), router.to_string().as_str()), ("kv", "kv:temperature=0.5"));
    }

    fn candidates<'a>(
        request: &'a Request,
        cached: &'a [usize],
        loads: &'a [Load],
    ) -> Candidates<'a> {
        Candidates {
            request,
            ids: &request.prompt_ids,
            cached,
            loads,
            in_flight_prefix: &|_| 0,
            engine_block_size: 4,
            trace_block_size: 4,
        }
    }

    #[test]
    fn kv_prefers_the_longest_cached_prefix_and_breaks_ties_at_random() {
        let request =
            Request { prompt_tokens: 16, prompt_ids: vec![1, 2, 3, 4], ..Request::default() };
        let mut routing = Routing::new(&Router::parse("kv").unwrap(), 3);
        let mut rng = fastrand::Rng::with_seed(7);
        let loads = [Load::default(); 3];
        assert_eq!(routing.choose(&candidates(&request, &[1, 3, 0], &loads), &mut rng), 1);
        // Equal caches: every worker is chosen some of the time.
        let mut seen = [false; 3];
        for _ in 0..64 {
            seen[routing.choose(&candidates(&request, &[2, 2, 2], &loads), &mut rng)] = true;
        }
        assert_eq!(seen, [true; 3]);
        // Load outweighs a one-block head start.
        let busy =
            [Load { prefill_tokens: 64, ..Load::default() }, Load::default(), Load::default()];
        assert_eq!(routing.choose(&candidates(&request, &[3, 2, 0], &busy), &mut rng), 1);
    }

    /// Dynamo's cost, written out from its definition: prefill blocks not covered by the
    /// credited overlap, scaled, plus the decode blocks the worker would hold.
    fn kv_cost(
        credit: f64,
        scale: f64,
        bs: f64,
        isl: f64,
        load: &Load,
        cached: usize,
        new_blocks: usize,
    ) -> f64 {
        let prefill = ((load.prefill_tokens as f64 + isl) / bs - credit * cached as f64).max(0.0);
        scale * prefill + (load.active_blocks + new_blocks as u64) as f64
    }

    #[test]
    fn kv_picks_the_least_cost_as_dynamo_defines_it() {
        let mut rng = fastrand::Rng::with_seed(3);
        let (mut checked, mut not_most_cached) = (0, 0);
        for round in 0..400 {
            let (credit, scale) = [(1.0, 1.0), (0.5, 2.0), (2.0, 0.5)][round % 3];
            let text = format!("kv:overlap_score_credit={credit},prefill_load_scale={scale}");
            let mut routing = Routing::new(&Router::parse(&text).unwrap(), 4);
            let blocks = rng.usize(1..12);
            let request = Request {
                prompt_tokens: (blocks * 4 + rng.usize(..4)) as u64,
                prompt_ids: (0..blocks as u64).collect(),
                ..Request::default()
            };
            let cached: Vec<usize> = (0..4).map(|_| rng.usize(..=blocks)).collect();
            let in_flight: Vec<usize> = (0..4).map(|_| rng.usize(..=blocks)).collect();
            let loads: Vec<Load> = (0..4)
                .map(|_| Load {
                    prefill_tokens: rng.u64(..80),
                    active_blocks: rng.u64(..30),
                    ..Load::default()
                })
                .collect();
            let costs: Vec<f64> = (0..4)
                .map(|w| {
                    let isl = request.prompt_tokens as f64;
                    kv_cost(credit, scale, 4.0, isl, &loads[w], cached[w], blocks - in_flight[w])
                })
                .collect();
            let least = costs.iter().copied().fold(f64::INFINITY, f64::min);
            let best: Vec<usize> = (0..4).filter(|&w| costs[w] == least).collect();
            if best.len() != 1 {
                continue;
            }
            let mut c = candidates(&request, &cached, &loads);
            let prefix = |w: usize| in_flight[w];
            c.in_flight_prefix = &prefix;
            assert_eq!(routing.choose(&c, &mut rng), best[0], "costs {costs:?}");
            checked += 1;
            not_most_cached += usize::from(cached[best[0]] < *cached.iter().max().unwrap());
        }
        // Most draws have one cheapest worker, and load often beats the longest prefix.
        assert!(checked > 300 && not_most_cached > 50, "{checked} {not_most_cached}");
    }

    #[test]
    fn kv_with_a_temperature_samples_every_worker() {
        let mut routing = Routing::new(&Router::parse("kv:temperature=100").unwrap(), 3);
        let mut rng = fastrand::Rng::with_seed(9);
        let request =
            Request { prompt_tokens: 16, prompt_ids: vec![1, 2, 3, 4], ..Request::default() };
        let loads = [Load::default(); 3];
        let mut seen = [0; 3];
        for _ in 0..300 {
            seen[routing.choose(&candidates(&request, &[4, 2, 0], &loads), &mut rng)] += 1;
        }
        // Nearly uniform at this temperature, the cheapest a little more often.
        assert!(seen.iter().all(|&n| n > 50) && seen[0] >= seen[2], "{seen:?}");
    }

    #[test]
    fn cache_aware_follows_sglang_at_every_threshold() {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut outcomes = [0; 3];
        for round in 0..3000 {
            let (threshold, abs, rel) = [(0.25, 4, 1.5), (0.5, 2, 2.0), (0.75, 0, 1.0)][round % 3];
            let text = format!(
                "cache-aware:cache_threshold={threshold},balance_abs_threshold={abs},balance_rel_threshold={rel}"
            );
            let mut routing = Routing::new(&Router::parse(&text).unwrap(), 3);
            let request =
                Request { prompt_tokens: 16, prompt_ids: vec![1, 2, 3, 4], ..Request::default() };
            let cached: Vec<usize> = (0..3).map(|_| rng.usize(..=4)).collect();
            let loads: Vec<Load> = (0..3)
                .map(|_| Load {
                    requests: rng.u64(..10),
                    cached_blocks: rng.u64(..6),
                    ..Load::default()
                })
                .collect();
            // SGLang's choice, from its definition; `None` where it is a random tie-break.
            let requests: Vec<u64> = loads.iter().map(|l| l.requests).collect();
            let (min, max) = (*requests.iter().min().unwrap(), *requests.iter().max().unwrap());
            let unique_min = |key: &dyn Fn(usize) -> u64| {
                let least = (0..3).map(key).min().unwrap();
                let at: Vec<usize> = (0..3).filter(|&w| key(w) == least).collect();
                (at.len() == 1).then(|| at[0])
            };
            let expected = if max - min > abs && max as f64 > rel * min as f64 {
                outcomes[0] += 1;
                requests.iter().position(|&r| r == min)
            } else if *cached.iter().max().unwrap() as f64 * 4.0 / 16.0 > threshold {
                outcomes[1] += 1;
                unique_min(&|w| 4 - cached[w] as u64)
            } else {
                outcomes[2] += 1;
                unique_min(&|w| loads[w].cached_blocks)
            };
            let chosen = routing.choose(&candidates(&request, &cached, &loads), &mut rng);
            if let Some(expected) = expected {
                assert_eq!(chosen, expected, "{text}: cached {cached:?}, loads {loads:?}");
            }
        }
        // Every branch is taken (the balance one most: its thresholds are low here).
        assert!(outcomes.iter().all(|&n| n > 80), "{outcomes:?}");
    }

    #[test]
    fn prefix_hash_follows_the_ring_within_the_load_bound() {
        let mut rng = fastrand::Rng::with_seed(13);
        let (mut moved, mut stayed) = (0, 0);
        for round in 0..1500 {
            let (factor, workers) = [(1.25, 4), (1.0, 3), (2.0, 5)][round % 3];
            let text = format!("prefix-hash:prefix_tokens=8,load_factor={factor}");
            let routing = Routing::new(&Router::parse(&text).unwrap(), workers);
            let request = Request {
                prompt_tokens: 12,
                prompt_ids: vec![rng.u64(..), rng.u64(..), rng.u64(..)],
                ..Request::default()
            };
            // The ring, from its definition: the first of every worker's virtual nodes at or
            // after the key of the first two blocks (8 tokens), wrapping around.
            let key = xxh3_64_with_seed(
                &[request.prompt_ids[0].to_le_bytes(), request.prompt_ids[1].to_le_bytes()]
                    .concat(),
                RING_SEED,
            );
            let nodes = (0..workers as u64).flat_map(|w| {
                (0..VIRTUAL_NODES).map(move |v| {
                    (xxh3_64_with_seed(&[w.to_le_bytes(), v.to_le_bytes()].concat(), RING_SEED), w)
                })
            });
            let after = nodes.clone().filter(|&(at, _)| at >= key).min();
            let ring_worker = after.or_else(|| nodes.min()).unwrap().1 as usize;
            let loads: Vec<Load> =
                (0..workers).map(|_| Load { requests: rng.u64(..6), ..Load::default() }).collect();
            let total: u64 = loads.iter().map(|l| l.requests).sum();
            let bound = factor * (total + 1) as f64 / workers as f64;
            let fits = |w: usize| loads[w].requests as f64 <= bound;
            let expected = if total == 0 || fits(ring_worker) {
                stayed += 1;
                ring_worker
            } else {
                moved += 1;
                let least = (0..workers).filter(|&w| fits(w)).map(|w| loads[w].requests).min();
                least.map_or(ring_worker, |l| {
                    (0..workers).find(|&w| loads[w].requests == l).unwrap()
                })
            };
            let c = Candidates {
                trace_block_size: 4,
                ..candidates(&request, &[0; 5][..workers], &loads)
            };
            assert_eq!(
                routing.prefix_hash(PrefixHash { prefix_tokens: 8, load_factor: factor }, &c),
                expected
            );
        }
        assert!(moved > 100 && stayed > 100, "{moved} {stayed}");
    }

    #[test]
    fn softmax_draws_in_proportion_to_the_weights() {
        let mut rng = fastrand::Rng::with_seed(17);
        // Large costs, as Dynamo's are (blocks of long prompts): the weights must not
        // underflow, which subtracting the least cost ensures.
        let costs = [20_013.0, 20_003.0, 20_008.0, 20_003.0];
        for temperature in [0.5, 1.0, 4.0] {
            // exp(-(cost - min) / ((max - min) * temperature)), normalized.
            let weights = costs.map(|c| libm::exp(-(c - 20_003.0) / (10.0 * temperature)));
            let total: f64 = weights.iter().sum();
            let mut seen = [0u32; 4];
            let draws = 20_000;
            for _ in 0..draws {
                seen[softmax(4, temperature, &mut rng, |w| costs[w])] += 1;
            }
            for w in 0..4 {
                let (got, want) = (f64::from(seen[w]) / f64::from(draws), weights[w] / total);
                assert!((got - want).abs() < 0.015, "T={temperature}, worker {w}: {got} vs {want}");
            }
        }
        // Equal costs: uniform, as are pick_min's ties.
        let (mut drawn, mut picked) = ([0u32; 3], [0u32; 3]);
        for _ in 0..3000 {
            drawn[softmax(3, 1.0, &mut rng, |_| 2.0)] += 1;
            picked[pick_min(3, &mut rng, |_| 2.0)] += 1;
        }
        for seen in [drawn, picked] {
            assert!(seen.iter().all(|&n| (880..1120).contains(&n)), "{seen:?}");
        }
    }

    /// Uniform draws (the random router, softmax over equal costs) are 64-bit draws on every
    /// target, so the browser's 32-bit build routes as the command line does.
    #[test]
    fn uniform_draws_are_the_same_on_every_target() {
        let request = Request { prompt_tokens: 8, prompt_ids: vec![1, 2], ..Request::default() };
        let loads = [Load::default(); 5];
        let mut routing = Routing::new(&Router::parse("random").unwrap(), 5);
        for seed in 0..200 {
            let expected = fastrand::Rng::with_seed(seed).u64(..5) as usize;
            let mut rng = fastrand::Rng::with_seed(seed);
            let chosen = routing.choose(&candidates(&request, &[0; 5], &loads), &mut rng);
            assert_eq!(chosen, expected, "seed {seed}");
            let mut rng = fastrand::Rng::with_seed(seed);
            assert_eq!(softmax(5, 1.0, &mut rng, |_| 3.0), expected, "seed {seed}");
        }
    }

    #[test]
    fn routing_state_bytes_cover_the_ring_and_the_maps() {
        let request = |chat: u64, turn: u64| Request {
            prompt_tokens: 8,
            prompt_ids: vec![chat, turn],
            session: crate::trace::Session::Chat {
                id: chat * 100 + turn,
                parent: (turn > 0).then(|| chat * 100 + turn - 1),
            },
            ..Request::default()
        };
        assert_eq!(Routing::new(&Router::parse("kv").unwrap(), 4).heap_bytes(), 0);
        let mut routing = Routing::new(&Router::parse("session").unwrap(), 4);
        let ring = 4 * VIRTUAL_NODES as usize * size_of::<(u64, usize)>();
        assert!((ring..2 * ring).contains(&routing.heap_bytes()), "{}", routing.heap_bytes());
        let mut rng = fastrand::Rng::with_seed(1);
        let idle = [Load::default(); 4];
        for chat in 0..2000 {
            for turn in 0..2 {
                routing.choose(&candidates(&request(chat, turn), &[0; 4], &idle), &mut rng);
            }
        }
        // Two maps of 2,000-4,000 entries of 16 bytes each (a u64 key, a u64 or padded u32).
        let (roots, sticky) = (routing.roots.len(), routing.sticky.len());
        let least = ring + (roots + sticky) * 16;
        assert!(roots >= 2000 && sticky >= 2000, "{roots} {sticky}");
        assert!(
            (least..4 * least).contains(&routing.heap_bytes()),
            "{} vs {least}",
            routing.heap_bytes()
        );
    }

    #[test]
    fn prefix_hash_is_sticky_until_a_worker_is_overloaded() {
        let mut routing = Routing::new(&Router::parse("prefix-hash").unwrap(), 4);
        let mut rng = fastrand::Rng::with_seed(1);
        let request = Request { prompt_tokens: 8, prompt_ids: vec![42, 7], ..Request::default() };
        let idle = [Load::default(); 4];
        let home = routing.choose(&candidates(&request, &[0; 4], &idle), &mut rng);
        let mut loads = [Load { requests: 1, ..Load::default() }; 4];
        assert_eq!(routing.choose(&candidates(&request, &[0; 4], &loads), &mut rng), home);
        loads[home].requests = 9;
        loads[(home + 2) % 4].requests = 0;
        assert_eq!(
            routing.choose(&candidates(&request, &[0; 4], &loads), &mut rng),
            (home + 2) % 4
        );
    }

    #[test]
    fn session_follows_a_chat_to_its_first_turn() {
        let mut routing = Routing::new(&Router::parse("session").unwrap(), 8);
        let mut rng = fastrand::Rng::with_seed(3);
        let loads = [Load::default(); 8];
        let turn = |id, parent, first_id| Request {
            prompt_tokens: 4,
            prompt_ids: vec![first_id],
            session: Session::Chat { id, parent },
            ..Request::default()
        };
        let first = routing.choose(&candidates(&turn(10, None, 1), &[0; 8], &loads), &mut rng);
        // Later turns carry other prompts (so prefix-hash would scatter them) but stay.
        for (id, parent, first_id) in [(11, Some(10), 2), (12, Some(11), 3), (13, Some(12), 4)] {
            let w =
                routing.choose(&candidates(&turn(id, parent, first_id), &[0; 8], &loads), &mut rng);
            assert_eq!(w, first);
        }
    }

    #[test]
    fn cache_aware_balances_first_then_follows_the_cache() {
        let mut routing = Routing::new(&Router::parse("cache-aware").unwrap(), 2);
        let mut rng = fastrand::Rng::with_seed(5);
        let request =
            Request { prompt_tokens: 16, prompt_ids: vec![1, 2, 3, 4], ..Request::default() };
        let even = [Load { cached_blocks: 10, ..Load::default() }, Load::default()];
        assert_eq!(routing.choose(&candidates(&request, &[2, 0], &even), &mut rng), 0);
        // A prefix of one block in four is below the threshold: the emptier cache.
        assert_eq!(routing.choose(&candidates(&request, &[1, 0], &even), &mut rng), 1);
        let skewed =
            [Load { requests: 200, ..Load::default() }, Load { requests: 10, ..Load::default() }];
        assert_eq!(routing.choose(&candidates(&request, &[4, 0], &skewed), &mut rng), 1);
    }
}
