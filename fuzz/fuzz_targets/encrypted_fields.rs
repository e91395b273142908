//! The `encrypted_fields` target: its checks are `sluice_fuzz::encrypted_fields` (fuzz/src/encrypted_fields.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::encrypted_fields::check(data));
