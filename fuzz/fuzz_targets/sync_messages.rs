//! Fuzz target `sync_messages`: see `kvreuse_tests::sync_messages` for the invariants it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvreuse_tests::sync_messages(data));
