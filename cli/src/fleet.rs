//! `kvreuse fleet`: where reuse is lost in simulated fleets, per router and cache size.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use kvreuse::core::fleet::{FleetRow, Router, Timing};
use kvreuse::core::replay::Capacity;
use kvreuse::core::setup::{FleetSettings, Setting, Warmup};
use kvreuse::fleet::fleet_trace;
use serde::Serialize;

use crate::input::Input;
use crate::output::OutputFile;
use crate::replay::{flag_error, utf8};
use crate::table::{self, thousands};

/// Arguments of `kvreuse fleet`. Values are checked by the shared setup in
/// [`kvreuse::core::setup`], as the browser build and the Python package check theirs.
#[derive(Debug, Args)]
pub(crate) struct FleetArgs {
    /// Trace files (gzip read transparently), `-` for standard input, or directories (their
    /// .json files), in any format `kvreuse replay` reads. Without any, the bundled Mooncake
    /// synthetic trace.
    traces: Vec<PathBuf>,
    /// Workers per fleet, comma-separated.
    #[arg(long, value_name = "LIST", default_value = FleetSettings::DEFAULT_WORKERS, allow_hyphen_values = true, value_parser = utf8())]
    workers: Vec<String>,
    /// Each worker's KV cache: blocks (2000, 10k) or bytes (40GiB, with
    /// --kv-bytes-per-token), comma-separated.
    #[arg(long, value_name = "LIST", default_value = FleetSettings::DEFAULT_WORKER_CAPACITIES, allow_hyphen_values = true, value_parser = utf8())]
    worker_capacity: Vec<String>,
    /// Routers, comma-separated, each with optional parameters: round-robin, random,
    /// least-loaded, kv[:overlap_score_credit=1,prefill_load_scale=1,temperature=0],
    /// cache-aware[:cache_threshold=0.3,balance_abs_threshold=64,balance_rel_threshold=1.5],
    /// prefix-hash[:prefix_tokens=256,load_factor=1.25], session (same parameters).
    #[arg(long, value_name = "LIST", default_value = Router::DEFAULT_LIST, allow_hyphen_values = true, value_parser = utf8())]
    router: Vec<String>,
    /// The trace format: mooncake, bailian, kvcache-tester or tokens (default: told from each
    /// file's first bytes). Mooncake and token records are told apart record by record.
    #[arg(long, value_name = "FORMAT", value_parser = utf8())]
    format: Option<String>,
    /// Tokens per trace block: default the format's.
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = utf8())]
    block_size: Option<String>,
    /// Tokens per block of the workers' caches: default the trace's; it must divide the
    /// trace's block size or be a multiple of it.
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = utf8())]
    engine_block_size: Option<String>,
    /// Bytes of KV cache per token (layers x 2 x KV heads x head dimension x bytes per
    /// value), for worker capacities in bytes.
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = utf8())]
    kv_bytes_per_token: Option<String>,
    /// The history of F1 (the ceiling): blocks, bytes of a kvreuse history, or inf.
    #[arg(long, value_name = "CAP", default_value = FleetSettings::DEFAULT_HISTORY, allow_hyphen_values = true, value_parser = utf8())]
    history: String,
    /// How time passes: mocker (Dynamo's mocker: vLLM's scheduler and timing) or instant
    /// (each request finishes before the next arrives).
    #[arg(long, value_name = "TIMING", default_value = "mocker", value_parser = utf8())]
    timing: String,
    /// Divides the simulated engines' pass times (mocker timing only), as Dynamo's
    /// speedup_ratio [default: 1].
    #[arg(long, value_name = "X", allow_hyphen_values = true, value_parser = utf8())]
    speedup: Option<String>,
    /// Fraction of the requests that only warm caches and history up and are not counted.
    #[arg(long, value_name = "FRACTION", default_value = "0", allow_hyphen_values = true, value_parser = utf8())]
    warmup: String,
    /// Number of requests that only warm up (instead of --warmup).
    #[arg(long, value_name = "N", conflicts_with = "warmup", allow_hyphen_values = true, value_parser = utf8())]
    warmup_requests: Option<String>,
    /// Seconds between the starts of kv-cache-tester conversations.
    #[arg(long, value_name = "SECONDS", default_value = "0", allow_hyphen_values = true, value_parser = utf8())]
    stagger: String,
    /// Seeds every random choice (ties, random routing), below 2^53.
    #[arg(long, value_name = "N", default_value = "0", allow_hyphen_values = true, value_parser = utf8())]
    seed: String,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also draw one stacked bar per row (reused, race, routing, retention, cold) as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Skip invalid lines (and report how many) instead of stopping at the first.
    #[arg(long)]
    skip_invalid: bool,
}

