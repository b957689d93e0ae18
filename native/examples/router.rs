//! A router-shaped service: it routes a trace's requests to simulated workers, drives a
//! request guard per request the way a KV-aware router would, and serves the resulting
//! Prometheus metrics on `/metrics`: every family, F0 to F5.
//!
//! ```text
//! DYN_ROUTER_CACHE_REUSE_HISTORY=1 cargo run --release -p kvreuse --example router -- \
//!     [--block-size N] [--workers N] [--worker-capacity BLOCKS] [--timing instant|mocker]
//!     [--cancel-every N] [--abort-every N] [--no-report-every N] [--pace-ms N] [TRACE]
//! ```
//!
//! Configuration comes from the environment ([`kvreuse::Config::from_env`]; with
//! `DYN_ROUTER_CACHE_REUSE_SYNC=1` the history syncs with other replicas over NATS, at
//! `KVREUSE_NATS_URL`); the trace is token JSONL
//! (`{"tokens": [...], "output_tokens": [...]}`) or Mooncake JSONL (`hash_ids`,
//! `input_length`), the bundled Mooncake trace when none is given.
//!
//! The workers are the fleet engine's ([`kvreuse::core::fleet`]): `--workers` of them with
//! vLLM prefix caches of `--worker-capacity` blocks, behind Dynamo's KV router. Each request's
//! guard begins when it arrives; once the simulation has placed and run it, the guard gets the
//! router's view (tokens cached on the best worker and on the chosen one) and the worker's
//! report (as Dynamo's vLLM handler sends it in `engine_data`, parsed as a router parses it),
//! then streams its output in its own task. Request `i` (from 1) is cancelled mid-stream (its
//! task aborted) when `i` is a multiple of `--cancel-every`, fails at the engine
//! (`incomplete()`) when a multiple of `--abort-every` or when its worker rejects it (a prompt
//! larger than the whole cache, which vLLM refuses), comes without a worker report when a
//! multiple of `--no-report-every`, and completes otherwise; `--pace-ms` waits between
//! arrivals (for watching the metrics move). The service prints `metrics:
//! http://ADDR/metrics`, then one `driven: ...` line when every request has ended, and serves
//! until interrupted.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::BufRead;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::CONTENT_TYPE;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use kvreuse::core::chain::DynamoHasher;
use kvreuse::core::fleet::{Fleet, FleetConfig, Outcome, Router, Shape, Timing};
use kvreuse::core::message::Domain;
use kvreuse::core::trace::Request as TraceRequest;
use kvreuse::{Config, ReplicaSync, ReplicaSyncConfig, RequestGuard, Route, Tracker, WorkerReport};
use prometheus::{Registry, TextEncoder};
use serde::Deserialize;
use tokio::net::TcpListener;

/// One trace line: token records carry tokens, Mooncake records only block ids.
#[derive(Deserialize)]
struct Line {
    tokens: Option<Vec<u32>>,
    #[serde(default)]
    output_tokens: Vec<u32>,
    input_length: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    timestamp: Option<u64>,
    output_length: Option<u64>,
}

struct Options {
    block_size: usize,
    workers: usize,
    worker_capacity: usize,
    timing: Timing,
    cancel_every: u64,
    abort_every: u64,
    no_report_every: u64,
    pace_ms: u64,
    trace: Option<String>,
}

fn options() -> Result<Options> {
    let mut options = Options {
        block_size: 512,
        workers: 4,
        worker_capacity: 2000,
        timing: Timing::Instant,
        cancel_every: 0,
        abort_every: 0,
        no_report_every: 0,
        pace_ms: 0,
        trace: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        let mut number = |name: &str| -> Result<u64> {
            let text = value(name)?;
            text.parse().with_context(|| format!("{name} {text:?}"))
        };
        match arg.as_str() {
            "--block-size" => options.block_size = number("--block-size")? as usize,
            "--workers" => options.workers = number("--workers")? as usize,
            "--worker-capacity" => options.worker_capacity = number("--worker-capacity")? as usize,
            "--timing" => {
                options.timing = match value("--timing")?.as_str() {
                    "instant" => Timing::Instant,
                    // Engine passes a thousand times faster than the model says: requests
                    // overlap a little, as in Dynamo's replays.
                    "mocker" => Timing::Mocker { speedup: 1000.0 },
                    other => bail!("--timing {other:?}: instant or mocker"),
                };
            }
            "--cancel-every" => options.cancel_every = number("--cancel-every")?,
            "--abort-every" => options.abort_every = number("--abort-every")?,
            "--no-report-every" => options.no_report_every = number("--no-report-every")?,
            "--pace-ms" => options.pace_ms = number("--pace-ms")?,
            flag if flag.starts_with("--") => bail!("unknown option {flag}"),
            path => options.trace = Some(path.to_string()),
        }
    }
    Ok(options)
}

