//! Sluice's data plane: thread-per-core workers, the HTTP/1.1 proxy engine and worker-local
//! upstream pools (`upstream/`); TLS (`tls.rs`), HTTP/2 downstream (`h2.rs`, `h2_direct.rs`), gRPC over
//! HTTP/2 upstream (`grpc.rs`) and the L4 stream proxy (`stream.rs`) around that engine.
//!
//! Owns: listening sockets, connections on both sides, the request lifecycle, compiled
//! snapshots of the configuration, balancing and keep-alive pools, the access log, and the
//! built-in demo origin. Does not own: reading configuration files, the admin API, etcd
//! (the control plane hands this crate configurations, nothing else).

#![warn(missing_docs, unreachable_pub)]

mod accept;
mod access_log;
mod client_io;
mod conn;
mod error;
mod grpc;
mod h2;
mod h2_direct;
mod h2_up;
mod io;
mod listener;
pub mod origin;
mod proxy;
mod server;
mod snapshot;
mod splice;
mod stream;
mod tls;
mod upstream;
mod worker;

pub use listener::ensure_unserved;
pub use server::{Pending, Reloader, Server, StartError};
pub use snapshot::{Snapshot, compile};
pub use upstream::health::NodeReport;
