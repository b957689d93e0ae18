//! Fuzz target `chains`: see `kvreuse_tests::chains` for the invariants it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvreuse_tests::chains(data));
