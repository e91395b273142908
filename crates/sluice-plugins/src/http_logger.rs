//! `http-logger`: sends log entries to an HTTP(S) server in batches, as APISIX's
//! `http-logger` (its fields and defaults).
//!
//! `{uri, auth_header, timeout: 3, concat_method: json, ssl_verify: false}` and the loggers'
//! common fields (`logger/mod.rs`). A batch is one `POST` to `uri`: with `concat_method: json`
//! a JSON array of entries (one object when `batch_max_size` is 1), with `new_line` one entry
//! per line; `Authorization: <auth_header>` when set. An answer of 400 or more, no answer
//! within `timeout` seconds or no connection fails the batch (retried as configured). Calls
//! reuse a keep-alive connection per worker (`callout.rs`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::plugin::{LocalFuture, parse_config};

use crate::callout::KeepAlive;
use crate::logger::net::Endpoints;
use crate::logger::{Failed, Kind, Sink};
use crate::util::{Num, whole_field};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    uri: String,
    #[serde(default)]
    auth_header: Option<String>,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default)]
    concat_method: Option<String>,
    #[serde(default)]
    ssl_verify: bool,
}

const KIND: Kind = Kind {
    encrypted: &["auth_header"],
    unmatched_route: Some("no-matched"),
    ..Kind::named("http-logger", 410, "http logger")
};

crate::logger::factory!(KIND, Config, own);

/// Its own fields, checked, as its sink.
fn own(own: &Value, given: &crate::logger::Given<'_>, v: &mut Validator) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    let target = v.field("uri", |v| {
        crate::callout::Target::parse(&c.uri, c.ssl_verify)
            .map(Endpoints::one)
            .map_err(|e| v.error(e))
            .ok()
    });
    let timeout = whole_field("timeout", c.timeout, 3, (1, 3600), " seconds", v);
    let lines = match c.concat_method.as_deref() {
        None | Some("json") => Some(false),
        Some("new_line") => Some(true),
        Some(other) => {
            v.error_at(
                "concat_method",
                format!("must be json or new_line, got \"{other}\""),
            );
            None
        }
    };
    let auth = match &c.auth_header {
        Some(a) if a.bytes().any(|b| b.is_ascii_control()) => {
            v.error_at("auth_header", "must not hold control characters");
            return None;
        }
        a => a.clone(),
    };
    let http = Http {
        target: target?,
        auth,
        timeout: Duration::from_secs(timeout?),
        lines: lines?,
        single: given.batch_max_size == 1,
    };
    Some((Arc::new(http) as Arc<dyn Sink>, None))
}

struct Http {
    target: Endpoints,
    auth: Option<String>,
    timeout: Duration,
    /// `concat_method: new_line`.
    lines: bool,
    /// `batch_max_size: 1`: each batch is one entry, sent as itself.
    single: bool,
}

impl Http {
    fn body(&self, batch: &[Bytes]) -> Bytes {
        if !self.lines {
            return crate::logger::net::json_batch(batch, self.single).into();
        }
        if self.single && batch.len() == 1 {
            return batch[0].clone();
        }
        batch.join(&b'\n').into()
    }
}

impl Sink for Http {
    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        Box::pin(async move {
            let mut headers = vec![(
                "Content-Type".to_owned(),
                if self.lines {
                    "text/plain"
                } else {
                    "application/json"
                }
                .to_owned(),
            )];
            if let Some(a) = &self.auth {
                headers.push(("Authorization".to_owned(), a.clone()));
            }
            let keep = KeepAlive {
                pool: 4,
                idle: Duration::from_secs(60),
            };
            self.target
                .post(&headers, self.body(batch), self.timeout, Some(keep), |s| s < 400)
                .await
                .map_err(Failed::all)
        })
    }
}
