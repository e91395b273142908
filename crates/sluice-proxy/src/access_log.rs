//! The access log: one line per request, formatted into a per-worker buffer and written with
//! one `write` when the buffer fills or every `flush` interval. Each worker has its own file
//! handle opened with `O_APPEND`, so whole buffers from different workers never interleave.
//!
//! Line format (space separated, fields never contain spaces):
//! `2026-11-22T06:07:44.123Z 127.0.0.1 "GET /hello HTTP/1.1" 200 11 0.000412 hello 127.0.0.1:1980`
//! time, client, request line, status, response body bytes, seconds, route id (`-` when no
//! route matched), upstream node (`-` when none was used), and, over mutual TLS, the verified
//! client certificate's subject (spaces and quotes escaped: `CN=alice,\x20O=Example`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_config::AccessLogConfig;
use tracing::warn;

/// One worker's access log.
#[derive(Debug)]
pub(crate) struct AccessLog {
    file: File,
    buf: Vec<u8>,
    limit: usize,
}

/// What is logged about one request.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    pub(crate) client: &'a [u8],
    pub(crate) method: &'a [u8],
    pub(crate) target: &'a [u8],
    pub(crate) version: u8,
    pub(crate) status: u16,
    pub(crate) bytes: u64,
    pub(crate) elapsed: Duration,
    pub(crate) route: Option<&'a str>,
    pub(crate) upstream: Option<&'a str>,
    /// The verified client certificate's subject (mutual TLS).
    pub(crate) client_cert: Option<&'a str>,
}

impl AccessLog {
    pub(crate) fn open(cfg: &AccessLogConfig) -> std::io::Result<AccessLog> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&cfg.path)?;
        let limit = (cfg.buffer.0 as usize).max(1);
        Ok(AccessLog {
            file,
            buf: Vec::with_capacity(limit.min(1 << 20)),
            limit,
        })
    }

    pub(crate) fn record(&mut self, e: &Entry<'_>) {
        let b = &mut self.buf;
        write_time(b, SystemTime::now());
        b.push(b' ');
        b.extend_from_slice(e.client);
        b.extend_from_slice(b" \"");
        escaped(b, e.method);
        b.push(b' ');
        escaped(b, e.target);
        b.extend_from_slice(match e.version {
            0 => b" HTTP/1.0\" ",
            2 => b" HTTP/2.0\" ",
            _ => b" HTTP/1.1\" ",
        });
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
        b.push(b'\n');
        if self.buf.len() >= self.limit {
            self.flush();
        }
    }

    pub(crate) fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        if let Err(e) = self.file.write_all(&self.buf) {
            warn!(error = %e, "cannot write the access log");
        }
        self.buf.clear();
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
