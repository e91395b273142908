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

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use tree::{Leaf, Node};

/// Longest host that can match a host-specific route (DNS names are at most 253 bytes).
const MAX_HOST: usize = 255;

type HostTrees<T> = Arc<FxHashMap<Arc<[u8]>, Arc<Node<T>>>>;

/// A routing table. Lookups take `&self` and never lock, so one table is shared by every
/// worker. It is persistent: [`Router::clone`] is a few reference counts, and
/// [`Router::insert`] / [`Router::remove`] on the clone copy only the tree nodes they change,
/// so changing one route among 100,000 costs microseconds while the original keeps serving.
#[derive(Debug)]
pub struct Router<T> {
    any_host: Arc<Node<T>>,
    exact_hosts: HostTrees<T>,
    wildcard_hosts: HostTrees<T>,
    /// How many routes have each priority; the highest lets a lookup stop at the first match
    /// that has it.
    priorities: Arc<BTreeMap<i32, u32>>,
    max_priority: i32,
    len: usize,
}

impl<T> Clone for Router<T> {
    fn clone(&self) -> Self {
        Router {
            any_host: self.any_host.clone(),
            exact_hosts: self.exact_hosts.clone(),
            wildcard_hosts: self.wildcard_hosts.clone(),
            priorities: self.priorities.clone(),
            max_priority: self.max_priority,
            len: self.len,
        }
    }
}

impl<T> Default for Router<T> {
    fn default() -> Self {
        Router {
            any_host: Arc::default(),
            exact_hosts: Arc::default(),
            wildcard_hosts: Arc::default(),
            priorities: Arc::default(),
            max_priority: i32::MIN,
            len: 0,
        }
    }
}

/// Which requests a route matches: any of `paths`, on any of `hosts` (all hosts when empty),
/// for `methods`, with `priority`; `order` breaks ties (lower wins) and identifies the route
/// for [`Router::remove`], so it must be unique in a table.
#[derive(Debug, Clone, Copy)]
pub struct RouteKey<'a> {
    /// Path patterns.
    pub paths: &'a [PathPattern],
    /// Host patterns; empty means any host.
    pub hosts: &'a [HostPattern],
    /// Methods accepted.
    pub methods: MethodSet,
    /// Higher wins among routes that match.
    pub priority: i32,
    /// Configuration order, unique per route.
    pub order: u64,
}

impl<T> Router<T> {
    /// An empty table.
    pub fn new() -> Self {
        Router::default()
    }

    /// Adds a route. Its `order` must not be in the table already.
    pub fn insert(&mut self, key: RouteKey<'_>, value: Arc<T>) {
        let leaf = Leaf {
            methods: key.methods,
            priority: key.priority,
            order: key.order,
            value,
        };
        self.each_tree(key, |tree| {
            for p in key.paths {
                tree.insert(p, leaf.clone());
            }
        });
        *Arc::make_mut(&mut self.priorities)
            .entry(key.priority)
            .or_default() += 1;
        self.max_priority = self.max_priority.max(key.priority);
        self.len += 1;
    }

    /// Removes the route inserted with `key` (the same patterns, priority and order). Returns
    /// whether it was found.
    pub fn remove(&mut self, key: RouteKey<'_>) -> bool {
        let mut found = false;
        let mut remove = |tree: &mut Node<T>| {
            for p in key.paths {
                found |= tree.remove(p, key.order);
            }
        };
        if key.hosts.is_empty() {
            remove(Arc::make_mut(&mut self.any_host));
        }
        for h in key.hosts {
            let (map, name) = match h {
                HostPattern::Exact(name) => (&mut self.exact_hosts, name),
                HostPattern::Wildcard(suffix) => (&mut self.wildcard_hosts, suffix),
            };
            if !map.contains_key(&name[..]) {
                continue;
            }
            let map = Arc::make_mut(map);
            if let Some(tree) = map.get_mut(&name[..]) {
                let tree = Arc::make_mut(tree);
                remove(tree);
                // An empty host tree goes, so lookups stop consulting it.
                if tree.is_empty_tree() {
                    map.remove(&name[..]);
                }
            }
        }
        if found {
            let priorities = Arc::make_mut(&mut self.priorities);
            if let Some(n) = priorities.get_mut(&key.priority) {
                *n -= 1;
                if *n == 0 {
                    priorities.remove(&key.priority);
                }
            }
            self.max_priority = priorities.keys().next_back().copied().unwrap_or(i32::MIN);
            self.len -= 1;
        }
        found
    }

