//! Request head parsing with the framing checks of RFC 9112 §6 and RELIABILITY.md §1.

use std::mem::MaybeUninit;

use sluice_router::Method;

/// Most header fields a request may carry, whatever the configuration says.
pub const MAX_HEADERS_CEILING: usize = 256;

use super::fields::{
    ConnOptions, Framing, HeaderKind, HeaderPos, classify, for_each_token,
    mark_named_by_connection, offsets, parse_content_length,
};
use super::head::RequestHead;

/// Limits applied while reading a request head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Longest request line (414 beyond).
    pub max_request_line: usize,
    /// Largest head (431 beyond).
    pub max_header_size: usize,
    /// Most header fields (431 beyond); [`MAX_HEADERS_CEILING`] at most, whatever is given.
    pub max_headers: usize,
}

/// Why a request was refused before routing. The connection is closed after the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    /// Status to answer with.
    pub status: u16,
    /// Message for the JSON body.
    pub message: &'static str,
}

const fn reject(status: u16, message: &'static str) -> Reject {
    Reject { status, message }
}

/// Checks a head's fields and target and decides its framing: the end of [`parse`] and of
/// [`from_fields`], its value `Ok(Some(head))` or a `return Err(..)` from the function it is
/// in. Every slice is part of `buf`, the head (`len` bytes of it). (A macro, not a function:
/// as an `#[inline(always)]` function its head was built and then moved into `parse`'s own,
/// 13 more instructions per request in scenario 1.)
macro_rules! assemble {
    ($buf:expr, $method_str:expr, $version:expr, $target:expr, $fields:expr, |$h:ident| ($name:expr, $value:expr), $len:expr, $headers:expr) => {{
        let buf: &[u8] = $buf;
        let method_str: &[u8] = $method_str;
        let version: u8 = $version;
        let target: &[u8] = $target;
        let len: usize = $len;
        let headers: &mut Vec<HeaderPos> = $headers;
        let method = Method::from_bytes(method_str);
        headers.clear();
        let mut host = None;
        let mut host_count = 0;
        let mut content_length: Option<u64> = None;
        let mut te_count = 0;
        let mut te_chunked = false;
        let mut conn = ConnOptions::default();
        let mut expect_continue = false;
        for $h in $fields {
            // `$name` read twice, as the parser first had it: bound once, scenario 1 measured
            // 9 more instructions per request.
            let kind = classify($name);
            let v: &[u8] = $value;
            match kind {
                HeaderKind::Host => {
                    host_count += 1;
                    host = Some(offsets(buf, v));
                }
                HeaderKind::ContentLength => {
                    let Some(n) = parse_content_length(v) else {
                        return Err(reject(400, "invalid Content-Length"));
                    };
                    if content_length.is_some_and(|m| m != n) {
                        return Err(reject(400, "conflicting Content-Length values"));
                    }
                    content_length = Some(n);
                }
                HeaderKind::TransferEncoding => {
                    te_count += 1;
                    te_chunked = v.eq_ignore_ascii_case(b"chunked");
                    if !te_chunked {
                        let mut last_chunked = false;
                        for_each_token(v, |t| last_chunked = t.eq_ignore_ascii_case(b"chunked"));
                        return Err(if last_chunked {
                            reject(501, "unsupported transfer coding")
                        } else {
                            reject(400, "invalid Transfer-Encoding")
                        });
                    }
                }
                HeaderKind::Connection => conn.connection(v),
                HeaderKind::Upgrade => conn.upgrade_field(v),
                HeaderKind::Expect => {
                    if v.eq_ignore_ascii_case(b"100-continue") {
                        expect_continue = true;
                    } else {
                        return Err(reject(417, "unsupported expectation"));
                    }
                }
                _ => {}
            }
            headers.push(HeaderPos {
                name: offsets(buf, $name),
                value: offsets(buf, v),
                kind,
            });
        }

        if te_count > 0 && content_length.is_some() {
            return Err(reject(400, "both Content-Length and Transfer-Encoding"));
        }
        if te_count > 1 {
            return Err(reject(400, "repeated Transfer-Encoding"));
        }
        if te_count > 0 && version == 0 {
            return Err(reject(400, "Transfer-Encoding in an HTTP/1.0 request"));
        }
        if host_count > 1 {
            return Err(reject(400, "more than one Host"));
        }

        // Request target forms (RFC 9112 §3.2).
        let (origin_form, authority) = match target.first() {
            Some(b'/') => (target, None),
            Some(b'*') if target.len() == 1 && method == Method::Options => (target, None),
            _ if method == Method::Connect => {
                return Err(reject(405, "CONNECT is not supported"));
            }
            _ => match split_absolute(target) {
                Some(parts) => parts,
                None => return Err(reject(400, "invalid request target")),
            },
        };
        if let Some(a) = authority {
            host = Some(offsets(buf, a));
        } else if host_count == 0 && version == 1 {
            return Err(reject(400, "missing Host"));
        }
        if let Some((s, e)) = host
            && !host_chars_ok(&buf[s as usize..e as usize])
        {
            return Err(reject(400, "invalid Host"));
        }
        if conn.names_fields {
            mark_named_by_connection(buf, headers);
        }

        let framing = if te_chunked {
            Framing::Chunked
        } else {
            match content_length {
                Some(0) | None => Framing::None,
                Some(n) => Framing::Length(n),
            }
        };
        let target_pos = offsets(buf, origin_form);
        // One pass finds the query and whether the path has a `%` at all (paths are short:
        // a byte loop costs less than two `memchr` calls; with `memchr` for the `?` and
        // `memchr_iter` for the `%`, scenario 1 measured 11,121 instructions per request
        // against 11,034 this way).
        let mut path_len = origin_form.len();
        let mut percent = false;
        for (i, &b) in origin_form.iter().enumerate() {
            if b == b'?' {
                path_len = i;
                break;
            }
            percent |= b == b'%';
        }
        if percent && stray_percent(&origin_form[..path_len]) {
            return Err(reject(400, "invalid percent-encoding in path"));
        }
        let path_end = target_pos.0 + path_len as u32;
        Ok(Some(RequestHead {
            method,
            method_raw: offsets(buf, method_str),
            target: target_pos,
            path_end,
            version,
            host,
            headers: std::mem::take(headers),
            raw: bytes::Bytes::new(),
            edits: None,
            framing,
            keep_alive: conn.persistent(version),
            websocket: conn.websocket_upgrade() && method == Method::Get && version == 1,
            expect_continue: expect_continue && version == 1,
            len,
        }))
    }};
}

