//! Upstream response head parsing. The same framing rules as for requests: a response the
//! proxy cannot frame without guessing becomes a 502, never a pass-through.

use std::mem::MaybeUninit;

use super::fields::{
    ConnOptions, Framing, HeaderKind, HeaderPos, classify, mark_named_by_connection, offsets,
    parse_content_length,
};

/// Most header fields accepted in an upstream response.
pub const MAX_RESPONSE_HEADERS: usize = 256;

/// A parsed upstream response head.
#[derive(Debug)]
pub struct ResponseHead {
    pub(crate) status: u16,
    pub(crate) reason: (u32, u32),
    pub(crate) headers: Vec<HeaderPos>,
    pub(crate) framing: Framing,
    /// The upstream connection may be reused after this response.
    pub(crate) keep_alive: bool,
    /// `Upgrade: websocket` with `Connection: upgrade` (meaningful on a 101).
    pub(crate) upgrade: bool,
    pub(crate) len: usize,
    pub(crate) raw: bytes::Bytes,
}

impl ResponseHead {
    /// Moves the head's bytes out of the read buffer (after a successful parse).
    pub fn take_bytes(&mut self, buf: &mut bytes::BytesMut) {
        self.raw = buf.split_to(self.len).freeze();
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The reason phrase (may be empty).
    pub fn reason(&self) -> &[u8] {
        &self.raw[self.reason.0 as usize..self.reason.1 as usize]
    }

    /// How the body is delimited.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The upstream connection may be reused after this response.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// A 101 that accepts a WebSocket upgrade.
    pub fn is_websocket_upgrade(&self) -> bool {
        self.upgrade
    }

    /// The header fields with their classification.
    pub fn fields(&self) -> &[HeaderPos] {
        &self.headers
    }

    /// The head's bytes.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// The first value of a header field (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| h.name(&self.raw).eq_ignore_ascii_case(name.as_bytes()))
            .map(|h| h.value(&self.raw))
    }

    /// Gives back the field vector for reuse.
    pub fn into_fields(self) -> Vec<HeaderPos> {
        self.headers
    }
}

/// Why a response head is unusable; the message is for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid response from upstream: {0}")]
pub struct BadResponse(pub &'static str);

/// Parses a response head. `head_request`: the request was HEAD, so no body follows.
/// `Ok(None)`: incomplete.
pub fn parse(
    buf: &[u8],
    head_request: bool,
    max_size: usize,
    headers: &mut Vec<HeaderPos>,
) -> Result<Option<ResponseHead>, BadResponse> {
    let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut raw)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > max_size {
                return Err(BadResponse("response header too large"));
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(BadResponse("too many response header fields"));
        }
        Err(_) => return Err(BadResponse("malformed response head")),
    };
    if len > max_size {
        return Err(BadResponse("response header too large"));
    }
    let status = resp.code.unwrap_or(0);
    let version = resp.version.unwrap_or(1);
    // httparse's reason when it lies in `buf` (two compares); else read from the status line.
    let reason = Some(match resp.reason.map(str::as_bytes) {
        Some(r) if within(buf, r) => offsets(buf, r),
        _ => reason_in(&buf[..len]),
    });
    let fields = resp.headers.iter().map(|h| (h.name.as_bytes(), h.value));
    assemble(
        buf,
        status,
        version,
        reason,
        fields,
        head_request,
        len,
        headers,
    )
    .map(Some)
}

/// Whether `part` is a slice of `buf`.
#[inline]
fn within(buf: &[u8], part: &[u8]) -> bool {
    let (b, p) = (buf.as_ptr() as usize, part.as_ptr() as usize);
    p >= b && p + part.len() <= b + buf.len()
}

/// Where the reason phrase is, read from the status line itself: httparse gives a reason that
/// is not UTF-8 (obs-text, which RFC 9112 allows) as a `&'static str` outside `buf`, whose
/// offsets into `buf` were garbage (found by the `response_head` fuzz target: a node's
/// `HTTP/1.1 101 Protoc\xe9ng` made the offsets underflow).
fn reason_in(head: &[u8]) -> (u32, u32) {
    let end = memchr::memchr(b'\n', head).unwrap_or(head.len());
    let end = if end > 0 && head[end - 1] == b'\r' {
        end - 1
    } else {
        end
    };
    // `HTTP/1.1 200` is 12 bytes; the reason follows its space.
    let mut start = 12.min(end);
    if start < end && head[start] == b' ' {
        start += 1;
    }
    (start as u32, end as u32)
}

