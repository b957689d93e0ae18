//! A router-shaped service: it drives a trace's requests through request guards, the way a
//! KV-aware router would, and serves the resulting Prometheus metrics on `/metrics`.
//!
//! ```text
//! DYN_ROUTER_CACHE_REUSE_HISTORY=1 cargo run --release -p kvreuse --example router -- \
//!     [--block-size N] [--cancel-every N] [--abort-every N] [TRACE]
//! ```
//!
//! Configuration comes from the environment ([`kvreuse::Config::from_env`]); the trace is
//! token JSONL (`{"tokens": [...], "output_tokens": [...]}`) or Mooncake JSONL (`hash_ids`,
//! `input_length`), the bundled Mooncake trace when none is given. Requests run one after
//! another, each in its own task that streams its output tokens to the guard in small chunks.
//! Request `i` (from 1) is cancelled mid-stream (its task aborted) when `i` is a multiple of
//! `--cancel-every`, fails at the engine (`incomplete()`) when a multiple of `--abort-every`,
//! and completes otherwise. The service prints `metrics: http://ADDR/metrics`, then one
//! `driven: ...` line when every request has ended, and serves until interrupted.

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
use kvreuse::{Config, RequestGuard, Tracker};
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
}

struct Options {
    block_size: usize,
    cancel_every: u64,
    abort_every: u64,
    trace: Option<String>,
}

fn options() -> Result<Options> {
    let mut options = Options { block_size: 512, cancel_every: 0, abort_every: 0, trace: None };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<u64> {
            let value = args.next().with_context(|| format!("{name} needs a value"))?;
            value.parse().with_context(|| format!("{name} {value:?}"))
        };
        match arg.as_str() {
            "--block-size" => options.block_size = number("--block-size")? as usize,
            "--cancel-every" => options.cancel_every = number("--cancel-every")?,
            "--abort-every" => options.abort_every = number("--abort-every")?,
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

    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("metrics: http://{}/metrics", listener.local_addr()?);
    let registry = Arc::new(registry);
    tokio::spawn(serve(listener, Arc::clone(&registry)));

    let text = match &options.trace {
        Some(path) => std::fs::read(path).with_context(|| format!("cannot read {path}"))?,
        None => kvreuse::trace::BUNDLED_TRACE.to_vec(),
    };
    let (mut counts, mut number) = ([0u64; 3], 0u64);
    for (at, line) in text.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let line: Line =
            serde_json::from_str(&line).with_context(|| format!("trace line {}", at + 1))?;
        number += 1;
        let fate = match number {
            n if options.cancel_every > 0 && n.is_multiple_of(options.cancel_every) => {
                Fate::Cancelled
            }
            n if options.abort_every > 0 && n.is_multiple_of(options.abort_every) => Fate::Aborted,
            _ => Fate::Complete,
        };
        let guard = match (&line.tokens, &line.hash_ids, line.input_length) {
            (Some(tokens), None, _) => tracker.begin(tokens),
            (None, Some(ids), Some(input)) => tracker.begin_hashed(input, ids),
            _ => bail!("trace line {}: neither a token nor a Mooncake record", at + 1),
        };
        run_request(guard, line.output_tokens, fate).await;
        counts[fate as usize] += 1;
    }
    println!(
        "driven: {number} requests ({} complete, {} cancelled, {} aborted)",
        counts[Fate::Complete as usize],
        counts[Fate::Cancelled as usize],
        counts[Fate::Aborted as usize]
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
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
            Fate::Aborted => guard.incomplete(),
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
