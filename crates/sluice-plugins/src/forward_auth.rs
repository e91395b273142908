//! `forward-auth`: asks an authorization service of the operator's whether a request may go on,
//! as APISIX's `forward-auth` (Traefik's and NGINX's `auth_request` idea).
//!
//! `{uri, request_method: GET, request_headers: [], extra_headers: {}, upstream_headers: [],
//! client_headers: [], timeout: 3000, keepalive: true, keepalive_timeout: 60000,
//! keepalive_pool: 5, allow_degradation: false, status_on_error: 403, ssl_verify: true,
//! max_req_body_size: 67108864}`.
//!
//! The service gets `X-Forwarded-Proto`, `-Method`, `-Host`, `-Uri` (the path and query as
//! sent) and `-For` (the client's address), the `extra_headers` (values with variables), the
//! client's `request_headers`, and with `POST` the client's body. An answer of 300 or more is
//! the client's answer (its status and body, with its `client_headers`); a 2xx lets the
//! request go on, with the answer's `upstream_headers` set on it (removed when the answer lacks
//! them). When the service cannot be reached or does not answer within `timeout`, the request
//! gets `status_on_error`, or goes on with `allow_degradation`. The call waits on the worker's
//! runtime (other requests go on) over a keep-alive pool per worker (`callout.rs`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, LocalFuture, Phases, PluginFactory, parse_config};
use sluice_core::vars::Var;
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::callout::{KeepAlive, Target};
use crate::proxy_rewrite::{Piece, render, template};
use crate::util::{Num, check_header_name, check_status};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    uri: String,
    #[serde(default = "yes")]
    ssl_verify: bool,
    #[serde(default = "get")]
    request_method: String,
    #[serde(default)]
    max_req_body_size: Option<Num>,
    #[serde(default)]
    request_headers: Vec<String>,
    #[serde(default)]
    extra_headers: serde_json::Map<String, Value>,
    #[serde(default)]
    upstream_headers: Vec<String>,
    #[serde(default)]
    client_headers: Vec<String>,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default = "yes")]
    keepalive: bool,
    #[serde(default)]
    keepalive_timeout: Option<Num>,
    #[serde(default)]
    keepalive_pool: Option<Num>,
    #[serde(default)]
    allow_degradation: bool,
    #[serde(default = "forbidden")]
    status_on_error: Num,
}

fn yes() -> bool {
    true
}

fn get() -> String {
    "GET".into()
}

fn forbidden() -> Num {
    Num::Whole(403)
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("forward-auth", 2002, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        let target = v.field("uri", |v| {
            Target::parse(&c.uri, c.ssl_verify).map_err(|e| v.error(e)).ok()
        });
        let post = match c.request_method.as_str() {
            "GET" => false,
            "POST" => true,
            other => {
                v.error_at("request_method", format!("must be GET or POST, got \"{other}\""));
                return None;
            }
        };
        let call = crate::callout::settings(c.timeout, c.keepalive, c.keepalive_timeout, c.keepalive_pool, v);
        let body_max = crate::util::body_size_field("max_req_body_size", c.max_req_body_size, v);
        let status_on_error = v.field("status_on_error", |v| check_status(c.status_on_error, 200, v));
        for (field, list) in [
            ("request_headers", &c.request_headers),
            ("upstream_headers", &c.upstream_headers),
            ("client_headers", &c.client_headers),
        ] {
            v.field(field, |v| {
                for (i, h) in list.iter().enumerate() {
                    ok &= v.index(i, |v| check_header_name(h, v));
                }
            });
        }
        let mut extra = Vec::with_capacity(c.extra_headers.len());
        v.field("extra_headers", |v| {
            for (name, value) in &c.extra_headers {
                v.field(name, |v| {
                    let text = match value {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        _ => {
                            v.error("must be a string");
                            ok = false;
                            return;
                        }
                    };
                    ok &= check_header_name(name, v);
                    match template(&text, &|n| cx.uri_param(n)) {
                        Ok(t) => extra.push((name.clone(), t)),
                        Err(e) => {
                            v.error(e);
                            ok = false;
                        }
                    }
                });
            }
        });
        let (target, (timeout, keepalive), body_max, status_on_error) =
            (target?, call?, body_max?, status_on_error?);
        ok.then(|| {
            Arc::new(ForwardAuth {
                target,
                post,
                body_max,
                request_headers: c.request_headers,
                extra,
                upstream_headers: c.upstream_headers,
                client_headers: c.client_headers,
                timeout,
                keepalive,
                allow_degradation: c.allow_degradation,
                on_error: sluice_core::http::write::page(status_on_error),
            }) as Arc<dyn Plugin>
        })
    }
}

