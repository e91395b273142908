//! One downstream HTTP/2 stream as the HTTP/1.1 engine's connection ([`H2Client`]): an
//! in-place pseudo-connection, the downstream twin of `h2_up::H2Io`. The engine takes the
//! stream's head typed ([`H2Client::take_head`]: built from its fields, no HTTP/1.1 text
//! written or parsed), then reads its DATA frames as they come (chunked when the stream declared no length), giving the client its
//! flow-control window back as the engine takes them; the engine's writes are read as an
//! HTTP/1.1 answer and sent as HEADERS and DATA, as the client's window allows.
//!
//! Before, a stream went through an in-memory pipe (`tokio::io::duplex`) with a task of its
//! own for the engine and two pumps translating each way: every byte copied twice more, and
//! a task, a pipe and three wake-ups per stream.
//!
//! A leaf besides the HTTP/2 helpers it shares (`h2_head`, `h2_wire`): `client_io` names it,
//! and it names neither the engine nor the connection that made it.

use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker, ready};

use bytes::{Buf, Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::Response;
use sluice_core::http::Framing;
use sluice_core::http::HeaderPos;
use sluice_core::http::chunked::{Decoder, Step};
use sluice_core::http::write::ClientFraming;
use sluice_core::http::{RequestHead, request, response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tracing::debug;

use crate::h2_head::TypedAnswer;

/// Largest answer head read from the engine (it writes heads within the configured limits).
const MAX_HEAD: usize = 1 << 20;
/// Answer bytes held for the client's window before the engine's writes wait: what the pipe
/// held.
const HELD: usize = 64 << 10;

/// A client's HTTP/2 stream, read and written by the engine as an HTTP/1.1 connection.
pub(crate) struct H2Client {
    pub(crate) https: bool,
    pub(crate) subject: Option<Rc<str>>,
    /// The client's address as text, formatted once for its connection.
    pub(crate) ip: Rc<str>,
    /// The request's head, until the engine takes it ([`H2Client::take_head`]).
    head: Option<http::request::Parts>,
    /// Request bytes not yet read by the engine: chunk framing and data.
    into: BytesMut,
    /// The request body's DATA frames; None once they ended.
    body: Option<RecvStream>,
    /// The body is given to the engine chunked (the stream declared no `content-length`).
    chunked: bool,
    websocket: bool,
    /// The engine answered the WebSocket's extended CONNECT with 101: the stream is a tunnel,
    /// and its DATA frames go to the engine.
    upgraded: bool,
    is_head: bool,
    /// The engine's read, waiting for the answer's end (or a WebSocket's 101).
    reader: Option<Waker>,
    /// The engine's answer bytes not yet read as head or body.
    raw: BytesMut,
    fields: Vec<HeaderPos>,
    /// Answer body bytes, without their HTTP/1.1 framing, waiting for the client's window.
    out: BytesMut,
    /// The answer body ends with `out`.
    out_end: bool,
    /// The client reset the stream while sending its body: the engine's next read fails.
    failed: bool,
    /// The answer head the engine gave typed, sent when the engine next writes, flushes, reads
    /// or lets the stream go (until then a clean 502 may replace it, as an HTTP/1.1 head
    /// waiting in the engine's buffer).
    held: Option<TypedAnswer>,
    tx: Tx,
}

enum Tx {
    /// No answer head yet.
    Head(SendResponse<Bytes>),
    Body {
        stream: SendStream<Bytes>,
        framing: BodyOut,
    },
    /// The answer went whole (or was refused): the engine's reads end, its writes are dropped.
    Done,
}

/// How the engine delimits an HTTP/1.1 body it writes (an answer here, a request in
/// `h2_up.rs`), and what is left of it.
pub(crate) enum BodyOut {
    Length(u64),
    Chunked(Decoder),
    /// Until the engine shuts its side down: a close-delimited body, or a WebSocket tunnel.
    Close,
}

impl BodyOut {
    /// Moves the body bytes at the start of `raw` to `out`, without their framing; true once
    /// the body ended (what follows it stays in `raw`).
    pub(crate) fn unframe(&mut self, raw: &mut BytesMut, out: &mut BytesMut) -> io::Result<bool> {
        match self {
            BodyOut::Length(left) => {
                let n = (raw.len() as u64).min(*left) as usize;
                *left -= n as u64;
                if out.is_empty() {
                    *out = raw.split_to(n);
                } else {
                    out.extend_from_slice(&raw[..n]);
                    raw.advance(n);
                }
                Ok(*left == 0)
            }
            BodyOut::Chunked(decoder) => loop {
                match decoder.decode(raw).map_err(io_error)? {
                    Step::Data {
                        consumed,
                        start,
                        end,
                    } => {
                        out.extend_from_slice(&raw[start..end]);
                        raw.advance(consumed);
                    }
                    Step::NeedMore { consumed } => {
                        raw.advance(consumed);
                        return Ok(false);
                    }
                    Step::Done { consumed } => {
                        raw.advance(consumed);
                        return Ok(true);
                    }
                }
            },
            BodyOut::Close => {
                if out.is_empty() {
                    *out = raw.split();
                } else {
                    out.extend_from_slice(raw);
                    raw.clear();
                }
                Ok(false)
            }
        }
    }
}

/// What the engine is told of a stream's request beyond its head, and of its connection.
#[derive(Debug)]
pub(crate) struct Shape {
    /// The head declares a chunked body (DATA frames are to come, with no `content-length`).
    pub(crate) chunked: bool,
    /// An extended CONNECT for a WebSocket: its DATA frames reach the engine only once it
    /// answered 101 (before that, they would be read as further HTTP/1.1 requests, smuggled
    /// past the stream's own routing and limits).
    pub(crate) websocket: bool,
    /// A HEAD request: the answer has no body, whatever its head says.
    pub(crate) is_head: bool,
    /// The connection's: TLS, the client certificate's subject, the client's address as text.
    pub(crate) https: bool,
    pub(crate) subject: Option<Rc<str>>,
    pub(crate) ip: Rc<str>,
}

/// Sends `out` on `stream` as its flow-control window allows (never buffering more in `h2`
/// than the window grants), with END_STREAM after the last of it when `end`. Ready once all
/// of it went; the caller then stops sending on the stream if `end`.
pub(crate) fn poll_window(
    stream: &mut SendStream<Bytes>,
    out: &mut BytesMut,
    end: bool,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    if out.is_empty() {
        if end {
            stream.send_data(Bytes::new(), true).map_err(io_error)?;
        }
        return Poll::Ready(Ok(()));
    }
    while !out.is_empty() {
        stream.reserve_capacity(out.len());
        let granted = match ready!(stream.poll_capacity(cx)) {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
            None => return Poll::Ready(Err(io_error("stream closed"))),
        };
        if granted > 0 {
            let part = out.split_to(granted.min(out.len()));
            stream
                .send_data(part.freeze(), end && out.is_empty())
                .map_err(io_error)?;
        }
    }
    Poll::Ready(Ok(()))
}

fn io_error(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::other(e)
}

impl H2Client {
    /// The stream whose request head, checked (`h2_wire::check_head`), is `head`.
    pub(crate) fn new(
        head: http::request::Parts,
        body: RecvStream,
        respond: SendResponse<Bytes>,
        shape: Shape,
    ) -> H2Client {
        let Shape {
            chunked,
            websocket,
            is_head,
            https,
            subject,
            ip,
        } = shape;
        let ended = body.is_end_stream();
        H2Client {
            https,
            subject,
            ip,
            head: Some(head),
            into: BytesMut::new(),
            body: (!ended).then_some(body),
            chunked,
            websocket,
            upgraded: false,
            is_head,
            reader: None,
            raw: BytesMut::new(),
            fields: Vec::new(),
            out: BytesMut::new(),
            out_end: false,
            failed: false,
            held: None,
            tx: Tx::Head(respond),
        }
    }

    /// The request head, given to the engine typed: written into its empty read buffer `buf`
    /// as `h2_head::request_head` builds it, within the engine's `limits`. None once taken.
    pub(crate) fn take_head(
        &mut self,
        limits: &request::HeadLimits,
        buf: &mut BytesMut,
        fields: &mut Vec<HeaderPos>,
    ) -> Option<Result<RequestHead, request::Reject>> {
        let h = self.head.take()?;
        Some(crate::h2_head::request_head(
            &h.method,
            &h.uri,
            &h.headers,
            self.websocket,
            self.chunked,
            limits,
            buf,
            fields,
        ))
    }

    /// Ready once the client reset the stream (or its connection failed) before the answer
    /// head went: the engine stops waiting for the node.
    pub(crate) fn poll_gone(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.failed {
            return Poll::Ready(());
        }
        match &mut self.tx {
            Tx::Head(respond) => respond.poll_reset(cx).map(|_| ()),
            _ => Poll::Pending,
        }
    }

    fn wake_reader(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    /// Reads the answer head from `raw` once it is whole, and sends it.
    fn start(&mut self) -> io::Result<()> {
        loop {
            let Tx::Head(respond) = &mut self.tx else {
                return Ok(());
            };
            let mut head =
                match response::parse(&self.raw, self.is_head, MAX_HEAD, &mut self.fields) {
                    Ok(Some(h)) => h,
                    Ok(None) if self.raw.len() > MAX_HEAD => {
                        return Err(io_error("answer head too large"));
                    }
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(io_error(e.to_string())),
                };
            head.take_bytes(&mut self.raw);
            let status = head.status();
            if status == 101 && self.websocket {
                // Upgraded: 200 on the stream, then the tunnel's bytes both ways.
                let mut headers = crate::h2_head::response_headers(&head);
                headers.remove("sec-websocket-accept");
                let mut resp = Response::new(());
                *resp.headers_mut() = headers;
                let stream = respond.send_response(resp, false).map_err(io_error)?;
                self.tx = Tx::Body {
                    stream,
                    framing: BodyOut::Close,
                };
                self.upgraded = true;
                self.wake_reader();
                return Ok(());
            }
            if status < 200 {
                // 1xx: passed on as informational HEADERS: a node's 103 Early Hints, and the
                // engine's own 100 Continue (a node's 100 never reaches here: the engine
                // drops it, answering `expect` itself).
                crate::h2_head::send_interim(respond, &head);
                continue;
            }
            let headers = crate::h2_head::response_headers(&head);
            let body = match head.framing() {
                Framing::None | Framing::Length(0) => None,
                Framing::Length(n) => Some(BodyOut::Length(n)),
                Framing::Chunked => Some(BodyOut::Chunked(Decoder::new())),
                Framing::Close => Some(BodyOut::Close),
            };
            return self.send_head(status, headers, body);
        }
    }

    /// The answer head the engine gives typed (`write::client_response` into a
    /// `TypedAnswer`): sent as it is, nothing parsed. What the engine writes next is its body,
    /// delimited as `framing` says.
    pub(crate) fn answer(&mut self, a: TypedAnswer) -> io::Result<()> {
        if !matches!(self.tx, Tx::Head(_)) {
            return Err(io_error("the stream was answered already"));
        }
        self.held = Some(a);
        Ok(())
    }

    /// Lets a held answer head go unsent (see `held`).
    pub(crate) fn forget_answer(&mut self) {
        self.held = None;
    }

    /// Sends the held answer head, if there is one.
    fn send_held(&mut self) -> io::Result<()> {
        match self.held.take() {
            Some(a) => self.send_typed(a),
            None => Ok(()),
        }
    }

    fn send_typed(&mut self, a: TypedAnswer) -> io::Result<()> {
        // A status without a body (a plugin's 204 on a node's 200 included) comes as `NoBody`
        // and without a length from the engine (`respond_upstream`).
        let body = match a.framing {
            ClientFraming::NoBody | ClientFraming::Fixed(0) => None,
            ClientFraming::Fixed(n) => Some(BodyOut::Length(n)),
            // The engine gives the node's length as `Fixed` (`answer_typed`); a length this
            // stream does not know is read as delimited by the close.
            ClientFraming::Length => Some(BodyOut::Close),
            ClientFraming::Chunked => Some(BodyOut::Chunked(Decoder::new())),
            ClientFraming::Close => Some(BodyOut::Close),
        };
        self.send_head(a.status, a.headers, body)
    }

    /// Sends the answer head; `body`: how the engine delimits the body it writes next (None:
    /// there is none).
    fn send_head(
        &mut self,
        status: u16,
        headers: http::HeaderMap,
        body: Option<BodyOut>,
    ) -> io::Result<()> {
        let Tx::Head(respond) = &mut self.tx else {
            return Ok(());
        };
        if self.websocket && (200..300).contains(&status) {
            // Not upgraded (a route with enable_websocket: false, say), yet a 2xx would tell
            // the client its tunnel is open.
            let resp = Response::builder().status(502).body(()).map_err(io_error)?;
            respond.send_response(resp, true).map_err(io_error)?;
            self.done();
            return Ok(());
        }
        let body = body.filter(|_| !self.is_head);
        let mut resp = Response::builder()
            .status(status)
            .body(())
            .map_err(io_error)?;
        *resp.headers_mut() = headers;
        let stream = respond
            .send_response(resp, body.is_none())
            .map_err(io_error)?;
        match body {
            None => self.done(),
            Some(framing) => self.tx = Tx::Body { stream, framing },
        }
        Ok(())
    }

    /// The answer is out: the engine's reads end.
    fn done(&mut self) {
        self.tx = Tx::Done;
        self.into.clear();
        self.raw.clear();
        self.out.clear();
        self.body = None;
        self.wake_reader();
    }

    /// Moves the answer body bytes of `raw` to `out`, without their HTTP/1.1 framing.
    fn decode(&mut self) -> io::Result<()> {
        let Tx::Body { framing, .. } = &mut self.tx else {
            return Ok(());
        };
        if framing.unframe(&mut self.raw, &mut self.out)? {
            // Anything after the body is not the client's (the engine closes after it);
            // trailers are not passed on.
            self.raw.clear();
            self.out_end = true;
        }
        Ok(())
    }

    /// Sends `out` as the client's window allows; Ready once all of it went (with END_STREAM
    /// when the body ended).
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Tx::Body { stream, .. } = &mut self.tx else {
            return Poll::Ready(Ok(()));
        };
        ready!(poll_window(stream, &mut self.out, self.out_end, cx))?;
        if self.out_end {
            self.done();
        }
        Poll::Ready(Ok(()))
    }

    /// The engine's bytes: the answer head, then its body.
    fn take(&mut self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> io::Result<()> {
        for b in bufs {
            self.raw.extend_from_slice(b);
        }
        if let Tx::Head(_) = self.tx {
            self.start()?;
        }
        self.decode()?;
        // What the window takes now goes now; the rest on the next write or flush.
        match self.poll_send(cx) {
            Poll::Ready(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }
}

impl H2Client {
    /// Takes all of `bufs` (the engine writes a head and the start of a body together),
    /// unless `HELD` bytes already wait for the client's window.
    fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.send_held()?;
        match self.tx {
            Tx::Done => {}
            Tx::Head(_) => self.take(cx, bufs)?,
            Tx::Body { .. } => {
                if self.out.len() >= HELD {
                    ready!(self.poll_send(cx))?;
                }
                self.take(cx, bufs)?;
            }
        }
        Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()))
    }
}

impl AsyncWrite for H2Client {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_take(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_take(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.send_held()?;
        me.poll_send(cx)
    }

    /// The end of a close-delimited body or of a tunnel's way to the client.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.send_held()?;
        if let Tx::Body {
            framing: BodyOut::Close,
            ..
        } = me.tx
        {
            me.out_end = true;
        }
        me.poll_send(cx)
    }
}

impl H2Client {
    /// The request body's next DATA for the engine (an empty one: only `into` grew, with the
    /// chunked body's last chunk); None: the engine's end of file (the answer is out, or a
    /// tunnel's client ended its side). Pending with the engine's waker kept when nothing more
    /// comes until the answer is out or the WebSocket upgraded.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        if self.failed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "the client reset the stream",
            )));
        }
        if matches!(self.tx, Tx::Done) {
            // The answer is out: the stream is over for the engine.
            return Poll::Ready(Ok(None));
        }
        let upgraded = self.upgraded;
        let Some(body) = self.body.as_mut().filter(|_| !self.websocket || upgraded) else {
            if upgraded {
                // The client ended its side of the tunnel: the engine passes the half-close on.
                return Poll::Ready(Ok(None));
            }
            self.reader = Some(cx.waker().clone());
            return Poll::Pending;
        };
        loop {
            match ready!(body.poll_data(cx)) {
                Some(Ok(chunk)) => {
                    let _ = body.flow_control().release_capacity(chunk.len());
                    if !chunk.is_empty() {
                        return Poll::Ready(Ok(Some(chunk)));
                    }
                }
                Some(Err(e)) => {
                    debug!(cause = %e, "HTTP/2 stream: request body cut");
                    self.body = None;
                    self.failed = true;
                    return self.poll_body(cx);
                }
                None => {
                    self.body = None;
                    if self.chunked {
                        self.into.extend_from_slice(b"0\r\n\r\n");
                        return Poll::Ready(Ok(Some(Bytes::new())));
                    }
                    return self.poll_body(cx);
                }
            }
        }
    }
}

