//! Balancers: one file per algorithm behind [`Balance`]. A balancer only chooses among the
//! nodes it is handed ([`NodeSet`]: in rotation, not yet tried by this request, of the best
//! priority available); health, priorities and retries are decided once, in
//! [`super::select`], for every algorithm (APISIX's balancers expose the same two calls:
//! `get(ctx)` and `after_balance(ctx, before_retry)`).

mod chash;
mod ewma;
mod least_conn;
mod roundrobin;

pub(crate) use chash::{Ring, key_hash};
pub(crate) use ewma::Ewma;
pub(crate) use least_conn::LeastConn;
pub(crate) use roundrobin::RoundRobin;

use super::model::Upstream;

/// One worker's balancer state for one upstream.
#[derive(Debug)]
pub(crate) enum LocalBalancer {
    RoundRobin(RoundRobin),
    /// `least_conn` and `ewma`: the worker's load counters of the upstream's nodes, in node
    /// order (each shared with the node's entry in the worker's table, keyed by address).
    Load(Vec<std::rc::Rc<super::pool::NodeStats>>),
}

/// What a pick may look at besides the nodes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PickCx {
    /// The request's hash key, for `chash` (0 when the upstream does not hash).
    pub(crate) key: u64,
}

/// The interface of a balancing algorithm.
pub(crate) trait Balance {
    /// Chooses one node of `among` (never empty). None only when `among` is empty.
    fn pick(&mut self, up: &Upstream, cx: &PickCx, among: &NodeSet) -> Option<usize>;
}

/// A set of node indexes: one word inline, more only for upstreams of over 64 nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeSet {
    first: u64,
    rest: Vec<u64>,
}

impl NodeSet {
    #[inline]
    pub(crate) fn contains(&self, i: usize) -> bool {
        if i < 64 {
            self.first & (1 << i) != 0
        } else {
            self.rest
                .get(i / 64 - 1)
                .is_some_and(|w| w & (1 << (i % 64)) != 0)
        }
    }

    #[inline]
    pub(crate) fn insert(&mut self, i: usize) {
        if i < 64 {
            self.first |= 1 << i;
        } else {
            let w = i / 64 - 1;
            if self.rest.len() <= w {
                self.rest.resize(w + 1, 0);
            }
            self.rest[w] |= 1 << (i % 64);
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.first == 0 && self.rest.iter().all(|w| *w == 0)
    }

    pub(crate) fn clear(&mut self) {
        self.first = 0;
        self.rest.clear();
    }

    /// The members, in increasing order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.first)
            .chain(self.rest.iter().copied())
            .enumerate()
            .flat_map(|(wi, mut w)| {
                std::iter::from_fn(move || {
                    if w == 0 {
                        return None;
                    }
                    let b = w.trailing_zeros() as usize;
                    w &= w - 1;
                    Some(wi * 64 + b)
                })
            })
    }

    pub(crate) fn len(&self) -> usize {
        self.first.count_ones() as usize
            + self
                .rest
                .iter()
                .map(|w| w.count_ones() as usize)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_set_holds_any_index() {
        let mut s = NodeSet::default();
        assert!(s.is_empty());
        for i in [0, 5, 63, 64, 130] {
            s.insert(i);
        }
        assert!(s.contains(63) && s.contains(64) && s.contains(130) && !s.contains(1));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 5, 63, 64, 130]);
        assert_eq!(s.len(), 5);
        s.clear();
        assert!(s.is_empty() && !s.contains(130));
    }
}
