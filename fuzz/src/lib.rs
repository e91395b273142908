//! Sluice's fuzz targets' checks, one module per target: `check(data)` panics when a property
//! fails. The cargo-fuzz targets in `fuzz_targets/` call them under libFuzzer (nightly); the
//! seed tests (`crates/sluice/tests/fuzz_seeds.rs`) call them on every seed in
//! `fuzz/corpus/<target>/` and on mutations of the seeds, with stable Rust, in the README's
//! test command. See docs/fuzzing.md.

pub mod access_log;
pub mod admin_body;
pub mod chunked;
pub mod config_json;
pub mod config_yaml;
pub mod encrypted_fields;
pub mod etcd_value;
pub mod h2_frames;
pub mod plugin_phases;
pub mod proxy_protocol;
pub mod request_boundaries;
pub mod request_head;
pub mod response_framing;
pub mod response_head;
pub mod router_linear;
pub mod uri_normalize;
pub mod vars_expr;

/// A target's check: panics when a property fails.
pub type Check = fn(&[u8]);

/// Every target by name, as `fuzz/Cargo.toml` names its binaries.
pub const TARGETS: &[(&str, Check)] = &[
    ("access_log", access_log::check),
    ("admin_body", admin_body::check),
    ("chunked", chunked::check),
    ("config_json", config_json::check),
    ("config_yaml", config_yaml::check),
    ("encrypted_fields", encrypted_fields::check),
    ("etcd_value", etcd_value::check),
    ("h2_frames", h2_frames::check),
    ("plugin_phases", plugin_phases::check),
    ("proxy_protocol", proxy_protocol::check),
    ("request_boundaries", request_boundaries::check),
    ("request_head", request_head::check),
    ("response_framing", response_framing::check),
    ("response_head", response_head::check),
    ("router_linear", router_linear::check),
    ("uri_normalize", uri_normalize::check),
    ("vars_expr", vars_expr::check),
];
