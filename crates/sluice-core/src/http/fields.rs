//! What every part of the HTTP/1.1 wire format shares (`head.rs`, `request.rs`,
//! `response.rs`, `write.rs`): header field kinds, positions and framing, and the small
//! parsers of field values. Below them all.

/// Header fields the proxy treats specially. Everything else is `Other` and passes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // the variants name header fields
pub enum HeaderKind {
    Other,
    Host,
    ContentLength,
    TransferEncoding,
    Connection,
    KeepAlive,
    Te,
    Trailer,
    Upgrade,
    ProxyConnection,
    ProxyAuthenticate,
    ProxyAuthorization,
    Expect,
    XForwardedFor,
    XForwardedProto,
    XForwardedHost,
    XRealIp,
    /// Named in the message's `Connection` header: hop-by-hop, dropped.
    NamedByConnection,
    /// Removed by a plugin.
    Removed,
}

/// What a header field is to the proxy, from its name.
#[inline]
pub fn classify(name: &[u8]) -> HeaderKind {
    let eq = |s: &[u8]| name.eq_ignore_ascii_case(s);
    match name.len() {
        2 if eq(b"te") => HeaderKind::Te,
        4 if eq(b"host") => HeaderKind::Host,
        6 if eq(b"expect") => HeaderKind::Expect,
        7 if eq(b"upgrade") => HeaderKind::Upgrade,
        7 if eq(b"trailer") => HeaderKind::Trailer,
        9 if eq(b"x-real-ip") => HeaderKind::XRealIp,
        10 if eq(b"connection") => HeaderKind::Connection,
        10 if eq(b"keep-alive") => HeaderKind::KeepAlive,
        14 if eq(b"content-length") => HeaderKind::ContentLength,
        15 if eq(b"x-forwarded-for") => HeaderKind::XForwardedFor,
        16 if eq(b"proxy-connection") => HeaderKind::ProxyConnection,
        16 if eq(b"x-forwarded-host") => HeaderKind::XForwardedHost,
        17 if eq(b"transfer-encoding") => HeaderKind::TransferEncoding,
        17 if eq(b"x-forwarded-proto") => HeaderKind::XForwardedProto,
        18 if eq(b"proxy-authenticate") => HeaderKind::ProxyAuthenticate,
        19 if eq(b"proxy-authorization") => HeaderKind::ProxyAuthorization,
        _ => HeaderKind::Other,
    }
}

/// One header field as offsets into the message head's bytes.
#[derive(Debug, Clone, Copy)]
pub struct HeaderPos {
    /// Name, as offsets into the head.
    pub name: (u32, u32),
    /// Value, as offsets into the head.
    pub value: (u32, u32),
    /// What the field is to the proxy.
    pub kind: HeaderKind,
}

impl HeaderPos {
    #[inline]
    /// The name's bytes in `head`.
    pub fn name<'a>(&self, head: &'a [u8]) -> &'a [u8] {
        &head[self.name.0 as usize..self.name.1 as usize]
    }

    #[inline]
    /// The value's bytes in `head`.
    pub fn value<'a>(&self, head: &'a [u8]) -> &'a [u8] {
        &head[self.value.0 as usize..self.value.1 as usize]
    }
}

/// How a message body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the connection closes (responses only).
    Close,
}

/// Offsets of a slice of `buf` that was borrowed from it.
#[inline]
pub(crate) fn offsets(buf: &[u8], part: &[u8]) -> (u32, u32) {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    (start as u32, (start + part.len()) as u32)
}

/// Parses a Content-Length value: 1*DIGIT, at most 18 digits (no sign, no spaces, no lists).
#[inline]
pub fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Some(n)
}

