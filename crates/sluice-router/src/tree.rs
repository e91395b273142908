//! A byte-level radix tree of path patterns.
//!
//! Hand-written rather than matchit because a gateway route lookup must fall back: when the most
//! specific path's routes are ruled out by their methods (or, later, their `vars`), the next
//! candidate is a parameter or prefix route further up the tree (APISIX's radixtree does the
//! same). matchit returns one match and cannot backtrack. The tree visits candidates from most
//! to least specific: an exact end, then a longer static edge, then a parameter, then the
//! prefix routes of each node on the way back up; lookup cost depends on the path's length,
//! never on how many routes there are.

use crate::method::MethodSet;
use crate::pattern::{PathPattern, Token};

/// One route registered at a tree position.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaf {
    pub(crate) methods: MethodSet,
    pub(crate) priority: i32,
    pub(crate) slot: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Node {
    label: Box<[u8]>,
    /// First byte of each child's label, in the same order as `children`.
    indices: Vec<u8>,
    children: Vec<Node>,
    /// `:name` child: consumes one non-empty segment, then continues in its own subtree.
    param: Option<Box<Node>>,
    /// Routes whose pattern ends exactly here.
    exact: Vec<Leaf>,
    /// Routes whose pattern ends here with `*`: any continuation matches.
    prefix: Vec<Leaf>,
}

impl Node {
    fn with_label(label: &[u8]) -> Node {
        Node {
            label: label.into(),
            ..Node::default()
        }
    }

    pub(crate) fn insert(&mut self, pattern: &PathPattern, leaf: Leaf) {
        self.insert_tokens(&pattern.tokens, pattern.prefix, leaf);
    }

    fn insert_tokens(&mut self, tokens: &[Token], prefix: bool, leaf: Leaf) {
        match tokens.split_first() {
            None => {
                if prefix {
                    self.prefix.push(leaf)
                } else {
                    self.exact.push(leaf)
                }
            }
            Some((Token::Param, rest)) => self
                .param
                .get_or_insert_with(|| Box::new(Node::default()))
                .insert_tokens(rest, prefix, leaf),
            Some((Token::Static(s), rest)) => self.insert_static(s, rest, prefix, leaf),
        }
    }

    fn insert_static(&mut self, s: &[u8], rest: &[Token], prefix: bool, leaf: Leaf) {
        let Some(&first) = s.first() else {
            return self.insert_tokens(rest, prefix, leaf);
        };
        let Some(i) = self.indices.iter().position(|&b| b == first) else {
            let mut child = Node::with_label(s);
            child.insert_tokens(rest, prefix, leaf);
            self.indices.push(first);
            self.children.push(child);
            return;
        };
        let child = &mut self.children[i];
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
            child.indices = vec![tail.label[0]];
            child.children = vec![tail];
        }
        child.insert_static(&s[common..], rest, prefix, leaf);
    }

    /// Orders each position's routes by priority (highest first), then by configuration order.
    pub(crate) fn finish(&mut self) {
        let key = |l: &Leaf| (std::cmp::Reverse(l.priority), l.slot);
        self.exact.sort_by_key(key);
        self.prefix.sort_by_key(key);
        self.exact.shrink_to_fit();
        self.prefix.shrink_to_fit();
        self.children.shrink_to_fit();
        for c in &mut self.children {
            c.finish();
        }
        if let Some(p) = &mut self.param {
            p.finish();
        }
    }

    /// Calls `f` on every route matching `path` (the part below this node), most specific first,
    /// until `f` returns true. Returns true when `f` stopped the walk.
    #[inline]
    pub(crate) fn visit<F: FnMut(&Leaf) -> bool>(&self, path: &[u8], f: &mut F) -> bool {
        if let Some(&first) = path.first() {
            if let Some(i) = memchr::memchr(first, &self.indices) {
                let child = &self.children[i];
                if path.starts_with(&child.label) && child.visit(&path[child.label.len()..], f) {
                    return true;
                }
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
