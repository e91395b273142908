//! The `router_linear` target: its checks are `sluice_fuzz::router_linear` (fuzz/src/router_linear.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::router_linear::check(data));
