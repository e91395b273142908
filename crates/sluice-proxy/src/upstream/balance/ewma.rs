//! `ewma`: latency-aware balancing by peak EWMA with the power of two choices (Finagle's and
//! linkerd's `PeakEwma`, APISIX's `ewma`): two distinct nodes are drawn at random and the one
//! with the lower cost gets the request, the cost being the peak-EWMA of its answer time
//! times one more than its requests in flight in this worker. A node never sampled costs 0
//! and is tried first; a slower answer raises the average at once, a faster one lowers it
//! over about ten seconds.

use std::rc::Rc;

use super::pick::{Balance, PickCx, Plain, counters};
use super::set::NodeSet;
use crate::upstream::node::Node;
use crate::upstream::stats::{InFlight, NodeStats};

/// `type: ewma`.
pub(super) static KIND: Plain =
    Plain::new("ewma", |nodes, stats| Box::new(Ewma(counters(nodes, stats))));

/// The worker's counters of the upstream's nodes, in node order (each shared with the node's
/// entry in the worker's table, keyed by address).
#[derive(Debug)]
pub(super) struct Ewma(Vec<Rc<NodeStats>>);

impl Balance for Ewma {
    fn in_flight(&self, node: usize) -> Option<InFlight> {
        Some(InFlight::start(&self.0[node], true))
    }

    fn pick(&mut self, nodes: &[Node], _cx: &PickCx, among: &NodeSet) -> Option<usize> {
        let n = among.len();
        let nth = |k: usize| among.iter().nth(k);
        let _ = nodes;
        let cost = |i: usize| self.0[i].cost();
        match n {
            0 => None,
            1 => nth(0),
            _ => {
                let a = fastrand::usize(..n);
                let b = (a + 1 + fastrand::usize(..n - 1)) % n;
                let (a, b) = (nth(a)?, nth(b)?);
                Some(if cost(b) < cost(a) { b } else { a })
            }
        }
    }
}
