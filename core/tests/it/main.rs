//! The core's integration tests, in one binary (one link instead of one per file).

mod chain_incremental;
mod golden_vectors;
mod history_model;
mod output_chunking;
mod replay_props;
