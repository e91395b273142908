//! The health table: one entry per (upstream, node address) in the node process, shared by
//! every worker and by the active checkers. Read on every pick without a lock (one relaxed
//! atomic load while the node is healthy, and no clock read); written only by outcomes that
//! change something (a failure, the first success after failures, a transition).
//!
//! Entries live in a process-wide registry keyed by the upstream's identity and the node's
//! address, held weakly: a reload that keeps a node hands its compiled node the same entry, so
//! its state and counters survive (apisix#13282 lost them); a node added later starts healthy;
//! an entry goes away with the last snapshot that uses it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Milliseconds since this process's first use of the health table: the clock of `retry_at`.
fn now_ms() -> u64 {
    static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
    // +1 so that 0 can mean "no time set".
    EPOCH.elapsed().as_millis() as u64 + 1
}

/// Why a node changed state, for its health view and the error log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Cause {
    /// Traffic: connect failures, timeouts, or statuses counted as failures.
    Passive,
    /// The active checker's probes.
    Active,
    /// The node's host name does not resolve (DNS discovery).
    Unresolved,
}

impl Cause {
    fn as_str(self) -> &'static str {
        match self {
            Cause::Passive => "passive",
            Cause::Active => "active",
            Cause::Unresolved => "dns",
        }
    }
}

/// One node's shared health.
#[derive(Debug, Default)]
pub(crate) struct NodeHealth {
    /// Out of rotation. The only field a pick reads while the node is healthy.
    down: AtomicBool,
    /// While down: what took it out ([`Cause`] as a number).
    cause: AtomicU8,
    /// While down: when (see [`now_ms`]) traffic may try the node again (0: only a checker
    /// brings it back).
    retry_at: AtomicU64,
    /// Consecutive outcomes since the last state change, by kind.
    pub(crate) successes: AtomicU32,
    pub(crate) tcp_failures: AtomicU32,
    pub(crate) http_failures: AtomicU32,
    pub(crate) timeouts: AtomicU32,
    /// What the health view shows; written on failures and transitions only.
    detail: Mutex<Detail>,
}

#[derive(Debug, Default, Clone)]
struct Detail {
    last_failure: Option<(SystemTime, String)>,
    since: Option<SystemTime>,
    cause: Option<Cause>,
    transitions: u64,
}

