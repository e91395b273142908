//! Request failures in the error log, summarised: while a node is down every request to it
//! fails the same way, and one line per request would fill a disk (a 10-connection `wrk`
//! against a dead node wrote 11 MB in 2 s). The first failure of a kind on a route and node is
//! logged whole; the ones after it are counted, and one line per `log.failure_summary` says how
//! many there were. A key that stays quiet for an interval is forgotten: its next failure is
//! logged whole again. The access log keeps one line per request and the metrics count every
//! one; only the error log is summarised.
//!
//! Kept per worker (no lock shared between workers): with N workers, a failure repeated on
//! every worker is logged once by each.

use std::collections::HashMap;
use std::fmt::Display;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

use crate::error::Error;

/// How serious a failure is for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// The gateway or an upstream failed a request.
    Error,
    /// The client's doing (a body that stalled, a bad chunked body): not the gateway's error.
    Info,
}

/// One failure, as the log shows it.
pub(crate) struct Failure<'a> {
    pub(crate) level: Level,
    /// What failed: "request failed", "response aborted", "stream route: cannot connect upstream".
    pub(crate) what: &'static str,
    pub(crate) route: &'a str,
    /// The node's `host:port`, "-" when none was tried.
    pub(crate) node: &'a str,
    /// The status the client got, when there is one.
    pub(crate) status: Option<u16>,
    /// Whose fault: "upstream" or "client".
    pub(crate) side: &'static str,
    /// The kind of failure, in words ("connect failed"): failures of one kind are counted
    /// together.
    pub(crate) kind: &'static str,
    /// The whole cause, for the first one.
    pub(crate) cause: &'a dyn Display,
}

impl<'a> Failure<'a> {
    /// A failure of the request path: its level, status, side and kind from the error.
    pub(crate) fn of(what: &'static str, route: &'a str, node: &'a str, e: &'a Error) -> Self {
        let client = e.side() == crate::error::Side::Downstream;
        Failure {
            level: if client { Level::Info } else { Level::Error },
            what,
            route,
            node,
            status: Some(e.status()),
            side: e.side().word(),
            kind: e.kind_text(),
            cause: e,
        }
    }
}

/// At most this many kinds of failure are counted apart per worker; others are counted
/// together (a configuration of thousands of routes all failing at once).
const MAX_KEYS: usize = 256;

/// What one worker counted.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    keys: HashMap<u64, Repeats>,
    /// Failures past [`MAX_KEYS`], counted together.
    others: u64,
    others_since: Option<Instant>,
}

#[derive(Debug)]
struct Repeats {
    level: Level,
    what: &'static str,
    route: Box<str>,
    node: Box<str>,
    status: Option<u16>,
    side: &'static str,
    kind: &'static str,
    /// When the interval began (the first failure, or the last summary).
    since: Instant,
    /// Failures since, not logged.
    count: u64,
}

