//! Starting and stopping the data plane.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use sluice_config::{Config, ConfigErrors};
use tokio::sync::watch;
use tracing::{debug, error};

use sluice_core::plugin::Plugins;
use sluice_core::state::StateRegistry;

use crate::access_log::AccessLog;
use crate::snapshot::{Snapshot, compile};
use crate::worker::{self, Worker};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration did not compile.
    #[error("invalid configuration:\n{0}")]
    Config(ConfigErrors),
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
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
    plugins: Arc<dyn Plugins>,
    /// Plugin state that outlives configuration versions (rate-limit counters).
    state: StateRegistry,
}

impl Server {
    /// Compiles `cfg` with `plugins`, binds every listen address once per worker and starts
    /// the workers.
    pub fn start(cfg: &Config, plugins: Arc<dyn Plugins>) -> Result<Server, StartError> {
        let state = StateRegistry::default();
        let snapshot = compile(cfg, &*plugins, &state).map_err(StartError::Config)?;
        let workers = cfg.workers.resolve().max(1);
        // The origin comes first, so the first proxied request finds it listening.
        let origin = match &cfg.origin {
            Some(o) => Some(crate::origin::Origin::start(o.listen, 1).map_err(|source| {
                StartError::Bind {
                    addr: o.listen,
                    source,
                }
            })?),
            None => None,
        };
        let mut addrs = Vec::new();
        let mut per_worker: Vec<Vec<std::net::TcpListener>> =
            (0..workers).map(|_| Vec::new()).collect();
        for l in &cfg.listen {
            let (actual, sockets) =
                crate::listener::bind_group(l.addr, workers).map_err(|source| {
                    StartError::Bind {
                        addr: l.addr,
                        source,
                    }
                })?;
            addrs.push(actual);
            for (w, s) in sockets.into_iter().enumerate() {
                per_worker[w].push(s);
            }
        }
        let live = Arc::new(ArcSwap::from_pointee(snapshot));
        let (tx, rx) = watch::channel(false);
        let drain = cfg.timeouts.drain.0;
        let mut threads = Vec::new();
        for (index, listeners) in per_worker.into_iter().enumerate() {
            let access_log = match &cfg.log.access {
                Some(a) => Some(AccessLog::open(a).map_err(|source| StartError::AccessLog {
                    path: a.path.clone(),
                    source,
                })?),
                None => None,
            };
            let (live, max_conns, rx) = (live.clone(), cfg.limits.max_connections, rx.clone());
            let t = std::thread::Builder::new()
                .name(format!("sluice-worker-{index}"))
                .spawn(move || {
                    // Built on its own thread: a worker is not `Send` (it needs no locks).
                    let worker = Worker::new(index, live, max_conns, access_log);
                    if let Err(e) = worker::run(worker, listeners, rx, drain) {
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
        Ok(Server {
            addrs,
            origin,
            live,
            shutdown: tx,
            threads,
            workers,
            plugins,
            state,
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
        let next = compile(cfg, &*self.plugins, &self.state)?;
        let version = next.version;
        self.live.store(Arc::new(next));
        Ok(version)
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
