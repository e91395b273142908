//! HTTP/2 to upstream nodes (`http2: true`, and the connections of `scheme: grpc`).
//!
//! Each worker holds one multiplexed HTTP/2 connection per node and opens another only when
//! it breaks. The HTTP/1.1 engine reaches it through a pseudo-connection ([`H2Io`]) that
//! turns each HTTP/1.1 request written to it into a stream on the shared connection and gives
//! the answer back as HTTP/1.1, as the engine reads it. The engine keeps these in its
//! keep-alive pool like any connection, so balancing, retries, timeouts, every plugin phase and
//! the access log work unchanged, while many requests share few TCP connections.

use std::future::Future;
use std::io;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use h2::client::ResponseFuture;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Method};
use sluice_core::http::chunked::Decoder;
use sluice_core::http::response::{self, ResponseHead};
use sluice_core::http::{Framing, HeaderPos};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tracing::debug;

use crate::error::{Error, Kind};
use crate::h2_down::BodyOut;
use crate::h2_head::{BadHead, Head2, given_authority, node_request, not_for_h2};
use crate::upstream::{H2Conn, UpIo, Upstream};
use crate::worker::Worker;

/// Largest request head read from the engine (it writes heads within the configured limits).
const MAX_HEAD: usize = 1 << 20;

/// The worker's connection to a node, ready for a new stream; None (and the entry gone)
/// when it has ended.
async fn usable(w: &Worker, key: u64) -> Option<H2Conn> {
    let c = w.up.h2_conns.borrow().get(&key).cloned()?;
    if !*c.ended.borrow() {
        let ended = c.ended.clone();
        if let Ok(send) = c.send.ready().await {
            return Some(H2Conn { send, ended });
        }
    }
    // Only the entry that failed goes: another request may have put a new one meanwhile.
    let mut map = w.up.h2_conns.borrow_mut();
    if map
        .get(&key)
        .is_some_and(|now| now.ended.same_channel(&c.ended))
    {
        map.remove(&key);
    }
    None
}

/// A ready HTTP/2 sender to `node` of `up`: the worker's connection to it, or a new one.
pub(crate) async fn sender(w: &Worker, up: &Upstream, node: usize) -> Result<H2Conn, Error> {
    let key = up.nodes[node].pool_key;
    if let Some(c) = usable(w, key).await {
        return Ok(c);
    }
    // One connection attempt per node at a time: requests that arrive together wait for it
    // rather than each opening a connection of its own; when that attempt fails, they fail
    // with it instead of each trying again after the one before (k × the connect timeout
    // for the k-th, on a node that does not answer).
    let arrived = Instant::now();
    let turn =
        w.up.h2_connecting
            .borrow_mut()
            .entry(key)
            .or_default()
            .clone();
    let mut last_failure = turn.lock().await;
    if let Some((at, e)) = &*last_failure
        && *at >= arrived
    {
        return Err(e.clone());
    }
    if let Some(c) = usable(w, key).await {
        return Ok(c);
    }
    match open_connection(w, up, node).await {
        Ok(c) => Ok(c),
        Err(e) => {
            *last_failure = Some((Instant::now(), e.clone()));
            Err(e)
        }
    }
}

/// Opens the worker's HTTP/2 connection to `node` and makes it the one requests use.
async fn open_connection(w: &Worker, up: &Upstream, node: usize) -> Result<H2Conn, Error> {
    let io =
        match tokio::time::timeout(up.timeouts.connect, crate::upstream::connect_node(up, node))
            .await
        {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::with_cause(
                    Kind::ConnectTimeout,
                    format_args!("after {:?}", up.timeouts.connect),
                ));
            }
        };
    let (s, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(4 << 20)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| {
            Error::with_cause(Kind::ConnectFailed, format_args!("HTTP/2 handshake: {e}"))
        })?;
    let node_name = up.nodes[node].authority.clone();
    let (tx, ended) = watch::channel(false);
    tokio::task::spawn_local(async move {
        if let Err(e) = conn.await {
            debug!(node = %node_name, cause = %e, "HTTP/2 upstream connection ended");
        }
        let _ = tx.send(true);
    });
    let c = H2Conn { send: s, ended };
    w.up.h2_conns
        .borrow_mut()
        .insert(up.nodes[node].pool_key, c.clone());
    let send = c
        .send
        .ready()
        .await
        .map_err(|e| Error::with_cause(Kind::ConnectFailed, format_args!("HTTP/2: {e}")))?;
    Ok(H2Conn {
        send,
        ended: c.ended,
    })
}

