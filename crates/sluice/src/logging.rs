//! The error log's lines: one record, one line, in both formats (line-based shippers split on
//! newlines), and where a record comes from in words a reader of the log knows (`config`,
//! `upstream`, `admin`), not Rust module paths.

use std::fmt;
use std::io::{self, Write};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// The part of Sluice (or the library) a record comes from, from its target (the module that
/// logged it).
pub fn component(target: &str) -> &str {
    const BY_PREFIX: &[(&str, &str)] = &[
        ("sluice_admin::control::etcd_sync", "etcd"),
        ("sluice_admin::cluster", "etcd"),
        ("sluice_admin::etcd", "etcd"),
        ("sluice_admin::control", "config"),
        ("sluice_admin::watch", "config"),
        ("sluice_admin::store", "config"),
        ("sluice_admin::status", "status"),
        ("sluice_admin", "admin"),
        ("sluice_config", "config"),
        ("sluice_proxy::upstream::discover", "discovery"),
        ("sluice_proxy::upstream::discovery", "discovery"),
        ("sluice_proxy::upstream", "upstream"),
        ("sluice_proxy::tls", "tls"),
        ("sluice_proxy::access_log", "access-log"),
        ("sluice_proxy::origin", "origin"),
        ("sluice_proxy", "proxy"),
        ("sluice_plugins", "plugin"),
        ("sluice_core", "proxy"),
        ("sluice::secrets", "secrets"),
        ("sluice", "server"),
        ("rustls", "tls"),
        ("h2", "http2"),
        ("hyper", "http"),
    ];
    for (prefix, word) in BY_PREFIX {
        if target
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        {
            return word;
        }
    }
    target.split("::").next().unwrap_or(target)
}

/// `format: json`: one object per line, `{"timestamp", "level", "component", "fields":
/// {"message", ...}}` (tracing-subscriber's layout, with `component` for `target`).
#[derive(Debug, Default)]
pub struct Json;

impl<S, N> FormatEvent<S, N> for Json
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _cx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        let record = serde_json::json!({
            "timestamp": timestamp,
            "level": meta.level().as_str(),
            "component": component(meta.target()),
            "fields": Value::Object(fields.0),
        });
        writeln!(w, "{record}")
    }
}

/// An event's fields as JSON values.
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
}

/// Writes each record on one line: a newline inside a record (a value that holds one) is
/// written as `\n`. tracing-subscriber writes a whole record per call.
#[derive(Debug, Clone, Copy, Default)]
pub struct OneLine;

impl<'a> MakeWriter<'a> for OneLine {
    type Writer = OneLineWriter;
    fn make_writer(&'a self) -> OneLineWriter {
        OneLineWriter
    }
}

/// See [`OneLine`].
#[derive(Debug)]
pub struct OneLineWriter;

impl Write for OneLineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stderr().lock().write_all(&one_line(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// A record as one line: newlines and carriage returns before its end written as `\n`, `\r`.
fn one_line(record: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let body = record.strip_suffix(b"\n").unwrap_or(record);
    if !body.contains(&b'\n') && !body.contains(&b'\r') {
        return record.into();
    }
    let mut line = Vec::with_capacity(record.len() + 16);
    for &b in body {
        match b {
            b'\n' => line.extend_from_slice(b"\\n"),
            b'\r' => line.extend_from_slice(b"\\r"),
            _ => line.push(b),
        }
    }
    line.push(b'\n');
    line.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_written_on_one_line() {
        assert_eq!(&*one_line(b"plain\n"), b"plain\n");
        assert_eq!(
            &*one_line(b"WARN refused: a\nb\r\n\n"),
            b"WARN refused: a\\nb\\r\\n\n"
        );
    }

    #[test]
    fn components_are_words_not_module_paths() {
        assert_eq!(component("sluice_admin::control"), "config");
        assert_eq!(component("sluice_admin::control::etcd_sync"), "etcd");
        assert_eq!(component("sluice_admin::api"), "admin");
        assert_eq!(component("sluice_proxy::upstream::select"), "upstream");
        assert_eq!(component("sluice_proxy::failures"), "proxy");
        assert_eq!(component("sluice"), "server");
        assert_eq!(component("sluice::secrets"), "secrets");
        assert_eq!(component("sluicex"), "sluicex");
        assert_eq!(component("rustls::server"), "tls");
    }
}
