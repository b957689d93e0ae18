//! The wasm-bindgen tests, in one binary (one wasm module to link and load instead of four),
//! run in Node.js by `scripts/test-wasm`.
#![cfg(target_arch = "wasm32")]

mod block_hashes;
mod common;
mod errors;
mod fleet;
mod history;
mod replay;
