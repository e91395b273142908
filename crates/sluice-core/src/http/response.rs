//! Upstream response head parsing. The same framing rules as for requests: a response the
//! proxy cannot frame without guessing becomes a 502, never a pass-through.

use std::mem::MaybeUninit;

use super::fields::{
    ConnOptions, Framing, HeaderKind, HeaderPos, classify, mark_named_by_connection, offsets,
    parse_content_length,
};

/// Most header fields accepted in an upstream response.
const MAX_RESPONSE_HEADERS: usize = 256;

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
    if !(100..=999).contains(&status) {
        return Err(BadResponse("invalid status code"));
    }
    headers.clear();
    let mut content_length: Option<u64> = None;
    let mut te = 0;
    let mut conn = ConnOptions::default();
    for h in resp.headers.iter() {
        let kind = classify(h.name.as_bytes());
        let v = h.value;
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
            name: offsets(buf, h.name.as_bytes()),
            value: offsets(buf, v),
            kind,
        });
    }
    if conn.names_fields {
        mark_named_by_connection(buf, headers);
    }
    let no_body = head_request || status < 200 || status == 204 || status == 304;
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
    let reason = offsets(buf, resp.reason.unwrap_or("").as_bytes());
    let reason = if resp.reason.is_some() {
        reason
    } else {
        (0, 0)
    };
    Ok(Some(ResponseHead {
        status,
        reason,
        headers: std::mem::take(headers),
        framing,
        keep_alive,
        upgrade: conn.websocket_upgrade(),
        len,
        raw: bytes::Bytes::new(),
    }))
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