/// What `GET /admin/upstreams/<id>/health` shows of a node.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NodeReport {
    /// The node as configured (`host:port`).
    pub node: String,
    /// The address traffic goes to (`-` while its name does not resolve).
    pub address: String,
    /// `healthy` or `unhealthy`.
    pub state: &'static str,
    /// What took it out of rotation: `passive`, `active` or `dns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
    /// Seconds since the Unix epoch of the last state change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Consecutive successes, TCP failures, HTTP failures and timeouts since the last change.
    pub successes: u32,
    /// Consecutive connection failures.
    pub tcp_failures: u32,
    /// Consecutive responses with an unhealthy status.
    pub http_failures: u32,
    /// Consecutive timeouts.
    pub timeouts: u32,
    /// The last failure: when (seconds since the Unix epoch) and what.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<(u64, String)>,
    /// State changes since the node entered the table.
    pub transitions: u64,
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl NodeHealth {
    /// In rotation now? Reads the clock only while the node is down.
    #[inline]
    pub(crate) fn available(&self) -> bool {
        if !self.down.load(Relaxed) {
            return true;
        }
        let at = self.retry_at.load(Relaxed);
        at != 0 && now_ms() >= at
    }

    #[inline]
    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Relaxed)
    }

    /// Takes the node out of rotation; `retry_after`: when traffic may try it again (None:
    /// only a checker brings it back). Returns true when this changed its state.
    /// A node already down keeps its cause and retry time (traffic must not turn "only the
    /// checker brings it back" into "try again in 10 s").
    pub(crate) fn mark_down(&self, cause: Cause, retry_after: Option<Duration>, why: &str) -> bool {
        // One caller wins the change (workers and the checker may race).
        let was = self
            .down
            .compare_exchange(false, true, Relaxed, Relaxed)
            .is_err();
        if !was {
            let at = retry_after.map_or(0, |d| now_ms() + d.as_millis() as u64);
            self.retry_at.store(at, Relaxed);
            self.cause.store(cause as u8, Relaxed);
        }
        let mut d = self.detail.lock();
        d.last_failure = Some((SystemTime::now(), why.to_owned()));
        if !was {
            d.since = Some(SystemTime::now());
            d.cause = Some(cause);
            d.transitions += 1;
            self.reset_counters();
        }
        !was
    }

    /// Puts the node back in rotation. Returns true when this changed its state.
    pub(crate) fn mark_up(&self) -> bool {
        if !self.down.swap(false, Relaxed) {
            return false;
        }
        self.retry_at.store(0, Relaxed);
        let mut d = self.detail.lock();
        d.since = Some(SystemTime::now());
        d.cause = None;
        d.transitions += 1;
        self.reset_counters();
        true
    }

    /// Records a failure's description without changing the state.
    pub(crate) fn note_failure(&self, why: &str) {
        let mut d = self.detail.lock();
        d.last_failure = Some((SystemTime::now(), why.to_owned()));
    }

    /// Down, and taken out by `cause`.
    #[inline]
    pub(crate) fn down_by(&self, cause: Cause) -> bool {
        self.down.load(Relaxed) && self.cause.load(Relaxed) == cause as u8
    }

    /// While down because of traffic, lets traffic try the node again after `after` (a
    /// half-open probe).
    pub(crate) fn retry_later(&self, after: Duration) {
        if self.down_by(Cause::Passive) {
            self.retry_at
                .store(now_ms() + after.as_millis() as u64, Relaxed);
        }
    }

    /// Clears the failure counts, writing only those that are not zero (a healthy node's
    /// answers then write nothing shared).
    #[inline]
    pub(crate) fn clear_failures(&self) {
        for c in [&self.tcp_failures, &self.http_failures, &self.timeouts] {
            if c.load(Relaxed) != 0 {
                c.store(0, Relaxed);
            }
        }
    }

    fn reset_counters(&self) {
        for c in [
            &self.successes,
            &self.tcp_failures,
            &self.http_failures,
            &self.timeouts,
        ] {
            c.store(0, Relaxed);
        }
    }

    /// Adds one to a counter and returns the new value; clears the successes (a failure) or
    /// the failures (a success) only when they are not already zero.
    pub(crate) fn count(&self, which: &AtomicU32) -> u32 {
        let others: [&AtomicU32; 4] = [
            &self.successes,
            &self.tcp_failures,
            &self.http_failures,
            &self.timeouts,
        ];
        let success = std::ptr::eq(which, &self.successes);
        for c in others {
            if std::ptr::eq(c, which) {
                continue;
            }
            // A success clears the failures; a failure clears the successes only.
            if (success || std::ptr::eq(c, &self.successes)) && c.load(Relaxed) != 0 {
                c.store(0, Relaxed);
            }
        }
        which.fetch_add(1, Relaxed).saturating_add(1)
    }

    /// The health view of this node.
    pub(crate) fn report(&self, node: &str, address: Option<SocketAddr>) -> NodeReport {
        let d = self.detail.lock().clone();
        let down = self.is_down();
        NodeReport {
            node: node.to_owned(),
            address: address.map_or_else(|| "-".to_owned(), |a| a.to_string()),
            state: if down { "unhealthy" } else { "healthy" },
            cause: if down {
                d.cause.map(Cause::as_str)
            } else {
                None
            },
            since: d.since.map(unix),
            successes: self.successes.load(Relaxed),
            tcp_failures: self.tcp_failures.load(Relaxed),
            http_failures: self.http_failures.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            last_failure: d.last_failure.map(|(t, w)| (unix(t), w)),
            transitions: d.transitions,
        }
    }
}