/// What a message's `Connection` and `Upgrade` fields say (RFC 9110 §7.6.1, §7.8).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ConnOptions {
    pub(crate) close: bool,
    pub(crate) keep_alive: bool,
    pub(crate) upgrade: bool,
    /// `Connection` names other fields, which are then hop-by-hop.
    pub(crate) names_fields: bool,
    /// `Upgrade` lists `websocket`.
    pub(crate) websocket: bool,
}

impl ConnOptions {
    /// Takes in one `Connection` field value.
    pub(crate) fn connection(&mut self, v: &[u8]) {
        for_each_token(v, |t| {
            if t.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if t.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if t.eq_ignore_ascii_case(b"upgrade") {
                self.upgrade = true;
            } else {
                self.names_fields = true;
            }
        });
    }

    /// Takes in one `Upgrade` field value.
    pub(crate) fn upgrade_field(&mut self, v: &[u8]) {
        for_each_token(v, |t| {
            self.websocket |= t.eq_ignore_ascii_case(b"websocket")
        });
    }

    /// Whether the connection persists after this message (RFC 9112 §9.3).
    pub(crate) fn persistent(&self, version: u8) -> bool {
        if version == 1 {
            !self.close
        } else {
            self.keep_alive && !self.close
        }
    }

    /// `Connection: upgrade` with `Upgrade: websocket`.
    pub(crate) fn websocket_upgrade(&self) -> bool {
        self.upgrade && self.websocket
    }
}

/// Marks the fields that a `Connection` field names as hop-by-hop.
pub(crate) fn mark_named_by_connection(buf: &[u8], headers: &mut [HeaderPos]) {
    let mut names: Vec<&[u8]> = Vec::new();
    for h in headers.iter().filter(|h| h.kind == HeaderKind::Connection) {
        for_each_token(h.value(buf), |t| {
            if !t.eq_ignore_ascii_case(b"close")
                && !t.eq_ignore_ascii_case(b"keep-alive")
                && !t.eq_ignore_ascii_case(b"upgrade")
            {
                names.push(t);
            }
        });
    }
    for h in headers.iter_mut() {
        if h.kind == HeaderKind::Other && names.iter().any(|n| n.eq_ignore_ascii_case(h.name(buf)))
        {
            h.kind = HeaderKind::NamedByConnection;
        }
    }
}

/// Calls `f` for each comma-separated token of a header value, trimmed of optional whitespace.
pub fn for_each_token<'a>(v: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    for part in v.split(|&b| b == b',') {
        let t = part.trim_ascii();
        if !t.is_empty() {
            f(t);
        }
    }
}

/// Whether an answer with `status` must not carry a `Content-Length` (RFC 9110 §8.6: 1xx, 204).
#[inline]
pub fn no_length(status: u16) -> bool {
    status < 200 || status == 204
}

/// Whether an answer with `status` has no body whatever its fields say (RFC 9110 §6.4.1: 1xx,
/// 204, 304).
#[inline]
pub fn bodiless(status: u16) -> bool {
    status < 200 || status == 204 || status == 304
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_accepts_only_plain_digits() {
        assert_eq!(parse_content_length(b"0"), Some(0));
        assert_eq!(parse_content_length(b"42"), Some(42));
        for bad in [
            &b""[..],
            b"+5",
            b"-1",
            b"0x10",
            b"5 5",
            b" 5",
            b"1,1",
            b"9999999999999999999",
        ] {
            assert_eq!(
                parse_content_length(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn header_names_are_classified_case_insensitively() {
        assert_eq!(classify(b"Content-Length"), HeaderKind::ContentLength);
        assert_eq!(classify(b"TRANSFER-ENCODING"), HeaderKind::TransferEncoding);
        assert_eq!(classify(b"x-forwarded-for"), HeaderKind::XForwardedFor);
        assert_eq!(classify(b"Content-Type"), HeaderKind::Other);
        assert_eq!(
            classify(b"Proxy-Authorization"),
            HeaderKind::ProxyAuthorization
        );
        assert_eq!(classify(b"Authorization"), HeaderKind::Other);
    }
}
