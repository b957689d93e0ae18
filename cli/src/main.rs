//! The `kvreuse` command-line tool: replay request traces, simulate fleets over them, hash
//! token blocks.
//!
//! Only the command line lives here (flags, tables, plots, progress); every number comes from
//! `kvreuse-core` through the `kvreuse` library, and every setting is checked by the shared
//! setup in `kvreuse_core::setup`, so the browser build and the Python package agree with it.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

mod fleet;
mod hash;
mod input;
mod output;
mod plot;
mod replay;
mod table;

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
    /// Simulate fleets of workers over request traces: where reuse is lost (F0-F5), per
    /// router and cache size.
    Fleet(fleet::FleetArgs),
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
            eprintln!("kvreuse: error: {}", one_line(&err.render().to_string()));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Hash(args) => hash::run(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Fleet(args) => fleet::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped reading (`kvreuse replay | head -1`) is not a failure.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the context chain joined by ": ".
            eprintln!("kvreuse: error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Clap's message in one line, like every other error: its first paragraph (up to the usage
/// line), lines joined, without its `error: ` prefix. A missing flag so reads
/// `the following required arguments were not provided: --block-size <N>`.
fn one_line(text: &str) -> String {
    let first = text.split("\n\n").next().unwrap_or_default();
    let words: Vec<&str> = first.split_whitespace().collect();
    let line = words.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}

/// Whether an error is a write to a pipe whose reader has gone.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(|e| e.io_error_kind())
                .is_some_and(|kind| kind == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_messages_become_one_line() {
        let text = "error: the following required arguments were not provided:\n  --block-size <N>\n\nUsage: kvreuse hash --block-size <N>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(text),
            "the following required arguments were not provided: --block-size <N>"
        );
        assert_eq!(
            one_line("error: unexpected argument '--bogus' found\n\n  tip: x\n"),
            "unexpected argument '--bogus' found"
        );
    }
}
