//! A worker: one OS thread, one single-threaded tokio runtime, its own listening sockets, its
//! own upstream pools. A request is accepted, proxied and answered on one thread: the client
//! side and the upstream side share one event loop (seeds/004: no hand-off between threads).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::task::Waker;

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use crate::access_log::AccessLog;
use crate::metrics::WorkerMetrics;
use crate::snapshot::Snapshot;
use crate::upstream::Local;

/// State of one worker, shared by its connection tasks (never by other workers).
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) index: usize,
    live: Arc<ArcSwap<Snapshot>>,
    /// The snapshot this worker uses, wrapped in an `Rc` on purpose: cloning it per request
    /// bumps a worker-local count, where cloning the `Arc` would write a cache line shared
    /// with every other worker.
    #[allow(clippy::redundant_allocation)]
    current: RefCell<Rc<Arc<Snapshot>>>,
    /// Pools, balancers, retry budgets and HTTP/2 connections to nodes.
    pub(crate) up: Local,
    pub(crate) draining: Cell<bool>,
    /// When an idle keep-alive connection of a draining worker is closed ([`IDLE_GRACE`]
    /// after the drain began).
    pub(crate) drain_idle_until: Cell<Option<tokio::time::Instant>>,
    idle: RefCell<IdleWakers>,
    pub(crate) conns: Cell<usize>,
    pub(crate) max_conns: usize,
    pub(crate) slot_free: Notify,
    /// The access log, when on; replaced when a reload changes `log.access`.
    pub(crate) access_log: RefCell<Option<AccessLog>>,
    /// What this worker counts (`metrics.rs`).
    pub(crate) metrics: WorkerMetrics,
    /// Whether requests are timed (metrics or an access log use it).
    pub(crate) timed: Cell<bool>,
    /// Request failures in the error log, summarised (`failures.rs`).
    failures: RefCell<crate::failures::Failures>,
    /// `log.failure_summary` of the snapshot in service, as of the last sweep.
    failure_every: Cell<std::time::Duration>,
}

/// How long an idle HTTP/1.1 keep-alive connection is kept once its worker drains (a
/// shutdown, a binary upgrade). Closed at once, a client that sent its next request just as
/// the server closed sees the connection end with no answer (wrk counts an error, and a POST
/// cannot be retried; NGINX's users report it). Within the grace, a request that arrives is
/// answered with `Connection: close`; a client under load sends its next request well within
/// it, and an idle connection costs the drain at most this.
pub(crate) const IDLE_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

impl Worker {
    pub(crate) fn new(
        index: usize,
        live: Arc<ArcSwap<Snapshot>>,
        max_conns: usize,
        access_log: Option<AccessLog>,
        metrics: WorkerMetrics,
    ) -> Self {
        let current = Rc::new(live.load_full());
        let failure_every = Cell::new(current.settings.failure_summary);
        let timed = Cell::new(metrics.enabled() || access_log.is_some());
        Worker {
            index,
            live,
            current: RefCell::new(current),
            up: Local::default(),
            draining: Cell::new(false),
            drain_idle_until: Cell::new(None),
            idle: RefCell::new(IdleWakers::default()),
            conns: Cell::new(0),
            max_conns,
            slot_free: Notify::new(),
            access_log: RefCell::new(access_log),
            metrics,
            timed,
            failures: RefCell::default(),
            failure_every,
        }
    }

    /// Logs a request's failure, or counts it when the same failure of the same route and
    /// node was logged within `log.failure_summary` (see `failures.rs`).
    pub(crate) fn failed(&self, f: crate::failures::Failure<'_>) {
        self.failures
            .borrow_mut()
            .report(f, self.failure_every.get());
    }

    /// Logs what the failure summaries counted: those whose interval ended, or all (`all`: the
    /// worker stops).
    pub(crate) fn summarise_failures(&self, all: bool) {
        self.failures
            .borrow_mut()
            .summarise(self.failure_every.get(), all);
    }

