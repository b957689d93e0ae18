//! A replay streams: 512 MiB of trace (gzip, generated while writing it, never held) replays in
//! a process whose peak resident memory stays under 256 MiB, because nothing is kept per
//! request. The trace's requests all share one block id, so the histories themselves are
//! tiny: what is measured is the reading, parsing and replaying pipeline.
//!
//! Its own test binary: it measures its own process. Skipped under an emulator (qemu), where
//! memory and time figures mean little.

use std::io::{BufWriter, Write};
use std::time::Instant;

use kvreuse::core::replay::{Policy, ReplayConfig};
use kvreuse::core::setup::TraceSettings;
use kvreuse::replay::replay_trace;
use kvreuse::trace::{Source, TraceReader};

const TRACE_BYTES: u64 = 512 << 20;
const RSS_LIMIT: u64 = 256 << 20;

/// The process's peak resident set size, in bytes (Linux).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number");
    kib << 10
}

#[test]
fn half_a_gigabyte_of_trace_replays_in_bounded_memory() {
    if std::env::var_os("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER").is_some() {
        eprintln!("skipped under an emulator");
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl.gz");
    let file = std::fs::File::create(&path).unwrap();
    let mut gz = flate2::write::GzEncoder::new(BufWriter::new(file), flate2::Compression::fast());
    let (mut written, mut records) = (0u64, 0u64);
    let mut line = String::new();
    while written < TRACE_BYTES {
        use std::fmt::Write as _;
        line.clear();
        writeln!(
            line,
            r#"{{"timestamp": {records}, "input_length": 500, "output_length": 9, "hash_ids": [7]}}"#
        )
        .unwrap();
        gz.write_all(line.as_bytes()).unwrap();
        written += line.len() as u64;
        records += 1;
    }
    gz.finish().unwrap().flush().unwrap();
    let generated = started.elapsed();

    let config = ReplayConfig::grid(512, &[Policy::Fifo, Policy::Lru], &[Some(1000), None]);
    let reader = TraceReader::new(vec![Source::Path(path)], &TraceSettings::default(), 2).unwrap();
    let (replayed, stats) = replay_trace(&config, &reader, 2, || {}).unwrap();
    assert_eq!(stats.records, records);
    for row in &replayed.rows {
        assert_eq!(row.f0_tokens, 500 * records);
        // Every request after the first finds the one block.
        assert_eq!(row.f1_tokens, 500 * (records - 1));
    }
    let rss = peak_rss();
    eprintln!(
        "{records} requests, {} MiB of trace: generated in {generated:.1?}, replayed in {:.1?}, \
         peak RSS {} MiB (limit {} MiB)",
        written >> 20,
        started.elapsed() - generated,
        rss >> 20,
        RSS_LIMIT >> 20
    );
    assert!(rss < RSS_LIMIT, "peak RSS {rss} bytes");
}
