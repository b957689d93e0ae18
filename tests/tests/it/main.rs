//! Cross-crate properties and the fuzz crashers, in one binary. The resident-memory test
//! measures its own process, so it runs apart (`resident_memory.rs`).

mod fuzz_crashers;
mod properties;
