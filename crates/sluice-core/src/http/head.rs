//! The request head as the engine and plugins see it: the bytes received, parsed once into
//! offsets, plus an overlay of edits (method, target, upstream host, removed and added header
//! fields). Reading costs no allocation; the overlay is allocated only when a plugin edits.

use bytes::{Bytes, BytesMut};
use sluice_router::Method;

use super::fields::{Framing, HeaderKind, HeaderPos};

/// A parsed request head.
#[derive(Debug)]
pub struct RequestHead {
    pub(crate) method: Method,
    pub(crate) method_raw: (u32, u32),
    /// Origin-form target (path and query).
    pub(crate) target: (u32, u32),
    /// End of the path within the target (start of `?query`, or the target's end).
    pub(crate) path_end: u32,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) version: u8,
    /// `Host`, or the authority of an absolute-form target.
    pub(crate) host: Option<(u32, u32)>,
    pub(crate) headers: Vec<HeaderPos>,
    pub(crate) framing: Framing,
    pub(crate) keep_alive: bool,
    pub(crate) websocket: bool,
    pub(crate) expect_continue: bool,
    /// Length of the head in the read buffer (request line, fields, empty line; a head given
    /// typed, `request::from_fields`: its method, target and fields back to back).
    pub(crate) len: usize,
    /// The head's bytes, once taken from the read buffer.
    pub(crate) raw: Bytes,
    pub(crate) edits: Option<Box<Edits>>,
}

/// A header field a plugin added: name and value.
pub(crate) type Field = (Box<[u8]>, Box<[u8]>);

/// What plugins changed.
#[derive(Debug, Default)]
pub(crate) struct Edits {
    pub(crate) method: Option<Box<[u8]>>,
    pub(crate) target: Option<Box<[u8]>>,
    pub(crate) upstream_host: Option<Box<[u8]>>,
    pub(crate) added: Vec<Field>,
}

impl RequestHead {
    /// Bytes of the head in the buffer it was parsed from: request line, fields and the empty
    /// line (where the body, or the next request, starts).
    pub fn head_len(&self) -> usize {
        self.len
    }

    /// Moves the head's bytes out of the read buffer (after a successful parse).
    pub fn take_bytes(&mut self, buf: &mut BytesMut) {
        self.raw = buf.split_to(self.len).freeze();
    }

    /// The head's bytes as received.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    #[inline]
    fn slice(&self, (s, e): (u32, u32)) -> &[u8] {
        &self.raw[s as usize..e as usize]
    }

    fn edits(&mut self) -> &mut Edits {
        self.edits.get_or_insert_with(Box::default)
    }

    // === reading ===

    /// The method (after edits).
    #[inline]
    pub fn method(&self) -> Method {
        self.method
    }

    /// The method's bytes (after edits).
    #[inline]
    pub fn method_bytes(&self) -> &[u8] {
        match self.edits.as_ref().and_then(|e| e.method.as_deref()) {
            Some(m) => m,
            None => self.slice(self.method_raw),
        }
    }

    /// The target to forward, path and query (after edits).
    #[inline]
    pub fn target(&self) -> &[u8] {
        match self.edits.as_ref().and_then(|e| e.target.as_deref()) {
            Some(t) => t,
            None => self.slice(self.target),
        }
    }

    /// The path of the target, without the query (after edits).
    #[inline]
    pub fn path(&self) -> &[u8] {
        match self.edits.as_ref().and_then(|e| e.target.as_deref()) {
            Some(t) => &t[..memchr::memchr(b'?', t).unwrap_or(t.len())],
            None => self.slice((self.target.0, self.path_end)),
        }
    }

    /// The path as the client sent it (what routing matched on, before normalisation).
    #[inline]
    pub fn original_path(&self) -> &[u8] {
        self.slice((self.target.0, self.path_end))
    }

    /// The target as the client sent it.
    pub fn original_target(&self) -> &[u8] {
        self.slice(self.target)
    }

    /// The query string without `?` (after edits), if any.
    pub fn query(&self) -> Option<&[u8]> {
        let t = self.target();
        memchr::memchr(b'?', t).map(|q| &t[q + 1..])
    }

