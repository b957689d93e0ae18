//! `kvreuse` for Python: the engines a router links natively, for notebooks, Python routers
//! and capacity planners (PyO3, abi3 for CPython 3.9+).
//!
//! Everything computes through the `kvreuse` crate and its core, as the command line does:
//! `replay` and `fleet` read traces with the same streaming reader and threads as `kvreuse
//! replay` and `kvreuse fleet` and return the rows of their `--json` output as dicts; settings
//! go through the shared setup, so a bad value raises the command line's message after the
//! keyword's name (`capacities: "0": a capacity must be positive`), a `ValueError` for a value
//! out of range and a `TypeError` for one of the wrong kind. Long calls release the GIL.
//!
//! The Python side (`kvreuse/__init__.py`) re-exports this module and adds the
//! `prometheus_client` adapter; `kvreuse/_kvreuse.pyi` types it.

use std::path::PathBuf;

use kvreuse::core::chain::{ChainSpec, Scheme, SchemeOption};
use kvreuse::core::fleet::FleetRow;
use kvreuse::core::replay::{Capacity, Row};
use kvreuse::core::setup::{FleetSettings, ReplaySettings, Setting, SetupError, TraceSettings};
use kvreuse::fleet::{TraceFleetError, fleet_trace};
use kvreuse::replay::{TraceReplayError, replay_trace};
use kvreuse::trace::{self, Source, TraceFileError, TraceReader};
use kvreuse::{Config, ReportError, RequestGuard, Route, SharedHistory, WorkerReport};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

/// A setup error as Python raises it: the keyword's name, then the shared setup's words.
fn setup_error(error: SetupError) -> PyErr {
    let message = format!("{}: {error}", error.setting.python_name());
    if error.is_range() { PyValueError::new_err(message) } else { PyTypeError::new_err(message) }
}

/// A trace reading error: an `OSError` for a file that cannot be read, else a `ValueError`.
fn trace_error(error: TraceFileError) -> PyErr {
    match error {
        TraceFileError::Setup(error) => setup_error(error),
        TraceFileError::Io { .. } => PyOSError::new_err(error.to_string()),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// A setting's value as the command line's flag takes it: a string as it is, a number
/// written out, a list joined with commas.
fn setting_text(value: &Bound<'_, PyAny>, setting: Setting) -> PyResult<String> {
    let name = setting.python_name();
    if let Ok(text) = value.cast::<PyString>() {
        return text.extract::<String>();
    }
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!("{name} must not be a bool")));
    }
    if let Ok(n) = value.extract::<u64>() {
        return Ok(n.to_string());
    }
    if let Ok(x) = value.extract::<f64>() {
        return Ok(x.to_string());
    }
    if let Ok(list) = value.cast::<PyList>() {
        let items =
            list.iter().map(|item| setting_text(&item, setting)).collect::<PyResult<Vec<_>>>()?;
        return Ok(items.join(","));
    }
    if let Ok(tuple) = value.cast::<pyo3::types::PyTuple>() {
        let items =
            tuple.iter().map(|item| setting_text(&item, setting)).collect::<PyResult<Vec<_>>>()?;
        return Ok(items.join(","));
    }
    Err(PyTypeError::new_err(format!(
        "{name} must be a string, a number or a list of them, not {}",
        value.get_type().name()?
    )))
}

