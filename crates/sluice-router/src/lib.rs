//! Route matching for Sluice: which route serves a request, from its host, method and path.
//!
//! Owns: path and host patterns ([`PathPattern`], [`HostPattern`]), methods, and the compiled
//! [`Router`]. Does not own: what a route does (plugins, upstreams); a route is an opaque value
//! `T` here. Pure code: no I/O, no async runtime, so it can be tested and fuzzed alone.
//!
//! Matching order, for operators:
//! 1. Candidates come from routes whose `hosts` name the request's host exactly, then from
//!    wildcard hosts (`*.example.com`, longest suffix first), then from routes without hosts
//!    (APISIX's `radixtree_host_uri` order).
//! 2. Within each, paths from most to least specific: exact, then longer static prefixes,
//!    then parameters, then `*` prefixes from longest to shortest.
//! 3. A candidate must accept the method. Among all candidates that match, the highest
//!    `priority` wins; ties go to the first in the order above, then to configuration order.

#![warn(missing_docs, unreachable_pub)]

mod method;
mod pattern;
mod tree;

pub use method::{Method, MethodSet};
pub use pattern::{HostPattern, MAX_PATTERN_LEN, PathPattern, host_without_port, normalize_path};

use rustc_hash::FxHashMap;
use tree::{Leaf, Node};

/// Longest host that can match a host-specific route (DNS names are at most 253 bytes).
const MAX_HOST: usize = 255;

/// A compiled routing table. Immutable; cheap to share between threads.
#[derive(Debug)]
pub struct Router<T> {
    values: Vec<T>,
    any_host: Node,
    exact_hosts: FxHashMap<Box<[u8]>, Node>,
    wildcard_hosts: FxHashMap<Box<[u8]>, Node>,
    max_priority: i32,
}

/// Builds a [`Router`].
#[derive(Debug)]
pub struct RouterBuilder<T> {
    router: Router<T>,
}

impl<T> Default for RouterBuilder<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> RouterBuilder<T> {
    /// An empty table.
    pub fn new() -> Self {
        RouterBuilder {
            router: Router {
                values: Vec::new(),
                any_host: Node::default(),
                exact_hosts: FxHashMap::default(),
                wildcard_hosts: FxHashMap::default(),
                max_priority: i32::MIN,
            },
        }
    }

    /// Adds a route that matches any of `paths`, on any of `hosts` (all hosts when empty), for
    /// `methods`, with `priority`. Routes added earlier win ties.
    pub fn insert(
        &mut self,
        paths: &[PathPattern],
        hosts: &[HostPattern],
        methods: MethodSet,
        priority: i32,
        value: T,
    ) {
        let r = &mut self.router;
        let slot = u32::try_from(r.values.len()).expect("fewer than 2^32 routes");
        r.values.push(value);
        r.max_priority = r.max_priority.max(priority);
        let leaf = Leaf {
            methods,
            priority,
            slot,
        };
        let add = |node: &mut Node| {
            for p in paths {
                node.insert(p, leaf);
            }
        };
        if hosts.is_empty() {
            add(&mut r.any_host);
        }
        for h in hosts {
            match h {
                HostPattern::Exact(name) => add(r.exact_hosts.entry(name.clone()).or_default()),
                HostPattern::Wildcard(suffix) => {
                    add(r.wildcard_hosts.entry(suffix.clone()).or_default())
                }
            }
        }
    }

    /// Number of routes added so far.
    pub fn len(&self) -> usize {
        self.router.values.len()
    }

    /// True when no route was added.
    pub fn is_empty(&self) -> bool {
        self.router.values.is_empty()
    }

    /// The finished table.
    pub fn build(mut self) -> Router<T> {
        let r = &mut self.router;
        r.any_host.finish();
        r.exact_hosts.values_mut().for_each(Node::finish);
        r.wildcard_hosts.values_mut().for_each(Node::finish);
        self.router
    }
}

impl<T> Router<T> {
    /// The route for a request: `host` is the `Host` header value (port allowed, any case),
    /// `path` the normalized path without the query.
    pub fn find(&self, host: &[u8], method: Method, path: &[u8]) -> Option<&T> {
        let max = self.max_priority;
        let mut best: Option<Leaf> = None;
        let mut consider = |leaf: &Leaf| -> bool {
            if !leaf.methods.contains(method) {
                return false;
            }
            match best {
                Some(b) if b.priority >= leaf.priority => false,
                _ => {
                    best = Some(*leaf);
                    leaf.priority == max
                }
            }
        };
        let done = (!self.exact_hosts.is_empty() || !self.wildcard_hosts.is_empty())
            && self.visit_host_trees(host, path, &mut consider);
        if !done {
            self.any_host.visit(path, &mut consider);
        }
        best.map(|leaf| &self.values[leaf.slot as usize])
    }

    fn visit_host_trees<F: FnMut(&Leaf) -> bool>(
        &self,
        host: &[u8],
        path: &[u8],
        f: &mut F,
    ) -> bool {
        let host = host_without_port(host);
        if host.len() > MAX_HOST {
            return false;
        }
        let mut buf = [0u8; MAX_HOST];
        let lower = &mut buf[..host.len()];
        lower.copy_from_slice(host);
        lower.make_ascii_lowercase();
        let host = &*lower;
        if let Some(tree) = self.exact_hosts.get(host)
            && tree.visit(path, f)
        {
            return true;
        }
        if !self.wildcard_hosts.is_empty() {
            for (i, &b) in host.iter().enumerate() {
                if b == b'.'
                    && let Some(tree) = self.wildcard_hosts.get(&host[i..])
                    && tree.visit(path, f)
                {
                    return true;
                }
            }
        }
        false
    }

    /// Number of routes in the table.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when the table has no route.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The routes, in the order they were added.
    pub fn values(&self) -> &[T] {
        &self.values
    }
}

#[cfg(test)]
mod tests;