/// A connection to `node` of `up` for the HTTP/1.1 engine: a new TCP (or TLS) connection, or
/// with `http2` a pseudo-connection over the worker's HTTP/2 connection to the node.
pub(crate) async fn connect(
    w: &Rc<Worker>,
    up: &Arc<Upstream>,
    node: usize,
) -> Result<UpIo, Error> {
    if up.http2 {
        let conn = sender(w, up, node).await?;
        Ok(UpIo::H2(Box::new(H2Io::new(conn, w, up, node))))
    } else {
        crate::upstream::connect_node(up, node).await
    }
}

/// Parses the HTTP/1.1 request head at the start of `raw` (as the HTTP/2 fast path writes it
/// to a pseudo-connection; the engine gives its heads typed). `Ok(None)`: incomplete.
fn head2(raw: &[u8]) -> Result<Option<(Head2, usize)>, BadHead> {
    // Above the engine's own ceiling on request fields, plus the forwarded ones it adds.
    let mut fields = [httparse::EMPTY_HEADER; 320];
    let mut parsed = httparse::Request::new(&mut fields);
    let len = match parsed.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(BadHead),
    };
    let mut headers = HeaderMap::with_capacity(parsed.headers.len() + 1);
    let mut authority = None;
    let mut framing = Framing::None;
    for h in parsed.headers.iter() {
        // `from_bytes` lowercases as it goes: no lowercased copy of the name to allocate.
        let name = http::HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| BadHead)?;
        if name == http::header::HOST {
            authority = std::str::from_utf8(h.value).ok().map(str::to_owned);
            continue;
        }
        if name == http::header::TRANSFER_ENCODING {
            framing = Framing::Chunked;
            continue;
        }
        if not_for_h2(&name) {
            continue;
        }
        if name == http::header::CONTENT_LENGTH && framing == Framing::None {
            framing =
                Framing::Length(sluice_core::http::parse_content_length(h.value).ok_or(BadHead)?);
        }
        headers.append(name, HeaderValue::from_bytes(h.value).map_err(|_| BadHead)?);
    }
    if framing == Framing::Chunked {
        // Sent as DATA frames: a length beside chunked framing is not the body's.
        headers.remove(http::header::CONTENT_LENGTH);
    }
    let method = parsed
        .method
        .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
        .ok_or(BadHead)?;
    Ok(Some((
        Head2 {
            method,
            path: parsed.path.ok_or(BadHead)?.to_owned(),
            authority,
            headers,
            framing,
        },
        len,
    )))
}

/// Writes an HTTP/2 response head as an HTTP/1.1 status line and field lines (no final CRLF),
/// without the HTTP/1.1 framing fields an HTTP/2 head cannot carry anyway.
pub(crate) fn h1_response_head(out: &mut Vec<u8>, status: http::StatusCode, headers: &HeaderMap) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (n, v) in end_to_end(headers) {
        sluice_core::http::write::line(out, n, v);
    }
}

/// An HTTP/2 head's fields without the HTTP/1.1 framing fields it cannot carry anyway.
fn end_to_end(headers: &HeaderMap) -> impl Iterator<Item = (&[u8], &[u8])> {
    headers
        .iter()
        .filter(|(n, _)| *n != http::header::TRANSFER_ENCODING && *n != http::header::CONNECTION)
        .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
}

