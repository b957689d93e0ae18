//! # kvreuse-core
//!
//! The part of kvreuse that computes numbers. A KV-cache-aware router cuts each prompt into
//! fixed-size token blocks and names every complete block by a 64-bit id that chains its
//! parent's id, so equal ids mean equal prefixes. This crate:
//!
//! - turns tokens into those ids ([`chain`]) exactly as NVIDIA Dynamo's router and vLLM's
//!   prefix cache do, and tracks the blocks generated tokens add ([`output`]);
//! - keeps a bounded, first-in first-out history of ids ([`history`]), compact and fast
//!   enough to sit on a router's request path;
//! - accounts each request exactly once ([`attempt`]): F0, the prompt tokens seen, and F1,
//!   the prompt tokens in leading blocks computed before;
//! - replays request traces ([`trace`], [`replay`]) through many history sizes and policies
//!   in one pass, for capacity planning, streaming: records are read with a small JSON pull
//!   reader of its own ([`json`]) as lines arrive, and nothing is kept per request;
//! - parses and checks the settings of a run once for every front end ([`setup`]): sizes
//!   with units, lists, and one wording for every mistake;
//! - defines the bytes replicas exchange ([`message`]) and the snapshot file format
//!   ([`snapshot`]), so that the native crate only moves them.
//!
//! Everything here is free of I/O and of `std`: the command-line tool, a router linking the
//! native crate and the browser build all run this same code, so they give identical answers
//! by construction.
//!
//! # Feature flags
//!
//! None. The crate is always `#![no_std]` and needs only `alloc`; the conveniences that need
//! an operating system (threads, files, the network) live in the native `kvreuse` crate.
#![no_std]
// Only three things need `unsafe`: the prefetch hint (`prefetch.rs`), the SSE2 tests of a
// bucket's words (`history/word_masks.rs`), and the promise that a bucket number the codec made
// is in range (`Tables::in_range` in `history/table.rs`). Each allows it where it is, with a
// `SAFETY` note on every block.
#![deny(unsafe_code)]

extern crate alloc;

pub mod attempt;
pub mod chain;
pub mod fleet;
pub mod funnel;
pub mod history;
pub mod json;
pub mod message;
pub mod names;
pub mod number;
pub mod output;
pub mod replay;
pub mod report;
pub mod setup;
pub mod snapshot;
pub mod trace;

mod bits;
mod prefetch;
mod sort;
mod sync;
#[cfg(test)]
mod test_rng;
