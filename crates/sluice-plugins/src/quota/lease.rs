//! Leased quotas: a window's count shared by the nodes through Redis, taken locally from what
//! a node leased (see the module above).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use tokio::sync::Notify;
use tracing::{info, warn};

use super::hub::{Job, Op, send};
use super::target::RedisTarget;

pub(crate) fn stable_hash(s: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(s.as_bytes());
    h.finish()
}

impl Take {
    /// What the plugin does: go on (None), answer with its own rejection, or 503 when Redis
    /// cannot be reached and degradation is not allowed.
    pub(crate) fn refusal(
        &self,
        reject: impl FnOnce() -> sluice_core::Response,
    ) -> Option<sluice_core::Flow> {
        match self {
            Take::Granted { .. } => None,
            Take::Exhausted => Some(sluice_core::Flow::Respond(reject())),
            Take::Unavailable => Some(sluice_core::Flow::Respond(unavailable())),
        }
    }
}

/// How a request fared.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// Admitted; about `left` more may be admitted in the window cluster-wide.
    Granted { left: u64 },
    /// The window's count is used up.
    Exhausted,
    /// Redis cannot be reached and degradation is not allowed.
    Unavailable,
}

/// A quota shared by the workers of a node (one per plugin instance and settings).
#[derive(Debug)]
pub(crate) struct Quota {
    /// Prefix of the Redis keys: the same on every node with the same configuration.
    name: String,
    count: u64,
    window: u64,
    lease: u64,
    target: RedisTarget,
    fail_open: bool,
    /// For logs: which plugin of which resource.
    what: String,
    entries: DashMap<u64, Entry>,
    /// Hands a lease request to Redis ([`send`]: the Redis thread); tests use a stand-in.
    send: fn(Job),
    /// Unix milliseconds until which Redis is not tried again.
    down_until: AtomicU64,
    down: AtomicBool,
}

#[derive(Debug)]
struct Entry {
    window: u64,
    /// Units leased and not used yet.
    local: u64,
    /// The window's count left cluster-wide after the last lease (an estimate, for headers).
    global_left: u64,
    exhausted: bool,
    refilling: bool,
    notify: Arc<Notify>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

impl Quota {
    pub(crate) fn new(
        name: String,
        count: u64,
        window: u64,
        target: RedisTarget,
        fail_open: bool,
        what: String,
    ) -> Quota {
        Quota {
            name,
            count,
            // Validation bounds both; the runtime never divides by zero whatever it is given.
            window: window.max(1),
            lease: (count / 50).clamp(1, 1000),
            target,
            fail_open,
            what,
            entries: DashMap::new(),
            send,
            down_until: AtomicU64::new(0),
            down: AtomicBool::new(false),
        }
    }

    /// Seconds until the current window ends.
    pub(crate) fn reset(&self) -> u64 {
        let now = now_ms() / 1000;
        (now / self.window + 1)
            .saturating_mul(self.window)
            .saturating_sub(now)
    }

    fn when_down(&self) -> Take {
        if self.fail_open {
            Take::Granted { left: 0 }
        } else {
            Take::Unavailable
        }
    }

