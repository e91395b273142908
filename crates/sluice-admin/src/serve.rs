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

/// Serves HTTP/1.1 connections from `listener` with `handle` until `stop` turns true.
pub(crate) async fn serve_http1<H, F>(
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
    handle: H,
) where
    H: Fn(Request<Incoming>, std::net::SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((io, peer)) = accepted else { continue };
                let handle = handle.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let f = handle(req, peer);
                        async move { Ok::<_, Infallible>(f.await) }
                    });
                    if let Err(e) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
                        .await
                    {
                        debug!(%peer, error = %e, "{what} connection ended");
                    }
                });
            }
            _ = stop.wait_for(|s| *s) => return,
        }
    }
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

/// Renders every metric family for a scraper that sent `accept`.
pub fn exposition(control: &Control, accept: &str) -> (String, Format) {
    let format = Format::from_accept(accept);
    let mut text = String::with_capacity(16 << 10);
    let mut w = Writer::new(&mut text, format);
    control.render_metrics(&mut w);
    w.finish();
    (text, format)
}
