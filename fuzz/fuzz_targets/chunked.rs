//! The `chunked` target: its checks are `sluice_fuzz::chunked` (fuzz/src/chunked.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::chunked::check(data));
