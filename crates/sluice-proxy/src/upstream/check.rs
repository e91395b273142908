//! Active health checks: one checker per upstream in the node process (never one per worker),
//! on a thread of its own, writing the shared health table the workers read. The thread
//! follows the configuration in service: an upstream that gains `checks.active` gets a
//! checker, one that loses it or leaves the configuration has its checker stopped, and a
//! changed upstream's checker is replaced (the nodes it keeps keep their health: the table is
//! keyed by node, see `health.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::{info, warn};

use super::discover::{Query, refresh};
use super::health::Cause;
use super::model::{ActiveCheck, Upstream};

/// How often the thread looks for a new configuration.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// What one probe found.
#[derive(Debug, PartialEq, Eq)]
enum Probe {
    /// `type: tcp`: the connection was accepted.
    Connected,
    Status(u16),
    TcpFailure(String),
    Timeout,
}

/// The first round of probes of the configuration a node starts with: done once every node
/// with an active check has been probed once (or at once when none has). A process started by
/// a binary upgrade waits for it before it takes traffic, so that it does not send requests
/// to a node its checks would have found down.
#[derive(Debug, Default)]
pub(crate) struct FirstRound {
    /// Probes still to finish; None until the checker has seen the configuration.
    left: parking_lot::Mutex<Option<usize>>,
    done: parking_lot::Condvar,
}

impl FirstRound {
    fn set(&self, n: usize) {
        *self.left.lock() = Some(n);
        self.done.notify_all();
    }

    fn probed(&self) {
        if let Some(n) = self.left.lock().as_mut() {
            *n = n.saturating_sub(1);
        }
        self.done.notify_all();
    }

    /// Waits up to `timeout` for the first round; true when it is done.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let mut left = self.left.lock();
        self.done
            .wait_while_for(&mut left, |l| l.is_none_or(|n| n > 0), timeout);
        *left == Some(0)
    }
}

/// Starts the checker thread; it ends when `stop` turns true.
pub(crate) fn start(
    // The upstreams in service, and what recompiles those whose names resolve differently
    // (the data plane's, serialized with reloads); passed in, so that this module depends on
    // neither.
    upstreams: impl Fn() -> Arc<[Arc<Upstream>]> + Send + 'static,
    refresh_dns: impl Fn() -> usize + Send + 'static,
    mut stop: watch::Receiver<bool>,
    first: Arc<FirstRound>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sluice-health".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                warn!("health checks: cannot start their runtime");
                return;
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let mut running: FxHashMap<u64, tokio::task::JoinHandle<()>> = FxHashMap::default();
                let mut seen: Option<Arc<[Arc<Upstream>]>> = None;
                let dns_changed = std::rc::Rc::new(std::cell::Cell::new(false));
                loop {
                    if dns_changed.take() {
                        let n = refresh_dns();
                        tracing::debug!(upstreams = n, "DNS: upstreams compiled again");
                    }
                    let ups = upstreams();
                    let names: Vec<(Query, Arc<sluice_config::DnsConfig>)> = ups
                        .iter()
                        .filter_map(|u| u.dns.as_ref())
                        .flat_map(|d| d.built.iter().map(|(q, _)| (q.clone(), d.dns.clone())))
                        .collect();
                    if !names.is_empty() {
                        let flag = dns_changed.clone();
                        refresh(names, std::rc::Rc::new(move || flag.set(true)));
                    }
                    if seen.as_ref().is_none_or(|s| !Arc::ptr_eq(s, &ups)) {
                        let round = seen.is_none().then(|| {
                            first.set(probed_nodes(&ups));
                            first.clone()
                        });
                        follow(&ups, &mut running, round);
                        seen = Some(ups);
                    }
                    tokio::select! {
                        _ = stop.wait_for(|s| *s) => break,
                        () = tokio::time::sleep(FOLLOW_EVERY) => {}
                    }
                }
                for (_, t) in running.drain() {
                    t.abort();
                }
            });
        })
}

/// The nodes the checkers of `ups` probe.
fn probed_nodes(ups: &[Arc<Upstream>]) -> usize {
    ups.iter()
        .filter(|u| u.active.is_some())
        .map(|u| {
            u.nodes
                .iter()
                .filter(|n| !n.addr.ip().is_unspecified())
                .count()
        })
        .sum()
}

/// Starts checkers for upstreams that need one and stops those no longer in service; the
/// first probe of each node is told to `round` when given.
fn follow(
    ups: &[Arc<Upstream>],
    running: &mut FxHashMap<u64, tokio::task::JoinHandle<()>>,
    round: Option<Arc<FirstRound>>,
) {
    let wanted: FxHashMap<u64, &Arc<Upstream>> = ups
        .iter()
        .filter(|u| u.active.is_some())
        .map(|u| (u.uid, u))
        .collect();
    running.retain(|uid, task| {
        let keep = wanted.contains_key(uid);
        if !keep {
            task.abort();
        }
        keep
    });
    for (uid, up) in wanted {
        running
            .entry(uid)
            .or_insert_with(|| tokio::task::spawn_local(check_upstream(up.clone(), round.clone())));
    }
}

