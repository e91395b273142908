//! The access log: one line per request, formatted into a per-worker buffer and written with
//! one `write` when the buffer fills or every `flush` interval. Each worker has its own file
//! handle opened with `O_APPEND`, so whole buffers from different workers never interleave,
//! and a line is never split between two writes.
//!
//! The format is compiled at validation (`sluice_config::log_format`): `default`, NGINX's
//! `combined`, a template of `$variables`, or JSON lines. The default line:
//! `2026-11-22T06:07:44.123Z 127.0.0.1 "GET /hello HTTP/1.1" 200 11 0.000412 hello 127.0.0.1:1980`
//! time, client, request line, status, response body bytes, seconds, route id (`-` when no
//! route matched), upstream node (`-` when none was used), and, over mutual TLS, the verified
//! client certificate's subject (spaces and quotes escaped: `CN=alice,\x20O=Example`).
//!
//! The file is reopened by its path on SIGUSR1 (logrotate's `postrotate`) and when a reload
//! changes `log.access`: each worker writes what it buffered to the old file first.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_config::AccessLogConfig;
use sluice_config::log_format::{AccessFormat, Piece, Var};
use sluice_core::clock::{write_second, write_time_local};
use sluice_core::http::RequestHead;
use sluice_core::vars::{Source, digits, write_seconds};
use tracing::warn;

/// Bumped by SIGUSR1: every worker reopens its file at its next flush.
use sluice_core::REOPEN_LOGS as REOPEN;

/// One worker's access log.
#[derive(Debug)]
pub(crate) struct AccessLog {
    file: File,
    buf: Vec<u8>,
    limit: usize,
    format: AccessFormat,
    cfg: AccessLogConfig,
    /// The `REOPEN` generation the file was opened at.
    opened_at: u64,
    clock: Clock,
    /// A value to escape, written there first.
    scratch: Vec<u8>,
}

/// The wall clock as the log writes it: the text of the current second, made once a second
/// (formatting a date costs ~2,000 instructions; a line is written many times a second).
#[derive(Debug, Default)]
struct Clock {
    second: u64,
    iso: Vec<u8>,
    local: Vec<u8>,
    millis: u32,
}

impl Clock {
    /// Reads the wall clock; the texts follow it.
    fn tick(&mut self) {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.millis = d.subsec_millis();
        if d.as_secs() != self.second || self.iso.is_empty() {
            self.second = d.as_secs();
            self.iso.clear();
            write_second(&mut self.iso, self.second);
            self.local.clear();
            write_time_local(&mut self.local, self.second);
        }
    }

    /// RFC 3339 UTC with milliseconds: `2026-11-22T06:07:44.123Z`.
    fn iso(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.iso);
        out.push(b'.');
        digits(out, u64::from(self.millis), 3);
        out.push(b'Z');
    }
}

