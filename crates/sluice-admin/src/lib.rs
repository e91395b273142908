//! Sluice's control plane: the configuration as a document, its admin REST API, where it is
//! stored (a YAML file, written atomically), and how changes reach the data plane (validated,
//! compiled, then swapped in whole; a refused change leaves the running one untouched).
//!
//! Owns: the admin API and its security (API key, loopback by default), the OpenAPI document,
//! file watching. Does not own: the data plane, which it sees only through [`Target`].

#![warn(missing_docs, unreachable_pub)]

mod api;
pub mod apisix;
pub mod cluster;
mod control;
pub mod etcd;
pub mod openapi;
mod serve;
pub mod status;
mod store;
pub mod watch;

pub use api::Api;
pub use control::etcd_sync::{etcd_guard_revision, etcd_resources};
pub use control::{
    AdminError, Change, Control, EtcdLink, EtcdView, Kind, Prepared, RESOURCES_IN_ETCD, Reloaded,
    StatsView, Target, apply_overrides, every_error, parse_doc, render,
};
pub use store::{FileStore, MemoryStore, Store};

/// A random API key: 32 hex characters from the operating system's generator.
pub fn generate_key() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
