//! APISIX's batch processor, shared by every logger: entries leave the request at once into a
//! bounded queue of the logger's on the worker, and a task of the worker's (never awaited by a
//! request) sends them in batches of `batch_max_size`, once `inactive_timeout` passed without
//! a new entry or `buffer_duration` since the batch's first, retrying a failed batch
//! `max_retry_count` times `retry_delay` apart (from its first undelivered entry).
//!
//! Bounded: each worker keeps at most `max_pending_entries` entries (buffered and being sent)
//! per plugin, summed over its routes' queues (as APISIX's manager counts them); past that,
//! entries are dropped, counted, and reported in the error log at most once a second per
//! logger and worker, with how many were dropped. While the server is only slow, nothing is
//! lost: batches wait for it (at most [`SENDING`] at once per logger and worker, so a stalled
//! server does not take a connection per batch) while the queue fills. A queue whose logger
//! left service (a reload) sends what it holds, then ends; when the worker stops, every queue
//! sends what it holds by the drain's deadline.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::sink::Sink;

/// Batches of one queue being sent at once.
const SENDING: usize = 4;

/// How often an idle queue checks whether its logger is still in service.
const IDLE_CHECK: Duration = Duration::from_secs(10);

/// How often drops and failures are reported, at most, per logger and worker.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// The batch processor's settings (APISIX's fields, in seconds where APISIX has seconds).
#[derive(Debug, Clone)]
pub(crate) struct Batching {
    pub(crate) name: String,
    pub(crate) max_size: usize,
    pub(crate) inactive: Duration,
    pub(crate) buffer_duration: Duration,
    pub(crate) retries: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) max_pending: usize,
    /// The most bytes of entries waiting per worker (syslog's `drop_limit`).
    pub(crate) max_pending_bytes: usize,
}

/// What a logger's queues count, summed over workers and kept across reloads, by plugin and
/// batch processor `name` (`sluice_logger_*` metrics).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) sent: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) queued: AtomicI64,
}

