//! What `gzip` and `brotli` share: when a response is compressed (NGINX's rules, which
//! APISIX's plugins inherit), and the streaming of its body through an encoder, chunk by
//! chunk, each chunk flushed so that a streamed answer keeps streaming.
//!
//! Compressed when: the client accepts the coding (`Accept-Encoding`, with q-values and `*`;
//! `q=0` refuses), the request is HTTP/1.1 or later (`http_version: 1.0` admits HTTP/1.0), the
//! method is not HEAD, the status is 200, 403 or 404 (NGINX's), no plugin replaced the body,
//! the response has no `Content-Encoding` and no `Content-Range`, its `Cache-Control` does not
//! say `no-transform`, its `Content-Type` is one of `types` (or `types: "*"`; none: never), and
//! its `Content-Length`, when it has one, is at least `min_length`. Then `Content-Encoding`
//! is set, a strong `ETag` becomes weak (the bytes differ), `Vary: Accept-Encoding` is added
//! with `vary`, and the body goes out chunked. These filters run after every other plugin's
//! (`filters_last`), on the head and body the others produced.

use bytes::Bytes;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::Ctx;
use sluice_core::http::RequestHead;
use sluice_core::plugin::ResponseView;

use crate::util::{Num, whole_field};

/// When a response is compressed, beside the client's and the response's own say.
#[derive(Debug)]
pub(crate) struct When {
    /// Media types compressed (lowercase); None: every type.
    types: Option<Vec<String>>,
    min_length: u64,
    /// The lowest request version compressed: 0 (HTTP/1.0) or 1 (HTTP/1.1).
    min_version: u8,
    vary: bool,
}

impl When {
    /// APISIX's `types` (default `["text/html"]`), `min_length` (20), `http_version` (1.1)
    /// and `vary`; errors at their fields.
    pub(crate) fn parse(
        types: Option<&Value>,
        min_length: Option<Num>,
        http_version: Option<&Value>,
        vary: Option<bool>,
        v: &mut Validator,
    ) -> Option<When> {
        let types = match types {
            None => Some(Some(vec!["text/html".to_owned()])),
            Some(Value::String(s)) if s == "*" => Some(None),
            Some(Value::Array(a)) if !a.is_empty() => {
                let list: Option<Vec<String>> = a
                    .iter()
                    .map(|t| {
                        t.as_str()
                            .filter(|t| !t.trim().is_empty())
                            .map(|t| t.trim().to_ascii_lowercase())
                    })
                    .collect();
                match list {
                    Some(l) => Some(Some(l)),
                    None => {
                        v.error_at(
                            "types",
                            "must list media types (text/html, application/json), or be \"*\"",
                        );
                        None
                    }
                }
            }
            Some(_) => {
                v.error_at(
                    "types",
                    "must be a non-empty list of media types (text/html, application/json), or \"*\"",
                );
                None
            }
        };
        let min_length = whole_field("min_length", min_length, 20, (1, 1 << 40), " bytes", v);
        let min_version = match http_version.and_then(Value::as_f64) {
            None if http_version.is_none() => Some(1),
            Some(1.1) => Some(1),
            Some(1.0) => Some(0),
            _ => {
                v.error_at("http_version", "must be 1.1 or 1.0");
                None
            }
        };
        Some(When {
            types: types?,
            min_length: min_length?,
            min_version: min_version?,
            vary: vary.unwrap_or(false),
        })
    }
}

/// A streaming encoder: each chunk's output is flushed (a streamed answer keeps streaming).
pub(crate) trait Encoder {
    /// Encodes `input`, appending what is ready (flushed) to `out`.
    fn encode(&mut self, input: &[u8], out: &mut Vec<u8>) -> std::io::Result<()>;
    /// Ends the stream, appending its last bytes to `out`.
    fn finish(&mut self, out: &mut Vec<u8>) -> std::io::Result<()>;
}

/// A coding's encoders, made for each compressed response.
pub(crate) trait Codec: Send + Sync + 'static {
    /// The coding's name in `Accept-Encoding` and `Content-Encoding`.
    const NAME: &'static str;
    /// A new encoder.
    fn encoder(&self) -> Box<dyn Encoder>;
}

