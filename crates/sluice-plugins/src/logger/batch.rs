//! APISIX's batch processor, shared by every logger: entries leave the request at once into a
//! bounded queue of the logger's on the worker, and a task of the worker's (never awaited by a
//! request) sends them in batches of `batch_max_size`, once `inactive_timeout` passed without
//! a new entry or `buffer_duration` since the batch's first, retrying a failed batch
//! `max_retry_count` times `retry_delay` apart (from its first undelivered entry).
//!
//! Bounded: a queue holds at most `max_pending_entries` entries (buffered and being sent);
//! past that, entries are dropped, counted, and reported in the error log at most once a second
//! per logger and worker, with how many were dropped. While the server is only slow, nothing is
//! lost: batches wait for it (at most [`SENDING`] at once per logger and worker, so a stalled
//! server does not take a connection per batch) while the queue fills. A queue whose logger
//! left service (a reload) sends what it holds, then ends.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sluice_core::plugin::LocalFuture;
use tokio::sync::{Notify, Semaphore};

/// Batches of one queue being sent at once.
const SENDING: usize = 4;

/// How often an idle queue checks whether its logger is still in service.
const IDLE_CHECK: Duration = Duration::from_secs(10);

/// How often drops and failures are reported, at most, per logger and worker.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// Where a logger's batches go.
pub(crate) trait Sink: Send + Sync + 'static {
    /// Sends one batch (each entry one encoded log entry). Err: how many of the first entries
    /// were delivered anyway, and why the rest were not.
    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>>;
}

/// A batch not (wholly) delivered.
#[derive(Debug)]
pub(crate) struct Failed {
    /// Entries delivered from the start of the batch.
    pub(crate) delivered: usize,
    /// Why not the rest.
    pub(crate) why: String,
}

impl Failed {
    /// Nothing was delivered.
    pub(crate) fn all(why: impl Into<String>) -> Failed {
        Failed {
            delivered: 0,
            why: why.into(),
        }
    }
}

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
}

/// One worker's queue of a processor.
struct Local {
    entries: RefCell<VecDeque<Bytes>>,
    /// Entries buffered or being sent.
    pending: Cell<usize>,
    wake: Notify,
    /// When the buffered batch's first entry arrived, and its last.
    first_at: Cell<Instant>,
    last_at: Cell<Instant>,
    /// Drops not yet reported, and when they last were.
    unreported: Cell<u64>,
    reported_at: Cell<Option<Instant>>,
    /// Failures not yet reported, and when they last were.
    failures: Cell<u64>,
    failure_at: Cell<Option<Instant>>,
}

impl Processor {
    pub(crate) fn new(plugin: &'static str, batching: Batching, sink: Arc<dyn Sink>) -> Processor {
        Processor {
            id: NEXT_ID.fetch_add(1, Relaxed),
            plugin,
            stats: stats(plugin, &batching.name),
            batching,
            sink,
        }
    }

    /// Queues an entry on this worker (spawning the worker's sender for this logger on first
    /// use). Never waits.
    pub(crate) fn push(self: &Arc<Self>, entry: Bytes) {
        let local = QUEUES.with_borrow_mut(|q| {
            q.entry(self.id)
                .or_insert_with(|| {
                    let now = Instant::now();
                    let local = Rc::new(Local {
                        entries: RefCell::default(),
                        pending: Cell::new(0),
                        wake: Notify::new(),
                        first_at: Cell::new(now),
                        last_at: Cell::new(now),
                        unreported: Cell::new(0),
                        reported_at: Cell::new(None),
                        failures: Cell::new(0),
                        failure_at: Cell::new(None),
                    });
                    tokio::task::spawn_local(run(
                        Arc::downgrade(self),
                        self.clone_parts(),
                        local.clone(),
                    ));
                    local
                })
                .clone()
        });
        if local.pending.get() >= self.batching.max_pending {
            self.stats.dropped.fetch_add(1, Relaxed);
            local.unreported.set(local.unreported.get() + 1);
            if due(&local.reported_at) {
                tracing::error!(
                    logger = self.plugin,
                    name = %self.batching.name,
                    dropped = local.unreported.get(),
                    max_pending_entries = self.batching.max_pending,
                    "log entries dropped: the logger's queue is full (its server is down or slower than the traffic)"
                );
                local.unreported.set(0);
            }
            return;
        }
        let now = Instant::now();
        let mut entries = local.entries.borrow_mut();
        if entries.is_empty() {
            local.first_at.set(now);
        }
        local.last_at.set(now);
        entries.push_back(entry);
        let n = entries.len();
        drop(entries);
        local.pending.set(local.pending.get() + 1);
        self.stats.queued.fetch_add(1, Relaxed);
        // The sender waits for the first entry, then for a full batch or its timers.
        if n == 1 || n >= self.batching.max_size {
            local.wake.notify_one();
        }
    }