/// How a request ends.
#[derive(Clone, Copy, PartialEq)]
enum Fate {
    Complete,
    Cancelled,
    Aborted,
    /// The worker refused the prompt (larger than its whole cache), as vLLM refuses one: the
    /// request fails before it runs.
    Rejected,
}

/// A request that arrived and waits for the simulation to place and run it.
struct Waiting {
    guard: RequestGuard,
    output: Vec<u32>,
    fate: Fate,
    report: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let options = options()?;
    let registry = Registry::new();
    let config = Config::from_env(options.block_size).with_const_label("router_id", "example");
    let tracker = Tracker::new(&config, &registry)?;
    if !tracker.is_enabled() {
        eprintln!("note: set DYN_ROUTER_CACHE_REUSE_HISTORY=1 to switch the accounting on");
    }
    let domain = Domain {
        model: "example".into(),
        block_size: options.block_size,
        eagle: false,
        scheme: "dynamo".into(),
    };
    let _sync = match ReplicaSyncConfig::from_env(domain) {
        Some(sync) if tracker.is_enabled() => {
            Some(ReplicaSync::start(&tracker, sync, &config, &registry).await?)
        }
        _ => None,
    };

    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("metrics: http://{}/metrics", listener.local_addr()?);
    let registry = Arc::new(registry);
    tokio::spawn(serve(listener, Arc::clone(&registry)));

    let text = match &options.trace {
        Some(path) => std::fs::read(path).with_context(|| format!("cannot read {path}"))?,
        None => kvreuse::trace::BUNDLED_TRACE.to_vec(),
    };
    let mut fleet = Fleet::new(&FleetConfig {
        block_size: options.block_size,
        engine_block_size: None,
        shapes: vec![Shape {
            workers: options.workers,
            worker_capacity: options.worker_capacity,
            router: Router::parse("kv").expect("a router"),
        }],
        timing: options.timing,
        history: None,
        measure_from: 0,
        seed: 0,
    })?;
    fleet.record_outcomes();
    let hasher = DynamoHasher::new(options.block_size)?;
    let mut waiting: HashMap<u64, Waiting> = HashMap::new();
    let (mut counts, mut number) = ([0u64; 4], 0u64);
    for (at, line) in text.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let line: Line =
            serde_json::from_str(&line).with_context(|| format!("trace line {}", at + 1))?;
        number += 1;
        let every = |n: u64| n > 0 && number.is_multiple_of(n);
        let fate = match () {
            () if every(options.cancel_every) => Fate::Cancelled,
            () if every(options.abort_every) => Fate::Aborted,
            () => Fate::Complete,
        };
        let (guard, request) = match (&line.tokens, &line.hash_ids, line.input_length) {
            (Some(tokens), None, _) => {
                let request = TraceRequest {
                    timestamp: line.timestamp,
                    prompt_tokens: tokens.len() as u64,
                    prompt_ids: hasher.hash(tokens).sequence,
                    output_tokens: line.output_tokens.len() as u64,
                    ..TraceRequest::default()
                };
                (tracker.begin(tokens), request)
            }
            (None, Some(ids), Some(input)) => {
                let request = TraceRequest {
                    timestamp: line.timestamp,
                    prompt_tokens: input,
                    prompt_ids: ids.clone(),
                    output_tokens: line.output_length.unwrap_or(0),
                    ..TraceRequest::default()
                };
                (tracker.begin_hashed(input, ids), request)
            }
            _ => bail!("trace line {}: neither a token nor a Mooncake record", at + 1),
        };
        if options.pace_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(options.pace_ms)).await;
        }
        let report = !every(options.no_report_every);
        let output = line.output_tokens;
        waiting.insert(number - 1, Waiting { guard, output, fate, report });
        fleet.push(&request)?;
        for outcome in fleet.take_outcomes(0) {
            counts[run(&mut waiting, outcome).await? as usize] += 1;
        }
    }
    fleet.play_out()?;
    for outcome in fleet.take_outcomes(0) {
        counts[run(&mut waiting, outcome).await? as usize] += 1;
    }
    println!(
        "driven: {number} requests ({} complete, {} cancelled, {} aborted, {} rejected)",
        counts[Fate::Complete as usize],
        counts[Fate::Cancelled as usize],
        counts[Fate::Aborted as usize],
        counts[Fate::Rejected as usize]
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}

