//! The upstream lifecycle every protocol path follows (HTTP/1.1, both HTTP/2 paths, gRPC,
//! stream routes): select a node → connect → forward → record the outcome → retry if the
//! error says it may. The paths differ only in how they connect and forward; what may be
//! picked, what an outcome does to a node's health, and whether to try again are decided here,
//! once:
//!
//! - a pick sees the nodes with a weight, in rotation (the shared health table), not yet tried
//!   by this request, and hands them to the upstream's balancer;
//! - a failure is recorded in the node's health (a connect failure takes it out of rotation
//!   for [`FAIL_TIMEOUT`] unless it is the only node), then its [`Retry`] decides: the next
//!   node while `retries` and `retry_timeout` allow, the same node on a new connection, or no;
//! - a success puts a node that was out of rotation back.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::balance::{NodeSet, PickCx};
use super::health::Cause;
use super::local::Local;
use super::model::Upstream;
use super::stats::InFlight;
use crate::error::{Error, Retry};

/// A node taken out by traffic (a connect failure, or the `checks.passive` thresholds) gets
/// traffic again after this long (NGINX's `fail_timeout`), unless an active checker is
/// configured to bring it back; then the first successes bring it back.
pub(crate) const FAIL_TIMEOUT: Duration = Duration::from_secs(10);

/// One request's way through an upstream's nodes.
#[derive(Debug)]
pub(crate) struct Tries {
    tried: NodeSet,
    /// Failed attempts that moved on to another node.
    retries: u32,
    /// When retrying must stop (`retry_timeout`); the clock is read only when it is set.
    deadline: Option<Instant>,
    /// The attempt in flight, for `least_conn` and `ewma`.
    flight: Option<InFlight>,
    /// The last failure that moved on to another node: the answer if none is left.
    last: Option<(usize, Error)>,
    /// The node to send to again on a new connection.
    resend: Option<usize>,
}

impl Tries {
    #[inline]
    pub(crate) fn new(up: &Upstream) -> Tries {
        Tries {
            tried: NodeSet::default(),
            retries: 0,
            deadline: up.retry_timeout.map(|d| Instant::now() + d),
            flight: None,
            last: None,
            resend: None,
        }
    }

    /// The next node to try, or None when none is left. Nodes in rotation of the highest
    /// priority that has one go to the balancer; when no node is in rotation, every node not
    /// yet tried does (APISIX does the same: better a node that may have recovered than none).
    #[inline]
    pub(crate) fn pick(&mut self, w: &Local, up: &Upstream, cx: &PickCx) -> Option<usize> {
        self.flight = None;
        // One node: nothing to balance; out of rotation or not, it is the only one (and there
        // is no other to retry on, so no retry budget to keep).
        if up.nodes.len() == 1 {
            if up.nodes[0].weight == 0 || self.tried.contains(0) {
                return None;
            }
            self.tried.insert(0);
            return Some(0);
        }
        if let Some(b) = &up.budget
            && self.tried.is_empty()
        {
            w.budgets
                .borrow_mut()
                .entry(up.uid)
                .or_insert_with(super::shed::Budget::new)
                .deposit(b);
        }
        let mut among = NodeSet::default();
        let mut out = NodeSet::default();
        let mut best = i32::MIN;
        for (i, n) in up.nodes.iter().enumerate() {
            if n.weight == 0 || self.tried.contains(i) {
                continue;
            }
            if !n.health.available() {
                out.insert(i);
                continue;
            }
            if up.priorities {
                if n.priority < best {
                    continue;
                }
                if n.priority > best {
                    best = n.priority;
                    among.clear();
                }
            }
            among.insert(i);
        }
        if among.is_empty() {
            among = out;
            if among.is_empty() {
                return None;
            }
        }
        let mut all = w.balancers.borrow_mut();
        let local = all.entry(up.uid).or_insert_with(|| {
            let mut nodes = w.nodes.borrow_mut();
            up.balancer.local(&up.nodes, &mut |key| nodes.stats(key))
        });
        let node = local.pick(&up.nodes, cx, &among)?;
        self.flight = local.in_flight(node);
        self.tried.insert(node);
        Some(node)
    }

