//! The configuration as a document: node settings, then each resource list keyed by id, in
//! document order, one rendered line per resource. Owns: the model ([`Doc`], [`Item`]), its
//! conversion to and from a map, rendering to the YAML layout Sluice writes, parsing a file,
//! the route-only diff of two documents, id helpers and the JSON merge patch.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value};
use sluice_config::{ConfigError, ConfigErrors};

use super::kind::Kind;

/// A resource list by id, in order. Fx-hashed: ids are not attacker-chosen keys here (only
/// the operator writes them), and SipHash was a third of a 100,000-route file reload.
pub(super) type Items = IndexMap<String, Item, rustc_hash::FxBuildHasher>;

/// One resource: its line in the file (rendered once, when it changes), and nothing else. The
/// parsed value is not kept: a JSON value costs about 1.6 KiB for a three-field route (a map
/// with its index, a string per key and value), the line about 60 bytes, and the value is
/// needed only by the admin API's reads and by whole-document checks, which parse the lines
/// again (about 1 µs each).
#[derive(Debug, Clone)]
pub(super) struct Item {
    /// A flow mapping: JSON (as Sluice writes it), or YAML flow as an operator may edit it.
    pub(super) line: Arc<str>,
    /// Cluster mode: the etcd revision of this value (0 otherwise). An older event for the
    /// same key is not applied over it.
    pub(super) rev: i64,
}

impl Item {
    /// Same resource: the same line, or the same value written differently.
    pub(super) fn same(&self, other: &Item) -> bool {
        Arc::ptr_eq(&self.line, &other.line)
            || self.line == other.line
            || self.value() == other.value()
    }

    pub(super) fn new(value: &Value) -> Item {
        let line = serde_json::to_string(value).unwrap_or_default();
        Item {
            line: line.into(),
            rev: 0,
        }
    }

    /// The resource as a value, parsed from its line (which parsed when it was stored).
    pub(super) fn value(&self) -> Value {
        parse_line(&self.line).unwrap_or_default()
    }
}

/// The configuration as a document: node settings, then each resource list keyed by id, in
/// document order. Ids are unique (a document is adopted only once it validated).
#[derive(Debug, Clone, Default)]
pub(super) struct Doc {
    pub(super) settings: Map<String, Value>,
    pub(super) lists: Vec<(Kind, Items)>,
    /// Some route has no `id` (its id is its position): route changes then go through a full
    /// compilation, since positions shift.
    pub(super) positional: bool,
}

impl Doc {
    pub(super) fn from_map(map: Map<String, Value>) -> Doc {
        let mut doc = Doc::default();
        for (k, v) in map {
            let Some(kind) = Kind::from_name(&k) else {
                doc.settings.insert(k, v);
                continue;
            };
            let mut items = Items::default();
            let list = match v {
                Value::Array(a) => a,
                _ => Vec::new(),
            };
            for (i, item) in list.into_iter().enumerate() {
                let id = match id_of(kind, &item) {
                    Some(id) => id,
                    None => {
                        doc.positional = true;
                        format!("{}[{i}]", kind.name())
                    }
                };
                items.insert(id, Item::new(&item));
            }
            doc.lists.push((kind, items));
        }
        doc
    }

    pub(super) fn to_map(&self) -> Map<String, Value> {
        let mut map = self.settings.clone();
        for (kind, items) in &self.lists {
            map.insert(
                kind.name().into(),
                Value::Array(items.values().map(Item::value).collect()),
            );
        }
        map
    }

    pub(super) fn list(&self, kind: Kind) -> Option<&Items> {
        self.lists.iter().find(|(k, _)| *k == kind).map(|(_, l)| l)
    }

    pub(super) fn list_mut(&mut self, kind: Kind) -> &mut Items {
        let i = match self.lists.iter().position(|(k, _)| *k == kind) {
            Some(i) => i,
            None => {
                self.lists.push((kind, Items::default()));
                self.lists.len() - 1
            }
        };
        &mut self.lists[i].1
    }

    /// The YAML file: node settings in block style, then each resource list with one resource
    /// per line (a JSON object, which is YAML too). One line per resource keeps a change a
    /// one-line diff, and writing 100,000 routes a copy of lines already rendered.
    pub(super) fn render(&self) -> Result<String, String> {
        let mut out = String::from(
            "# Managed by Sluice: admin API changes are written here; edits are applied live.\n",
        );
        if !self.settings.is_empty() {
            out.push_str(&yaml_serde::to_string(&self.settings).map_err(|e| e.to_string())?);
        }
        for (kind, items) in &self.lists {
            out.push_str(kind.name());
            if items.is_empty() {
                out.push_str(": []\n");
                continue;
            }
            out.push_str(":\n");
            for item in items.values() {
                out.push_str("  - ");
                out.push_str(&item.line);
                out.push('\n');
            }
        }
        Ok(out)
    }
}

/// The document a map renders to (for tests and tools): see [`Doc::render`].
pub fn render(doc: &Map<String, Value>) -> Result<String, String> {
    Doc::from_map(doc.clone()).render()
}