/// The trace arguments: a path, a directory, or a list of them (none: the bundled trace).
fn trace_paths(traces: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<PathBuf>> {
    let Some(traces) = traces.filter(|t| !t.is_none()) else { return Ok(Vec::new()) };
    if let Ok(path) = traces.extract::<PathBuf>() {
        return Ok(vec![path]);
    }
    if let Ok(list) = traces.extract::<Vec<PathBuf>>() {
        return Ok(list);
    }
    Err(PyTypeError::new_err("traces must be a path, a directory, or a list of them"))
}

/// Hands each keyword that was given to the shared setup, as the command line's flag.
fn set_all(
    set: &mut dyn FnMut(Setting, &str) -> Result<(), SetupError>,
    keywords: &[(Setting, Option<&Bound<'_, PyAny>>)],
) -> PyResult<()> {
    for (setting, value) in keywords {
        if let Some(value) = value.filter(|v| !v.is_none()) {
            set(*setting, &setting_text(value, *setting)?).map_err(setup_error)?;
        }
    }
    Ok(())
}

/// The block ids of `tokens`, as a router computes them: `dynamo` (NVIDIA Dynamo's
/// XXH3-64 chain) or a vLLM scheme (`vllm-sha256-cbor`, `vllm-xxhash-cbor`,
/// `vllm-legacy-sha256-cbor-64bit`). Only complete blocks get an id.
#[pyfunction]
#[pyo3(signature = (tokens, block_size, *, scheme = "dynamo", lora_name = None, cache_namespace = None, eagle = false, hash_seed = None, cache_salt = None))]
#[allow(clippy::too_many_arguments)]
fn block_hashes(
    py: Python<'_>,
    tokens: Vec<u32>,
    block_size: usize,
    scheme: &str,
    lora_name: Option<String>,
    cache_namespace: Option<String>,
    eagle: bool,
    hash_seed: Option<String>,
    cache_salt: Option<String>,
) -> PyResult<Vec<u64>> {
    let scheme =
        Scheme::parse(scheme).map_err(|e| PyValueError::new_err(format!("scheme: {e}")))?;
    let mut spec = ChainSpec::new(scheme, block_size);
    spec.lora_name = lora_name;
    spec.cache_namespace = cache_namespace;
    spec.eagle = eagle;
    spec.hash_seed = hash_seed;
    spec.cache_salt = cache_salt;
    let ignored = match spec.ignored_option() {
        None => None,
        Some(SchemeOption::HashSeed) => Some("hash_seed applies to the vLLM schemes only"),
        Some(SchemeOption::CacheSalt) => Some("cache_salt applies to the vLLM schemes only"),
        Some(SchemeOption::CacheNamespace | SchemeOption::Eagle) => {
            Some("cache_namespace and eagle apply to the dynamo scheme only")
        }
    };
    if let Some(message) = ignored {
        return Err(PyValueError::new_err(message));
    }
    if let Some(problem) = spec.no_engine_match() {
        return Err(PyValueError::new_err(problem.to_string()));
    }
    let hashes = py
        .detach(|| spec.hash(&tokens))
        .map_err(|e| PyValueError::new_err(format!("block_size: {e}")))?;
    Ok(hashes.sequence)
}

/// A router's bounded FIFO history of block ids.
#[pyclass(frozen, module = "kvreuse")]
struct History {
    inner: SharedHistory,
}

#[pymethods]
impl History {
    /// A history of `capacity` ids: blocks (an int, or "10k") or a byte budget ("256MiB").
    #[new]
    fn new(capacity: &Bound<'_, PyAny>) -> PyResult<History> {
        let text = setting_text(capacity, Setting::Capacity)?;
        let capacity = ReplaySettings::parse_capacity(&text).map_err(|e| {
            let message = format!("capacity: {e}");
            if e.is_range() {
                PyValueError::new_err(message)
            } else {
                PyTypeError::new_err(message)
            }
        })?;
        let history = match capacity {
            Capacity::Blocks(blocks) => SharedHistory::with_capacity(blocks),
            Capacity::Bytes(bytes) => SharedHistory::with_byte_budget(bytes),
            Capacity::Infinite => {
                return Err(PyValueError::new_err(
                    "capacity: a history is bounded; give blocks or bytes",
                ));
            }
        };
        let inner = history.map_err(|e| PyValueError::new_err(format!("capacity: {e}")))?;
        Ok(History { inner })
    }

    /// How many leading ids of `ids` are in the history.
    fn seen_prefix_len(&self, ids: Vec<u64>) -> usize {
        self.inner.seen_prefix_len(&ids)
    }

    /// Inserts `ids` (present ones are skipped); returns how many ids were evicted for them.
    fn insert_all(&self, ids: Vec<u64>) -> usize {
        self.inner.insert_all(&ids).evicted
    }

    fn __contains__(&self, id: u64) -> bool {
        self.inner.contains(id)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Ids the history holds at most.
    #[getter]
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// Heap bytes the history takes (allocated up front).
    #[getter]
    fn heap_bytes(&self) -> usize {
        self.inner.heap_bytes()
    }

    fn __repr__(&self) -> String {
        format!("History(capacity={}, len={})", self.inner.capacity(), self.inner.len())
    }
}

/// The rows of `kvreuse replay --json` for `traces`; every default is the command line's.
#[pyfunction]
#[pyo3(signature = (traces = None, *, capacities = None, policies = None, block_size = None, warmup = None, warmup_requests = None, skip_invalid = false, format = None, stagger = None))]
#[allow(clippy::too_many_arguments)]
fn replay<'py>(
    py: Python<'py>,
    traces: Option<&Bound<'py, PyAny>>,
    capacities: Option<&Bound<'py, PyAny>>,
    policies: Option<&Bound<'py, PyAny>>,
    block_size: Option<&Bound<'py, PyAny>>,
    warmup: Option<&Bound<'py, PyAny>>,
    warmup_requests: Option<&Bound<'py, PyAny>>,
    skip_invalid: bool,
    format: Option<&Bound<'py, PyAny>>,
    stagger: Option<&Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let mut settings = ReplaySettings::default();
    let keywords = [
        (Setting::Capacity, capacities),
        (Setting::Policy, policies),
        (Setting::Format, format),
        (Setting::BlockSize, block_size),
        (Setting::Warmup, warmup),
        (Setting::WarmupRequests, warmup_requests),
        (Setting::Stagger, stagger),
    ];
    one_warmup(warmup, warmup_requests)?;
    set_all(&mut |s, t| settings.set(s, t), &keywords)?;
    settings.trace.skip_invalid = skip_invalid;
    let (reader, measure_from) = open(py, traces, &mut settings.trace)?;
    let mut config = settings.grid(Capacity::blocks).map_err(setup_error)?;
    config.measure_from = usize::try_from(measure_from).unwrap_or(usize::MAX);
    let threads = trace::default_threads();
    let result = py.detach(|| replay_trace(&config, &reader, threads, || {}));
    let (replayed, _stats) = result.map_err(|e| match e {
        TraceReplayError::Trace(e) => trace_error(e),
        other => PyValueError::new_err(other.to_string()),
    })?;
    replayed.rows.iter().map(|row| replay_row(py, row)).collect()
}

/// A warm-up is a share of the requests or a number of them, not both (the command line's
/// `--warmup` and `--warmup-requests` exclude each other too).
fn one_warmup(
    warmup: Option<&Bound<'_, PyAny>>,
    requests: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    match (warmup, requests) {
        (Some(_), Some(_)) => {
            Err(PyTypeError::new_err("warmup and warmup_requests exclude each other"))
        }
        _ => Ok(()),
    }
}

/// Opens `traces` as the command line does: the block size settled by the first file's
/// format, the warm-up placed (counting the records first when it is a share of them). The
/// reading is done without the GIL.
fn open(
    py: Python<'_>,
    traces: Option<&Bound<'_, PyAny>>,
    settings: &mut TraceSettings,
) -> PyResult<(TraceReader, u64)> {
    let sources = Source::from_args(&trace_paths(traces)?).map_err(trace_error)?;
    let opened = py.detach(|| -> Result<_, TraceFileError> {
        let reader = TraceReader::open(sources, settings, trace::default_threads())?;
        let warmup = settings.warmup;
        let measure_from = match warmup.measure_from(None) {
            Some(n) => n,
            None => warmup.measure_from(Some(reader.count_records()?)).unwrap_or(0),
        };
        Ok((reader, measure_from))
    });
    opened.map_err(trace_error)
}

fn replay_row<'py>(py: Python<'py>, row: &Row) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("policy", row.policy.name())?;
    match row.capacity {
        Some(c) => out.set_item("capacity", c)?,
        None => out.set_item("capacity", "inf")?,
    }
    out.set_item("heap_bytes", row.heap_bytes)?;
    out.set_item("f0_tokens", row.f0_tokens)?;
    out.set_item("f1_tokens", row.f1_tokens)?;
    out.set_item("any_tokens", row.any_tokens)?;
    out.set_item("f1_blocks", row.f1_blocks)?;
    out.set_item("evictions", row.evictions)?;
    out.set_item("reach_ms", row.reach_ms)?;
    Ok(out)
}

/// The rows of `kvreuse fleet --json` for `traces`; every default is the command line's.
#[pyfunction]
#[pyo3(signature = (traces = None, *, workers = None, worker_capacities = None, routers = None, block_size = None, engine_block_size = None, kv_bytes_per_token = None, history = None, timing = None, speedup = None, warmup = None, warmup_requests = None, seed = None, format = None, stagger = None, skip_invalid = false))]
#[allow(clippy::too_many_arguments)]
fn fleet<'py>(
    py: Python<'py>,
    traces: Option<&Bound<'py, PyAny>>,
    workers: Option<&Bound<'py, PyAny>>,
    worker_capacities: Option<&Bound<'py, PyAny>>,
    routers: Option<&Bound<'py, PyAny>>,
    block_size: Option<&Bound<'py, PyAny>>,
    engine_block_size: Option<&Bound<'py, PyAny>>,
    kv_bytes_per_token: Option<&Bound<'py, PyAny>>,
    history: Option<&Bound<'py, PyAny>>,
    timing: Option<&Bound<'py, PyAny>>,
    speedup: Option<&Bound<'py, PyAny>>,
    warmup: Option<&Bound<'py, PyAny>>,
    warmup_requests: Option<&Bound<'py, PyAny>>,
    seed: Option<&Bound<'py, PyAny>>,
    format: Option<&Bound<'py, PyAny>>,
    stagger: Option<&Bound<'py, PyAny>>,
    skip_invalid: bool,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let mut settings = FleetSettings::default();
    let keywords = [
        (Setting::Workers, workers),
        (Setting::WorkerCapacity, worker_capacities),
        (Setting::Router, routers),
        (Setting::Format, format),
        (Setting::BlockSize, block_size),
        (Setting::EngineBlockSize, engine_block_size),
        (Setting::KvBytesPerToken, kv_bytes_per_token),
        (Setting::History, history),
        (Setting::Timing, timing),
        (Setting::Speedup, speedup),
        (Setting::Warmup, warmup),
        (Setting::WarmupRequests, warmup_requests),
        (Setting::Seed, seed),
        (Setting::Stagger, stagger),
    ];
    one_warmup(warmup, warmup_requests)?;
    set_all(&mut |s, t| settings.set(s, t), &keywords)?;
    settings.trace.skip_invalid = skip_invalid;
    let (reader, measure_from) = open(py, traces, &mut settings.trace)?;
    let mut config = settings.config(Capacity::blocks).map_err(setup_error)?;
    config.measure_from = usize::try_from(measure_from).unwrap_or(usize::MAX);
    let threads = trace::default_threads();
    let result = py.detach(|| fleet_trace(&config, &reader, threads, || {}));
    let (simulated, _stats) = result.map_err(|e| match e {
        TraceFleetError::Trace(e) => trace_error(e),
        other => PyValueError::new_err(other.to_string()),
    })?;
    simulated.rows.iter().map(|row| fleet_row(py, row)).collect()
}