/// A pseudo-connection over the worker's HTTP/2 connection to a node: one stream at a time,
/// written and read by the HTTP/1.1 engine as any pooled connection (so balancing, retries,
/// timeouts, every plugin phase and the access log work unchanged), translated as it goes: a
/// request head written to it is sent as a HEADERS frame once complete, its body (framed as
/// the head said) as DATA frames as the stream's window allows, and the answer is read back
/// as an HTTP/1.1 head and body (chunked when it has no `content-length`).
///
/// No pipe and no task: the engine's own reads and writes drive the stream, on the
/// connection's task (before, an in-memory pipe and a task per pseudo-connection carried the
/// bytes, bench/h2_upstream.sh). Dropped mid-exchange (the engine gave up: a timeout, the
/// client gone), it drops the stream's handles, and `h2` resets the stream.
pub(crate) struct H2Io {
    conn: H2Conn,
    /// To move to the node's next connection when this one takes no new stream (its GOAWAY).
    w: Weak<Worker>,
    up: Arc<Upstream>,
    node: usize,
    /// Request bytes not sent yet: a head not yet complete, or body bytes in their HTTP/1.1
    /// framing, or (after the body) the engine's next request.
    raw: BytesMut,
    tx: Tx,
    /// Body data decoded from `raw`, waiting for the stream's flow-control window.
    pending: BytesMut,
    /// The body ended: the last DATA frame carries END_STREAM.
    pending_end: bool,
    rx: Rx,
    /// Answer bytes, as HTTP/1.1, for the engine's next read.
    out: BytesMut,
    reconnect: Option<Reconnect>,
    /// The next request's head, given typed (`Multiplexed::set_head`) rather than written.
    typed: Option<Result<Head2, BadHead>>,
    /// The exchange in progress had its head given typed: its answer's head is given typed
    /// too (`Multiplexed::answer_head`), not written to `out`.
    typed_answer: bool,
    /// That answer's head, for `answer_head`: its parts, whether the request was HEAD, and
    /// whether its body is given chunked.
    answer: Option<(http::response::Parts, bool, bool)>,
}

/// The node's next connection, being opened (or waited for).
type Reconnect = std::pin::Pin<Box<dyn Future<Output = Result<H2Conn, Error>>>>;

/// The request side of the exchange in progress.
enum Tx {
    /// Waiting for (the rest of) a head.
    Head,
    /// The body is being sent.
    Body {
        stream: SendStream<Bytes>,
        framing: BodyOut,
    },
    /// The request went whole.
    Sent,
}

/// The answer side of the exchange in progress.
enum Rx {
    /// No request in flight.
    Idle,
    Waiting {
        fut: ResponseFuture,
        is_head: bool,
    },
    Body {
        body: RecvStream,
        chunked: bool,
    },
    /// The answer was read whole.
    Done,
}

impl std::fmt::Debug for H2Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Io")
            .field("node", &self.up.nodes[self.node].authority)
            .finish()
    }
}

