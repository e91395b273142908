//! HTTP/2 to upstream nodes (`http2: true`, and the connections of `scheme: grpc`).
//!
//! Each worker holds one multiplexed HTTP/2 connection per node and opens another only when
//! it breaks. The HTTP/1.1 engine reaches it through a pseudo-connection: a pipe whose other
//! end is read by a task on the same worker that turns each HTTP/1.1 request into a stream on
//! the shared connection and writes the answer back as HTTP/1.1. The engine keeps these pipes
//! in its keep-alive pool like any connection, so balancing, retries, timeouts, every plugin
//! phase and the access log work unchanged, while many requests share few TCP connections.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::{HeaderMap, HeaderValue, Method, Request};
use sluice_core::http::Framing;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tracing::debug;

use crate::error::{Error, Kind};
use crate::snapshot::Upstream;
use crate::upstream::UpIo;
use crate::worker::Worker;

/// Bytes a pseudo-connection's pipe holds each way before its writer waits.
const PIPE: usize = 64 * 1024;
/// Largest request head read from the engine (it writes heads within the configured limits).
const MAX_HEAD: usize = 1 << 20;

/// A ready HTTP/2 sender to `node` of `up`: the worker's connection to it, or a new one.
pub(crate) async fn sender(
    w: &Worker,
    up: &Upstream,
    node: usize,
) -> Result<SendRequest<Bytes>, Error> {
    let existing = w.h2_conns.borrow().get(&(up.uid, node)).cloned();
    if let Some(s) = existing {
        match s.ready().await {
            Ok(s) => return Ok(s),
            Err(_) => {
                w.h2_conns.borrow_mut().remove(&(up.uid, node));
            }
        }
    }
    let io = match tokio::time::timeout(up.timeouts.connect, crate::proxy::connect_node(up, node))
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
    tokio::task::spawn_local(async move {
        if let Err(e) = conn.await {
            debug!(node = %node_name, cause = %e, "HTTP/2 upstream connection ended");
        }
    });
    w.h2_conns.borrow_mut().insert((up.uid, node), s.clone());
    s.ready()
        .await
        .map_err(|e| Error::with_cause(Kind::ConnectFailed, format_args!("HTTP/2: {e}")))
}

/// A connection to `node` of `up` for the HTTP/1.1 engine: a new TCP (or TLS) connection, or
/// with `http2` a pseudo-connection over the worker's HTTP/2 connection to the node.
pub(crate) async fn connect(w: &Worker, up: &Upstream, node: usize) -> Result<UpIo, Error> {
    if up.http2 {
        open(w, up, node).await
    } else {
        crate::proxy::connect_node(up, node).await
    }
}

/// A pseudo-connection to `node` over the worker's HTTP/2 connection to it.
async fn open(w: &Worker, up: &Upstream, node: usize) -> Result<UpIo, Error> {
    let sender = sender(w, up, node).await?;
    let (near, far) = tokio::io::duplex(PIPE);
    let scheme = if up.tls.is_some() { "https" } else { "http" };
    let fallback: Box<str> = up.nodes[node].authority.clone();
    tokio::task::spawn_local(serve(far, sender, scheme, fallback, up.timeouts.read));
    Ok(UpIo::H2(near))
}

/// An HTTP/1.1 request head read back as an HTTP/2 one.
pub(crate) struct Head2 {
    pub(crate) method: Method,
    /// Path and query.
    pub(crate) path: String,
    /// From `Host`.
    pub(crate) authority: Option<String>,
    /// The fields, without `Host` and the HTTP/1.1 connection-specific ones (RFC 9113 §8.2.2);
    /// `te: trailers` only when `te` asks for it.
    pub(crate) headers: HeaderMap,
    pub(crate) framing: Framing,
}

/// Parses the complete HTTP/1.1 request head in `raw` (as the engine's writer produces it).
/// `te`: add `te: trailers` (gRPC needs it; HTTP/1.1 treats `te` as hop-by-hop).
pub(crate) fn head2(raw: &[u8], te: bool) -> Option<(Head2, usize)> {
    let mut fields = [httparse::EMPTY_HEADER; 256];
    let mut parsed = httparse::Request::new(&mut fields);
    let len = match parsed.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return None,
    };
    let mut headers = HeaderMap::with_capacity(parsed.headers.len() + 1);
    let mut authority = None;
    let mut framing = Framing::None;
    for h in parsed.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        match name.as_str() {
            "host" => authority = std::str::from_utf8(h.value).ok().map(str::to_owned),
            "transfer-encoding" => {
                framing = Framing::Chunked;
            }
            "connection" | "keep-alive" | "proxy-connection" | "upgrade" | "te" => {}
            _ => {
                if name == "content-length" && framing == Framing::None {
                    framing = Framing::Length(sluice_core::http::parse_content_length(h.value)?);
                }
                let n = http::HeaderName::from_bytes(name.as_bytes()).ok()?;
                headers.append(n, HeaderValue::from_bytes(h.value).ok()?);
            }
        }
    }
    if framing == Framing::Chunked {
        // Sent as DATA frames: a length beside chunked framing is not the body's.
        headers.remove(http::header::CONTENT_LENGTH);
    }
    if te {
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    let method = Method::from_bytes(parsed.method?.as_bytes()).ok()?;
    Some((
        Head2 {
            method,
            path: parsed.path?.to_owned(),
            authority,
            headers,
            framing,
        },
        len,
    ))
}