    /// Takes one unit of `key`'s quota in the current window, waiting for a lease if none is
    /// left locally.
    pub(crate) async fn take(self: &Arc<Self>, key: u64) -> Take {
        loop {
            let now = now_ms();
            let window = now / 1000 / self.window;
            let outage = self.down.load(Ordering::Relaxed);
            let notified = {
                let mut e = self.entries.entry(key).or_insert_with(|| Entry {
                    window,
                    local: 0,
                    global_left: self.count,
                    exhausted: false,
                    refilling: false,
                    notify: Arc::new(Notify::new()),
                });
                if e.window != window {
                    e.window = window;
                    e.local = 0;
                    e.global_left = self.count;
                    e.exhausted = false;
                    e.refilling = false;
                }
                if e.local > 0 {
                    e.local -= 1;
                    // Fetch the next lease before this one runs out.
                    if self.lease >= 4
                        && e.local < self.lease / 2
                        && !e.refilling
                        && !e.exhausted
                        && !outage
                    {
                        e.refilling = true;
                        self.refill(key, window);
                    }
                    return Take::Granted {
                        left: e.global_left.saturating_add(e.local),
                    };
                }
                if e.exhausted {
                    return Take::Exhausted;
                }
                if outage {
                    // One request at a time probes Redis, at most once a second; the others
                    // are decided at once.
                    if !e.refilling && now >= self.down_until.load(Ordering::Relaxed) {
                        e.refilling = true;
                        self.down_until.store(now + 1000, Ordering::Relaxed);
                        self.refill(key, window);
                    }
                    return self.when_down();
                }
                if !e.refilling {
                    e.refilling = true;
                    self.refill(key, window);
                }
                let mut n = Box::pin(e.notify.clone().notified_owned());
                // Registered before the entry is released, so the wake-up cannot be missed.
                n.as_mut().enable();
                n
            };
            if tokio::time::timeout(self.target.timeout.saturating_mul(2), notified)
                .await
                .is_err()
            {
                self.failed("no answer in time");
                return self.when_down();
            }
        }
    }

    fn refill(self: &Arc<Self>, key: u64, window: u64) {
        let quota = self.clone();
        let job = Job {
            target: self.target.clone(),
            key: format!("{}:{key:x}:{window}", self.name),
            op: Op::Lease {
                units: self.lease,
                ttl: self.window.saturating_add(1),
            },
            reply: Box::new(move |r| quota.refilled(key, window, r.map(|n| n.max(0) as u64))),
        };
        (self.send)(job);
    }

    fn refilled(&self, key: u64, window: u64, result: Result<u64, String>) {
        let notify = match result {
            Ok(used) => {
                if self.down.swap(false, Ordering::Relaxed) {
                    info!(plugin = %self.what, "redis reachable again: counting cluster-wide");
                }
                let before = used.saturating_sub(self.lease);
                let granted = if used <= self.count {
                    self.lease
                } else {
                    self.count.saturating_sub(before)
                };
                let Some(mut e) = self.entries.get_mut(&key) else {
                    return;
                };
                if e.window != window {
                    return;
                }
                e.local = e.local.saturating_add(granted);
                e.global_left = self.count.saturating_sub(used);
                if used >= self.count {
                    // Nothing more to lease in this window; what is held locally still goes.
                    e.exhausted = true;
                }
                e.refilling = false;
                e.notify.clone()
            }
            Err(msg) => {
                self.failed(&msg);
                let Some(mut e) = self.entries.get_mut(&key) else {
                    return;
                };
                e.refilling = false;
                e.notify.clone()
            }
        };
        notify.notify_waiters();
    }

    fn failed(&self, msg: &str) {
        self.down_until.store(now_ms() + 1000, Ordering::Relaxed);
        if !self.down.swap(true, Ordering::Relaxed) {
            log_outage(&self.what, &self.target, self.fail_open, msg);
        }
    }
}

/// Logs that Redis became unavailable, and what the plugin does meanwhile (once per outage).
pub(crate) fn log_outage(plugin: &str, target: &RedisTarget, fail_open: bool, msg: &str) {
    let choice = if fail_open {
        "letting requests through uncounted (allow_degradation: true)"
    } else {
        "answering 503 (allow_degradation: false)"
    };
    warn!(plugin = %plugin, redis = %target.place(), error = %msg, "redis unavailable: {choice}");
}

/// The answer while Redis is unavailable and `allow_degradation` is false.
pub(crate) fn unavailable() -> sluice_core::Response {
    sluice_core::Response::error(503, "rate limiting is unavailable")
}

#[cfg(test)]
mod tests {
    //! Leases and outages without Redis: a stand-in that keeps each key's count as Redis's
    //! `INCRBY` would (this thread's, answered on a task of its own as the Redis thread
    //! answers later), or fails every call. Real Redis servers (one, a cluster, sentinels)
    //! are in crates/sluice/tests/redis.rs.
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;