fn io_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl H2Io {
    fn new(conn: H2Conn, w: &Rc<Worker>, up: &Arc<Upstream>, node: usize) -> H2Io {
        H2Io {
            conn,
            w: Rc::downgrade(w),
            up: up.clone(),
            node,
            raw: BytesMut::new(),
            tx: Tx::Head,
            pending: BytesMut::new(),
            pending_end: false,
            rx: Rx::Idle,
            out: BytesMut::new(),
            reconnect: None,
            typed: None,
            typed_answer: false,
            answer: None,
        }
    }

    /// Ready for a new stream: on this connection, or on the node's next one when this one
    /// takes no new stream (the node is closing it).
    fn poll_stream_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if let Some(next) = self.reconnect.as_mut() {
                let conn = ready!(next.as_mut().poll(cx));
                self.reconnect = None;
                self.conn = conn.map_err(io_error)?;
            }
            match self.conn.send.poll_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => return Poll::Ready(Ok(())),
                Poll::Ready(Err(_)) => {
                    let (w, up, node) = (self.w.clone(), self.up.clone(), self.node);
                    self.reconnect = Some(Box::pin(async move {
                        let w = w.upgrade().ok_or_else(|| Error::new(Kind::ConnectFailed))?;
                        sender(&w, &up, node).await
                    }));
                }
            }
        }
    }

    /// Sends the next request's head as a new stream: the one given typed, or the one written
    /// in `raw` once it is complete. False: not complete yet.
    fn start(&mut self) -> io::Result<bool> {
        let bad = || io_error("request head not expressible over HTTP/2");
        if let Some(typed) = self.typed.take() {
            self.typed_answer = true;
            self.start_with(typed.map_err(|BadHead| bad())?)?;
            return Ok(true);
        }
        self.typed_answer = false;
        let (head, len) = match head2(&self.raw) {
            Ok(Some(h)) => h,
            Ok(None) if self.raw.len() > MAX_HEAD => {
                return Err(io_error("request head too large for HTTP/2"));
            }
            Ok(None) => return Ok(false),
            Err(BadHead) => return Err(bad()),
        };
        self.raw.advance(len);
        self.start_with(head)?;
        Ok(true)
    }

    fn start_with(&mut self, head: Head2) -> io::Result<()> {
        let authority = match head.authority {
            Some(a) => given_authority(a),
            None => self.up.nodes[self.node].h2_authority(),
        }
        .map_err(io_error)?;
        let is_head = head.method == Method::HEAD;
        let req = node_request(
            self.up.tls.is_some(),
            head.method,
            authority,
            head.path,
            head.headers,
        )
        .map_err(io_error)?;
        let framing = match head.framing {
            Framing::Chunked => Some(BodyOut::Chunked(Decoder::new())),
            Framing::Length(n) if n > 0 => Some(BodyOut::Length(n)),
            _ => None,
        };
        let (fut, stream) = self
            .conn
            .send
            .send_request(req, framing.is_none())
            .map_err(io_error)?;
        self.rx = Rx::Waiting { fut, is_head };
        self.tx = match framing {
            Some(framing) => Tx::Body { stream, framing },
            None => Tx::Sent,
        };
        self.pending_end = false;
        Ok(())
    }

    /// Moves the body bytes of `raw` to `pending`, without their HTTP/1.1 framing.
    fn decode(&mut self) -> io::Result<()> {
        let Tx::Body { framing, .. } = &mut self.tx else {
            return Ok(());
        };
        if framing.unframe(&mut self.raw, &mut self.pending)? {
            self.pending_end = true;
        }
        Ok(())
    }

    /// Sends `pending` as the stream's window allows; Ready once all of it went (with
    /// END_STREAM when the body ended).
    fn poll_upload(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Tx::Body { stream, .. } = &mut self.tx else {
            return Poll::Ready(Ok(()));
        };
        ready!(crate::h2_down::poll_window(
            stream,
            &mut self.pending,
            self.pending_end,
            cx
        ))?;
        if self.pending_end {
            self.tx = Tx::Sent;
        }
        Poll::Ready(Ok(()))
    }

    /// The answer was read whole: ready for the engine's next request. A body not sent whole
    /// by then (the node answered early) is given up: its stream is dropped (and reset), and
    /// what the engine wrote of it with it.
    fn settle(&mut self) {
        if matches!(self.rx, Rx::Done) && self.out.is_empty() {
            if let Tx::Body { .. } = self.tx {
                self.raw.clear();
                self.pending.clear();
            }
            self.rx = Rx::Idle;
            self.tx = Tx::Head;
        }
    }

    /// Moves what the answer has to `out`: its head, then its body. Ready once `out` has
    /// bytes or the answer ended; Pending when neither.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match &mut self.rx {
                Rx::Idle | Rx::Done => return Poll::Ready(Ok(())),
                Rx::Waiting { fut, is_head } => {
                    let resp = ready!(std::pin::Pin::new(fut).poll(cx)).map_err(io_error)?;
                    let (parts, body) = resp.into_parts();
                    let status = parts.status;
                    let bodiless = *is_head || sluice_core::http::write::bodiless(status.as_u16());
                    let chunked =
                        !bodiless && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
                    let is_head = *is_head;
                    if self.typed_answer {
                        // The engine takes the head typed (`answer_head`) after a read that
                        // gives no bytes.
                        self.answer = Some((parts, is_head, chunked));
                        self.rx = if bodiless {
                            Rx::Done
                        } else {
                            Rx::Body { body, chunked }
                        };
                        return Poll::Ready(Ok(()));
                    }
                    let mut head = Vec::with_capacity(512);
                    h1_response_head(&mut head, status, &parts.headers);
                    if chunked {
                        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
                    }
                    head.extend_from_slice(b"\r\n");
                    self.out.extend_from_slice(&head);
                    self.rx = if bodiless {
                        Rx::Done
                    } else {
                        Rx::Body { body, chunked }
                    };
                }
                Rx::Body { body, chunked } => {
                    let chunked = *chunked;
                    let next = match body.poll_data(cx) {
                        // The head goes at once when no body bytes are here yet: an answer
                        // whose body comes later (server-sent events) must not wait.
                        Poll::Pending if !self.out.is_empty() => return Poll::Ready(Ok(())),
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(next) => next,
                    };
                    match next {
                        Some(Ok(chunk)) => {
                            let _ = body.flow_control().release_capacity(chunk.len());
                            if chunk.is_empty() {
                                continue;
                            }
                            if chunked {
                                let _ = std::fmt::Write::write_fmt(
                                    &mut self.out,
                                    format_args!("{:x}\r\n", chunk.len()),
                                );
                            }
                            self.out.extend_from_slice(&chunk);
                            if chunked {
                                self.out.extend_from_slice(b"\r\n");
                            }
                            if body.is_end_stream() {
                                // END_STREAM came with the data: no trailers, no more reads
                                // (the engine stops at the end of a `content-length` body).
                                if chunked {
                                    self.out.extend_from_slice(b"0\r\n\r\n");
                                }
                                self.rx = Rx::Done;
                            }
                            return Poll::Ready(Ok(()));
                        }
                        Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
                        None => {
                            // Trailers end the stream; HTTP/1.1 clients get the body without
                            // them.
                            match body.poll_trailers(cx) {
                                Poll::Pending if !self.out.is_empty() => {
                                    return Poll::Ready(Ok(()));
                                }
                                Poll::Pending => return Poll::Pending,
                                Poll::Ready(_) => {}
                            }
                            if chunked {
                                self.out.extend_from_slice(b"0\r\n\r\n");
                            }
                            self.rx = Rx::Done;
                        }
                    }
                }
            }
        }
    }
}