/// A response head that arrived typed (an HTTP/2 node's answer), given to the engine as if
/// parsed, without being written as HTTP/1.1 bytes and parsed back: the same checks, limits
/// (`max_size` as the head's HTTP/1.1 size, [`MAX_RESPONSE_HEADERS`]) and framing rules as
/// [`parse`], on HTTP/1.1 semantics (persistent). `chunked`: its body will be given chunked
/// (it has no length of its own). `headers` is a reused vector.
pub fn from_fields<'a>(
    status: u16,
    reason: &[u8],
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    chunked: bool,
    head_request: bool,
    max_size: usize,
    headers: &mut Vec<HeaderPos>,
) -> Result<ResponseHead, BadResponse> {
    // Reason, then each name and value, back to back: the fields point into it.
    let mut raw = Vec::with_capacity(256);
    raw.extend_from_slice(reason);
    let mut ends = Vec::with_capacity(fields.size_hint().0 + 1);
    for (n, v) in fields {
        if ends.len() == MAX_RESPONSE_HEADERS {
            return Err(BadResponse("too many response header fields"));
        }
        // Whitespace around a value is not part of it (RFC 9110 §5.5), as the parser reads
        // one; HTTP/2 forbids it (RFC 9113 §8.2.1) but a node may send it.
        let v = v.trim_ascii();
        raw.extend_from_slice(n);
        let mid = raw.len();
        raw.extend_from_slice(v);
        ends.push((mid, raw.len()));
    }
    if chunked {
        raw.extend_from_slice(b"transfer-encodingchunked");
        ends.push((raw.len() - 7, raw.len()));
    }
    // Its size written as HTTP/1.1: `HTTP/1.1 200 ` and the reason and CRLF, `: ` and CRLF
    // per field, the final CRLF.
    if 15 + raw.len() + 4 * ends.len() + 2 > max_size {
        return Err(BadResponse("response header too large"));
    }
    let mut start = reason.len();
    let slices = ends.iter().map(|&(mid, end)| {
        let f = (&raw[start..mid], &raw[mid..end]);
        start = end;
        f
    });
    let reason = (!reason.is_empty()).then_some((0, reason.len() as u32));
    let mut head = assemble(&raw, status, 1, reason, slices, head_request, 0, headers)?;
    head.len = raw.len();
    head.raw = bytes::Bytes::from(raw);
    Ok(head)
}

