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

use super::set::NodeSet;

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
    /// The ring of nodes given as (authority as configured, address, weight), in node order.
    pub(crate) fn new(nodes: &[(&str, std::net::IpAddr, u32)]) -> Ring {
        let total: u64 = nodes.iter().map(|n| u64::from(n.2)).sum();
        let mut points = Vec::new();
        for (i, &(authority, ip, weight)) in nodes.iter().enumerate() {
            if weight == 0 {
                continue;
            }
            let share = (POINTS * nodes.len() as u64 * u64::from(weight) / total.max(1)).max(1);
            // A node written as an address is placed by it; the addresses of a host name
            // (one node each) by the name and the address, or they would share their points.
            let name = if authority.parse::<std::net::SocketAddr>().is_ok() {
                authority.to_string()
            } else {
                format!("{authority}@{ip}")
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

impl Ring {
    /// The ring holds no per-worker state: a pick reads it through a shared reference.
    /// The first node at or after `key` on the ring that is in `among`.
    pub(crate) fn pick_shared(&self, key: u64, among: &NodeSet) -> Option<usize> {
        if self.points.is_empty() || among.is_empty() {
            return None;
        }
        let start = self.points.partition_point(|(p, _)| *p < key);
        let n = self.points.len();
        (0..n)
            .map(|k| self.points[(start + k) % n].1 as usize)
            .find(|i| among.contains(*i))
    }
}
