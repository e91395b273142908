//! `chash`: consistent hashing of a request key (`hash_on`, `key`) over the ring of
//! `ring.rs`, built with the upstream and shared by every worker.

use std::sync::Arc;

use std::rc::Rc;

use sluice_config::{UpstreamConfig, Validator};

use super::pick::{Algorithm, Balance, Kind, PickCx};
use super::ring::Ring;
use super::set::NodeSet;
use crate::upstream::key::HashOn;
use crate::upstream::node::Node;
use crate::upstream::stats::NodeStats;

pub(super) static KIND: ChashKind = ChashKind;

/// `type: chash`.
pub(super) struct ChashKind;

impl Kind for ChashKind {
    fn name(&self) -> &'static str {
        "chash"
    }

    fn build(
        &self,
        u: &UpstreamConfig,
        nodes: &[Node],
        v: &mut Validator,
    ) -> Option<Box<dyn Algorithm>> {
        let on = HashOn::check(u.hash_on.as_deref(), u.key.as_deref(), v)?;
        let ring = Ring::new(
            &nodes
                .iter()
                .map(|n| (&*n.authority, n.addr.ip(), n.weight))
                .collect::<Vec<_>>(),
        );
        Some(Box::new(Chash {
            ring: Arc::new(ring),
            on,
        }))
    }
}

/// A compiled `chash`: the ring and what to hash.
#[derive(Debug)]
struct Chash {
    ring: Arc<Ring>,
    on: HashOn,
}

impl Algorithm for Chash {
    fn hash_on(&self) -> Option<&HashOn> {
        Some(&self.on)
    }

    /// No state of its own: the worker reads the shared ring.
    fn local(
        &self,
        _nodes: &[Node],
        _stats: &mut dyn FnMut(u64) -> Rc<NodeStats>,
    ) -> Box<dyn Balance> {
        Box::new(Shared(self.ring.clone()))
    }
}

#[derive(Debug)]
struct Shared(Arc<Ring>);

impl Balance for Shared {
    fn pick(&mut self, _nodes: &[Node], cx: &PickCx, among: &NodeSet) -> Option<usize> {
        self.0.pick_shared(cx.key, among)
    }
}

#[cfg(test)]
mod tests {
    use super::super::ring::key_hash;
    use super::*;
    use crate::upstream::model::testing::upstream;
    use crate::upstream::model::{Node, Upstream};

    fn ring_of(up: &Upstream) -> Ring {
        let nodes: Vec<_> = up
            .nodes
            .iter()
            .map(|n| (&*n.authority, n.addr.ip(), n.weight))
            .collect();
        Ring::new(&nodes)
    }

    fn all(n: usize) -> NodeSet {
        let mut s = NodeSet::default();
        (0..n).for_each(|i| s.insert(i));
        s
    }

    fn owners(up: &Upstream, keys: u32) -> Vec<String> {
        let ring = ring_of(up);
        let among = all(up.nodes.len());
        (0..keys)
            .map(|k| {
                let cx = PickCx {
                    key: key_hash(format!("user-{k}").as_bytes()),
                };
                let i = ring.pick_shared(cx.key, &among).unwrap();
                up.nodes[i].authority.to_string()
            })
            .collect()
    }

    #[test]
    fn removing_one_of_five_nodes_moves_only_its_keys() {
        let five = upstream("chash-5", &[1, 1, 1, 1, 1]);
        // The same nodes without the third.
        let mut four = upstream("chash-4", &[1, 1, 1, 1, 1]);
        let mut nodes: Vec<Node> = std::mem::take(&mut four.nodes).into_vec();
        nodes.remove(2);
        four.nodes = nodes.into();
        let (a, b) = (owners(&five, 10_000), owners(&four, 10_000));
        let removed = &*five.nodes[2].authority;
        let moved = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        let on_removed = a.iter().filter(|x| *x == removed).count();
        // Only the removed node's keys move, and it held about a fifth of them.
        assert_eq!(moved, on_removed, "keys of kept nodes moved");
        assert!(moved <= 2_500, "{moved} of 10000 keys moved");
        assert!(moved >= 1_200, "the removed node held only {moved} keys");
        // Each node holds a fair share.
        for n in five.nodes.iter() {
            let c = a.iter().filter(|x| **x == *n.authority).count();
            assert!((1_300..=2_700).contains(&c), "{}: {c} keys", n.authority);
        }
    }

    #[test]
    fn the_same_key_lands_on_the_same_node_and_moves_on_when_it_is_excluded() {
        let up = upstream("chash-3", &[1, 1, 1]);
        let ring = ring_of(&up);
        let cx = PickCx {
            key: key_hash(b"alice"),
        };
        let first = ring.pick_shared(cx.key, &all(3)).unwrap();
        for _ in 0..10 {
            assert_eq!(ring.pick_shared(cx.key, &all(3)), Some(first));
        }
        let mut without = all(3);
        without = {
            let mut s = NodeSet::default();
            without
                .iter()
                .filter(|i| *i != first)
                .for_each(|i| s.insert(i));
            s
        };
        let next = ring.pick_shared(cx.key, &without).unwrap();
        assert_ne!(next, first);
        assert_eq!(ring.pick_shared(cx.key, &NodeSet::default()), None);
    }

    #[test]
    fn the_addresses_of_one_host_name_share_the_keys() {
        // `api.svc:80` resolved to three addresses: three nodes with one authority.
        let mut up = upstream("chash-dns", &[1, 1, 1]);
        for (i, n) in up.nodes.iter_mut().enumerate() {
            n.authority = "api.svc:80".into();
            n.addr = format!("10.0.0.{}:80", i + 1).parse().unwrap();
        }
        let ring = ring_of(&up);
        let mut seen = [0usize; 3];
        for k in 0..3_000u32 {
            let cx = PickCx {
                key: key_hash(format!("user-{k}").as_bytes()),
            };
            seen[ring.pick_shared(cx.key, &all(3)).unwrap()] += 1;
        }
        assert!(seen.iter().all(|c| (600..=1_400).contains(c)), "{seen:?}");
    }

    #[test]
    fn weights_shape_the_shares() {
        let up = upstream("chash-w", &[3, 1]);
        let a = owners(&up, 10_000);
        let heavy = a.iter().filter(|x| **x == *up.nodes[0].authority).count();
        assert!((6_500..=8_500).contains(&heavy), "{heavy}");
    }
}
