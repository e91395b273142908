//! Request metrics, counted per worker and summed when scraped.
//!
//! Each worker writes only its own shard: its counters are atomics that one thread writes
//! (a relaxed load and store, which compile to plain moves: no lock prefix, no cache line
//! shared with another worker) and the scraper reads. Series with a label (route, upstream,
//! stream route, plugin) are created by the worker the first time it needs them, which takes
//! its shard's mutex once; after that the worker finds them in a vector of its own, indexed by
//! a slot the route or upstream caches. Label values are interned process-wide up to
//! `metrics.max_label_values`; later values share the `other` slot, and how many were folded
//! is counted (`sluice_metrics_label_overflow_total`).
//!
//! Written by hand rather than with the `prometheus` or `metrics` crates: both keep one set of
//! atomics per series shared by every thread (a contended cache line per request on a
//! multi-core gateway, kong#4979's problem), and the scrape side here is ~150 lines.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
pub use sluice_core::exposition::{Format, Writer};

use instruments::{BOUNDS_NS, HistSum};
pub(crate) use instruments::{Counter, Gauge, Histogram, now_ns};

mod instruments;
mod render;

/// Methods by class: GET HEAD POST PUT DELETE CONNECT OPTIONS TRACE PATCH PURGE, other.
const METHODS: [&str; 11] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "PURGE",
    "other",
];
const STATUSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

#[inline]
fn status_class(status: u16) -> usize {
    (usize::from(status / 100)).clamp(1, 5) - 1
}

/// The protocols a request can arrive by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Http1 = 0,
    Http2 = 1,
    Grpc = 2,
}
const PROTOS: [&str; 3] = ["http1", "http2", "grpc"];

/// One route's series in one worker.
#[derive(Debug, Default)]
pub(crate) struct RouteSeries {
    requests: [[Counter; 5]; 11],
    duration: Histogram,
    bytes_in: Counter,
    bytes_out: Counter,
}

/// One upstream's series in one worker.
#[derive(Debug, Default)]
pub(crate) struct UpstreamSeries {
    /// Answers by status class, plus requests no node answered (index 5).
    responses: [Counter; 6],
    duration: Histogram,
}

/// One stream route's series in one worker.
#[derive(Debug, Default)]
pub(crate) struct StreamSeries {
    sessions: Counter,
    active: Gauge,
    bytes_in: Counter,
    bytes_out: Counter,
}

/// One (route, model) pair's language-model exchanges in one worker (`ai-proxy`).
#[derive(Debug, Default)]
pub(crate) struct LlmSeries {
    /// By status class.
    requests: [Counter; 5],
    /// Prompt, completion, cached and reasoning tokens.
    tokens: [Counter; 4],
    /// From sending to the model to the answer's end.
    latency: Histogram,
    /// From sending to the model to the answer's first byte.
    first_token: Histogram,
}

/// The LLM series of one worker, by (route slot, model slot).
type LlmSeriesList = Vec<((u32, u32), Arc<LlmSeries>)>;

/// An LLM series summed over workers: requests by status class, tokens by kind, latency,
/// time to the first token.
type LlmSum = ([u64; 5], [u64; 4], HistSum, HistSum);

/// The kinds of tokens, as `sluice_llm_tokens_total` labels them.
const TOKEN_KINDS: [&str; 4] = ["prompt", "completion", "cached", "reasoning"];

/// Connections of one listener in one worker.
#[derive(Debug, Default)]
pub(crate) struct ConnGauges {
    /// Open, by protocol (http1, http2).
    pub(crate) open: [Gauge; 2],
    /// Waiting for a request, by protocol.
    pub(crate) idle: [Gauge; 2],
}