impl AsyncRead for H2Client {
    /// Gives the engine what is here without waiting: the head and the body's first DATA in
    /// one read, so that it sends them to the node together.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.held.is_some() {
            // The engine reads again: its answer is complete as given.
            me.send_held()?;
        }
        let start = buf.filled().len();
        loop {
            if !me.into.is_empty() {
                crate::io::give(&mut me.into, buf);
                if buf.remaining() == 0 {
                    return Poll::Ready(Ok(()));
                }
            }
            let given = buf.filled().len() > start;
            let mut data = match me.poll_body(cx) {
                Poll::Ready(Ok(Some(data))) => data,
                Poll::Ready(Ok(None)) => return Poll::Ready(Ok(())),
                // What was read goes first; the error comes with the next read.
                Poll::Ready(Err(_)) | Poll::Pending if given => return Poll::Ready(Ok(())),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            if data.is_empty() {
                continue;
            }
            if me.chunked {
                let _ =
                    std::fmt::Write::write_fmt(&mut me.into, format_args!("{:x}\r\n", data.len()));
                me.into.extend_from_slice(&data);
                me.into.extend_from_slice(b"\r\n");
            } else {
                // Straight into the engine's buffer; what does not fit waits in `into`.
                crate::io::give(&mut data, buf);
                me.into.extend_from_slice(&data);
                if buf.remaining() == 0 {
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

impl Drop for H2Client {
    /// The engine let the stream go: an answer it did not finish is reset, except a body (or
    /// tunnel) delimited by the close, which ends here.
    fn drop(&mut self) {
        let _ = self.send_held();
        match std::mem::replace(&mut self.tx, Tx::Done) {
            Tx::Done => {}
            Tx::Head(mut respond) => respond.send_reset(Reason::INTERNAL_ERROR),
            Tx::Body {
                mut stream,
                framing: BodyOut::Close,
            } => {
                let _ = stream.send_data(self.out.split().freeze(), true);
            }
            Tx::Body { mut stream, .. } => stream.send_reset(Reason::INTERNAL_ERROR),
        }
    }
}

impl std::fmt::Debug for H2Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Client")
            .field("https", &self.https)
            .field("websocket", &self.websocket)
            .finish()
    }
}