impl crate::upstream::Multiplexed for H2Io {
    fn set_head(&mut self, head: Result<Head2, BadHead>) {
        self.typed = Some(head);
    }

    fn answer_head(
        &mut self,
        max_size: usize,
        fields: &mut Vec<HeaderPos>,
    ) -> Option<Result<ResponseHead, (Error, bool)>> {
        let (parts, is_head, chunked) = self.answer.take()?;
        let head = response::from_fields(
            parts.status.as_u16(),
            parts.status.canonical_reason().unwrap_or("").as_bytes(),
            end_to_end(&parts.headers),
            chunked,
            is_head,
            max_size,
            fields,
        )
        .map_err(|e| (Error::with_cause(Kind::InvalidResponse, e), false));
        Some(head)
    }

    fn still_open(&mut self) -> bool {
        self.settle();
        matches!(self.rx, Rx::Idle)
            && self.out.is_empty()
            && self.answer.is_none()
            && !*self.conn.ended.borrow()
    }
}

impl AsyncWrite for H2Io {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match me.tx {
            Tx::Head => {
                ready!(me.poll_stream_ready(cx))?;
                me.raw.extend_from_slice(buf);
                if me.start()? {
                    me.decode()?;
                    // What the window takes now goes now; the rest on the next write or read.
                    if let Poll::Ready(Err(e)) = me.poll_upload(cx) {
                        return Poll::Ready(Err(e));
                    }
                }
            }
            Tx::Body { .. } => {
                // One write's worth at most waits for the window.
                ready!(me.poll_upload(cx))?;
                me.raw.extend_from_slice(buf);
                me.decode()?;
                if let Poll::Ready(Err(e)) = me.poll_upload(cx) {
                    return Poll::Ready(Err(e));
                }
            }
            // After the body: the engine's next request, sent once this answer is read.
            Tx::Sent => me.raw.extend_from_slice(buf),
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_upload(cx)
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for H2Io {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        // A head given typed with no body to write after it starts here, when the engine
        // reads for the answer.
        if matches!(me.tx, Tx::Head) && me.typed.is_some() {
            ready!(me.poll_stream_ready(cx))?;
            me.start()?;
            me.decode()?;
        }
        // The body may still wait for the window while the engine waits for the answer: its
        // reads drive the upload too. A failed upload does not fail the read: the node may
        // have answered early (a 413), and the answer is what the engine needs.
        if let Poll::Ready(Err(e)) = me.poll_upload(cx) {
            debug!(cause = %e, "HTTP/2 upstream: request body not sent whole");
            me.tx = Tx::Sent;
            me.pending.clear();
        }
        if me.out.is_empty() {
            ready!(me.poll_answer(cx))?;
        }
        if me.answer.is_some() {
            // The answer's head, typed: this read gives no bytes, `answer_head` gives it.
            return Poll::Ready(Ok(()));
        }
        if me.out.is_empty() {
            // No answer in progress: the connection's end is an end of file (the pool drops
            // it); otherwise there is nothing to read.
            if *me.conn.ended.borrow() {
                return Poll::Ready(Ok(()));
            }
            return Poll::Pending;
        }
        let n = me.out.len().min(buf.remaining());
        buf.put_slice(&me.out[..n]);
        me.out.advance(n);
        me.settle();
        Poll::Ready(Ok(()))
    }
}