/// Parses a request head from the start of `buf`.
///
/// `Ok(None)`: incomplete, read more (unless a limit is already exceeded, then `Err`).
/// `headers` is a reused vector; on success it moves into the head (put it back afterwards).
pub fn parse(
    buf: &[u8],
    limits: &HeadLimits,
    headers: &mut Vec<HeaderPos>,
) -> Result<Option<RequestHead>, Reject> {
    let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS_CEILING];
    let mut req = httparse::Request::new(&mut []);
    // Validation keeps `max_headers` within the ceiling; a caller that does not is held to it
    // (the h2_frames fuzz target's node asked for 1,000, and the slice index panicked).
    let most = limits.max_headers.min(MAX_HEADERS_CEILING);
    let status = match req.parse_with_uninit_headers(buf, &mut raw[..most]) {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => {
            return Err(reject(431, "too many request header fields"));
        }
        Err(e) => {
            let r = match e {
                httparse::Error::Version => reject(400, "unsupported HTTP version"),
                httparse::Error::HeaderName | httparse::Error::HeaderValue => {
                    reject(400, "invalid request header field")
                }
                _ => reject(400, "malformed request"),
            };
            // A line too long for the limits is a 414/431 even if it is also malformed later.
            return Err(check_sizes(buf, limits).unwrap_or(r));
        }
    };
    let len = match status {
        httparse::Status::Partial => {
            return match check_sizes(buf, limits) {
                Some(r) => Err(r),
                None => Ok(None),
            };
        }
        httparse::Status::Complete(n) => n,
    };
    if let Some(r) = check_sizes(&buf[..len], limits) {
        return Err(r);
    }

    let method_str = req.method.unwrap_or_default().as_bytes();
    let version = req.version.unwrap_or(1);
    let target = req.path.unwrap_or_default().as_bytes();
    assemble!(
        buf,
        method_str,
        version,
        target,
        req.headers.iter(),
        |h| (h.name.as_bytes(), h.value),
        len,
        headers
    )
}

