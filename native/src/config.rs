//! Configuration: a builder for code, and [`Config::from_env`] for deployments.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `DYN_ROUTER_CACHE_REUSE_HISTORY` | on for `1`, `true`, `on`, `yes`; off for `0`, `false`, `off`, `no` or empty (case-insensitive, trimmed) | off |
//! | `DYN_ROUTER_CACHE_REUSE_HISTORY_BYTES` | the history's memory budget: bytes, or a number with a unit (`256MiB`, `1GB`; see [`parse_bytes`]) | 256 MiB |
//!
//! A value that is not understood logs one warning (through `tracing`) that names it and the
//! value used instead, and never stops the router: an unknown switch means off, a bad budget
//! means the default.

use std::collections::BTreeMap;

use kvreuse_core::setup::parse_bytes;
use tracing::warn;

/// The switch.
pub const ENV_ENABLED: &str = "DYN_ROUTER_CACHE_REUSE_HISTORY";

/// The memory budget.
pub const ENV_BYTES: &str = "DYN_ROUTER_CACHE_REUSE_HISTORY_BYTES";

/// The memory budget when none is given: 256 MiB.
pub const DEFAULT_HISTORY_BYTES: usize = 256 << 20;

/// The metric name prefix when none is given, as Dynamo's router components use.
pub const DEFAULT_METRIC_PREFIX: &str = "dynamo_component_";

/// How a [`Tracker`](crate::Tracker) is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    enabled: bool,
    history_bytes: usize,
    block_size: usize,
    eagle: bool,
    metric_prefix: String,
    const_labels: BTreeMap<String, String>,
}

impl Config {
    /// Enabled, with a 256 MiB history for blocks of `block_size` tokens (the engines' KV
    /// block size; it must match what the router hashes with).
    pub fn new(block_size: usize) -> Config {
        Config {
            enabled: true,
            history_bytes: DEFAULT_HISTORY_BYTES,
            block_size,
            eagle: false,
            metric_prefix: DEFAULT_METRIC_PREFIX.into(),
            const_labels: BTreeMap::new(),
        }
    }

    /// Switched off: no history, no metrics, guards that do nothing.
    pub fn disabled() -> Config {
        Config { enabled: false, ..Config::new(1) }
    }

    /// The switch and the budget from the environment (see the [module docs](self)); the rest
    /// as [`Config::new`].
    pub fn from_env(block_size: usize) -> Config {
        Self::from_lookup(block_size, |name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with variables read through `lookup`.
    pub fn from_lookup(block_size: usize, lookup: impl Fn(&str) -> Option<String>) -> Config {
        let enabled = switch(&lookup, ENV_ENABLED, "the cache-reuse history");
        let history_bytes = match lookup(ENV_BYTES) {
            None => DEFAULT_HISTORY_BYTES,
            Some(value) => match parse_bytes(&value).map(usize::try_from) {
                Ok(Ok(bytes)) if bytes > 0 => bytes,
                _ => {
                    warn!(
                        "{ENV_BYTES}={value:?} is not a positive byte count (like 268435456 or \
                         256MiB); using the default of 256 MiB"
                    );
                    DEFAULT_HISTORY_BYTES
                }
            },
        };
        Config { enabled, history_bytes, ..Config::new(block_size) }
    }

    /// Switches the tracker on or off.
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Sets the history's memory budget in bytes.
    pub fn with_history_bytes(mut self, bytes: usize) -> Self {
        self.history_bytes = bytes;
        self
    }

    /// Uses Eagle windows (`block_size + 1` tokens) for block hashes.
    pub fn with_eagle(mut self, eagle: bool) -> Self {
        self.eagle = eagle;
        self
    }

    /// Sets the prefix of every metric name (default `dynamo_component_`).
    pub fn with_metric_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.metric_prefix = prefix.into();
        self
    }

    /// Adds a constant label to every metric (such as `router_id`).
    pub fn with_const_label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.const_labels.insert(name.into(), value.into());
        self
    }

    /// Whether the tracker is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The history's memory budget in bytes.
    pub fn history_bytes(&self) -> usize {
        self.history_bytes
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Whether block hashes use Eagle windows.
    pub fn eagle(&self) -> bool {
        self.eagle
    }

    /// The metric name prefix.
    pub fn metric_prefix(&self) -> &str {
        &self.metric_prefix
    }

    /// The constant labels.
    pub fn const_labels(&self) -> &BTreeMap<String, String> {
        &self.const_labels
    }
}

/// Whether the switch variable `name` is on: `1|true|on|yes` (trimmed, any case); off when
/// unset, empty or `0|false|off|no`; anything else logs one warning and means off (`what` is
/// named in it).
pub(crate) fn switch(lookup: &impl Fn(&str) -> Option<String>, name: &str, what: &str) -> bool {
    let Some(value) = lookup(name) else { return false };
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => true,
        "0" | "false" | "off" | "no" | "" => false,
        _ => {
            warn!(
                "{name}={value:?} is not one of 1, true, on, yes, 0, false, off, no; {what} \
                 stays off"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_sets_everything() {
        let c = Config::new(16)
            .with_history_bytes(1 << 20)
            .with_eagle(true)
            .with_metric_prefix("x_")
            .with_const_label("router_id", "r1");
        assert!(c.enabled() && c.eagle());
        assert_eq!((c.history_bytes(), c.block_size(), c.metric_prefix()), (1 << 20, 16, "x_"));
        assert_eq!(c.const_labels()["router_id"], "r1");
        assert!(!Config::disabled().enabled());
    }
}
