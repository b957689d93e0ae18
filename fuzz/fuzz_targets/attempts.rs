//! Fuzz target `attempts`: see `kvreuse_tests::attempts` for the invariants it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvreuse_tests::attempts(data));
