//! The `request_head` target: its checks are `sluice_fuzz::request_head` (fuzz/src/request_head.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::request_head::check(data));