/// The request as the log reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum View<'a> {
    /// Parsed by the HTTP/1.1 engine (HTTP/2 bridged and gRPC streams are too).
    Head(&'a RequestHead),
    /// An HTTP/2 stream on the fast path.
    H2(&'a http::Method, &'a http::Uri, &'a http::HeaderMap),
    /// A request refused while its head was read: its first line, when one arrived.
    Line(&'a [u8]),
}

impl View<'_> {
    fn method(&self) -> &[u8] {
        match self {
            View::Head(h) => h.method_bytes(),
            View::H2(m, _, _) => m.as_str().as_bytes(),
            View::Line(l) => l.split(|&c| c == b' ').next().unwrap_or_default(),
        }
    }

    fn target(&self) -> &[u8] {
        match self {
            View::Head(h) => h.original_target(),
            View::H2(_, u, _) => u.path_and_query().map_or(b"/", |p| p.as_str().as_bytes()),
            View::Line(l) => l.split(|&c| c == b' ').nth(1).unwrap_or_default(),
        }
    }

    fn protocol(&self, version: u8) -> &[u8] {
        match (self, version) {
            (View::Line(l), _) => l.split(|&c| c == b' ').nth(2).unwrap_or_default(),
            (_, 0) => b"HTTP/1.0",
            (_, 2) => b"HTTP/2.0",
            _ => b"HTTP/1.1",
        }
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        match self {
            View::Head(h) => h.header(name),
            View::H2(_, _, hs) => hs.get(name).map(|v| v.as_bytes()),
            View::Line(_) => None,
        }
    }

    fn host(&self) -> Option<&[u8]> {
        match self {
            View::Head(h) => Some(h.host()).filter(|h| !h.is_empty()),
            View::H2(_, u, hs) => u
                .authority()
                .map(|a| a.as_str().as_bytes())
                .or_else(|| hs.get("host").map(|v| v.as_bytes())),
            View::Line(_) => None,
        }
    }
}

/// What is logged about one request.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    pub(crate) request: View<'a>,
    /// 0: HTTP/1.0, 1: HTTP/1.1, 2: HTTP/2.
    pub(crate) version: u8,
    pub(crate) client: &'a [u8],
    pub(crate) peer: SocketAddr,
    /// The TCP peer, when a real address stands in `client` and `peer`.
    pub(crate) tcp: Option<&'a SocketAddr>,
    pub(crate) local: SocketAddr,
    pub(crate) https: bool,
    pub(crate) status: u16,
    pub(crate) bytes: u64,
    pub(crate) bytes_in: u64,
    /// Nanoseconds from the request's first byte to its last response byte.
    pub(crate) elapsed_ns: u64,
    pub(crate) route: Option<&'a str>,
    pub(crate) upstream: Option<&'a str>,
    /// The node's status and time to its response head.
    pub(crate) answer: crate::metrics::Answer,
    pub(crate) consumer: Option<&'a str>,
    /// The consumer's group (`consumer_group_id`).
    pub(crate) consumer_group: Option<&'a str>,
    /// The route's service's id, its name and its service's.
    pub(crate) names: sluice_core::ctx::RouteNames<'a>,
    /// The trace id, the `request_id` and the token payload, from the request's context.
    pub(crate) carried: &'a sluice_core::ctx::Carried,
    /// The verified client certificate's subject (mutual TLS).
    pub(crate) client_cert: Option<&'a str>,
}

