//! Forwarding one request to an upstream node and its response back (RFC 9110/9112).
//!
//! Phases, in order:
//! A. pick a node (the upstream's balancer, through the lifecycle of `upstream/select.rs`)
//!    and get a connection: a pooled one that is still open, or a new one; a failure whose
//!    error allows it moves on to the next node, up to `retries` and `retry_timeout`;
//! B. send the head and whatever part of the body has arrived, in one write; a pooled
//!    connection that turns out closed before any response byte is replaced by a new one
//!    when the request can safely be sent again (idempotent, body fully buffered);
//! C. stream the rest of the body;
//! D. read the response head (1xx are forwarded or dropped, 101 switches to a tunnel);
//! E. send the head and body to the client, re-framed when needed; return the connection to
//!    the pool when the exchange ended cleanly.
//!
//! A to C and the retry loop are here; D and E in `answer.rs`.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::AsyncReadExt;
use tracing::debug;

use super::body::ReqBody;
use super::{Conn, Next, Outcome, Plugged};
use key::HeadKey;

/// Reads of a body after its first piece take up to this much: a large body then moves in a
/// quarter of the system calls 16 KiB reads need (bench/bodies.sh). Buffers are lent only to
/// busy connections, and those that grew past 64 KiB are not kept (`conn::Bufs`).
const BODY_CHUNK: usize = 64 * 1024;
use mirror::MirrorCopy;

mod answer;
mod client_body;
mod key;
mod mirror;
mod tunnel;
use crate::error::{Error, Kind};
use crate::failures::Failure;
use crate::io::timed;
use crate::snapshot::{Route, Settings, Snapshot};
use crate::upstream::select::retry_loop;
use crate::upstream::{PassHostRt, PickCx, Tried, Tries, UpIo, Upstream, UpstreamTimeouts};
use sluice_core::Response;
use sluice_core::http::response::ResponseHead;
use sluice_core::http::write::{self, Forwarded};
use sluice_core::http::{Framing, RequestHead};
use sluice_core::plugin::Fallback;

/// A connection to an upstream node, for one exchange.
struct UpConn {
    io: UpIo,
    node: usize,
    /// Requests already served on it (for `keepalive_pool.requests`).
    served: u32,
    /// Taken from the pool: it may have been closed by the upstream meanwhile.
    reused: bool,
}

/// How an attempt ended, when not by the node's failure (whose error says whether the request
/// may go again: for [`Retry::SameNodeFresh`], all of it is still in `out`).
enum Got {
    /// The response head arrived.
    Response(ResponseHead, UpConn),
    /// The client side failed while sending the body; the outcome is decided.
    Client(Outcome),
}

/// What an exchange talks to.
struct Target<'a> {
    route: &'a Route,
    /// Index of the upstream in the snapshot.
    up_ref: u32,
    up: &'a Arc<Upstream>,
    timeouts: UpstreamTimeouts,
    /// The largest body the client may send (client-control's, else the node's).
    max_body: u64,
}