fn fleet_row<'py>(py: Python<'py>, row: &FleetRow) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("workers", row.workers)?;
    out.set_item("worker_capacity", row.worker_capacity)?;
    out.set_item("router", row.router.as_str())?;
    for (key, value) in row.counts() {
        out.set_item(key, value)?;
    }
    out.set_item("ttft_ms_p50", row.ttft_ms_p50)?;
    out.set_item("ttft_ms_p99", row.ttft_ms_p99)?;
    out.set_item("queue_ms_mean", row.queue_ms_mean)?;
    let workers = PyList::empty(py);
    for w in &row.per_worker {
        let one = PyDict::new(py);
        one.set_item("requests", w.requests)?;
        one.set_item("prompt_tokens", w.prompt_tokens)?;
        one.set_item("reused_tokens", w.reused_tokens)?;
        workers.append(one)?;
    }
    out.set_item("per_worker", workers)?;
    Ok(out)
}

/// A router's prefix-reuse accounting: its history and Prometheus metrics (a registry of its
/// own). Thread-safe; `begin` one guard per routed request.
#[pyclass(frozen, module = "kvreuse")]
struct Tracker {
    tracker: kvreuse::Tracker,
    registry: prometheus::Registry,
}

#[pymethods]
impl Tracker {
    #[new]
    #[pyo3(signature = (block_size, *, history_bytes = 256 << 20, eagle = false, metric_prefix = "dynamo_component_".to_string(), const_labels = None))]
    fn new(
        block_size: usize,
        history_bytes: usize,
        eagle: bool,
        metric_prefix: String,
        const_labels: Option<std::collections::BTreeMap<String, String>>,
    ) -> PyResult<Tracker> {
        let mut config = Config::new(block_size)
            .with_history_bytes(history_bytes)
            .with_eagle(eagle)
            .with_metric_prefix(metric_prefix);
        for (name, value) in const_labels.unwrap_or_default() {
            config = config.with_const_label(name, value);
        }
        let registry = prometheus::Registry::new();
        let tracker = kvreuse::Tracker::new(&config, &registry)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Tracker { tracker, registry })
    }

    /// Begins a routed request with its prompt's token ids: measures the seen prefix (F1).
    fn begin(&self, py: Python<'_>, tokens: Vec<u32>) -> Guard {
        let guard = py.detach(|| self.tracker.begin(&tokens));
        Guard { guard: Some(guard) }
    }

    /// The metrics in the Prometheus text exposition format.
    fn metrics_text(&self) -> PyResult<String> {
        prometheus::TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The metric families: `(name, "counter" | "gauge", help, [(labels, value), ...])`, for
    /// `kvreuse.prometheus`.
    fn metric_families(&self) -> Vec<Family> {
        use prometheus::proto::MetricType;
        self.registry
            .gather()
            .iter()
            .map(|family| {
                let counter = family.get_field_type() == MetricType::COUNTER;
                let samples = family
                    .get_metric()
                    .iter()
                    .map(|m| {
                        let labels = m
                            .get_label()
                            .iter()
                            .map(|l| (l.name().to_owned(), l.value().to_owned()))
                            .collect();
                        let value = if counter {
                            m.get_counter().get_value()
                        } else {
                            m.get_gauge().get_value()
                        };
                        (labels, value)
                    })
                    .collect();
                let kind = if counter { "counter" } else { "gauge" };
                (family.name().to_owned(), kind, family.help().to_owned(), samples)
            })
            .collect()
    }
}