impl FleetArgs {
    /// The settings, checked by the shared setup; an error names the flag.
    fn settings(&self) -> Result<FleetSettings> {
        let mut settings = FleetSettings::default();
        let mut given = vec![
            (Setting::Workers, self.workers.join(",")),
            (Setting::WorkerCapacity, self.worker_capacity.join(",")),
            (Setting::Router, self.router.join(",")),
            (Setting::History, self.history.clone()),
            (Setting::Timing, self.timing.clone()),
            (Setting::Warmup, self.warmup.clone()),
            (Setting::Stagger, self.stagger.clone()),
            (Setting::Seed, self.seed.clone()),
        ];
        let optional = [
            (Setting::Format, &self.format),
            (Setting::BlockSize, &self.block_size),
            (Setting::EngineBlockSize, &self.engine_block_size),
            (Setting::KvBytesPerToken, &self.kv_bytes_per_token),
            (Setting::WarmupRequests, &self.warmup_requests),
            (Setting::Speedup, &self.speedup),
        ];
        for (setting, value) in optional {
            given.extend(value.clone().map(|text| (setting, text)));
        }
        for (setting, text) in given {
            settings.set(setting, &text).map_err(flag_error)?;
        }
        settings.trace.skip_invalid = self.skip_invalid;
        Ok(settings)
    }
}

/// The JSON output.
#[derive(Serialize)]
struct Report<'a> {
    requests: u64,
    measured_requests: u64,
    skipped_lines: u64,
    block_size: usize,
    engine_block_size: usize,
    timing: &'static str,
    speedup: Option<f64>,
    warmup: f64,
    warmup_requests: Option<u64>,
    history: JsonCapacity,
    kv_bytes_per_token: Option<u64>,
    seed: u64,
    /// Heap bytes of the simulations' state when the last request arrived.
    fleet_heap_bytes: usize,
    rows: Vec<JsonRow<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum JsonCapacity {
    Blocks(usize),
    Infinite(&'static str),
}

#[derive(Serialize)]
struct JsonRow<'a> {
    workers: usize,
    worker_capacity: usize,
    router: &'a str,
    requests: u64,
    rejected_requests: u64,
    truncated_outputs: u64,
    f0_tokens: u64,
    f1_tokens: u64,
    f2_tokens: u64,
    f3_tokens: u64,
    f4_tokens: u64,
    f5_tokens: u64,
    cold_tokens: u64,
    retention_tokens: u64,
    routing_tokens: u64,
    race_tokens: u64,
    retrieval_tokens: u64,
    evictions: u64,
    ttft_ms_p50: Option<f64>,
    ttft_ms_p99: Option<f64>,
    queue_ms_mean: Option<f64>,
    per_worker: Vec<JsonWorker>,
}

#[derive(Serialize)]
struct JsonWorker {
    requests: u64,
    prompt_tokens: u64,
    reused_tokens: u64,
}

impl<'a> From<&'a FleetRow> for JsonRow<'a> {
    fn from(row: &'a FleetRow) -> Self {
        let f = &row.funnel;
        JsonRow {
            workers: row.workers,
            worker_capacity: row.worker_capacity,
            router: row.router.as_str(),
            requests: row.requests,
            rejected_requests: row.rejected_requests,
            truncated_outputs: row.truncated_outputs,
            f0_tokens: f.f0,
            f1_tokens: f.f1,
            f2_tokens: f.f2,
            f3_tokens: f.f3,
            f4_tokens: f.f4,
            f5_tokens: f.f5,
            cold_tokens: f.cold,
            retention_tokens: f.retention,
            routing_tokens: f.routing,
            race_tokens: f.race,
            retrieval_tokens: f.retrieval,
            evictions: row.evictions,
            ttft_ms_p50: row.ttft_ms_p50,
            ttft_ms_p99: row.ttft_ms_p99,
            queue_ms_mean: row.queue_ms_mean,
            per_worker: row
                .per_worker
                .iter()
                .map(|w| JsonWorker {
                    requests: w.requests,
                    prompt_tokens: w.prompt_tokens,
                    reused_tokens: w.reused_tokens,
                })
                .collect(),
        }
    }
}

