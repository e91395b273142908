//! HTTP/2 to upstream nodes (`http2: true`, and the connections of `scheme: grpc`).
//!
//! Each worker holds one multiplexed HTTP/2 connection per node and opens another only when
//! it breaks. The HTTP/1.1 engine reaches it through a pseudo-connection: a pipe whose other
//! end is read by a task on the same worker that turns each HTTP/1.1 request into a stream on
//! the shared connection and writes the answer back as HTTP/1.1. The engine keeps these pipes
//! in its keep-alive pool like any connection, so balancing, retries, timeouts, every plugin
//! phase and the access log work unchanged, while many requests share few TCP connections.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::{HeaderMap, HeaderValue, Method, Request};
use sluice_core::http::Framing;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::watch;
use tracing::debug;

use crate::error::{Error, Kind};
use crate::upstream::{H2Conn, UpIo, Upstream};
use crate::worker::Worker;

/// Bytes a pseudo-connection's pipe holds each way before its writer waits.
const PIPE: usize = 64 * 1024;
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
        open(w, up, node).await
    } else {
        crate::upstream::connect_node(up, node).await
    }
}

/// A pseudo-connection to `node` over the worker's HTTP/2 connection to it.
async fn open(w: &Rc<Worker>, up: &Arc<Upstream>, node: usize) -> Result<UpIo, Error> {
    let conn = sender(w, up, node).await?;
    let (near, far) = tokio::io::duplex(PIPE);
    let (alive, gone) = watch::channel(());
    tokio::task::spawn_local(serve(far, gone, conn, w.clone(), up.clone(), node));
    Ok(UpIo::H2(crate::upstream::Pipe {
        io: near,
        _alive: alive,
    }))
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

/// A head that cannot be read back (more fields than HTTP/2 heads may carry here, a method
/// or field `http` refuses).
#[derive(Debug)]
pub(crate) struct BadHead;

/// Parses the HTTP/1.1 request head at the start of `raw` (as the engine's writer produces
/// it). `Ok(None)`: incomplete. `te`: add `te: trailers` (gRPC needs it; HTTP/1.1 treats `te`
/// as hop-by-hop).
pub(crate) fn head2(raw: &[u8], te: bool) -> Result<Option<(Head2, usize)>, BadHead> {
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
        let name = h.name.to_ascii_lowercase();
        match name.as_str() {
            "host" => authority = std::str::from_utf8(h.value).ok().map(str::to_owned),
            "transfer-encoding" => {
                framing = Framing::Chunked;
            }
            "connection" | "keep-alive" | "proxy-connection" | "upgrade" | "te" => {}
            _ => {
                if name == "content-length" && framing == Framing::None {
                    framing = Framing::Length(
                        sluice_core::http::parse_content_length(h.value).ok_or(BadHead)?,
                    );
                }
                let n = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| BadHead)?;
                headers.append(n, HeaderValue::from_bytes(h.value).map_err(|_| BadHead)?);
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
    for (n, v) in headers {
        if n == http::header::TRANSFER_ENCODING || n == http::header::CONNECTION {
            continue;
        }
        sluice_core::http::write::line(out, n.as_str().as_bytes(), v.as_bytes());
    }
}

/// The far end of a pseudo-connection: one request at a time, each a new stream on the
/// shared connection, until the engine closes the pipe, an exchange leaves it unusable, or
/// the HTTP/2 connection ends (then the pipe closes too, so the engine's pool drops it rather
/// than send a request it cannot carry).
async fn serve(
    io: DuplexStream,
    gone: watch::Receiver<()>,
    mut conn: H2Conn,
    w: Rc<Worker>,
    up: Arc<Upstream>,
    node: usize,
) {
    let scheme = if up.tls.is_some() { "https" } else { "http" };
    let (mut rd, mut wr) = tokio::io::split(io);
    let mut buf = BytesMut::with_capacity(4096);
    let mut ended = conn.ended.clone();
    loop {
        let next = async {
            loop {
                if !buf.is_empty() {
                    match head2(&buf, false) {
                        Ok(Some(h)) => return Some(h),
                        Ok(None) => {}
                        Err(BadHead) => {
                            debug!("request head not expressible over HTTP/2");
                            return None;
                        }
                    }
                }
                if buf.len() > MAX_HEAD {
                    return None;
                }
                match rd.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        };
        let (head, len) = tokio::select! {
            // A head already read goes first, even if the connection just ended.
            biased;
            h = next => match h {
                Some(h) => h,
                None => return,
            },
            _ = ended.wait_for(|e| *e) => return,
        };
        let _ = buf.split_to(len);
        let origin = format!(
            "{scheme}://{}",
            head.authority
                .as_deref()
                .unwrap_or(&up.nodes[node].authority)
        );
        // A connection the node is closing (its GOAWAY) takes no new stream: the request goes
        // on the node's next connection instead of failing.
        let send = match conn.send.clone().ready().await {
            Ok(s) => s,
            Err(_) => match sender(&w, &up, node).await {
                Ok(c) => {
                    ended = c.ended.clone();
                    conn = c;
                    conn.send.clone()
                }
                Err(e) => {
                    debug!(node = %up.nodes[node].authority, cause = %e, "HTTP/2 upstream unreachable");
                    return;
                }
            },
        };
        let sent = exchange(&mut rd, &mut wr, &mut buf, send, head, &origin, &gone).await;
        match sent {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                debug!(cause = %e, "HTTP/2 upstream exchange failed");
                return;
            }
        }
    }
}

/// One request (`sender` is ready): head and body up as a stream, the answer back as
/// HTTP/1.1. `Ok(true)`: both
/// ended where their framing said, and the pipe may carry another request. Time limits are
/// the engine's: when it gives up (read timeout, client gone) it closes the pipe, and that
/// ends the exchange and resets the stream.
async fn exchange<R, W>(
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    sender: SendRequest<Bytes>,
    head: Head2,
    origin: &str,
    gone: &watch::Receiver<()>,
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
    let mut sender = sender;
    let (response, mut upload) = sender
        .send_request(req, end)
        .map_err(std::io::Error::other)?;
    // Some(true): the body went up whole (bytes after it are the engine's next request, kept
    // for the next round). Some(false): it did not; an early answer may still come.
    let uploaded = Cell::new(end.then_some(true));
    let up = async {
        if !end {
            let ok = crate::h2_wire::pump_body(rd, buf, framing, &mut upload, None, &mut 0)
                .await
                .is_ok();
            uploaded.set(Some(ok));
        }
        // Then watch the pipe: the engine closes it when it gives up on this exchange.
        loop {
            match rd.read_buf(buf).await {
                Ok(0) | Err(_) => return,
                // After a failed upload, the rest of that body: dropped, so that the engine
                // is not left blocked writing it while the answer comes.
                Ok(_) if uploaded.get() == Some(false) => buf.clear(),
                // The engine's next request, written once it had the whole answer: kept.
                Ok(_) => std::future::pending::<()>().await,
            }
        }
    };
    let down = async {
        let resp = response.await.map_err(std::io::Error::other)?;
        let (parts, mut body) = resp.into_parts();
        let status = parts.status;
        let bodiless = is_head
            || status == http::StatusCode::NO_CONTENT
            || status == http::StatusCode::NOT_MODIFIED;
        let chunked = !bodiless && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
        let mut out = Vec::with_capacity(512);
        h1_response_head(&mut out, status, &parts.headers);
        if chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if bodiless {
            return wr.write_all(&out).await;
        }
        // The head goes at once unless body bytes are already here (then with them): an
        // answer whose body comes later (server-sent events, long polls) must not wait.
        let mut first = std::future::poll_fn(|cx| match body.poll_data(cx) {
            std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
            std::task::Poll::Pending => std::task::Poll::Ready(None),
        })
        .await;
        if !matches!(&first, Some(Some(Ok(c))) if !c.is_empty()) {
            wr.write_all(&out).await?;
            out.clear();
        }
        // Each write carries what is pending (the head, the previous chunk's CRLF, this
        // chunk's size line) and the chunk: one write per DATA frame.
        loop {
            let next = match first.take() {
                Some(v) => v,
                None => body.data().await,
            };
            let Some(chunk) = next else { break };
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
    // back at once, and the pipe is reused only if the body had ended cleanly by then. The
    // pipe closing first (the engine gave up) ends the exchange.
    let mut gone = gone.clone();
    let engine_gone = async { while gone.changed().await.is_ok() {} };
    let aborted = || {
        std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the engine closed the pipe",
        )
    };
    tokio::select! {
        r = down => {
            r?;
            Ok(uploaded.get() == Some(true))
        }
        () = up => Err(aborted()),
        () = engine_gone => Err(aborted()),
    }
}
