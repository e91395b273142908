//! One client connection: read a request head, route it, proxy it, repeat while keep-alive
//! allows. The request's life in order (docs/phases.md has the diagram):
//!
//! 1. wait for a head (keep-alive idle timeout, then the header timeout from the first byte);
//! 2. parse it strictly; a framing or limit violation is answered (400/408/413/414/417/431/
//!    501) and the connection closed;
//! 3. match a route against the snapshot taken for this request (404 when none);
//! 4. proxy it (`forward.rs`), which writes the response;
//! 5. log it, and loop unless the connection must close.

mod body;
mod forward;

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::access_log::View;
use crate::client_io::ClientIo;
use crate::io::{Timer, new_timer, timed, until};
use crate::metrics::Proto;
use crate::observe::{Client, Exchange};
use crate::snapshot::{Route, Settings, Snapshot};
use crate::worker::Worker;
use sluice_core::http::request::{self, Reject};
use sluice_core::http::write::{self, ConnectionHeader};
use sluice_core::http::{Framing, HeaderPos, RequestHead};
use sluice_core::plugin::{ChainEntry, ResponseView};
use sluice_core::{Chain, Ctx, Flow, Phases, Response, ResponseEdits};

/// The methods a 405 names in `Allow` (RFC 9110 §15.5.6): what any route serves by default.
const ALLOW: &[u8] = b"GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH";

/// Initial size of a connection's read buffer; it grows to the header limit when needed.
const READ_BUF: usize = 4096;
/// After an error response, unread request bytes are drained for at most this long before
/// closing, so the client reads the response instead of a reset.
const LINGER: Duration = Duration::from_secs(2);
/// Longest wait to send a TLS close_notify alert before closing.
const CLOSE_NOTIFY: Duration = Duration::from_secs(1);
/// ... and at most this many bytes.
const LINGER_BYTES: usize = 1 << 20;

/// What happens to the connection after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Read the next request.
    KeepAlive,
    /// Close; the response told the client (or the exchange broke).
    Close,
    /// Close after draining unread request bytes (an error response was sent mid-request).
    Linger,
}

/// What the access log needs from an exchange.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) next: Next,
    pub(crate) status: u16,
    /// Response body bytes sent.
    pub(crate) bytes: u64,
    /// The upstream (index in the snapshot) and node used.
    pub(crate) node: Option<(u32, u32)>,
    /// The upstream tried (index in the snapshot), even when no node answered.
    pub(crate) upstream: Option<u32>,
    /// The node's answer: its status and the time to its head.
    pub(crate) answer: crate::metrics::Answer,
    /// Request body bytes received.
    pub(crate) bytes_in: u64,
    /// The consumer an auth plugin identified (index in the snapshot).
    pub(crate) consumer: Option<u32>,
    /// The W3C trace id, when a tracing plugin traced the request.
    pub(crate) trace_id: Option<[u8; 16]>,
}

impl Outcome {
    pub(crate) fn new(next: Next, status: u16) -> Self {
        Outcome {
            next,
            status,
            bytes: 0,
            node: None,
            upstream: None,
            answer: None,
            bytes_in: 0,
            consumer: None,
            trace_id: None,
        }
    }
}

pub(crate) struct Conn {
    pub(crate) w: Rc<Worker>,
    pub(crate) io: ClientIo,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) client_ip: Box<[u8]>,
    /// Over TLS: the verified client certificate's subject (mutual TLS).
    client_subject: Option<Rc<str>>,
    /// Bytes read from the client and not yet used.
    pub(crate) buf: BytesMut,
    /// Bytes being written (to either side).
    pub(crate) out: Vec<u8>,
    pub(crate) timer: Timer,
    headers: Vec<HeaderPos>,
    /// Bytes read from the upstream and not yet used.
    pub(crate) up_buf: BytesMut,
    pub(crate) up_headers: Vec<HeaderPos>,
    /// Response edits, lent to each request's plugin context and taken back (buffers reused).
    edits: ResponseEdits,
    /// Requests served on this connection.
    pub(crate) served: u32,
    idle_slot: Option<usize>,
    /// The listener it came from (`None`: an HTTP/2 stream bridged through the engine), for
    /// the idle connections gauge.
    listener: Option<usize>,
}

