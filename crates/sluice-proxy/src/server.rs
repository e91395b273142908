//! Starting and stopping the data plane.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use std::collections::HashSet;

use sluice_config::{Config, ConfigErrors, RouteChange, StreamProtocol, Validator};
use tokio::sync::watch;
use tracing::{debug, error};

use sluice_core::plugin::Plugins;
use sluice_core::state::StateRegistry;

use crate::accept::{self, ListenKind, Sockets};
use crate::access_log::AccessLog;
use crate::metrics::Metrics;
use crate::snapshot::{Base, DeltaRest, Snapshot, compile_full, compile_routes};
use crate::worker::Worker;
use parking_lot::{Mutex, RawMutex, lock_api::ArcMutexGuard};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration did not compile.
    #[error("invalid configuration:\n{0}")]
    Config(ConfigErrors),
    /// A listen address could not be bound.
    #[error(
        "cannot listen on {addr} ({setting}): {error}{}",
        in_use_hint(error, setting)
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The setting that names it (`listen`, `stream_routes[2].listen`, `origin.listen`).
        setting: String,
        /// The cause (not a `source`: the message says it once).
        error: std::io::Error,
    },
    /// The access log could not be opened.
    #[error("cannot open access log {path}: {source}")]
    AccessLog {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A worker thread could not be started.
    #[error("cannot start worker thread: {0}")]
    Spawn(std::io::Error),
}

fn in_use_hint(error: &std::io::Error, setting: &str) -> String {
    if error.kind() == std::io::ErrorKind::AddrInUse {
        format!(
            " (another Sluice, or another server, is running there: stop it, or change {setting})"
        )
    } else {
        String::new()
    }
}

/// A running data plane: workers, their listeners, and the built-in origin when configured.
/// Dropping it shuts it down (gracefully, within the drain timeout).
#[derive(Debug)]
pub struct Server {
    addrs: Vec<SocketAddr>,
    origin: Option<crate::origin::Origin>,
    live: Arc<ArcSwap<Snapshot>>,
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    workers: usize,
    reloader: Reloader,
    first_checks: Arc<crate::upstream::FirstRound>,
}

/// Compiles configurations and puts them in service: what the control plane holds of the data
/// plane. Cheap to clone; usable from any thread. Changes are serialized: a [`Pending`] change
/// holds the reloader until it is installed or dropped, so nothing can slip in between the
/// compilation of a change and its installation.
#[derive(Clone)]
pub struct Reloader {
    live: Arc<ArcSwap<Snapshot>>,
    plugins: Arc<dyn Plugins>,
    /// Plugin state that outlives configuration versions (rate-limit counters).
    state: Arc<StateRegistry>,
    /// What route changes compile against: the last full compilation, plus the route changes
    /// installed since.
    base: Arc<Mutex<Base>>,
    /// Stream route sockets opened at start; a reload cannot open more.
    stream_addrs: Arc<HashSet<(SocketAddr, StreamProtocol)>>,
    /// Every worker's counters.
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("version", &self.live.load().version)
            .finish()
    }
}

/// A compiled change, ready to go into service with [`Pending::install`]. Until then the
/// running configuration is untouched; dropping it abandons the change.
pub struct Pending {
    guard: ArcMutexGuard<RawMutex, Base>,
    live: Arc<ArcSwap<Snapshot>>,
    change: Change,
}

enum Change {
    Full(Snapshot, Box<Base>),
    Routes(Snapshot, DeltaRest),
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("version", &self.version())
            .finish()
    }
}

impl Pending {
    /// The version the change will have.
    pub fn version(&self) -> u64 {
        match &self.change {
            Change::Full(s, _) | Change::Routes(s, _) => s.version,
        }
    }

    /// Puts the change in service: new requests use it at once; requests in flight finish on
    /// the snapshot they started with. Returns its version.
    pub fn install(self) -> u64 {
        let Pending {
            mut guard,
            live,
            change,
        } = self;
        let (snapshot, version) = match change {
            Change::Full(snapshot, base) => {
                *guard = *base;
                let v = snapshot.version;
                (snapshot, v)
            }
            Change::Routes(snapshot, rest) => {
                guard.apply(rest);
                let v = snapshot.version;
                (snapshot, v)
            }
        };
        live.store(Arc::new(snapshot));
        version
    }
}

