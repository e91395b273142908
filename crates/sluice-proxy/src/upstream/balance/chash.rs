//! `chash`: consistent hashing. Each node owns points on a ring in proportion to its weight
//! (160 per node on average, as `resty.chash` and NGINX's `hash ... consistent` use), placed by
//! a hash of the node as configured, so that adding or removing one of N nodes moves about
//! 1/N of the keys and the same key lands on the same node in every worker, process and
//! version of the configuration. A key's node is the first point at or after the key's hash
//! whose node may be picked; a retry or an unhealthy node moves on along the ring.
//!
//! The hash is written here (FNV-1a with a murmur3 finalizer) rather than taken from `std`,
//! whose `DefaultHasher` may change between Rust releases: a key must keep its node across
//! upgrades of the gateway too.

use super::{Balance, NodeSet, PickCx};
use crate::upstream::model::{Node, Upstream};

/// Average points per node.
const POINTS: u64 = 160;

/// A stable 64-bit hash of `bytes`.
pub(crate) fn key_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // murmur3's fmix64 spreads FNV's weak low bits over the whole word.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The ring of an upstream's nodes, built when the configuration is compiled.
#[derive(Debug)]
pub(crate) struct Ring {
    /// (point, node index), sorted by point.
    points: Box<[(u64, u32)]>,
}

impl Ring {
    pub(crate) fn new(nodes: &[Node]) -> Ring {
        let total: u64 = nodes.iter().map(|n| u64::from(n.weight)).sum();
        let mut points = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            if n.weight == 0 {
                continue;
            }
            let share = (POINTS * nodes.len() as u64 * u64::from(n.weight) / total.max(1)).max(1);
            // A node written as an address is placed by it; the addresses of a host name
            // (one node each) by the name and the address, or they would share their points.
            let name = if n.authority.parse::<std::net::SocketAddr>().is_ok() {
                n.authority.to_string()
            } else {
                format!("{}@{}", n.authority, n.addr.ip())
            };
            for j in 0..share {
                let mut key = Vec::with_capacity(name.len() + 8);
                key.extend_from_slice(name.as_bytes());
                key.push(b'#');
                key.extend_from_slice(j.to_string().as_bytes());
                points.push((key_hash(&key), i as u32));
            }
        }
        points.sort_unstable();
        Ring {
            points: points.into(),
        }
    }
}

impl Balance for Ring {
    fn pick(&mut self, up: &Upstream, cx: &PickCx, among: &NodeSet) -> Option<usize> {
        self.pick_shared(up, cx, among)
    }
}

impl Ring {
    /// The ring holds no per-worker state: a pick reads it through a shared reference.
    pub(crate) fn pick_shared(
        &self,
        _up: &Upstream,
        cx: &PickCx,
        among: &NodeSet,
    ) -> Option<usize> {
        if self.points.is_empty() || among.is_empty() {
            return None;
        }
        let start = self.points.partition_point(|(p, _)| *p < cx.key);
        let n = self.points.len();
        (0..n)
            .map(|k| self.points[(start + k) % n].1 as usize)
            .find(|i| among.contains(*i))
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

    fn owners(up: &Upstream, keys: u32) -> Vec<String> {
        let ring = Ring::new(&up.nodes);
        let among = all(up.nodes.len());
        (0..keys)
            .map(|k| {
                let cx = PickCx {
                    key: key_hash(format!("user-{k}").as_bytes()),
                };
                let i = ring.pick_shared(up, &cx, &among).unwrap();
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
        let ring = Ring::new(&up.nodes);
        let cx = PickCx {
            key: key_hash(b"alice"),
        };
        let first = ring.pick_shared(&up, &cx, &all(3)).unwrap();
        for _ in 0..10 {
            assert_eq!(ring.pick_shared(&up, &cx, &all(3)), Some(first));
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
        let next = ring.pick_shared(&up, &cx, &without).unwrap();
        assert_ne!(next, first);
        assert_eq!(ring.pick_shared(&up, &cx, &NodeSet::default()), None);
    }

    #[test]
    fn the_addresses_of_one_host_name_share_the_keys() {
        // `api.svc:80` resolved to three addresses: three nodes with one authority.
        let mut up = upstream("chash-dns", &[1, 1, 1]);
        for (i, n) in up.nodes.iter_mut().enumerate() {
            n.authority = "api.svc:80".into();
            n.addr = format!("10.0.0.{}:80", i + 1).parse().unwrap();
        }
        let ring = Ring::new(&up.nodes);
        let mut seen = [0usize; 3];
        for k in 0..3_000u32 {
            let cx = PickCx {
                key: key_hash(format!("user-{k}").as_bytes()),
            };
            seen[ring.pick_shared(&up, &cx, &all(3)).unwrap()] += 1;
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
