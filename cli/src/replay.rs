//! `kvreuse replay`: how much prefix reuse a trace has, at several history sizes and policies.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use kvreuse::core::replay::{Capacity, Row};
use kvreuse::core::setup::{ReplaySettings, Setting, SetupError, Warmup};
use kvreuse::core::trace::Format;
use kvreuse::replay::replay_trace;
use kvreuse::trace::{self, BUNDLED_TRACE_NAME, Source, TraceReader};
use serde::Serialize;

use crate::output::OutputFile;

/// Arguments of `kvreuse replay`. Values are checked by the shared setup in
/// [`kvreuse::core::setup`], so that the browser build and the Python package read them alike.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// Trace files (gzip read transparently), `-` for standard input, or directories (their
    /// .json files): Mooncake, Bailian or token records (JSONL), or kv-cache-tester documents.
    /// Without any, the bundled Mooncake synthetic trace.
    traces: Vec<PathBuf>,
    /// The trace format: mooncake, bailian, kvcache-tester or tokens (default: told from each
    /// file's first bytes).
    #[arg(long, value_name = "FORMAT", value_parser = utf8())]
    format: Option<String>,
    /// Tokens per block: default the format's (Mooncake 512, Bailian 16, a kv-cache-tester
    /// document's own, token records 512, the hashing block size).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = utf8())]
    block_size: Option<String>,
    /// History sizes: blocks (1000, 10k, 1M), bytes (256MiB, 1GiB) or inf, comma-separated.
    #[arg(long, value_name = "LIST", default_value = ReplaySettings::DEFAULT_CAPACITIES, allow_hyphen_values = true, value_parser = utf8())]
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
        let mut given = vec![
            (Setting::Capacity, self.capacity.join(",")),
            (Setting::Policy, self.policy.join(",")),
            (Setting::Warmup, self.warmup.clone()),
            (Setting::Stagger, self.stagger.clone()),
        ];
        let optional = [
            (Setting::Format, &self.format),
            (Setting::BlockSize, &self.block_size),
            (Setting::WarmupRequests, &self.warmup_requests),
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
    let sources = Source::from_args(&args.traces)?;
    if args.traces.is_empty() {
        eprintln!(
            "kvreuse: replaying the {BUNDLED_TRACE_NAME} (FAST'25, Apache-2.0; see traces/NOTICE)"
        );
    }
    // The first file's format sets the block size when none is given.
    settings.trace.settle(sources[0].sniff()?);
    let mut config = settings.grid(Capacity::blocks).map_err(flag_error)?;
    let threads = trace::default_threads();
    let reader = TraceReader::new(sources.clone(), &settings.trace, threads).map_err(flag_error)?;
    let warmup = settings.trace.warmup;
    let measure_from = match warmup.measure_from(None) {
        Some(n) => n,
        None => warmup.measure_from(Some(reader.count_records()?)).unwrap_or(0),
    };
    config.measure_from = usize::try_from(measure_from).unwrap_or(usize::MAX);

    let stored: Option<u64> = sources.iter().map(Source::stored_bytes).sum();
    let progress = match stored {
        Some(total) if std::io::stderr().is_terminal() && total >= 64 << 20 => {
            ProgressBar::new(total).with_style(
                ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} read {eta}")
                    .expect("a valid template"),
            )
        }
        _ => ProgressBar::hidden(),
    };
    let bytes_read = reader.bytes_read();
    // As many replay threads as the machine has (the reading thread mostly waits for them).
    let streamed = replay_trace(&config, &reader, threads, || {
        // Ordering: Relaxed; a progress figure.
        progress.set_position(bytes_read.load(Ordering::Relaxed));
    });
    progress.finish_and_clear();
    let (replayed, stats) = streamed?;
    report_formats(&stats.formats);
    for (name, time) in &stats.time_steps_back {
        if let Some(warning) = time.warning() {
            eprintln!("kvreuse: warning: {name}: {warning}");
        }
    }
    if stats.skipped > 0 {
        eprintln!("kvreuse: skipped {} invalid lines", stats.skipped);
    }
    if stats.records == 0 {
        eprintln!("kvreuse: warning: the trace holds no requests; every count is zero");
    }
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
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            let percent = |part: u64| {
                if r.f0_tokens == 0 {
                    "-".into()
                } else {
                    format!("{:.2}%", 100.0 * part as f64 / r.f0_tokens as f64)
                }
            };
            [
                r.policy.name().into(),
                r.capacity.map_or("inf".into(), thousands),
                r.heap_bytes.map_or("-".into(), human_bytes),
                thousands(r.f0_tokens as usize),
                thousands(r.f1_tokens as usize),
                percent(r.f1_tokens),
                percent(r.any_tokens),
                thousands(r.evictions as usize),
                r.reach_ms.map_or("-".into(), human_ms),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| cells.iter().map(|row| row[c].len()).chain([header[c].len()]).max().unwrap_or(0))
        .collect();
    let line = |out: &mut dyn Write, row: &[&str]| -> std::io::Result<()> {
        for (c, (cell, width)) in row.iter().zip(&widths).enumerate() {
            // Text left, numbers right.
            if c == 0 {
                write!(out, "{cell:<width$}")?;
            } else {
                write!(out, "  {cell:>width$}")?;
            }
        }
        writeln!(out)
    };
    line(out, &header)?;
    for row in &cells {
        line(out, &row.iter().map(String::as_str).collect::<Vec<_>>())?;
    }
    Ok(())
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1e3),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 6e4),
        _ => format!("{:.1} h", ms as f64 / 3.6e6),
    }
}

/// Says on stderr, in one line, which formats were told from the files' first bytes.
fn report_formats(formats: &[(String, Option<Format>, bool)]) {
    let mut detected: Vec<(Format, Vec<&str>)> = Vec::new();
    for (name, format, told) in formats {
        let (Some(format), true) = (format, told) else { continue };
        if name == BUNDLED_TRACE_NAME {
            continue;
        }
        match detected.iter_mut().find(|(f, _)| f == format) {
            Some((_, names)) => names.push(name),
            None => detected.push((*format, vec![name])),
        }
    }
    if detected.is_empty() {
        return;
    }
    let parts: Vec<String> = detected
        .iter()
        .map(|(format, names)| match names.as_slice() {
            [one] => format!("{format} ({one})"),
            many => format!("{format} ({} files)", many.len()),
        })
        .collect();
    eprintln!("kvreuse: formats told from the files: {}", parts.join(", "));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(human_ms(999), "999 ms");
        assert_eq!(human_ms(90_000), "1.5 min");
    }
}
