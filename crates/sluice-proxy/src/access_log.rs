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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_config::AccessLogConfig;
use sluice_config::log_format::{AccessFormat, Piece, Var};
use sluice_core::http::RequestHead;
use tracing::warn;

/// Bumped by SIGUSR1: every worker reopens its file at its next flush.
pub(crate) static REOPEN: AtomicU64 = AtomicU64::new(0);

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
    pub(crate) local: SocketAddr,
    pub(crate) https: bool,
    pub(crate) status: u16,
    pub(crate) bytes: u64,
    pub(crate) bytes_in: u64,
    pub(crate) elapsed: Duration,
    pub(crate) route: Option<&'a str>,
    pub(crate) upstream: Option<&'a str>,
    /// The node's status and time to its response head.
    pub(crate) answer: Option<(u16, Duration)>,
    pub(crate) consumer: Option<&'a str>,
    pub(crate) trace_id: Option<[u8; 16]>,
    /// The verified client certificate's subject (mutual TLS).
    pub(crate) client_cert: Option<&'a str>,
}

fn open_file(path: &str) -> std::io::Result<File> {
    let path = if path == "stdout" {
        "/dev/stdout"
    } else {
        path
    };
    OpenOptions::new().create(true).append(true).open(path)
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
        })
    }

    /// The settings it was opened with.
    pub(crate) fn config(&self) -> &AccessLogConfig {
        &self.cfg
    }

    pub(crate) fn record(&mut self, e: &Entry<'_>) {
        let b = &mut self.buf;
        match &self.format {
            AccessFormat::Default => default_line(b, e),
            AccessFormat::Template(pieces) => {
                for p in pieces {
                    match p {
                        Piece::Text(t) => b.extend_from_slice(t.as_bytes()),
                        Piece::Var(v) => {
                            if !value(b, v, e, escaped) {
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
                        if !value(b, v, e, json_string_body) {
                            b.extend_from_slice(b"null");
                        }
                    } else {
                        b.push(b'"');
                        if value(b, v, e, json_string_body) {
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
            if let Err(e) = self.file.write_all(&self.buf) {
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
fn default_line(b: &mut Vec<u8>, e: &Entry<'_>) {
    write_time(b, SystemTime::now());
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
    let _ = write!(b, " {:.6} ", e.elapsed.as_secs_f64());
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
fn value(b: &mut Vec<u8>, v: &Var, e: &Entry<'_>, esc: fn(&mut Vec<u8>, &[u8])) -> bool {
    value_of(b, v, e, esc).is_some()
}

fn value_of(b: &mut Vec<u8>, v: &Var, e: &Entry<'_>, esc: fn(&mut Vec<u8>, &[u8])) -> Option<()> {
    let num =
        |b: &mut Vec<u8>, n: u64| b.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    let secs = |b: &mut Vec<u8>, d: Duration| {
        let _ = write!(b, "{:.3}", d.as_secs_f64());
    };
    match v {
        Var::RemoteAddr => b.extend_from_slice(e.client),
        Var::RemotePort => num(b, u64::from(e.peer.port())),
        Var::ServerAddr => {
            let _ = write!(b, "{}", e.local.ip());
        }
        Var::ServerPort => num(b, u64::from(e.local.port())),
        Var::TimeLocal => write_time_local(b, SystemTime::now()),
        Var::TimeIso8601 => write_time(b, SystemTime::now()),
        Var::Msec => {
            let d = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let _ = write!(b, "{}.{:03}", d.as_secs(), d.subsec_millis());
        }
        Var::Request => {
            esc(b, nonempty(e.request.method())?);
            b.push(b' ');
            esc(b, e.request.target());
            b.push(b' ');
            esc(b, e.request.protocol(e.version));
        }
        Var::RequestMethod => esc(b, nonempty(e.request.method())?),
        Var::RequestUri => esc(b, nonempty(e.request.target())?),
        Var::Uri => {
            let t = nonempty(e.request.target())?;
            esc(b, t.split(|&c| c == b'?').next().unwrap_or_default());
        }
        Var::Args => {
            let t = e.request.target();
            let q = t.iter().position(|&c| c == b'?')?;
            esc(b, nonempty(&t[q + 1..])?);
        }
        Var::ServerProtocol => esc(b, nonempty(e.request.protocol(e.version))?),
        Var::Scheme => b.extend_from_slice(if e.https { b"https" } else { b"http" }),
        Var::Status => num(b, u64::from(e.status)),
        Var::BodyBytesSent => num(b, e.bytes),
        Var::RequestBodyLength => num(b, e.bytes_in),
        Var::RequestTime => secs(b, e.elapsed),
        Var::UpstreamAddr => b.extend_from_slice(e.upstream?.as_bytes()),
        Var::UpstreamStatus => num(b, u64::from(e.answer?.0)),
        Var::UpstreamResponseTime => secs(b, e.answer?.1),
        Var::Host => esc(b, e.request.host()?),
        Var::RouteId => esc(b, e.route?.as_bytes()),
        Var::ConsumerName => esc(b, e.consumer?.as_bytes()),
        Var::TraceId => {
            for byte in e.trace_id? {
                let _ = write!(b, "{byte:02x}");
            }
        }
        Var::SslClientSDn => esc(b, e.client_cert?.as_bytes()),
        Var::Http(name) => esc(b, e.request.header(name)?),
    }
    Some(())
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
    for &c in s {
        if c == b'"' || c == b'\\' || !(0x21..0x7f).contains(&c) {
            let _ = write!(out, "\\x{c:02x}");
        } else {
            out.push(c);
        }
    }
}

/// Writes `t` as RFC 3339 UTC with milliseconds.
fn write_time(out: &mut Vec<u8>, t: SystemTime) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (y, m, day) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    let _ = write!(
        out,
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        (s / 60) % 60,
        s % 60,
        d.subsec_millis()
    );
}

/// Writes `t` as NGINX's `$time_local`, in UTC: `24/Nov/2026:06:37:09 +0000`.
fn write_time_local(out: &mut Vec<u8>, t: SystemTime) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (y, m, day) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    let _ = write!(
        out,
        "{day:02}/{}/{y:04}:{:02}:{:02}:{:02} +0000",
        MONTHS[(m - 1) as usize],
        s / 3600,
        (s / 60) % 60,
        s % 60
    );
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        let mut out = Vec::new();
        write_time(
            &mut out,
            UNIX_EPOCH + Duration::from_millis(1_795_327_664_123),
        );
        assert_eq!(String::from_utf8(out).unwrap(), "2026-11-22T06:07:44.123Z");
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn request_bytes_cannot_break_a_line() {
        let mut out = Vec::new();
        escaped(&mut out, b"/a b\"c\n");
        assert_eq!(out, b"/a\\x20b\\x22c\\x0a");
    }
}
