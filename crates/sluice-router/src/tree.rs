//! A byte-level radix tree of path patterns.
//!
//! Hand-written rather than matchit because a gateway route lookup must fall back: when the most
//! specific path's routes are ruled out by their methods (or, later, their `vars`), the next
//! candidate is a parameter or prefix route further up the tree (APISIX's radixtree does the
//! same). matchit returns one match and cannot backtrack. The tree visits candidates from most
//! to least specific: an exact end, then a longer static edge, then a parameter, then the
//! prefix routes of each node on the way back up; lookup cost depends on the path's length,
//! never on how many routes there are.
//!
//! The tree is persistent: nodes are shared through `Arc`, and a change copies only the nodes
//! on the changed path (`Arc::make_mut`), so a new routing table that differs by one route
//! costs a few node copies and shares everything else with the table still in service.

use std::sync::Arc;

use crate::method::MethodSet;
use crate::pattern::{PathPattern, Token};

/// One route registered at a tree position.
#[derive(Debug)]
pub(crate) struct Leaf<T> {
    pub(crate) methods: MethodSet,
    pub(crate) priority: i32,
    /// Configuration order: ties go to the lower one.
    pub(crate) order: u64,
    pub(crate) value: Arc<T>,
}

impl<T> Clone for Leaf<T> {
    fn clone(&self) -> Self {
        Leaf {
            methods: self.methods,
            priority: self.priority,
            order: self.order,
            value: self.value.clone(),
        }
    }
}

impl<T> Leaf<T> {
    /// Highest priority first, then configuration order.
    fn rank(&self) -> (std::cmp::Reverse<i32>, u64) {
        (std::cmp::Reverse(self.priority), self.order)
    }
}

/// Boxed slices rather than vectors, and a leaf list allocated to its length: a table keeps
/// about one node per route (100,000 routes, 100,000 nodes), and they change only when routes
/// do, where rebuilding a slice of children costs nothing next to the rest of a change.
#[derive(Debug)]
pub(crate) struct Node<T> {
    label: Box<[u8]>,
    /// First byte of each child's label, in the same order as `children`.
    indices: Box<[u8]>,
    children: Box<[Arc<Node<T>>]>,
    /// `:name` child: consumes one non-empty segment, then continues in its own subtree.
    param: Option<Arc<Node<T>>>,
    /// Routes whose pattern ends exactly here, in rank order.
    exact: Vec<Leaf<T>>,
    /// Routes whose pattern ends here with `*`: any continuation matches. In rank order.
    prefix: Vec<Leaf<T>>,
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Node {
            label: Box::default(),
            indices: Box::default(),
            children: Box::default(),
            param: None,
            exact: Vec::new(),
            prefix: Vec::new(),
        }
    }
}

impl<T> Clone for Node<T> {
    fn clone(&self) -> Self {
        Node {
            label: self.label.clone(),
            indices: self.indices.clone(),
            children: self.children.clone(),
            param: self.param.clone(),
            exact: self.exact.clone(),
            prefix: self.prefix.clone(),
        }
    }
}

impl<T> Node<T> {
    fn with_label(label: &[u8]) -> Node<T> {
        Node {
            label: label.into(),
            ..Node::default()
        }
    }

    pub(crate) fn is_empty_tree(&self) -> bool {
        self.children.is_empty()
            && self.param.is_none()
            && self.exact.is_empty()
            && self.prefix.is_empty()
    }

    pub(crate) fn insert(&mut self, pattern: &PathPattern, leaf: Leaf<T>) {
        self.insert_tokens(&pattern.tokens, pattern.prefix, leaf);
    }

    fn insert_tokens(&mut self, tokens: &[Token], prefix: bool, leaf: Leaf<T>) {
        match tokens.split_first() {
            None => {
                let list = if prefix {
                    &mut self.prefix
                } else {
                    &mut self.exact
                };
                let at = list.partition_point(|l| l.rank() <= leaf.rank());
                if list.is_empty() {
                    // Most positions hold one route: not the four a first insert reserves.
                    list.reserve_exact(1);
                }
                list.insert(at, leaf);
            }
            Some((Token::Param, rest)) => {
                Arc::make_mut(self.param.get_or_insert_with(|| Arc::new(Node::default())))
                    .insert_tokens(rest, prefix, leaf)
            }
            Some((Token::Static(s), rest)) => self.insert_static(s, rest, prefix, leaf),
        }
    }