    /// Records a failed attempt on `node` and says whether to try again: `Some(true)` on
    /// another node (pick again), `Some(false)` on the same node over a new connection, None
    /// to answer the error.
    pub(crate) fn failed(
        &mut self,
        w: &Local,
        up: &Upstream,
        node: usize,
        e: &Error,
    ) -> Option<bool> {
        record_failure(w, up, node, e);
        if e.retry() != Retry::SameNodeFresh {
            // The attempt is over (a resend to the same node is still the same attempt).
            self.flight = None;
        }
        match e.retry() {
            Retry::No => None,
            Retry::SameNodeFresh => Some(false),
            Retry::NextNode => {
                self.retries += 1;
                let out_of_time = self.deadline.is_some_and(|d| Instant::now() >= d);
                if self.retries > up.retries || out_of_time {
                    return None;
                }
                if let Some(b) = &up.budget {
                    let allowed = w
                        .budgets
                        .borrow_mut()
                        .entry(up.uid)
                        .or_insert_with(super::shed::Budget::new)
                        .withdraw(b);
                    if !allowed {
                        debug!(upstream = %up.owner_name(), "retry budget spent: not retrying");
                        return None;
                    }
                }
                Some(true)
            }
        }
    }

    /// Records that `node` answered, with this status when the path knows it.
    #[inline]
    pub(crate) fn succeeded(&mut self, up: &Upstream, node: usize, status: Option<u16>) {
        if let Some(f) = self.flight.take() {
            f.answered();
        }
        record_answer(up, node, status);
    }
}

/// How one attempt on a node ended, as [`retry_loop`] sees it.
pub(crate) enum Tried<T> {
    /// The node answered (with this status when the path knows it): recorded, and the loop
    /// ends with `T`.
    Answered(T, Option<u16>),
    /// The node failed: recorded, and the error says whether to try again.
    Failed(Error),
    /// Something other than the node ended the exchange (the client's side): nothing is
    /// recorded, and the loop ends with `T`.
    Ended(T),
}

/// Why [`retry_loop`] gave up: the last node tried (None when no node could be picked) and
/// the error to answer.
pub(crate) type GaveUp = (Option<usize>, Error);

/// The retry loop every protocol path runs (HTTP/1.1, both HTTP/2 paths, gRPC, stream routes),
/// written once: pick a node (`Tries::next`), await `attempt` on it (`fresh`: on a new
/// connection, the previous attempt having found a pooled one closed), record how it went, and
/// go on while the error and `retries`/`retry_timeout` allow (`Tries::retry`). Its value:
/// `Ok(T)` from `Tried::Answered` or `Tried::Ended`, or the [`GaveUp`] to answer.
///
/// A macro, so that each path's attempt is awaited in the path's own future: an `async fn`
/// taking the attempt as an async closure measured +200 instructions per request in scenario
/// 1 (bench/callgrind.sh), the nested futures being moved with `memcpy`.
macro_rules! retry_loop {
    ($tries:expr, ($w:expr, $up:expr, $pick:expr), |$node:ident, $fresh:pat_param| $attempt:expr) => {{
        let tries: &mut $crate::upstream::select::Tries = $tries;
        loop {
            let ($node, $fresh) = match tries.next($w, $up, $pick) {
                Ok(next) => next,
                Err(gave_up) => break Err(gave_up),
            };
            match $attempt {
                $crate::upstream::select::Tried::Answered(t, status) => {
                    tries.succeeded($up, $node, status);
                    break Ok(t);
                }
                $crate::upstream::select::Tried::Ended(t) => break Ok(t),
                $crate::upstream::select::Tried::Failed(e) => {
                    if let Err(gave_up) = tries.retry($w, $up, $node, e) {
                        break Err(gave_up);
                    }
                }
            }
        }
    }};
}
pub(crate) use retry_loop;

impl Tries {
    /// The next attempt's node, and whether it must be on a new connection (the same node
    /// again, after a pooled connection found closed); when none is left, the last failure
    /// (it says more than "no healthy node").
    #[inline]
    pub(crate) fn next(
        &mut self,
        w: &Local,
        up: &Upstream,
        pick: &PickCx,
    ) -> Result<(usize, bool), GaveUp> {
        if let Some(node) = self.resend.take() {
            return Ok((node, true));
        }
        match self.pick(w, up, pick) {
            Some(node) => Ok((node, false)),
            None => Err(match self.last.take() {
                Some((node, e)) => (Some(node), e),
                None => (None, up.no_node()),
            }),
        }
    }

