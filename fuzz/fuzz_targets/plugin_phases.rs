//! The `plugin_phases` target: its checks are `sluice_fuzz::plugin_phases` (fuzz/src/plugin_phases.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::plugin_phases::check(data));
