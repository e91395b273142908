//! After a 101 (WebSocket and other upgrades): the client and the node talk directly.

use super::*;

impl Conn<'_> {
    /// After a 101: the client and the upstream talk directly until either closes.
    pub(super) async fn tunnel(
        &mut self,
        t: &Target<'_>,
        resp: ResponseHead,
        mut upc: UpConn,
        s: &Settings,
    ) -> Outcome {
        let node = Some((t.up_ref, upc.node as u32));
        self.b.out.clear();
        write::client_response(
            &mut self.b.out,
            &resp,
            ClientFraming::NoBody,
            ConnectionHeader::None,
            &NO_EDITS,
        );
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
            return Outcome {
                next: Next::Close,
                status: 101,
                bytes: 0,
                node,
                ..Outcome::new(Next::Close, 0)
            };
        }
        // Only now may bytes the client sent after its request go upstream (CVE-2026-2833:
        // forwarding them before the upgrade is accepted smuggles a second request).
        if !self.b.buf.is_empty() {
            let pending = self.b.buf.split();
            if crate::upstream::send(&mut upc.io, &pending).await.is_err() {
                return Outcome {
                    next: Next::Close,
                    status: 101,
                    bytes: 0,
                    node,
                    ..Outcome::new(Next::Close, 0)
                };
            }
        }
        // Idle for the upstream read timeout (NGINX's proxy_read_timeout does the same): closed.
        let idle = t.timeouts.read;
        let moved = crate::relay::copy_with_idle(
            &mut self.l.io,
            &mut upc.io,
            idle,
            crate::relay::WEBSOCKET_BUFFER,
        )
        .await;
        if let Err(e) = &moved.end {
            debug!(route = %t.route.id, cause = %e, "websocket tunnel ended");
        }
        let bytes = moved.to_a;
        Outcome {
            next: Next::Close,
            status: 101,
            bytes,
            node,
            ..Outcome::new(Next::Close, 0)
        }
    }
}
