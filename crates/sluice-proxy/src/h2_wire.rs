//! What the HTTP/2 paths share (the bridge to the engine in `h2.rs`, the fast path in
//! `h2_direct.rs`, gRPC in `grpc.rs`, HTTP/2 to nodes in `h2_up.rs`): the stream's view of its
//! connection, request fields checked as RFC 9113 asks and written as HTTP/1.1, and bodies
//! pumped between HTTP/1.1 framing and DATA frames. A leaf: it imports none of them.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use h2::SendStream;
use http::Request;
use sluice_core::http::Framing;
use sluice_core::http::chunked::{Decoder, Step};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a stream needs to know of its connection.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) addr: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) https: bool,
    pub(crate) subject: Option<Rc<str>>,
    /// TLS without a client certificate: the name asked for (each stream's path is checked
    /// against what its certificate lets such a connection ask for).
    pub(crate) without_cert: Option<Option<Rc<str>>>,
    /// The client's IP address as text, formatted once per connection.
    pub(crate) ip: Rc<str>,
    /// The TCP peer, when a real address (`real-ip`, `real_ip`) stands in `addr` and `ip`.
    pub(crate) tcp: Option<SocketAddr>,
}

impl Peer {
    /// A connection from `addr` to `local`; over TLS (`https`) with the client certificate's
    /// subject, or without one the name it asked for.
    pub(crate) fn new(
        addr: SocketAddr,
        local: SocketAddr,
        https: bool,
        subject: Option<Rc<str>>,
        without_cert: Option<Option<Rc<str>>>,
    ) -> Peer {
        Peer {
            addr,
            local,
            https,
            subject,
            without_cert,
            ip: sluice_core::realip::ip_text(addr.ip()).into(),
            tcp: None,
        }
    }

    /// The same connection, with the request's client at `real` (`real-ip`, `real_ip`).
    pub(crate) fn with_client(&self, real: SocketAddr) -> Peer {
        Peer {
            addr: real,
            ip: sluice_core::realip::ip_text(real.ip()).into(),
            tcp: Some(self.tcp.unwrap_or(self.addr)),
            ..self.clone()
        }
    }

    /// The client as metrics and the access log see it.
    pub(crate) fn client(&self) -> crate::observe::Client<'_> {
        crate::observe::Client {
            ip: self.ip.as_bytes(),
            peer: self.addr,
            tcp: self.tcp.as_ref(),
            local: self.local,
            https: self.https,
            subject: self.subject.as_deref(),
        }
    }
}

/// A request's fields to forward (name, value), and its joined `cookie` value.
pub(crate) type Fields<'a> = (Vec<(&'a str, &'a [u8])>, Option<Vec<u8>>);

/// One request field, checked as RFC 9113 §8.2 asks: a connection-specific field, `te` other
/// than `trailers`, or whitespace or a control character around its value make the request
/// malformed. `Ok(false)`: a field not forwarded (`te: trailers`).
#[inline]
fn check_field(name: &str, v: &[u8]) -> Result<bool, &'static str> {
    if v.first().is_some_and(|b| *b == b' ' || *b == b'\t')
        || v.last().is_some_and(|b| *b == b' ' || *b == b'\t')
        || v.iter().any(|b| matches!(b, 0 | b'\r' | b'\n'))
    {
        return Err("whitespace or a control character around a field value");
    }
    match name {
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade" => {
            Err("connection-specific header field")
        }
        "te" if !v.eq_ignore_ascii_case(b"trailers") => Err("te other than trailers"),
        "te" => Ok(false),
        _ => Ok(true),
    }
}

/// A request's fields, checked as RFC 9113 §8.2 asks ([`check_field`]). Returns the fields
/// to forward (without `te`), and the `cookie` fields joined with "; " (§8.2.3).
pub(crate) fn checked_fields(headers: &http::HeaderMap) -> Result<Fields<'_>, &'static str> {
    let mut out = Vec::with_capacity(headers.len());
    let mut cookie: Option<Vec<u8>> = None;
    for (name, value) in headers {
        let v = value.as_bytes();
        if !check_field(name.as_str(), v)? {
            continue;
        }
        match name.as_str() {
            "cookie" => match &mut cookie {
                Some(c) => {
                    c.extend_from_slice(b"; ");
                    c.extend_from_slice(v);
                }
                None => cookie = Some(v.to_vec()),
            },
            n => out.push((n, v)),
        }
    }
    Ok((out, cookie))
}

