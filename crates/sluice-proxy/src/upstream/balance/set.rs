//! A set of node indexes (which nodes a pick may choose among, which a request tried): a
//! leaf below every balancer and the lifecycle in `select.rs`.

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