/// The route changes that turn `old` into `new`, when that is all that differs and the routes
/// the two share keep their relative order (new routes only at the end): then changing the
/// routes alone gives the same routing as compiling `new` whole. None otherwise.
pub(super) fn route_diff(old: &Doc, new: &Doc) -> Option<Vec<(usize, String, Option<Value>)>> {
    if old.positional || new.positional || old.settings != new.settings {
        return None;
    }
    let empty = Items::default();
    for kind in Kind::ALL.into_iter().filter(|k| *k != Kind::Routes) {
        let a = old.list(kind).unwrap_or(&empty);
        let b = new.list(kind).unwrap_or(&empty);
        if a.len() != b.len()
            || a.iter()
                .zip(b)
                .any(|((ia, va), (ib, vb))| ia != ib || !va.same(vb))
        {
            return None;
        }
    }
    let a = old.list(Kind::Routes).unwrap_or(&empty);
    let b = new.list(Kind::Routes).unwrap_or(&empty);
    // The common case, an edit that keeps every route where it was: compared in place.
    if a.len() == b.len() && a.keys().zip(b.keys()).all(|(x, y)| x == y) {
        return Some(
            a.values()
                .zip(b.iter())
                .enumerate()
                .filter(|(_, (old, (_, item)))| !old.same(item))
                .map(|(i, (_, (id, item)))| (i, id.clone(), Some(item.value())))
                .collect(),
        );
    }
    let kept_a = a.keys().filter(|id| b.contains_key(*id));
    let kept_b = b.keys().filter(|id| a.contains_key(*id));
    if !kept_a.eq(kept_b) {
        return None;
    }
    // New routes only after the last kept one.
    let last_kept = b.keys().rposition(|id| a.contains_key(id));
    if b.keys()
        .enumerate()
        .any(|(i, id)| !a.contains_key(id) && last_kept.is_some_and(|l| i < l))
    {
        return None;
    }
    let mut changes = Vec::new();
    for id in a.keys() {
        if !b.contains_key(id) {
            changes.push((0, id.clone(), None));
        }
    }
    for (i, (id, item)) in b.iter().enumerate() {
        if a.get(id).is_none_or(|old| !old.same(item)) {
            changes.push((i, id.clone(), Some(item.value())));
        }
    }
    Some(changes)
}

pub(super) fn hash(text: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    text.hash(&mut h);
    h.finish()
}

pub(super) fn parse_yaml(text: &str) -> Result<Map<String, Value>, ConfigErrors> {
    match sluice_config::parse_text(text)? {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        _ => Err(ConfigError::new(
            "",
            "the document must be a mapping of settings and resources",
        )
        .into()),
    }
}

pub(super) fn id_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(super) fn id_of(kind: Kind, item: &Value) -> Option<String> {
    item.get(kind.id_field()).and_then(id_text)
}

/// RFC 7396: objects merge recursively, `null` removes, anything else replaces.
pub(super) fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    merge(t.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

/// A resource line (`{...}`, JSON or YAML flow) as a value.
/// A key written twice makes it None: the whole file then goes to the YAML parser, which
/// reports it with its path.
pub(super) fn parse_line(item: &str) -> Option<Value> {
    match sluice_config::parse_json(item.as_bytes()) {
        Ok(v @ Value::Object(_)) => Some(v),
        Ok(_) => None,
        Err(_) => match sluice_config::parse_text(item) {
            Ok(v @ Value::Object(_)) => Some(v),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7396() {
        let mut t = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        merge(
            &mut t,
            serde_json::json!({"a": null, "b": {"c": 9}, "e": [2], "f": "x"}),
        );
        assert_eq!(
            t,
            serde_json::json!({"b": {"c": 9, "d": 3}, "e": [2], "f": "x"})
        );
    }

    fn doc(text: &str) -> Doc {
        Doc::parse(text, None).unwrap()
    }

    #[test]
    fn only_route_edits_that_keep_the_order_are_applied_alone() {
        let base = "upstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: b, uri: /b, upstream_id: u}\n  - {id: c, uri: /c, upstream_id: u}\n";
        let old = doc(base);
        let diff = |text: &str| {
            route_diff(&old, &Doc::parse(text, Some(&old)).unwrap()).map(|c| {
                c.into_iter()
                    .map(|(i, id, v)| (i, id, v.is_some()))
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(diff(base), Some(vec![]));
        // b changed, c deleted, d added at the end.
        assert_eq!(
            diff(
                "upstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: b, uri: /bb, upstream_id: u}\n  - {id: d, uri: /d, upstream_id: u}\n"
            ),
            Some(vec![
                (0, "c".into(), false),
                (1, "b".into(), true),
                (2, "d".into(), true)
            ])
        );
        // Reordered, a route added in the middle, an upstream changed, a setting changed.
        assert_eq!(
            diff(
                "upstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: b, uri: /b, upstream_id: u}\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: c, uri: /c, upstream_id: u}\n"
            ),
            None
        );
        assert_eq!(
            diff(
                "upstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: n, uri: /n, upstream_id: u}\n  - {id: b, uri: /b, upstream_id: u}\n  - {id: c, uri: /c, upstream_id: u}\n"
            ),
            None
        );
        assert_eq!(diff(&base.replace("127.0.0.1:1", "127.0.0.1:2")), None);
        assert_eq!(diff(&format!("workers: 2\n{base}")), None);
        // The same route written differently is no change.
        assert_eq!(
            diff(&base.replace(
                "{id: a, uri: /a, upstream_id: u}",
                "{\"id\": \"a\", \"uri\": \"/a\", \"upstream_id\": \"u\"}"
            )),
            Some(vec![])
        );
        // Routes without ids are identified by position: always compiled whole.
        let anon = doc("routes:\n  - {uri: /a, upstream_id: u}\n");
        assert!(anon.positional);
        assert!(route_diff(&anon, &anon.clone()).is_none());
    }
}
