//! The `proxy_protocol` target: its checks are `sluice_fuzz::proxy_protocol` (fuzz/src/proxy_protocol.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::proxy_protocol::check(data));
