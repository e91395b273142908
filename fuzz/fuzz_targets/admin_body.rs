//! The `admin_body` target: its checks are `sluice_fuzz::admin_body` (fuzz/src/admin_body.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::admin_body::check(data));