impl Reloader {
    /// Compiles again the upstreams whose host names now resolve differently and puts them
    /// in service, alone: routes, plugins and everything else are shared with the
    /// configuration in service. Serialized with reloads and route changes.
    pub(crate) fn refresh_dns(&self) -> usize {
        let _turn = self.base.lock();
        let cur = self.live.load_full();
        let mut replaced = 0;
        let upstreams: Vec<Arc<crate::upstream::Upstream>> = cur
            .upstreams
            .iter()
            .map(|u| match u.dns.as_ref().and_then(|d| d.rebuild()) {
                Some(new) => {
                    replaced += 1;
                    Arc::new(new)
                }
                None => u.clone(),
            })
            .collect();
        if replaced > 0 {
            self.live
                .store(Arc::new(cur.with_upstreams(upstreams.into())));
        }
        replaced
    }

    /// The configuration in service.
    pub fn current(&self) -> Arc<Snapshot> {
        self.live.load_full()
    }

    /// The plugin state a binary upgrade carries to the next process (local limit counters,
    /// circuit breakers), by key.
    pub fn export_state(&self) -> sluice_core::state::Exported {
        self.state.export()
    }

    /// Takes the state the process this one replaces exported; returns how many keys this
    /// configuration has.
    pub fn import_state(&self, exported: &sluice_core::state::Exported) -> usize {
        self.state.import(exported)
    }

    /// What was added between two exports, for the next process to add.
    pub fn state_changes(
        &self,
        now: &sluice_core::state::Exported,
        before: &sluice_core::state::Exported,
    ) -> sluice_core::state::Exported {
        self.state.changes(now, before)
    }

    /// Adds what the process this one replaced counted while it drained.
    pub fn merge_state(&self, changes: &sluice_core::state::Exported) -> usize {
        self.state.merge(changes)
    }

    /// The process this one replaced is gone: what it had in flight no longer counts.
    pub fn state_gone(&self) {
        self.state.gone();
    }

    /// Writes the data plane's metrics (every worker's, summed).
    pub fn render_metrics(&self, w: &mut crate::metrics::Writer<'_>) {
        self.metrics.render(w);
        self.live.load().render_upstreams(w);
    }

    /// Compiles a whole configuration against the plugins and state of this server, without
    /// installing it.
    pub fn prepare(&self, cfg: &Config) -> Result<Pending, ConfigErrors> {
        let mut v = Validator::new();
        v.field("stream_routes", |v| {
            for (i, r) in cfg.stream_routes.iter().enumerate() {
                for &addr in r
                    .addrs
                    .iter()
                    .filter(|a| !self.stream_addrs.contains(&(**a, r.protocol)))
                {
                    v.index(i, |v| {
                        v.error_at(
                            "listen",
                            format!(
                                "{addr} ({}) was not open at start: stream listen addresses are opened at start, restart to add one",
                                match r.protocol {
                                    StreamProtocol::Tcp => "tcp",
                                    StreamProtocol::Udp => "udp",
                                }
                            ),
                        )
                    });
                }
            }
        });
        v.finish()?;
        let guard = self.base.lock_arc();
        let (snapshot, base) = compile_full(cfg, &*self.plugins, &self.state)?;
        Ok(Pending {
            guard,
            live: self.live.clone(),
            change: Change::Full(snapshot, Box::new(base)),
        })
    }

    /// Compiles changes to routes alone, against everything else as it is in service:
    /// the cost depends on the number of changes, not on the number of routes. The routes
    /// must be validated against the configuration in service (their upstreams and services
    /// exist).
    pub fn prepare_routes(&self, changes: Vec<RouteChange>) -> Result<Pending, ConfigErrors> {
        let guard = self.base.lock_arc();
        let current = self.live.load_full();
        let delta = compile_routes(&guard, &current, changes, &*self.plugins, &self.state)?;
        let (snapshot, rest) = delta.split();
        Ok(Pending {
            guard,
            live: self.live.clone(),
            change: Change::Routes(snapshot, rest),
        })
    }
}

