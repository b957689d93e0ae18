//! The command-line tool end to end, in one binary (one link instead of one per file).

mod bad_inputs;
mod fleet;
mod formats;
mod hash;
mod replay;
