//! # kvreuse-tests
//!
//! Invariant checks, one per input surface, each a function of raw bytes that panics when an
//! invariant breaks. The fuzz targets in `fuzz/` call them with what libFuzzer generates (under
//! AddressSanitizer); `tests/it/fuzz_crashers.rs` calls them with every input committed under
//! `tests/fuzz-crashers/<target>/`, so a crash found once stays fixed. Each check compares the
//! real code with a simple model, not only "does not crash":
//!
//! | target | surface | model |
//! |---|---|---|
//! | [`history_ops`] | `History` operation sequences | `VecDeque` + linear scan |
//! | [`chains`] | Dynamo and vLLM chains, any options | one-shot hash vs arbitrary splits |
//! | [`attempts`] | request guards: begin, output, complete, incomplete, drop | exactly-once counts, a FIFO that learns only completions, output blocks recomputed |
//! | [`trace_lines`] | trace files: lines cut from chunks, records parsed, time checked | one split of the whole, re-encoding round trip, block arithmetic, a plain count of steps back |
//! | [`sync_messages`] | replica message decoding | exact re-encoding, size classes |
//! | [`snapshots`] | snapshot decoding | exact re-encoding, checksum |
//! | [`fleet`] | fleet simulation: any trace, fleet, router, timing | per-token conservation; a plain LRU block cache; round-robin workers as fleets of one |
//!
//! [`support`] holds what the other crates' integration tests share: reading metrics back,
//! capturing logs, starting a binary built for the test's target.

mod attempts;
mod chains;
mod fleet;
mod history_ops;
mod records;
pub mod support;

pub use attempts::attempts;
pub use chains::chains;
pub use fleet::fleet;
pub use history_ops::{history_ops, large_capacity};
pub use records::{snapshots, sync_messages, trace_lines};

/// A check: panics when an invariant breaks on the given input.
pub type Check = fn(&[u8]);

/// Every check, by the fuzz target's name.
pub const TARGETS: [(&str, Check); 7] = [
    ("history_ops", history_ops),
    ("chains", chains),
    ("attempts", attempts),
    ("trace_lines", trace_lines),
    ("sync_messages", sync_messages),
    ("snapshots", snapshots),
    ("fleet", fleet),
];
