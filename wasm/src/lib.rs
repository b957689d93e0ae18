//! # kvreuse-wasm
//!
//! kvreuse for JavaScript: the same engine a router links natively, compiled to WebAssembly
//! with wasm-bindgen, so that a web page or a Node.js script gets the block ids and the reuse
//! figures a router would get, bit for bit.
//!
//! A KV-cache-aware router names every complete block of a prompt by a 64-bit id chained from
//! its parent's; F0 counts the prompt tokens a router sees, F1 those in leading blocks whose
//! ids were computed before. Exported:
//!
//! - [`Replay`]: a request trace (any format `kvreuse replay` reads, given whole or in chunks
//!   of files) replayed through many history sizes and policies at once, in steps a page can
//!   schedule between frames or run in a worker, with the rows `kvreuse replay --json` prints;
//! - `Fleet` (feature `fleet`): the same trace through simulated fleets of workers, with the
//!   rows `kvreuse fleet --json` prints;
//! - `blockHashes` (feature `primitives`): the ids of a token sequence under the Dynamo or a
//!   vLLM scheme (the recipes and their golden vectors are in `kvreuse-core`'s `chain`
//!   module);
//! - `History` (feature `primitives`): the router's bounded FIFO history of ids.
//!
//! Both features are on by default, with `std` for the tests. `scripts/build-wasm` builds the
//! package JS code imports with both features and the page's module with `fleet` only (it
//! runs `Replay` and `Fleet`, and every export is bytes each visitor downloads); neither links
//! the standard library (see the panic handler at the end of this file).
//!
//! ```js
//! import init, { Replay, blockHashes } from "./wasm-pkg/kvreuse_wasm.js";  // the package
//! await init();
//! const replay = new Replay(traceText, { capacities: "1k,10k,inf", policies: "fifo,lru" });
//! while (!replay.step(4096)) showProgress(replay.progress);
//! console.table(replay.results());
//! const { sequenceHashes } = blockHashes(new Uint32Array(tokens), { blockSize: 16 });
//! ```
//!
//! # Conventions at the boundary
//!
//! - Ids are `u64` and cross as `BigInt`s, in `BigUint64Array`s or arrays of `BigInt`s;
//!   never as floating-point numbers, which would round them. Token ids are `Uint32Array`s
//!   or arrays of integers.
//! - Counts and sizes are plain numbers; a count beyond 2^53 - 1, which a number cannot hold
//!   exactly, is an error rather than a rounded figure.
//! - Bad input throws: a `TypeError` when a value has the wrong type or shape (a malformed
//!   trace line among them: `line 12: ...`, with the number also in the error's `line`
//!   property), a `RangeError` when a value is out of range (a zero block size, a warm-up of
//!   1.5). Nothing panics on input.
//! - The generated `kvreuse_wasm.d.ts` types all of this.
//!
//! The [`input`], [`session`] and [`footprint`] modules hold the logic in plain Rust, so that
//! the host tests and the native timing example run exactly the code the browser runs (but
//! for what a panic does, which nothing on input causes).

#![forbid(unsafe_code)]
#![no_std]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod footprint;
pub mod input;
pub mod session;

#[cfg(feature = "fleet")]
mod fleet;
#[cfg(feature = "primitives")]
mod hash;
#[cfg(feature = "primitives")]
mod history;
mod js;
mod options;
mod replay;
mod stepped;

#[cfg(feature = "fleet")]
pub use fleet::Fleet;
#[cfg(feature = "primitives")]
pub use hash::block_hashes;
#[cfg(feature = "primitives")]
pub use history::History;
pub use replay::Replay;

/// The allocator in WebAssembly: talc instead of the standard library's dlmalloc, about 7 kB
/// less of the module (measured with `scripts/build-wasm`) and faster at the many small
/// allocations of a trace's requests. Single-threaded, as this module is.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
#[global_allocator]
static TALC: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

/// Without the standard library (the page's and the package's builds), a panic traps at
/// once. With it, the panic would format its message for a hook that has nowhere to write on
/// `wasm32-unknown-unknown` and then trap the same way: the module is about 1.8 kB smaller
/// without that machinery, and JS sees the same `RuntimeError`. Nothing panics on input.
#[cfg(all(target_arch = "wasm32", not(feature = "std")))]
#[panic_handler]
fn trap(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}
