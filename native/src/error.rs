//! The crate's error type.

use kvreuse_core::chain::ChainError;
use kvreuse_core::history::HistoryError;

/// What can go wrong setting up or running kvreuse in a router.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The history could not be built (budget, capacity, memory).
    #[error("history: {0}")]
    History(#[from] HistoryError),
    /// The block-hash settings are invalid.
    #[error("block hashes: {0}")]
    Chain(#[from] ChainError),
    /// The metrics could not be registered (for example, registered twice in one registry).
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
