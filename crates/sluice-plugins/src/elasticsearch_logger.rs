//! `elasticsearch-logger`: indexes log entries in Elasticsearch (or OpenSearch) through its
//! bulk API, as APISIX's `elasticsearch-logger`.
//!
//! `{endpoint_addrs (or the older endpoint_addr), field: {index}, auth: {username, password},
//! headers, timeout: 10, ssl_verify: true}` and the loggers' common fields (`logger/mod.rs`).
//! Each entry is an action line `{"index":{"_index":"<index>"}}` and the entry (NDJSON);
//! `field.index` may hold variables (`logs-$route_id`) and dates (`logs-{%Y.%m.%d}`, UTC). A batch is one `POST <addr>/_bulk`;
//! an answer other than 200 fails it. Elasticsearch 7 and later, and OpenSearch (APISIX also
//! adds `_type` for Elasticsearch 5 and 6, which it asks for the version first; that is not
//! done here).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};
use sluice_config::Validator;
use sluice_core::plugin::{LocalFuture, parse_config};

use crate::callout::KeepAlive;
use crate::logger::net::Endpoints;
use crate::logger::{Failed, Kind, Logged, Sink};
use crate::proxy_rewrite::{Piece, render, template};
use crate::util::{Num, whole_field};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    endpoint_addr: Option<String>,
    #[serde(default)]
    endpoint_addrs: Option<Vec<String>>,
    field: Field,
    #[serde(default)]
    auth: Option<Auth>,
    #[serde(default)]
    headers: Option<Map<String, Value>>,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default = "crate::util::yes")]
    ssl_verify: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Field {
    index: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Auth {
    username: String,
    password: String,
}

const KIND: Kind = Kind {
    encrypted: &["auth.password", "headers"],
    ..Kind::named("elasticsearch-logger", 413, "elasticsearch-logger")
};

crate::logger::factory!(KIND, Config, own);

/// Its own fields, checked, as its sink.
fn own(
    own: &Value,
    _: &crate::logger::Given<'_>,
    v: &mut Validator,
) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    let (field, addrs) = match (&c.endpoint_addrs, &c.endpoint_addr) {
        (Some(list), None) => ("endpoint_addrs", list.clone()),
        (None, Some(one)) => ("endpoint_addr", vec![one.clone()]),
        (Some(_), Some(_)) => {
            v.error_at("endpoint_addr", "give endpoint_addrs or endpoint_addr, not both");
            return None;
        }
        (None, None) => {
            v.error_at("endpoint_addrs", "is required (the servers' addresses)");
            return None;
        }
    };
    if let Some(i) = addrs.iter().position(|a| a.ends_with('/')) {
        v.error_at_path(&[field, &i.to_string()], "must not end with /");
        return None;
    }
    let endpoints = Endpoints::parse(field, &addrs, "/_bulk", c.ssl_verify, v);
    let timeout = whole_field("timeout", c.timeout, 10, (1, 3600), " seconds", v);
    let index = v.field("field", |v| {
        v.field("index", |v| {
            if c.field.index.is_empty() {
                v.error("must name an index");
                return None;
            }
            index_template(&c.field.index)
                .map_err(|e| v.error(e))
                .ok()
        })
    });
    let mut headers = crate::loki_logger::header_fields("headers", c.headers.as_ref(), v)?;
    if let Some(a) = &c.auth {
        if a.username.is_empty() || a.password.is_empty() {
            v.error_at("auth", "needs a username and a password");
            return None;
        }
        let pair = format!("{}:{}", a.username, a.password);
        // A `headers` Authorization wins, as in APISIX.
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("authorization")) {
            headers.push((
                "Authorization".into(),
                format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)),
            ));
        }
    }
    // `headers` win over the plugin's own of the same name (APISIX's order).
    for (name, value) in [
        ("Content-Type", "application/x-ndjson"),
        ("Accept", "application/vnd.elasticsearch+json"),
    ] {
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            headers.push((name.into(), value.into()));
        }
    }
    let sink = Elastic {
        endpoints: endpoints?,
        index: index?,
        headers,
        timeout: Duration::from_secs(timeout?),
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, None))
}

/// A piece of `field.index`: text with variables, or a `{...}` date of the entry's time
/// (APISIX's `{%Y.%m.%d}`, in UTC).
#[derive(Debug)]
enum IndexPiece {
    Text(Vec<Piece>),
    Date(String),
}

