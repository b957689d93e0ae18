//! # kvreuse
//!
//! What an LLM router links to measure how much of its prompt traffic was computed before,
//! and where that reuse is lost: per router, **F0** (prompt tokens seen) and **F1** (prompt
//! tokens in leading blocks whose ids had been computed before), and from the route and the
//! worker's report the rest of the cache-loss funnel (**F2**-**F5**, and the losses between
//! them: cold, retention, routing, race, retrieval), as Prometheus metrics.
//!
//! ```
//! use kvreuse::{Config, Tracker};
//!
//! let registry = prometheus::Registry::new();
//! let tracker = Tracker::new(&Config::new(16).with_history_bytes(1 << 20), &registry)?;
//! let prompt: Vec<u32> = (0..40).collect();
//! for _ in 0..2 {
//!     let mut guard = tracker.begin(&prompt);
//!     guard.observe_output(0, &[7, 8, 9]);
//!     guard.complete();
//! }
//! // The second request found the first one's two complete blocks: F1 = 32 tokens.
//! # let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
//! # assert!(text.contains("dynamo_component_router_kv_history_cached_prefix_tokens_total 32"));
//! # Ok::<(), kvreuse::Error>(())
//! ```
//!
//! The numbers themselves come from [`kvreuse_core`] (re-exported as [`core`]); this crate adds
//! what needs an operating system: a history shared between threads ([`SharedHistory`]), the
//! request guards ([`Tracker`], [`RequestGuard`]), metrics, configuration ([`Config`]),
//! trace files ([`trace`]), snapshots ([`SharedHistory::save`]) and replica sync (`sync`).
//!
//! ## Feature flags
//!
//! - `nats` (default): replica sync over NATS (the `sync` module; async-nats and tokio).
//!   Without it the crate has no async runtime dependency.

// Only the huge-page mapping of the history's arrays (`history/pages.rs`) needs `unsafe`; it
// allows it there, with a `SAFETY` note on every block.
#![deny(unsafe_code)]

pub use kvreuse_core as core;

pub mod config;
mod error;
pub mod fleet;
pub mod history;
mod metrics;
pub mod replay;
mod stream;
#[cfg(feature = "nats")]
pub mod sync;
pub mod trace;
pub mod tracker;

pub use config::Config;
pub use error::{Error, Result};
pub use history::SharedHistory;
pub use kvreuse_core::history::{HistoryError, Inserted};
pub use kvreuse_core::report::{ReportError, Route, WorkerReport};
#[cfg(feature = "nats")]
pub use sync::{ReplicaSync, ReplicaSyncConfig, ReplicaSyncError};
pub use tracker::{RequestGuard, Tracker};
