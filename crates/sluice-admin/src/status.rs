//! The status listener: what monitoring asks a gateway, on its own port (APISIX serves its
//! metrics on 127.0.0.1:9091), apart from the proxy and the admin API.
//!
//! | call | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text (OpenMetrics when `Accept` asks for it) |
//! | `GET /healthz` | 200 while the process runs |
//! | `GET /readyz` | 200 once the configuration is loaded and the listeners are open; 503 while starting and while draining after SIGTERM. In cluster mode, while etcd cannot be reached: 200 `ready, stale: ...`, or 503 `stale: ...` once `etcd.stale_unready_after` has passed |
//! | `GET /dashboard/` | the dashboard page, from the binary |
//! | `GET /admin/routes`, `GET /admin/status` | the admin API's answers the dashboard shows (they still need the admin key) |
//!
//! On a loopback address and without `key` or `allow`, anyone on the machine may ask. Otherwise
//! `/metrics` and `/admin` need the key (`Authorization: Bearer <key>` or `X-API-KEY`) or a
//! client address in `allow`; `/healthz`, `/readyz` and the dashboard's static page need
//! neither (the page asks for the key when /metrics does), unless `allow` is set, which then
//! applies to them too.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use sluice_config::StatusConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::Api;
use crate::control::Control;

/// Where the node is in its life, for `/readyz`.
#[derive(Debug, Default)]
pub struct Readiness(AtomicU8);

const STARTING: u8 = 0;
const READY: u8 = 1;
const DRAINING: u8 = 2;

impl Readiness {
    /// The configuration is loaded and the listeners are open.
    pub fn ready(&self) {
        self.0.store(READY, Ordering::Relaxed);
    }

    /// SIGTERM: no new connections; requests in flight finish.
    pub fn draining(&self) {
        self.0.store(DRAINING, Ordering::Relaxed);
    }

