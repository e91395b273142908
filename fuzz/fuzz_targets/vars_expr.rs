//! The `vars_expr` target: its checks are `sluice_fuzz::vars_expr` (fuzz/src/vars_expr.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::vars_expr::check(data));