fn open_file(path: &str) -> std::io::Result<File> {
    if path == "stdout" {
        // A duplicate of the process's stdout (a pipe, a socket or a terminal), where opening
        // /dev/stdout fails for a socket.
        use std::os::fd::AsFd;
        return Ok(File::from(std::io::stdout().as_fd().try_clone_to_owned()?));
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// Writes larger than this to a pipe may interleave with other workers' (POSIX PIPE_BUF).
const PIPE_BUF: usize = 4096;

/// Writes whole lines in pieces of at most `PIPE_BUF` bytes (a longer line alone), so that
/// lines from several workers sharing a pipe never interleave.
fn write_lines_atomically(f: &mut impl Write, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        let end = if buf.len() <= PIPE_BUF {
            buf.len()
        } else {
            match memchr::memrchr(b'\n', &buf[..PIPE_BUF]) {
                Some(i) => i + 1,
                None => memchr::memchr(b'\n', buf).map_or(buf.len(), |i| i + 1),
            }
        };
        f.write_all(&buf[..end])?;
        buf = &buf[end..];
    }
    Ok(())
}

impl AccessLog {
    pub(crate) fn open(cfg: &AccessLogConfig) -> std::io::Result<AccessLog> {
        let opened_at = REOPEN.load(Ordering::Relaxed);
        let file = open_file(&cfg.path)?;
        let limit = (cfg.buffer.0 as usize).max(1);
        // Validated already: a format that does not compile here cannot happen.
        let format = AccessFormat::parse(&cfg.format, &cfg.fields).unwrap_or(AccessFormat::Default);
        Ok(AccessLog {
            file,
            buf: Vec::with_capacity(limit.min(1 << 20)),
            limit,
            format,
            cfg: cfg.clone(),
            opened_at,
            clock: Clock::default(),
            scratch: Vec::new(),
        })
    }

    /// The settings it was opened with.
    pub(crate) fn config(&self) -> &AccessLogConfig {
        &self.cfg
    }

    pub(crate) fn record(&mut self, e: &Entry<'_>) {
        let b = &mut self.buf;
        self.clock.tick();
        let clock = &self.clock;
        let scratch = &mut self.scratch;
        let src = Logged {
            e,
            clock,
            request_id: std::cell::Cell::new(e.carried.request_id),
        };
        match &self.format {
            AccessFormat::Default => default_line(b, e, clock),
            AccessFormat::Template(pieces) => {
                for p in pieces {
                    match p {
                        Piece::Text(t) => b.extend_from_slice(t.as_bytes()),
                        Piece::Var(v) => {
                            if !value(b, v, &src, escaped, scratch) {
                                b.push(b'-');
                            }
                        }
                    }
                }
            }
            AccessFormat::Json(fields) => {
                b.push(b'{');
                for (i, (name, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        b.push(b',');
                    }
                    b.push(b'"');
                    b.extend_from_slice(name.as_bytes());
                    b.extend_from_slice(b"\":");
                    let at = b.len();
                    if v.is_number() {
                        if !value(b, v, &src, json_string_body, scratch) {
                            b.extend_from_slice(b"null");
                        }
                    } else {
                        b.push(b'"');
                        if value(b, v, &src, json_string_body, scratch) {
                            b.push(b'"');
                        } else {
                            b.truncate(at);
                            b.extend_from_slice(b"null");
                        }
                    }
                }
                b.push(b'}');
            }
        }
        b.push(b'\n');
        if self.buf.len() >= self.limit {
            self.flush();
        }
    }

    /// Writes out what is buffered; then, after SIGUSR1, reopens the file by its path.
    pub(crate) fn flush(&mut self) {
        if !self.buf.is_empty() {
            let written = if self.cfg.path == "stdout" {
                write_lines_atomically(&mut self.file, &self.buf)
            } else {
                self.file.write_all(&self.buf)
            };
            if let Err(e) = written {
                warn!(error = %e, path = %self.cfg.path, "cannot write the access log");
            }
            self.buf.clear();
        }
        let generation = REOPEN.load(Ordering::Relaxed);
        if generation != self.opened_at {
            self.opened_at = generation;
            match open_file(&self.cfg.path) {
                Ok(f) => self.file = f,
                Err(e) => {
                    warn!(error = %e, path = %self.cfg.path, "cannot reopen the access log; still writing to the old file")
                }
            }
        }
    }
}

/// Sluice's own line (the `default` format).
fn default_line(b: &mut Vec<u8>, e: &Entry<'_>, clock: &Clock) {
    clock.iso(b);
    b.push(b' ');
    b.extend_from_slice(e.client);
    b.extend_from_slice(b" \"");
    escaped(b, e.request.method());
    b.push(b' ');
    escaped(b, e.request.target());
    b.push(b' ');
    escaped(b, e.request.protocol(e.version));
    b.extend_from_slice(b"\" ");
    b.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes());
    b.push(b' ');
    b.extend_from_slice(itoa::Buffer::new().format(e.bytes).as_bytes());
    b.push(b' ');
    write_seconds(b, e.elapsed_ns, 6);
    b.push(b' ');
    b.extend_from_slice(e.route.unwrap_or("-").as_bytes());
    b.push(b' ');
    b.extend_from_slice(e.upstream.unwrap_or("-").as_bytes());
    if let Some(subject) = e.client_cert {
        b.push(b' ');
        escaped(b, subject.as_bytes());
    }
}

/// Writes variable `v`'s value with `esc` for bytes that come from the request; false when it
/// has none (nothing written).
type Escape = fn(&mut Vec<u8>, &[u8]);

