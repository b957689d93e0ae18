//! Fuzz target `fleet`: see `kvreuse_tests::fleet` for the invariants it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvreuse_tests::fleet(data));
