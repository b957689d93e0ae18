//! # kvreuse
//!
//! What an LLM router links to measure how much of its prompt traffic was computed before.
//! The numbers themselves come from [`kvreuse_core`]; this crate adds what needs an operating
//! system.

pub use kvreuse_core as core;