/// The key of a health entry: the upstream's identity (its id, or for an inline upstream its
/// configuration without the node list) and the node as configured.
pub(crate) type HealthKey = (Arc<str>, Box<str>);

static REGISTRY: LazyLock<Mutex<HashMap<HealthKey, Weak<NodeHealth>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The shared entry of a node, the same one its previous compilation had when there is one.
/// Called when a configuration is compiled, never on a request.
pub(crate) fn entry(owner: &Arc<str>, node: &str) -> Arc<NodeHealth> {
    let mut map = REGISTRY.lock();
    if map.len() > 64 && map.len().is_power_of_two() {
        map.retain(|_, w| w.strong_count() > 0);
    }
    let key = (owner.clone(), Box::from(node));
    if let Some(h) = map.get(&key).and_then(Weak::upgrade) {
        return h;
    }
    let h = Arc::new(NodeHealth::default());
    if let Some(carried) = CARRIED.lock().get(&key) {
        carried.restore(&h);
    }
    map.insert(key, Arc::downgrade(&h));
    h
}

/// A node's health as a binary upgrade hands it to the new process: times as durations from
/// the export (the old process's monotonic clock is not the new one's) or Unix seconds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Carried {
    upstream: String,
    node: String,
    down: bool,
    cause: u8,
    /// While down: milliseconds until traffic may try it again (None: only a checker).
    retry_in_ms: Option<u64>,
    successes: u32,
    tcp_failures: u32,
    http_failures: u32,
    timeouts: u32,
    since: Option<u64>,
    last_failure: Option<(u64, String)>,
    transitions: u64,
}

impl Carried {
    fn restore(&self, h: &NodeHealth) {
        let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        h.down.store(self.down, Relaxed);
        h.cause.store(self.cause, Relaxed);
        h.retry_at.store(
            match (self.down, self.retry_in_ms) {
                (true, Some(ms)) => now_ms().saturating_add(ms),
                _ => 0,
            },
            Relaxed,
        );
        h.successes.store(self.successes, Relaxed);
        h.tcp_failures.store(self.tcp_failures, Relaxed);
        h.http_failures.store(self.http_failures, Relaxed);
        h.timeouts.store(self.timeouts, Relaxed);
        let mut d = h.detail.lock();
        d.since = self.since.map(at);
        d.last_failure = self.last_failure.clone().map(|(t, w)| (at(t), w));
        d.cause = self.down.then_some(match self.cause {
            x if x == Cause::Active as u8 => Cause::Active,
            x if x == Cause::Unresolved as u8 => Cause::Unresolved,
            _ => Cause::Passive,
        });
        d.transitions = self.transitions;
    }
}

/// Health handed over by the process this one replaces, by node: given to each entry made
/// for the same upstream and node until the upgrade settles ([`settle`]).
static CARRIED: LazyLock<Mutex<HashMap<HealthKey, Carried>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Every node's health, for the process that replaces this one (JSON).
pub fn export() -> serde_json::Value {
    let live: Vec<(HealthKey, Arc<NodeHealth>)> = REGISTRY
        .lock()
        .iter()
        .filter_map(|(k, w)| Some((k.clone(), w.upgrade()?)))
        .collect();
    let now = now_ms();
    let carried: Vec<Carried> = live
        .into_iter()
        .map(|((upstream, node), h)| {
            let d = h.detail.lock().clone();
            let down = h.is_down();
            let retry_at = h.retry_at.load(Relaxed);
            Carried {
                upstream: upstream.to_string(),
                node: node.to_string(),
                down,
                cause: h.cause.load(Relaxed),
                retry_in_ms: (down && retry_at != 0).then(|| retry_at.saturating_sub(now)),
                successes: h.successes.load(Relaxed),
                tcp_failures: h.tcp_failures.load(Relaxed),
                http_failures: h.http_failures.load(Relaxed),
                timeouts: h.timeouts.load(Relaxed),
                since: d.since.map(unix),
                last_failure: d.last_failure.map(|(t, w)| (unix(t), w)),
                transitions: d.transitions,
            }
        })
        .collect();
    serde_json::to_value(carried).unwrap_or_default()
}

