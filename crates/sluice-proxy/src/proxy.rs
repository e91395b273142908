//! Forwarding one request to an upstream node and its response back (RFC 9110/9112).
//!
//! Phases, in order:
//! A. pick a node (smooth weighted round-robin) and get a connection: a pooled one that is
//!    still open, or a new one; a connect failure moves on to the next node, up to `retries`;
//! B. send the head and whatever part of the body has arrived, in one write; a pooled
//!    connection that turns out closed before any response byte is replaced by a new one
//!    when the request can safely be sent again (idempotent, body fully buffered);
//! C. stream the rest of the body;
//! D. read the response head (1xx are forwarded or dropped, 101 switches to a tunnel);
//! E. send the head and body to the client, re-framed when needed; return the connection to
//!    the pool when the exchange ended cleanly.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use sluice_router::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::{debug, error};

use crate::conn::{Conn, Next, Outcome};
use crate::error::{Error, Kind};
use crate::h1::Framing;
use crate::h1::chunked::{self, Decoder};
use crate::h1::request::RequestHead;
use crate::h1::response::{self, ResponseHead};
use crate::h1::write::{self, ClientFraming, ConnectionHeader, Forwarded};
use crate::io::timed;
use crate::snapshot::{PassHostRt, Route, Settings, Snapshot, Upstream};
use crate::upstream::LocalUpstream;

/// Room kept free in a read buffer before each read.
const READ_CHUNK: usize = 16 * 1024;

/// A connection to an upstream node, for one exchange.
struct UpConn {
    io: TcpStream,
    node: usize,
    /// Requests already served on it (for `keepalive_pool.requests`).
    served: u32,
    /// Taken from the pool: it may have been closed by the upstream meanwhile.
    reused: bool,
}

/// Progress of the request body towards the upstream.
#[derive(Debug)]
enum ReqBody {
    Length { remaining: u64 },
    Chunked { decoder: Decoder, total: u64 },
    Done,
}

impl ReqBody {
    fn new(f: Framing) -> Self {
        match f {
            Framing::Length(n) => ReqBody::Length { remaining: n },
            Framing::Chunked => ReqBody::Chunked {
                decoder: Decoder::new(),
                total: 0,
            },
            Framing::None | Framing::Close => ReqBody::Done,
        }
    }

    fn is_done(&self) -> bool {
        matches!(self, ReqBody::Done)
    }

    /// Moves the body bytes available in `buf` to `out`, re-encoding chunks.
    fn pump(&mut self, buf: &mut BytesMut, out: &mut Vec<u8>, max: u64) -> Result<(), Error> {
        match self {
            ReqBody::Done => Ok(()),
            ReqBody::Length { remaining } => {
                pump_length(remaining, buf, out);
                if *remaining == 0 {
                    *self = ReqBody::Done;
                }
                Ok(())
            }
            ReqBody::Chunked { decoder, total } => {
                let (n, done) = pump_chunks(decoder, buf, out, true, Kind::InvalidBody)?;
                *total += n;
                if *total > max {
                    return Err(Error::new(Kind::BodyTooLarge));
                }
                if done {
                    *self = ReqBody::Done;
                }
                Ok(())
            }
        }
    }
}

/// Progress of the response body towards the client.
#[derive(Debug)]
enum RespBody {
    Length {
        remaining: u64,
    },
    Chunked {
        decoder: Decoder,
        rechunk: bool,
    },
    /// Until the upstream closes.
    Close {
        rechunk: bool,
    },
    Done,
}

impl RespBody {
    fn new(f: Framing, rechunk: bool) -> Self {
        match f {
            Framing::None | Framing::Length(0) => RespBody::Done,
            Framing::Length(n) => RespBody::Length { remaining: n },
            Framing::Chunked => RespBody::Chunked {
                decoder: Decoder::new(),
                rechunk,
            },
            Framing::Close => RespBody::Close { rechunk },
        }
    }

    fn is_done(&self) -> bool {
        matches!(self, RespBody::Done)
    }

