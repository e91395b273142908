//! Sluice's data plane: thread-per-core workers (`worker.rs` their state, `accept.rs` their
//! accept loops), the HTTP/1.1 engine (`conn/`: one connection, its requests, forwarding and
//! body framing), upstreams (`upstream/`: the one lifecycle every path follows, balancers,
//! health, pools, DNS, load shedding); TLS (`tls.rs`), HTTP/2 downstream (`h2.rs`,
//! `h2_direct.rs`, `h2_wire.rs`), HTTP/2 and gRPC upstream (`h2_up.rs`, `grpc.rs`) and the L4
//! stream proxy (`stream.rs`, `stream_table.rs`, `relay.rs`, `splice.rs`) around that engine.
//! No two of these modules import each other: the dependencies go one way (the accept loop
//! to the protocol paths, they to the worker's state and the upstreams, those to leaves).
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
mod failures;
pub mod fetch;
mod grpc;
mod grpc_mirror;
mod h2;
mod h2_direct;
mod h2_down;
mod h2_head;
mod h2_up;
mod h2_wire;
mod io;
mod listener;
pub mod metrics;
mod observe;
pub mod origin;
mod proxy_protocol;
mod relay;
mod server;
mod snapshot;
mod splice;
mod stream;
mod stream_table;
mod tls;
mod upstream;
mod worker;

/// Entry points for the fuzz targets in `fuzz/` (and their seed tests) into code that is
/// otherwise private to the data plane. Not an API: nothing else may call them.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::access_log::line_for_fuzzing as access_log_line;
    pub use crate::proxy_protocol::parse as proxy_protocol;
}

pub use listener::ensure_unserved;
/// What a binary upgrade hands from one process to the next: listening sockets, the health of
/// upstream nodes; and the gate that pauses the workers' accepting meanwhile.
pub mod handover {
    pub use crate::listener::{
        SocketKey, bind_plain, close_gate, held, inherit, keep_for_handover, open_gate, release,
    };
    pub use crate::upstream::health::{
        export as export_health, import as import_health, settle as settle_health,
    };
}

/// The TLS client configuration for `t` (an upstream's `tls`, or etcd's: the same settings),
/// errors recorded in `v` at `tls...`. Offers ALPN `http/1.1`.
pub fn tls_client_config(
    t: &sluice_config::UpstreamTlsConfig,
    v: &mut sluice_config::Validator,
) -> Option<std::sync::Arc<rustls::ClientConfig>> {
    tls::client_config(t, false, v)
}
pub use server::{Pending, Reloader, Server, StartError};
pub use snapshot::{Snapshot, compile};
pub use upstream::health::NodeReport;

/// Makes every worker reopen its access log file (and the file loggers theirs) by its path at
/// its next flush (within a second): what SIGUSR1 does, after logrotate moved the file.
pub fn reopen_logs() {
    sluice_core::REOPEN_LOGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}