    fn insert_static(&mut self, s: &[u8], rest: &[Token], prefix: bool, leaf: Leaf<T>) {
        let Some(&first) = s.first() else {
            return self.insert_tokens(rest, prefix, leaf);
        };
        let Some(i) = self.indices.iter().position(|&b| b == first) else {
            let mut child = Node::with_label(s);
            child.insert_tokens(rest, prefix, leaf);
            self.indices = self.indices.iter().copied().chain([first]).collect();
            self.children = std::mem::take(&mut self.children)
                .into_vec()
                .into_iter()
                .chain([Arc::new(child)])
                .collect();
            return;
        };
        let child = Arc::make_mut(&mut self.children[i]);
        let common = child
            .label
            .iter()
            .zip(s)
            .take_while(|(a, b)| a == b)
            .count();
        if common < child.label.len() {
            // Split the edge: `child` keeps the common part, its old contents move below it.
            let tail = Node {
                label: child.label[common..].into(),
                indices: std::mem::take(&mut child.indices),
                children: std::mem::take(&mut child.children),
                param: child.param.take(),
                exact: std::mem::take(&mut child.exact),
                prefix: std::mem::take(&mut child.prefix),
            };
            child.label = s[..common].into();
            child.indices = Box::new([tail.label[0]]);
            child.children = Box::new([Arc::new(tail)]);
        }
        child.insert_static(&s[common..], rest, prefix, leaf);
    }

    /// Removes the route with configuration order `order` from the position of `pattern`.
    /// Returns whether it was there. Nodes left empty are pruned (an edge split by an earlier
    /// insertion stays split: lookups do not depend on it).
    pub(crate) fn remove(&mut self, pattern: &PathPattern, order: u64) -> bool {
        self.remove_tokens(&pattern.tokens, pattern.prefix, order)
    }

    fn remove_tokens(&mut self, tokens: &[Token], prefix: bool, order: u64) -> bool {
        match tokens.split_first() {
            None => {
                let list = if prefix {
                    &mut self.prefix
                } else {
                    &mut self.exact
                };
                let before = list.len();
                list.retain(|l| l.order != order);
                list.len() != before
            }
            Some((Token::Param, rest)) => {
                let Some(param) = &mut self.param else {
                    return false;
                };
                let node = Arc::make_mut(param);
                let removed = node.remove_tokens(rest, prefix, order);
                if node.is_empty_tree() {
                    self.param = None;
                }
                removed
            }
            Some((Token::Static(s), rest)) => self.remove_static(s, rest, prefix, order),
        }
    }

    fn remove_static(&mut self, s: &[u8], rest: &[Token], prefix: bool, order: u64) -> bool {
        let Some(&first) = s.first() else {
            return self.remove_tokens(rest, prefix, order);
        };
        let Some(i) = self.indices.iter().position(|&b| b == first) else {
            return false;
        };
        if !s.starts_with(&self.children[i].label) {
            return false;
        }
        let child = Arc::make_mut(&mut self.children[i]);
        let removed = child.remove_static(&s[child.label.len()..], rest, prefix, order);
        if child.is_empty_tree() {
            let mut indices = std::mem::take(&mut self.indices).into_vec();
            let mut children = std::mem::take(&mut self.children).into_vec();
            indices.remove(i);
            children.remove(i);
            self.indices = indices.into();
            self.children = children.into();
        }
        removed
    }

    /// Calls `f` on every route matching `path` (the part below this node), most specific first,
    /// until `f` returns true. Returns true when `f` stopped the walk.
    ///
    /// Nodes that leave nothing to fall back on (no `:param` child, no prefix routes) are
    /// descended in a loop rather than a call each: 100,000 prefix routes `/r{i}/*` make a
    /// table seven single-digit nodes deep, and a call per level was most of what they cost
    /// over one route (callgrind, docs/benchmarks.md).
    #[inline]
    pub(crate) fn visit<'s, F: FnMut(&'s Leaf<T>) -> bool>(
        &'s self,
        mut path: &[u8],
        f: &mut F,
    ) -> bool {
        let mut node = self;
        while node.param.is_none() && node.prefix.is_empty() {
            let Some(&first) = path.first() else {
                return node.exact.iter().any(f);
            };
            match node.child(first) {
                Some(child) if path.starts_with(&child.label) => {
                    path = &path[child.label.len()..];
                    node = child;
                }
                _ => return false,
            }
        }
        node.visit_here(path, f)
    }

    /// The child whose label starts with `first`.
    #[inline]
    fn child(&self, first: u8) -> Option<&Node<T>> {
        // A node has at most a few dozen children (one per distinct next byte): a plain
        // scan beats memchr's call and set-up on so few bytes (callgrind: 5,000 prefix
        // routes cost 6% more than one with memchr, see docs/benchmarks.md).
        let i = self.indices.iter().position(|&b| b == first)?;
        Some(&self.children[i])
    }

    /// [`Node::visit`] at a node with a parameter child or prefix routes (what it falls back to
    /// when the deeper walk finds nothing).
    fn visit_here<'s, F: FnMut(&'s Leaf<T>) -> bool>(&'s self, path: &[u8], f: &mut F) -> bool {
        if let Some(&first) = path.first() {
            if let Some(child) = self.child(first)
                && path.starts_with(&child.label)
                && child.visit(&path[child.label.len()..], f)
            {
                return true;
            }
            if let Some(param) = &self.param {
                let end = memchr::memchr(b'/', path).unwrap_or(path.len());
                if end > 0 && param.visit(&path[end..], f) {
                    return true;
                }
            }
        } else {
            for leaf in &self.exact {
                if f(leaf) {
                    return true;
                }
            }
        }
        for leaf in &self.prefix {
            if f(leaf) {
                return true;
            }
        }
        false
    }
}