    /// The first value of query argument `name`, percent-decoded (`+` is a space).
    pub fn query_arg(&self, name: &str) -> Option<Vec<u8>> {
        let q = self.query()?;
        q.split(|&b| b == b'&').find_map(|pair| {
            let (k, v) = match memchr::memchr(b'=', pair) {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &b""[..]),
            };
            (percent_decode(k) == name.as_bytes()).then(|| percent_decode(v))
        })
    }

    /// The first value of query argument `name`, percent-decoded only when it has escapes
    /// (no allocation for the common plain `?page=2`).
    pub fn query_arg_ref(&self, name: &str) -> Option<std::borrow::Cow<'_, [u8]>> {
        let q = self.query()?;
        let plain = |b: &[u8]| !b.iter().any(|&c| c == b'%' || c == b'+');
        q.split(|&b| b == b'&').find_map(|pair| {
            let (k, v) = match memchr::memchr(b'=', pair) {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &b""[..]),
            };
            let same = if plain(k) {
                k == name.as_bytes()
            } else {
                percent_decode(k) == name.as_bytes()
            };
            same.then(|| {
                if plain(v) {
                    std::borrow::Cow::Borrowed(v)
                } else {
                    std::borrow::Cow::Owned(percent_decode(v))
                }
            })
        })
    }

    /// Every value of query argument `name`, percent-decoded, in order.
    pub fn query_args<'a>(&'a self, name: &'a str) -> impl Iterator<Item = Vec<u8>> + 'a {
        self.query()
            .into_iter()
            .flat_map(|q| q.split(|&b| b == b'&'))
            .filter_map(move |pair| {
                let (k, v) = match memchr::memchr(b'=', pair) {
                    Some(i) => (&pair[..i], &pair[i + 1..]),
                    None => (pair, &b""[..]),
                };
                (percent_decode(k) == name.as_bytes()).then(|| percent_decode(v))
            })
    }

    /// The client's `Host` (or the authority of an absolute-form target); empty when absent.
    #[inline]
    pub fn host(&self) -> &[u8] {
        match self.host {
            Some(h) => self.slice(h),
            None => b"",
        }
    }

    /// True when the client sent a `Host`.
    pub fn has_host(&self) -> bool {
        self.host.is_some()
    }

    /// The `Host` a plugin chose for the upstream request, overriding `pass_host`.
    pub fn upstream_host(&self) -> Option<&[u8]> {
        self.edits.as_ref().and_then(|e| e.upstream_host.as_deref())
    }

    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    #[inline]
    pub fn version(&self) -> u8 {
        self.version
    }

    /// How the body is delimited.
    #[inline]
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Declares a body of `n` bytes: the engine replaced the body with one of that length
    /// (the head sent upstream then carries `Content-Length: n`).
    pub fn set_body_length(&mut self, n: u64) {
        self.framing = Framing::Length(n);
    }

    /// The client allows the connection to be reused.
    #[inline]
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// A GET with `Connection: upgrade` and `Upgrade: websocket`.
    #[inline]
    pub fn is_websocket(&self) -> bool {
        self.websocket
    }

    /// `Expect: 100-continue` was sent (the gateway answers it).
    #[inline]
    pub fn expects_continue(&self) -> bool {
        self.expect_continue
    }

    /// The header fields as received, with their classification; removed ones are marked
    /// [`HeaderKind::Removed`].
    pub fn fields(&self) -> &[HeaderPos] {
        &self.headers
    }

    /// Gives back the field vector for reuse.
    pub fn into_fields(self) -> Vec<HeaderPos> {
        self.headers
    }

    /// Fields added by plugins, in order.
    pub fn added_fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.edits
            .iter()
            .flat_map(|e| e.added.iter().map(|(n, v)| (&**n, &**v)))
    }

    /// The first value of a header field (case-insensitive name), after edits.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        let n = name.as_bytes();
        self.headers
            .iter()
            .find(|h| h.kind != HeaderKind::Removed && h.name(&self.raw).eq_ignore_ascii_case(n))
            .map(|h| h.value(&self.raw))
            .or_else(|| {
                self.added_fields()
                    .find(|(k, _)| k.eq_ignore_ascii_case(n))
                    .map(|(_, v)| v)
            })
    }

    /// The last value of a header field (case-insensitive name), after edits.
    pub fn last_header(&self, name: &str) -> Option<&[u8]> {
        let n = name.as_bytes();
        let added = self
            .added_fields()
            .filter(|(k, _)| k.eq_ignore_ascii_case(n))
            .last()
            .map(|(_, v)| v);
        added.or_else(|| {
            self.headers
                .iter()
                .rev()
                .find(|h| {
                    h.kind != HeaderKind::Removed && h.name(&self.raw).eq_ignore_ascii_case(n)
                })
                .map(|h| h.value(&self.raw))
        })
    }

    /// Every value of a header field, after edits, in order.
    pub fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        let n = name.as_bytes();
        let original = self.headers.iter().filter(move |h| {
            h.kind != HeaderKind::Removed && h.name(&self.raw).eq_ignore_ascii_case(n)
        });
        original.map(|h| h.value(&self.raw)).chain(
            self.added_fields()
                .filter(move |(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v),
        )
    }

    /// The value of cookie `name`, if the request carries it.
    pub fn cookie(&self, name: &str) -> Option<&[u8]> {
        self.header_values("cookie").find_map(|v| {
            v.split(|&b| b == b';').find_map(|pair| {
                let pair = pair.trim_ascii();
                let i = memchr::memchr(b'=', pair)?;
                (pair[..i].trim_ascii() == name.as_bytes()).then(|| pair[i + 1..].trim_ascii())
            })
        })
    }

    // === editing ===

    /// Replaces the method.
    pub fn set_method(&mut self, method: &str) {
        self.method = Method::from_bytes(method.as_bytes());
        self.edits().method = Some(method.as_bytes().into());
    }

    /// Replaces the target (path and query) sent upstream.
    pub fn set_target(&mut self, target: Vec<u8>) {
        self.edits().target = Some(target.into_boxed_slice());
    }

    /// Sets the `Host` sent upstream, overriding `pass_host`.
    pub fn set_upstream_host(&mut self, host: &[u8]) {
        self.edits().upstream_host = Some(host.into());
    }

    /// Removes every field named `name` (case-insensitive). Fields the engine manages
    /// (`Host`, framing, hop-by-hop, `X-Forwarded-*`) are not plugins' to remove; the
    /// plugin configurations that name them are refused at load time.
    pub fn remove_header(&mut self, name: &str) {
        let n = name.as_bytes();
        for h in &mut self.headers {
            if h.kind == HeaderKind::Other && h.name(&self.raw).eq_ignore_ascii_case(n) {
                h.kind = HeaderKind::Removed;
            }
        }
        if let Some(e) = &mut self.edits {
            e.added.retain(|(k, _)| !k.eq_ignore_ascii_case(n));
        }
    }

    /// Adds a field (after the existing ones of the same name).
    pub fn add_header(&mut self, name: &str, value: &[u8]) {
        self.edits()
            .added
            .push((name.as_bytes().into(), value.into()));
    }

    /// Replaces every field named `name` with one value.
    pub fn set_header(&mut self, name: &str, value: &[u8]) {
        self.remove_header(name);
        self.add_header(name, value);
    }
}

