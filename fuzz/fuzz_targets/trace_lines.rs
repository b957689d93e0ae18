//! Fuzz target `trace_lines`: see `kvreuse_tests::trace_lines` for the invariants it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvreuse_tests::trace_lines(data));