    /// Records the failure of an attempt on `node`; `Ok` to go on (`next` says where), or the
    /// failure to answer.
    #[cold]
    pub(crate) fn retry(
        &mut self,
        w: &Local,
        up: &Upstream,
        node: usize,
        e: Error,
    ) -> Result<(), GaveUp> {
        match self.failed(w, up, node, &e) {
            Some(true) => {
                debug!(upstream = %up.owner_name(), node = %up.nodes[node].authority, cause = %e, "trying the next node");
                self.last = Some((node, e));
            }
            Some(false) => {
                debug!(upstream = %up.owner_name(), node = %up.nodes[node].authority, cause = %e, "pooled connection was closed; sending again on a new one");
                self.resend = Some(node);
            }
            None => return Err((Some(node), e)),
        }
        Ok(())
    }
}

/// What a failure tells about a node. Without `checks.passive`, a connect failure takes it
/// out of rotation for [`FAIL_TIMEOUT`] (unless it is the only node: then there is nothing
/// else to try, and the log would only repeat the 502s). With it, connection failures and
/// timeouts are counted, and the node goes out at the configured counts. A connect failure
/// also closes the node's pooled connections in this worker: they are suspect too.
pub(crate) fn record_failure(w: &Local, up: &Upstream, node: usize, e: &Error) {
    let n = &up.nodes[node];
    let tcp = e.is_tcp_failure();
    if tcp {
        w.nodes.borrow_mut().clear(n.pool_key);
    }
    match &up.passive {
        None => {
            if !tcp {
                return;
            }
            if up.nodes.len() > 1 {
                // With an active checker, the checker brings it back.
                take_out(up, n, up.active.is_none().then_some(FAIL_TIMEOUT), e);
            } else {
                n.health.note_failure(&e.to_string());
            }
        }
        Some(p) => {
            let (count, limit) = if tcp {
                (n.health.count(&n.health.tcp_failures), p.tcp_failures)
            } else if e.is_timeout() {
                (n.health.count(&n.health.timeouts), p.timeouts)
            } else {
                return;
            };
            n.health.note_failure(&e.to_string());
            if count >= limit {
                take_out(up, n, (!p.active_brings_back).then_some(FAIL_TIMEOUT), e);
            }
        }
    }
}

fn take_out(
    up: &Upstream,
    n: &super::model::Node,
    retry: Option<Duration>,
    why: &dyn std::fmt::Display,
) {
    if n.health.mark_down(Cause::Passive, retry, &why.to_string()) {
        warn!(upstream = %up.owner_name(), node = %n.authority, cause = %why, "node unhealthy (passive check)");
    } else if let Some(d) = retry {
        n.health.retry_later(d);
    }
}

/// What an answer tells about a node. Without `checks.passive`, an answer puts a node that was
/// out of rotation back. With it, statuses listed as unhealthy count as failures, and a node
/// out of rotation comes back after `healthy.successes` answers in a row. A healthy node's
/// answer writes nothing shared unless a failure count has to be cleared.
#[inline]
pub(crate) fn record_answer(up: &Upstream, node: usize, status: Option<u16>) {
    let n = &up.nodes[node];
    let h = &n.health;
    let Some(p) = &up.passive else {
        // Traffic brings back what traffic took out, unless an active checker decides.
        if h.is_down() && up.active.is_none() && h.down_by(Cause::Passive) && h.mark_up() {
            info!(upstream = %up.owner_name(), node = %n.authority, "node healthy again");
        }
        return;
    };
    let status = status.filter(|_| p.http);
    if let Some(s) = status
        && p.unhealthy_statuses.contains(s)
    {
        let count = h.count(&h.http_failures);
        h.note_failure(&format!("status {s}"));
        if count >= p.http_failures {
            take_out(
                up,
                n,
                (!p.active_brings_back).then_some(FAIL_TIMEOUT),
                &format_args!("{count} answers with unhealthy statuses, the last {s}"),
            );
        }
        return;
    }
    if status.is_some_and(|s| !p.healthy_statuses.contains(s)) {
        return;
    }
    if h.is_down() {
        if p.active_brings_back || !h.down_by(Cause::Passive) {
            return;
        }
        if h.count(&h.successes) >= p.successes && h.mark_up() {
            info!(upstream = %up.owner_name(), node = %n.authority, "node healthy again (passive check)");
        }
    } else {
        h.clear_failures();
    }
}

