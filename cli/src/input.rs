//! What `kvreuse replay` and `kvreuse fleet` share about their input: the trace's sources and
//! reader, the warm-up's place, a progress bar, and what is said on stderr about the reading.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use kvreuse::core::setup::{TraceSettings, Warmup};
use kvreuse::core::trace::Format;
use kvreuse::trace::{self, BUNDLED_TRACE_NAME, ReadStats, Source, TraceReader};

/// A trace ready to read.
pub(crate) struct Input {
    pub(crate) reader: TraceReader,
    /// The first counted request (once [`start`](Self::start)ed).
    pub(crate) measure_from: u64,
    /// Threads for the engines.
    pub(crate) threads: usize,
    progress: ProgressBar,
    bytes_read: Arc<AtomicU64>,
    bundled: bool,
    /// A stagger was asked for (it applies to kv-cache-tester documents only).
    staggered: bool,
}

impl Input {
    /// Opens `traces` (the bundled trace when empty), settling `settings` with the first
    /// file's format (its block size, unless one is given).
    pub(crate) fn open(traces: &[PathBuf], settings: &mut TraceSettings) -> Result<Input> {
        let sources = Source::from_args(traces)?;
        let threads = trace::default_threads();
        let reader = TraceReader::open(sources.clone(), settings, threads)?;
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
        let bundled = traces.is_empty();
        let staggered = settings.stagger_ms > 0;
        Ok(Input { reader, measure_from: 0, threads, progress, bytes_read, bundled, staggered })
    }

    /// Once the settings are known to be good: says on stderr when the bundled trace is used
    /// (`doing` says what is done with it, as "replaying"), and places the warm-up, counting
    /// the records first when it is a share of them.
    pub(crate) fn start(&mut self, warmup: Warmup, doing: &str) -> Result<()> {
        if self.bundled {
            eprintln!(
                "kvreuse: {doing} the {BUNDLED_TRACE_NAME} (FAST'25, Apache-2.0; see traces/NOTICE)"
            );
        }
        self.measure_from = match warmup.measure_from(None) {
            Some(n) => n,
            None => warmup.measure_from(Some(self.reader.count_records()?)).unwrap_or(0),
        };
        Ok(())
    }

    /// Moves the progress bar to what has been read (call after each batch).
    pub(crate) fn tick(&self) {
        // Ordering: Relaxed; a progress figure.
        self.progress.set_position(self.bytes_read.load(Ordering::Relaxed));
    }

    /// Clears the progress bar and says on stderr what the reading found: the formats told
    /// from the files, timestamps going back, skipped lines, an empty trace, a warm-up that
    /// took every request, a stagger that had no documents to stagger.
    pub(crate) fn done(&self, stats: &ReadStats) {
        self.progress.finish_and_clear();
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
        } else if self.measure_from >= stats.records {
            eprintln!(
                "kvreuse: warning: the warm-up takes all {} requests; every count is zero",
                stats.records
            );
        }
        let documents = stats.formats.iter().any(|(_, f, _)| *f == Some(Format::KvcacheTester));
        if self.staggered && !documents {
            eprintln!(
                "kvreuse: warning: --stagger spaces kv-cache-tester documents' starts; the trace \
                 has none, so it changed nothing"
            );
        }
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
