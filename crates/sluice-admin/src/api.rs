//! The admin REST API (hyper). Every call needs the API key in `X-API-KEY`; mutations are
//! POST, PUT, PATCH and DELETE only (no GET changes anything); bodies are limited to 10 MiB.
//!
//! | call | answer |
//! |---|---|
//! | `GET /admin/<kind>` | `{"total": n, "list": [...]}` |
//! | `GET /admin/<kind>/<id>` | `{"value": {...}}` or 404 |
//! | `PUT /admin/<kind>/<id>` | 201 created or 200 replaced, `{"value": {...}}` |
//! | `POST /admin/<kind>` | 201 with a generated id (consumers: their `username`) |
//! | `PATCH /admin/<kind>/<id>` | JSON merge patch, 200 `{"value": {...}}` |
//! | `DELETE /admin/<kind>/<id>` | 200 `{"deleted": id}`; 409 when something refers to it |
//! | `POST /admin/validate` | a whole configuration (YAML or JSON) checked, not applied |
//! | `POST /admin/reload` | re-reads the configuration file (as SIGHUP does) |
//! | `GET /admin/status` | configuration version, reload counts, last error |
//! | `GET /admin/metrics` | the same in Prometheus text format |
//! | `GET /admin/openapi.json` | this API's OpenAPI 3 document |
//!
//! `<kind>` is `routes`, `upstreams`, `services`, `consumers`, `global_rules`, `ssls` or
//! `stream_routes`. A refused write
//! is 400 with `{"error_msg": ..., "errors": [{"path", "message"}]}`, paths relative to the
//! resource written.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::control::{AdminError, Control, Kind, parse_doc};
use crate::serve::same_key;
use crate::serve::{invalid, raw, reply, serve_http1};

/// Largest request body accepted.
const MAX_BODY: usize = 10 << 20;

/// The admin API's shared state.
#[derive(Debug)]
pub struct Api {
    control: Arc<Control>,
    key: String,
    openapi: String,
    /// What `PUT /apisix/admin/configs` last wrote.
    standalone: parking_lot::Mutex<crate::apisix::Standalone>,
}

impl Api {
    /// An API over `control`, answering only callers that present `key`.
    pub fn new(control: Arc<Control>, key: String) -> Api {
        Api {
            control,
            key,
            openapi: crate::openapi::document().to_string(),
            standalone: Default::default(),
        }
    }

