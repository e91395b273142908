//! The interfaces of a balancing algorithm: [`Kind`] (what an upstream's `type` names: checks
//! its fields and compiles it), [`Algorithm`] (compiled, shared by the workers) and
//! [`Balance`] (a worker's own state, which picks), and what a pick may look at.

use sluice_config::{UpstreamConfig, Validator};

use std::rc::Rc;

use super::set::NodeSet;
use crate::upstream::key::HashOn;
use crate::upstream::node::Node;
use crate::upstream::stats::{InFlight, NodeStats};

/// What a pick may look at besides the nodes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PickCx {
    /// The request's hash key, for `chash` (0 when the upstream does not hash).
    pub(crate) key: u64,
}

/// A balancing algorithm, as an upstream's `type` names it: one file, one line in
/// `balancers!` (balance/mod.rs).
pub(crate) trait Kind: Sync {
    /// The `type` that names it.
    fn name(&self) -> &'static str;

    /// Checks the upstream's fields it reads (`v` points at the upstream) and compiles it for
    /// the upstream's nodes.
    fn build(
        &self,
        u: &UpstreamConfig,
        nodes: &[Node],
        v: &mut Validator,
    ) -> Option<Box<dyn Algorithm>>;
}

/// An upstream's compiled algorithm, shared by every worker.
pub(crate) trait Algorithm: Send + Sync + std::fmt::Debug {
    /// The request key to hash, for an algorithm that hashes one.
    fn hash_on(&self) -> Option<&HashOn> {
        None
    }

    /// A worker's own state for the upstream's `nodes`, made at the worker's first pick there;
    /// `stats` gives the worker's counters of a node (by its pool key), which the state may
    /// share.
    fn local(
        &self,
        nodes: &[Node],
        stats: &mut dyn FnMut(u64) -> Rc<NodeStats>,
    ) -> Box<dyn Balance>;
}

/// A worker's state of an upstream's algorithm: it picks.
pub(crate) trait Balance: std::fmt::Debug {
    /// Chooses one node of `among` (never empty). None only when `among` is empty.
    fn pick(&mut self, nodes: &[Node], cx: &PickCx, among: &NodeSet) -> Option<usize>;

    /// What to count while the request is at `node` (`least_conn`, `ewma`).
    fn in_flight(&self, _node: usize) -> Option<InFlight> {
        None
    }
}

/// A worker's state for an upstream's nodes, made from them and the worker's counters.
pub(crate) type MakeLocal = fn(&[Node], &mut dyn FnMut(u64) -> Rc<NodeStats>) -> Box<dyn Balance>;

/// A balancer with no upstream fields of its own (`roundrobin`, `least_conn`, `ewma`): its
/// [`Kind`] and [`Algorithm`] in one line,
/// `static KIND: Plain = Plain::new("name", |nodes, stats| Box::new(State::new(...)));`.
#[derive(Clone, Copy)]
pub(crate) struct Plain {
    name: &'static str,
    local: MakeLocal,
}

impl Plain {
    pub(crate) const fn new(name: &'static str, local: MakeLocal) -> Plain {
        Plain { name, local }
    }
}

impl std::fmt::Debug for Plain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Kind for Plain {
    fn name(&self) -> &'static str {
        self.name
    }

    fn build(
        &self,
        _u: &UpstreamConfig,
        _nodes: &[Node],
        _v: &mut Validator,
    ) -> Option<Box<dyn Algorithm>> {
        Some(Box::new(*self))
    }
}

impl Algorithm for Plain {
    fn local(
        &self,
        nodes: &[Node],
        stats: &mut dyn FnMut(u64) -> Rc<NodeStats>,
    ) -> Box<dyn Balance> {
        (self.local)(nodes, stats)
    }
}

/// The worker's counters of `nodes`, in node order (each shared with the node's entry in the
/// worker's table, keyed by address).
pub(crate) fn counters(
    nodes: &[Node],
    stats: &mut dyn FnMut(u64) -> Rc<NodeStats>,
) -> Vec<Rc<NodeStats>> {
    nodes.iter().map(|n| stats(n.pool_key)).collect()
}
