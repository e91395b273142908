//! After a 101 (WebSocket and other upgrades): the client and the node talk directly.
//!
//! The request future sends the 101 and leaves the tunnel in the connection's `Link`;
//! `conn/upgrade.rs` holds the tunnel and runs it once the request future is given back.

use super::*;
use crate::conn::upgrade::Tunnel;

impl Conn<'_> {
    /// After a 101: sends it, then what the client sent after its request, and leaves the
    /// tunnel in the link.
    pub(super) async fn tunnel(
        &mut self,
        t: &Target<'_>,
        resp: ResponseHead,
        mut upc: UpConn,
        s: &Settings,
    ) -> Outcome {
        let node = Some((t.up_ref, upc.node as u32));
        // The 101's outcome: the bytes the tunnel moves are counted when it closes.
        let upgraded = Outcome {
            next: Next::Close,
            status: 101,
            node,
            ..Outcome::new(Next::Close, 0)
        };
        self.interim_head(&resp);
        // Bytes that followed the 101 belong to the new protocol.
        self.b.out.extend_from_slice(&self.b.up_buf);
        self.b.up_buf.clear();
        if !timed(
            &mut self.l.timer,
            s.client_send,
            crate::client_io::send(&mut self.l.io, &self.b.out),
        )
        .await
        .is_ok_and(|r| r.is_ok())
        {
            return upgraded;
        }
        // Only now may bytes the client sent after its request go upstream (CVE-2026-2833:
        // forwarding them before the upgrade is accepted smuggles a second request).
        if !self.b.buf.is_empty() {
            let pending = self.b.buf.split();
            if crate::upstream::send(&mut upc.io, &pending).await.is_err() {
                return upgraded;
            }
        }
        self.l.tunnel = Some(Box::new(Tunnel {
            up: upc.io,
            // Idle for the upstream read timeout (NGINX's proxy_read_timeout does the same):
            // closed.
            idle: t.timeouts.read,
            admitted: None,
            parked: None,
            log: None,
        }));
        upgraded
    }
}