    /// Serves connections from `listener` until `stop` turns true.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, stop: watch::Receiver<bool>) {
        serve_http1(listener, stop, "admin", move |req, peer| {
            let api = self.clone();
            async move { api.handle(req, peer).await }
        })
        .await;
    }

    pub(crate) async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        peer: std::net::SocketAddr,
    ) -> Response<Full<Bytes>> {
        let apisix = req.uri().path().starts_with("/apisix/admin");
        let mut resp = self.answer(req, peer).await;
        // Every answer of APISIX's API says it is APISIX (ADC reads the version from it),
        // refusals included.
        if apisix {
            crate::apisix::claim_server(&mut resp);
        }
        resp
    }

    async fn answer(
        self: Arc<Self>,
        req: Request<Incoming>,
        peer: std::net::SocketAddr,
    ) -> Response<Full<Bytes>> {
        if !self.authorized(&req) {
            warn!(%peer, method = %req.method(), path = %req.uri().path(), "admin request without a valid X-API-KEY");
            return reply(
                StatusCode::UNAUTHORIZED,
                json!({"error_msg": "missing or invalid X-API-KEY"}),
            );
        }
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or_default().to_owned();
        let headers = req.headers().clone();
        let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return reply(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    json!({"error_msg": "request body larger than 10 MiB"}),
                );
            }
        };
        // Changes compile configurations and, in cluster mode, wait on etcd: off the runtime.
        let api = self.clone();
        let (m, p) = (method.clone(), path.clone());
        let resp =
            match tokio::task::spawn_blocking(move || api.route(&m, &p, &query, &headers, &body))
                .await
            {
                Ok(r) => r,
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"error_msg": format!("the admin call failed: {e}")}),
                ),
            };
        if method != Method::GET {
            info!(%peer, %method, %path, status = resp.status().as_u16(), "admin change");
        }
        resp
    }

    fn authorized(&self, req: &Request<Incoming>) -> bool {
        let given = req
            .headers()
            .get("x-api-key")
            .map(|v| v.as_bytes().to_vec())
            .or_else(|| {
                // APISIX's tools may pass the key in the query (`?api_key=`): on its API only.
                req.uri()
                    .path()
                    .starts_with("/apisix/admin")
                    .then(|| {
                        crate::apisix::url_args(req.uri().query().unwrap_or_default())
                            .into_iter()
                            .find(|(k, _)| k == "api_key")
                            .map(|(_, v)| v.into_bytes())
                    })
                    .flatten()
            })
            .unwrap_or_default();
        same_key(&given, self.key.as_bytes())
    }

    fn route(
        &self,
        method: &Method,
        path: &str,
        query: &str,
        headers: &hyper::HeaderMap,
        body: &[u8],
    ) -> Response<Full<Bytes>> {
        // Each segment is percent-decoded on its own, so an id may hold any character the id
        // rule allows, written as the client's URL library writes it (`caf%C3%A9`).
        let mut decoded = Vec::new();
        for seg in path.trim_end_matches('/').split('/').skip(1) {
            match percent_encoding::percent_decode_str(seg).decode_utf8() {
                Ok(s) => decoded.push(s.into_owned()),
                Err(_) => {
                    return reply(
                        StatusCode::BAD_REQUEST,
                        json!({"error_msg": format!("the path segment \"{seg}\" is not UTF-8 once percent-decoded")}),
                    );
                }
            }
        }
        let parts: Vec<&str> = decoded.iter().map(String::as_str).collect();
        match (method, parts.as_slice()) {
            (&Method::GET, ["admin"]) => reply(StatusCode::OK, index()),
            (&Method::GET, ["admin", "status"]) => {
                reply(StatusCode::OK, json!(self.control.stats()))
            }
            (&Method::GET, ["admin", "metrics"]) => metrics(&self.control, ""),
            (&Method::GET, ["admin", "openapi.json"]) => raw(
                StatusCode::OK,
                "application/json",
                self.openapi.clone().into_bytes(),
            ),
            (&Method::POST, ["admin", "validate"]) => self.validate(body),
            (&Method::POST, ["admin", "reload"]) => {
                match self.control.reload_now("POST /admin/reload") {
                    Ok(r) => reply(
                        StatusCode::OK,
                        json!({
                            "changed": matches!(r, crate::control::Reloaded::Applied(_)),
                            "waiting": r == crate::control::Reloaded::Waiting,
                            "version": self.control.stats().version,
                        }),
                    ),
                    Err(e) => invalid(&e),
                }
            }
            (&Method::GET, ["admin", "upstreams", id, "health"]) => {
                match self.control.upstream_health(id) {
                    Some(v) => reply(StatusCode::OK, v),
                    None => reply(
                        StatusCode::NOT_FOUND,
                        json!({"error_msg": format!("upstream \"{id}\" is not in service")}),
                    ),
                }
            }
            (_, ["apisix", "admin", rest @ ..]) => crate::apisix::handle(
                &self.control,
                &self.standalone,
                method,
                rest,
                query,
                headers,
                body,
            ),
            // A secret manager's id is `<manager>/<id>`: two segments of the path.
            (_, ["admin", "secrets", manager, id, rest @ ..]) => {
                let id = format!("{manager}/{id}");
                let mut path = vec![id.as_str()];
                path.extend_from_slice(rest);
                self.resource(method, Kind::Secrets, &path, body)
            }
            (_, ["admin", kind, rest @ ..]) => match Kind::from_name(kind) {
                Some(k) => self.resource(method, k, rest, body),
                None => not_found(path),
            },
            _ => not_found(path),
        }
    }

    fn resource(
        &self,
        method: &Method,
        kind: Kind,
        rest: &[&str],
        body: &[u8],
    ) -> Response<Full<Bytes>> {
        let json_body = || -> Result<Value, AdminError> {
            sluice_config::parse_json(body).map_err(|e| match e.iter().next() {
                Some(first) if !first.path.is_empty() => AdminError::Invalid(e),
                _ => AdminError::BadRequest(format!("the body is {e}")),
            })
        };
        let result = match (method, rest) {
            (&Method::GET, []) => {
                let list = self.control.list(kind);
                return reply(StatusCode::OK, json!({"total": list.len(), "list": list}));
            }
            (&Method::GET, [id]) => {
                return match self.control.get(kind, id) {
                    Some(v) => reply(StatusCode::OK, json!({"value": v})),
                    None => reply(
                        StatusCode::NOT_FOUND,
                        json!({"error_msg": format!("{} \"{id}\" not found", kind.name())}),
                    ),
                };
            }
            (&Method::PUT, [id]) => json_body().and_then(|v| {
                self.control.put(kind, id, v).map(|(v, created)| {
                    (
                        if created {
                            StatusCode::CREATED
                        } else {
                            StatusCode::OK
                        },
                        json!({"value": v}),
                    )
                })
            }),
            (&Method::POST, []) => json_body().and_then(|v| {
                self.control
                    .create(kind, v)
                    .map(|v| (StatusCode::CREATED, json!({"value": v})))
            }),
            (&Method::PATCH, [id]) => json_body().and_then(|v| {
                self.control
                    .patch(kind, id, v)
                    .map(|v| (StatusCode::OK, json!({"value": v})))
            }),
            (&Method::DELETE, [id]) => self
                .control
                .delete(kind, id)
                .map(|()| (StatusCode::OK, json!({"deleted": id}))),
            (_, [] | [_]) => {
                let allow = if rest.is_empty() {
                    "GET, POST"
                } else {
                    "GET, PUT, PATCH, DELETE"
                };
                let mut r = reply(
                    StatusCode::METHOD_NOT_ALLOWED,
                    json!({"error_msg": format!("{method} is not allowed here: use {allow}")}),
                );
                r.headers_mut().insert(
                    hyper::header::ALLOW,
                    hyper::header::HeaderValue::from_static(allow),
                );
                return r;
            }
            _ => return not_found(&format!("/admin/{}/{}", kind.name(), rest.join("/"))),
        };
        match result {
            Ok((status, v)) => reply(status, v),
            Err(AdminError::Invalid(e)) => invalid(&e),
            Err(e @ AdminError::NotFound(_)) => {
                reply(StatusCode::NOT_FOUND, json!({"error_msg": format!("{e}")}))
            }
            Err(e @ AdminError::Conflict(_)) => {
                reply(StatusCode::CONFLICT, json!({"error_msg": e.to_string()}))
            }
            Err(e @ AdminError::BadRequest(_)) => {
                reply(StatusCode::BAD_REQUEST, json!({"error_msg": e.to_string()}))
            }
            Err(e @ AdminError::Store(_)) => {
                warn!(error = %e, "admin change not saved; nothing changed");
                reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"error_msg": e.to_string()}),
                )
            }
            Err(e @ AdminError::Unavailable(_)) => {
                warn!(error = %e, "admin change not saved; nothing changed");
                reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({"error_msg": e.to_string()}),
                )
            }
        }
    }

    fn validate(&self, body: &[u8]) -> Response<Full<Bytes>> {
        let text = String::from_utf8_lossy(body);
        match parse_doc(&text).and_then(|doc| self.control.check(doc)) {
            Ok(cfg) => reply(
                StatusCode::OK,
                json!({
                    "ok": true,
                    "routes": cfg.routes.len(),
                    "upstreams": cfg.upstreams.len(),
                    "services": cfg.services.len(),
                    "consumers": cfg.consumers.len(),
                    "global_rules": cfg.global_rules.len(),
                    "ssls": cfg.ssls.len(),
                    "stream_routes": cfg.stream_routes.len(),
                }),
            ),
            Err(e) => invalid(&self.control.every_error(&text, e)),
        }
    }
}

