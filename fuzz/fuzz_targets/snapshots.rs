//! Fuzz target `snapshots`: see `kvreuse_tests::snapshots` for the invariants it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvreuse_tests::snapshots(data));