    /// Moves body bytes from `buf` to `out`; returns the payload bytes moved.
    fn pump(&mut self, buf: &mut BytesMut, out: &mut Vec<u8>) -> Result<u64, Error> {
        match self {
            RespBody::Done => Ok(0),
            RespBody::Length { remaining } => {
                let n = pump_length(remaining, buf, out);
                if *remaining == 0 {
                    *self = RespBody::Done;
                }
                Ok(n)
            }
            RespBody::Close { rechunk } => {
                let n = buf.len();
                if n > 0 {
                    if *rechunk {
                        write::chunk_header(out, n);
                    }
                    out.extend_from_slice(buf);
                    if *rechunk {
                        out.extend_from_slice(b"\r\n");
                    }
                    buf.clear();
                }
                Ok(n as u64)
            }
            RespBody::Chunked { decoder, rechunk } => {
                let (n, done) = pump_chunks(decoder, buf, out, *rechunk, Kind::InvalidResponse)?;
                if done {
                    *self = RespBody::Done;
                }
                Ok(n)
            }
        }
    }

    /// The upstream closed: fine for a close-delimited body (finish it), a truncation
    /// otherwise.
    fn on_eof(&mut self, out: &mut Vec<u8>) -> bool {
        match self {
            RespBody::Close { rechunk } => {
                if *rechunk {
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                *self = RespBody::Done;
                true
            }
            _ => false,
        }
    }
}

/// Moves up to `remaining` bytes of a Content-Length body from `buf` to `out`.
fn pump_length(remaining: &mut u64, buf: &mut BytesMut, out: &mut Vec<u8>) -> u64 {
    let n = (*remaining).min(buf.len() as u64);
    out.extend_from_slice(&buf[..n as usize]);
    buf.advance(n as usize);
    *remaining -= n;
    n
}

/// Decodes the chunks available in `buf` and moves their payload to `out`, re-encoded as chunks
/// when `rechunk` (chunk extensions and trailers are dropped). Returns the payload bytes moved
/// and whether the body ended; a framing error becomes `bad`.
fn pump_chunks(
    decoder: &mut Decoder,
    buf: &mut BytesMut,
    out: &mut Vec<u8>,
    rechunk: bool,
    bad: Kind,
) -> Result<(u64, bool), Error> {
    let mut moved = 0;
    loop {
        match decoder.decode(buf).map_err(|e| Error::with_cause(bad, e))? {
            chunked::Step::Data {
                consumed,
                start,
                end,
            } => {
                if rechunk {
                    write::chunk_header(out, end - start);
                }
                out.extend_from_slice(&buf[start..end]);
                if rechunk {
                    out.extend_from_slice(b"\r\n");
                }
                moved += (end - start) as u64;
                buf.advance(consumed);
            }
            chunked::Step::NeedMore { consumed } => {
                buf.advance(consumed);
                return Ok((moved, false));
            }
            chunked::Step::Done { consumed } => {
                buf.advance(consumed);
                if rechunk {
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                return Ok((moved, true));
            }
        }
    }
}

/// How a failed attempt may be retried.
enum Attempt {
    /// The response head arrived.
    Response(ResponseHead, Bytes, UpConn),
    /// A pooled connection was found closed before any response byte, and the request can be
    /// sent again on a new connection to the same node.
    Stale(usize, Error),
    /// Give up with this error (after sending `sent_body` of the request body).
    Failed(Option<usize>, Error),
    /// The client side failed while sending the body; the outcome is decided.
    Client(Outcome),
}

impl Conn {
    /// Proxies one request and writes its response. Returns what to do with the connection.
    pub(crate) async fn proxy(
        &mut self,
        snap: &Snapshot,
        route: &Route,
        head: &RequestHead,
        hb: &Bytes,
    ) -> Outcome {
        let s = &snap.settings;
        if let Framing::Length(n) = head.framing
            && n > s.max_body
        {
            // Closed even when the body happens to be buffered already: a client sending
            // more than the limit is not worth keeping.
            return self
                .respond_own(head, s, 413, "request body too large", Some(false))
                .await;
        }
        let up = &*route.upstream;
        let websocket = head.websocket && route.websocket;
        let mut body = ReqBody::new(head.framing);
        let mut fresh_to: Option<usize> = None;
        let mut continue_sent = false;
        let mut tried = 0u64;
        loop {
            let attempt = self
                .attempt(
                    route,
                    head,
                    hb,
                    s,
                    websocket,
                    &mut body,
                    &mut tried,
                    &mut fresh_to,
                    &mut continue_sent,
                )
                .await;
            match attempt {
                Attempt::Response(resp, rb, upc) => {
                    return self
                        .respond(route, head, s, resp, rb, upc, body.is_done(), websocket)
                        .await;
                }
                Attempt::Stale(node, e) => {
                    debug!(route = %route.id, node = %up.nodes[node].authority, cause = %e, "pooled connection was closed; retrying on a new one");
                    fresh_to = Some(node);
                }
                Attempt::Failed(node, e) => {
                    return self.fail(route, head, s, node, e, body.is_done()).await;
                }
                Attempt::Client(o) => return o,
            }
        }
    }

    /// Phases A to D: one attempt at getting a response head.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &mut self,
        route: &Route,
        head: &RequestHead,
        hb: &Bytes,
        s: &Settings,
        websocket: bool,
        body: &mut ReqBody,
        tried: &mut u64,
        fresh_to: &mut Option<usize>,
        continue_sent: &mut bool,
    ) -> Attempt {
        let up = &*route.upstream;
        let t = route.timeouts;
        // A. A connection.
        let mut upc = match fresh_to.take() {
            Some(node) => match self.connect(up, node, t.connect).await {
                Ok(c) => c,
                Err(e) => return Attempt::Failed(Some(node), e),
            },
            None => match self.pick_and_connect(route, tried).await {
                Ok(c) => c,
                Err((node, e)) => return Attempt::Failed(node, e),
            },
        };
        let node = &up.nodes[upc.node];

        // B. Head plus what has arrived of the body, in one write.
        self.out.clear();
        let host: &[u8] = match &up.pass_host {
            PassHostRt::Pass if head.host.is_some() => head.host(hb),
            PassHostRt::Pass | PassHostRt::Node => node.authority.as_bytes(),
            PassHostRt::Rewrite(h) => h,
        };
        write::upstream_request(
            &mut self.out,
            hb,
            head,
            &Forwarded {
                host,
                client_ip: &self.client_ip,
                websocket,
            },
        );
        if let Err(e) = body.pump(&mut self.buf, &mut self.out, s.max_body) {
            return Attempt::Client(self.client_body_error(route, head, s, e).await);
        }
        // When the whole request is in `out`, it can be sent again if this connection was stale.
        let whole_request = body.is_done();
        if head.expect_continue && !body.is_done() && !*continue_sent && self.buf.is_empty() {
            *continue_sent = true;
            let _ = timed(
                &mut self.timer,
                s.client_send,
                self.io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n"),
            )
            .await;
        }
        let retry_stale = upc.reused && whole_request && head.method.is_idempotent();
        match timed(&mut self.timer, t.send, upc.io.write_all(&self.out)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if retry_stale => {
                return Attempt::Stale(upc.node, Error::with_cause(Kind::SendFailed, e));
            }
            Ok(Err(e)) => {
                return Attempt::Failed(Some(upc.node), Error::with_cause(Kind::SendFailed, e));
            }
            Err(_) => return Attempt::Failed(Some(upc.node), Error::new(Kind::SendTimeout)),
        }

        // C. The rest of the body.
        let mut send_error = None;
        while !body.is_done() {
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(READ_CHUNK);
            }
            match timed(
                &mut self.timer,
                s.client_body,
                self.io.read_buf(&mut self.buf),
            )
            .await
            {
                Err(_) => {
                    let e = Error::new(Kind::ClientTimeout);
                    return Attempt::Client(self.client_body_error(route, head, s, e).await);
                }
                Ok(Ok(0)) | Ok(Err(_)) => {
                    // The client went away mid-body: nobody to answer.
                    return Attempt::Client(Outcome::new(Next::Close, 499));
                }
                Ok(Ok(_)) => {}
            }
            self.out.clear();
            if let Err(e) = body.pump(&mut self.buf, &mut self.out, s.max_body) {
                return Attempt::Client(self.client_body_error(route, head, s, e).await);
            }
            match timed(&mut self.timer, t.send, upc.io.write_all(&self.out)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    // The upstream may have answered early (401, 413) and closed: look for
                    // that answer before reporting the failure.
                    send_error = Some(Error::with_cause(Kind::SendFailed, e));
                    break;
                }
                Err(_) => return Attempt::Failed(Some(upc.node), Error::new(Kind::SendTimeout)),
            }
        }

