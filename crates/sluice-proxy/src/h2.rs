//! Downstream HTTP/2 (TLS with ALPN `h2`, or cleartext with prior knowledge), by the `h2`
//! crate (hyper's HTTP/2). A stream with a body or plugins is handed to the HTTP/1.1 engine as
//! a connection of its own that the engine reads and writes in place (`h2_down.rs`): routing,
//! plugins, limits, upstream pools, retries and error answers are the engine's, written once. The stream's head is translated after the checks of
//! RFC 9113 §8.2 (no connection-specific fields, `te: trailers` only, no whitespace around
//! values); the engine then applies its own strict HTTP/1.1 parsing on top.
//!
//! Protections: the `h2` crate bounds concurrent streams, header list size, CONTINUATION
//! frames, streams reset before they were accepted (rapid reset, CVE-2023-44487) and resets it
//! had to send for the client's protocol errors (CVE-2025-8671). [`FrameBudget`] adds per
//! connection budgets for PING, SETTINGS and RST_STREAM frames per second, which `h2` answers
//! or absorbs without limit; a connection over budget is closed with GOAWAY
//! `ENHANCE_YOUR_CALM`.

use std::cell::Cell;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::Request;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use crate::client_io::ClientIo;
use crate::h2_down::{H2Client, Shape};
use crate::h2_wire::{PREFACE, Peer, check_head, is_websocket};
use crate::snapshot::Http2Limits;
use crate::worker::Worker;

/// Streams reset by the client before we accepted them, at most (h2's rapid-reset guard).
const PENDING_RESETS: usize = 32;
/// Resets we had to send for the client's protocol errors, at most (h2's MadeYouReset guard).
const LOCAL_ERROR_RESETS: usize = 256;
/// Flow-control windows: per stream and per connection.
const STREAM_WINDOW: u32 = 1 << 20;
const CONN_WINDOW: u32 = 4 << 20;

/// What a connection's frame counters found.
#[derive(Debug, Default)]
struct Budget {
    tripped: Cell<Option<&'static str>>,
    notify: Notify,
}

/// Reads the client's bytes for `h2`, counting frames by type from their 9-byte headers (no
/// other parsing: `h2` does that).
struct FrameBudget<T> {
    inner: T,
    budget: Rc<Budget>,
    limits: Http2Limits,
    preface_left: usize,
    header: [u8; 9],
    header_len: usize,
    skip: usize,
    window_start: Instant,
    pings: u32,
    settings: u32,
    resets: u32,
}

impl<T> FrameBudget<T> {
    fn new(inner: T, budget: Rc<Budget>, limits: Http2Limits) -> Self {
        FrameBudget {
            inner,
            budget,
            limits,
            preface_left: PREFACE.len(),
            header: [0; 9],
            header_len: 0,
            skip: 0,
            window_start: Instant::now(),
            pings: 0,
            settings: 0,
            resets: 0,
        }
    }

