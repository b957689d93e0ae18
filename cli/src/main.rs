//! The `kvreuse` command-line tool: replay request traces, hash token blocks.
//!
//! Only the command line lives here (flags, tables, plots, progress); every number comes from
//! `kvreuse-core` through the `kvreuse` library, and every setting is checked by the shared
//! setup in `kvreuse_core::setup`, so the browser build and the Python package agree with it.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::error::ErrorKind;
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version (and the help shown for a missing subcommand) print as usual.
        Err(err)
            if !err.use_stderr()
                || err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            err.exit()
        }
        Err(err) => {
            // One line, like every other error: clap's first line without its prefix.
            let text = err.render().to_string();
            let line = text.lines().next().unwrap_or_default();
            eprintln!("kvreuse: error: {}", line.strip_prefix("error: ").unwrap_or(line));
            return ExitCode::from(2);
        }
    };
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