struct ForwardAuth {
    target: Target,
    post: bool,
    body_max: u64,
    request_headers: Vec<String>,
    extra: Vec<(String, Vec<Piece>)>,
    upstream_headers: Vec<String>,
    client_headers: Vec<String>,
    timeout: Duration,
    keepalive: Option<KeepAlive>,
    allow_degradation: bool,
    on_error: Response,
}

impl ForwardAuth {
    /// The request to the service. Err: the client's body is over the limit (413).
    fn request(&self, req: &RequestHead, cx: &Ctx<'_>) -> Result<http::Request<Full<Bytes>>, Flow> {
        // By name, a later entry replacing an earlier one (APISIX's Lua table): the forwarded
        // fields, then `extra_headers`, then the client's `request_headers` where no entry has
        // the name yet; the service's own `Host` unless one of them gave one.
        let mut set: Vec<(String, Vec<u8>)> = Vec::with_capacity(8 + self.extra.len());
        fn put(set: &mut Vec<(String, Vec<u8>)>, name: &str, value: Vec<u8>) {
            match set.iter_mut().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
                Some(slot) => slot.1 = value,
                None => set.push((name.to_owned(), value)),
            }
        }
        let var = |v: Var| v.value(req, cx).map(|x| x.into_owned()).unwrap_or_default();
        put(&mut set, "X-Forwarded-Proto", var(Var::Scheme));
        put(&mut set, "X-Forwarded-Method", req.method_bytes().to_vec());
        put(&mut set, "X-Forwarded-Host", var(Var::Host));
        put(&mut set, "X-Forwarded-Uri", req.original_target().to_vec());
        put(&mut set, "X-Forwarded-For", var(Var::RemoteAddr));
        if self.post
            && let Some(e) = req.header("content-encoding")
        {
            put(&mut set, "Content-Encoding", e.to_vec());
        }
        for (name, t) in &self.extra {
            put(&mut set, name, render(t, req, cx));
        }
        for name in &self.request_headers {
            if !set.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
                && let Some(v) = req.header(name)
            {
                set.push((name.clone(), v.to_vec()));
            }
        }
        if !set.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            set.push(("Host".into(), self.target.authority.as_bytes().to_vec()));
        }
        let mut b = http::Request::builder()
            .method(if self.post { "POST" } else { "GET" })
            .uri(self.target.path.as_str());
        for (n, v) in &set {
            b = b.header(n.as_str(), v.as_slice());
        }
        let body = if self.post {
            match cx.body().and_then(|b| b.raw()) {
                Some(raw) if raw.len() as u64 <= self.body_max => Bytes::copy_from_slice(raw),
                _ => return Err(Flow::Respond(Response::error(413, "request body too large"))),
            }
        } else {
            Bytes::new()
        };
        b.body(Full::new(body))
            .map_err(|_| Flow::Respond(Response::error(400, "400 Bad Request")))
    }
}

impl Plugin for ForwardAuth {
    fn phases(&self) -> Phases {
        Phases::ACCESS_ASYNC
    }

    fn needs_body(&self) -> bool {
        self.post
    }

    fn access_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(async move {
            let call = match self.request(req, cx) {
                Ok(c) => c,
                Err(flow) => return flow,
            };
            let answered = tokio::time::timeout(
                self.timeout,
                crate::callout::call(&self.target, call, self.keepalive),
            )
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)));
            let (head, body) = match answered {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(route = cx.route_id(), error = %e, "forward-auth: the authorization service failed");
                    return if self.allow_degradation {
                        Flow::Continue
                    } else {
                        Flow::Respond(self.on_error.clone())
                    };
                }
            };
            if head.status.as_u16() >= 300 {
                let mut r = Response::new(head.status.as_u16()).body(body);
                for name in &self.client_headers {
                    for v in head.headers.get_all(name.as_str()) {
                        r = r.header(name, v.as_bytes());
                    }
                }
                return Flow::Respond(r);
            }
            for name in &self.upstream_headers {
                match head.headers.get(name.as_str()) {
                    Some(v) => req.set_header(name, v.as_bytes()),
                    None => req.remove_header(name),
                }
            }
            Flow::Continue
        })
    }
}