impl Conn<'_> {
    /// Proxies one request and writes its response. Returns what to do with the connection.
    pub(crate) async fn proxy(
        &mut self,
        snap: &Snapshot,
        route: &Route,
        head: &mut RequestHead,
        mut plugged: Plugged<'_, '_>,
    ) -> Outcome {
        let s = &snap.settings;
        // client-control's limit for this request, else the node's.
        let max_body = match &plugged {
            Some((_, cx)) => cx.max_body.unwrap_or(s.max_body),
            None => s.max_body,
        };
        if let Framing::Length(n) = head.framing()
            && n > max_body
        {
            // Closed even when the body happens to be buffered already: a client sending
            // more than the limit is not worth keeping.
            let resp = Response::error(413, "request body too large");
            return self.respond(head, s, &resp, Some(false), plugged).await;
        }
        let chosen = plugged.as_ref().and_then(|(_, cx)| cx.upstream);
        let up_ref = chosen.map_or(route.upstream.0, |u| u.0);
        let up = &snap.upstreams[up_ref as usize];
        if up.grpc {
            let resp = Response::error(502, "gRPC upstream: send the call over HTTP/2");
            return self.respond(head, s, &resp, None, plugged).await;
        }
        if up.http2 && head.is_websocket() {
            let resp = Response::error(502, "WebSocket to an HTTP/2 upstream is not supported");
            return self.respond(head, s, &resp, None, plugged).await;
        }
        // Load shedding: over a `max_inflight`, answered at once.
        let admitted = match route.admit(up) {
            Ok(a) => a,
            Err(e) => {
                debug!(route = %route.id, upstream = %up.owner_name(), "max_inflight reached: 503");
                let resp = e.response();
                return self.respond(head, s, &resp, None, plugged).await;
            }
        };
        let t = Target {
            route,
            up_ref,
            up,
            timeouts: route.timeouts.unwrap_or(up.timeouts),
            max_body,
        };
        let websocket = head.is_websocket() && route.websocket;
        let mut mirror = plugged
            .as_mut()
            .and_then(|(_, cx)| cx.mirror.take())
            .and_then(|m| {
                MirrorCopy::new(
                    snap,
                    head,
                    m,
                    self.l.client_ip.as_bytes(),
                    self.l.io.is_https(),
                )
            });
        let mut body = ReqBody::new(head.framing());
        let mut continue_sent = self.b.continued;
        let mut tries = Tries::new(up);
        let pick = match up.balancer.hash_on() {
            None => PickCx::default(),
            Some(on) => PickCx {
                key: crate::upstream::key::request_key(
                    on,
                    &HeadKey {
                        head,
                        conn: &self.l,
                        consumer: plugged.as_ref().and_then(|(_, cx)| cx.consumer_name()),
                    },
                ),
            },
        };
        // For the upstream's answer time (metrics, `$upstream_response_time`).
        let sent_at = self.l.w.timed.get().then(crate::metrics::now_ns);
        // Where the body starts in `out` once it holds the whole request (None: it does not; an
        // HTTP/2 upstream's head is not in `out` but given typed, so its body starts at 0).
        let mut replay_from = None;
        // The attempt leaves what it got here: moved once, not through the loop's value.
        let mut got = None;
        let tried = retry_loop!(&mut tries, (&self.l.w.up, up, &pick), |node, fresh| {
            self.attempt(
                &t,
                head,
                s,
                websocket,
                &mut body,
                (node, fresh),
                &mut replay_from,
                &mut continue_sent,
                mirror.as_mut(),
                &mut got,
            )
            .await
        });
        // (`tried` is matched alone: mapping it to `got` measured a `memcpy` per request.)
        if let Err((node, e)) = tried {
            if plugged
                .as_ref()
                .is_some_and(|(c, _)| !c.route.fallback.is_empty())
                && body.is_done()
                && self.fall_back(head, Fallback::Failed(e.status()), &mut plugged)
            {
                debug!(route = %route.id, error = %e, "falling back to another target");
                drop(admitted);
                return Box::pin(self.proxy(snap, route, head, plugged)).await;
            }
            let mut o = self
                .fail(&t, head, s, node, e, body.is_done(), plugged)
                .await;
            o.upstream = Some(up_ref);
            o.bytes_in = body.received();
            return o;
        }
        if let Some(Got::Response(resp, _)) = &got
            && plugged
                .as_ref()
                .is_some_and(|(c, _)| !c.route.fallback.is_empty())
            && body.is_done()
            && resp.status() != 101
            && self.fall_back(head, Fallback::Status(resp.status()), &mut plugged)
        {
            // The answer is dropped unread, with its connection.
            debug!(route = %route.id, status = resp.status(), "falling back to another target");
            drop(got.take());
            drop(admitted);
            self.b.up_buf.clear();
            return Box::pin(self.proxy(snap, route, head, plugged)).await;
        }
        match got {
            Some(Got::Response(resp, upc)) => {
                let answer = (
                    resp.status(),
                    sent_at.map_or(0, |t| crate::metrics::now_ns().saturating_sub(t)),
                );
                if let Some(m) = mirror {
                    m.send();
                }
                let mut o = self
                    .respond_upstream(&t, head, s, resp, upc, body.is_done(), websocket, plugged)
                    .await;
                o.answer = Some(answer);
                o.upstream = Some(up_ref);
                o.bytes_in = body.received();
                if websocket && let Some(t) = self.l.tunnel.as_mut() {
                    t.admitted = Some(admitted);
                }
                o
            }
            // The client's side failed (body too large, too slow, gone): not the upstream's
            // answer, and not counted as one.
            Some(Got::Client(mut o)) => {
                o.bytes_in = body.received();
                o
            }
            // Never: every attempt that ends the loop leaves what it got.
            None => {
                tracing::error!(route = %route.id, "the retry loop ended without an answer");
                Outcome::new(Next::Close, 500)
            }
        }
    }

    /// Phases A to D: one attempt at getting a response head from `node`. `fresh`: the
    /// previous attempt hit a stale pooled connection to it; `out` still holds the whole
    /// request.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &mut self,
        t: &Target<'_>,
        head: &RequestHead,
        s: &Settings,
        websocket: bool,
        body: &mut ReqBody,
        (node, fresh): (usize, bool),
        replay_from: &mut Option<usize>,
        continue_sent: &mut bool,
        mut mirror: Option<&mut MirrorCopy>,
        got: &mut Option<Got>,
    ) -> Tried<()> {
        let up = &**t.up;
        // A. A connection: a pooled one, unless this is the resend after a stale one.
        let idle = if fresh {
            None
        } else {
            self.l.w.up.nodes.borrow_mut().take(up.nodes[node].pool_key)
        };
        let mut upc = match idle {
            Some(c) => UpConn {
                io: c.io,
                node,
                served: c.served,
                reused: true,
            },
            None => match self.connect(t.up, node, t.timeouts.connect).await {
                Ok(c) => c,
                Err(e) => return Tried::Failed(e),
            },
        };

        // B. Head plus what has arrived of the body, in one write. After a node closed a new
        // connection without answering, `out` still holds the whole request: its head is
        // written again for this node (its `Host` may differ), its body kept.
        if !fresh && let Some(from) = *replay_from {
            let body_part = self.b.out.split_off(from);
            self.b.out.clear();
            self.write_upstream_head(up, upc.node, head, websocket, &mut upc.io);
            *replay_from = Some(self.b.out.len());
            self.b.out.extend_from_slice(&body_part);
        } else if !fresh {
            self.b.out.clear();
            self.write_upstream_head(up, upc.node, head, websocket, &mut upc.io);
            let head_len = self.b.out.len();
            if let Err(e) = body.pump(&mut self.b.buf, &mut self.b.out, t.max_body) {
                {
                    *got = Some(Got::Client(
                        self.client_body_error(t.route, head, s, e).await,
                    ));
                    return Tried::Ended(());
                }
            }
            if let Some(m) = mirror.as_deref_mut() {
                m.body(&self.b.out[head_len..]);
            }
            if body.is_done() {
                *replay_from = Some(head_len);
            }
        } else if let UpIo::H2(_) = upc.io {
            // Sent again on a new stream: its head is not in `out`, it is given again.
            self.write_upstream_head(up, upc.node, head, websocket, &mut upc.io);
        }
        if head.expects_continue() && !body.is_done() && !*continue_sent && self.b.buf.is_empty() {
            *continue_sent = true;
            let _ = timed(
                &mut self.l.timer,
                s.client_send,
                crate::client_io::send(&mut self.l.io, b"HTTP/1.1 100 Continue\r\n\r\n"),
            )
            .await;
        }
        // A request wholly in `out` may be sent again when nothing came back: on a new
        // connection to the same node after a stale pooled one, or to the next node after a
        // new connection was closed or reset, when it is idempotent (RFC 9110 §9.2.2).
        let replayable = body.is_done() && head.method().is_idempotent() && !websocket;
        // Written out rather than through `send_out`: this write is on every request, and the
        // extra await state of the helper measured 48 instructions per request (callgrind).
        match timed(
            &mut self.l.timer,
            t.timeouts.send,
            crate::upstream::send(&mut upc.io, &self.b.out),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let e =
                    Error::with_cause(Kind::SendFailed, e).before_answer(upc.reused, replayable);
                return Tried::Failed(e);
            }
            Err(_) => return Tried::Failed(Error::new(Kind::SendTimeout)),
        }

        // C. The rest of the body.
        let mut send_error = None;
        while !body.is_done() {
            match self.read_client_body(s).await {
                Err(_) => {
                    let e = Error::new(Kind::ClientTimeout);
                    {
                        *got = Some(Got::Client(
                            self.client_body_error(t.route, head, s, e).await,
                        ));
                        return Tried::Ended(());
                    }
                }
                Ok(Ok(0)) | Ok(Err(_)) => {
                    // The client went away mid-body: nobody to answer.
                    {
                        *got = Some(Got::Client(Outcome::new(Next::Close, 499)));
                        return Tried::Ended(());
                    }
                }
                Ok(Ok(_)) => {}
            }
            self.b.out.clear();
            // A Content-Length body goes out from the read buffer, not copied to `out`.
            if mirror.is_none()
                && let Some(n) = body.take_length(self.b.buf.len())
            {
                let sent = timed(
                    &mut self.l.timer,
                    t.timeouts.send,
                    crate::upstream::send(&mut upc.io, &self.b.buf[..n]),
                )
                .await;
                self.b.buf.advance(n);
                match sent {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => {
                        // The upstream may have answered early (401, 413) and closed: look
                        // for that answer before reporting the failure.
                        send_error = Some(Error::with_cause(Kind::SendFailed, e));
                        break;
                    }
                    Err(_) => {
                        return Tried::Failed(Error::new(Kind::SendTimeout));
                    }
                }
            }
            if let Err(e) = body.pump(&mut self.b.buf, &mut self.b.out, t.max_body) {
                {
                    *got = Some(Got::Client(
                        self.client_body_error(t.route, head, s, e).await,
                    ));
                    return Tried::Ended(());
                }
            }
            if let Some(m) = mirror.as_deref_mut() {
                m.body(&self.b.out);
            }
            match self.send_out(&mut upc.io, t.timeouts.send).await {
                Ok(()) => {}
                Err(e) if e.kind() == Kind::SendFailed => {
                    // The upstream may have answered early (401, 413) and closed: look for
                    // that answer before reporting the failure.
                    send_error = Some(e);
                    break;
                }
                Err(e) => return Tried::Failed(e),
            }
        }
        if let Some(m) = mirror {
            m.complete = body.is_done() && !m.bytes.is_empty();
        }

        // D. The response head.
        match self
            .read_response_head(&mut upc, head, s, t.timeouts.read, websocket)
            .await
        {
            Ok(resp) => {
                let status = resp.status();
                *got = Some(Got::Response(resp, upc));
                Tried::Answered((), Some(status))
            }
            // The client went away while the node had not answered: nothing to answer, and
            // the node's connection is dropped with the request (it may still answer).
            Err((e, _)) if e.kind() == Kind::ClientGone => {
                debug!(route = %t.route.id, node = %up.nodes[upc.node].authority, "the client went away before the answer");
                let mut o = Outcome::new(Next::Close, e.status());
                o.node = Some((t.up_ref, upc.node as u32));
                *got = Some(Got::Client(o));
                Tried::Ended(())
            }
            Err((e, nothing_read))
                if send_error.is_none() && nothing_read && e.kind() != Kind::ReadTimeout =>
            {
                Tried::Failed(e.before_answer(upc.reused, replayable))
            }
            Err((e, _)) => Tried::Failed(send_error.unwrap_or(e)),
        }
    }

    /// Writes `out` to the upstream connection within the send timeout.
    #[inline]
    async fn send_out(&mut self, io: &mut UpIo, timeout: Duration) -> Result<(), Error> {
        match timed(
            &mut self.l.timer,
            timeout,
            crate::upstream::send(io, &self.b.out),
        )
        .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::with_cause(Kind::SendFailed, e)),
            Err(_) => Err(Error::new(Kind::SendTimeout)),
        }
    }

    /// Writes the request head for `node` into `out`; to an HTTP/2 upstream, gives it to the
    /// stream typed instead (never as HTTP/1.1 bytes to be parsed back).
    #[inline]
    fn write_upstream_head(
        &mut self,
        up: &Upstream,
        node: usize,
        head: &RequestHead,
        websocket: bool,
        io: &mut UpIo,
    ) {
        let node = &up.nodes[node];
        let host: &[u8] = match (head.upstream_host(), &up.pass_host) {
            (Some(h), _) => h,
            (None, PassHostRt::Pass) if head.has_host() => head.host(),
            (None, PassHostRt::Pass | PassHostRt::Node) => node.host_header(),
            (None, PassHostRt::Rewrite(h)) => h,
        };
        let fwd = Forwarded {
            host,
            client_ip: self.l.client_ip.as_bytes(),
            websocket,
            https: self.l.io.is_https(),
        };
        if let UpIo::H2(m) = io {
            give_typed(&mut **m, head, &fwd);
        } else {
            write::upstream_request(&mut self.b.out, head, &fwd);
        }
    }

    async fn connect(
        &mut self,
        up: &Arc<Upstream>,
        node: usize,
        timeout: Duration,
    ) -> Result<UpConn, Error> {
        let io = crate::h2_up::connect(&self.l.w, up, node);
        match timed(&mut self.l.timer, timeout, io).await {
            Ok(Ok(io)) => Ok(UpConn {
                io,
                node,
                served: 0,
                reused: false,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::with_cause(
                Kind::ConnectTimeout,
                format_args!("after {timeout:?}"),
            )),
        }
    }

    /// Asks the route's fallback plugins whether the request goes elsewhere after its target
    /// answered `why`; when one says so, puts the body it set in the buffer (the previous
    /// attempt sent all of the client's). Nothing of the answer reached the client yet.
    #[cold]
    #[inline(never)]
    fn fall_back(
        &mut self,
        head: &mut RequestHead,
        why: Fallback,
        plugged: &mut Plugged<'_, '_>,
    ) -> bool {
        let Some((chains, cx)) = plugged.as_mut() else {
            return false;
        };
        for e in chains.route.fallback.iter() {
            if e.plugin.fallback(head, why, cx) {
                let Some(new) = cx.take_request_body() else {
                    tracing::error!(plugin = e.name, "a fallback without a request body");
                    return false;
                };
                self.b.out.clear();
                return self.replace_request_body(head, Some(0), new.body);
            }
        }
        false
    }

    /// Answers a request whose upstream exchange failed, and logs it once.
    #[allow(clippy::too_many_arguments)]
    async fn fail(
        &mut self,
        t: &Target<'_>,
        head: &RequestHead,
        s: &Settings,
        node: Option<usize>,
        e: Error,
        request_done: bool,
        plugged: Plugged<'_, '_>,
    ) -> Outcome {
        let authority = node.map_or("-", |n| &*t.up.nodes[n].authority);
        self.l
            .w
            .failed(Failure::of("request failed", &t.route.id, authority, &e));
        self.b.up_buf.clear();
        let resp = e.response();
        let mut o = self
            .respond(head, s, &resp, Some(request_done), plugged)
            .await;
        o.node = node.map(|n| (t.up_ref, n as u32));
        o
    }
}

/// Gives an HTTP/2 stream its head typed. Not inlined: kept out of `write_upstream_head`,
/// which every HTTP/1.1 request runs (inlined, its set-up measured 18 more instructions per
/// request in scenario 1).
#[inline(never)]
fn give_typed(m: &mut dyn crate::upstream::Multiplexed, head: &RequestHead, fwd: &Forwarded<'_>) {
    let mut typed = crate::h2_head::TypedHead::default();
    write::upstream_head(&mut typed, head, fwd, None);
    m.set_head(typed.build());
}
