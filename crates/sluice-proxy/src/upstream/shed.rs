//! Load shedding and retry budgets.
//!
//! `max_inflight` (on an upstream or a route): one counter per upstream or route in the node
//! process, shared by all workers. It is an atomic, not a lock: a request adds one when it
//! starts and takes it away when it ends (two uncontended atomic operations, and only on
//! upstreams and routes that set a cap). Over the cap, the request is answered 503 with
//! `Retry-After` at once, and counted. Counters live in a registry by name, held weakly, so
//! that requests that started before a reload and end after it count against the same cap.
//!
//! `retry_budget`: each worker keeps its own budget per upstream: every request adds `ratio`
//! of a retry (up to [`BUDGET_CAP`] requests' worth), every retry takes one; `min_per_second`
//! retries a second are allowed whatever the budget. Each worker so holds retries to the
//! ratio of its own requests, and the process to the ratio of all of them (plus
//! `min_per_second` per worker).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A cap on requests in flight.
#[derive(Debug)]
pub(crate) struct Limit {
    max: u32,
    inflight: AtomicU32,
    /// Requests refused since the counter was created.
    shed: AtomicU64,
}

/// A request admitted under a [`Limit`]; counted until dropped.
#[derive(Debug)]
pub(crate) struct Admitted(Arc<Limit>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Relaxed);
    }
}

impl Limit {
    /// Admits a request, or None (counted as shed) when the cap is reached.
    #[inline]
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let before = self.inflight.fetch_add(1, Relaxed);
        if before >= self.max {
            self.inflight.fetch_sub(1, Relaxed);
            self.shed.fetch_add(1, Relaxed);
            return None;
        }
        Some(Admitted(self.clone()))
    }

    /// (in flight, cap, shed so far), for the health view.
    pub(crate) fn report(&self) -> (u32, u32, u64) {
        (
            self.inflight.load(Relaxed),
            self.max,
            self.shed.load(Relaxed),
        )
    }
}

static LIMITS: LazyLock<Mutex<HashMap<String, Weak<Limit>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The shared counter named `key` with cap `max` (a changed cap starts a new counter).
/// Called when a configuration is compiled, never on a request.
pub(crate) fn limit(key: &str, max: u32) -> Arc<Limit> {
    let mut map = LIMITS.lock();
    if map.len() > 64 && map.len().is_power_of_two() {
        map.retain(|_, w| w.strong_count() > 0);
    }
    let key = format!("{key}#{max}");
    if let Some(l) = map.get(&key).and_then(Weak::upgrade) {
        return l;
    }
    let l = Arc::new(Limit {
        max,
        inflight: AtomicU32::new(0),
        shed: AtomicU64::new(0),
    });
    map.insert(key, Arc::downgrade(&l));
    l
}

/// Most requests' worth of retries a budget holds.
pub(crate) const BUDGET_CAP: f64 = 100.0;

/// `retry_budget`, compiled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BudgetConfig {
    pub(crate) ratio: f64,
    pub(crate) min_per_second: u32,
}

/// One worker's retry budget for one upstream.
#[derive(Debug)]
pub(crate) struct Budget {
    tokens: f64,
    second: Option<Instant>,
    in_second: u32,
}

impl Budget {
    pub(crate) fn new() -> Budget {
        Budget {
            tokens: 0.0,
            second: None,
            in_second: 0,
        }
    }

    /// A request started.
    #[inline]
    pub(crate) fn deposit(&mut self, c: &BudgetConfig) {
        self.tokens = (self.tokens + c.ratio).min(BUDGET_CAP * c.ratio.max(0.01));
    }

    /// May a request be retried? Takes one retry from the budget when it may.
    pub(crate) fn withdraw(&mut self, c: &BudgetConfig) -> bool {
        let now = Instant::now();
        if self
            .second
            .is_none_or(|s| now.duration_since(s) >= Duration::from_secs(1))
        {
            self.second = Some(now);
            self.in_second = 0;
        }
        if self.in_second < c.min_per_second {
            self.in_second += 1;
            return true;
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_admits_up_to_its_cap_and_counts_the_rest() {
        let l = limit("test/limit", 2);
        let a = l.admit().unwrap();
        let _b = l.admit().unwrap();
        assert!(l.admit().is_none());
        assert_eq!(l.report(), (2, 2, 1));
        drop(a);
        assert!(l.admit().is_some());
        // The same name and cap after a reload: the same counter.
        assert!(Arc::ptr_eq(&l, &limit("test/limit", 2)));
        assert!(!Arc::ptr_eq(&l, &limit("test/limit", 3)));
    }

    #[test]
    fn a_budget_allows_the_ratio_of_requests_plus_the_minimum() {
        let c = BudgetConfig {
            ratio: 0.2,
            min_per_second: 3,
        };
        let mut b = Budget::new();
        let mut allowed = 0;
        for _ in 0..100 {
            b.deposit(&c);
            // Every request wants two retries.
            for _ in 0..2 {
                if b.withdraw(&c) {
                    allowed += 1;
                }
            }
        }
        // 3 a second, then 20% of 100 requests.
        assert!((20..=23).contains(&allowed), "{allowed}");
    }
}