fn value(b: &mut Vec<u8>, v: &Var, src: &Logged<'_>, esc: Escape, scratch: &mut Vec<u8>) -> bool {
    match v {
        // Its parts escaped apart: the spaces between them are the line's.
        Var::Request => {
            let (Some(m), Some(t)) = (src.method(), src.target()) else {
                return false;
            };
            esc(b, m);
            b.push(b' ');
            esc(b, t);
            b.push(b' ');
            esc(b, src.protocol().unwrap_or_default());
            true
        }
        // What the log writes itself (numbers, addresses, times) needs no escaping.
        Var::RemoteAddr
        | Var::ServerAddr
        | Var::Scheme
        | Var::IsArgs
        | Var::UpstreamAddr
        | Var::BalancerIp
        | Var::TimeLocal
        | Var::TimeIso8601
        | Var::TraceId => v.write(src, b),
        v if v.is_number() => v.write(src, b),
        v => {
            scratch.clear();
            if !v.write(src, scratch) {
                return false;
            }
            esc(b, scratch);
            true
        }
    }
}

/// An exchange as the log's variables read it.
struct Logged<'a> {
    e: &'a Entry<'a>,
    clock: &'a Clock,
    /// The request's `request_id`; made here when no phase read one.
    request_id: std::cell::Cell<Option<[u8; 16]>>,
}

impl<'a> Source<'a> for Logged<'a> {
    fn client(&self) -> SocketAddr {
        self.e.peer
    }
    fn peer(&self) -> SocketAddr {
        self.e.tcp.copied().unwrap_or(self.e.peer)
    }
    fn server(&self) -> SocketAddr {
        self.e.local
    }
    fn is_https(&self) -> bool {
        self.e.https
    }
    fn client_text(&self) -> Option<&'a [u8]> {
        Some(self.e.client)
    }
    fn method(&self) -> Option<&'a [u8]> {
        nonempty(self.e.request.method())
    }
    /// The path as sent.
    fn path(&self) -> Option<&'a [u8]> {
        let t = nonempty(self.e.request.target())?;
        Some(t.split(|&c| c == b'?').next().unwrap_or_default())
    }
    fn target(&self) -> Option<&'a [u8]> {
        nonempty(self.e.request.target())
    }
    fn query(&self) -> Option<&'a [u8]> {
        let t = self.e.request.target();
        let q = t.iter().position(|&c| c == b'?')?;
        nonempty(&t[q + 1..])
    }
    /// As sent (`Host`, or the HTTP/2 authority).
    fn host(&self) -> Option<std::borrow::Cow<'a, [u8]>> {
        self.e.request.host().map(Into::into)
    }
    fn protocol(&self) -> Option<&'a [u8]> {
        nonempty(self.e.request.protocol(self.e.version))
    }
    fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.e.request.header(name)
    }
    fn arg(&self, name: &str) -> Option<std::borrow::Cow<'a, [u8]>> {
        match self.e.request {
            View::Head(h) => h.query_arg_ref(name),
            _ => None,
        }
    }
    fn cookie(&self, name: &str) -> Option<&'a [u8]> {
        match self.e.request {
            View::Head(h) => h.cookie(name),
            _ => None,
        }
    }
    fn consumer_name(&self) -> Option<&'a str> {
        self.e.consumer
    }
    fn route_id(&self) -> Option<&'a str> {
        self.e.route
    }
    fn service_id(&self) -> Option<&'a str> {
        Some(self.e.names.service_id).filter(|s| !s.is_empty())
    }
    fn route_name(&self) -> Option<&'a str> {
        Some(self.e.names.name).filter(|s| !s.is_empty())
    }
    fn service_name(&self) -> Option<&'a str> {
        Some(self.e.names.service_name).filter(|s| !s.is_empty())
    }
    fn request_id(&self) -> Option<[u8; 16]> {
        let id = self
            .request_id
            .get()
            .unwrap_or_else(sluice_core::ctx::new_request_id);
        self.request_id.set(Some(id));
        Some(id)
    }
    fn llm(&self, var: sluice_core::llm::LlmVar) -> Option<String> {
        var.value(self.e.carried.llm.as_deref()?)
    }

    fn jwt_claim(&self, name: &str) -> Option<std::borrow::Cow<'a, [u8]>> {
        sluice_core::ctx::claim_text(self.e.carried.jwt_payload.as_deref()?, name)
    }
    fn consumer_group(&self) -> Option<&'a str> {
        self.e.consumer_group
    }
    fn client_cert_subject(&self) -> Option<&'a str> {
        self.e.client_cert
    }
    fn status(&self) -> Option<u16> {
        Some(self.e.status)
    }
    fn upstream_addr(&self) -> Option<SocketAddr> {
        self.e.upstream?.parse().ok()
    }
    fn upstream_text(&self) -> Option<&'a str> {
        self.e.upstream
    }
    fn upstream_status(&self) -> Option<u16> {
        self.e.answer.map(|a| a.0)
    }
    fn upstream_response_ns(&self) -> Option<u64> {
        self.e.answer.map(|a| a.1)
    }
    fn bytes_sent(&self) -> Option<u64> {
        Some(self.e.bytes)
    }
    fn bytes_received(&self) -> Option<u64> {
        Some(self.e.bytes_in)
    }
    fn request_ns(&self) -> Option<u64> {
        Some(self.e.elapsed_ns)
    }
    fn trace_id(&self) -> Option<[u8; 16]> {
        self.e.carried.trace_id
    }
    /// From the log's clock, written once a second.
    fn write_time(&self, var: &Var, out: &mut Vec<u8>) -> bool {
        let clock = self.clock;
        match var {
            Var::TimeLocal => out.extend_from_slice(&clock.local),
            Var::TimeIso8601 => clock.iso(out),
            Var::Msec => {
                out.extend_from_slice(itoa::Buffer::new().format(clock.second).as_bytes());
                out.push(b'.');
                digits(out, u64::from(clock.millis), 3);
            }
            _ => return false,
        }
        true
    }
}

