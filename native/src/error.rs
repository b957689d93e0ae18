//! The crate's error type.

use std::path::PathBuf;

use kvreuse_core::chain::ChainError;
use kvreuse_core::history::HistoryError;
use kvreuse_core::snapshot::SnapshotError;

/// What can go wrong setting up or running kvreuse in a router. Each message is complete on
/// its own (the underlying error is part of it, not a separate `source`), so printing an
/// error chain never repeats it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The history could not be built (budget, capacity, memory).
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The block-hash settings are invalid.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The metrics could not be registered (for example, registered twice in one registry).
    #[error("metrics: {0}")]
    Metrics(prometheus::Error),
    /// A file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        error: std::io::Error,
    },
    /// A snapshot file is not valid; nothing was loaded from it.
    #[error("{}: {error}", path.display())]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        error: SnapshotError,
    },
    /// A snapshot holds the ids of another domain (model, block size, Eagle or scheme).
    #[error(
        "{}: the snapshot is for domain {found:#018x}, not this router's {expected:#018x}",
        path.display()
    )]
    ForeignSnapshot {
        /// The file.
        path: PathBuf,
        /// The domain digest asked for.
        expected: u64,
        /// The domain digest in the file.
        found: u64,
    },
    /// Replica sync could not start.
    #[cfg(feature = "nats")]
    #[error("replica sync: {0}")]
    Sync(#[from] crate::sync::ReplicaSyncError),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<prometheus::Error> for Error {
    fn from(error: prometheus::Error) -> Self {
        Error::Metrics(error)
    }
}