/// `GET /admin/`: what the API serves.
fn index() -> Value {
    let resources: Vec<Value> = Kind::ALL
        .iter()
        .map(|k| {
            json!({
                "name": k.name(),
                "url": format!("/admin/{}", k.name()),
                "id": k.id_field(),
            })
        })
        .collect();
    json!({
        "resources": resources,
        "endpoints": {
            "GET /admin/{resource}": "list",
            "GET /admin/{resource}/{id}": "read one",
            "PUT /admin/{resource}/{id}": "create or replace",
            "POST /admin/{resource}": "create with a generated id",
            "PATCH /admin/{resource}/{id}": "merge (RFC 7396)",
            "DELETE /admin/{resource}/{id}": "delete",
            "POST /admin/validate": "check a whole configuration without applying it",
            "POST /admin/reload": "re-read the configuration file and the certificate files it names",
            "GET /admin/status": "version, changes applied, reloads refused, admin writes refused",
            "GET /admin/metrics": "Prometheus metrics of the control plane",
            "GET /admin/upstreams/{id}/health": "the health of an upstream's nodes, as the data plane sees them",
        },
        "openapi": "/admin/openapi.json",
        "auth": "X-API-KEY header",
    })
}

fn not_found(path: &str) -> Response<Full<Bytes>> {
    reply(
        StatusCode::NOT_FOUND,
        json!({"error_msg": format!("no such admin endpoint: {path}")}),
    )
}

fn metrics(control: &Control, accept: &str) -> Response<Full<Bytes>> {
    match crate::serve::exposition(control, accept) {
        Some((text, format)) => raw(StatusCode::OK, format.content_type(), text.into_bytes()),
        None => raw(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain; charset=utf-8",
            crate::serve::METRICS_NOT_YET.as_bytes().to_vec(),
        ),
    }
}