/// Gives a placed request its evidence, then runs it; returns how it ended.
async fn run(waiting: &mut HashMap<u64, Waiting>, outcome: Outcome) -> Result<Fate> {
    let Some(Waiting { mut guard, output, fate, report }) = waiting.remove(&outcome.request) else {
        bail!("the simulation placed request {} twice", outcome.request);
    };
    if outcome.rejected {
        guard.incomplete();
        return Ok(Fate::Rejected);
    }
    guard.observe_route(Route {
        best_cached_tokens: outcome.best_cached_tokens,
        selected_cached_tokens: outcome.selected_cached_tokens,
    });
    if report {
        // The worker's report as Dynamo's vLLM handler puts it in `engine_data`.
        let engine_data = serde_json::json!({"kv_cache_hit": {
            "complete": true,
            "prompt_tokens": outcome.prompt_tokens,
            "gpu_hit_tokens": outcome.reused_tokens,
            "cpu_hit_tokens": 0,
            "cpu_lookup_tokens": outcome.found_tokens - outcome.reused_tokens,
        }});
        // A report that cannot be used is logged, and the request goes on: ending it here
        // would drop the guard and count it incomplete (a report of another prompt counts as
        // `prompt_mismatch` once the request completes).
        match WorkerReport::from_dynamo_engine_data(engine_data.to_string().as_bytes()) {
            Ok(Some(parsed)) => {
                if let Err(error) = guard.observe_worker(parsed) {
                    tracing::warn!(%error, "worker report refused");
                }
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "worker report unreadable"),
        }
    }
    run_request(guard, output, fate).await;
    Ok(fate)
}

/// Streams one request's output in its own task and ends it as `fate` says.
async fn run_request(mut guard: RequestGuard, output: Vec<u32>, fate: Fate) {
    let (first_chunk, streamed) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut first_chunk = Some(first_chunk);
        for chunk in output.chunks(3) {
            guard.observe_output(0, chunk);
            if let Some(signal) = first_chunk.take() {
                let _ = signal.send(());
            }
            if fate == Fate::Cancelled {
                // A client that went away: the task is aborted while it waits here.
                std::future::pending::<()>().await;
            }
            tokio::task::yield_now().await;
        }
        match fate {
            Fate::Aborted | Fate::Rejected => guard.incomplete(),
            // A cancelled request without output is dropped here, unfinished.
            Fate::Cancelled => drop(guard),
            Fate::Complete => guard.complete(),
        }
    });
    if fate == Fate::Cancelled {
        // Abort once the request is streaming (or has ended, if it had no output).
        let _ = streamed.await;
        task.abort();
    }
    let _ = task.await;
}

/// Serves the registry's metrics as Prometheus text on every path.
async fn serve(listener: TcpListener, registry: Arc<Registry>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let service = service_fn(move |_: Request<Incoming>| {
                let registry = Arc::clone(&registry);
                async move {
                    let body = TextEncoder::new()
                        .encode_to_string(&registry.gather())
                        .unwrap_or_else(|e| format!("# cannot encode metrics: {e}\n"));
                    let response = Response::builder()
                        .header(CONTENT_TYPE, "text/plain; version=0.0.4")
                        .body(Full::new(Bytes::from(body)))
                        .expect("a valid response");
                    Ok::<_, Infallible>(response)
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!("metrics connection: {e}");
            }
        });
    }
}
