//! The browser's runs, timed natively: the baseline of `wasm/tools/bench.mjs`.
//!
//! Runs exactly the work the JS `Replay` or `Fleet` does (read the text, run the requests
//! through every history or fleet, build the rows) with the same Rust code, on one thread,
//! and prints one JSON line with the time of each run in milliseconds and a checksum (the sum
//! of the rows' F1 tokens for a replay, of their F5 tokens for fleets).
//!
//! ```sh
//! cargo run --release -p kvreuse-wasm --example native_timing -- \
//!     traces/mooncake_synthetic_trace.jsonl --capacity 1k,10k,inf --policy fifo,lru --reps 5
//! cargo run --release -p kvreuse-wasm --example native_timing -- --engine fleet \
//!     traces/mooncake_synthetic_trace.jsonl --workers 4,8 --worker-capacity 2k,10k --reps 5
//! ```
//!
//! Every flag of `kvreuse replay` or `kvreuse fleet` that takes a value is read by the shared
//! setup, as the command line and the JS options are.

use std::time::Instant;

use kvreuse_core::setup::{FleetSettings, ReplaySettings, Setting};
use kvreuse_wasm::session::{FleetSession, ReplaySession};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut trace = None;
    let mut fleet = false;
    let mut flags = Vec::new();
    let mut reps = 5usize;
    let mut warmup_runs = 1usize;
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--engine" => fleet = value()? == "fleet",
            "--reps" => reps = value()?.parse()?,
            "--warmup-runs" => warmup_runs = value()?.parse()?,
            flag if flag.starts_with("--") => {
                let setting = Setting::ALL
                    .into_iter()
                    .find(|s| s.flag() == flag)
                    .ok_or_else(|| format!("unexpected argument {arg:?}"))?;
                flags.push((setting, value()?));
            }
            _ if trace.is_none() => trace = Some(arg),
            _ => return Err(format!("unexpected argument {arg:?}").into()),
        }
    }
    let text = std::fs::read(trace.ok_or("give a trace file")?)?;
    let run: Box<dyn Fn() -> Result<u64, Box<dyn std::error::Error>>> = if fleet {
        let mut settings = FleetSettings::default();
        for (setting, value) in &flags {
            settings.set(*setting, value)?;
        }
        Box::new(move || {
            let mut session = FleetSession::new(text.clone(), &settings)?;
            session.run()?;
            Ok(session.results().iter().map(|r| r.funnel.f5).sum())
        })
    } else {
        let mut settings = ReplaySettings::default();
        for (setting, value) in &flags {
            settings.set(*setting, value)?;
        }
        Box::new(move || {
            let mut session = ReplaySession::new(text.clone(), &settings)?;
            session.run()?;
            Ok(session.results().iter().map(|r| r.f1_tokens).sum())
        })
    };
    let mut times = Vec::with_capacity(reps);
    let mut checksum = 0;
    for round in 0..warmup_runs + reps {
        let start = Instant::now();
        checksum = run()?;
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        if round >= warmup_runs {
            times.push(elapsed);
        }
    }
    let times: Vec<String> = times.iter().map(|t| format!("{t:.3}")).collect();
    // The checksum lets the caller confirm both sides did the same work.
    println!("{{\"ms\":[{}],\"checksum\":{checksum}}}", times.join(","));
    Ok(())
}
