//! `opa`: asks an Open Policy Agent server whether a request may go on, as APISIX's `opa`.
//!
//! `{host, policy, ssl_verify: true, timeout: 3000, keepalive: true, keepalive_timeout: 60000,
//! keepalive_pool: 5, send_headers_upstream, with_route: false, with_service: false,
//! with_consumer: false}`.
//!
//! Each request is a `POST {host}/v1/data/{policy}` with APISIX's input document:
//! `{"input": {"type": "http", "request": {scheme, method, host, port, path, headers, query},
//! "var": {server_addr, server_port, remote_addr, remote_port, timestamp}}}`, plus the route,
//! the service (their configuration without the upstream) and the consumer when asked. The
//! answer's `result.allow` decides: when it is not true, the client gets `result.status_code`
//! (403 by default), `result.headers` and `result.reason` (a string as it is, anything else as
//! JSON); when it is, `send_headers_upstream` are set on the request from `result.headers`
//! (removed when the answer lacks them). No answer within `timeout`, or no connection: 403, as
//! APISIX (a policy that cannot be asked denies). An answer that is not JSON or has no
//! `result` object: 503. The call waits on the worker's runtime over a keep-alive pool per
//! worker (`callout.rs`), as forward-auth's.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, LocalFuture, Phases, PluginFactory, parse_config};
use sluice_core::vars::Var;
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::callout::{KeepAlive, Target};
use crate::util::{Num, check_header_name, headers_object};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    host: String,
    policy: String,
    #[serde(default = "yes")]
    ssl_verify: bool,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default = "yes")]
    keepalive: bool,
    #[serde(default)]
    keepalive_timeout: Option<Num>,
    #[serde(default)]
    keepalive_pool: Option<Num>,
    #[serde(default)]
    send_headers_upstream: Option<Vec<String>>,
    #[serde(default)]
    with_route: bool,
    #[serde(default)]
    with_service: bool,
    #[serde(default)]
    with_consumer: bool,
}

fn yes() -> bool {
    true
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("opa", 2001, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        let policy_ok = !c.policy.is_empty()
            && c.policy.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'.')
            });
        if !policy_ok {
            v.error_at(
                "policy",
                "must be a package path such as \"example\" or \"httpapi/authz/allow\" (letters, digits, _ - . /)",
            );
            ok = false;
        }
        let target = v.field("host", |v| {
            let base = c.host.trim_end_matches('/');
            Target::parse(&format!("{base}/v1/data/{}", c.policy), c.ssl_verify)
                .map_err(|e| v.error(e))
                .ok()
        });
        let call = crate::callout::settings(c.timeout, c.keepalive, c.keepalive_timeout, c.keepalive_pool, v);
        let given_empty = c.send_headers_upstream.as_ref().is_some_and(Vec::is_empty);
        let upstream_headers = c.send_headers_upstream.unwrap_or_default();
        v.field("send_headers_upstream", |v| {
            if given_empty {
                v.error("must list at least one header");
                ok = false;
            }
            for (i, h) in upstream_headers.iter().enumerate() {
                ok &= v.index(i, |v| check_header_name(h, v));
            }
        });
        let (target, (timeout, keepalive)) = (target?, call?);
        ok.then(|| {
            Arc::new(Opa {
                target,
                timeout,
                keepalive,
                upstream_headers,
                with_route: c.with_route,
                with_service: c.with_service,
                with_consumer: c.with_consumer,
            }) as Arc<dyn Plugin>
        })
    }
}

struct Opa {
    target: Target,
    timeout: Duration,
    keepalive: Option<KeepAlive>,
    upstream_headers: Vec<String>,
    with_route: bool,
    with_service: bool,
    with_consumer: bool,
}

impl Opa {
    /// APISIX's input document (`apisix/plugins/opa/helper.lua`).
    fn input(&self, req: &RequestHead, cx: &Ctx<'_>) -> Value {
        let text = |v: Var| {
            v.value(req, cx)
                .map(|x| crate::util::text(&x))
                .unwrap_or_default()
        };
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut input = json!({
            "type": "http",
            "request": {
                "scheme": text(Var::Scheme),
                "method": crate::util::text(req.method_bytes()),
                "host": text(Var::Host),
                "port": cx.server().port(),
                "path": text(Var::Uri),
                "headers": headers_object(req),
                "query": crate::util::args_object(req.query().unwrap_or_default()),
            },
            "var": {
                "server_addr": text(Var::ServerAddr),
                "server_port": text(Var::ServerPort),
                "remote_addr": text(Var::RemoteAddr),
                "remote_port": text(Var::RemotePort),
                "timestamp": timestamp,
            },
        });
        let docs = cx.documents();
        if self.with_route
            && let Some(d) = docs
        {
            input["route"] = d.route.clone();
        }
        if self.with_service
            && let Some(s) = docs.and_then(|d| d.service.as_deref())
        {
            input["service"] = s.clone();
        }
        if self.with_consumer
            && let Some(c) = cx.consumer()
        {
            let mut doc = json!({"username": &*c.username, "consumer_name": &*c.username});
            if let Some(g) = &c.group {
                doc["group_id"] = Value::from(&**g);
            }
            if let Some(id) = &c.custom_id {
                doc["custom_id"] = Value::from(&**id);
            }
            if !c.labels.is_empty() {
                doc["labels"] = c
                    .labels
                    .iter()
                    .map(|l| (l.key.to_string(), Value::from(&*l.raw)))
                    .collect::<Map<String, Value>>()
                    .into();
            }
            input["consumer"] = doc;
        }
        json!({ "input": input })
    }