/// A request head that arrived typed (an HTTP/2 stream's), written into the empty `buf` as
/// the engine reads a head there: method, target and each field's name and value back to
/// back, with no HTTP/1.1 text to parse. The same checks and framing rules as [`parse`], and
/// its limits applied to the head's size as HTTP/1.1 (`METHOD target HTTP/1.1`, `: ` and CRLF
/// per field). The head is `buf[..len]` ([`RequestHead::take_bytes`]); `headers` is a reused
/// vector. Refused, `buf` holds the request line as HTTP/1.1 text, for the access log.
pub fn from_fields(
    method: &[u8],
    target: &[u8],
    fields: &[(&[u8], &[u8])],
    limits: &HeadLimits,
    buf: &mut bytes::BytesMut,
    headers: &mut Vec<HeaderPos>,
) -> Result<RequestHead, Reject> {
    debug_assert!(buf.is_empty());
    // In `parse`'s order: the field count (httparse's), then the request line, then the
    // head's size. The line counts to its `\n` as `check_sizes` does (`METHOD target
    // HTTP/1.1\r`).
    let refused = if fields.len() > limits.max_headers {
        Some(reject(431, "too many request header fields"))
    } else if method.len() + 1 + target.len() + 10 > limits.max_request_line {
        Some(reject(414, "request line too long"))
    } else {
        None
    };
    let line = method.len() + 1 + target.len() + 9;
    let mut size = line + 2 + 2;
    for (n, v) in fields {
        size += n.len() + 2 + v.len() + 2;
    }
    if let Some(r) =
        refused.or((size > limits.max_header_size).then(|| reject(431, "request header too large")))
    {
        request_line(buf, method, target);
        return Err(r);
    }
    buf.reserve(size);
    buf.extend_from_slice(method);
    buf.extend_from_slice(target);
    for (n, v) in fields {
        buf.extend_from_slice(n);
        buf.extend_from_slice(v);
    }
    let (method_in, target_in) = (method, target);
    let raw = &buf[..];
    let (method, rest) = raw.split_at(method.len());
    let (target, mut rest) = rest.split_at(target.len());
    let slices = fields.iter().map(|(n, v)| {
        let (name, r) = rest.split_at(n.len());
        let (value, r) = r.split_at(v.len());
        rest = r;
        (name, value)
    });
    let head = || -> Result<Option<RequestHead>, Reject> {
        assemble!(
            raw,
            method,
            1,
            target,
            slices,
            |f| (f.0, f.1),
            raw.len(),
            headers
        )
    };
    match head() {
        Ok(head) => Ok(head.expect("assemble gives a head or refuses")),
        Err(r) => {
            buf.clear();
            request_line(buf, method_in, target_in);
            Err(r)
        }
    }
}

/// A refused typed head leaves its request line in `buf` as HTTP/1.1 text, where the engine
/// reads a refused head's line for the access log (as it would have arrived over HTTP/1.1).
fn request_line(buf: &mut bytes::BytesMut, method: &[u8], target: &[u8]) {
    buf.clear();
    buf.extend_from_slice(method);
    buf.extend_from_slice(b" ");
    buf.extend_from_slice(target);
    buf.extend_from_slice(b" HTTP/1.1\r\n");
}

