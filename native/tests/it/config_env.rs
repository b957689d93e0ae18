//! Every environment case of the configuration: the value it yields and the exact warning (or
//! none) it logs.

use std::collections::HashMap;

use kvreuse::Config;
use kvreuse::config::{DEFAULT_HISTORY_BYTES, ENV_BYTES, ENV_ENABLED};
use kvreuse_tests::support::Captured;

/// The config from these variables, and the warnings logged while building it.
fn from_vars(vars: &[(&str, &str)]) -> (Config, Vec<String>) {
    let vars: HashMap<String, String> =
        vars.iter().map(|&(k, v)| (k.to_string(), v.to_string())).collect();
    let captured = Captured::default();
    let config = tracing::subscriber::with_default(captured.subscriber(), || {
        Config::from_lookup(16, |name| vars.get(name).cloned())
    });
    (config, captured.text().lines().map(str::to_string).collect())
}

#[test]
fn the_switch() {
    for value in ["1", "true", "on", "yes", "TRUE", " Yes ", "On\n", "\tyes"] {
        let (config, warnings) = from_vars(&[(ENV_ENABLED, value)]);
        assert!(config.enabled(), "{value:?}");
        assert!(warnings.is_empty(), "{value:?}: {warnings:?}");
    }
    for value in ["0", "false", "off", "no", "", "  ", "FALSE", " Off "] {
        let (config, warnings) = from_vars(&[(ENV_ENABLED, value)]);
        assert!(!config.enabled(), "{value:?}");
        assert!(warnings.is_empty(), "{value:?}: {warnings:?}");
    }
    let (config, warnings) = from_vars(&[]);
    assert!(!config.enabled() && warnings.is_empty(), "unset means off, silently");
    for value in ["2", "enabled", "y", "tru", "on on", "-1"] {
        let (config, warnings) = from_vars(&[(ENV_ENABLED, value)]);
        assert!(!config.enabled(), "{value:?}");
        assert_eq!(
            warnings,
            [format!(
                " WARN {ENV_ENABLED}={value:?} is not one of 1, true, on, yes, 0, false, off, \
                 no; the cache-reuse history stays off"
            )],
            "{value:?}"
        );
    }
}

#[test]
fn the_budget() {
    let on = (ENV_ENABLED, "1");
    let (config, warnings) = from_vars(&[on]);
    assert_eq!(config.history_bytes(), DEFAULT_HISTORY_BYTES);
    assert_eq!(DEFAULT_HISTORY_BYTES, 256 << 20);
    assert!(warnings.is_empty());
    for (value, bytes) in [
        ("1", 1),
        ("268435456", 268_435_456),
        ("64KiB", 64 << 10),
        ("64 kib", 64 << 10),
        (" 512MiB ", 512 << 20),
        ("2GiB", 2 << 30),
        ("3gib", 3 << 30),
        // The unit syntax every size shares (`kvreuse_core::setup::parse_quantity`).
        ("12MB", 12_000_000),
        ("12 TiB", 12 << 40),
        ("5k", 5_000),
    ] {
        let (config, warnings) = from_vars(&[on, (ENV_BYTES, value)]);
        assert_eq!(config.history_bytes(), bytes, "{value:?}");
        assert!(warnings.is_empty(), "{value:?}: {warnings:?}");
    }
    for value in [
        "0",
        "0MiB",
        "-1",
        "-5MiB",
        "",
        "lots",
        "1.5GiB",
        "12XB",
        "1e9",
        "99999999999999999999999",
        "18446744073709551615GiB",
        "0x100",
    ] {
        let (config, warnings) = from_vars(&[on, (ENV_BYTES, value)]);
        assert_eq!(config.history_bytes(), DEFAULT_HISTORY_BYTES, "{value:?}");
        assert_eq!(
            warnings,
            [format!(
                " WARN {ENV_BYTES}={value:?} is not a positive byte count (like 268435456 or \
                 256MiB); using the default of 256 MiB"
            )],
            "{value:?}"
        );
    }
}

#[test]
fn switched_off_allocates_and_registers_nothing() {
    let registry = prometheus::Registry::new();
    let (config, _) = from_vars(&[(ENV_ENABLED, "off"), (ENV_BYTES, "1GiB")]);
    let tracker = kvreuse::Tracker::new(&config, &registry).unwrap();
    assert!(!tracker.is_enabled() && tracker.history().is_none());
    assert!(registry.gather().is_empty());
    let mut guard = tracker.begin(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]);
    guard.observe_output(0, &[1, 2, 3]);
    assert!(!guard.is_active());
    assert_eq!(guard.seen_tokens(), 0);
    guard.complete();
    assert!(registry.gather().is_empty());
}