    fn clone_parts(&self) -> Parts {
        Parts {
            plugin: self.plugin,
            batching: self.batching.clone(),
            sink: self.sink.clone(),
            stats: self.stats.clone(),
            id: self.id,
        }
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

/// A worker's sender for one processor: forms batches and sends them on tasks of their own.
async fn run(processor: Weak<Processor>, p: Parts, local: Rc<Local>) {
    let sending = Arc::new(Semaphore::new(SENDING));
    loop {
        let retired = processor.strong_count() == 0;
        if local.entries.borrow().is_empty() {
            if retired {
                break;
            }
            let _ = tokio::time::timeout(IDLE_CHECK, local.wake.notified()).await;
            continue;
        }
        // Wait for a full batch, or for the batch's timers.
        loop {
            if local.entries.borrow().len() >= p.batching.max_size || processor.strong_count() == 0
            {
                break;
            }
            let deadline = (local.last_at.get() + p.batching.inactive)
                .min(local.first_at.get() + p.batching.buffer_duration);
            if Instant::now() >= deadline {
                break;
            }
            let _ = tokio::time::timeout_at(deadline.into(), local.wake.notified()).await;
        }
        let batch: Vec<Bytes> = {
            let mut entries = local.entries.borrow_mut();
            let n = entries.len().min(p.batching.max_size);
            let batch = entries.drain(..n).collect();
            if !entries.is_empty() {
                local.first_at.set(Instant::now());
            }
            batch
        };
        let Ok(permit) = sending.clone().acquire_owned().await else {
            break;
        };
        tokio::task::spawn_local(send(p.clone(), local.clone(), batch, permit));
    }
    // Retired and empty: what is being sent finishes on its own tasks.
    QUEUES.with_borrow_mut(|q| q.remove(&p.id));
}

/// Sends one batch, retrying as configured; counts what became of its entries.
async fn send(
    p: Parts,
    local: Rc<Local>,
    mut batch: Vec<Bytes>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    let total = batch.len();
    let mut tries = 0;
    loop {
        match p.sink.send(&batch).await {
            Ok(()) => {
                p.stats.sent.fetch_add(batch.len() as u64, Relaxed);
                break;
            }
            Err(f) => {
                let delivered = f.delivered.min(batch.len());
                p.stats.sent.fetch_add(delivered as u64, Relaxed);
                batch.drain(..delivered);
                let last = tries >= p.batching.retries || batch.is_empty();
                local.failures.set(local.failures.get() + 1);
                if due(&local.failure_at) {
                    tracing::error!(
                        logger = p.plugin,
                        name = %p.batching.name,
                        failures = local.failures.get(),
                        entries = batch.len(),
                        error = %f.why,
                        "{}",
                        if last {
                            "log entries not delivered; retries exhausted, dropping them"
                        } else {
                            "log entries not delivered; retrying"
                        }
                    );
                    local.failures.set(0);
                }
                if last {
                    p.stats.failed.fetch_add(batch.len() as u64, Relaxed);
                    break;
                }
                tries += 1;
                p.stats.retried.fetch_add(1, Relaxed);
                tokio::time::sleep(p.batching.retry_delay).await;
            }
        }
    }
    local.pending.set(local.pending.get() - total);
    p.stats.queued.fetch_sub(total as i64, Relaxed);
}
