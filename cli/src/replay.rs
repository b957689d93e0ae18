//! `kvreuse replay`: how much prefix reuse a trace has, at several history sizes and policies.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use kvreuse::core::replay::{Capacity, Row};
use kvreuse::core::setup::{ReplaySettings, Setting, SetupError, Warmup};
use kvreuse::replay::replay_trace;
use serde::Serialize;

use crate::input::Input;
use crate::output::OutputFile;
use crate::table::{self, human_bytes, human_ms, percent, thousands};

/// Arguments of `kvreuse replay`. Values are checked by the shared setup in
/// [`kvreuse::core::setup`], so that the browser build and the Python package read them alike.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// Trace files (gzip read transparently), `-` for standard input, or directories (their
    /// .json files): Mooncake, Bailian or token records (JSONL), or kv-cache-tester documents.
    /// Without any, the bundled Mooncake synthetic trace.
    traces: Vec<PathBuf>,
    /// The trace format: mooncake, bailian, kvcache-tester or tokens (default: told from each
    /// file's first bytes). Mooncake and token records are told apart record by record.
    #[arg(long, value_name = "FORMAT", value_parser = utf8())]
    format: Option<String>,
    /// Tokens per block: default the format's (Mooncake 512, Bailian 16, a kv-cache-tester
    /// document's own, token records 512, the hashing block size).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = utf8())]
    block_size: Option<String>,
    /// History sizes: blocks (1000, 10k, 1M), bytes (256MiB, 1GiB) or inf, comma-separated
    /// (sizes of the fifo and lru histories) [default: 1k,10k,100k,1M,inf].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true, value_parser = utf8())]
    capacity: Vec<String>,
    /// Eviction policies: fifo (the history's own), lru, inf; comma-separated.
    #[arg(long, value_name = "LIST", default_value = ReplaySettings::DEFAULT_POLICIES, allow_hyphen_values = true, value_parser = utf8())]
    policy: Vec<String>,
    /// Fraction of the requests that only warm the histories up and are not counted (the
    /// files are read once more first, to count their records).
    #[arg(long, value_name = "FRACTION", default_value = "0", allow_hyphen_values = true, value_parser = utf8())]
    warmup: String,
    /// Number of requests that only warm the histories up (instead of --warmup; needs no
    /// count in advance, so it works on standard input).
    #[arg(long, value_name = "N", conflicts_with = "warmup", allow_hyphen_values = true, value_parser = utf8())]
    warmup_requests: Option<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also draw F1/F0 against capacity, one line per policy, as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Skip invalid lines (and report how many) instead of stopping at the first.
    #[arg(long)]
    skip_invalid: bool,
    /// Seconds between the starts of kv-cache-tester conversations (file k starts at k times
    /// this).
    #[arg(long, value_name = "SECONDS", default_value = "0", allow_hyphen_values = true, value_parser = utf8())]
    stagger: String,
}