fn nonempty(b: &[u8]) -> Option<&[u8]> {
    (!b.is_empty()).then_some(b)
}

/// Escapes for the inside of a JSON string: quotes, backslashes and control characters, and
/// bytes that are not UTF-8 (as U+FFFD), so that every line parses.
fn json_string_body(out: &mut Vec<u8>, s: &[u8]) {
    for chunk in s.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => {
                    let mut tmp = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                }
            }
        }
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{fffd}".as_bytes());
        }
    }
}

/// Copies request bytes, escaping what would break the line format.
fn escaped(out: &mut Vec<u8>, s: &[u8]) {
    // Most values need nothing escaped: one pass to check, one copy.
    if s.iter()
        .all(|&c| c != b'"' && c != b'\\' && (0x21..0x7f).contains(&c))
    {
        out.extend_from_slice(s);
        return;
    }
    for &c in s {
        if c == b'"' || c == b'\\' || !(0x21..0x7f).contains(&c) {
            let _ = write!(out, "\\x{c:02x}");
        } else {
            out.push(c);
        }
    }
}

/// One line as `format` (with `fields`, for `json`) writes it for `request`, parsed as the
/// HTTP/1.1 engine parses it (or, refused, its first line as a refused request is logged),
/// answered 200 by a node; None when the format does not compile. For the fuzz targets.
pub fn line_for_fuzzing(format: &str, fields: &[String], request: &[u8]) -> Option<Vec<u8>> {
    let format = AccessFormat::parse(format, fields).ok()?;
    let limits = sluice_core::http::request::HeadLimits {
        max_request_line: 8192,
        max_header_size: 16384,
        max_headers: 100,
    };
    let mut headers = Vec::new();
    let parsed = sluice_core::http::request::parse(request, &limits, &mut headers);
    let mut buf = bytes::BytesMut::from(request);
    let head = match parsed {
        Ok(Some(mut h)) => {
            h.take_bytes(&mut buf);
            Some(h)
        }
        _ => None,
    };
    let line = request.split(|&b| b == b'\n').next().unwrap_or_default();
    let request = match &head {
        Some(h) => View::Head(h),
        None => View::Line(line),
    };
    let peer: SocketAddr = "192.0.2.1:51234".parse().ok()?;
    let local: SocketAddr = "127.0.0.1:9080".parse().ok()?;
    let carried = sluice_core::ctx::Carried::default();
    let mut log = AccessLog {
        file: open_file("/dev/null").ok()?,
        buf: Vec::new(),
        limit: usize::MAX,
        format,
        cfg: AccessLogConfig {
            path: "/dev/null".into(),
            format: String::new(),
            fields: Vec::new(),
            buffer: sluice_config::Size(1 << 16),
            flush: sluice_config::Dur(std::time::Duration::from_secs(1)),
        },
        opened_at: 0,
        clock: Clock::default(),
        scratch: Vec::new(),
    };
    log.record(&Entry {
        request,
        version: head.as_ref().map_or(1, |h| h.version()),
        client: b"192.0.2.1",
        peer,
        tcp: None,
        local,
        https: false,
        status: 200,
        bytes: 5,
        bytes_in: request_len(&head),
        elapsed_ns: 1_234_567,
        route: Some("r1"),
        upstream: Some("127.0.0.1:1980"),
        answer: Some((200, 1_000_000)),
        consumer: None,
        consumer_group: None,
        names: sluice_core::ctx::RouteNames::default(),
        carried: &carried,
        client_cert: None,
    });
    Some(std::mem::take(&mut log.buf))
}

