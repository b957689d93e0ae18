//! The atomics, fence and `Arc` the lock-free history is built on.
//!
//! Under `--cfg kvreuse_loom` they are loom's, so the loom models in
//! `history/loom_models.rs` explore every interleaving and weak-memory outcome of the real
//! code rather than of a copy of it.

#[cfg(not(kvreuse_loom))]
pub(crate) use alloc::sync::Arc;
#[cfg(not(kvreuse_loom))]
pub use core::sync::atomic::AtomicU64;
#[cfg(not(kvreuse_loom))]
pub(crate) use core::sync::atomic::{Ordering, fence};

#[cfg(kvreuse_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(kvreuse_loom)]
pub use loom::sync::atomic::AtomicU64;
#[cfg(kvreuse_loom)]
pub(crate) use loom::sync::atomic::{Ordering, fence};
