//! Reading traces: kvreuse's JSON reader against `serde_json`, and the whole streaming replay,
//! in bytes of trace per second, measured in the same run.
//!
//! The input is the bundled Mooncake trace (1.1 MB, 3,993 records, held in memory so that no
//! disk is timed). Rows:
//!
//! - `serde_json, every line` (the baseline): each line read into the record's fields by a
//!   `serde` derive, as kvreuse did before its own reader;
//! - `kvreuse parse_line, every line`: the same lines through `kvreuse_core::trace::parse_line`
//!   (the same records: checked before timing);
//! - `kvreuse reader, 1 thread`: cutting the text into lines and parsing them, as a replay
//!   reads a file;
//! - `kvreuse replay, whole`: reading, parsing and replaying FIFO and LRU at four capacities
//!   with a 50% warm-up (the peer comparison's work), on the machine's threads.
//!
//! `cargo bench -p kvreuse-benches --bench trace`, then `python3 scripts/criterion_table.py`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kvreuse::core::chain::DynamoHasher;
use kvreuse::core::replay::{Policy, ReplayConfig};
use kvreuse::core::setup::TraceSettings;
use kvreuse::core::trace::lines::numbered;
use kvreuse::core::trace::{Request, parse_line};
use kvreuse::replay::replay_trace;
use kvreuse::trace::{BUNDLED_TRACE, Source, TraceReader, default_threads};

const BLOCK: usize = 512;

/// A Mooncake record as a `serde` derive reads it.
#[derive(serde::Deserialize)]
struct Record {
    timestamp: Option<u64>,
    input_length: u64,
    output_length: Option<u64>,
    hash_ids: Vec<u64>,
}

fn serde_lines(text: &[u8]) -> Vec<Request> {
    numbered(1, text)
        .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
        .map(|(_, line)| {
            let r: Record = serde_json::from_slice(line).expect("a Mooncake record");
            Request {
                timestamp: r.timestamp,
                prompt_tokens: r.input_length,
                prompt_ids: r.hash_ids,
                output_tokens: r.output_length.unwrap_or(0),
                ..Request::default()
            }
        })
        .collect()
}

fn kvreuse_lines(text: &[u8], hasher: &DynamoHasher) -> Vec<Request> {
    numbered(1, text).filter_map(|(_, line)| parse_line(line, hasher).expect("valid")).collect()
}

fn trace(c: &mut Criterion) {
    eprintln!("{}", kvreuse_benches::machine());
    let hasher = DynamoHasher::new(BLOCK).unwrap();
    let settings = TraceSettings::default();
    assert_eq!(kvreuse_lines(BUNDLED_TRACE, &hasher), serde_lines(BUNDLED_TRACE), "same records");
    let mut group = c.benchmark_group("trace/mooncake_synthetic_1.1MB");
    group.throughput(Throughput::Bytes(BUNDLED_TRACE.len() as u64));
    group.sample_size(20);
    group.bench_function("serde_json, every line", |b| {
        b.iter(|| serde_lines(black_box(BUNDLED_TRACE)));
    });
    group.bench_function("kvreuse parse_line, every line", |b| {
        b.iter(|| kvreuse_lines(black_box(BUNDLED_TRACE), &hasher));
    });
    group.bench_function("kvreuse reader, 1 thread", |b| {
        b.iter(|| {
            let reader = TraceReader::new(vec![Source::Bundled], &settings, 1).unwrap();
            let mut records = 0;
            reader
                .read(|batch| {
                    records += batch.len();
                    Ok::<(), kvreuse::trace::TraceFileError>(())
                })
                .unwrap();
            records
        });
    });
    group.finish();

    // Its own group: nothing to compare it with in this run.
    let mut group = c.benchmark_group("replay/mooncake_synthetic_1.1MB_whole");
    group.throughput(Throughput::Bytes(BUNDLED_TRACE.len() as u64));
    group.sample_size(20);
    let capacities = [Some(1000), Some(10_000), Some(20_000), Some(30_000)];
    let mut config = ReplayConfig::grid(BLOCK, &[Policy::Fifo, Policy::Lru], &capacities);
    config.measure_from = 3993 / 2;
    group.bench_function("kvreuse: read, parse, replay fifo+lru x 4 capacities", |b| {
        b.iter(|| {
            let reader =
                TraceReader::new(vec![Source::Bundled], &settings, default_threads()).unwrap();
            replay_trace(&config, &reader, default_threads(), || {}).unwrap()
        });
    });
    group.finish();
}

criterion_group!(benches, trace);
criterion_main!(benches);