impl Server {
    /// Compiles `cfg` with `plugins`, binds every listen address once per worker and starts
    /// the workers.
    pub fn start(cfg: &Config, plugins: Arc<dyn Plugins>) -> Result<Server, StartError> {
        sluice_core::tls_client::install_default_provider();
        let state = Arc::new(StateRegistry::default());
        let (snapshot, base) = compile_full(cfg, &*plugins, &state).map_err(StartError::Config)?;
        let workers = cfg.workers.resolve().max(1);
        // No other process may serve any of these addresses: all are checked before the
        // first is bound, so that this gateway's own overlapping sockets do not count.
        let mut planned: Vec<(SocketAddr, bool, String)> = Vec::new();
        if let Some(o) = &cfg.origin {
            planned.push((o.listen, false, "origin.listen".into()));
        }
        for (i, l) in cfg.listen.iter().enumerate() {
            planned.push((l.addr, false, format!("listen[{i}]")));
        }
        for &(addr, proto) in &stream_addrs(cfg) {
            planned.push((
                addr,
                proto == StreamProtocol::Udp,
                stream_setting(cfg, addr),
            ));
        }
        for (addr, udp, setting) in planned {
            crate::listener::ensure_unserved(addr, udp).map_err(|error| StartError::Bind {
                addr,
                setting,
                error,
            })?;
        }
        // The origin comes first, so the first proxied request finds it listening.
        let origin = match &cfg.origin {
            Some(o) => Some(crate::origin::Origin::start(o.listen, 1).map_err(|error| {
                StartError::Bind {
                    addr: o.listen,
                    setting: "origin.listen".into(),
                    error,
                }
            })?),
            None => None,
        };
        let mut addrs = Vec::new();
        let mut per_worker: Vec<Sockets> = (0..workers).map(|_| Sockets::default()).collect();
        let bind_err = |addr, setting: String| {
            move |error| StartError::Bind {
                addr,
                setting,
                error,
            }
        };
        for (i, l) in cfg.listen.iter().enumerate() {
            let (actual, sockets) = crate::listener::bind_group(l.addr, workers)
                .map_err(bind_err(l.addr, format!("listen[{i}]")))?;
            addrs.push(actual);
            for (w, s) in sockets.into_iter().enumerate() {
                per_worker[w % workers].tcp.push((
                    s,
                    ListenKind::Http {
                        tls: l.tls,
                        http2: l.http2,
                        proxy_protocol: l.proxy_protocol,
                        listener: i,
                    },
                ));
            }
        }
        let stream_addrs = stream_addrs(cfg);
        for &(addr, proto) in &stream_addrs {
            match proto {
                StreamProtocol::Tcp => {
                    let (_, sockets) = crate::listener::bind_group(addr, workers)
                        .map_err(bind_err(addr, stream_setting(cfg, addr)))?;
                    for (w, s) in sockets.into_iter().enumerate() {
                        per_worker[w % workers]
                            .tcp
                            .push((s, ListenKind::Stream(addr)));
                    }
                }
                StreamProtocol::Udp => {
                    let (_, sockets) = crate::listener::bind_udp_group(addr, workers)
                        .map_err(bind_err(addr, stream_setting(cfg, addr)))?;
                    for (w, s) in sockets.into_iter().enumerate() {
                        per_worker[w % workers].udp.push((s, addr));
                    }
                }
            }
        }
        let live = Arc::new(ArcSwap::from_pointee(snapshot));
        let live_handle = live.clone();
        let registry = Arc::new(Metrics::new(
            &cfg.metrics,
            addrs.iter().map(ToString::to_string).collect(),
        ));
        let (tx, rx) = watch::channel(false);
        let drain = cfg.timeouts.drain.0;
        let mut threads = Vec::new();
        for (index, sockets) in per_worker.into_iter().enumerate() {
            let access_log = match &cfg.log.access {
                Some(a) => Some(AccessLog::open(a).map_err(|source| StartError::AccessLog {
                    path: a.path.clone(),
                    source,
                })?),
                None => None,
            };
            let (live, max_conns, rx) = (live.clone(), cfg.limits.max_connections, rx.clone());
            let metrics = registry.worker();
            let t = std::thread::Builder::new()
                .name(format!("sluice-worker-{index}"))
                .spawn(move || {
                    // Built on its own thread: a worker is not `Send` (it needs no locks).
                    let worker = Worker::new(index, live, max_conns, access_log, metrics);
                    if let Err(e) = accept::run(worker, sockets, rx, drain) {
                        error!(worker = index, error = %e, "worker stopped with an error");
                    }
                })
                .map_err(StartError::Spawn)?;
            threads.push(t);
        }
        debug!(
            listen = %addrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            workers,
            "data plane started"
        );
        let reloader = Reloader {
            live: live_handle,
            plugins,
            state,
            base: Arc::new(Mutex::new(base)),
            stream_addrs: Arc::new(stream_addrs),
            metrics: registry,
        };
        let first_checks = Arc::new(crate::upstream::FirstRound::default());
        threads.push(
            crate::upstream::start_checks(
                {
                    let r = reloader.clone();
                    move || r.current().upstreams.clone()
                },
                {
                    let r = reloader.clone();
                    move || r.refresh_dns()
                },
                rx.clone(),
                first_checks.clone(),
            )
            .map_err(StartError::Spawn)?,
        );
        Ok(Server {
            addrs,
            origin,
            live,
            shutdown: tx,
            threads,
            workers,
            reloader,
            first_checks,
        })
    }

