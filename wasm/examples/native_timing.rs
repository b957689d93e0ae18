//! The browser's replay, timed natively: the baseline of `wasm/tools/bench.mjs`.
//!
//! Runs exactly the work the JS `Replay` does (read the lines, replay them through every
//! history, build the rows) with the same Rust code, on one thread, and prints one JSON line
//! with the time of each run in milliseconds.
//!
//! ```sh
//! cargo run --release -p kvreuse-wasm --example replay_native -- \
//!     traces/mooncake_synthetic_trace.jsonl --capacity 1k,10k,inf --policy fifo,lru --reps 5
//! ```

use std::time::Instant;

use kvreuse_core::setup::{ReplaySettings, list_items};
use kvreuse_wasm::session::Session;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut trace = None;
    let mut settings = ReplaySettings::default();
    let mut reps = 5usize;
    let mut warmup_runs = 1usize;
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--capacity" => settings.set_capacities(list_items(&value()?))?,
            "--policy" => settings.set_policies(list_items(&value()?))?,
            "--block-size" => settings.trace.set_block_size(value()?.parse()?)?,
            "--warmup" => settings.trace.set_warmup_text(&value()?)?,
            "--reps" => reps = value()?.parse()?,
            "--warmup-runs" => warmup_runs = value()?.parse()?,
            _ if trace.is_none() && !arg.starts_with("--") => trace = Some(arg),
            _ => return Err(format!("unexpected argument {arg:?}").into()),
        }
    }
    let text = std::fs::read(trace.ok_or("give a trace file")?)?;
    let mut times = Vec::with_capacity(reps);
    let mut f1 = 0;
    for run in 0..warmup_runs + reps {
        let start = Instant::now();
        let mut session = Session::new(text.clone(), &settings)?;
        session.run()?;
        let rows = session.results();
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        f1 = rows.iter().map(|r| r.f1_tokens).sum::<u64>();
        if run >= warmup_runs {
            times.push(elapsed);
        }
    }
    let times: Vec<String> = times.iter().map(|t| format!("{t:.3}")).collect();
    // The checksum lets the caller confirm both sides did the same work.
    println!("{{\"ms\":[{}],\"f1_tokens_sum\":{f1}}}", times.join(","));
    Ok(())
}