/// `field.index` split into its pieces; a date's format is checked.
fn index_template(index: &str) -> Result<Vec<IndexPiece>, String> {
    let mut out = Vec::new();
    let mut rest = index;
    let mut text = String::new();
    while let Some(i) = rest.find('{') {
        // `${name}` is a variable, not a date.
        if i > 0 && rest.as_bytes()[i - 1] == b'$' {
            let end = rest[i..].find('}').map_or(rest.len(), |j| i + j + 1);
            text.push_str(&rest[..end]);
            rest = &rest[end..];
            continue;
        }
        let Some(j) = rest[i..].find('}') else {
            break;
        };
        text.push_str(&rest[..i]);
        let fmt = &rest[i + 1..i + j];
        let mut probe = String::new();
        strftime(fmt, std::time::Duration::ZERO, &mut probe)?;
        if !text.is_empty() {
            out.push(IndexPiece::Text(piece(&std::mem::take(&mut text))?));
        }
        out.push(IndexPiece::Date(fmt.to_owned()));
        rest = &rest[i + j + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        out.push(IndexPiece::Text(piece(&text)?));
    }
    Ok(out)
}

fn piece(text: &str) -> Result<Vec<Piece>, String> {
    template(text, &|_| Err("uri_param_* is not read here".into()))
}

/// Writes time `at` (since the epoch, UTC) as `fmt` says: `%Y %y %m %d %H %M %S %j %%`.
fn strftime(fmt: &str, at: std::time::Duration, out: &mut String) -> Result<(), String> {
    use std::fmt::Write as _;
    let secs = at.as_secs();
    let days = (secs / 86_400) as i64;
    let (y, m, d) = sluice_core::clock::civil_from_days(days);
    let yday = days - days_from_civil(y) + 1;
    let sod = secs % 86_400;
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{y:04}"),
            Some('y') => write!(out, "{:02}", y.rem_euclid(100)),
            Some('m') => write!(out, "{m:02}"),
            Some('d') => write!(out, "{d:02}"),
            Some('H') => write!(out, "{:02}", sod / 3600),
            Some('M') => write!(out, "{:02}", (sod / 60) % 60),
            Some('S') => write!(out, "{:02}", sod % 60),
            Some('j') => write!(out, "{yday:03}"),
            Some('%') => write!(out, "%"),
            other => {
                return Err(format!(
                    "{{{fmt}}}: %{} is not a date part here (%Y %y %m %d %H %M %S %j %%)",
                    other.map_or(String::new(), String::from)
                ));
            }
        };
    }
    Ok(())
}

/// Days since 1970-01-01 of January 1st of `year`.
fn days_from_civil(year: i64) -> i64 {
    let y = year - 1;
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = 306; // March 1st to January 1st of the next year, days
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

struct Elastic {
    endpoints: Endpoints,
    index: Vec<IndexPiece>,
    headers: Vec<(String, String)>,
    timeout: Duration,
}

impl Sink for Elastic {
    /// The bulk API's action line and the entry.
    fn envelope(&self, e: Logged<'_>) -> Vec<u8> {
        let now = sluice_core::clock::now();
        let mut index = String::new();
        for p in &self.index {
            match p {
                IndexPiece::Text(t) => index.push_str(&crate::util::text(&render(t, e.req, e.env))),
                IndexPiece::Date(fmt) => {
                    let _ = strftime(fmt, now, &mut index);
                }
            }
        }
        let action = serde_json::json!({"index": {"_index": index}});
        let mut out = serde_json::to_vec(&action).unwrap_or_default();
        out.push(b'\n');
        out.extend_from_slice(&e.json());
        out.push(b'\n');
        out
    }

    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        Box::pin(async move {
            let keep = KeepAlive {
                pool: 4,
                idle: Duration::from_secs(60),
            };
            self.endpoints
                .post(&self.headers, batch.concat().into(), self.timeout, Some(keep), |s| s == 200)
                .await
                .map_err(Failed::all)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_dates_are_written_as_apisix_writes_them() {
        let at = std::time::Duration::from_secs(1_795_327_664); // 2026-11-22T06:07:44Z
        let mut out = String::new();
        strftime("%Y.%m.%d-%H:%M:%S %j %y %%", at, &mut out).unwrap();
        assert_eq!(out, "2026.11.22-06:07:44 326 26 %");
        let mut out = String::new();
        strftime("%Y", std::time::Duration::from_secs(951_782_400), &mut out).unwrap();
        assert_eq!(out, "2000", "2000-02-29");
        let mut out = String::new();
        strftime("%j", std::time::Duration::from_secs(951_782_400), &mut out).unwrap();
        assert_eq!(out, "060");
        assert!(index_template("logs-{%Q}").unwrap_err().contains("%Q"));
        let pieces = index_template("logs-$route_id-${host}-{%Y}").unwrap();
        assert!(matches!(pieces.last(), Some(IndexPiece::Date(f)) if f == "%Y"));
        assert_eq!(pieces.len(), 2, "the variables stay in one text piece");
    }
}