    /// The addresses the proxy listens on (port 0 in the configuration resolved).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The built-in origin's address, when one runs.
    pub fn origin_addr(&self) -> Option<SocketAddr> {
        self.origin.as_ref().map(|o| o.addr())
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The snapshot in use.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.live.load_full()
    }

    /// Replaces the configuration. New requests use it at once; requests in flight finish on
    /// the snapshot they started with.
    pub fn apply(&self, cfg: &Config) -> Result<u64, ConfigErrors> {
        Ok(self.reloader.prepare(cfg)?.install())
    }

    /// The handle that compiles and installs configurations.
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// Waits up to `timeout` until every node with an active health check has been probed
    /// once (at once when none has one); true when that is done.
    pub fn wait_first_checks(&self, timeout: std::time::Duration) -> bool {
        self.first_checks.wait(timeout)
    }

    /// Stops accepting and lets in-flight requests finish (up to the drain timeout), then
    /// returns when every worker has exited.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.shutdown.send(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(o) = self.origin.take() {
            o.stop();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The distinct (address, protocol) pairs of the stream routes and of `stream_proxy`.
fn stream_addrs(cfg: &Config) -> HashSet<(SocketAddr, StreamProtocol)> {
    let proxy = (cfg
        .stream_proxy
        .tcp
        .iter()
        .map(|l| (l.addr, StreamProtocol::Tcp)))
    .chain(
        cfg.stream_proxy
            .udp
            .iter()
            .map(|l| (l.addr, StreamProtocol::Udp)),
    );
    cfg.stream_routes
        .iter()
        .flat_map(|r| r.addrs.iter().map(|a| (*a, r.protocol)))
        .chain(proxy)
        .collect()
}

/// The setting that names a stream address, for errors.
fn stream_setting(cfg: &Config, addr: SocketAddr) -> String {
    if cfg.stream_proxy.tcp.iter().any(|l| l.addr == addr) {
        return "stream_proxy.tcp".into();
    }
    if cfg.stream_proxy.udp.iter().any(|l| l.addr == addr) {
        return "stream_proxy.udp".into();
    }
    match cfg
        .stream_routes
        .iter()
        .position(|r| r.addrs.contains(&addr))
    {
        Some(i) => format!("stream_routes[{i}].listen"),
        None => "stream_routes[].listen".into(),
    }
}
