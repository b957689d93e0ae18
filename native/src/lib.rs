//! # kvreuse
//!
//! What an LLM router links to measure how much of its prompt traffic was computed before.
//! The numbers themselves come from [`kvreuse_core`] (re-exported as [`core`]); this crate adds
//! what needs an operating system: a history shared between threads ([`SharedHistory`]).

pub use kvreuse_core as core;

pub mod history;

pub use history::SharedHistory;
pub use kvreuse_core::history::{HistoryError, Inserted};