/// Checks a head's fields and decides its framing. The fields are slices of `buf`, the head.
#[allow(clippy::too_many_arguments)]
#[inline]
fn assemble<'a>(
    buf: &[u8],
    status: u16,
    version: u8,
    reason: Option<(u32, u32)>,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    head_request: bool,
    len: usize,
    headers: &mut Vec<HeaderPos>,
) -> Result<ResponseHead, BadResponse> {
    if !(100..=999).contains(&status) {
        return Err(BadResponse("invalid status code"));
    }
    headers.clear();
    let mut content_length: Option<u64> = None;
    let mut te = 0;
    let mut conn = ConnOptions::default();
    for (name, v) in fields {
        let kind = classify(name);
        match kind {
            HeaderKind::ContentLength => {
                let Some(n) = parse_content_length(v) else {
                    return Err(BadResponse("invalid Content-Length"));
                };
                if content_length.is_some_and(|m| m != n) {
                    return Err(BadResponse("conflicting Content-Length values"));
                }
                content_length = Some(n);
            }
            HeaderKind::TransferEncoding => {
                te += 1;
                if !v.eq_ignore_ascii_case(b"chunked") {
                    return Err(BadResponse("unsupported Transfer-Encoding"));
                }
            }
            HeaderKind::Connection => conn.connection(v),
            HeaderKind::Upgrade => conn.upgrade_field(v),
            _ => {}
        }
        headers.push(HeaderPos {
            name: offsets(buf, name),
            value: offsets(buf, v),
            kind,
        });
    }
    if conn.names_fields {
        mark_named_by_connection(buf, headers);
    }
    let no_body = head_request || super::fields::bodiless(status);
    let framing = if no_body {
        Framing::None
    } else if te > 0 {
        if content_length.is_some() {
            return Err(BadResponse("both Content-Length and Transfer-Encoding"));
        }
        if te > 1 {
            return Err(BadResponse("repeated Transfer-Encoding"));
        }
        Framing::Chunked
    } else {
        match content_length {
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        }
    };
    let keep_alive = framing != Framing::Close && conn.persistent(version);
    Ok(ResponseHead {
        status,
        reason: reason.unwrap_or((0, 0)),
        headers: std::mem::take(headers),
        framing,
        keep_alive,
        upgrade: conn.websocket_upgrade(),
        len,
        raw: bytes::Bytes::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(raw: &str, head: bool) -> ResponseHead {
        parse(raw.as_bytes(), head, 4096, &mut Vec::new())
            .unwrap()
            .unwrap()
    }

    fn bad(raw: &str) -> &'static str {
        parse(raw.as_bytes(), false, 4096, &mut Vec::new())
            .unwrap_err()
            .0
    }

    /// `from_fields` on `fields`: (status, chunked, HEAD request, size limit).
    fn typed(
        fields: &[(&[u8], &[u8])],
        (status, chunked, head, max): (u16, bool, bool, usize),
    ) -> Result<ResponseHead, &'static str> {
        let reason: &[u8] = if status == 200 { b"OK" } else { b"" };
        let it = fields.iter().copied();
        from_fields(status, reason, it, chunked, head, max, &mut Vec::new()).map_err(|e| e.0)
    }

    /// Found by the `response_head` fuzz target: a reason phrase that is not UTF-8 (obs-text)
    /// made the reason's offsets underflow (a panic in debug builds, a garbage slice after).
    #[test]
    fn a_reason_phrase_that_is_not_utf8_is_kept_as_sent() {
        for (raw, reason) in [
            (
                &b"HTTP/1.1 200 \xe9t\xe9\r\nContent-Length: 0\r\n\r\n"[..],
                &b"\xe9t\xe9"[..],
            ),
            (b"HTTP/1.1 404 Not Found\r\n\r\n", b"Not Found"),
            (b"HTTP/1.1 204 \r\n\r\n", b""),
            (b"HTTP/1.1 204\r\n\r\n", b""),
        ] {
            let mut h = parse(raw, false, 4096, &mut Vec::new()).unwrap().unwrap();
            let mut buf = bytes::BytesMut::from(raw);
            h.take_bytes(&mut buf);
            assert_eq!(h.reason(), reason, "{:?}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn a_head_given_typed_reads_as_the_same_head_parsed() {
        let fields: [(&[u8], &[u8]); 3] = [
            (b"content-type", b"text/plain"),
            (b"x-two", b"a, b"),
            (b"content-length", b"11"),
        ];
        let typed_ok = typed(&fields, (200, false, false, 4096)).unwrap();
        let wire = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-two: a, b\r\ncontent-length: 11\r\n\r\n";
        let mut parsed = parse_ok(wire, false);
        parsed.raw = bytes::Bytes::from_static(wire.as_bytes());
        assert_eq!(typed_ok.status(), parsed.status());
        assert_eq!(typed_ok.reason(), parsed.reason());
        assert_eq!(typed_ok.framing(), parsed.framing());
        assert_eq!(typed_ok.keep_alive(), parsed.keep_alive());
        let names = |h: &ResponseHead| -> Vec<(Vec<u8>, Vec<u8>, HeaderKind)> {
            h.fields()
                .iter()
                .map(|f| (f.name(h.raw()).to_vec(), f.value(h.raw()).to_vec(), f.kind))
                .collect()
        };
        assert_eq!(names(&typed_ok), names(&parsed));
        assert_eq!(typed_ok.header("x-two"), Some(&b"a, b"[..]));
        // Whitespace around a value is dropped, as the parser drops it.
        let padded: [(&[u8], &[u8]); 1] = [(b"x-pad", b"  v w \t")];
        let typed_padded = typed(&padded, (200, false, false, 4096)).unwrap();
        let wire_padded = "HTTP/1.1 200 OK\r\nx-pad:   v w \t\r\n\r\n";
        let mut parsed_padded = parse_ok(wire_padded, false);
        parsed_padded.raw = bytes::Bytes::from_static(wire_padded.as_bytes());
        assert_eq!(typed_padded.header("x-pad"), Some(&b"v w"[..]));
        assert_eq!(names(&typed_padded), names(&parsed_padded));

        // Without a length, the body comes chunked; HEAD has none; the same checks.
        let chunked = typed(&[], (200, true, false, 4096)).unwrap();
        assert_eq!(chunked.framing(), Framing::Chunked);
        let head = typed(&fields, (200, false, true, 4096)).unwrap();
        assert_eq!(head.framing(), Framing::None);
        let bad: [(&[u8], &[u8]); 1] = [(b"content-length", b"x")];
        let e = typed(&bad, (200, false, false, 4096));
        assert_eq!(e.unwrap_err(), "invalid Content-Length");
        assert_eq!(
            typed(&[], (1000, false, false, 4096)).unwrap_err(),
            "invalid status code"
        );

        // The limits of a parsed head: its size as HTTP/1.1, and the number of fields.
        let exact = wire.len();
        assert!(typed(&fields, (200, false, false, exact)).is_ok());
        let over = typed(&fields, (200, false, false, exact - 1));
        assert_eq!(over.unwrap_err(), "response header too large");
        assert!(parse(wire.as_bytes(), false, exact - 1, &mut Vec::new()).is_err());
        let many = vec![(&b"x-a"[..], &b"1"[..]); MAX_RESPONSE_HEADERS + 1];
        let e = typed(&many, (200, false, false, 1 << 20));
        assert_eq!(e.unwrap_err(), "too many response header fields");
    }

    #[test]
    fn framing_follows_rfc_9112_section_6_3() {
        assert_eq!(
            parse_ok("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", false).framing,
            Framing::Length(11)
        );
        assert_eq!(
            parse_ok(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                false
            )
            .framing,
            Framing::Chunked
        );
        let close = parse_ok("HTTP/1.1 200 OK\r\n\r\n", false);
        assert_eq!(close.framing, Framing::Close);
        assert!(!close.keep_alive);
        assert_eq!(
            parse_ok("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", true).framing,
            Framing::None
        );
        assert_eq!(
            parse_ok(
                "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
                false
            )
            .framing,
            Framing::None
        );
        assert_eq!(
            parse_ok("HTTP/1.1 304 Not Modified\r\n\r\n", false).framing,
            Framing::None
        );
        assert_eq!(
            parse_ok("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", false).framing,
            Framing::None
        );
    }

    #[test]
    fn keep_alive_depends_on_version_and_connection() {
        assert!(parse_ok("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false).keep_alive);
        assert!(
            !parse_ok(
                "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                false
            )
            .keep_alive
        );
        assert!(!parse_ok("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false).keep_alive);
        assert!(
            parse_ok(
                "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
                false
            )
            .keep_alive
        );
    }

    #[test]
    fn ambiguous_responses_are_refused() {
        assert_eq!(
            bad("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            "both Content-Length and Transfer-Encoding"
        );
        assert_eq!(
            bad("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            "conflicting Content-Length values"
        );
        assert_eq!(
            bad("HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n"),
            "invalid Content-Length"
        );
        assert_eq!(
            bad("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            "unsupported Transfer-Encoding"
        );
        assert_eq!(bad("HTTP/1.1 2000 OK\r\n\r\n"), "malformed response head");
        assert_eq!(bad("garbage\r\n\r\n"), "malformed response head");
    }

    #[test]
    fn oversized_heads_are_refused_even_when_incomplete() {
        let big = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(5000));
        assert_eq!(
            parse(big.as_bytes(), false, 4096, &mut Vec::new())
                .unwrap_err()
                .0,
            "response header too large"
        );
    }
}
