//! The `kvreuse` command-line tool: replay request traces, hash token blocks.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod hash;
mod plot;
mod replay;

/// How much of your prompt traffic was computed before.
#[derive(Debug, Parser)]
#[command(name = "kvreuse", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay request traces: prefix reuse (F1/F0) at several history sizes and policies.
    Replay(replay::ReplayArgs),
    /// Read token ids (JSON) from stdin and print their block hashes as JSON.
    Hash(hash::HashArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Hash(args) => hash::run(&args),
        Command::Replay(args) => replay::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the context chain joined by ": ".
            eprintln!("kvreuse: error: {err:#}");
            ExitCode::from(2)
        }
    }
}
