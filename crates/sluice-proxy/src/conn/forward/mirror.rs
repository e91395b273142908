//! proxy-mirror's copy of a request: filled as the request goes out, sent on its own task once
//! the real request got its answer.

use std::sync::Arc;

use sluice_core::Mirror;
use sluice_core::http::write::{self, Forwarded};
use sluice_core::http::{Framing, RequestHead};
use tokio::io::AsyncReadExt;
use tracing::debug;

use crate::snapshot::Snapshot;
use crate::upstream::Upstream;

/// Most request body bytes copied for a mirror; a larger request is not mirrored.
pub(super) const MIRROR_MAX: usize = 1 << 20;

/// A copy of the request for a shadow upstream (proxy-mirror), filled as the request goes out
/// and sent on its own task once the real request got its answer; it can neither delay nor
/// fail the real request.
pub(super) struct MirrorCopy {
    pub(super) upstream: Arc<Upstream>,
    pub(super) bytes: Vec<u8>,
    pub(super) complete: bool,
}

impl MirrorCopy {
    pub(super) fn new(
        snap: &Snapshot,
        head: &RequestHead,
        m: Mirror,
        client_ip: &[u8],
        https: bool,
    ) -> Option<MirrorCopy> {
        let upstream = snap.upstreams.get(m.upstream.0 as usize)?.clone();
        if upstream.http2 {
            debug!("proxy-mirror: a grpc(s):// shadow takes gRPC calls only; not mirrored");
            return None;
        }
        let node = upstream.nodes.first()?;
        let mut bytes = Vec::with_capacity(512);
        // The copy carries the Host the real request goes upstream with, when a plugin set one.
        let host: &[u8] = match head.upstream_host() {
            Some(h) => h,
            None if head.has_host() => head.host(),
            None => node.host_header(),
        };
        write::upstream_request_to(
            &mut bytes,
            head,
            &Forwarded {
                host,
                client_ip,
                websocket: false,
                https,
            },
            m.target.as_deref(),
        );
        Some(MirrorCopy {
            upstream,
            bytes,
            complete: matches!(head.framing(), Framing::None),
        })
    }

    pub(super) fn body(&mut self, part: &[u8]) {
        if self.bytes.len() + part.len() > MIRROR_MAX {
            self.bytes = Vec::new();
            self.complete = false;
            return;
        }
        self.bytes.extend_from_slice(part);
    }

    /// Sends the copy on its own task, to the upstream's first node in rotation.
    pub(super) fn send(self) {
        if !self.complete || self.bytes.is_empty() {
            return;
        }
        let Some(node) = self
            .upstream
            .nodes
            .iter()
            .position(|n| n.weight > 0)
            .or((!self.upstream.nodes.is_empty()).then_some(0))
        else {
            return;
        };
        let (addr, timeouts) = (self.upstream.nodes[node].addr, self.upstream.timeouts);
        tokio::task::spawn_local(async move {
            let exchange = async {
                let mut io = crate::upstream::connect_node(&self.upstream, node)
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                crate::upstream::send(&mut io, &self.bytes).await?;
                let mut scratch = [0u8; 4096];
                // Read the answer head at least, so the mirror sees a normal client.
                let _ = io.read(&mut scratch).await?;
                Ok::<_, std::io::Error>(())
            };
            match tokio::time::timeout(timeouts.connect + timeouts.read, exchange).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(mirror = %addr, cause = %e, "mirror request failed"),
                Err(_) => debug!(mirror = %addr, "mirror request timed out"),
            }
        });
    }
}
