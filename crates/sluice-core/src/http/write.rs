//! Serialising heads: the request sent upstream and the response sent to the client, with the
//! edits plugins made applied on the way.

use super::fields::{Framing, HeaderKind};
pub use super::fields::{bodiless, no_length};
use super::head::RequestHead;
use super::response::ResponseHead;
use crate::ctx::ResponseEdits;
use crate::plugin::Response;

/// What the proxy adds to a forwarded request.
#[derive(Debug)]
pub struct Forwarded<'a> {
    /// `Host` to send.
    pub host: &'a [u8],
    /// Client address, for `X-Forwarded-For` and `X-Real-IP`.
    pub client_ip: &'a [u8],
    /// Proxy the WebSocket upgrade.
    pub websocket: bool,
    /// The client connection is TLS: `X-Forwarded-Proto: https`.
    pub https: bool,
}

/// Writes the request head sent upstream: hop-by-hop fields removed (RFC 9110 §7.6.1), framing
/// re-declared, `X-Forwarded-*` and `X-Real-IP` set, plugin edits applied.
pub fn upstream_request(out: &mut Vec<u8>, req: &RequestHead, fwd: &Forwarded<'_>) {
    upstream_request_to(out, req, fwd, None);
}

/// [`upstream_request`] with another target (path and query) than the request's.
pub fn upstream_request_to(
    out: &mut Vec<u8>,
    req: &RequestHead,
    fwd: &Forwarded<'_>,
    target: Option<&[u8]>,
) {
    upstream_head(out, req, fwd, target);
}

/// Where the head of a request to the upstream goes: HTTP/1.1 bytes (`Vec<u8>`), or typed
/// fields for an HTTP/2 stream (sluice-proxy's `h2_wire::Head2`). What is sent is decided once,
/// in [`upstream_head`]; a sink only writes it.
pub trait HeadSink {
    /// The method, the target (path and query) and `Host`.
    fn start(&mut self, method: &[u8], target: &[u8], host: &[u8]);
    /// One field, as it is.
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// `X-Forwarded-For` (the values `req` has, when `has_xff`, as [`xff_values`] gives
    /// them; then the client's address), `X-Real-IP` and `X-Forwarded-Proto`.
    fn forwarded(&mut self, req: &RequestHead, has_xff: bool, client_ip: &[u8], https: bool);
    /// The body's framing, and the end of the head.
    fn finish(&mut self, framing: Framing);
}

impl HeadSink for Vec<u8> {
    #[inline]
    fn start(&mut self, method: &[u8], target: &[u8], host: &[u8]) {
        self.extend_from_slice(method);
        self.push(b' ');
        self.extend_from_slice(target);
        self.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        self.extend_from_slice(host);
        self.extend_from_slice(b"\r\n");
    }

    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        line(self, name, value);
    }

    #[inline]
    fn forwarded(&mut self, req: &RequestHead, has_xff: bool, client_ip: &[u8], https: bool) {
        self.extend_from_slice(b"X-Forwarded-For: ");
        if has_xff {
            for v in xff_values(req) {
                self.extend_from_slice(v);
                self.extend_from_slice(b", ");
            }
        }
        self.extend_from_slice(client_ip);
        self.extend_from_slice(b"\r\nX-Real-IP: ");
        self.extend_from_slice(client_ip);
        self.extend_from_slice(if https {
            b"\r\nX-Forwarded-Proto: https\r\n"
        } else {
            b"\r\nX-Forwarded-Proto: http\r\n"
        });
    }

    #[inline]
    fn finish(&mut self, framing: Framing) {
        match framing {
            Framing::Length(n) => {
                self.extend_from_slice(b"Content-Length: ");
                self.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                self.extend_from_slice(b"\r\n");
            }
            Framing::Chunked => self.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            Framing::None | Framing::Close => {}
        }
        self.extend_from_slice(b"\r\n");
    }
}

