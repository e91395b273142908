//! The `uri_normalize` target: its checks are `sluice_fuzz::uri_normalize` (fuzz/src/uri_normalize.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::uri_normalize::check(data));