/// A metric family as `Tracker.metric_families` gives it: name, kind, help, and per sample
/// its labels and value.
type Family = (String, &'static str, String, Vec<(Vec<(String, String)>, f64)>);

/// One routed request, counted exactly once: `complete()`, `incomplete()`, or the end of a
/// `with` block (normal exit completes, an exception counts incomplete). A guard collected
/// unfinished counts incomplete.
#[pyclass(module = "kvreuse")]
struct Guard {
    guard: Option<RequestGuard>,
}

impl Guard {
    fn active(&mut self) -> PyResult<&mut RequestGuard> {
        self.guard.as_mut().ok_or_else(|| PyRuntimeError::new_err("the request has already ended"))
    }
}

#[pymethods]
impl Guard {
    /// Tokens of the prompt's leading blocks the history held at begin (F1 if it completes).
    #[getter]
    fn seen_tokens(&self) -> u64 {
        self.guard.as_ref().map_or(0, RequestGuard::seen_tokens)
    }

    /// Generated tokens of choice `choice_index`, as they stream.
    fn observe_output(&mut self, choice_index: u32, tokens: Vec<u32>) -> PyResult<()> {
        self.active()?.observe_output(choice_index, &tokens);
        Ok(())
    }

    /// What the router saw when it chose the worker: prompt tokens cached on the best
    /// eligible worker (F2) and on the selected one (F3). A second route is ignored.
    fn observe_route(
        &mut self,
        best_cached_tokens: u64,
        selected_cached_tokens: u64,
    ) -> PyResult<()> {
        self.active()?.observe_route(Route { best_cached_tokens, selected_cached_tokens });
        Ok(())
    }

    /// The worker's report (F4 = GPU hits + external lookups, F5 = GPU + external hits).
    /// Raises `ValueError` for a report of another prompt or a second report.
    #[pyo3(signature = (prompt_tokens, gpu_hit_tokens, cpu_hit_tokens = 0, cpu_lookup_tokens = 0))]
    fn observe_worker(
        &mut self,
        prompt_tokens: u64,
        gpu_hit_tokens: u64,
        cpu_hit_tokens: u64,
        cpu_lookup_tokens: u64,
    ) -> PyResult<()> {
        let report =
            WorkerReport { prompt_tokens, gpu_hit_tokens, cpu_hit_tokens, cpu_lookup_tokens };
        self.active()?.observe_worker(report).map_err(report_error)
    }

    /// Ends the request as complete: counts F0-F5 and teaches the history its blocks.
    fn complete(&mut self) -> PyResult<()> {
        self.guard.take().ok_or_else(ended)?.complete();
        Ok(())
    }

    /// Ends the request as incomplete (aborted, cancelled, failed).
    fn incomplete(&mut self) -> PyResult<()> {
        self.guard.take().ok_or_else(ended)?.incomplete();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Completes on a normal exit, counts incomplete on an exception (which propagates).
    #[pyo3(signature = (exc_type, _exc = None, _traceback = None))]
    fn __exit__(
        &mut self,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        if let Some(guard) = self.guard.take() {
            match exc_type.filter(|t| !t.is_none()) {
                None => guard.complete(),
                Some(_) => guard.incomplete(),
            }
        }
        false
    }
}

fn ended() -> PyErr {
    PyRuntimeError::new_err("the request has already ended")
}

fn report_error(error: ReportError) -> PyErr {
    PyValueError::new_err(error.to_string())
}

/// Parses a worker report as routers receive it: `kind` is `"dynamo"` (the `engine_data`
/// object), `"openai"` (a `usage` object) or `"sglang"` (`meta_info`). Returns a dict with
/// the report's counts, or `None` when the payload carries no report.
#[pyfunction]
#[pyo3(signature = (payload, kind = "dynamo"))]
fn parse_worker_report<'py>(
    py: Python<'py>,
    payload: &Bound<'py, PyAny>,
    kind: &str,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let bytes: Vec<u8> = match payload.cast::<PyString>() {
        Ok(text) => text.extract::<String>()?.into_bytes(),
        Err(_) => payload.extract()?,
    };
    let report = match kind {
        "dynamo" => WorkerReport::from_dynamo_engine_data(&bytes),
        "openai" => WorkerReport::from_openai_usage(&bytes),
        "sglang" => WorkerReport::from_sglang_meta_info(&bytes),
        other => {
            return Err(PyValueError::new_err(format!(
                "kind: {other:?} is not one of \"dynamo\", \"openai\", \"sglang\""
            )));
        }
    }
    .map_err(report_error)?;
    report
        .map(|r| {
            let out = PyDict::new(py);
            out.set_item("prompt_tokens", r.prompt_tokens)?;
            out.set_item("gpu_hit_tokens", r.gpu_hit_tokens)?;
            out.set_item("cpu_hit_tokens", r.cpu_hit_tokens)?;
            out.set_item("cpu_lookup_tokens", r.cpu_lookup_tokens)?;
            Ok(out)
        })
        .transpose()
}

#[pymodule]
fn _kvreuse(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(block_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_function(wrap_pyfunction!(fleet, m)?)?;
    m.add_function(wrap_pyfunction!(parse_worker_report, m)?)?;
    m.add_class::<History>()?;
    m.add_class::<Tracker>()?;
    m.add_class::<Guard>()?;
    m.add("BUNDLED_TRACE_NAME", trace::BUNDLED_TRACE_NAME)?;
    Ok(())
}
