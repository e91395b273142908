//! The `response_framing` target: its checks are `sluice_fuzz::response_framing` (fuzz/src/response_framing.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::response_framing::check(data));