impl ReplayArgs {
    /// The settings, checked by the shared setup; an error names the flag.
    fn settings(&self) -> Result<ReplaySettings> {
        let mut settings = ReplaySettings::default();
        // The capacities only when given: the settings' own are the defaults, and capacities
        // given need a policy that takes them.
        let capacity = (!self.capacity.is_empty()).then(|| self.capacity.join(","));
        let mut given = vec![
            (Setting::Policy, self.policy.join(",")),
            (Setting::Warmup, self.warmup.clone()),
            (Setting::Stagger, self.stagger.clone()),
        ];
        let optional = [
            (Setting::Format, &self.format),
            (Setting::BlockSize, &self.block_size),
            (Setting::WarmupRequests, &self.warmup_requests),
            (Setting::Capacity, &capacity),
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

/// A flag's value as text, or an error naming the flag when it is not valid UTF-8.
pub(crate) fn utf8() -> impl clap::builder::TypedValueParser<Value = String> {
    use clap::builder::TypedValueParser;
    clap::builder::OsStringValueParser::new()
        .try_map(|value| value.into_string().map_err(|_| "not valid UTF-8"))
}

/// A setup error, prefixed with the flag it is about.
pub(crate) fn flag_error(error: SetupError) -> anyhow::Error {
    anyhow!("{}: {error}", error.setting.flag())
}

/// The JSON output.
#[derive(Serialize)]
struct Report<'a> {
    requests: u64,
    measured_requests: u64,
    block_size: usize,
    warmup: f64,
    warmup_requests: Option<u64>,
    skipped_lines: u64,
    /// Heap bytes the replay's state took at the end (histories and distinct-id tables).
    replay_heap_bytes: usize,
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
    policy: &'a str,
    capacity: JsonCapacity,
    heap_bytes: Option<usize>,
    f0_tokens: u64,
    f1_tokens: u64,
    any_tokens: u64,
    f1_blocks: u64,
    evictions: u64,
    reach_ms: Option<u64>,
}

impl<'a> From<&'a Row> for JsonRow<'a> {
    fn from(row: &'a Row) -> Self {
        JsonRow {
            policy: row.policy.name(),
            capacity: row.capacity.map_or(JsonCapacity::Infinite("inf"), JsonCapacity::Blocks),
            heap_bytes: row.heap_bytes,
            f0_tokens: row.f0_tokens,
            f1_tokens: row.f1_tokens,
            any_tokens: row.any_tokens,
            f1_blocks: row.f1_blocks,
            evictions: row.evictions,
            reach_ms: row.reach_ms,
        }
    }
}

pub(crate) fn run(args: &ReplayArgs) -> Result<()> {
    let mut settings = args.settings()?;
    // Checked before any work.
    let plot = args.plot.as_deref().map(|p| OutputFile::prepare(p, "--plot", &args.traces));
    let plot = plot.transpose()?;
    let mut input = Input::open(&args.traces, &mut settings.trace)?;
    let mut config = settings.grid(Capacity::blocks).map_err(flag_error)?;
    input.start(settings.trace.warmup, "replaying")?;
    config.measure_from = usize::try_from(input.measure_from).unwrap_or(usize::MAX);
    let warmup = settings.trace.warmup;
    // As many replay threads as the machine has (the reading thread mostly waits for them).
    let streamed = replay_trace(&config, &input.reader, input.threads, || input.tick());
    let (replayed, stats) = streamed?;
    input.done(&stats);
    let rows = replayed.rows;

    if let Some(plot) = plot {
        crate::plot::write_svg(plot.temp_path(), &rows)?;
        plot.commit()?;
    }
    let mut out = std::io::stdout().lock();
    let measured = config.counted(stats.records as usize) as u64;
    if args.json {
        let (fraction, requests) = match warmup {
            Warmup::Fraction(f) => (f, None),
            Warmup::Requests(n) => (0.0, Some(n)),
        };
        let report = Report {
            requests: stats.records,
            measured_requests: measured,
            block_size: settings.trace.block_size,
            warmup: fraction,
            warmup_requests: requests,
            skipped_lines: stats.skipped,
            replay_heap_bytes: replayed.heap_bytes,
            rows: rows.iter().map(JsonRow::from).collect(),
        };
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        let (total, block_size) = (stats.records, settings.trace.block_size);
        writeln!(out, "{total} requests ({measured} counted), block size {block_size}")?;
        write_table(&mut out, &rows)?;
    }
    out.flush().context("cannot write stdout")
}

fn write_table(out: &mut impl Write, rows: &[Row]) -> std::io::Result<()> {
    let header = [
        "policy",
        "capacity",
        "bytes",
        "F0 tokens",
        "F1 tokens",
        "F1/F0",
        "any/F0",
        "evictions",
        "reach",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.policy.name().into(),
                r.capacity.map_or("inf".into(), thousands),
                r.heap_bytes.map_or("-".into(), human_bytes),
                thousands(r.f0_tokens as usize),
                thousands(r.f1_tokens as usize),
                percent(r.f1_tokens, r.f0_tokens),
                percent(r.any_tokens, r.f0_tokens),
                thousands(r.evictions as usize),
                r.reach_ms.map_or("-".into(), human_ms),
            ]
        })
        .collect();
    table::write(out, &header, &cells, &[0])
}