/// 414 when the request line is too long, 431 when the head is.
fn check_sizes(buf: &[u8], limits: &HeadLimits) -> Option<Reject> {
    let line_end = memchr::memchr(b'\n', buf);
    match line_end {
        Some(n) if n > limits.max_request_line => {
            return Some(reject(414, "request line too long"));
        }
        None if buf.len() > limits.max_request_line => {
            return Some(reject(414, "request line too long"));
        }
        _ => {}
    }
    if buf.len() > limits.max_header_size {
        return Some(reject(431, "request header too large"));
    }
    None
}

/// Splits `http://authority/path?q` into the origin-form `/path?q` and the authority.
/// Whether `path` has a `%` not followed by two hex digits (RFC 3986 §2.1's `pct-encoded`).
/// Such a path has no one decoding: `%%44e` decodes to `%De`, a new escape, so the path a
/// route matched and the one a node decodes could differ. NGINX answers it 400, as here; the
/// query is not decoded by the gateway and is left alone, as NGINX leaves it.
pub fn stray_percent(path: &[u8]) -> bool {
    memchr::memchr_iter(b'%', path).any(|i| {
        !matches!(path.get(i + 1..i + 3), Some([a, b]) if a.is_ascii_hexdigit() && b.is_ascii_hexdigit())
    })
}

fn split_absolute(target: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    let rest = if target.len() > 7 && target[..7].eq_ignore_ascii_case(b"http://") {
        &target[7..]
    } else if target.len() > 8 && target[..8].eq_ignore_ascii_case(b"https://") {
        &target[8..]
    } else {
        return None;
    };
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.is_empty() || authority.contains(&b'@') {
        return None;
    }
    let path = &rest[end..];
    if path.first() != Some(&b'/') {
        // `http://h` or `http://h?q`: the path is empty; only the `/` form is forwarded.
        return None;
    }
    Some((path, Some(authority)))
}

/// Whether `h` is a `Host` (or `:authority`) Sluice forwards: letters, digits and
/// `. - _ : [ ] ~ %`, at most 1,024 bytes. Stricter than RFC 3986's reg-name (which allows
/// `!$&'()*+,;=`): no name a DNS server knows needs them, and a node's parser may split on them.
pub fn valid_host(h: &[u8]) -> bool {
    host_chars_ok(h)
}

/// The bytes [`valid_host`] lets through, as a table.
const HOST_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(c, b'.' | b'-' | b'_' | b':' | b'[' | b']' | b'~' | b'%');
        b += 1;
    }
    t
};

/// [`valid_host`], inlined into the parser. Written by hand with a table (one load and one
/// branch per byte): the comparisons, through `Iterator::all`, were a call of their own from
/// the parser once a second crate used them, 147 instructions per request for a 14-byte
/// `Host` (scenario 1 measured 11,106 instructions per request against 11,034 before).
#[inline(always)]
fn host_chars_ok(h: &[u8]) -> bool {
    if h.len() > 1024 {
        return false;
    }
    for &b in h {
        if !HOST_BYTES[b as usize] {
            return false;
        }
    }
    true
}