        // D. The response head.
        let retry_stale = retry_stale && send_error.is_none();
        match self
            .read_response_head(&mut upc, head, s, t.read, websocket)
            .await
        {
            Ok((resp, rb)) => Attempt::Response(resp, rb, upc),
            Err((e, nothing_read))
                if retry_stale && nothing_read && e.kind() != Kind::ReadTimeout =>
            {
                Attempt::Stale(upc.node, e)
            }
            Err((e, _)) => Attempt::Failed(Some(upc.node), send_error.unwrap_or(e)),
        }
    }

    /// Picks nodes until one accepts a connection, up to `retries` extra nodes.
    async fn pick_and_connect(
        &mut self,
        route: &Route,
        tried: &mut u64,
    ) -> Result<UpConn, (Option<usize>, Error)> {
        let up = &*route.upstream;
        let retry_deadline = up.retry_timeout.map(|d| Instant::now() + d);
        let mut attempts = 0u32;
        let mut last: Option<(usize, Error)> = None;
        loop {
            let picked = {
                let mut ups = self.w.upstreams.borrow_mut();
                let local = ups.entry(up.uid).or_insert_with(|| LocalUpstream::new(up));
                local
                    .select(up, *tried)
                    .map(|n| (n, local.take(n, up.keepalive.idle)))
            };
            let Some((node, idle)) = picked else {
                return Err(match last {
                    Some((n, e)) => (Some(n), e),
                    None => (None, Error::new(Kind::NoHealthyNode)),
                });
            };
            if node < 64 {
                *tried |= 1 << node;
            }
            if let Some(c) = idle {
                return Ok(UpConn {
                    io: c.io,
                    node,
                    served: c.served,
                    reused: true,
                });
            }
            match self.connect(up, node, route.timeouts.connect).await {
                Ok(c) => return Ok(c),
                Err(e) => {
                    if let Some(l) = self.w.upstreams.borrow_mut().get_mut(&up.uid) {
                        l.mark_failed(up, node);
                    }
                    attempts += 1;
                    let out_of_time = retry_deadline.is_some_and(|d| Instant::now() >= d);
                    if attempts > up.retries || out_of_time {
                        return Err((Some(node), e));
                    }
                    debug!(route = %route.id, node = %up.nodes[node].authority, cause = %e, "connect failed; trying the next node");
                    last = Some((node, e));
                }
            }
        }
    }

    async fn connect(
        &mut self,
        up: &Upstream,
        node: usize,
        timeout: Duration,
    ) -> Result<UpConn, Error> {
        let addr = up.nodes[node].addr;
        match timed(&mut self.timer, timeout, TcpStream::connect(addr)).await {
            Ok(Ok(io)) => {
                let _ = io.set_nodelay(true);
                Ok(UpConn {
                    io,
                    node,
                    served: 0,
                    reused: false,
                })
            }
            Ok(Err(e)) => Err(Error::with_cause(Kind::ConnectFailed, e)),
            Err(_) => Err(Error::with_cause(
                Kind::ConnectTimeout,
                format_args!("after {timeout:?}"),
            )),
        }
    }

    /// Reads up to a final response head, forwarding or dropping 1xx. The error says whether
    /// nothing at all was read (a stale pooled connection).
    async fn read_response_head(
        &mut self,
        upc: &mut UpConn,
        head: &RequestHead,
        s: &Settings,
        read_timeout: Duration,
        websocket: bool,
    ) -> Result<(ResponseHead, Bytes), (Error, bool)> {
        self.up_buf.clear();
        let mut got_any = false;
        loop {
            if !self.up_buf.is_empty() {
                let is_head = head.method == Method::Head;
                match response::parse(
                    &self.up_buf,
                    is_head,
                    s.max_response_head,
                    &mut self.up_headers,
                ) {
                    Ok(Some(resp)) => {
                        let rb = self.up_buf.split_to(resp.len).freeze();
                        if resp.status == 101 && !(websocket && resp.upgrade) {
                            return Err((
                                Error::with_cause(
                                    Kind::InvalidResponse,
                                    "101 without a WebSocket upgrade request",
                                ),
                                false,
                            ));
                        }
                        if resp.status >= 200 || resp.status == 101 {
                            return Ok((resp, rb));
                        }
                        // 1xx: 100 is ours to send (we answered Expect), others go to HTTP/1.1
                        // clients as they are.
                        if resp.status != 100 && head.version == 1 {
                            self.out.clear();
                            write::client_response(
                                &mut self.out,
                                &rb,
                                &resp,
                                ClientFraming::NoBody,
                                ConnectionHeader::None,
                            );
                            let _ =
                                timed(&mut self.timer, s.client_send, self.io.write_all(&self.out))
                                    .await;
                        }
                        let mut hs = resp.headers;
                        hs.clear();
                        self.up_headers = hs;
                        continue;
                    }
                    Ok(None) => {}
                    Err(bad) => return Err((Error::with_cause(Kind::InvalidResponse, bad), false)),
                }
            }
            if self.up_buf.capacity() - self.up_buf.len() < 1024 {
                self.up_buf.reserve(READ_CHUNK);
            }
            match timed(
                &mut self.timer,
                read_timeout,
                upc.io.read_buf(&mut self.up_buf),
            )
            .await
            {
                Ok(Ok(0)) => return Err((Error::new(Kind::UpstreamClosed), !got_any)),
                Ok(Ok(_)) => got_any = true,
                Ok(Err(e)) => return Err((Error::with_cause(Kind::ReadFailed, e), !got_any)),
                Err(_) => {
                    return Err((
                        Error::with_cause(
                            Kind::ReadTimeout,
                            format_args!("after {read_timeout:?}"),
                        ),
                        !got_any,
                    ));
                }
            }
        }
    }

    /// Phase E: the response to the client.
    #[allow(clippy::too_many_arguments)]
    async fn respond(
        &mut self,
        route: &Route,
        head: &RequestHead,
        s: &Settings,
        resp: ResponseHead,
        rb: Bytes,
        mut upc: UpConn,
        request_done: bool,
        websocket: bool,
    ) -> Outcome {
        let up = &*route.upstream;
        let node = upc.node;
        if resp.status == 101 && websocket {
            return self.tunnel(route, resp, rb, upc, s).await;
        }
        let client_framing = match resp.framing {
            Framing::None => ClientFraming::NoBody,
            Framing::Length(_) => ClientFraming::Length,
            Framing::Chunked | Framing::Close if head.version == 1 => ClientFraming::Chunked,
            Framing::Chunked | Framing::Close => ClientFraming::Close,
        };
        let keep =
            request_done && client_framing != ClientFraming::Close && self.may_keep_alive(head, s);
        self.out.clear();
        let connection = self.connection_header(head, keep);
        write::client_response(&mut self.out, &rb, &resp, client_framing, connection);
        let mut body = RespBody::new(resp.framing, client_framing == ClientFraming::Chunked);
        let mut bytes = 0u64;
        let status = resp.status;
        let outcome = |next| Outcome {
            next,
            status,
            bytes: 0,
            node: Some(node as u32),
        };
        match body.pump(&mut self.up_buf, &mut self.out) {
            Ok(n) => bytes += n,
            Err(e) => {
                // Nothing was sent to the client yet: it gets a clean 502.
                return self.fail(route, head, s, Some(node), e, request_done).await;
            }
        }
        if timed(&mut self.timer, s.client_send, self.io.write_all(&self.out))
            .await
            .map_or(true, |r| r.is_err())
        {
            return outcome(Next::Close);
        }
        let read_timeout = route.timeouts.read;
        while !body.is_done() {
            if self.up_buf.capacity() - self.up_buf.len() < 4096 {
                self.up_buf.reserve(READ_CHUNK);
            }
            self.out.clear();
            let read = timed(
                &mut self.timer,
                read_timeout,
                upc.io.read_buf(&mut self.up_buf),
            )
            .await;
            let failure = match read {
                Ok(Ok(0)) => {
                    if body.on_eof(&mut self.out) {
                        None
                    } else {
                        Some(Error::with_cause(
                            Kind::UpstreamClosed,
                            "response body truncated",
                        ))
                    }
                }
                Ok(Ok(_)) => match body.pump(&mut self.up_buf, &mut self.out) {
                    Ok(n) => {
                        bytes += n;
                        None
                    }
                    Err(e) => Some(e),
                },
                Ok(Err(e)) => Some(Error::with_cause(Kind::ReadFailed, e)),
                Err(_) => Some(Error::with_cause(
                    Kind::ReadTimeout,
                    "while reading the response body",
                )),
            };
            if let Some(e) = failure {
                // The head is already out: the client must see a truncated response, never a
                // clean end. Closing without the final chunk or the missing bytes does that.
                error!(route = %route.id, node = %up.nodes[node].authority, status, cause = %e, "response aborted");
                let mut o = outcome(Next::Close);
                o.bytes = bytes;
                return o;
            }
            if !self.out.is_empty()
                && timed(&mut self.timer, s.client_send, self.io.write_all(&self.out))
                    .await
                    .map_or(true, |r| r.is_err())
            {
                let mut o = outcome(Next::Close);
                o.bytes = bytes;
                return o;
            }
        }
        // The exchange ended cleanly: keep the upstream connection if it allows.
        let mut hs = resp.headers;
        hs.clear();
        self.up_headers = hs;
        upc.served += 1;
        if resp.keep_alive
            && request_done
            && self.up_buf.is_empty()
            && upc.served < up.keepalive.requests
        {
            if let Some(l) = self.w.upstreams.borrow_mut().get_mut(&up.uid) {
                l.put(node, upc.io, upc.served, up.keepalive.size);
            }
        } else {
            self.up_buf.clear();
        }
        let next = if keep {
            Next::KeepAlive
        } else if request_done {
            Next::Close
        } else {
            Next::Linger
        };
        let mut o = outcome(next);
        o.bytes = bytes;
        o
    }

    /// After a 101: the client and the upstream talk directly until either closes.
    async fn tunnel(
        &mut self,
        route: &Route,
        resp: ResponseHead,
        rb: Bytes,
        mut upc: UpConn,
        s: &Settings,
    ) -> Outcome {
        let node = upc.node;
        self.out.clear();
        write::client_response(
            &mut self.out,
            &rb,
            &resp,
            ClientFraming::NoBody,
            ConnectionHeader::None,
        );
        // Bytes that followed the 101 belong to the new protocol.
        self.out.extend_from_slice(&self.up_buf);
        self.up_buf.clear();
        if timed(&mut self.timer, s.client_send, self.io.write_all(&self.out))
            .await
            .map_or(true, |r| r.is_err())
        {
            return Outcome {
                next: Next::Close,
                status: 101,
                bytes: 0,
                node: Some(node as u32),
            };
        }
        // Only now may bytes the client sent after its request go upstream (CVE-2026-2833:
        // forwarding them before the upgrade is accepted smuggles a second request).
        if !self.buf.is_empty() {
            let pending = self.buf.split();
            if upc.io.write_all(&pending).await.is_err() {
                return Outcome {
                    next: Next::Close,
                    status: 101,
                    bytes: 0,
                    node: Some(node as u32),
                };
            }
        }
        let bytes = match tokio::io::copy_bidirectional(&mut self.io, &mut upc.io).await {
            Ok((_, down)) => down,
            Err(e) => {
                debug!(route = %route.id, cause = %e, "websocket tunnel ended");
                0
            }
        };
        Outcome {
            next: Next::Close,
            status: 101,
            bytes,
            node: Some(node as u32),
        }
    }

    /// Answers a request whose upstream exchange failed, and logs it once.
    async fn fail(
        &mut self,
        route: &Route,
        head: &RequestHead,
        s: &Settings,
        node: Option<usize>,
        e: Error,
        request_done: bool,
    ) -> Outcome {
        let authority = node.map_or("-", |n| &*route.upstream.nodes[n].authority);
        error!(route = %route.id, node = authority, status = e.status(), side = ?e.side(), cause = %e, "request failed");
        self.up_buf.clear();
        let mut o = self
            .respond_own(head, s, e.status(), e.public_message(), Some(request_done))
            .await;
        o.node = node.map(|n| n as u32);
        o
    }

    /// Answers a request whose body the client sent wrong (too large, bad chunks, too slow).
    async fn client_body_error(
        &mut self,
        route: &Route,
        head: &RequestHead,
        s: &Settings,
        e: Error,
    ) -> Outcome {
        debug!(route = %route.id, cause = %e, "request body refused");
        self.respond_own(head, s, e.status(), e.public_message(), Some(false))
            .await
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("client_ip", &String::from_utf8_lossy(&self.client_ip))
            .finish()
    }
}
