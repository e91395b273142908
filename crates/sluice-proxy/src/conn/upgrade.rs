//! An upgraded connection (a 101, WebSocket): the tunnel between the client and the node.
//!
//! The request future sends the 101 (`forward/tunnel.rs`) and leaves the tunnel in the
//! connection's `Link`; the connection's own future runs it ([`relay`]) after giving the
//! request future and its buffers back to the worker's pool. An open tunnel then holds its two
//! sockets, the request head for its log line and what plugins hold for it, and no request
//! state: an idle one went from 21.4 KiB to 3.1 KiB (`bench/idle_memory.sh --modes ws`).

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::outcome::Outcome;
use crate::client_io::ClientIo;
use crate::snapshot::{Admission, Route, Snapshot};
use crate::upstream::UpIo;
use sluice_core::ctx::Parked;
use sluice_core::http::RequestHead;

/// An upgraded connection's tunnel, between the 101 and the close.
pub(crate) struct Tunnel {
    pub(super) up: UpIo,
    /// Nothing moved either way for this long: closed (the route's read timeout).
    pub(super) idle: Duration,
    /// Held while the tunnel is open: its place under `max_inflight`.
    pub(super) admitted: Option<Admission>,
    /// The request's plugin context, held while the tunnel is open (limit-conn's slots, a
    /// trace's span); the log phase runs on it when the tunnel closes. Boxed: a tunnel on a
    /// route without plugins does not carry its size.
    pub(super) parked: Option<Box<Parked>>,
    /// What the request's log line and metrics need, counted when the tunnel closes.
    pub(super) log: Option<Logged>,
}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel").field("idle", &self.idle).finish()
    }
}

/// An upgraded request, kept for its log line.
pub(crate) struct Logged {
    pub(super) snap: Arc<Snapshot>,
    pub(super) route: Option<Arc<Route>>,
    pub(super) head: RequestHead,
    pub(super) outcome: Outcome,
    pub(super) started: Option<u64>,
}

/// Runs a tunnel until either side closes or it idles out; its outcome then counts the bytes
/// the node sent the client through it.
pub(super) async fn relay(client: &mut ClientIo, t: &mut Tunnel) {
    let moved =
        crate::relay::copy_with_idle(client, &mut t.up, t.idle, crate::relay::WEBSOCKET_BUFFER)
            .await;
    if let Some(log) = t.log.as_mut() {
        if let Err(e) = &moved.end {
            let route = log.route.as_deref().map_or("", |r| &*r.id);
            debug!(route = %route, cause = %e, "websocket tunnel ended");
        }
        log.outcome.bytes = moved.to_a;
    }
}
