//! `least_conn`: the node with the fewest requests in flight in this worker, relative to its
//! weight (NGINX's `least_conn`, APISIX's `least_conn`); ties go to one of them at random.
//! A request counts from its pick until its response head arrives or it fails.

use super::pick::{Balance, PickCx};
use super::set::NodeSet;
use crate::upstream::model::Upstream;
use crate::upstream::pool::NodeStats;

/// Reads the worker's counters of the upstream's nodes, in node order.
pub(crate) struct LeastConn<'a>(pub(crate) &'a [std::rc::Rc<NodeStats>]);

impl Balance for LeastConn<'_> {
    fn pick(&mut self, up: &Upstream, _cx: &PickCx, among: &NodeSet) -> Option<usize> {
        // Compare inflight/weight without division: a.inflight * b.weight < b.inflight * a.weight.
        let load = |i: usize| {
            let n = &up.nodes[i];
            let inflight = self.0[i].inflight.get();
            (u64::from(inflight) + 1, u64::from(n.weight.max(1)))
        };
        // Ties are common (a request counts only until its answer's head): the scan starts at
        // a random member, so tied nodes share the traffic.
        let n = among.len();
        let start = if n > 1 { fastrand::usize(..n) } else { 0 };
        let mut best: Option<(usize, (u64, u64))> = None;
        for i in among.iter().skip(start).chain(among.iter().take(start)) {
            let l = load(i);
            if best.is_none_or(|(_, b)| l.0 * b.1 < b.0 * l.1) {
                best = Some((i, l));
            }
        }
        best.map(|(i, _)| i)
    }
}