/// The far end of a pseudo-connection: one request at a time, each a new stream on the
/// shared connection, until the engine closes the pipe or an exchange leaves it unusable.
async fn serve(
    io: DuplexStream,
    sender: SendRequest<Bytes>,
    scheme: &'static str,
    fallback: Box<str>,
    read_timeout: Duration,
) {
    let (mut rd, mut wr) = tokio::io::split(io);
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        let (head, len) = loop {
            if !buf.is_empty()
                && let Some(h) = head2(&buf, false)
            {
                break h;
            }
            if buf.len() > MAX_HEAD {
                return;
            }
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let _ = buf.split_to(len);
        let origin = format!(
            "{scheme}://{}",
            head.authority.as_deref().unwrap_or(&fallback)
        );
        match exchange(
            &mut rd,
            &mut wr,
            &mut buf,
            sender.clone(),
            head,
            &origin,
            read_timeout,
        )
        .await
        {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                debug!(cause = %e, "HTTP/2 upstream exchange failed");
                return;
            }
        }
    }
}

/// One request: head and body up as a stream, the answer back as HTTP/1.1. `Ok(true)`: both
/// ended where their framing said, and the pipe may carry another request.
async fn exchange<R, W>(
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    sender: SendRequest<Bytes>,
    head: Head2,
    origin: &str,
    read_timeout: Duration,
) -> std::io::Result<bool>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let is_head = head.method == Method::HEAD;
    let framing = head.framing;
    let mut req = Request::builder()
        .method(head.method)
        .uri(format!("{origin}{}", head.path))
        .version(http::Version::HTTP_2)
        .body(())
        .map_err(std::io::Error::other)?;
    *req.headers_mut() = head.headers;
    let end = matches!(framing, Framing::None | Framing::Length(0));
    let mut sender = sender.ready().await.map_err(std::io::Error::other)?;
    let (response, mut upload) = sender
        .send_request(req, end)
        .map_err(std::io::Error::other)?;
    let up = async {
        if end {
            return Ok(true);
        }
        crate::h2::pump_body(rd, buf, framing, &mut upload, None).await
    };
    let down = async {
        let resp = tokio::time::timeout(read_timeout, response)
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no response"))?
            .map_err(std::io::Error::other)?;
        let (parts, mut body) = resp.into_parts();
        let status = parts.status;
        let bodiless = is_head
            || status == http::StatusCode::NO_CONTENT
            || status == http::StatusCode::NOT_MODIFIED;
        let chunked = !bodiless && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
        for (n, v) in &parts.headers {
            if n == http::header::TRANSFER_ENCODING || n == http::header::CONNECTION {
                continue;
            }
            out.extend_from_slice(n.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if bodiless {
            return wr.write_all(&out).await;
        }
        // Each write carries what is pending (the head, the previous chunk's CRLF, this
        // chunk's size line) and the chunk: one write per DATA frame.
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(std::io::Error::other)?;
            let _ = body.flow_control().release_capacity(chunk.len());
            if chunk.is_empty() {
                continue;
            }
            if chunked {
                sluice_core::http::write::chunk_header(&mut out, chunk.len());
            }
            if out.is_empty() {
                wr.write_all(&chunk).await?;
            } else {
                out.extend_from_slice(&chunk);
                wr.write_all(&out).await?;
                out.clear();
            }
            if chunked {
                out.extend_from_slice(b"\r\n");
            }
        }
        // Trailers end the stream; HTTP/1.1 clients get the body without them.
        let _ = body.trailers().await;
        if chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        if !out.is_empty() {
            wr.write_all(&out).await?;
        }
        Ok::<_, std::io::Error>(())
    };
    // The answer may come before the body is all sent (an early 413, say): it is written
    // back at once, and the pipe is reused only if the body then ends cleanly too. A failed
    // upload or answer ends the exchange (the engine sees the pipe close).
    tokio::pin!(up, down);
    let mut uploaded = None;
    loop {
        tokio::select! {
            r = &mut down => {
                r?;
                return Ok(match uploaded {
                    Some(clean) => clean,
                    None => up.await.unwrap_or(false),
                });
            }
            u = &mut up, if uploaded.is_none() => uploaded = Some(u?),
        }
    }
}