/// The plugin side of a request: its chain and context. `None` for routes without plugins,
/// which take the engine's path untouched.
pub(crate) type Plugged<'a, 's> = Option<(&'a Chain, &'a mut Ctx<'s>)>;

enum Head {
    Request(RequestHead),
    Reject(Reject),
    Closed,
}

/// Longest request line written to the access log for a request refused while parsing.
const MAX_LOGGED_LINE: usize = 2048;

/// Serves a client connection until it closes.
/// `pre`: bytes already read from the client (while telling HTTP/2 from HTTP/1.1).
pub(crate) async fn serve(
    io: ClientIo,
    peer: SocketAddr,
    local: SocketAddr,
    pre: bytes::Bytes,
    listener: Option<usize>,
    w: Rc<Worker>,
) {
    let mut c = Conn {
        listener,
        client_ip: peer.ip().to_string().into_bytes().into(),
        client_subject: io.client_subject(),
        peer,
        local,
        w,
        io,
        buf: {
            let mut b = BytesMut::with_capacity(READ_BUF.max(pre.len()));
            b.extend_from_slice(&pre);
            b
        },
        out: Vec::with_capacity(1024),
        timer: new_timer(),
        headers: Vec::with_capacity(16),
        up_buf: BytesMut::new(),
        up_headers: Vec::with_capacity(16),
        edits: ResponseEdits::default(),
        served: 0,
        idle_slot: None,
    };
    c.run().await;
    c.close_notify().await;
    let w = c.w.clone();
    w.unregister_idle(&mut c.idle_slot);
}

impl Conn {
    async fn run(&mut self) {
        loop {
            let snap = self.w.snapshot();
            let mut head = match self.read_head(&snap.settings).await {
                Head::Request(h) => h,
                Head::Closed => return,
                Head::Reject(r) => {
                    self.reject(r, &snap.settings).await;
                    return;
                }
            };
            let started = self.w.begin();
            head.take_bytes(&mut self.buf);
            self.served += 1;
            let (route, mut outcome) = self.handle(&snap, &mut head).await;
            self.finish(&head, route, &outcome, started, &snap);
            let mut headers = head.into_fields();
            headers.clear();
            self.headers = headers;
            if outcome.next == Next::KeepAlive && self.w.draining.get() {
                outcome.next = Next::Close;
            }
            match outcome.next {
                Next::KeepAlive => {}
                Next::Close => return,
                Next::Linger => {
                    self.linger().await;
                    return;
                }
            }
        }
    }

    async fn handle<'s>(
        &mut self,
        snap: &'s Snapshot,
        head: &mut RequestHead,
    ) -> (Option<&'s Route>, Outcome) {
        let route = {
            let path = sluice_router::normalize_path(head.original_path());
            snap.router.find(head.host(), head.method(), &path)
        };
        let outcome = match route {
            // The common case: no plugin anywhere, no context to set up.
            Some(r) if r.chain.is_empty() => self.proxy(snap, r, head, None).await,
            None if head.method() == sluice_router::Method::Trace => {
                let resp =
                    Response::error(405, "TRACE is not allowed: no route lists it in methods")
                        .header("Allow", ALLOW);
                self.respond(head, &snap.settings, &resp, None, None).await
            }
            None if snap.globals.is_empty() => {
                let resp = Response::error(404, "404 Route Not Found");
                self.respond(head, &snap.settings, &resp, None, None).await
            }
            _ => self.with_plugins(snap, route, head).await,
        };
        (route, outcome)
    }

    /// Runs a request through its plugins' phases: rewrite, access (with the consumer's
    /// plugins merged in once an auth plugin identified one), before_proxy, then the proxy
    /// (which runs header_filter and body_filter), then log.
    async fn with_plugins(
        &mut self,
        snap: &Snapshot,
        route: Option<&Route>,
        head: &mut RequestHead,
    ) -> Outcome {
        let chain = route.map_or(&snap.globals, |r| &r.chain);
        let route_id = route.map_or("", |r| &*r.id);
        let edits = std::mem::take(&mut self.edits);
        let mut cx = Ctx::new(self.peer, self.local, route_id, &snap.consumers, edits);
        if self.io.is_https() {
            cx.set_tls(self.client_subject.clone());
        }
        let s = &snap.settings;
        let outcome = match request_phases(chain, head, &mut cx, &self.w).await {
            Err(r) => {
                self.respond(head, s, &r, None, Some((chain, &mut cx)))
                    .await
            }
            Ok(()) => match route {
                Some(r) => self.proxy(snap, r, head, Some((chain, &mut cx))).await,
                None => {
                    let resp = Response::error(404, "404 Route Not Found");
                    self.respond(head, s, &resp, None, Some((chain, &mut cx)))
                        .await
                }
            },
        };
        let consumer = cx.consumer().map(|c| &c.chain);
        for e in phase(chain, consumer, |c| &c.log) {
            e.plugin.log(head, outcome.status, &cx);
        }
        let mut outcome = outcome;
        outcome.consumer = cx.consumer_index();
        outcome.trace_id = cx.trace_id;
        // Dropping the context releases what it held (limit-conn slots).
        self.edits = cx.into_response();
        self.edits.clear();
        outcome
    }

    /// Waits for and parses the next request head.
    async fn read_head(&mut self, s: &Settings) -> Head {
        let mut deadline: Option<Instant> = None;
        loop {
            if !self.buf.is_empty() {
                match request::parse(&self.buf, &s.head, &mut self.headers) {
                    Ok(Some(h)) => return Head::Request(h),
                    Ok(None) => {}
                    Err(r) => return Head::Reject(r),
                }
            }
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(READ_BUF.max(self.buf.len()));
            }
            if self.buf.is_empty() {
                if !self.idle_read(s.keepalive).await {
                    return Head::Closed;
                }
                continue;
            }
            // Part of a head is here: the rest must arrive by the header deadline.
            let at = *deadline.get_or_insert_with(|| Instant::now() + s.client_header);
            match until(&mut self.timer, at, self.io.read_buf(&mut self.buf)).await {
                Err(_) => {
                    return Head::Reject(Reject {
                        status: 408,
                        message: "request header timeout",
                    });
                }
                Ok(Ok(0)) | Ok(Err(_)) => return Head::Closed,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Waits on an idle keep-alive connection for the first byte of a request. False when the
    /// connection should close: the client closed it, it stayed idle too long, or the worker
    /// is draining (bytes that already arrived are still served first).
    async fn idle_read(&mut self, keepalive: Duration) -> bool {
        let Conn {
            w,
            io,
            buf,
            timer,
            idle_slot,
            listener,
            ..
        } = self;
        let mut read = pin!(io.read_buf(buf));
        let mut armed = false;
        let idle_gauge = listener.and_then(|l| w.metrics.shard.conns.get(l));
        let got = poll_fn(|cx| {
            match read.as_mut().poll(cx) {
                Poll::Ready(Ok(n)) => return Poll::Ready(n > 0),
                Poll::Ready(Err(_)) => return Poll::Ready(false),
                Poll::Pending => {}
            }
            if w.draining.get() {
                return Poll::Ready(false);
            }
            w.register_idle(idle_slot, cx.waker());
            if !armed {
                timer.as_mut().reset(Instant::now() + keepalive);
                armed = true;
                if let Some(g) = idle_gauge {
                    g.idle[0].add(1);
                }
            }
            match timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(false),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        if armed && let Some(g) = idle_gauge {
            g.idle[0].add(-1);
        }
        got
    }

    /// Answers a request refused before routing, then closes. Counted and logged like any
    /// other answer, with the request line when one arrived.
    async fn reject(&mut self, r: Reject, s: &Settings) {
        let started = self.w.begin();
        self.out.clear();
        let mut resp = Response::error(r.status, r.message);
        if r.status == 405 {
            resp = resp.header("Allow", ALLOW);
        }
        write::own_response(
            &mut self.out,
            &resp,
            ConnectionHeader::Close,
            &ResponseEdits::default(),
            false,
        );
        let _ = timed(
            &mut self.timer,
            s.client_send,
            crate::client_io::send(&mut self.io, &self.out),
        )
        .await;
        let line = match memchr::memchr(b'\n', &self.buf) {
            Some(end) => &self.buf[..end.min(MAX_LOGGED_LINE)],
            None => &self.buf[..0],
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let method = line.split(|&c| c == b' ').next().unwrap_or_default();
        self.w.finish(&Exchange {
            proto: self.proto(),
            request: View::Line(line),
            version: 1,
            method: sluice_router::Method::from_bytes(method),
            client: self.client(),
            route: None,
            status: r.status,
            bytes_in: 0,
            bytes_out: write::own_response_size(&resp, &ResponseEdits::default(), false).1,
            started,
            upstream: None,
            consumer: None,
            trace_id: None,
        });
        self.linger().await;
    }

    /// Sends a response generated by the gateway or a plugin, after the header filters.
    /// `body_read`: whether the request body was fully read (`None`: not touched yet; skipped
    /// when it is already in the buffer). Keeps the connection only when the body is behind
    /// us; otherwise closes after lingering.
    pub(crate) async fn respond(
        &mut self,
        head: &RequestHead,
        s: &Settings,
        resp: &Response,
        body_read: Option<bool>,
        plugged: Plugged<'_, '_>,
    ) -> Outcome {
        let body_skipped = match (body_read, head.framing()) {
            (Some(done), _) => done,
            (None, Framing::None) => true,
            (None, Framing::Length(n)) if n <= self.buf.len() as u64 => {
                self.buf.advance(n as usize);
                true
            }
            (None, _) => false,
        };
        let keep = body_skipped && self.may_keep_alive(head, s);
        let connection = self.connection_header(head, keep);
        self.out.clear();
        let is_head = head.method() == sluice_router::Method::Head;
        let sent = match plugged {
            Some((chain, cx)) => {
                let consumer = cx.consumer().map(|c| &c.chain);
                for e in phase(chain, consumer, |c| &c.header_filter) {
                    e.plugin.header_filter(head, ResponseView::Own(resp), cx);
                }
                write::own_response(&mut self.out, resp, connection, &cx.response, is_head);
                write::own_response_size(resp, &cx.response, is_head)
            }
            None => {
                let none = ResponseEdits::default();
                write::own_response(&mut self.out, resp, connection, &none, is_head);
                write::own_response_size(resp, &none, is_head)
            }
        };
        let next = match timed(
            &mut self.timer,
            s.client_send,
            crate::client_io::send(&mut self.io, &self.out),
        )
        .await
        {
            Ok(Ok(())) if keep => Next::KeepAlive,
            Ok(Ok(())) if !body_skipped => Next::Linger,
            _ => Next::Close,
        };
        let mut o = Outcome::new(next, sent.0);
        o.bytes = sent.1;
        o
    }

    /// True when nothing but the client's wishes stands against reusing the connection.
    pub(crate) fn may_keep_alive(&self, head: &RequestHead, s: &Settings) -> bool {
        head.keep_alive() && self.served < s.keepalive_requests && !self.w.draining.get()
    }

    /// The `Connection` field for a response to `head`.
    pub(crate) fn connection_header(&self, head: &RequestHead, keep: bool) -> ConnectionHeader {
        match (keep, head.version()) {
            (false, _) => ConnectionHeader::Close,
            (true, 0) => ConnectionHeader::KeepAlive,
            (true, _) => ConnectionHeader::None,
        }
    }

    /// Over TLS, ends the session with a close_notify alert before the connection closes,
    /// whoever ends it and why. A client that sees the connection end without one treats the
    /// session as truncated, and OpenSSL then refuses to resume it: every next connection
    /// would pay a full handshake.
    async fn close_notify(&mut self) {
        if let ClientIo::Tls(tls) = &mut self.io
            && !tls.get_ref().1.is_handshaking()
        {
            tls.get_mut().1.send_close_notify();
            let _ = timed(&mut self.timer, CLOSE_NOTIFY, self.io.flush()).await;
        }
    }

    /// Half-closes, then reads and drops what the client still sends for a while, so that it
    /// sees our response rather than a reset caused by unread data.
    async fn linger(&mut self) {
        let _ = self.io.shutdown().await;
        let deadline = Instant::now() + LINGER;
        let mut drained = 0;
        let mut scratch = [0u8; 8192];
        while drained < LINGER_BYTES {
            match until(&mut self.timer, deadline, self.io.read(&mut scratch)).await {
                Ok(Ok(n)) if n > 0 => drained += n,
                _ => break,
            }
        }
    }

    /// Counts and logs an answered request (`observe.rs`).
    fn finish(
        &self,
        head: &RequestHead,
        route: Option<&Route>,
        o: &Outcome,
        started: Option<u64>,
        snap: &Snapshot,
    ) {
        let upstream = o.node.map(|(u, _)| u).or(o.upstream).map(|u| {
            (
                &*snap.upstreams[u as usize],
                o.node.map(|(_, n)| n as usize),
                o.answer,
            )
        });
        self.w.finish(&Exchange {
            proto: self.proto(),
            request: View::Head(head),
            version: head.version(),
            method: head.method(),
            client: self.client(),
            route,
            status: o.status,
            bytes_in: o.bytes_in,
            bytes_out: o.bytes,
            started,
            upstream,
            consumer: o
                .consumer
                .and_then(|i| snap.consumers.get(i as usize))
                .map(|c| &*c.username),
            trace_id: o.trace_id,
        });
    }

    fn proto(&self) -> Proto {
        if self.io.is_bridged() {
            Proto::Http2
        } else {
            Proto::Http1
        }
    }

    fn client(&self) -> Client<'_> {
        Client {
            ip: &self.client_ip,
            peer: self.peer,
            local: self.local,
            https: self.io.is_https(),
            subject: self.client_subject.as_deref(),
        }
    }
}

/// The entries of one phase: the route's, merged with the identified consumer's (whose
/// configuration of a plugin wins), in priority order.
/// Runs the phases before the proxy: rewrite, access (with the consumer's plugins merged in once
/// an auth plugin identified one) and before_proxy. `Err`: a plugin answered the request (after
/// waiting, for a delayed answer).
pub(crate) async fn request_phases(
    chain: &Chain,
    head: &mut RequestHead,
    cx: &mut Ctx<'_>,
    w: &Worker,
) -> Result<(), Response> {
    let r = phases(chain, head, cx).await;
    if let Err((plugin, resp)) = &r
        && w.metrics.enabled()
    {
        w.metrics.rejected(plugin, resp.status);
    }
    r.map_err(|(_, resp)| resp)
}

/// The phases; `Err`: the plugin that answered, and its answer.
async fn phases(
    chain: &Chain,
    head: &mut RequestHead,
    cx: &mut Ctx<'_>,
) -> Result<(), (&'static str, Response)> {
    async fn step(flow: Flow) -> Result<(), Response> {
        match flow {
            Flow::Continue => Ok(()),
            Flow::Sleep(d) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            Flow::Delayed(d, r) => {
                tokio::time::sleep(d).await;
                Err(*r)
            }
            Flow::Respond(r) => Err(r),
        }
    }
    for e in chain.rewrite.iter() {
        step(e.plugin.rewrite(head, cx))
            .await
            .map_err(|r| (e.name, r))?;
    }
    let consumer = cx.consumer().map(|c| &c.chain);
    for e in phase(chain, consumer, |c| &c.access) {
        let flow = if e.plugin.phases().contains(Phases::ACCESS_ASYNC) {
            e.plugin.access_async(head, cx).await
        } else {
            e.plugin.access(head, cx)
        };
        step(flow).await.map_err(|r| (e.name, r))?;
    }
    for e in phase(chain, consumer, |c| &c.before_proxy) {
        step(e.plugin.before_proxy(head, cx))
            .await
            .map_err(|r| (e.name, r))?;
    }
    Ok(())
}

pub(crate) fn phase<'a>(
    chain: &'a Chain,
    consumer: Option<&'a Chain>,
    pick: fn(&Chain) -> &[ChainEntry],
) -> impl Iterator<Item = &'a ChainEntry> + 'a {
    let (theirs, all): (&[ChainEntry], &[ChainEntry]) = match consumer {
        Some(c) => (pick(c), &c.all),
        None => (&[], &[]),
    };
    sluice_core::plugin::merged(pick(chain), theirs, all)
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("client_ip", &String::from_utf8_lossy(&self.client_ip))
            .finish()
    }
}