/// Takes the health the process this one replaces exported ([`export`]): the entries made
/// from now on for the same upstreams and nodes start from it (entries already made are
/// given it too). Returns how many nodes it names.
pub fn import(v: &serde_json::Value) -> usize {
    let Ok(list) = serde_json::from_value::<Vec<Carried>>(v.clone()) else {
        return 0;
    };
    let n = list.len();
    let keyed: Vec<(HealthKey, Carried)> = list
        .into_iter()
        .map(|c| {
            let key: HealthKey = (Arc::from(c.upstream.as_str()), Box::from(c.node.as_str()));
            (key, c)
        })
        .collect();
    // One lock at a time: `entry` takes the registry's, then the carried one's.
    let made: Vec<(Arc<NodeHealth>, usize)> = {
        let map = REGISTRY.lock();
        keyed
            .iter()
            .enumerate()
            .filter_map(|(i, (k, _))| Some((map.get(k).and_then(Weak::upgrade)?, i)))
            .collect()
    };
    for (h, i) in made {
        keyed[i].1.restore(&h);
    }
    CARRIED.lock().extend(keyed);
    n
}

/// The upgrade is over: entries made from now on start healthy, as any new node.
pub fn settle() {
    CARRIED.lock().clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_kept_by_a_reload_keeps_its_state_and_a_new_one_starts_healthy() {
        let owner: Arc<str> = Arc::from("upstreams/health-test");
        let a = entry(&owner, "10.0.0.1:80");
        assert!(a.mark_down(Cause::Passive, None, "refused"));
        assert!(!a.mark_down(Cause::Passive, None, "refused again"));
        // The next compilation of the same upstream gets the same entry.
        let again = entry(&owner, "10.0.0.1:80");
        assert!(Arc::ptr_eq(&a, &again));
        assert!(!again.available());
        // Another node, or the same address in another upstream, starts healthy.
        assert!(entry(&owner, "10.0.0.2:80").available());
        assert!(entry(&Arc::from("upstreams/other"), "10.0.0.1:80").available());
        // Once no snapshot holds it, the entry is gone and the node starts afresh.
        drop((a, again));
        assert!(entry(&owner, "10.0.0.1:80").available());
    }

    #[test]
    fn a_down_node_is_tried_again_after_its_retry_time() {
        let h = NodeHealth::default();
        h.mark_down(Cause::Passive, Some(Duration::from_millis(30)), "refused");
        assert!(!h.available());
        std::thread::sleep(Duration::from_millis(40));
        assert!(h.available());
        assert!(h.is_down(), "tried again, but still down until a success");
        assert!(h.mark_up());
        assert!(h.available() && !h.is_down());
        let r = h.report("n:80", None);
        assert_eq!((r.state, r.transitions), ("healthy", 2));
        assert_eq!(r.last_failure.unwrap().1, "refused");
    }

    #[test]
    fn a_success_clears_the_failure_counts_and_a_failure_the_successes() {
        let h = NodeHealth::default();
        assert_eq!(h.count(&h.tcp_failures), 1);
        assert_eq!(h.count(&h.timeouts), 1);
        assert_eq!(
            h.count(&h.tcp_failures),
            2,
            "failures of other kinds add up"
        );
        assert_eq!(h.count(&h.successes), 1);
        assert_eq!(h.tcp_failures.load(Relaxed), 0);
        assert_eq!(h.timeouts.load(Relaxed), 0);
        assert_eq!(h.count(&h.http_failures), 1);
        assert_eq!(h.successes.load(Relaxed), 0);
    }
}