/// What one worker counts; written by that worker only.
#[derive(Debug)]
pub(crate) struct Shard {
    routes: Mutex<Vec<(u32, Arc<RouteSeries>)>>,
    upstreams: Mutex<Vec<(u32, Arc<UpstreamSeries>)>>,
    streams: Mutex<Vec<(u32, Arc<StreamSeries>, &'static str)>>,
    rejections: Mutex<Vec<(&'static str, u16, Arc<Counter>)>>,
    /// By (route slot, model slot).
    llm: Mutex<LlmSeriesList>,
    pub(crate) protocols: [Counter; 3],
    pub(crate) inflight: Gauge,
    pub(crate) conns: Box<[ConnGauges]>,
    pub(crate) tls_ok: Counter,
    pub(crate) tls_failed: Counter,
}

/// Label values interned process-wide, up to a cap.
#[derive(Debug)]
struct Labels {
    slots: Mutex<LabelTable>,
}

#[derive(Debug, Default)]
struct LabelTable {
    index: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
    folded: HashSet<Box<str>>,
    /// Values folded after `folded` stopped remembering them (bounded memory).
    folded_more: u64,
}

/// The slot of values beyond the cap.
pub(crate) const OTHER: u32 = 0;
/// Not yet looked up (cached in routes and upstreams).
pub(crate) const UNSET: u32 = u32::MAX;

impl Labels {
    fn new() -> Labels {
        let mut t = LabelTable::default();
        t.names.push("other".into());
        t.index.insert("other".into(), OTHER);
        Labels {
            slots: Mutex::new(t),
        }
    }

    fn intern(&self, name: &str, cap: u32) -> u32 {
        let mut t = self.slots.lock();
        if let Some(&i) = t.index.get(name) {
            return i;
        }
        if t.names.len() as u32 > cap {
            if t.folded.len() < 100_000 {
                t.folded.insert(name.into());
            } else if !t.folded.contains(name) {
                t.folded_more += 1;
            }
            return OTHER;
        }
        let i = t.names.len() as u32;
        t.names.push(name.into());
        t.index.insert(name.into(), i);
        i
    }

    fn names(&self) -> (Vec<Box<str>>, u64) {
        let t = self.slots.lock();
        (t.names.clone(), t.folded.len() as u64 + t.folded_more)
    }
}

/// The process's metrics: every worker's shard and the label tables.
#[derive(Debug)]
pub struct Metrics {
    enabled: bool,
    cap: u32,
    routes: Labels,
    upstreams: Labels,
    streams: Labels,
    /// Language models' names (`sluice_llm_*`).
    models: Labels,
    shards: Mutex<Vec<Arc<Shard>>>,
    listeners: Box<[String]>,
    started: SystemTime,
    /// The slot of requests no route matched.
    no_route: Slot,
}

impl Metrics {
    pub(crate) fn new(cfg: &sluice_config::MetricsConfig, listeners: Vec<String>) -> Metrics {
        Metrics {
            enabled: cfg.enabled,
            cap: cfg.max_label_values,
            routes: Labels::new(),
            upstreams: Labels::new(),
            streams: Labels::new(),
            models: Labels::new(),
            shards: Mutex::new(Vec::new()),
            listeners: listeners.into(),
            started: SystemTime::now(),
            no_route: Slot::default(),
        }
    }

    /// Whether requests are counted.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// A new worker's view.
    pub(crate) fn worker(self: &Arc<Self>) -> WorkerMetrics {
        let shard = Arc::new(Shard {
            routes: Mutex::default(),
            upstreams: Mutex::default(),
            streams: Mutex::default(),
            rejections: Mutex::default(),
            llm: Mutex::default(),
            protocols: Default::default(),
            inflight: Gauge::default(),
            conns: (0..self.listeners.len())
                .map(|_| ConnGauges::default())
                .collect(),
            tls_ok: Counter::default(),
            tls_failed: Counter::default(),
        });
        self.shards.lock().push(shard.clone());
        WorkerMetrics {
            global: self.clone(),
            shard,
            routes: RefCell::default(),
            upstreams: RefCell::default(),
            streams: Default::default(),
            rejections: RefCell::default(),
            llm: RefCell::default(),
            models: RefCell::default(),
        }
    }
}

/// One worker's handle: its shard, and its own index of the series it created.
#[derive(Debug)]
pub(crate) struct WorkerMetrics {
    global: Arc<Metrics>,
    pub(crate) shard: Arc<Shard>,
    routes: RefCell<Vec<Option<Arc<RouteSeries>>>>,
    upstreams: RefCell<Vec<Option<Arc<UpstreamSeries>>>>,
    /// By protocol (TCP, UDP): two routes folded into `other` keep their protocols apart.
    streams: [RefCell<Vec<Option<Arc<StreamSeries>>>>; 2],
    rejections: RefCell<Vec<(&'static str, u16, Arc<Counter>)>>,
    llm: RefCell<LlmSeriesList>,
    /// Model names' slots this worker looked up (the shared table is locked once per name).
    models: RefCell<HashMap<Box<str>, u32>>,
}

/// A slot cached by a route or an upstream (`UNSET` until first used).
#[derive(Debug)]
pub(crate) struct Slot(AtomicU32);

impl Default for Slot {
    fn default() -> Self {
        Slot(AtomicU32::new(UNSET))
    }
}

impl Slot {
    /// Counted under `other` from the start (a route opted out of its own label).
    pub(crate) fn other() -> Slot {
        Slot(AtomicU32::new(OTHER))
    }
}

/// Finds or creates the series of `slot` in a worker's index and shard.
fn series<T: Default>(
    local: &RefCell<Vec<Option<Arc<T>>>>,
    shard: &Mutex<Vec<(u32, Arc<T>)>>,
    slot: u32,
) -> Arc<T> {
    let mut l = local.borrow_mut();
    if let Some(Some(s)) = l.get(slot as usize) {
        return s.clone();
    }
    let s = Arc::new(T::default());
    shard.lock().push((slot, s.clone()));
    if l.len() <= slot as usize {
        l.resize(slot as usize + 1, None);
    }
    l[slot as usize] = Some(s.clone());
    s
}

impl WorkerMetrics {
    pub(crate) fn enabled(&self) -> bool {
        self.global.enabled
    }

    #[inline]
    fn slot(&self, cached: &Slot, labels: &Labels, name: &str) -> u32 {
        let s = cached.0.load(Relaxed);
        if s != UNSET {
            return s;
        }
        let s = labels.intern(name, self.global.cap);
        cached.0.store(s, Relaxed);
        s
    }

    /// Counts one request. `route`: its id and cached slot (`None`: no route matched).
    #[inline]
    pub(crate) fn request(&self, r: &Request<'_>) {
        let slot = match r.route {
            Some((id, cached)) => self.slot(cached, &self.global.routes, id),
            None => self.slot(&self.global.no_route, &self.global.routes, ""),
        };
        // The common case: the series exists. Looked up without cloning its `Arc`.
        {
            let l = self.routes.borrow();
            if let Some(Some(s)) = l.get(slot as usize) {
                record_route(s, r);
            } else {
                drop(l);
                record_route(&series(&self.routes, &self.shard.routes, slot), r);
            }
        }
        self.shard.protocols[r.proto as usize].add(1);
        if let Some((label, cached, answer)) = r.upstream {
            let slot = self.slot(cached, &self.global.upstreams, label);
            let l = self.upstreams.borrow();
            if let Some(Some(s)) = l.get(slot as usize) {
                record_upstream(s, answer);
            } else {
                drop(l);
                record_upstream(
                    &series(&self.upstreams, &self.shard.upstreams, slot),
                    answer,
                );
            }
        }
    }

    /// Counts a request a plugin answered itself (limits, auth, ip-restriction, breaker).
    pub(crate) fn rejected(&self, plugin: &'static str, status: u16) {
        let mut l = self.rejections.borrow_mut();
        if let Some((_, _, c)) = l
            .iter()
            .find(|(p, s, _)| std::ptr::eq(*p, plugin) && *s == status)
        {
            c.add(1);
            return;
        }
        let c = Arc::new(Counter::default());
        c.add(1);
        self.shard
            .rejections
            .lock()
            .push((plugin, status, c.clone()));
        l.push((plugin, status, c));
    }

    /// Counts an exchange with a language model (`ai-proxy`, `ai-proxy-multi`) of a route.
    #[cold]
    #[inline(never)]
    pub(crate) fn llm(&self, route: Option<(&str, &Slot)>, r: &sluice_core::llm::LlmRecord) {
        let route = match route {
            Some((id, cached)) => self.slot(cached, &self.global.routes, id),
            None => self.slot(&self.global.no_route, &self.global.routes, ""),
        };
        let name = r.model.as_deref().unwrap_or("");
        let model = {
            let mut m = self.models.borrow_mut();
            match m.get(name) {
                Some(s) => *s,
                None => {
                    let s = self.global.models.intern(name, self.global.cap);
                    m.insert(name.into(), s);
                    s
                }
            }
        };
        let key = (route, model);
        let mut l = self.llm.borrow_mut();
        let s = match l.iter().find(|(k, _)| *k == key) {
            Some((_, s)) => s.clone(),
            None => {
                let s = Arc::new(LlmSeries::default());
                self.shard.llm.lock().push((key, s.clone()));
                l.push((key, s.clone()));
                s
            }
        };
        s.requests[status_class(r.status)].add(1);
        let u = &r.usage;
        for (c, n) in s
            .tokens
            .iter()
            .zip([u.prompt, u.completion, u.cached, u.reasoning])
        {
            c.add(n);
        }
        if let Some(ms) = r.latency_ms {
            s.latency.observe(ms.saturating_mul(1_000_000));
        }
        if let Some(ms) = r.first_token_ms {
            s.first_token.observe(ms.saturating_mul(1_000_000));
        }
    }

    /// A stream route session's series (`proto`: `tcp` or `udp`).
    pub(crate) fn stream(&self, id: &str, cached: &Slot, proto: &'static str) -> Arc<StreamSeries> {
        let slot = self.slot(cached, &self.global.streams, id);
        let mut l = self.streams[usize::from(proto == "udp")].borrow_mut();
        if let Some(Some(s)) = l.get(slot as usize) {
            return s.clone();
        }
        let s = Arc::new(StreamSeries::default());
        self.shard.streams.lock().push((slot, s.clone(), proto));
        if l.len() <= slot as usize {
            l.resize(slot as usize + 1, None);
        }
        l[slot as usize] = Some(s.clone());
        s
    }
}

impl StreamSeries {
    pub(crate) fn opened(&self) {
        self.sessions.add(1);
        self.active.add(1);
    }

    pub(crate) fn closed(&self, bytes_in: u64, bytes_out: u64) {
        self.active.add(-1);
        self.bytes_in.add(bytes_in);
        self.bytes_out.add(bytes_out);
    }
}

/// A node's answer: its status and the nanoseconds to its response head (`None`: none).
pub(crate) type Answer = Option<(u16, u64)>;

/// A route's series summed over workers.
type RouteSum = (Vec<[u64; 5]>, HistSum, u64, u64);

/// What is counted of one request.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub(crate) proto: Proto,
    pub(crate) route: Option<(&'a str, &'a Slot)>,
    pub(crate) method: sluice_router::Method,
    pub(crate) status: u16,
    /// Nanoseconds from the request's first byte to its last response byte.
    pub(crate) elapsed_ns: u64,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
    /// The upstream's label and slot, and its answer: status and time to its head (`None`:
    /// no node answered).
    pub(crate) upstream: Option<(&'a str, &'a Slot, Answer)>,
}

#[inline]
fn record_route(s: &RouteSeries, r: &Request<'_>) {
    s.requests[r.method as usize][status_class(r.status)].add(1);
    s.duration.observe(r.elapsed_ns);
    s.bytes_in.add(r.bytes_in);
    s.bytes_out.add(r.bytes_out);
}

#[inline]
fn record_upstream(s: &UpstreamSeries, answer: Answer) {
    match answer {
        Some((status, took)) => {
            s.responses[status_class(status)].add(1);
            s.duration.observe(took);
        }
        None => s.responses[5].add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::render::LES;
    use super::*;

    #[test]
    fn histogram_buckets_and_sum() {
        let h = Histogram::default();
        h.observe(400_000);
        h.observe(500_000);
        h.observe(3_000_000);
        h.observe(60_000_000_000);
        let mut s = HistSum::default();
        s.add(&h);
        assert_eq!(s.buckets[0], 2);
        assert_eq!(s.buckets[3], 1);
        assert_eq!(s.buckets[14], 1);
        assert_eq!(s.sum_us, 400 + 500 + 3_000 + 60_000_000);
    }

    #[test]
    fn le_labels_match_the_bounds() {
        for (b, le) in BOUNDS_NS.iter().zip(LES) {
            assert_eq!(format!("{}", *b as f64 / 1e9), le);
        }
    }

    #[test]
    fn labels_fold_beyond_the_cap_and_count_each_value_once() {
        let l = Labels::new();
        assert_eq!(l.intern("a", 2), 1);
        assert_eq!(l.intern("b", 2), 2);
        assert_eq!(l.intern("c", 2), OTHER);
        assert_eq!(l.intern("c", 2), OTHER);
        assert_eq!(l.intern("d", 2), OTHER);
        assert_eq!(l.intern("a", 2), 1);
        // "other" itself is the overflow slot: a route named so shares it.
        assert_eq!(l.intern("other", 2), OTHER);
        let (names, folded) = l.names();
        assert_eq!(names.len(), 3);
        assert_eq!(folded, 2);
    }

    #[test]
    fn status_classes() {
        assert_eq!(status_class(101), 0);
        assert_eq!(status_class(200), 1);
        assert_eq!(status_class(499), 3);
        assert_eq!(status_class(599), 4);
        assert_eq!(status_class(0), 0);
        assert_eq!(status_class(999), 4);
    }
}
