//! Writes a synthetic Mooncake trace to stdout, for measuring memory and speed on traces far
//! larger than any bundled one (`scripts/bench-memory`). Deterministic for given arguments.
//!
//! ```sh
//! cargo run --release -p kvreuse-benches --example synthetic_trace -- 10000000 2000000 > big.jsonl
//! ```
//!
//! Arguments: the number of requests, and the size of the universe the block ids are drawn
//! from (ids `0..universe`). Each request has 1 to 32 blocks of 512 tokens (the last one
//! partial); half the requests continue an earlier request's ids for a while (prefixes are
//! shared, as in real traffic), the rest draw every id afresh. Timestamps grow by 0 to 9 ms.

use std::io::{BufWriter, Write};

use kvreuse_benches::SplitMix64;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().expect("a whole number"));
    let requests = args.next().unwrap_or(10_000_000);
    let universe = args.next().unwrap_or(2_000_000).max(1);
    let mut rng = SplitMix64::new(0x5eed);
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let mut previous: Vec<u64> = Vec::new();
    let mut ids: Vec<u64> = Vec::new();
    let mut time = 0u64;
    let mut line = String::new();
    for _ in 0..requests {
        let blocks = 1 + rng.next_u64() % 32;
        ids.clear();
        if rng.next_u64().is_multiple_of(2) {
            let shared = (rng.next_u64() % (previous.len() as u64 + 1)).min(blocks);
            ids.extend_from_slice(&previous[..shared as usize]);
        }
        while (ids.len() as u64) < blocks {
            ids.push(rng.next_u64() % universe);
        }
        let input = blocks * 512 - rng.next_u64() % 512;
        time += rng.next_u64() % 10;
        line.clear();
        use std::fmt::Write as _;
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        let _ = write!(
            line,
            r#"{{"timestamp": {time}, "input_length": {input}, "output_length": {}, "hash_ids": [{}]}}"#,
            rng.next_u64() % 1000,
            list.join(", ")
        );
        line.push('\n');
        out.write_all(line.as_bytes())?;
        std::mem::swap(&mut previous, &mut ids);
    }
    out.flush()
}
