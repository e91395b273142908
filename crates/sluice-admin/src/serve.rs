//! What the admin API (`api.rs`), APISIX's admin API (`apisix.rs`) and the status listener
//! (`status.rs`) share: serving HTTP/1.1 connections, comparing keys, JSON answers and
//! refusals, the metrics exposition. Below all three.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use sluice_config::ConfigErrors;
use sluice_core::exposition::{Format, Writer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::debug;

use crate::control::Control;

/// Serves HTTP/1.1 connections from `listener` with `handle` until `stop` turns true; then
/// stops accepting and lets the requests in flight finish (5 s at most), closing idle
/// keep-alive connections. A connection accepted in the last 250 ms first gets the rest of
/// that time to send its request: closed unread, a client whose request was on its way would
/// see the connection end with no answer (as the workers' `IDLE_GRACE`).
pub(crate) async fn serve_http1<H, F>(
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
    handle: H,
) where
    H: Fn(Request<Incoming>, std::net::SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    const GRACE: std::time::Duration = std::time::Duration::from_millis(250);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut last_accept: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((io, peer)) = accepted else { continue };
                last_accept = Some(tokio::time::Instant::now());
                let handle = handle.clone();
                let svc = hyper::service::service_fn(move |req| {
                    let f = handle(req, peer);
                    async move { Ok::<_, Infallible>(f.await) }
                });
                let conn = graceful.watch(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(io), svc),
                );
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        debug!(%peer, error = %e, "{what} connection ended");
                    }
                });
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    drop(listener);
    if let Some(at) = last_accept {
        tokio::time::sleep_until(at + GRACE).await;
    }
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), graceful.shutdown()).await;
}

/// Compares a key without an early exit, so timing does not reveal how much of it matched.
pub(crate) fn same_key(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// An answer of `ctype` with `body`.
pub(crate) fn raw(status: StatusCode, ctype: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", ctype)
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

/// A JSON answer (and a newline).
pub(crate) fn reply(status: StatusCode, v: Value) -> Response<Full<Bytes>> {
    let mut body = v.to_string().into_bytes();
    body.push(b'\n');
    raw(status, "application/json", body)
}

/// A refused write as APISIX's tools read it: every error in `error_msg`, one per line (and
/// the list as Sluice's own API gives it).
pub(crate) fn invalid_message(errors: &ConfigErrors) -> Response<Full<Bytes>> {
    refused(errors, &errors.to_string())
}

pub(crate) fn invalid(errors: &ConfigErrors) -> Response<Full<Bytes>> {
    refused(errors, "invalid configuration")
}

/// 400 with `message` and every error with its path.
fn refused(errors: &ConfigErrors, message: &str) -> Response<Full<Bytes>> {
    let list: Vec<Value> = errors
        .iter()
        .map(|e| json!({"path": e.path, "message": e.message}))
        .collect();
    reply(
        StatusCode::BAD_REQUEST,
        json!({"error_msg": message, "errors": list}),
    )
}

/// Renders every metric family for a scraper that sent `accept`: with the values a binary
/// upgrade carried from the process this one replaced added (waiting for them while they are
/// on their way), or, in a process handing over to a new one, as they stood when it stopped
/// taking connections (see [`freeze_metrics`]). None: this process was started by an upgrade
/// and the old process's values have not come within 5 s (its first health checks can take
/// longer); answered without them, its counters would go down for the scraper, so the caller
/// answers 503 and the scrape is retried (Prometheus counts a failed scrape, not a reset).
pub fn exposition(control: &Control, accept: &str) -> Option<(String, Format)> {
    let format = Format::from_accept(accept);
    if let Some(frozen) = FROZEN.read().clone() {
        let text = match format {
            Format::Prometheus => &frozen.0,
            Format::OpenMetrics => &frozen.1,
        };
        return Some((text.clone(), format));
    }
    if !sluice_core::exposition::carried::wait(std::time::Duration::from_secs(5)) {
        return None;
    }
    Some((render_metrics(control, format), format))
}

/// What a scrape answers while [`exposition`] has nothing to give.
pub(crate) const METRICS_NOT_YET: &str =
    "metrics not ready: taking over from the process this one replaces; scrape again\n";

/// Every metric family as it stands now, in `format`, with what an upgrade carried added.
pub fn render_metrics(control: &Control, format: Format) -> String {
    let mut text = String::with_capacity(16 << 10);
    let mut w = Writer::new(&mut text, format);
    control.render_metrics(&mut w);
    w.finish();
    sluice_core::exposition::carried::merge(text, format)
}

/// The exposition as it stood when a binary upgrade paused this process, in both formats.
static FROZEN: parking_lot::RwLock<Option<std::sync::Arc<(String, String)>>> =
    parking_lot::RwLock::new(None);

/// A binary upgrade paused this process: from now on its scrapes answer the values as they
/// stand now (the new process starts from these and only adds), so that no scraper sees a
/// counter go down between a scrape of this process and one of the next. Returns them, in
/// Prometheus text, for the new process.
pub fn freeze_metrics(control: &Control) -> String {
    let prometheus = render_metrics(control, Format::Prometheus);
    let open = render_metrics(control, Format::OpenMetrics);
    *FROZEN.write() = Some(std::sync::Arc::new((prometheus.clone(), open)));
    prometheus
}

/// The upgrade failed: scrapes answer live values again.
pub fn thaw_metrics() {
    *FROZEN.write() = None;
}
