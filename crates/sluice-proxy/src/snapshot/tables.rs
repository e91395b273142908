//! The upstreams of a compilation: named, inline (identical ones once) and those plugins name.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_config::{UpstreamConfig, Validator};
use sluice_core::UpstreamRef;

use crate::upstream::{Upstream, build_upstream, upstream_uid};

/// Upstreams compiled so far.
#[derive(Default)]
pub(super) struct UpstreamTable {
    pub(super) list: Vec<Arc<Upstream>>,
    pub(super) named: HashMap<String, u32>,
    /// Identical inline upstreams share one compiled upstream (and so one pool per worker):
    /// the 5,000 routes of the seeds' scenario 4 all point at the same node.
    pub(super) inline: HashMap<String, u32>,
}

impl UpstreamTable {
    pub(super) fn extend(&mut self, more: UpstreamTable) {
        self.list.extend(more.list);
        self.named.extend(more.named);
        self.inline.extend(more.inline);
    }
}

/// The table a compilation reads and adds to: `base` (what a previous full compilation built,
/// empty for a full compilation) plus the upstreams added now, numbered after `base`'s.
pub(super) struct Tables<'a> {
    pub(super) base: &'a UpstreamTable,
    pub(super) added: UpstreamTable,
    /// How host names of nodes are resolved.
    pub(super) dns: Arc<sluice_config::DnsConfig>,
}

impl Tables<'_> {
    pub(super) fn push(&mut self, up: Upstream) -> u32 {
        self.added.list.push(Arc::new(up));
        (self.base.list.len() + self.added.list.len() - 1) as u32
    }

    pub(super) fn named(&self, id: &str) -> Option<u32> {
        self.base
            .named
            .get(id)
            .or_else(|| self.added.named.get(id))
            .copied()
    }

    pub(super) fn inline(&mut self, u: &UpstreamConfig, v: &mut Validator) -> Option<u32> {
        let key = format!("{u:?}");
        if let Some(&i) = self
            .base
            .inline
            .get(&key)
            .or_else(|| self.added.inline.get(&key))
        {
            return Some(i);
        }
        let up = build_upstream(u, None, upstream_uid(&key), &self.dns, v)?;
        let i = self.push(up);
        self.added.inline.insert(key, i);
        Some(i)
    }

    /// An upstream named in a plugin configuration: an id, or an inline object.
    pub(super) fn resolve(
        &mut self,
        value: &serde_json::Value,
        v: &mut Validator,
    ) -> Option<UpstreamRef> {
        let found = match value {
            serde_json::Value::String(id) => self.named(id),
            serde_json::Value::Number(n) => self.named(&n.to_string()),
            other => match serde_json::from_value::<UpstreamConfig>(other.clone()) {
                Ok(u) => self.inline(&u, v),
                Err(e) => {
                    v.error(e.to_string());
                    None
                }
            },
        };
        if found.is_none() && value.is_string() {
            v.error(format!("upstream {value} not found"));
        }
        found.map(UpstreamRef)
    }
}