    fn scan(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.preface_left > 0 {
                let n = self.preface_left.min(data.len());
                self.preface_left -= n;
                data = &data[n..];
            } else if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
            } else {
                let n = (9 - self.header_len).min(data.len());
                self.header[self.header_len..self.header_len + n].copy_from_slice(&data[..n]);
                self.header_len += n;
                data = &data[n..];
                if self.header_len == 9 {
                    self.header_len = 0;
                    let h = self.header;
                    self.skip =
                        (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
                    self.count(h[3], h[4]);
                }
            }
        }
    }

    fn count(&mut self, kind: u8, flags: u8) {
        const RST_STREAM: u8 = 0x3;
        const SETTINGS: u8 = 0x4;
        const PING: u8 = 0x6;
        const ACK: u8 = 0x1;
        let counted = match kind {
            PING | SETTINGS => flags & ACK == 0,
            RST_STREAM => true,
            // HEADERS, DATA and the rest: no clock read, nothing counted.
            _ => false,
        };
        if !counted {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.window_start) >= Duration::from_secs(1) {
            self.window_start = now;
            (self.pings, self.settings, self.resets) = (0, 0, 0);
        }
        let over = match kind {
            PING if flags & ACK == 0 => {
                self.pings += 1;
                (self.pings > self.limits.pings).then_some("PING flood")
            }
            SETTINGS if flags & ACK == 0 => {
                self.settings += 1;
                (self.settings > self.limits.settings).then_some("SETTINGS flood")
            }
            RST_STREAM => {
                self.resets += 1;
                (self.resets > self.limits.resets).then_some("RST_STREAM flood")
            }
            _ => None,
        };
        if let Some(why) = over
            && self.budget.tripped.get().is_none()
        {
            self.budget.tripped.set(Some(why));
            self.budget.notify.notify_one();
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FrameBudget<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.budget.tripped.get().is_some() {
            // Over budget: read nothing more. The connection's driver sends GOAWAY and ends
            // it (it was notified; nothing here needs waking).
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let me = &mut *self;
        let r = Pin::new(&mut me.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            me.scan(&buf.filled()[before..]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for FrameBudget<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves an HTTP/2 connection until the client ends it, it idles out, or it exceeds a budget.
pub(crate) async fn serve<T: AsyncRead + AsyncWrite + Unpin>(
    io: T,
    peer: Peer,
    listener: usize,
    w: Rc<Worker>,
) {
    let addr = peer.addr;
    let snap = w.snapshot();
    let (header_timeout, keepalive, max_head, limits) = (
        snap.settings.client_header,
        snap.settings.keepalive,
        snap.settings.head.max_header_size,
        snap.settings.http2,
    );
    drop(snap);
    let budget = Rc::new(Budget::default());
    let io = FrameBudget::new(io, budget.clone(), limits);
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(limits.max_streams)
        .max_header_list_size(max_head as u32)
        .max_pending_accept_reset_streams(PENDING_RESETS)
        .max_local_error_reset_streams(Some(LOCAL_ERROR_RESETS))
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        // WebSocket over HTTP/2 (RFC 8441).
        .enable_connect_protocol();
    let mut conn = match tokio::time::timeout(header_timeout, builder.handshake(io)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            debug!(client = %addr, cause = %e, "HTTP/2 handshake failed");
            return;
        }
        Err(_) => return,
    };
    let open = Rc::new(Cell::new(0usize));
    // Idle (no stream open) in the connections gauge while the connection lives.
    let idle = Rc::new(H2Idle {
        w: w.clone(),
        listener,
        counted: Cell::new(false),
        ended: Cell::new(false),
        since: Cell::new(Instant::now()),
        became_idle: Notify::new(),
    });
    idle.set(true);
    // Woken by the worker when it starts draining (an idle connection has no other reason to
    // wake: it sleeps until its idle deadline, instead of checking twice a second).
    let mut drain_slot = None;
    let mut shutting = false;
    loop {
        // The idle deadline counts from the end of the last stream; none while streams are open.
        let deadline = (open.get() == 0).then(|| idle.since.get() + keepalive);
        let idle_out = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let drain = poll_fn(|cx| {
            if w.draining.get() {
                return Poll::Ready(());
            }
            w.register_idle(&mut drain_slot, cx.waker());
            Poll::Pending
        });
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((req, respond))) => {
                    let (peer, w, open, idle) = (peer.clone(), w.clone(), open.clone(), idle.clone());
                    open.set(open.get() + 1);
                    idle.set(false);
                    tokio::task::spawn_local(async move {
                        dispatch(req, respond, &peer, w).await;
                        open.set(open.get() - 1);
                        if open.get() == 0 && !idle.ended() {
                            idle.since.set(Instant::now());
                            idle.set(true);
                            idle.became_idle.notify_one();
                        }
                    });
                }
                Some(Err(e)) => {
                    debug!(client = %addr, cause = %e, "HTTP/2 connection ended with an error");
                    break;
                }
                None => break,
            },
            () = budget.notify.notified() => {
                let why = budget.tripped.get().unwrap_or("budget");
                debug!(client = %addr, cause = why, "HTTP/2 connection over budget: GOAWAY");
                conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                // Let the GOAWAY out, then stop.
                let _ = tokio::time::timeout(Duration::from_secs(1), poll_fn(|cx| conn.poll_closed(cx))).await;
                break;
            }
            // Re-arms the idle deadline from the end of the last stream.
            () = idle.became_idle.notified() => {}
            () = idle_out, if !shutting => {
                shutting = true;
                conn.graceful_shutdown();
            }
            () = drain, if !shutting => {
                shutting = true;
                conn.graceful_shutdown();
            }
        }
    }
    w.unregister_idle(&mut drain_slot);
    idle.end();
}

/// An HTTP/2 connection's place in the idle connections gauge.
struct H2Idle {
    w: Rc<Worker>,
    listener: usize,
    counted: Cell<bool>,
    ended: Cell<bool>,
    /// When the last stream ended (or the connection opened).
    since: Cell<Instant>,
    /// Notified when the last open stream ends.
    became_idle: Notify,
}

impl H2Idle {
    fn set(&self, idle: bool) {
        if idle != self.counted.get()
            && !self.ended.get()
            && let Some(g) = self.w.metrics.shard.conns.get(self.listener)
        {
            g.idle[1].add(if idle { 1 } else { -1 });
            self.counted.set(idle);
        }
    }

    /// The connection ended: out of the gauge for good.
    fn end(&self) {
        self.set(false);
        self.ended.set(true);
    }

    fn ended(&self) -> bool {
        self.ended.get()
    }
}

/// Sends a stream to its route's gRPC upstream, or through the HTTP/1.1 engine.
async fn dispatch(
    req: Request<RecvStream>,
    respond: SendResponse<Bytes>,
    peer: &Peer,
    w: Rc<Worker>,
) {
    let snap = w.snapshot();
    // A client without a certificate, on a certificate with `skip_mtls_uri_regex`.
    if let Some(sni) = &peer.without_cert
        && let Some(allowed) = snap.tls.no_cert_paths(sni.as_deref())
        && !allowed.is_match(&sluice_router::normalize_path(req.uri().path().as_bytes()))
    {
        let mut respond = respond;
        crate::h2_direct::answer(
            &mut respond,
            sluice_core::Response::error(400, crate::tls::NO_CLIENT_CERT),
        );
        return;
    }
    let fast = crate::h2_direct::may_take(&req);
    if !snap.grpc && !fast {
        // No gRPC upstream, and not a stream for the fast path: the engine's, which routes it
        // (once, not here and again there).
        drop(snap);
        return bridge(req, respond, peer, w).await;
    }
    let host: &[u8] = match req.uri().authority() {
        Some(a) => a.as_str().as_bytes(),
        None => req
            .headers()
            .get(http::header::HOST)
            .map_or(&b""[..], |h| h.as_bytes()),
    };
    let path = sluice_router::normalize_path(req.uri().path().as_bytes());
    let method = sluice_router::Method::from_bytes(req.method().as_str().as_bytes());
    match snap.router.find(host, method, &path) {
        // A route with conditions of its own (vars, remote_addrs) is chosen on the bridged
        // path, which evaluates them.
        Some(route) if route.admit.is_some() => {
            drop(snap);
            bridge(req, respond, peer, w).await;
        }
        // Boxed, these two: the stream's task is moved (copied) several times as tokio spawns
        // and ends it, and its size is that of its largest path. Inline, gRPC's 4 KiB and the
        // fast path's 3 KiB made every stream's task that large: ~3,800 instructions of
        // copying per stream, more than the box costs.
        Some(route) if snap.upstreams[route.upstream.0 as usize].grpc => {
            Box::pin(crate::grpc::forward(req, respond, &snap, route, peer, w)).await
        }
        Some(route) if fast && crate::h2_direct::eligible(route, &snap) => {
            Box::pin(crate::h2_direct::proxy(
                req, respond, &snap, route, peer, &w,
            ))
            .await
        }
        _ => {
            drop(snap);
            bridge(req, respond, peer, w).await;
        }
    }
}

/// Carries one stream through the engine, as a connection of its own that the engine reads
/// and writes in place (`h2_down::H2Client`), on this stream's task.
async fn bridge(
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    peer: &Peer,
    w: Rc<Worker>,
) {
    let has_length = req.headers().contains_key(http::header::CONTENT_LENGTH);
    let websocket = is_websocket(&req);
    // A WebSocket's DATA frames are the tunnel's bytes, passed on as they are.
    let chunked = !has_length && !req.body().is_end_stream() && !websocket;
    if let Err(why) = check_head(&req) {
        debug!(client = %peer.addr, cause = why, "malformed HTTP/2 request");
        respond.send_reset(Reason::PROTOCOL_ERROR);
        // Counted as a 400, as the engine counts a head it refuses.
        let started = w.begin();
        let refused = crate::observe::Refused {
            proto: crate::metrics::Proto::Http2,
            request: crate::access_log::View::H2(req.method(), req.uri(), req.headers()),
            method: sluice_router::Method::from_bytes(req.method().as_str().as_bytes()),
            client: peer.client(),
            route: None,
        };
        w.refused(refused, started);
        return;
    }
    let shape = Shape {
        chunked,
        websocket,
        is_head: req.method() == http::Method::HEAD,
        https: peer.https,
        subject: peer.subject.clone(),
        ip: peer.ip.clone(),
    };
    let (head, body) = req.into_parts();
    let client = H2Client::new(head, body, respond, shape);
    crate::conn::serve(
        ClientIo::Bridged(Box::new(client)),
        peer.addr,
        peer.local,
        Bytes::new(),
        None,
        w,
        (),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    type Args = (
        Request<RecvStream>,
        SendResponse<Bytes>,
        &'static Peer,
        Rc<Worker>,
    );

    fn size<Fut>(_: impl Fn(Args) -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// A stream's task is as large as its largest path, and tokio copies it whole several
    /// times per stream: gRPC (4.4 KiB in a debug build) and the fast path (2.9 KiB) stay
    /// boxed, out of it.
    #[test]
    fn a_streams_task_is_the_size_of_the_bridge_not_of_grpc() {
        let dispatch = size(|(a, b, c, d): Args| dispatch(a, b, c, d));
        let bridge = size(|(a, b, c, d): Args| bridge(a, b, c, d));
        assert!(
            dispatch <= bridge + 1024,
            "dispatch {dispatch} bytes, bridge {bridge}"
        );
    }
}