/// A compressor plugin: when (`When`) and with what (`Codec`).
pub(crate) struct Compressor<C> {
    pub(crate) when: When,
    pub(crate) codec: C,
}

impl<C: Codec> sluice_core::Plugin for Compressor<C> {
    fn phases(&self) -> sluice_core::plugin::Phases {
        use sluice_core::plugin::Phases;
        Phases::HEADER_FILTER.with(Phases::BODY_FILTER)
    }

    fn filters_last(&self) -> bool {
        true
    }

    fn header_filter(&self, req: &RequestHead, resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
        header_filter(&self.when, C::NAME, instance(self), req, resp, cx, || {
            self.codec.encoder()
        });
    }

    fn body_filter(&self, chunk: &mut Bytes, eos: bool, cx: &mut Ctx<'_>) {
        body_filter(C::NAME, instance(self), chunk, eos, cx);
    }

    /// Only a response it compresses.
    fn filters_body(&self, cx: &Ctx<'_>) -> bool {
        let id = instance(self);
        cx.slot_ref::<Encoding>(C::NAME)
            .is_some_and(|e| e.0.iter().any(|(i, _)| *i == id))
    }
}

/// A request's encoders, each under the compressor instance that made it (a global rule's
/// and a route's gzip may both run; only the first compresses, and only its encoder is fed).
#[derive(Default)]
struct Encoding(Vec<(usize, Box<dyn Encoder>)>);

/// What tells a compressor instance from another in a request's [`Encoding`].
fn instance<T>(of: &T) -> usize {
    std::ptr::from_ref(of) as usize
}

/// The response's field `name` as the client will get it: a plugin's edit, else the
/// response's own unless a plugin removed it.
fn field<'a>(resp: &'a ResponseView<'a>, cx: &'a Ctx<'_>, name: &str) -> Option<&'a [u8]> {
    cx.response.header(name).or_else(|| {
        if cx.response.removes(name.as_bytes()) {
            None
        } else {
            resp.header(name)
        }
    })
}

/// Whether `accept` (the request's `Accept-Encoding` values) accepts `coding` (or its `x-`
/// alias): named with a q-value above 0, or `*` above 0 when it is not named.
pub(crate) fn accepts<'a>(accept: impl Iterator<Item = &'a [u8]>, coding: &str) -> bool {
    let (mut named, mut star) = (None, None);
    for value in accept {
        for item in value.split(|&b| b == b',') {
            let mut parts = item.split(|&b| b == b';');
            let name = parts.next().unwrap_or_default().trim_ascii();
            let mut q = 1.0f32;
            for p in parts {
                let p = p.trim_ascii();
                if let Some(x) = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q=")) {
                    // A q-value that does not parse accepts nothing.
                    q = std::str::from_utf8(x)
                        .ok()
                        .and_then(|x| x.parse().ok())
                        .filter(|q: &f32| (0.0..=1.0).contains(q))
                        .unwrap_or(0.0);
                }
            }
            let is = |c: &str| name.eq_ignore_ascii_case(c.as_bytes());
            if is(coding) || (coding == "gzip" && is("x-gzip")) {
                named = Some(q > 0.0);
            } else if name == b"*" {
                star = Some(q > 0.0);
            }
        }
    }
    named.or(star).unwrap_or(false)
}

/// The header filter of a compressor for `coding`: when the response is to be compressed,
/// edits its head and keeps `make()`'s encoder for the body.
fn header_filter(
    w: &When,
    coding: &'static str,
    id: usize,
    req: &RequestHead,
    resp: ResponseView<'_>,
    cx: &mut Ctx<'_>,
    make: impl FnOnce() -> Box<dyn Encoder>,
) {
    if !wanted(w, coding, req, &resp, cx) {
        return;
    }
    if w.vary {
        cx.response.add_header("Vary", b"Accept-Encoding");
    }
    if let Some(etag) = field(&resp, cx, "etag").map(<[u8]>::to_vec) {
        cx.response.remove_header("ETag");
        if etag.starts_with(b"W/") {
            cx.response.add_header("ETag", &etag);
        } else if etag.len() >= 2 && etag.starts_with(b"\"") && etag.ends_with(b"\"") {
            let mut weak = b"W/".to_vec();
            weak.extend_from_slice(&etag);
            cx.response.add_header("ETag", &weak);
        }
        // Not quoted: it cannot be weakened, so it goes (as APISIX's brotli does).
    }
    cx.response.remove_header("Content-Length");
    cx.response
        .set_header("Content-Encoding", coding.as_bytes());
    // The compressed body is not the one a range would count in (NGINX's gzip filter too).
    cx.response.remove_header("Accept-Ranges");
    cx.slot::<Encoding>(coding).0.push((id, make()));
}

