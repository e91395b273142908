//! A request head as an HTTP/2 stream sends it (`Head2`): built typed from the engine's request
//! (`TypedHead`, written by `write::upstream_head` as HTTP/1.1 bytes are), or read back from
//! HTTP/1.1 bytes (`h2_up::head2`); a client stream's head as the engine reads one
//! (`request_head`); and a response head's fields as an HTTP/2 stream answers with them
//! (`response_headers`). A leaf: the upstream module names it, and it names nothing of this
//! crate.

use bytes::BytesMut;
use sluice_core::http::response::ResponseHead;
use sluice_core::http::write::ClientFraming;
use sluice_core::http::{Framing, HeaderKind, HeaderPos, RequestHead, request, write};

/// A header field: name and value.
type Field<'a> = (&'a [u8], &'a [u8]);

/// A checked stream's head (`h2_wire::check_head`) as the engine reads a request head, built from its
/// fields into the engine's empty read buffer (`request::from_fields`), with no HTTP/1.1 text
/// written or parsed: `host` from `:authority`, the fields but `te`, the `cookie` fields
/// joined (RFC 9113 §8.2.3), and what an HTTP/1.1 connection would say of the exchange:
/// `connection: close` (one exchange per stream), `transfer-encoding: chunked` for a body of
/// no declared length (`chunked`), and a WebSocket's extended CONNECT as an HTTP/1.1 upgrade
/// request (RFC 8441 §5). The engine's limits apply to the head's size as HTTP/1.1.
#[allow(clippy::too_many_arguments)]
pub(crate) fn request_head(
    method: &http::Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    websocket: bool,
    chunked: bool,
    limits: &request::HeadLimits,
    buf: &mut BytesMut,
    fields: &mut Vec<HeaderPos>,
) -> Result<RequestHead, request::Reject> {
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri.authority().map(|a| a.as_str().as_bytes());
    let key;
    let (method, connection): (&[u8], &[Field<'_>]) = if websocket {
        // The key only has to be a fresh nonce; the answer's accept value is not passed on.
        use base64::Engine as _;
        key = base64::engine::general_purpose::STANDARD.encode(fastrand::u128(..).to_le_bytes());
        (
            b"GET",
            &[(b"upgrade", b"websocket"), (b"connection", b"upgrade")],
        )
    } else if chunked {
        key = String::new();
        (
            method.as_str().as_bytes(),
            &[
                (b"transfer-encoding", b"chunked"),
                (b"connection", b"close"),
            ],
        )
    } else {
        key = String::new();
        (method.as_str().as_bytes(), &[(b"connection", b"close")])
    };
    // The `cookie` fields go after the others: one as it is, several joined.
    let mut cookie: Option<&[u8]> = None;
    let mut joined: Option<Vec<u8>> = None;
    let mut all: Vec<Field<'_>> = Vec::with_capacity(headers.len() + 4);
    if let Some(a) = authority {
        all.push((b"host", a));
    }
    for (n, v) in headers {
        // Known names compare as their index, not as text.
        if n == http::header::COOKIE {
            match (&mut joined, cookie) {
                (Some(j), _) => {
                    j.extend_from_slice(b"; ");
                    j.extend_from_slice(v.as_bytes());
                }
                (None, Some(first)) => joined = Some([first, v.as_bytes()].join(&b"; "[..])),
                (None, None) => cookie = Some(v.as_bytes()),
            }
        } else if n != http::header::TE && (n != http::header::HOST || authority.is_none()) {
            all.push((n.as_str().as_bytes(), v.as_bytes()));
        }
    }
    if let Some(c) = joined.as_deref().or(cookie) {
        all.push((b"cookie", c));
    }
    all.extend_from_slice(connection);
    if !key.is_empty() {
        all.push((b"sec-websocket-key", key.as_bytes()));
    }
    request::from_fields(method, target.as_bytes(), &all, limits, buf, fields)
}

/// An HTTP/1.1 request head read back as an HTTP/2 one.
pub(crate) struct Head2 {
    pub(crate) method: http::Method,
    /// Path and query.
    pub(crate) path: String,
    /// From `Host`.
    pub(crate) authority: Option<String>,
    /// The fields, without `Host` and the HTTP/1.1 connection-specific ones (RFC 9113 §8.2.2);
    /// `te: trailers` only when `te` asks for it.
    pub(crate) headers: http::HeaderMap,
    pub(crate) framing: Framing,
}

/// A request to an HTTP/2 node (`tls`: over TLS, `https`), its URI built from its parts (the
/// path checked by `http` as a URI's would be), not formatted into one string and parsed back
/// whole, and set field by field rather than through `http`'s builder (the two measured about
/// 2,500 instructions per request on that path, bench/h2_upstream.sh --callgrind). The
/// authority comes parsed: the client's, or the node's, parsed once (`Node::uri_authority`).
pub(crate) fn node_request(
    tls: bool,
    method: http::Method,
    authority: http::uri::Authority,
    path: String,
    headers: http::HeaderMap,
) -> Result<http::Request<()>, http::Error> {
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(if tls {
        http::uri::Scheme::HTTPS
    } else {
        http::uri::Scheme::HTTP
    });
    parts.authority = Some(authority);
    parts.path_and_query = Some(http::uri::PathAndQuery::from_maybe_shared(
        bytes::Bytes::from(path),
    )?);
    let mut req = http::Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = http::Uri::from_parts(parts)?;
    *req.version_mut() = http::Version::HTTP_2;
    *req.headers_mut() = headers;
    Ok(req)
}

/// A `:authority` a request carries (a `Host` kept or set), parsed. Err: one `http` refuses.
pub(crate) fn given_authority(a: String) -> Result<http::uri::Authority, http::Error> {
    Ok(http::uri::Authority::from_maybe_shared(
        bytes::Bytes::from(a),
    )?)
}

/// A head that cannot be read back (more fields than HTTP/2 heads may carry here, a method
/// or field `http` refuses).
#[derive(Debug)]
pub(crate) struct BadHead;

/// Fields an HTTP/2 request may not carry (RFC 9113 §8.2.2), or that its pseudo-fields and
/// frames replace (`host`, `transfer-encoding`).
pub(crate) fn not_for_h2(name: &http::HeaderName) -> bool {
    use http::header::{CONNECTION, HOST, TE, TRANSFER_ENCODING, UPGRADE};
    name == CONNECTION
        || name == UPGRADE
        || name == TE
        || name == HOST
        || name == TRANSFER_ENCODING
        || name == "keep-alive"
        || name == "proxy-connection"
}

/// A request head for an HTTP/2 stream, written by `write::upstream_head`: the fields an
/// HTTP/1.1 upstream gets, typed, never written as HTTP/1.1 bytes and parsed back.
#[derive(Debug)]
pub(crate) struct TypedHead {
    method: Option<http::Method>,
    path: Option<String>,
    authority: Option<String>,
    headers: http::HeaderMap,
    framing: Framing,
    bad: bool,
}

impl Default for TypedHead {
    fn default() -> Self {
        TypedHead {
            method: None,
            path: None,
            authority: None,
            headers: http::HeaderMap::with_capacity(16),
            framing: Framing::None,
            bad: false,
        }
    }
}

impl TypedHead {
    /// The head, or why HTTP/2 cannot carry it (a method, name or value `http` refuses).
    pub(crate) fn build(self) -> Result<Head2, BadHead> {
        match (self.method, self.path) {
            (Some(method), Some(path)) if !self.bad => Ok(Head2 {
                method,
                path,
                authority: self.authority,
                headers: self.headers,
                framing: self.framing,
            }),
            _ => Err(BadHead),
        }
    }

    fn put(&mut self, name: http::HeaderName, value: &[u8]) {
        match http::HeaderValue::from_bytes(value) {
            Ok(v) => {
                self.headers.append(name, v);
            }
            Err(_) => self.bad = true,
        }
    }
}

impl write::HeadSink for TypedHead {
    fn start(&mut self, method: &[u8], target: &[u8], host: &[u8]) {
        self.method = http::Method::from_bytes(method).ok();
        self.path = std::str::from_utf8(target).ok().map(str::to_owned);
        self.authority = std::str::from_utf8(host)
            .ok()
            .filter(|h| !h.is_empty())
            .map(str::to_owned);
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        match http::HeaderName::from_bytes(name) {
            Ok(n) if not_for_h2(&n) => {}
            Ok(n) => self.put(n, value),
            Err(_) => self.bad = true,
        }
    }

    fn forwarded(
        &mut self,
        req: &sluice_core::http::RequestHead,
        has_xff: bool,
        client_ip: &[u8],
        https: bool,
    ) {
        let mut xff = Vec::with_capacity(client_ip.len());
        if has_xff {
            for v in write::xff_values(req) {
                xff.extend_from_slice(v);
                xff.extend_from_slice(b", ");
            }
        }
        xff.extend_from_slice(client_ip);
        self.put(http::HeaderName::from_static("x-forwarded-for"), &xff);
        self.put(http::HeaderName::from_static("x-real-ip"), client_ip);
        self.headers.append(
            http::HeaderName::from_static("x-forwarded-proto"),
            http::HeaderValue::from_static(if https { "https" } else { "http" }),
        );
    }

    fn finish(&mut self, framing: Framing) {
        if let Framing::Length(n) = framing {
            self.headers
                .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(n));
        }
        self.framing = framing;
    }
}