/// Probes every node of `up` until aborted: at `healthy.interval` while the node is healthy,
/// at `unhealthy.interval` while it is not, at most `concurrency` probes at once.
async fn check_upstream(up: Arc<Upstream>, round: Option<Arc<FirstRound>>) {
    let Some(check) = up.active.clone() else {
        return;
    };
    let permits = Arc::new(tokio::sync::Semaphore::new(check.cfg.concurrency as usize));
    let mut nodes = tokio::task::JoinSet::new();
    for i in 0..up.nodes.len() {
        // A name that does not resolve has nothing to probe (its placeholder has no address).
        if up.nodes[i].addr.ip().is_unspecified() {
            continue;
        }
        let (up, check, permits) = (up.clone(), check.clone(), permits.clone());
        let mut round = round.clone();
        nodes.spawn_local(async move {
            loop {
                let result = {
                    let _p = permits.acquire().await;
                    probe(&up, &check, i).await
                };
                apply(&up, &check, i, result);
                if let Some(r) = round.take() {
                    r.probed();
                }
                let n = &up.nodes[i];
                let every = if n.health.is_down() {
                    check.cfg.unhealthy.interval.0
                } else {
                    check.cfg.healthy.interval.0
                };
                tokio::time::sleep(every).await;
            }
        });
    }
    // Dropping the set (when this task is aborted) aborts the node loops.
    while nodes.join_next().await.is_some() {}
}

/// Records a probe's result in the node's health.
fn apply(up: &Upstream, check: &ActiveCheck, i: usize, result: Probe) {
    let n = &up.nodes[i];
    let h = &n.health;
    let c = &check.cfg;
    let (counter, limit, why) = match &result {
        Probe::Connected => (None, 0, String::new()),
        Probe::Status(s) if c.healthy.http_statuses.contains(s) => (None, 0, String::new()),
        Probe::Status(s) if c.unhealthy.http_statuses.contains(s) => (
            Some(&h.http_failures),
            c.unhealthy.http_failures,
            format!("health check answered {s}"),
        ),
        // Neither healthy nor unhealthy: not counted (APISIX's rule).
        Probe::Status(_) => return,
        Probe::TcpFailure(e) => (
            Some(&h.tcp_failures),
            c.unhealthy.tcp_failures,
            format!("health check: {e}"),
        ),
        Probe::Timeout => (
            Some(&h.timeouts),
            c.unhealthy.timeouts,
            format!("health check timed out after {:?}", c.timeout.0),
        ),
    };
    match counter {
        None => {
            if h.is_down() {
                if h.count(&h.successes) >= c.healthy.successes && h.mark_up() {
                    info!(upstream = %up.owner_name(), node = %n.authority, "node healthy again (active check)");
                }
            } else {
                h.clear_failures();
            }
        }
        Some(counter) => {
            let count = h.count(counter);
            h.note_failure(&why);
            if count >= limit && h.mark_down(Cause::Active, None, &why) {
                warn!(upstream = %up.owner_name(), node = %n.authority, cause = %why, "node unhealthy (active check)");
            }
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

/// One probe of node `i`, within the check's timeout.
async fn probe(up: &Upstream, check: &ActiveCheck, i: usize) -> Probe {
    let n = &up.nodes[i];
    let c = &check.cfg;
    let addr = SocketAddr::new(n.addr.ip(), c.port.unwrap_or(n.addr.port()));
    let host = c.host.as_deref().unwrap_or(&n.authority);
    let exchange = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| Probe::TcpFailure(e.to_string()))?;
        if c.kind == "tcp" {
            return Ok(Probe::Connected);
        }
        let mut io: Box<dyn Io> = match &check.tls {
            None => Box::new(tcp),
            Some(tls) => {
                let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
                let name = name.trim_start_matches('[').trim_end_matches(']');
                let name = rustls::pki_types::ServerName::try_from(name.to_owned())
                    .map_err(|e| Probe::TcpFailure(format!("server name {name}: {e}")))?;
                Box::new(
                    tokio_rustls::TlsConnector::from(tls.clone())
                        .connect(name, tcp)
                        .await
                        .map_err(|e| Probe::TcpFailure(format!("TLS: {e}")))?,
                )
            }
        };
        let mut req = format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: sluice-health-check\r\nConnection: close\r\n",
            c.http_path
        );
        for h in &c.req_headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        io.write_all(req.as_bytes())
            .await
            .map_err(|e| Probe::TcpFailure(e.to_string()))?;
        let mut buf = Vec::with_capacity(256);
        loop {
            if let Some(status) = status_of(&buf) {
                return Ok(Probe::Status(status));
            }
            if buf.len() > 4096 {
                return Err(Probe::TcpFailure("no status line in the answer".into()));
            }
            let mut chunk = [0u8; 512];
            match io.read(&mut chunk).await {
                Ok(0) => return Err(Probe::TcpFailure("closed before answering".into())),
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                Err(e) => return Err(Probe::TcpFailure(e.to_string())),
            }
        }
    };
    match tokio::time::timeout(c.timeout.0, exchange).await {
        Err(_) => Probe::Timeout,
        Ok(Ok(p) | Err(p)) => p,
    }
}

/// The status of `HTTP/1.x NNN ...` once the status line is complete.
fn status_of(buf: &[u8]) -> Option<u16> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[..end]).ok()?;
    let mut parts = line.split(' ');
    parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_is_read_from_a_complete_status_line_only() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(status_of(b"HTTP/1.0 503\r\n"), Some(503));
        assert_eq!(status_of(b"HTTP/1.1 200 O"), None);
        assert_eq!(status_of(b"SSH-2.0\r\n"), None);
    }
}