/// Decodes `%XX` escapes and `+`.
pub fn percent_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => {
                let h = (s[i + 1] as char).to_digit(16);
                let l = (s[i + 2] as char).to_digit(16);
                if let (Some(h), Some(l)) = (h, l) {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b => out.push(b),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::request::{HeadLimits, parse};
    use super::*;

    fn head(raw: &str) -> RequestHead {
        let limits = HeadLimits {
            max_request_line: 8192,
            max_header_size: 8192,
            max_headers: 64,
        };
        let mut buf = BytesMut::from(raw.as_bytes());
        let mut h = parse(&buf, &limits, &mut Vec::new()).unwrap().unwrap();
        h.take_bytes(&mut buf);
        h
    }

    #[test]
    fn reading_fields_queries_and_cookies() {
        let h = head(
            "GET /p?a=1&apikey=k%20ey&b HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nx-a: 2\r\nCookie: s=1; jwt=tok\r\n\r\n",
        );
        assert_eq!(h.header("X-a"), Some(&b"1"[..]));
        assert_eq!(
            h.header_values("x-A").collect::<Vec<_>>(),
            vec![&b"1"[..], &b"2"[..]]
        );
        assert_eq!(h.query_arg("apikey"), Some(b"k ey".to_vec()));
        assert_eq!(h.query_arg("b"), Some(Vec::new()));
        assert_eq!(h.query_arg("c"), None);
        assert_eq!(h.cookie("jwt"), Some(&b"tok"[..]));
        assert_eq!(h.path(), b"/p");
    }

    #[test]
    fn edits_overlay_the_original() {
        let mut h = head("GET /old?q=1 HTTP/1.1\r\nHost: x\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\n");
        h.remove_header("x-drop");
        h.set_header("X-Keep", b"3");
        h.add_header("X-New", b"4");
        h.set_target(b"/new?q=2".to_vec());
        h.set_method("POST");
        assert_eq!(h.header("x-drop"), None);
        assert_eq!(h.header("x-keep"), Some(&b"3"[..]));
        assert_eq!(h.header("x-new"), Some(&b"4"[..]));
        assert_eq!(
            (h.target(), h.path(), h.query()),
            (&b"/new?q=2"[..], &b"/new"[..], Some(&b"q=2"[..]))
        );
        assert_eq!(h.original_path(), b"/old");
        assert_eq!((h.method(), h.method_bytes()), (Method::Post, &b"POST"[..]));
    }

    #[test]
    fn percent_decoding_keeps_bad_escapes() {
        assert_eq!(percent_decode(b"a%20b+c"), b"a b c");
        assert_eq!(percent_decode(b"100%"), b"100%");
        assert_eq!(percent_decode(b"%zz"), b"%zz");
    }
}
