//! The `etcd_value` target: its checks are `sluice_fuzz::etcd_value` (fuzz/src/etcd_value.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::etcd_value::check(data));
