//! The `access_log` target: its checks are `sluice_fuzz::access_log` (fuzz/src/access_log.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::access_log::check(data));