impl Failures {
    /// Logs `f` when it is the first of its kind on its route and node, counts it when one was
    /// logged within the last `every`. `every` zero: logs it.
    pub(crate) fn report(&mut self, f: Failure<'_>, every: Duration) {
        if every.is_zero() {
            return emit(&f);
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (f.what, f.route, f.node, f.kind).hash(&mut h);
        let key = h.finish();
        if let Some(r) = self.keys.get_mut(&key) {
            if *r.route == *f.route && *r.node == *f.node {
                r.count += 1;
            } else {
                // Another route and node with the same hash (64 bits: a curiosity): logged,
                // the one counted keeps its count.
                emit(&f);
            }
            return;
        }
        if self.keys.len() >= MAX_KEYS {
            self.others += 1;
            self.others_since.get_or_insert_with(Instant::now);
            return;
        }
        emit(&f);
        self.keys.insert(
            key,
            Repeats {
                level: f.level,
                what: f.what,
                route: f.route.into(),
                node: f.node.into(),
                status: f.status,
                side: f.side,
                kind: f.kind,
                since: Instant::now(),
                count: 0,
            },
        );
    }

    /// Logs how many failures followed the first of each kind, for each whose interval of
    /// `every` has ended (all of them when `all`: the worker stops), and forgets the kinds that
    /// did not repeat in it.
    pub(crate) fn summarise(&mut self, every: Duration, all: bool) {
        let now = Instant::now();
        self.keys.retain(|_, r| {
            let elapsed = now.duration_since(r.since);
            if elapsed < every && !all {
                return true;
            }
            if r.count == 0 {
                return false;
            }
            emit_summary(r, elapsed);
            r.count = 0;
            r.since = now;
            !all
        });
        if let Some(since) = self.others_since
            && (all || now.duration_since(since) >= every)
        {
            warn!(
                failures = self.others,
                "{} more request failures on other routes and nodes in the last {} s (too many kinds to count apart; the access log and metrics have each)",
                self.others,
                now.duration_since(since).as_secs()
            );
            self.others = 0;
            self.others_since = None;
        }
    }
}

fn emit(f: &Failure<'_>) {
    let (route, node, status, side, cause, what) =
        (f.route, f.node, f.status, f.side, f.cause, f.what);
    match f.level {
        Level::Error => {
            error!(route = %route, node = %node, status, side = %side, cause = %cause, "{what}")
        }
        Level::Info => {
            info!(route = %route, node = %node, status, side = %side, cause = %cause, "{what}")
        }
    }
}

fn emit_summary(r: &Repeats, over: Duration) {
    let (route, node, status, side, cause, count) =
        (&*r.route, &*r.node, r.status, r.side, r.kind, r.count);
    let (what, secs) = (r.what, over.as_secs());
    match r.level {
        Level::Error => {
            error!(route = %route, node = %node, status, side = %side, cause = %cause, repeats = count, "{what}: {count} more like it in the last {secs} s")
        }
        Level::Info => {
            info!(route = %route, node = %node, status, side = %side, cause = %cause, repeats = count, "{what}: {count} more like it in the last {secs} s")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    #[test]
    fn repeats_are_counted_and_forgotten_after_a_quiet_interval() {
        let mut f = Failures::default();
        let e = Error::with_cause(Kind::ConnectFailed, "refused");
        let every = Duration::from_millis(50);
        for _ in 0..1000 {
            f.report(Failure::of("request failed", "r1", "n:1", &e), every);
        }
        // Another node, another kind: counted apart.
        f.report(Failure::of("request failed", "r1", "n:2", &e), every);
        let t = Error::new(Kind::ReadTimeout);
        f.report(Failure::of("request failed", "r1", "n:1", &t), every);
        assert_eq!(f.keys.len(), 3);
        let counts: Vec<u64> = {
            let mut c: Vec<u64> = f.keys.values().map(|r| r.count).collect();
            c.sort_unstable();
            c
        };
        assert_eq!(counts, [0, 0, 999]);
        // Not yet an interval: nothing summarised.
        f.summarise(every, false);
        assert_eq!(f.keys.values().map(|r| r.count).sum::<u64>(), 999);
        std::thread::sleep(every);
        // Summarised; those that did not repeat are forgotten.
        f.summarise(every, false);
        assert_eq!(f.keys.len(), 1);
        assert_eq!(f.keys.values().next().unwrap().count, 0);
        std::thread::sleep(every);
        f.summarise(every, false);
        assert!(f.keys.is_empty());
    }

    #[test]
    fn kinds_past_the_cap_are_counted_together() {
        let mut f = Failures::default();
        let e = Error::new(Kind::ConnectFailed);
        let every = Duration::from_secs(10);
        for i in 0..MAX_KEYS + 10 {
            let route = format!("r{i}");
            f.report(Failure::of("request failed", &route, "-", &e), every);
        }
        assert_eq!(f.keys.len(), MAX_KEYS);
        assert_eq!(f.others, 10);
        f.summarise(every, true);
        assert_eq!(f.others, 0);
    }
}