/// The response's end-to-end fields as an HTTP/2 header map.
pub(crate) fn response_headers(head: &ResponseHead) -> http::HeaderMap {
    let mut map = http::HeaderMap::with_capacity(head.fields().len());
    for f in head.fields() {
        let keep = matches!(
            f.kind,
            HeaderKind::Other
                | HeaderKind::ContentLength
                | HeaderKind::XForwardedFor
                | HeaderKind::XForwardedProto
                | HeaderKind::XForwardedHost
                | HeaderKind::XRealIp
                | HeaderKind::ProxyAuthenticate
        );
        if !keep {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(f.name(head.raw())),
            http::HeaderValue::from_bytes(f.value(head.raw())),
        ) {
            map.append(name, value);
        }
    }
    map
}

/// Passes an interim answer (1xx) on to a client's stream, not answered yet, as an
/// informational HEADERS frame (RFC 9113 §8.1), as HTTP/1.1 clients get it: a node's 103
/// Early Hints and the like, the engine's own 100 Continue. Not 101 (an upgrade is no interim
/// answer), and no `content-length` (RFC 9110 §8.6: the client would hold the final answer's
/// body to it). Nothing goes on a stream the client reset (h2 would send it regardless).
pub(crate) fn send_interim(
    respond: &mut h2::server::SendResponse<bytes::Bytes>,
    head: &ResponseHead,
) {
    let status = head.status();
    if !(100..200).contains(&status) || status == 101 {
        return;
    }
    let Ok(code) = http::StatusCode::from_u16(status) else {
        return;
    };
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if respond.poll_reset(&mut cx).is_ready() {
        return;
    }
    let mut resp = http::Response::new(());
    *resp.status_mut() = code;
    let mut headers = response_headers(head);
    headers.remove(http::header::CONTENT_LENGTH);
    *resp.headers_mut() = headers;
    let _ = respond.send_informational(resp);
}