/// Checks a stream's head (RFC 9113 §8.2) before the engine is given it
/// (`h2_head::request_head`). `Err`: malformed, the stream is reset with PROTOCOL_ERROR.
pub(crate) fn check_head<B>(req: &Request<B>) -> Result<(), &'static str> {
    if req
        .uri()
        .path_and_query()
        .is_none_or(|p| p.as_str().is_empty())
    {
        return Err("no :path");
    }
    if req.method() == http::Method::CONNECT && !is_websocket(req) {
        return Err("CONNECT is not proxied");
    }
    for (name, value) in req.headers() {
        check_field(name.as_str(), value.as_bytes())?;
    }
    Ok(())
}

/// An extended CONNECT for a WebSocket (RFC 8441): `:method CONNECT`, `:protocol websocket`.
pub(crate) fn is_websocket<B>(req: &Request<B>) -> bool {
    req.method() == http::Method::CONNECT
        && req
            .extensions()
            .get::<h2::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"))
}

/// Sends an HTTP/1.1 response body, delimited by `framing` and starting with the bytes in
/// `buf`, read on from `rd`, as DATA frames, and ends the stream. `Ok(true)`: the body ended
/// where its framing said with nothing after it (the connection may carry another exchange).
/// `Err`: cut short, malformed, stalled past `read_timeout`, or the client went away; the
/// caller resets the stream.
pub(crate) async fn pump_body<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    framing: Framing,
    stream: &mut SendStream<Bytes>,
    read_timeout: Option<Duration>,
    sent: &mut u64,
) -> io::Result<bool> {
    async fn more<R: AsyncRead + Unpin>(
        rd: &mut R,
        buf: &mut BytesMut,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        match timeout {
            None => rd.read_buf(buf).await,
            Some(t) => tokio::time::timeout(t, rd.read_buf(buf))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "upstream read timeout"))?,
        }
    }
    let cut = || io::Error::new(io::ErrorKind::UnexpectedEof, "body cut short");
    match framing {
        Framing::Length(mut left) => loop {
            if !buf.is_empty() {
                let n = (buf.len() as u64).min(left) as usize;
                left -= n as u64;
                *sent += n as u64;
                send(stream, buf.split_to(n).freeze(), left == 0).await?;
                if left == 0 {
                    return Ok(buf.is_empty());
                }
            }
            if more(rd, buf, read_timeout).await? == 0 {
                return Err(cut());
            }
        },
        Framing::Chunked => {
            let mut decoder = Decoder::new();
            loop {
                loop {
                    match decoder
                        .decode(buf)
                        .map_err(|e| io::Error::other(e.to_string()))?
                    {
                        Step::Data {
                            consumed,
                            start,
                            end,
                        } => {
                            let data = Bytes::copy_from_slice(&buf[start..end]);
                            buf.advance(consumed);
                            *sent += data.len() as u64;
                            send(stream, data, false).await?;
                        }
                        Step::NeedMore { consumed } => {
                            buf.advance(consumed);
                            break;
                        }
                        Step::Done { consumed } => {
                            buf.advance(consumed);
                            send(stream, Bytes::new(), true).await?;
                            return Ok(buf.is_empty());
                        }
                    }
                }
                if more(rd, buf, read_timeout).await? == 0 {
                    return Err(cut());
                }
            }
        }
        Framing::Close | Framing::None => loop {
            if !buf.is_empty() {
                *sent += buf.len() as u64;
                send(stream, buf.split().freeze(), false).await?;
            }
            if more(rd, buf, read_timeout).await? == 0 {
                send(stream, Bytes::new(), true).await?;
                // Delimited by the close: the connection is done.
                return Ok(false);
            }
        },
    }
}

/// Sends `data` as the client's flow-control window allows (never buffering more than it
/// grants).
pub(crate) async fn send(
    stream: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> io::Result<()> {
    if data.is_empty() {
        return if end {
            stream.send_data(data, true).map_err(io::Error::other)
        } else {
            Ok(())
        };
    }
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let granted = match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(io::Error::other(e)),
            None => return Err(io::Error::other("stream closed")),
        };
        if granted == 0 {
            continue;
        }
        let part = data.split_to(granted.min(data.len()));
        stream
            .send_data(part, end && data.is_empty())
            .map_err(io::Error::other)?;
    }
    Ok(())
}
