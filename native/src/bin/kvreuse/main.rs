//! The `kvreuse` command-line tool: hash token blocks, replay request traces.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod hash;

/// How much of your prompt traffic was computed before.
#[derive(Debug, Parser)]
#[command(name = "kvreuse", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read token ids (JSON) from stdin and print their block hashes as JSON.
    Hash(hash::HashArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Hash(args) => hash::run(&args),
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
