//! `roundrobin`: smooth weighted round-robin, NGINX's `ngx_http_upstream_get_peer`. Each
//! worker keeps its own `current_weight`s (no shared write per request).

use super::pick::{Balance, PickCx, Plain};
use super::set::NodeSet;
use crate::upstream::node::Node;

/// `type: roundrobin`, the default.
pub(super) static KIND: Plain =
    Plain::new("roundrobin", |nodes, _| Box::new(RoundRobin::new(nodes.len())));

/// One worker's round-robin state for one upstream.
#[derive(Debug)]
pub(crate) struct RoundRobin {
    current: Vec<i64>,
}

impl RoundRobin {
    pub(crate) fn new(nodes: usize) -> Self {
        RoundRobin {
            current: vec![0; nodes],
        }
    }
}

impl Balance for RoundRobin {
    fn pick(&mut self, nodes: &[Node], _cx: &PickCx, among: &NodeSet) -> Option<usize> {
        let mut total: i64 = 0;
        let mut best: Option<usize> = None;
        for i in among.iter() {
            let w = i64::from(nodes[i].weight);
            self.current[i] += w;
            total += w;
            if best.is_none_or(|b| self.current[i] > self.current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        self.current[b] -= total;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::model::testing::upstream;

    fn all(n: usize) -> NodeSet {
        let mut s = NodeSet::default();
        (0..n).for_each(|i| s.insert(i));
        s
    }

    #[test]
    fn smooth_weighted_round_robin_interleaves_like_nginx() {
        // NGINX's documented example: weights 5, 1, 1 give a a b a c a a.
        let up = upstream("rr-test", &[5, 1, 1]);
        let mut rr = RoundRobin::new(up.nodes.len());
        let picks: Vec<usize> = (0..7)
            .map(|_| rr.pick(&up.nodes, &PickCx::default(), &all(3)).unwrap())
            .collect();
        assert_eq!(picks, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn only_the_nodes_handed_over_are_picked() {
        let up = upstream("rr-test-2", &[1, 1, 1]);
        let mut rr = RoundRobin::new(up.nodes.len());
        let mut s = NodeSet::default();
        s.insert(2);
        for _ in 0..5 {
            assert_eq!(rr.pick(&up.nodes, &PickCx::default(), &s), Some(2));
        }
        assert_eq!(rr.pick(&up.nodes, &PickCx::default(), &NodeSet::default()), None);
    }
}