/// A request head parsed from `raw` (its head only), for tests.
#[cfg(test)]
pub(crate) fn test_head(raw: &str) -> RequestHead {
    let limits = HeadLimits {
        max_request_line: 4096,
        max_header_size: 4096,
        max_headers: 32,
    };
    let mut buf = bytes::BytesMut::from(raw.as_bytes());
    let mut req = parse(&buf.clone(), &limits, &mut Vec::new())
        .unwrap()
        .unwrap();
    req.take_bytes(&mut buf);
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes a `Host` may hold, as documented on [`valid_host`], and its length.
    #[test]
    fn host_bytes_are_the_documented_ones() {
        let allowed: Vec<u8> = (b'a'..=b'z')
            .chain(b'A'..=b'Z')
            .chain(b'0'..=b'9')
            .chain(*b".-_:[]~%")
            .collect();
        for b in 0..=255u8 {
            assert_eq!(valid_host(&[b]), allowed.contains(&b), "byte {b:#04x}");
        }
        assert!(valid_host(&[b'a'; 1024]));
        assert!(!valid_host(&[b'a'; 1025]));
        assert!(valid_host(b""));
    }

    /// A limit past the ceiling is held to the ceiling (it panicked: found by the h2_frames
    /// fuzz target, whose node asked for 1,000 fields).
    #[test]
    fn a_field_limit_past_the_ceiling_is_the_ceiling() {
        let limits = HeadLimits {
            max_request_line: 4096,
            max_header_size: 1 << 20,
            max_headers: 1000,
        };
        let head = |n: usize| {
            let mut raw = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
            for i in 1..n {
                raw.push_str(&format!("X-{i}: v\r\n"));
            }
            raw.push_str("\r\n");
            raw
        };
        let at = parse(
            head(MAX_HEADERS_CEILING).as_bytes(),
            &limits,
            &mut Vec::new(),
        );
        assert!(matches!(at, Ok(Some(_))), "{at:?}");
        let past = parse(
            head(MAX_HEADERS_CEILING + 1).as_bytes(),
            &limits,
            &mut Vec::new(),
        );
        assert_eq!(past.err().map(|r| r.status), Some(431));
    }

    const LIMITS: HeadLimits = HeadLimits {
        max_request_line: 64,
        max_header_size: 256,
        max_headers: 8,
    };

    fn ok(raw: &str) -> RequestHead {
        let mut buf = bytes::BytesMut::from(raw.as_bytes());
        match parse(&buf.clone(), &LIMITS, &mut Vec::new()) {
            Ok(Some(mut h)) => {
                h.take_bytes(&mut buf);
                h
            }
            Ok(None) => panic!("incomplete: {raw:?}"),
            Err(r) => panic!("rejected {r:?}: {raw:?}"),
        }
    }

    fn status(raw: &[u8]) -> u16 {
        match parse(raw, &LIMITS, &mut Vec::new()) {
            Ok(Some(_)) => 200,
            Ok(None) => 0,
            Err(r) => r.status,
        }
    }

    #[test]
    fn a_simple_get_parses() {
        let raw = "GET /hello?x=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n";
        let h = ok(raw);
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.target(), b"/hello?x=1");
        assert_eq!(h.path(), b"/hello");
        assert_eq!(h.host(), b"example.com");
        assert_eq!(h.framing, Framing::None);
        assert!(h.keep_alive);
        assert_eq!(h.len, raw.len());
        assert_eq!(h.headers.len(), 2);
    }

    #[test]
    fn a_stray_percent_in_the_path_is_refused_as_nginx_refuses_it() {
        for t in ["/%%44e", "/a%2", "/a%", "/%zz", "/a%2g/b", "http://h/%x"] {
            let raw = format!("GET {t} HTTP/1.1\r\nHost: a\r\n\r\n");
            assert_eq!(status(raw.as_bytes()), 400, "{t}");
        }
        // Escapes of two hex digits pass, and the query is not the gateway's to decode.
        for t in ["/%61dmin", "/a%2Fb%2f", "/a?q=%", "/a?%zz"] {
            let raw = format!("GET {t} HTTP/1.1\r\nHost: a\r\n\r\n");
            assert_eq!(
                ok(&raw).target(),
                t.trim_start_matches("http://h").as_bytes()
            );
        }
    }

    #[test]
    fn bodies_are_framed_by_length_or_chunked() {
        assert_eq!(
            ok("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n").framing,
            Framing::Length(5)
        );
        assert_eq!(
            ok("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n")
                .framing,
            Framing::Length(5)
        );
        assert_eq!(
            ok("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n").framing,
            Framing::Chunked
        );
    }

    #[test]
    fn ambiguous_framing_is_rejected() {
        let cases: &[(&[u8], u16)] = &[
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
            (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX-Bad : a\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX-Bad: a\rb\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX-Bad: a\0b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
            (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 400),
            (b"GET hello HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", 405),
            (b"GET / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n", 417),
        ];
        for (raw, want) in cases {
            assert_eq!(status(raw), *want, "{:?}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn limits_give_414_and_431() {
        let long_line = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(100));
        assert_eq!(status(long_line.as_bytes()), 414);
        let partial_long = format!("GET /{}", "a".repeat(100));
        assert_eq!(status(partial_long.as_bytes()), 414);
        let big_head = format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
            "b".repeat(300)
        );
        assert_eq!(status(big_head.as_bytes()), 431);
        let many = format!("GET / HTTP/1.1\r\nHost: a\r\n{}\r\n", "X: 1\r\n".repeat(9));
        assert_eq!(status(many.as_bytes()), 431);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\n"), 0);
    }

    /// The head parsed from `raw`'s text, and the same head given typed (its fields taken
    /// from that text): one outcome, field for field.
    fn both(raw: &str) -> (Result<RequestHead, Reject>, Result<RequestHead, Reject>) {
        let text = raw.as_bytes();
        let mut buf = bytes::BytesMut::from(text);
        let parsed = parse(text, &LIMITS, &mut Vec::new()).map(|h| {
            let mut h = h.expect("whole");
            h.take_bytes(&mut buf);
            h
        });
        let head_end = raw.find("\r\n\r\n").unwrap();
        let mut lines = raw[..head_end].split("\r\n");
        let mut line = lines.next().unwrap().split(' ');
        let (method, target) = (line.next().unwrap(), line.next().unwrap());
        let fields: Vec<(&[u8], &[u8])> = lines
            .map(|l| {
                let (n, v) = l.split_once(": ").unwrap();
                (n.as_bytes(), v.as_bytes())
            })
            .collect();
        let mut buf = bytes::BytesMut::new();
        let typed = from_fields(
            method.as_bytes(),
            target.as_bytes(),
            &fields,
            &LIMITS,
            &mut buf,
            &mut Vec::new(),
        )
        .map(|mut h| {
            h.take_bytes(&mut buf);
            h
        });
        match &typed {
            Ok(_) => assert!(buf.is_empty(), "the typed head is all of what it wrote"),
            // Refused: the request line, for the access log.
            Err(_) => assert_eq!(
                &buf[..],
                format!("{method} {target} HTTP/1.1\r\n").as_bytes()
            ),
        }
        (parsed, typed)
    }

    #[test]
    fn a_head_given_typed_reads_as_the_same_head_parsed() {
        let same = [
            "GET /hello?x=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
            "POST /p HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\nconnection: close\r\n\r\n",
            "POST /p HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n",
            "GET /ws HTTP/1.1\r\nhost: a\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nhost: a\r\nconnection: x-secret\r\nx-secret: 1\r\nexpect: 100-continue\r\n\r\n",
        ];
        for raw in same {
            let (p, t) = both(raw);
            let (p, t) = (p.unwrap(), t.unwrap());
            assert_eq!(p.method_bytes(), t.method_bytes(), "{raw:?}");
            assert_eq!(p.target(), t.target(), "{raw:?}");
            assert_eq!(p.path(), t.path(), "{raw:?}");
            assert_eq!(p.query(), t.query(), "{raw:?}");
            assert_eq!(p.host(), t.host(), "{raw:?}");
            assert_eq!(p.framing, t.framing, "{raw:?}");
            assert_eq!(p.keep_alive, t.keep_alive, "{raw:?}");
            assert_eq!(p.websocket, t.websocket, "{raw:?}");
            assert_eq!(p.expect_continue, t.expect_continue, "{raw:?}");
            let fields = |h: &RequestHead| -> Vec<_> {
                h.fields()
                    .iter()
                    .map(|f| (f.name(h.raw()).to_vec(), f.value(h.raw()).to_vec(), f.kind))
                    .collect()
            };
            assert_eq!(fields(&p), fields(&t), "{raw:?}");
        }
        let refused = [
            "POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nhost: a b\r\n\r\n",
            "GET / HTTP/1.1\r\naccept: *\r\n\r\n",
            "GET / HTTP/1.1\r\nhost: a\r\nexpect: something\r\n\r\n",
            // The limits, on the head's size as HTTP/1.1.
            "GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nhost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nhost: a\r\nx: 1\r\nx: 2\r\nx: 3\r\nx: 4\r\nx: 5\r\nx: 6\r\nx: 7\r\nx: 8\r\n\r\n",
        ];
        for raw in refused {
            let (p, t) = both(raw);
            let status =
                |r: Result<RequestHead, Reject>| r.map(|_| 200).unwrap_or_else(|r| r.status);
            let (p, t) = (status(p), status(t));
            assert_ne!(p, 200, "{raw:?}");
            assert_eq!(p, t, "{raw:?}");
        }
        // The request line at its limit (64, counted to its `\n`), and one byte past it.
        let at = format!("GET /{} HTTP/1.1\r\nhost: a\r\n\r\n", "a".repeat(49));
        let (p, t) = both(&at);
        assert!(p.is_ok() && t.is_ok(), "{at:?}");
        let past = format!("GET /{} HTTP/1.1\r\nhost: a\r\n\r\n", "a".repeat(50));
        let (p, t) = both(&past);
        assert_eq!((p.unwrap_err().status, t.unwrap_err().status), (414, 414));
        // Too many fields and a line too long: the count first, as the parser has it.
        let both_past = format!(
            "GET /{} HTTP/1.1\r\nhost: a\r\n{}\r\n",
            "a".repeat(50),
            "x: 1\r\n".repeat(8)
        );
        let (p, t) = both(&both_past);
        assert_eq!((p.unwrap_err().status, t.unwrap_err().status), (431, 431));
        // One byte past the head size limit as HTTP/1.1, and at it.
        let at = format!(
            "GET / HTTP/1.1\r\nhost: a\r\nx: {}\r\n\r\n",
            "b".repeat(256 - 32)
        );
        assert_eq!(at.len(), 256);
        let (p, t) = both(&at);
        assert!(p.is_ok() && t.is_ok());
        let past = format!(
            "GET / HTTP/1.1\r\nhost: a\r\nx: {}\r\n\r\n",
            "b".repeat(256 - 31)
        );
        let (p, t) = both(&past);
        assert_eq!((p.unwrap_err().status, t.unwrap_err().status), (431, 431));
    }

    #[test]
    fn absolute_form_targets_use_their_authority() {
        let raw = "GET http://Example.com:8080/p?q HTTP/1.1\r\nHost: other\r\n\r\n";
        let h = ok(raw);
        assert_eq!(h.target(), b"/p?q");
        assert_eq!(h.host(), b"Example.com:8080");
    }

    #[test]
    fn connection_options_decide_keep_alive_and_upgrade() {
        assert!(!ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!ok("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(ok("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        let ws = ok(
            "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
        );
        assert!(ws.websocket);
        let raw = "GET / HTTP/1.1\r\nHost: a\r\nConnection: x-secret\r\nX-Secret: 1\r\nX-Other: 2\r\n\r\n";
        let h = ok(raw);
        let kinds: Vec<_> = h.headers.iter().map(|p| p.kind).collect();
        assert_eq!(kinds[2], HeaderKind::NamedByConnection);
        assert_eq!(kinds[3], HeaderKind::Other);
    }
}