impl Upstream {
    /// How logs name the upstream: its id, or `inline`.
    pub(crate) fn owner_name(&self) -> &str {
        self.owner.strip_prefix("upstreams/").unwrap_or("inline")
    }

    /// No node to pick: all out of rotation, or none at all (a route without upstream).
    pub(crate) fn no_node(&self) -> Error {
        Error::new(if self.nodes.is_empty() {
            crate::error::Kind::NoUpstream
        } else {
            crate::error::Kind::NoHealthyNode
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use crate::upstream::model::testing::upstream;

    fn worker() -> Local {
        Local::default()
    }

    #[test]
    fn zero_weight_failed_and_tried_nodes_are_skipped() {
        let w = worker();
        let up = upstream("select-skip", &[1, 0, 1]);
        for _ in 0..10 {
            assert_ne!(Tries::new(&up).pick(&w, &up, &PickCx::default()), Some(1));
        }
        let refused = Error::new(Kind::ConnectFailed);
        let mut t = Tries::new(&up);
        let first = t.pick(&w, &up, &PickCx::default()).unwrap();
        assert_eq!(t.failed(&w, &up, first, &refused), None, "retries: 0");
        // The failed node is out of rotation for every request now, in every worker.
        let other = if first == 0 { 2 } else { 0 };
        for _ in 0..5 {
            assert_eq!(
                Tries::new(&up).pick(&w, &up, &PickCx::default()),
                Some(other)
            );
            assert_eq!(
                Tries::new(&up).pick(&worker(), &up, &PickCx::default()),
                Some(other)
            );
        }
        // When no node in rotation is left, the ones out of rotation are tried anyway.
        let mut t = Tries::new(&up);
        assert_eq!(t.pick(&w, &up, &PickCx::default()), Some(other));
        assert_eq!(t.pick(&w, &up, &PickCx::default()), Some(first));
        assert_eq!(t.pick(&w, &up, &PickCx::default()), None);
        // A success brings it back.
        record_answer(&up, first, Some(200));
        assert!(up.nodes[first].health.available());
        let all_zero = upstream("select-zero", &[0, 0]);
        assert_eq!(
            Tries::new(&all_zero).pick(&w, &all_zero, &PickCx::default()),
            None
        );
    }

    #[test]
    fn traffic_does_not_bring_back_a_node_the_active_checker_took_out() {
        use crate::upstream::model::ActiveCheck;
        let mut up = upstream("select-active", &[1, 1]);
        up.active = Some(std::sync::Arc::new(ActiveCheck {
            cfg: sluice_config::ActiveCheckConfig::default(),
            tls: None,
        }));
        let h = &up.nodes[0].health;
        assert!(h.mark_down(Cause::Active, None, "health check answered 503"));
        // A request that was in flight answers 200: the node stays out.
        record_answer(&up, 0, Some(200));
        assert!(h.is_down() && !h.available());
        // A refused connect does not turn "only the checker brings it back" into "10 s".
        record_failure(&worker(), &up, 0, &Error::new(Kind::ConnectFailed));
        assert!(!h.available());
        // Without an active checker, traffic brings back what traffic took out.
        let up = upstream("select-passive-back", &[1, 1]);
        let h = &up.nodes[0].health;
        h.mark_down(Cause::Passive, Some(FAIL_TIMEOUT), "refused");
        record_answer(&up, 0, Some(200));
        assert!(!h.is_down());
    }

    #[test]
    fn a_single_node_is_never_marked_failed() {
        let w = worker();
        let up = upstream("select-single", &[1]);
        let mut t = Tries::new(&up);
        assert_eq!(t.pick(&w, &up, &PickCx::default()), Some(0));
        t.failed(&w, &up, 0, &Error::new(Kind::ConnectFailed));
        assert!(up.nodes[0].health.available());
        assert_eq!(Tries::new(&up).pick(&w, &up, &PickCx::default()), Some(0));
        assert_eq!(t.pick(&w, &up, &PickCx::default()), None, "already tried");
    }

    #[tokio::test]
    async fn the_one_retry_loop_resends_moves_on_and_answers_the_last_failure() {
        let w = worker();
        let mut up = upstream("select-run", &[1, 1, 1]);
        up.retries = 1;
        let cx = PickCx::default();
        // A stale pooled connection: the same node again, fresh; then a refused connect moves
        // on (one retry); the next node answers.
        let mut seen = Vec::new();
        let got: Result<usize, GaveUp> =
            retry_loop!(&mut Tries::new(&up), (&w, &up, &cx), |node, fresh| {
                seen.push((node, fresh));
                match seen.len() {
                    1 => Tried::Failed(
                        Error::new(Kind::UpstreamClosed).retry_as(Retry::SameNodeFresh),
                    ),
                    2 => Tried::Failed(Error::new(Kind::ConnectFailed)),
                    _ => Tried::Answered(node, Some(200)),
                }
            });
        assert_eq!(seen.len(), 3);
        assert_eq!(
            seen[1],
            (seen[0].0, true),
            "the same node, on a new connection"
        );
        assert_ne!(seen[2].0, seen[0].0);
        assert_eq!(got.ok(), Some(seen[2].0));
        assert!(
            !up.nodes[seen[0].0].health.available(),
            "the refused node is out"
        );

        // Retries spent: the last failure is the answer, with its node.
        let up = upstream("select-run-spent", &[1, 1]);
        let spent: Result<(), GaveUp> =
            retry_loop!(&mut Tries::new(&up), (&w, &up, &cx), |_n, _| {
                tokio::task::yield_now().await;
                Tried::Failed(Error::new(Kind::ConnectFailed))
            });
        let gave_up = spent.unwrap_err();
        assert!(gave_up.0.is_some());
        assert_eq!(gave_up.1.kind(), Kind::ConnectFailed);

        // Ended by the client's side: the node is not recorded as having answered.
        // (An answer would bring a node out of rotation back.)
        let up = upstream("select-run-ended", &[1, 1]);
        for n in &up.nodes {
            n.health
                .mark_down(Cause::Passive, Some(FAIL_TIMEOUT), "refused");
        }
        let ended: Result<usize, GaveUp> = retry_loop!(
            &mut Tries::new(&up),
            (&w, &up, &cx),
            |node, _| Tried::Ended(node)
        );
        let ended = ended.unwrap();
        assert!(!up.nodes[ended].health.available());
        let answered: Result<usize, GaveUp> =
            retry_loop!(&mut Tries::new(&up), (&w, &up, &cx), |node, _| {
                Tried::Answered(node, Some(200))
            });
        let answered = answered.unwrap();
        assert!(up.nodes[answered].health.available());

        // No node at all to pick: "no healthy node", without a node.
        let none = upstream("select-run-none", &[0]);
        let nothing: Result<(), GaveUp> =
            retry_loop!(&mut Tries::new(&none), (&w, &none, &cx), |_n, _| {
                Tried::Ended(())
            });
        let gave_up = nothing.unwrap_err();
        assert!(gave_up.0.is_none());
        assert_eq!(gave_up.1.kind(), Kind::NoHealthyNode);
    }

    #[test]
    fn the_error_decides_whether_to_retry_within_retries_and_retry_timeout() {
        let w = worker();
        let mut up = upstream("select-retry", &[1, 1, 1]);
        up.retries = 1;
        let cx = PickCx::default();
        let mut t = Tries::new(&up);
        let a = t.pick(&w, &up, &cx).unwrap();
        // A timeout reading the answer: the node may have acted on it.
        assert_eq!(t.failed(&w, &up, a, &Error::new(Kind::ReadTimeout)), None);
        assert!(up.nodes[a].health.available(), "not a TCP failure");
        let stale = Error::new(Kind::UpstreamClosed).retry_as(Retry::SameNodeFresh);
        assert_eq!(t.failed(&w, &up, a, &stale), Some(false));
        let refused = Error::new(Kind::ConnectFailed);
        assert_eq!(t.failed(&w, &up, a, &refused), Some(true), "first retry");
        let b = t.pick(&w, &up, &cx).unwrap();
        assert_eq!(t.failed(&w, &up, b, &refused), None, "retries: 1 spent");

        let mut up = upstream("select-retry-timeout", &[1, 1, 1]);
        up.retries = 5;
        up.retry_timeout = Some(Duration::from_millis(1));
        let mut t = Tries::new(&up);
        let a = t.pick(&w, &up, &cx).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(t.failed(&w, &up, a, &refused), None, "out of time");
    }
}