    fn state(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The status listener's state.
#[derive(Debug)]
pub struct Status {
    /// Set once the node has started (`/metrics` answers 503 until then).
    plane: OnceLock<(Arc<Control>, Option<Arc<Api>>)>,
    key: Option<String>,
    allow: Vec<ipnet::IpNet>,
    readiness: Arc<Readiness>,
}

pub use crate::serve::{exposition, freeze_metrics, render_metrics, thaw_metrics};

impl Status {
    /// A status listener, started before the node so that `/readyz` says "starting".
    pub fn new(cfg: &StatusConfig, readiness: Arc<Readiness>) -> Status {
        Status {
            plane: OnceLock::new(),
            key: cfg.key.clone(),
            allow: cfg
                .allow
                .iter()
                .filter_map(|a| {
                    a.parse::<ipnet::IpNet>()
                        .ok()
                        .or_else(|| a.parse::<IpAddr>().ok().map(ipnet::IpNet::from))
                })
                .collect(),
            readiness,
        }
    }

    /// The node started: `control` answers metrics, `api` the dashboard's admin calls.
    pub fn attach(&self, control: Arc<Control>, api: Option<Arc<Api>>) {
        let _ = self.plane.set((control, api));
    }

    /// Serves connections from `listener` until `stop` turns true.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, stop: watch::Receiver<bool>) {
        crate::serve::serve_http1(listener, stop, "status", move |req, peer| {
            let status = self.clone();
            async move { status.handle(req, peer).await }
        })
        .await;
    }

    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_owned();
        // The probes say only "up" and "ready"; the dashboard's page is the same static HTML
        // for everyone (what it shows comes from /metrics and /admin, which do ask).
        let probe = matches!(
            path.as_str(),
            "/healthz" | "/readyz" | "/" | "/dashboard" | "/dashboard/"
        );
        if let Some(refused) = self.check(&req, peer.ip(), probe) {
            return refused;
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "the status listener answers GET only\n",
            );
        }
        match path.as_str() {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" => match self.readiness.state() {
                STARTING => text(StatusCode::SERVICE_UNAVAILABLE, "starting\n"),
                READY => match self.plane.get().and_then(|(c, _)| c.stale()) {
                    None => text(StatusCode::OK, "ready\n"),
                    // etcd cannot be reached: the node serves what it has, and says so.
                    Some((d, unready)) => {
                        let (code, what) = if unready {
                            (StatusCode::SERVICE_UNAVAILABLE, "stale")
                        } else {
                            (StatusCode::OK, "ready, stale")
                        };
                        text(
                            code,
                            format!(
                                "{what}: etcd unreachable for {} s; serving the last configuration received\n",
                                d.as_secs()
                            ),
                        )
                    }
                },
                _ => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n"),
            },
            "/metrics" => {
                let accept = req
                    .headers()
                    .get(hyper::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let Some((control, _)) = self.plane.get() else {
                    return text(StatusCode::SERVICE_UNAVAILABLE, "starting\n");
                };
                let control = control.clone();
                // Rendering sums every worker's shards: off the listener's thread.
                match tokio::task::spawn_blocking(move || exposition(&control, &accept)).await {
                    Ok(Some((body, format))) => Response::builder()
                        .header(hyper::header::CONTENT_TYPE, format.content_type())
                        .body(Full::new(Bytes::from(body)))
                        .unwrap_or_default(),
                    Ok(None) => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        crate::serve::METRICS_NOT_YET,
                    ),
                    Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "metrics failed\n"),
                }
            }
            "/" | "/dashboard" => Response::builder()
                .status(StatusCode::FOUND)
                .header(hyper::header::LOCATION, "/dashboard/")
                .body(Full::new(Bytes::new()))
                .unwrap_or_default(),
            "/dashboard/" => Response::builder()
                .header(hyper::header::CONTENT_TYPE, "text/html; charset=utf-8")
                .header(hyper::header::CACHE_CONTROL, "no-store")
                .header(
                    "content-security-policy",
                    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'",
                )
                .body(Full::new(Bytes::from_static(DASHBOARD.as_bytes())))
                .unwrap_or_default(),
            // Only the reads the dashboard makes: the admin API's other reads (certificates,
            // consumers' credentials) stay on its own listener.
            "/admin/routes" | "/admin/status" => match self.plane.get() {
                Some((_, Some(api))) => api.clone().handle(req, peer).await,
                None => text(StatusCode::SERVICE_UNAVAILABLE, "starting\n"),
                Some((_, None)) => text(
                    StatusCode::NOT_FOUND,
                    "the admin API is off (admin.enabled: false)\n",
                ),
            },
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: try /metrics, /healthz, /readyz or /dashboard/\n",
            ),
        }
    }

    /// `Some`: the caller may not ask this.
    fn check(
        &self,
        req: &Request<Incoming>,
        ip: IpAddr,
        probe: bool,
    ) -> Option<Response<Full<Bytes>>> {
        // An IPv4 client on a dual-stack listener arrives as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let allowed = self.allow.iter().any(|n| n.contains(&ip));
        if !self.allow.is_empty() && allowed {
            return None;
        }
        match &self.key {
            None if self.allow.is_empty() => None,
            None => Some(text(
                StatusCode::FORBIDDEN,
                "this address is not in status.allow\n",
            )),
            Some(_) if probe && self.allow.is_empty() => None,
            Some(key) => {
                let h = req.headers();
                let given = h
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
                    .or_else(|| h.get("x-api-key").map(|v| v.as_bytes()))
                    .unwrap_or_default();
                if crate::serve::same_key(given, key.as_bytes()) {
                    None
                } else {
                    Some(text(
                        StatusCode::UNAUTHORIZED,
                        "missing or invalid key: send Authorization: Bearer <status.key>\n",
                    ))
                }
            }
        }
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(body.into()))
        .unwrap_or_default()
}

/// The dashboard: one page, no build step, served from the binary.
const DASHBOARD: &str = include_str!("dashboard.html");