fn wanted(
    w: &When,
    coding: &str,
    req: &RequestHead,
    resp: &ResponseView<'_>,
    cx: &Ctx<'_>,
) -> bool {
    // The gateway's own answers (errors, a plugin's refusal, a mock) go out whole without the
    // body filters: they are not compressed.
    if matches!(resp, ResponseView::Own(_)) {
        return false;
    }
    if req.method() == sluice_router::Method::Head || req.version() < w.min_version {
        return false;
    }
    let status = cx.response.status().unwrap_or(resp.status());
    if !matches!(status, 200 | 403 | 404) || cx.response.body().is_some() {
        return false;
    }
    if !accepts(req.header_values("accept-encoding"), coding) {
        return false;
    }
    if field(resp, cx, "content-encoding").is_some() || field(resp, cx, "content-range").is_some() {
        return false;
    }
    if field(resp, cx, "cache-control").is_some_and(|c| {
        c.split(|&b| b == b',')
            .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
    }) {
        return false;
    }
    let Some(ct) = field(resp, cx, "content-type") else {
        // As NGINX: no type, no compression.
        return false;
    };
    // gRPC's messages have their own compression, and its answers pass no body filter.
    if ct.len() >= 16 && ct[..16].eq_ignore_ascii_case(b"application/grpc") {
        return false;
    }
    if let Some(types) = &w.types {
        let media = ct
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        if !types
            .iter()
            .any(|t| media.eq_ignore_ascii_case(t.as_bytes()))
        {
            return false;
        }
    }
    // As NGINX: without a Content-Length, `min_length` is not checked.
    let length = field(resp, cx, "content-length")
        .and_then(|l| std::str::from_utf8(l).ok()?.trim().parse::<u64>().ok());
    length.is_none_or(|n| n >= w.min_length)
}

/// The body filter of a compressor for `coding`: each chunk through its encoder.
fn body_filter(coding: &'static str, id: usize, chunk: &mut Bytes, eos: bool, cx: &mut Ctx<'_>) {
    let encoders = &mut cx.slot::<Encoding>(coding).0;
    let Some((_, enc)) = encoders.iter_mut().find(|(i, _)| *i == id) else {
        return;
    };
    let mut out = Vec::with_capacity(chunk.len() / 2 + 64);
    let mut ok = chunk.is_empty() || enc.encode(chunk, &mut out).is_ok();
    if eos && ok {
        ok = enc.finish(&mut out).is_ok();
    }
    if !ok {
        // An encoder writes to memory: this does not happen; the stream ends as it is.
        tracing::warn!(coding, "response compression failed");
    }
    *chunk = Bytes::from(out);
}

#[cfg(test)]
mod tests {
    use super::accepts;

    #[test]
    fn accept_encoding_is_read_as_rfc_9110_says() {
        let a =
            |values: &[&str], coding: &str| accepts(values.iter().map(|v| v.as_bytes()), coding);
        assert!(a(&["gzip"], "gzip"));
        assert!(a(&["deflate, x-gzip"], "gzip"));
        assert!(a(&["br;q=0.1, gzip;q=1.0"], "br"));
        assert!(a(&["*"], "br"));
        assert!(a(&["*;q=0.5, gzip;q=0"], "br"));
        assert!(!a(&["*;q=0.5, gzip;q=0"], "gzip"), "named beats *");
        assert!(!a(&["gzip;q=0.000"], "gzip"));
        assert!(
            !a(&["gzip;q=nope"], "gzip"),
            "a q-value that does not parse"
        );
        assert!(!a(&["gzip;q=2"], "gzip"), "a q-value out of range");
        assert!(!a(&["identity"], "gzip"));
        assert!(!a(&[], "gzip"));
        assert!(
            a(&["identity", "gzip"], "gzip"),
            "a second field counts too"
        );
        assert!(!a(&["brotli"], "br"));
    }
}