/// The values of a request's `X-Forwarded-For` fields, in order. Several are one list (RFC 9110
/// §5.3): a sink joins them, then appends the client's address.
pub fn xff_values(req: &RequestHead) -> impl Iterator<Item = &[u8]> {
    let raw = req.raw();
    req.fields()
        .iter()
        .filter(|h| h.kind == HeaderKind::XForwardedFor)
        .map(move |h| h.value(raw))
}

/// The head of a request to the upstream, into `out`: hop-by-hop fields removed (RFC 9110
/// §7.6.1), plugin edits applied, `X-Forwarded-*` and `X-Real-IP` set, framing re-declared.
/// `target`: another path and query than the request's.
#[inline]
pub fn upstream_head<S: HeadSink>(
    out: &mut S,
    req: &RequestHead,
    fwd: &Forwarded<'_>,
    target: Option<&[u8]>,
) {
    let raw = req.raw();
    out.start(req.method_bytes(), target.unwrap_or(req.target()), fwd.host);
    let mut has_xff = false;
    for h in req.fields() {
        match h.kind {
            HeaderKind::Other => {}
            HeaderKind::Upgrade if fwd.websocket => {}
            HeaderKind::XForwardedFor => {
                has_xff = true;
                continue;
            }
            _ => continue,
        }
        out.field(h.name(raw), h.value(raw));
    }
    for (n, v) in req.added_fields() {
        out.field(n, v);
    }
    out.forwarded(req, has_xff, fwd.client_ip, fwd.https);
    if req.has_host() {
        out.field(b"X-Forwarded-Host", req.host());
    }
    if fwd.websocket {
        out.field(b"Connection", b"upgrade");
    }
    out.finish(req.framing());
}

/// Writes one header field line, `name: value` and CRLF.
#[inline]
pub fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// How the response body is framed towards the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFraming {
    /// No body follows; a Content-Length from upstream is kept (HEAD, 304).
    NoBody,
    /// The upstream's Content-Length is kept.
    Length,
    /// A body of this length replaces the upstream's.
    Fixed(u64),
    /// Re-chunked.
    Chunked,
    /// Delimited by closing the connection (HTTP/1.0 clients).
    Close,
}

/// The `Connection` field the proxy adds to its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionHeader {
    /// Nothing: HTTP/1.1 keep-alive is the default.
    None,
    /// The proxy closes the connection after this response.
    Close,
    /// An HTTP/1.0 client asked to keep the connection.
    KeepAlive,
}

fn status_line(out: &mut Vec<u8>, status: u16, reason: &[u8]) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(if reason.is_empty() {
        default_reason(status).as_bytes()
    } else {
        reason
    });
    out.extend_from_slice(b"\r\n");
}

fn finish(out: &mut Vec<u8>, framing: ClientFraming, connection: ConnectionHeader, upgrade: bool) {
    match framing {
        ClientFraming::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        ClientFraming::Fixed(n) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        _ => {}
    }
    out.extend_from_slice(match (upgrade, connection) {
        (true, _) => b"Connection: upgrade\r\n\r\n",
        (false, ConnectionHeader::None) => b"\r\n",
        (false, ConnectionHeader::Close) => b"Connection: close\r\n\r\n",
        (false, ConnectionHeader::KeepAlive) => b"Connection: keep-alive\r\n\r\n",
    });
}

/// Where a response head for the client goes: HTTP/1.1 bytes (`Vec<u8>`), or a typed head
/// for an HTTP/2 stream (the proxy's `h2_head::TypedAnswer`), so that a stream's answer is
/// never written as bytes to be parsed back. [`client_response`] decides what the head
/// carries; a sink only writes it.
pub trait AnswerSink {
    /// The status line (`reason` may be empty: the standard one is used).
    fn status(&mut self, status: u16, reason: &[u8]);
    /// One field, as it is.
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// Fields plugins added, as `name: value` CRLF lines.
    fn added(&mut self, lines: &[u8]);
    /// The body's framing, the `Connection` field, and the end of the head.
    fn finish(&mut self, framing: ClientFraming, connection: ConnectionHeader, upgrade: bool);
}

