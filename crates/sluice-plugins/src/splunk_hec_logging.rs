//! `splunk-hec-logging`: sends log entries to Splunk's HTTP Event Collector, as APISIX's
//! `splunk-hec-logging`.
//!
//! `{endpoint: {uri, token, channel, timeout: 10, keepalive_timeout: 60000}, ssl_verify:
//! true}` and the loggers' common fields (`logger/mod.rs`). Each entry is a HEC event:
//! `{"time", "source": "apache-apisix-splunk-hec-logging", "sourcetype": "_json", "host",
//! "event"}`, the event APISIX's selection of the full entry (`request_url`,
//! `request_method`, `request_headers`, `request_query`, `request_size`, `response_headers`,
//! `response_status`, `response_size`, `latency`, `upstream`, and `log_format_extra`'s keys)
//! or the `log_format`'s entry. A batch is one `POST` of the events back to back, with
//! `Authorization: Splunk <token>`; an answer other than 200 fails it.

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
use crate::util::{Num, whole_field};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    endpoint: Endpoint,
    #[serde(default = "crate::util::yes")]
    ssl_verify: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Endpoint {
    uri: String,
    token: String,
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default)]
    keepalive_timeout: Option<Num>,
}

const KIND: Kind = Kind {
    encrypted: &["endpoint.token"],
    ..Kind::named("splunk-hec-logging", 409, "splunk-hec-logging")
};

crate::logger::factory!(KIND, Config, own);

/// The full entry's fields an event keeps, under their event names.
const EVENT: &[(&str, &str)] = &[
    ("request_url", "/request/url"),
    ("request_method", "/request/method"),
    ("request_headers", "/request/headers"),
    ("request_query", "/request/querystring"),
    ("request_size", "/request/size"),
    ("response_headers", "/response/headers"),
    ("response_status", "/response/status"),
    ("response_size", "/response/size"),
    ("latency", "/latency"),
    ("upstream", "/upstream"),
];

/// The full entry's own keys (the others came from `log_format_extra`).
const FULL: &[&str] = &[
    "request",
    "response",
    "server",
    "upstream",
    "service_id",
    "route_id",
    "consumer",
    "client_ip",
    "start_time",
    "latency",
    "upstream_latency",
    "apisix_latency",
];

/// Its own fields, checked, as its sink.
fn own(
    own: &Value,
    _: &crate::logger::Given<'_>,
    v: &mut Validator,
) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    let e = &c.endpoint;
    let (endpoints, timeout, idle) = v.field("endpoint", |v| {
        let endpoints = v.field("uri", |v| {
            crate::callout::Target::parse(&e.uri, c.ssl_verify)
                .map(Endpoints::one)
                .map_err(|err| v.error(err))
                .ok()
        });
        if e.token.is_empty() || e.token.bytes().any(|b| b.is_ascii_control()) {
            v.error_at("token", "must be the collector's token");
        }
        let timeout = whole_field("timeout", e.timeout, 10, (1, 3600), " seconds", v);
        let idle = whole_field(
            "keepalive_timeout",
            e.keepalive_timeout,
            60_000,
            (1000, 86_400_000),
            " ms",
            v,
        );
        (endpoints, timeout, idle)
    });
    let mut headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Authorization".to_owned(), format!("Splunk {}", e.token)),
    ];
    if let Some(ch) = &e.channel {
        headers.push(("X-Splunk-Request-Channel".into(), ch.clone()));
    }
    if e.token.is_empty() || e.token.bytes().any(|b| b.is_ascii_control()) {
        return None;
    }
    let sink = Splunk {
        endpoints: endpoints?,
        headers,
        timeout: Duration::from_secs(timeout?),
        keepalive: KeepAlive {
            pool: 4,
            idle: Duration::from_millis(idle?),
        },
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, None))
}

struct Splunk {
    endpoints: Endpoints,
    headers: Vec<(String, String)>,
    timeout: Duration,
    keepalive: KeepAlive,
}

impl Sink for Splunk {
    fn envelope(&self, e: Logged<'_>) -> Vec<u8> {
        let time = sluice_core::clock::now().as_secs_f64();
        let event = if e.custom {
            Value::Object(e.entry)
        } else {
            let mut whole = Value::Object(e.entry);
            let mut ev = Map::new();
            for (name, pointer) in EVENT {
                if let Some(v) = whole.pointer_mut(pointer) {
                    ev.insert((*name).to_owned(), v.take());
                }
            }
            if let Value::Object(rest) = whole {
                for (k, v) in rest {
                    if !FULL.contains(&k.as_str()) {
                        ev.entry(k).or_insert(v);
                    }
                }
            }
            Value::Object(ev)
        };
        let hec = serde_json::json!({
            "time": time,
            "source": "apache-apisix-splunk-hec-logging",
            "sourcetype": "_json",
            "host": crate::logger::hostname(),
            "event": event,
        });
        serde_json::to_vec(&hec).unwrap_or_default()
    }

    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        Box::pin(async move {
            self.endpoints
                .post(
                    &self.headers,
                    batch.concat().into(),
                    self.timeout,
                    Some(self.keepalive),
                    |s| s == 200,
                )
                .await
                .map_err(Failed::all)
        })
    }
}
