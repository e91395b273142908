//! The `request_boundaries` target: its checks are `sluice_fuzz::request_boundaries` (fuzz/src/request_boundaries.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::request_boundaries::check(data));
