//! `elasticsearch-logger`: indexes log entries in Elasticsearch (or OpenSearch) through its
//! bulk API, as APISIX's `elasticsearch-logger`.
//!
//! `{endpoint_addrs (or the older endpoint_addr), field: {index}, auth: {username, password},
//! headers, timeout: 10, ssl_verify: true}` and the loggers' common fields (`logger/mod.rs`).
//! Each entry is an action line `{"index":{"_index":"<index>"}}` and the entry (NDJSON);
//! `field.index` may hold variables (`logs-$route_id`). A batch is one `POST <addr>/_bulk`;
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
            template(&c.field.index, &|_| Err("uri_param_* is not read here".into()))
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
        headers.push((
            "Authorization".into(),
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)),
        ));
    }
    headers.push(("Content-Type".into(), "application/x-ndjson".into()));
    headers.push(("Accept".into(), "application/vnd.elasticsearch+json".into()));
    let sink = Elastic {
        endpoints: endpoints?,
        index: index?,
        headers,
        timeout: Duration::from_secs(timeout?),
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, None))
}

struct Elastic {
    endpoints: Endpoints,
    index: Vec<Piece>,
    headers: Vec<(String, String)>,
    timeout: Duration,
}

impl Sink for Elastic {
    /// The bulk API's action line and the entry.
    fn envelope(&self, e: Logged<'_>) -> Vec<u8> {
        let index = crate::util::text(&render(&self.index, e.req, e.env));
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