    /// Calls `f` with the tree of each of the route's hosts (copying it if it is shared).
    fn each_tree(&mut self, key: RouteKey<'_>, mut f: impl FnMut(&mut Node<T>)) {
        if key.hosts.is_empty() {
            f(Arc::make_mut(&mut self.any_host));
        }
        for h in key.hosts {
            let (map, name) = match h {
                HostPattern::Exact(name) => (&mut self.exact_hosts, name),
                HostPattern::Wildcard(suffix) => (&mut self.wildcard_hosts, suffix),
            };
            let map = Arc::make_mut(map);
            let tree = match map.get_mut(&name[..]) {
                Some(t) => t,
                None => map.entry(Arc::from(&name[..])).or_default(),
            };
            f(Arc::make_mut(tree));
        }
    }

    /// The route for a request: `host` is the `Host` header value (port allowed, any case),
    /// `path` the normalized path without the query.
    pub fn find(&self, host: &[u8], method: Method, path: &[u8]) -> Option<&T> {
        self.find_with(host, method, path, |_| true).map(|v| &**v)
    }

    /// As [`Router::find`], for routes with conditions of their own beyond host, method and
    /// path (APISIX's `vars`, `remote_addrs`): `accept` is asked about a candidate only when it
    /// would win, so a route whose conditions fail lets the next candidate be chosen.
    /// The route comes as the table holds it (an `Arc`), for a caller that keeps it past the
    /// table's borrow (a WebSocket tunnel logged when it closes). (Always inlined: it is on
    /// every request, and a call of its own measured 55 instructions per request.)
    #[inline(always)]
    pub fn find_with(
        &self,
        host: &[u8],
        method: Method,
        path: &[u8],
        accept: impl FnMut(&T) -> bool,
    ) -> Option<&Arc<T>> {
        let mut best: Option<&Leaf<T>> = None;
        {
            let mut consider = chooser(&mut best, method, self.max_priority, accept);
            let done = (!self.exact_hosts.is_empty() || !self.wildcard_hosts.is_empty())
                && self.visit_host_trees(host, path, &mut consider);
            if !done {
                self.any_host.visit(path, &mut consider);
            }
        }
        best.map(|leaf| &leaf.value)
    }

    fn visit_host_trees<'s, F: FnMut(&'s Leaf<T>) -> bool>(
        &'s self,
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
        self.len
    }

    /// True when the table has no route.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The closure a lookup calls on each candidate, most specific first: keeps the best match
/// in `best` and stops the walk once nothing can beat it.
fn chooser<'s, 'b, T>(
    best: &'b mut Option<&'s Leaf<T>>,
    method: Method,
    max: i32,
    mut accept: impl FnMut(&T) -> bool + 'b,
) -> impl FnMut(&'s Leaf<T>) -> bool + 'b {
    move |leaf| {
        if !leaf.methods.contains(method) {
            return false;
        }
        match best {
            Some(b) if b.priority >= leaf.priority => false,
            _ if !accept(&leaf.value) => false,
            _ => {
                *best = Some(leaf);
                leaf.priority == max
            }
        }
    }
}

/// Builds a [`Router`] from routes in configuration order (the order breaks ties).
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
            router: Router::new(),
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
        let order = self.router.len as u64;
        let key = RouteKey {
            paths,
            hosts,
            methods,
            priority,
            order,
        };
        self.router.insert(key, Arc::new(value));
    }

    /// Number of routes added so far.
    pub fn len(&self) -> usize {
        self.router.len()
    }

    /// True when no route was added.
    pub fn is_empty(&self) -> bool {
        self.router.is_empty()
    }

    /// The finished table.
    pub fn build(self) -> Router<T> {
        self.router
    }
}

#[cfg(test)]
mod tests;
