//! `loki-logger`: pushes log entries to Grafana Loki, as APISIX's `loki-logger`.
//!
//! `{endpoint_addrs, endpoint_uri: /loki/api/v1/push, tenant_id: fake, headers, log_labels:
//! {job: apisix}, ssl_verify: false, timeout: 3000, keepalive: true, keepalive_timeout: 60000,
//! keepalive_pool: 5}` and the loggers' common fields (`logger/mod.rs`). A batch is one push
//! (Loki's documented JSON API): entries grouped into streams by their labels (each entry's
//! `log_labels` values resolved for its request: `$host`, `${route_id}`), each value
//! `[start time in nanoseconds, the entry's JSON]`, `X-Scope-OrgID: <tenant_id>`. An answer of
//! 300 or more fails the batch. One of `endpoint_addrs` is chosen at random per batch.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};
use sluice_config::Validator;
use sluice_core::plugin::{LocalFuture, parse_config};

use crate::callout::KeepAlive;
use crate::logger::net::Endpoints;
use crate::logger::{Failed, Kind, Logged, Sink};
use crate::proxy_rewrite::{Piece, render, template};
use crate::util::Num;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    endpoint_addrs: Vec<String>,
    #[serde(default)]
    endpoint_uri: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    headers: Option<Map<String, Value>>,
    #[serde(default)]
    log_labels: Option<Map<String, Value>>,
    #[serde(default)]
    ssl_verify: bool,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default = "crate::util::yes")]
    keepalive: bool,
    #[serde(default)]
    keepalive_timeout: Option<Num>,
    #[serde(default)]
    keepalive_pool: Option<Num>,
}

const KIND: Kind = Kind {
    encrypted: &["headers"],
    unmatched_route: Some("no-matched"),
    ..Kind::named("loki-logger", 414, "loki logger")
};

crate::logger::factory!(KIND, Config, own);

/// Header fields of the configuration: names and string values; errors at `field`.
pub(crate) fn header_fields(
    field: &str,
    headers: Option<&Map<String, Value>>,
    v: &mut Validator,
) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut ok = true;
    v.field(field, |v| {
        for (name, value) in headers.into_iter().flatten() {
            v.field(name, |v| {
                ok &= crate::util::check_header_name(name, v);
                match value.as_str() {
                    Some(s) if !s.is_empty() && crate::util::check_header_value(s, v) => {
                        out.push((name.clone(), s.to_owned()));
                    }
                    Some(s) if !s.is_empty() => ok = false,
                    _ => {
                        v.error("must be a non-empty string");
                        ok = false;
                    }
                }
            });
        }
    });
    ok.then_some(out)
}

/// Its own fields, checked, as its sink.
fn own(
    own: &Value,
    _: &crate::logger::Given<'_>,
    v: &mut Validator,
) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    let path = c.endpoint_uri.as_deref().unwrap_or("/loki/api/v1/push");
    if !path.starts_with('/') {
        v.error_at("endpoint_uri", "must be a path (/loki/api/v1/push)");
        return None;
    }
    let endpoints = Endpoints::parse("endpoint_addrs", &c.endpoint_addrs, path, c.ssl_verify, v);
    let call = crate::callout::settings(
        c.timeout,
        c.keepalive,
        c.keepalive_timeout,
        c.keepalive_pool,
        v,
    );
    let headers = header_fields("headers", c.headers.as_ref(), v);
    let mut labels = Vec::new();
    let mut ok = true;
    let default_labels = Map::from_iter([("job".to_owned(), Value::from("apisix"))]);
    v.field("log_labels", |v| {
        for (name, value) in c.log_labels.as_ref().unwrap_or(&default_labels) {
            v.field(name, |v| match value.as_str().filter(|s| !s.is_empty()) {
                Some(s) => match template(s, &|_| Err("uri_param_* is not read here".into())) {
                    Ok(t) => labels.push((name.clone(), t)),
                    Err(e) => {
                        v.error(e);
                        ok = false;
                    }
                },
                None => {
                    v.error("must be a non-empty string");
                    ok = false;
                }
            });
        }
    });
    let (endpoints, (timeout, keepalive), mut headers) = (endpoints?, call?, headers?);
    if !ok {
        return None;
    }
    // The plugin's own fields win over `headers` of the same name (APISIX's order).
    headers.retain(|(n, _)| {
        !n.eq_ignore_ascii_case("x-scope-orgid") && !n.eq_ignore_ascii_case("content-type")
    });
    headers.push((
        "X-Scope-OrgID".into(),
        c.tenant_id.unwrap_or_else(|| "fake".into()),
    ));
    headers.push(("Content-Type".into(), "application/json".into()));
    let sink = Loki {
        endpoints,
        headers,
        labels,
        timeout,
        keepalive,
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, None))
}

struct Loki {
    endpoints: Endpoints,
    headers: Vec<(String, String)>,
    labels: Vec<(String, Vec<Piece>)>,
    timeout: Duration,
    keepalive: Option<KeepAlive>,
}

impl Sink for Loki {
    /// `<time ns>\t<labels JSON>\t<entry JSON>` (JSON holds no raw tab), split when sent.
    fn envelope(&self, e: Logged<'_>) -> Vec<u8> {
        let elapsed = e
            .env
            .done
            .and_then(|d| d.elapsed_ns)
            .map_or(Duration::ZERO, Duration::from_nanos);
        let start = sluice_core::clock::now().saturating_sub(elapsed);
        let mut labels = Map::new();
        for (name, t) in &self.labels {
            let value = render(t, e.req, e.env);
            labels.insert(name.clone(), crate::util::text(&value).into());
        }
        let mut out = start.as_nanos().to_string().into_bytes();
        out.push(b'\t');
        out.extend_from_slice(&serde_json::to_vec(&labels).unwrap_or_default());
        out.push(b'\t');
        out.extend_from_slice(&e.json());
        out
    }

    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        Box::pin(async move {
            // Streams by label set, in the order they first appear.
            let mut streams: Vec<(&[u8], Vec<Value>)> = Vec::new();
            for entry in batch {
                let mut parts = entry.splitn(3, |&b| b == b'\t');
                let (Some(ts), Some(labels), Some(line)) = (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                let value = Value::Array(vec![
                    crate::util::text(ts).into(),
                    crate::util::text(line).into(),
                ]);
                match streams.iter_mut().find(|(l, _)| *l == labels) {
                    Some((_, values)) => values.push(value),
                    None => streams.push((labels, vec![value])),
                }
            }
            let streams: Vec<Value> = streams
                .into_iter()
                .map(|(labels, values)| {
                    let labels: Value = serde_json::from_slice(labels).unwrap_or_default();
                    serde_json::json!({"stream": labels, "values": values})
                })
                .collect();
            let body = serde_json::to_vec(&serde_json::json!({ "streams": streams }))
                .map_err(|e| Failed::all(e.to_string()))?;
            self.endpoints
                .post(&self.headers, body.into(), self.timeout, self.keepalive, |s| s < 300)
                .await
                .map_err(Failed::all)
        })
    }
}
