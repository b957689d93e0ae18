//! Fuzz target `history_ops`: see `kvreuse_tests::history_ops` for the invariants it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvreuse_tests::history_ops(data));
