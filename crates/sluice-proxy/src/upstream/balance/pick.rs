//! The interface of a balancing algorithm ([`Balance`]) and what a pick may look at.

use super::set::NodeSet;
use crate::upstream::model::Upstream;

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
