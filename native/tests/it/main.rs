//! The library's integration tests, in one binary (one link instead of one per file). Replica
//! sync against real NATS servers runs apart, in `sync_nats.rs`.

mod config_env;
mod guards;
mod router_example;
mod shared_history_threads;
mod snapshots;