    /// The client's answer to a denial: `status_code`, `headers`, `reason`.
    fn denial(result: &Map<String, Value>) -> Response {
        let status = result
            .get("status_code")
            .and_then(Value::as_u64)
            .filter(|s| (200..=599).contains(s))
            .unwrap_or(403) as u16;
        let mut r = match result.get("reason") {
            None | Some(Value::Null) => sluice_core::http::write::page(status),
            Some(Value::String(s)) => Response::new(status).body(Bytes::from(s.clone())),
            Some(other) => Response::new(status).body(Bytes::from(other.to_string())),
        };
        if let Some(Value::Object(headers)) = result.get("headers") {
            for (name, value) in headers {
                // Never framing or hop-by-hop fields: a policy that echoes the request's
                // headers must not give the answer a second Content-Length.
                if !crate::util::settable_header(name) {
                    continue;
                }
                for value in values(value) {
                    if http::HeaderValue::from_str(&value).is_ok() {
                        r = r.header(name, value.as_bytes());
                    }
                }
            }
        }
        r
    }
}

/// A header's values in an answer: a string, a number, or an array of them.
fn values(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Number(n) => vec![n.to_string()],
        Value::Bool(b) => vec![b.to_string()],
        Value::Array(a) => a.iter().flat_map(values).collect(),
        _ => Vec::new(),
    }
}

impl Plugin for Opa {
    fn phases(&self) -> Phases {
        Phases::ACCESS_ASYNC
    }

    fn reads_documents(&self) -> bool {
        self.with_route || self.with_service
    }

    fn access_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(async move {
            let body = serde_json::to_vec(&self.input(req, cx)).unwrap_or_default();
            let call = http::Request::builder()
                .method("POST")
                .uri(self.target.path.as_str())
                .header("host", self.target.authority.as_str())
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)));
            let Ok(call) = call else {
                return Flow::Respond(sluice_core::http::write::page(403));
            };
            let answered = tokio::time::timeout(
                self.timeout,
                crate::callout::call(&self.target, call, self.keepalive),
            )
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)));
            let body = match answered {
                Ok((_, body)) => body,
                Err(e) => {
                    tracing::error!(route = cx.route_id(), error = %e, "opa: failed to process the decision");
                    return Flow::Respond(sluice_core::http::write::page(403));
                }
            };
            let result = match serde_json::from_slice::<Value>(&body) {
                Ok(Value::Object(mut answer)) => match answer.remove("result") {
                    Some(Value::Object(r)) => r,
                    _ => {
                        tracing::error!(route = cx.route_id(), "opa: the decision has no `result` object");
                        return Flow::Respond(sluice_core::http::write::page(503));
                    }
                },
                _ => {
                    tracing::error!(route = cx.route_id(), "opa: the decision is not a JSON object");
                    return Flow::Respond(sluice_core::http::write::page(503));
                }
            };
            if result.get("allow") != Some(&Value::Bool(true)) {
                return Flow::Respond(Opa::denial(&result));
            }
            let headers = result.get("headers").and_then(Value::as_object);
            for name in &self.upstream_headers {
                // Header names are case-insensitive: `X-User-ID` finds `x-user-id`.
                let given = headers
                    .and_then(|h| {
                        h.iter()
                            .find(|(n, _)| n.eq_ignore_ascii_case(name))
                            .map(|(_, v)| v)
                    })
                    .map(values);
                req.remove_header(name);
                for value in given.unwrap_or_default() {
                    if http::HeaderValue::from_str(&value).is_ok() {
                        req.add_header(name, value.as_bytes());
                    }
                }
            }
            Flow::Continue
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn queries_are_read_as_apisix_reads_them() {
        let q = crate::util::args_object(b"a=1&b&a=x%20y&c=&d=p+q");
        assert_eq!(
            q,
            serde_json::json!({"a": ["1", "x y"], "b": true, "c": "", "d": "p q"})
        );
    }
}
