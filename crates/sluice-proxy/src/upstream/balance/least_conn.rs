//! `least_conn`: the node with the fewest requests in flight in this worker, relative to its
//! weight (NGINX's `least_conn`, APISIX's `least_conn`); ties go to one of them at random.
//! A request counts from its pick until its response head arrives or it fails.

use std::rc::Rc;

use super::pick::{Balance, PickCx, Plain, counters};
use super::set::NodeSet;
use crate::upstream::node::Node;
use crate::upstream::stats::{InFlight, NodeStats};

/// `type: least_conn`.
pub(super) static KIND: Plain =
    Plain::new("least_conn", |nodes, stats| Box::new(LeastConn(counters(nodes, stats))));

/// The worker's counters of the upstream's nodes, in node order (each shared with the node's
/// entry in the worker's table, keyed by address).
#[derive(Debug)]
pub(super) struct LeastConn(Vec<Rc<NodeStats>>);

impl Balance for LeastConn {
    fn in_flight(&self, node: usize) -> Option<InFlight> {
        Some(InFlight::start(&self.0[node], false))
    }

    fn pick(&mut self, nodes: &[Node], _cx: &PickCx, among: &NodeSet) -> Option<usize> {
        // Compare inflight/weight without division: a.inflight * b.weight < b.inflight * a.weight.
        let load = |i: usize| {
            let n = &nodes[i];
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