type StatsTable = Vec<((&'static str, String), Arc<Stats>)>;

/// Every logger's counters (written when configurations compile, read when scraped).
static STATS: parking_lot::Mutex<StatsTable> = parking_lot::Mutex::new(Vec::new());

/// The counters of `plugin`'s batch processor `name`.
pub(crate) fn stats(plugin: &'static str, name: &str) -> Arc<Stats> {
    let mut t = STATS.lock();
    if let Some((_, s)) = t.iter().find(|((p, n), _)| *p == plugin && n == name) {
        return s.clone();
    }
    let s = Arc::new(Stats::default());
    t.push(((plugin, name.to_owned()), s.clone()));
    s
}

/// Writes the loggers' metric families.
pub fn render_metrics(w: &mut sluice_core::exposition::Writer<'_>) {
    let t = STATS.lock();
    if t.is_empty() {
        return;
    }
    w.family(
        "sluice_logger_entries_total",
        "counter",
        "Log entries of the loggers' batch processors, by result (sent; dropped: the queue was full; failed: retries exhausted).",
    );
    for ((plugin, name), s) in t.iter() {
        for (result, n) in [
            ("sent", &s.sent),
            ("dropped", &s.dropped),
            ("failed", &s.failed),
        ] {
            w.sample(
                "sluice_logger_entries_total",
                &[("plugin", plugin), ("name", name), ("result", result)],
                n.load(Relaxed),
            );
        }
    }
    w.family(
        "sluice_logger_retries_total",
        "counter",
        "Batches the loggers sent again after a failure.",
    );
    for ((plugin, name), s) in t.iter() {
        w.sample(
            "sluice_logger_retries_total",
            &[("plugin", plugin), ("name", name)],
            s.retried.load(Relaxed),
        );
    }
    w.family(
        "sluice_logger_queue_entries",
        "gauge",
        "Log entries waiting in the loggers' queues (buffered or being sent), summed over workers.",
    );
    for ((plugin, name), s) in t.iter() {
        w.sample(
            "sluice_logger_queue_entries",
            &[("plugin", plugin), ("name", name)],
            s.queued.load(Relaxed).max(0) as u64,
        );
    }
}

/// One logger instance's batch processor: its settings, its sink and its counters. Each worker
/// has its own queue for it ([`Local`]).
pub(crate) struct Processor {
    id: u64,
    plugin: &'static str,
    batching: Batching,
    sink: Arc<dyn Sink>,
    stats: Arc<Stats>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This worker's queues, by processor id.
    static QUEUES: RefCell<FxHashMap<u64, Rc<Local>>> = RefCell::new(FxHashMap::default());
    /// Entries waiting on this worker, by plugin (over all its queues).
    static PENDING: RefCell<FxHashMap<&'static str, Rc<Cell<usize>>>> =
        RefCell::new(FxHashMap::default());
    /// The worker stops: queues send what they hold at once.
    static STOPPING: Cell<bool> = const { Cell::new(false) };
}

/// One worker's queue of a processor.
struct Local {
    /// Entries with the time each arrived.
    entries: RefCell<VecDeque<(Instant, Bytes)>>,
    /// The plugin's entries waiting on this worker (shared by its queues).
    plugin_pending: Rc<Cell<usize>>,
    /// This queue's entries waiting (buffered or being sent), and their bytes.
    pending: Cell<usize>,
    pending_bytes: Cell<usize>,
    wake: Notify,
    /// When the last entry arrived.
    last_at: Cell<Instant>,
    /// Drops not yet reported, and when they last were.
    unreported: Cell<u64>,
    reported_at: Cell<Option<Instant>>,
    /// Failures not yet reported (and the last one's words), and when they last were.
    failures: Cell<u64>,
    failure: RefCell<String>,
    failure_at: Cell<Option<Instant>>,
}

impl Processor {
    pub(crate) fn new(plugin: &'static str, batching: Batching, sink: Arc<dyn Sink>) -> Processor {
        sluice_core::plugin::on_worker_stop(stopping);
        Processor {
            id: NEXT_ID.fetch_add(1, Relaxed),
            plugin,
            stats: stats(plugin, &batching.name),
            batching,
            sink,
        }
    }

    /// Its sink.
    pub(crate) fn sink(&self) -> &dyn Sink {
        &*self.sink
    }

    /// Tells this processor from the others (a request's loggers keep their captures by it).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// This processor's queue on this worker, made (with its sender) on first use.
    fn local(self: &Arc<Self>) -> Rc<Local> {
        QUEUES.with_borrow_mut(|q| {
            q.entry(self.id)
                .or_insert_with(|| {
                    let plugin_pending =
                        PENDING.with_borrow_mut(|p| p.entry(self.plugin).or_default().clone());
                    let local = Rc::new(Local {
                        entries: RefCell::default(),
                        plugin_pending,
                        pending: Cell::new(0),
                        pending_bytes: Cell::new(0),
                        wake: Notify::new(),
                        last_at: Cell::new(Instant::now()),
                        unreported: Cell::new(0),
                        reported_at: Cell::new(None),
                        failures: Cell::new(0),
                        failure: RefCell::default(),
                        failure_at: Cell::new(None),
                    });
                    let parts = Parts {
                        plugin: self.plugin,
                        batching: self.batching.clone(),
                        sink: self.sink.clone(),
                        stats: self.stats.clone(),
                        id: self.id,
                    };
                    tokio::task::spawn_local(run(Arc::downgrade(self), parts, local.clone()));
                    local
                })
                .clone()
        })
    }

    /// Queues an entry on this worker. Never waits.
    pub(crate) fn push(self: &Arc<Self>, entry: Bytes) {
        let local = self.local();
        if local.plugin_pending.get() >= self.batching.max_pending
            || local.pending_bytes.get() + entry.len() > self.batching.max_pending_bytes
        {
            self.stats.dropped.fetch_add(1, Relaxed);
            local.unreported.set(local.unreported.get() + 1);
            report_drops(&local, self.plugin, &self.batching);
            return;
        }
        let now = Instant::now();
        local
            .pending_bytes
            .set(local.pending_bytes.get() + entry.len());
        local.last_at.set(now);
        let n = {
            let mut entries = local.entries.borrow_mut();
            entries.push_back((now, entry));
            entries.len()
        };
        local.pending.set(local.pending.get() + 1);
        local.plugin_pending.set(local.plugin_pending.get() + 1);
        self.stats.queued.fetch_add(1, Relaxed);
        // The sender waits for the first entry, then for a full batch or its timers.
        if n == 1 || n >= self.batching.max_size {
            local.wake.notify_one();
        }
    }
}

/// Reports the drops not yet in the error log, when a report is due.
fn report_drops(local: &Local, plugin: &str, batching: &Batching) {
    if local.unreported.get() > 0 && due(&local.reported_at) {
        tracing::error!(
            logger = plugin,
            name = %batching.name,
            dropped = local.unreported.get(),
            max_pending_entries = batching.max_pending,
            "log entries dropped: the logger's queue is full (its server is down or slower than the traffic)"
        );
        local.unreported.set(0);
    }
}

/// Reports the failures not yet in the error log, when a report is due.
fn report_failures(local: &Local, plugin: &str, batching: &Batching) {
    if local.failures.get() > 0 && due(&local.failure_at) {
        tracing::error!(
            logger = plugin,
            name = %batching.name,
            failures = local.failures.get(),
            error = %local.failure.borrow(),
            "log batches not delivered (retried as max_retry_count says, then dropped)"
        );
        local.failures.set(0);
    }
}

/// True when a report is due (and marks it made).
fn due(at: &Cell<Option<Instant>>) -> bool {
    let now = Instant::now();
    if at
        .get()
        .is_some_and(|t| now.duration_since(t) < REPORT_EVERY)
    {
        return false;
    }
    at.set(Some(now));
    true
}

/// What a worker's sender keeps of its processor (not the processor itself: a reload that
/// retires it must be seen).
#[derive(Clone)]
struct Parts {
    plugin: &'static str,
    batching: Batching,
    sink: Arc<dyn Sink>,
    stats: Arc<Stats>,
    id: u64,
}

/// Forgets a queue whose sender ended (retired, or its runtime stopped): a later entry makes
/// a new one rather than waiting in a queue nobody sends.
struct Forget(u64);

impl Drop for Forget {
    fn drop(&mut self) {
        let _ = QUEUES.try_with(|q| {
            if let Ok(mut q) = q.try_borrow_mut() {
                q.remove(&self.0);
            }
        });
    }
}

/// A worker's sender for one processor: forms batches and sends them on tasks of their own.
async fn run(processor: Weak<Processor>, p: Parts, local: Rc<Local>) {
    let _forget = Forget(p.id);
    let sending = Arc::new(Semaphore::new(SENDING));
    loop {
        report_drops(&local, p.plugin, &p.batching);
        report_failures(&local, p.plugin, &p.batching);
        let retired = processor.strong_count() == 0 || STOPPING.get();
        if local.entries.borrow().is_empty() {
            if retired {
                break;
            }
            // Unreported counts are reported within a second, even with no new entry.
            let wait = if local.unreported.get() > 0 || local.failures.get() > 0 {
                REPORT_EVERY
            } else {
                IDLE_CHECK
            };
            let _ = tokio::time::timeout(wait, local.wake.notified()).await;
            continue;
        }
        // Wait for a full batch, or for the batch's timers.
        loop {
            if local.entries.borrow().len() >= p.batching.max_size
                || processor.strong_count() == 0
                || STOPPING.get()
            {
                break;
            }
            let Some(first) = local.entries.borrow().front().map(|e| e.0) else {
                break;
            };
            let deadline =
                (local.last_at.get() + p.batching.inactive).min(first + p.batching.buffer_duration);
            if Instant::now() >= deadline {
                break;
            }
            let _ = tokio::time::timeout_at(deadline, local.wake.notified()).await;
        }
        let batch: Vec<Bytes> = {
            let mut entries = local.entries.borrow_mut();
            let n = entries.len().min(p.batching.max_size);
            entries.drain(..n).map(|e| e.1).collect()
        };
        let Ok(permit) = sending.clone().acquire_owned().await else {
            break;
        };
        tokio::task::spawn_local(send(
            p.clone(),
            local.clone(),
            batch,
            sending.clone(),
            permit,
        ));
    }
}

/// Gives back what a batch held of the queue's bounds, however its sending ends.
struct Settle {
    local: Rc<Local>,
    stats: Arc<Stats>,
    entries: usize,
    bytes: usize,
}

impl Drop for Settle {
    fn drop(&mut self) {
        let l = &self.local;
        l.pending.set(l.pending.get().saturating_sub(self.entries));
        l.pending_bytes
            .set(l.pending_bytes.get().saturating_sub(self.bytes));
        l.plugin_pending
            .set(l.plugin_pending.get().saturating_sub(self.entries));
        self.stats.queued.fetch_sub(self.entries as i64, Relaxed);
    }
}

/// Sends one batch, retrying as configured (giving its sending slot back while it waits to
/// retry); counts what became of its entries.
async fn send(
    p: Parts,
    local: Rc<Local>,
    mut batch: Vec<Bytes>,
    sending: Arc<Semaphore>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let _settle = Settle {
        local: local.clone(),
        stats: p.stats.clone(),
        entries: batch.len(),
        bytes: batch.iter().map(Bytes::len).sum(),
    };
    let mut permit = Some(permit);
    let mut tries = 0;
    loop {
        if permit.is_none() {
            match sending.clone().acquire_owned().await {
                Ok(p) => permit = Some(p),
                Err(_) => return,
            }
        }
        match p.sink.send(&batch).await {
            Ok(()) => {
                p.stats.sent.fetch_add(batch.len() as u64, Relaxed);
                return;
            }
            Err(f) => {
                let delivered = f.delivered.min(batch.len());
                p.stats.sent.fetch_add(delivered as u64, Relaxed);
                batch.drain(..delivered);
                local.failures.set(local.failures.get() + 1);
                *local.failure.borrow_mut() = f.why;
                report_failures(&local, p.plugin, &p.batching);
                if tries >= p.batching.retries || batch.is_empty() || STOPPING.get() {
                    p.stats.failed.fetch_add(batch.len() as u64, Relaxed);
                    return;
                }
                tries += 1;
                p.stats.retried.fetch_add(1, Relaxed);
                drop(permit.take());
                tokio::time::sleep(p.batching.retry_delay).await;
            }
        }
    }
}

/// The worker stops: every queue sends what it holds now, and this waits until they are
/// empty or `deadline` passed.
fn stopping(deadline: std::time::Instant) -> sluice_core::plugin::LocalFuture<'static, ()> {
    Box::pin(async move {
        STOPPING.set(true);
        let queues: Vec<Rc<Local>> = QUEUES.with_borrow(|q| q.values().cloned().collect());
        for q in &queues {
            q.wake.notify_one();
        }
        let until = Instant::from_std(deadline);
        while queues.iter().any(|q| q.pending.get() > 0) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let left: usize = queues.iter().map(|q| q.pending.get()).sum();
        if left > 0 {
            tracing::warn!(
                entries = left,
                "log entries not delivered before the worker stopped"
            );
        }
    })
}