impl AnswerSink for Vec<u8> {
    #[inline]
    fn status(&mut self, status: u16, reason: &[u8]) {
        status_line(self, status, reason);
    }

    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        line(self, name, value);
    }

    #[inline]
    fn added(&mut self, lines: &[u8]) {
        self.extend_from_slice(lines);
    }

    #[inline]
    fn finish(&mut self, framing: ClientFraming, connection: ConnectionHeader, upgrade: bool) {
        finish(self, framing, connection, upgrade);
    }
}

/// Writes the response head for the client, with `edits` applied.
pub fn client_response<S: AnswerSink>(
    out: &mut S,
    resp: &ResponseHead,
    framing: ClientFraming,
    connection: ConnectionHeader,
    edits: &ResponseEdits,
) {
    let raw = resp.raw();
    match edits.status {
        Some(s) => out.status(s, b""),
        None => out.status(resp.status(), resp.reason()),
    }
    let upgrade = resp.status() == 101;
    for h in resp.fields() {
        let keep = match h.kind {
            HeaderKind::Other | HeaderKind::Host | HeaderKind::Expect => true,
            HeaderKind::XForwardedFor
            | HeaderKind::XForwardedProto
            | HeaderKind::XForwardedHost
            | HeaderKind::XRealIp => true,
            // A status a plugin set may forbid the node's length.
            HeaderKind::ContentLength => {
                !no_length(edits.status.unwrap_or(resp.status()))
                    && matches!(framing, ClientFraming::NoBody | ClientFraming::Length)
            }
            HeaderKind::Upgrade => upgrade,
            _ => false,
        };
        if keep && !edits.removes(h.name(raw)) {
            out.field(h.name(raw), h.value(raw));
        }
    }
    out.added(&edits.added);
    out.finish(framing, connection, upgrade);
}

/// Writes a response generated by the gateway or a plugin (head and body), with `edits`
/// applied. A HEAD request gets the head only.
pub fn own_response(
    out: &mut Vec<u8>,
    resp: &Response,
    connection: ConnectionHeader,
    edits: &ResponseEdits,
    head_request: bool,
) {
    let status = edits.status.unwrap_or(resp.status);
    status_line(out, status, b"");
    out.extend_from_slice(b"Server: sluice\r\n");
    for (n, v) in &resp.headers {
        if !edits.removes(n.as_bytes()) {
            line(out, n.as_bytes(), v);
        }
    }
    out.extend_from_slice(&edits.added);
    let body = edits.body.as_ref().unwrap_or(&resp.body);
    let no_body = bodiless(status);
    let framing = if no_body {
        ClientFraming::NoBody
    } else {
        ClientFraming::Fixed(body.len() as u64)
    };
    finish(out, framing, connection, false);
    if !no_body && !head_request {
        out.extend_from_slice(body);
    }
}

/// The status and body size `own_response` sends for `resp` (after `edits`).
pub fn own_response_size(resp: &Response, edits: &ResponseEdits, head_request: bool) -> (u16, u64) {
    let status = edits.status.unwrap_or(resp.status);
    let no_body = bodiless(status) || head_request;
    let body = edits.body.as_ref().unwrap_or(&resp.body);
    (status, if no_body { 0 } else { body.len() as u64 })
}

/// Writes a chunk-size line.
#[inline]
pub fn chunk_header(out: &mut Vec<u8>, len: usize) {
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
pub fn default_reason(status: u16) -> &'static str {
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
        402 => "Payment Required",
        406 => "Not Acceptable",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        423 => "Locked",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        451 => "Unavailable For Legal Reasons",
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
        507 => "Insufficient Storage",
        511 => "Network Authentication Required",
        _ => "Unknown",
    }
}

/// NGINX's small HTML page for `status` (what APISIX answers when a plugin gives a status and
/// no body).
pub fn page(status: u16) -> Response {
    let title = format!("{status} {}", default_reason(status));
    Response::new(status)
        .header("Content-Type", b"text/html")
        .body(format!(
            "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n<hr><center>sluice</center>\r\n</body>\r\n</html>\r\n"
        ))
}
