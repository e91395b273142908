//! What the admin API (`api.rs`), APISIX's admin API (`apisix.rs`) and the status listener
//! (`status.rs`) share: serving HTTP/1.1 connections, comparing keys, JSON answers and
//! refusals, the metrics exposition. Below all three.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

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
    const GRACE: Duration = Duration::from_millis(250);
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
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
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
    if !FROZEN.is_frozen() && !sluice_core::exposition::carried::wait(Duration::from_secs(5)) {
        return None;
    }
    let text = FROZEN.answer(
        |frozen| match format {
            Format::Prometheus => frozen.0.clone(),
            Format::OpenMetrics => frozen.1.clone(),
        },
        || render_metrics(control, format),
    );
    Some((text, format))
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
static FROZEN: Frozen<(String, String)> = Frozen::new();

/// A binary upgrade paused this process: from now on its scrapes answer the values as they
/// stand now (the new process starts from these and only adds), so that no scraper sees a
/// counter go down between a scrape of this process and one of the next. Returns them, in
/// Prometheus text, for the new process.
pub fn freeze_metrics(control: &Control) -> String {
    FROZEN
        .freeze(|| {
            (
                render_metrics(control, Format::Prometheus),
                render_metrics(control, Format::OpenMetrics),
            )
        })
        .0
        .clone()
}

/// The upgrade failed: scrapes answer live values again.
pub fn thaw_metrics() {
    FROZEN.thaw();
}

/// A value that scrapes answer in place of a live rendering once it is set. A live answer is
/// rendered holding the read side and the value is rendered holding the write side, so every
/// live answer was complete before the value was taken: counters only grow, so no live answer
/// is higher than the value, and no scraper sees a counter go down when scrapes turn to it (or
/// to the next process, which starts from it). Rendering the value and then setting it, as
/// this did before, let a scrape answer live in between with counts the value did not have.
struct Frozen<T>(parking_lot::RwLock<Option<Arc<T>>>);

impl<T> Frozen<T> {
    const fn new() -> Self {
        Self(parking_lot::RwLock::new(None))
    }

    fn is_frozen(&self) -> bool {
        self.0.read().is_some()
    }

    /// `frozen` of the value when it is set, else `live()`, rendered before any freeze starts.
    fn answer<R>(&self, frozen: impl FnOnce(&T) -> R, live: impl FnOnce() -> R) -> R {
        let guard = self.0.read();
        match guard.as_deref() {
            Some(value) => frozen(value),
            None => live(),
        }
    }

    /// Waits for live answers being rendered, then sets the value to `render()`.
    fn freeze(&self, render: impl FnOnce() -> T) -> Arc<T> {
        let mut guard = self.0.write();
        let value = Arc::new(render());
        *guard = Some(value.clone());
        value
    }

    fn thaw(&self) {
        *self.0.write() = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use super::*;

    /// A counter rendered as it stands, taking the time a real exposition takes to render.
    fn render(count: &AtomicU64) -> u64 {
        let v = count.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_micros(200));
        v
    }

    /// A scraper that scrapes while a counter grows and the process freezes never sees the
    /// counter go down: no live answer is higher than the frozen value. Fails when the value
    /// is rendered, then set, with live scrapes answered in between (CI: "scrape 24: 2036
    /// then 2030" in tests/upgrade.rs).
    #[test]
    fn no_live_answer_is_higher_than_the_frozen_value() {
        for _ in 0..20 {
            let frozen = Arc::new(Frozen::<u64>::new());
            let count = Arc::new(AtomicU64::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let counting = {
                let (count, stop) = (count.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        count.fetch_add(1, Ordering::SeqCst);
                        std::thread::yield_now();
                    }
                })
            };
            let scrapers: Vec<_> = (0..3)
                .map(|_| {
                    let (frozen, count) = (frozen.clone(), count.clone());
                    std::thread::spawn(move || {
                        let mut answers = Vec::new();
                        loop {
                            let (value, was_frozen) =
                                frozen.answer(|v| (*v, true), || (render(&count), false));
                            answers.push(value);
                            if was_frozen {
                                return answers;
                            }
                        }
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(2));
            frozen.freeze(|| render(&count));
            stop.store(true, Ordering::Relaxed);
            counting.join().unwrap();
            for s in scrapers {
                let answers = s.join().unwrap();
                assert!(
                    answers.windows(2).all(|w| w[0] <= w[1]),
                    "a counter went down: {answers:?}"
                );
            }
        }
    }
}