/// A response head for a client's HTTP/2 stream, written by `write::client_response` as an
/// HTTP/1.1 client's is (the same fields kept, the same plugin edits), typed: never written as
/// HTTP/1.1 bytes to be parsed back (`h2_down::H2Client::answer`).
#[derive(Debug)]
pub(crate) struct TypedAnswer {
    pub(crate) status: u16,
    pub(crate) headers: http::HeaderMap,
    pub(crate) framing: ClientFraming,
}

impl Default for TypedAnswer {
    fn default() -> Self {
        TypedAnswer {
            status: 200,
            headers: http::HeaderMap::with_capacity(12),
            framing: ClientFraming::NoBody,
        }
    }
}

impl write::AnswerSink for TypedAnswer {
    fn status(&mut self, status: u16, _reason: &[u8]) {
        self.status = status;
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        // A name or value `http` refuses cannot have come through the engine's parser; the
        // HTTP/1.1-only fields have no place on a stream (RFC 9113 §8.2.2).
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(value),
        ) && !not_for_h2(&n)
        {
            self.headers.append(n, v);
        }
    }

    fn added(&mut self, lines: &[u8]) {
        for line in lines.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(colon) = line.iter().position(|b| *b == b':') {
                // Optional whitespace around the value is not part of it (RFC 9110 §5.5), and
                // RFC 9113 §8.2.1 makes a value that keeps it malformed.
                self.field(&line[..colon], line[colon + 1..].trim_ascii());
            }
        }
    }

    fn finish(&mut self, framing: ClientFraming, _: write::ConnectionHeader, _: bool) {
        if let ClientFraming::Fixed(n) = framing {
            self.headers
                .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(n));
        }
        if write::no_length(self.status) {
            // No length on a status without a body, whoever added one (RFC 9110 §8.6; a
            // stream with one is malformed, RFC 9113 §8.1.1).
            self.headers.remove(http::header::CONTENT_LENGTH);
        }
        self.framing = framing;
    }
}