fn request_len(head: &Option<RequestHead>) -> u64 {
    head.as_ref().map_or(0, |h| h.head_len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        let mut clock = Clock {
            second: 1_795_327_664,
            millis: 123,
            ..Clock::default()
        };
        write_second(&mut clock.iso, clock.second);
        let mut out = Vec::new();
        clock.iso(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "2026-11-22T06:07:44.123Z");
        let mut local = Vec::new();
        write_time_local(&mut local, 1_795_327_664);
        assert_eq!(
            String::from_utf8(local).unwrap(),
            "22/Nov/2026:06:07:44 +0000"
        );
        let mut secs = Vec::new();
        write_seconds(&mut secs, 12_345_678_901, 6);
        secs.push(b' ');
        write_seconds(&mut secs, 412_000, 3);
        assert_eq!(String::from_utf8(secs).unwrap(), "12.345678 0.000");
        assert_eq!(sluice_core::clock::civil_from_days(0), (1970, 1, 1));
        assert_eq!(sluice_core::clock::civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn json_strings_escape_what_would_break_a_line_or_the_json() {
        let mut out = b"\"".to_vec();
        json_string_body(&mut out, b"a\"b\\c\nd\re\tf\x01g\x7fh\xffi\xc3\xa9");
        out.push(b'"');
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "\"a\\\"b\\\\c\\nd\\re\\tf\\u0001g\\u007fh\u{fffd}ié\""
        );
        let back: String = serde_json::from_str(&text).unwrap();
        assert_eq!(back, "a\"b\\c\nd\re\tf\u{1}g\u{7f}h\u{fffd}ié");
        assert!(!text.contains('\n'));
    }

    #[test]
    fn pipe_writes_end_on_lines_and_fit_pipe_buf() {
        /// Records each write.
        struct Writes(Vec<Vec<u8>>);
        impl Write for Writes {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.push(b.to_vec());
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut buf = Vec::new();
        for i in 0..500 {
            buf.extend_from_slice(format!("line {i:04} {}\n", "x".repeat(30)).as_bytes());
        }
        buf.extend_from_slice(format!("{}\n", "y".repeat(9000)).as_bytes());
        buf.extend_from_slice(b"last\n");
        let mut w = Writes(Vec::new());
        write_lines_atomically(&mut w, &buf).unwrap();
        assert_eq!(w.0.concat(), buf);
        assert!(w.0.len() > 5);
        for piece in &w.0 {
            assert!(piece.ends_with(b"\n"));
            // At most PIPE_BUF, or a single line that is longer by itself.
            let lines = piece.iter().filter(|&&c| c == b'\n').count();
            assert!(
                piece.len() <= PIPE_BUF || lines == 1,
                "{} bytes",
                piece.len()
            );
        }
    }

    #[test]
    fn request_bytes_cannot_break_a_line() {
        let mut out = Vec::new();
        escaped(&mut out, b"/a b\"c\n");
        assert_eq!(out, b"/a\\x20b\\x22c\\x0a");
    }
}