pub(crate) fn run(args: &FleetArgs) -> Result<()> {
    let mut settings = args.settings()?;
    let plot = args.plot.as_deref().map(|p| OutputFile::prepare(p, "--plot", &args.traces));
    let plot = plot.transpose()?;
    let mut input = Input::open(&args.traces, &mut settings.trace)?;
    let mut config = settings.config(Capacity::blocks).map_err(flag_error)?;
    input.start(settings.trace.warmup, "simulating fleets over")?;
    config.measure_from = usize::try_from(input.measure_from).unwrap_or(usize::MAX);
    let (simulated, stats) = fleet_trace(&config, &input.reader, input.threads, || input.tick())?;
    input.done(&stats);
    let rows = simulated.rows;
    let rejected: u64 = rows.iter().map(|r| r.rejected_requests).max().unwrap_or(0);
    if rejected > 0 {
        eprintln!(
            "kvreuse: warning: up to {rejected} requests per row had prompts larger than a \
             worker's whole cache; they were dropped (as Dynamo's mocker drops them) and are \
             not counted"
        );
    }
    if let Some(plot) = plot {
        crate::plot::write_fleet_svg(plot.temp_path(), &rows)?;
        plot.commit()?;
    }

    let engine_block_size = config.engine_block_size.unwrap_or(config.block_size);
    let measured = stats.records.saturating_sub(input.measure_from);
    let mut out = std::io::stdout().lock();
    if args.json {
        let (fraction, requests) = match settings.trace.warmup {
            Warmup::Fraction(f) => (f, None),
            Warmup::Requests(n) => (0.0, Some(n)),
        };
        let report = Report {
            requests: stats.records,
            measured_requests: measured,
            skipped_lines: stats.skipped,
            block_size: config.block_size,
            engine_block_size,
            timing: config.timing.name(),
            speedup: match config.timing {
                Timing::Mocker { speedup } => Some(speedup),
                Timing::Instant => None,
            },
            warmup: fraction,
            warmup_requests: requests,
            history: config.history.map_or(JsonCapacity::Infinite("inf"), JsonCapacity::Blocks),
            kv_bytes_per_token: settings.kv_bytes_per_token,
            seed: config.seed,
            fleet_heap_bytes: simulated.heap_bytes,
            rows: rows.iter().map(JsonRow::from).collect(),
        };
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        let timing = match config.timing {
            Timing::Instant => "instant timing".to_string(),
            Timing::Mocker { speedup } => format!("mocker timing, speedup {speedup}"),
        };
        writeln!(
            out,
            "{} requests ({measured} counted), trace blocks of {}, engine blocks of \
             {engine_block_size}, {timing}; F1 from a history of {}",
            stats.records,
            config.block_size,
            config.history.map_or("inf".to_string(), |h| format!("{} blocks", thousands(h))),
        )?;
        writeln!(out, "stages as shares of F0; losses in points of F0")?;
        let bytes_per_block = settings.kv_bytes_per_token.map(|b| b * engine_block_size as u64);
        write_table(&mut out, &rows, bytes_per_block)?;
    }
    out.flush().context("cannot write stdout")
}

fn write_table(
    out: &mut impl Write,
    rows: &[FleetRow],
    bytes_per_block: Option<u64>,
) -> std::io::Result<()> {
    let mut header = vec!["workers", "capacity"];
    if bytes_per_block.is_some() {
        header.push("bytes");
    }
    header.extend([
        "router",
        "F0 tokens",
        "F1",
        "F2",
        "F3",
        "F4",
        "cold",
        "retention",
        "routing",
        "race",
        "TTFT p50",
        "TTFT p99",
        "queue",
        "hit/worker",
        "share/worker",
        "evictions",
    ]);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let f = &r.funnel;
            let share = |part: u64| {
                if f.f0 == 0 {
                    "-".into()
                } else {
                    format!("{:.1}%", 100.0 * part as f64 / f.f0 as f64)
                }
            };
            let points = |part: u64| {
                if f.f0 == 0 {
                    "-".into()
                } else {
                    format!("{:.1}", 100.0 * part as f64 / f.f0 as f64)
                }
            };
            let mut row = vec![r.workers.to_string(), thousands(r.worker_capacity)];
            if let Some(b) = bytes_per_block {
                row.push(table::human_bytes((r.worker_capacity as u64).saturating_mul(b) as usize));
            }
            let ms = |v: Option<f64>| v.map_or("-".into(), human_ms);
            row.extend([
                r.router.as_str().to_string(),
                thousands(f.f0 as usize),
                share(f.f1),
                share(f.f2),
                share(f.f3),
                share(f.f4),
                points(f.cold),
                points(f.retention),
                points(f.routing),
                points(f.race),
                ms(r.ttft_ms_p50),
                ms(r.ttft_ms_p99),
                ms(r.queue_ms_mean),
                range(r.per_worker.iter().map(|w| (w.reused_tokens, w.prompt_tokens))),
                range(r.per_worker.iter().map(|w| (w.requests, r.requests))),
                thousands(r.evictions as usize),
            ]);
            row
        })
        .collect();
    let router = header.iter().position(|&h| h == "router").unwrap_or(0);
    table::write(out, &header, &cells, &[router])
}

/// The range of the ratios `part / whole` over workers, as percentages: `12-34%`.
fn range(ratios: impl Iterator<Item = (u64, u64)>) -> String {
    let values: Vec<f64> = ratios
        .filter(|&(_, whole)| whole > 0)
        .map(|(part, whole)| 100.0 * part as f64 / whole as f64)
        .collect();
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if values.is_empty() { "-".into() } else { format!("{lo:.0}-{hi:.0}%") }
}

/// Milliseconds as people read them.
fn human_ms(ms: f64) -> String {
    match ms {
        ms if ms < 1.0 => format!("{:.0} us", ms * 1e3),
        ms if ms < 1e3 => format!("{ms:.1} ms"),
        ms if ms < 6e4 => format!("{:.2} s", ms / 1e3),
        ms => format!("{:.1} min", ms / 6e4),
    }
}
