//! The `h2_frames` target: its checks are `sluice_fuzz::h2_frames` (fuzz/src/h2_frames.rs), shared with the
//! seed tests that run on stable (crates/sluice/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::h2_frames::check(data));
