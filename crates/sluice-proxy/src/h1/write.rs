//! Serialising heads: the request sent upstream and the response sent to the client.

use super::request::RequestHead;
use super::response::ResponseHead;
use super::{Framing, HeaderKind};

/// What the proxy adds to a forwarded request.
#[derive(Debug)]
pub(crate) struct Forwarded<'a> {
    /// `Host` to send.
    pub(crate) host: &'a [u8],
    /// Client address, for `X-Forwarded-For` and `X-Real-IP`.
    pub(crate) client_ip: &'a [u8],
    /// Proxy the WebSocket upgrade.
    pub(crate) websocket: bool,
}

/// Writes the request head sent upstream: hop-by-hop fields removed (RFC 9110 §7.6.1), framing
/// re-declared, `X-Forwarded-*` and `X-Real-IP` set.
pub(crate) fn upstream_request(
    out: &mut Vec<u8>,
    head: &[u8],
    req: &RequestHead,
    fwd: &Forwarded<'_>,
) {
    out.extend_from_slice(req.method_raw(head));
    out.push(b' ');
    out.extend_from_slice(req.target(head));
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(fwd.host);
    out.extend_from_slice(b"\r\n");
    let mut has_xff = false;
    for h in &req.headers {
        match h.kind {
            HeaderKind::Other => {}
            HeaderKind::Upgrade if fwd.websocket => {}
            HeaderKind::XForwardedFor => {
                has_xff = true;
                continue;
            }
            _ => continue,
        }
        out.extend_from_slice(h.name(head));
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value(head));
        out.extend_from_slice(b"\r\n");
    }
    // Several X-Forwarded-For fields are one list (RFC 9110 §5.3): join them and append the
    // client's address.
    out.extend_from_slice(b"X-Forwarded-For: ");
    if has_xff {
        for h in req
            .headers
            .iter()
            .filter(|h| h.kind == HeaderKind::XForwardedFor)
        {
            out.extend_from_slice(h.value(head));
            out.extend_from_slice(b", ");
        }
    }
    out.extend_from_slice(fwd.client_ip);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b"X-Real-IP: ");
    out.extend_from_slice(fwd.client_ip);
    out.extend_from_slice(b"\r\nX-Forwarded-Proto: http\r\n");
    if let Some((s, e)) = req.host {
        out.extend_from_slice(b"X-Forwarded-Host: ");
        out.extend_from_slice(&head[s as usize..e as usize]);
        out.extend_from_slice(b"\r\n");
    }
    if fwd.websocket {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    }
    match req.framing {
        Framing::Length(n) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        Framing::None | Framing::Close => {}
    }
    out.extend_from_slice(b"\r\n");
}

/// How the response body is framed towards the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientFraming {
    /// No body follows; a Content-Length from upstream is kept (HEAD, 304).
    NoBody,
    /// The upstream's Content-Length is kept.
    Length,
    /// Re-chunked.
    Chunked,
    /// Delimited by closing the connection (HTTP/1.0 clients).
    Close,
}

/// Writes the response head for the client.
pub(crate) fn client_response(
    out: &mut Vec<u8>,
    head: &[u8],
    resp: &ResponseHead,
    framing: ClientFraming,
    connection: ConnectionHeader,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(resp.status).as_bytes());
    out.push(b' ');
    let reason = &head[resp.reason.0 as usize..resp.reason.1 as usize];
    if reason.is_empty() {
        out.extend_from_slice(default_reason(resp.status).as_bytes());
    } else {
        out.extend_from_slice(reason);
    }
    out.extend_from_slice(b"\r\n");
    let upgrade = resp.status == 101;
    for h in &resp.headers {
        let keep = match h.kind {
            HeaderKind::Other | HeaderKind::Host | HeaderKind::Expect => true,
            HeaderKind::XForwardedFor
            | HeaderKind::XForwardedProto
            | HeaderKind::XForwardedHost
            | HeaderKind::XRealIp => true,
            HeaderKind::ContentLength => {
                matches!(framing, ClientFraming::NoBody | ClientFraming::Length)
            }
            HeaderKind::Upgrade => upgrade,
            _ => false,
        };
        if keep {
            out.extend_from_slice(h.name(head));
            out.extend_from_slice(b": ");
            out.extend_from_slice(h.value(head));
            out.extend_from_slice(b"\r\n");
        }
    }
    if framing == ClientFraming::Chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    out.extend_from_slice(match (upgrade, connection) {
        (true, _) => b"Connection: upgrade\r\n\r\n",
        (false, ConnectionHeader::None) => b"\r\n",
        (false, ConnectionHeader::Close) => b"Connection: close\r\n\r\n",
        (false, ConnectionHeader::KeepAlive) => b"Connection: keep-alive\r\n\r\n",
    });
}

/// The `Connection` field the proxy adds to its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionHeader {
    /// Nothing: HTTP/1.1 keep-alive is the default.
    None,
    /// The proxy closes the connection after this response.
    Close,
    /// An HTTP/1.0 client asked to keep the connection.
    KeepAlive,
}

/// Writes a response generated by the gateway itself: a small JSON body
/// `{"error_msg":"..."}`, as APISIX answers.
pub(crate) fn own_response(
    out: &mut Vec<u8>,
    status: u16,
    message: &str,
    connection: ConnectionHeader,
) {
    let body = serde_json::json!({ "error_msg": message }).to_string();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(default_reason(status).as_bytes());
    out.extend_from_slice(
        b"\r\nServer: sluice\r\nContent-Type: application/json\r\nContent-Length: ",
    );
    out.extend_from_slice(itoa::Buffer::new().format(body.len() + 1).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(match connection {
        ConnectionHeader::None => b"",
        ConnectionHeader::Close => b"Connection: close\r\n",
        ConnectionHeader::KeepAlive => b"Connection: keep-alive\r\n",
    });
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body.as_bytes());
    out.push(b'\n');
}

/// Writes a chunk-size line.
#[inline]
pub(crate) fn chunk_header(out: &mut Vec<u8>, len: usize) {
    let mut buf = [0u8; 18];
    let mut i = buf.len();
    let mut n = len;
    buf[i - 1] = b'\n';
    buf[i - 2] = b'\r';
    i -= 2;
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// The standard reason phrase of a status code.
pub(crate) fn default_reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        414 => "URI Too Long",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}
