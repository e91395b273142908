//! The `config_json` target: its checks are `sluice_fuzz::config_json` (fuzz/src/config_json.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::config_json::check(data));