    /// The snapshot a new request uses. Reads the shared `ArcSwap` without writing to any
    /// shared cache line; the worker keeps its own reference count.
    #[inline]
    #[allow(clippy::redundant_allocation)]
    pub(crate) fn snapshot(&self) -> Rc<Arc<Snapshot>> {
        let latest = self.live.load();
        let mut cur = self.current.borrow_mut();
        if !Arc::ptr_eq(&latest, &cur) {
            *cur = Rc::new(arc_swap::Guard::into_inner(latest));
        }
        cur.clone()
    }

    /// Registers an idle connection's waker, so that draining can wake it.
    #[inline]
    pub(crate) fn register_idle(&self, slot: &mut Option<usize>, waker: &Waker) {
        self.idle.borrow_mut().register(slot, waker);
    }

    pub(crate) fn unregister_idle(&self, slot: &mut Option<usize>) {
        if let Some(i) = slot.take() {
            self.idle.borrow_mut().remove(i);
        }
    }

    pub(crate) fn begin_drain(&self) {
        self.draining.set(true);
        self.drain_idle_until
            .set(Some(tokio::time::Instant::now() + IDLE_GRACE));
        self.idle.borrow_mut().wake_all();
    }

    pub(crate) fn conn_closed(&self) {
        let n = self.conns.get();
        self.conns.set(n - 1);
        if n == self.max_conns {
            self.slot_free.notify_one();
        }
    }

    pub(crate) fn sweep(&self) {
        let snap = self.snapshot();
        self.up.sweep(&snap.upstreams);
        self.failure_every.set(snap.settings.failure_summary);
        self.summarise_failures(false);
        // A reload that changed `log.access` takes effect here, within a second.
        let wanted = snap.settings.access_log.as_deref();
        let mut log = self.access_log.borrow_mut();
        if log.as_ref().map(|l| l.config()) != wanted {
            match wanted.map(AccessLog::open).transpose() {
                Ok(next) => {
                    // What the old settings buffered goes to the old file first.
                    if let Some(old) = log.as_mut() {
                        old.flush();
                    }
                    if self.index == 0 {
                        tracing::info!(
                            path = wanted.map_or("-", |a| a.path.as_str()),
                            "access log settings applied"
                        );
                    }
                    *log = next;
                }
                Err(e) => {
                    if self.index == 0 {
                        tracing::warn!(error = %e, "cannot open the new access log; keeping the previous settings");
                    }
                }
            }
            self.timed.set(self.metrics.enabled() || log.is_some());
        }
    }

    /// How often the access log's buffer is written out (`log.access.flush`).
    pub(crate) fn log_flush_every(&self) -> std::time::Duration {
        self.access_log
            .borrow()
            .as_ref()
            .map_or(std::time::Duration::from_secs(1), |l| l.config().flush.0)
    }

    /// Writes out the access log's buffer (and reopens its file after SIGUSR1).
    pub(crate) fn flush_log(&self) {
        if let Some(log) = self.access_log.borrow_mut().as_mut() {
            log.flush();
        }
    }
}

/// Wakers of idle connections, in a slab.
#[derive(Debug, Default)]
struct IdleWakers {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl IdleWakers {
    fn register(&mut self, slot: &mut Option<usize>, waker: &Waker) {
        match *slot {
            Some(i) => {
                if let Some(w) = &mut self.slots[i]
                    && !w.will_wake(waker)
                {
                    w.clone_from(waker);
                }
            }
            None => {
                let i = match self.free.pop() {
                    Some(i) => {
                        self.slots[i] = Some(waker.clone());
                        i
                    }
                    None => {
                        self.slots.push(Some(waker.clone()));
                        self.slots.len() - 1
                    }
                };
                *slot = Some(i);
            }
        }
    }

    fn remove(&mut self, i: usize) {
        self.slots[i] = None;
        self.free.push(i);
    }

    fn wake_all(&mut self) {
        for w in self.slots.iter().flatten() {
            w.wake_by_ref();
        }
    }
}