    use super::*;

    thread_local! {
        static COUNTS: RefCell<HashMap<String, i64>> = RefCell::new(HashMap::new());
        static DOWN: Cell<bool> = const { Cell::new(false) };
        static CALLS: Cell<u32> = const { Cell::new(0) };
    }

    /// The stand-in for the Redis thread.
    fn stand_in(job: Job) {
        CALLS.set(CALLS.get() + 1);
        let answer = if DOWN.get() {
            Err("connection refused".to_owned())
        } else {
            let Op::Lease { units, .. } = job.op else {
                panic!("a lease only")
            };
            Ok(COUNTS.with_borrow_mut(|c| {
                let n = c.entry(job.key).or_insert(0);
                *n += units as i64;
                *n
            }))
        };
        tokio::task::spawn_local(async move { (job.reply)(answer) });
    }

    fn quota(name: &str, count: u64, fail_open: bool) -> Arc<Quota> {
        let target = RedisTarget {
            cluster: Vec::new(),
            sentinel: None,
            host: "127.0.0.1".into(),
            port: 1,
            username: None,
            password: None,
            database: 0,
            timeout: std::time::Duration::from_millis(200),
            tls: None,
        };
        let mut q = Quota::new(name.into(), count, 3600, target, fail_open, "test".into());
        q.send = stand_in;
        Arc::new(q)
    }

    async fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::task::LocalSet::new().run_until(f).await
    }

    #[tokio::test]
    async fn leases_admit_exactly_count_on_one_node_and_never_more_on_two() {
        run(async {
            // One node: a lease is count / 50 (here 4); every unit is used.
            let q = quota("one", 200, false);
            let mut granted = 0;
            for _ in 0..250 {
                if matches!(q.take(7).await, Take::Granted { .. }) {
                    granted += 1;
                }
            }
            assert_eq!(granted, 200);
            assert_eq!(q.take(7).await, Take::Exhausted);
            // Another key has its own count.
            assert!(matches!(q.take(8).await, Take::Granted { .. }));
            // Two nodes on the same counter: never more than count, and no more lost than the
            // leases held ahead (1.5 leases each).
            let (a, b) = (quota("two", 200, false), quota("two", 200, false));
            let mut granted = 0;
            for i in 0..500 {
                let q = if i % 3 == 0 { &a } else { &b };
                if matches!(q.take(1).await, Take::Granted { .. }) {
                    granted += 1;
                }
            }
            assert!(granted <= 200, "{granted}");
            assert!(granted >= 200 - 2 * 6, "{granted}");
        })
        .await;
    }

    #[tokio::test]
    async fn an_outage_is_probed_once_a_second_and_answered_as_configured() {
        run(async {
            DOWN.set(true);
            let closed = quota("closed", 100, false);
            let open = quota("open", 100, true);
            assert_eq!(closed.take(1).await, Take::Unavailable);
            assert_eq!(open.take(1).await, Take::Granted { left: 0 });
            // While it is down, requests are decided at once: no more calls to Redis within
            // the second.
            CALLS.set(0);
            for _ in 0..50 {
                assert_eq!(closed.take(1).await, Take::Unavailable);
            }
            tokio::task::yield_now().await;
            assert_eq!(CALLS.get(), 0);
            // Back: after the second, one request probes and the count resumes.
            DOWN.set(false);
            tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
            assert_eq!(
                closed.take(1).await,
                Take::Unavailable,
                "the probe's own request"
            );
            tokio::task::yield_now().await;
            assert_eq!(CALLS.get(), 1);
            assert!(matches!(closed.take(1).await, Take::Granted { .. }));
        })
        .await;
    }
}
