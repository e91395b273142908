//! The file layout Sluice writes (node settings, then resource lists with one flow mapping per
//! line), read without the YAML parser. Owns: the scanner that turns such a file into a
//! document, and the line patcher that finds the few resource lines an edit changed.

use indexmap::IndexMap;
use serde_json::{Map, Value};

use sluice_config::ConfigErrors;

use super::doc::{Doc, Item, Items, id_of, parse_line, parse_yaml};
use super::kind::Kind;

/// Reads the layout Sluice writes (node settings, then resource lists with one flow mapping
/// per line) without the YAML parser: settings go to the YAML parser, each resource line to
/// the JSON parser (or, when it is YAML but not JSON, to the YAML parser on its own). A
/// general YAML parser needs about 8 µs per resource line; this needs about 1, and a line
/// identical to the one at the same place in `previous` (the document in service) is not
/// parsed again at all. None when the text is laid out otherwise (block-style resources,
/// anchors, a key twice): the caller then parses it whole.
///
/// Hand-written because file edits with 100,000 routes must apply in well under a second.
pub(super) fn scan(text: &str, previous: Option<&Doc>) -> Option<Doc> {
    let (split, settings) = settings_part(text)?;
    let mut doc = Doc {
        settings,
        ..Doc::default()
    };
    let mut current: Option<usize> = None;
    for raw in text[split..].lines() {
        let line = raw.trim_end();
        if line.is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if let Some((kind, empty)) = list_header(line) {
            if doc.lists.iter().any(|(k, _)| *k == kind) {
                return None;
            }
            let size = previous.and_then(|p| p.list(kind)).map_or(0, IndexMap::len);
            doc.lists.push((
                kind,
                Items::with_capacity_and_hasher(size, Default::default()),
            ));
            current = (!empty).then_some(doc.lists.len() - 1);
            continue;
        }
        let item = line.strip_prefix("  - ")?.trim();
        if !item.starts_with('{') || !item.ends_with('}') {
            return None;
        }
        let i = current?;
        let (kind, items) = &mut doc.lists[i];
        let unchanged = previous
            .and_then(|p| p.list(*kind))
            .and_then(|l| l.get_index(items.len()))
            .filter(|(_, old)| *old.line == *item);
        if let Some((id, old)) = unchanged {
            // Only a positional document holds items without an id: the line is parsed again
            // only then (an unchanged line is otherwise not parsed at all).
            if previous.is_some_and(|p| p.positional) && id_of(*kind, &old.value()).is_none() {
                doc.positional = true;
            }
            if items.insert(id.clone(), old.clone()).is_some() {
                return None;
            }
            continue;
        }
        let value = parse_line(item)?;
        let id = match id_of(*kind, &value) {
            Some(id) => id,
            None => {
                doc.positional = true;
                format!("{}[{}]", kind.name(), items.len())
            }
        };
        let item = Item {
            line: item.into(),
            rev: 0,
        };
        if items.insert(id, item).is_some() {
            // A duplicate id: the full parser and validation report it properly.
            return None;
        }
    }
    Some(doc)
}

/// Where the resource lists of Sluice's layout start (the first line that is a resource key at
/// column 0), and the node settings before it.
fn settings_part(text: &str) -> Option<(usize, Map<String, Value>)> {
    let mut split = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if list_header(line).is_some() {
            split = Some(offset);
            break;
        }
        offset += line.len();
    }
    let split = split?;
    let settings = parse_yaml(&text[..split]).ok()?;
    if settings.keys().any(|k| Kind::from_name(k).is_some()) {
        return None;
    }
    Some((split, settings))
}

impl Doc {
    /// The lines of `text` (Sluice's layout) that differ from this document, when that is all
    /// that differs: the same settings, the same lists, the same number of resources in each,
    /// every resource with the id it had at its place. `(kind, position, new item)`; None
    /// otherwise. Lets an edit of a few lines in a file of 100,000 routes be applied without
    /// building a second document.
    pub(super) fn line_patch(&self, text: &str) -> Option<Vec<(Kind, usize, Item)>> {
        if self.positional {
            return None;
        }
        let (split, settings) = settings_part(text)?;
        if settings != self.settings {
            return None;
        }
        let mut patch = Vec::new();
        let mut lists = self.lists.iter();
        let mut current: Option<(Kind, &Items, usize)> = None;
        let done =
            |c: &Option<(Kind, &Items, usize)>| c.is_none_or(|(_, items, n)| n == items.len());
        for raw in text[split..].lines() {
            let line = raw.trim_end();
            if line.is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            if let Some((kind, empty)) = list_header(line) {
                if !done(&current) {
                    return None;
                }
                let (k, items) = lists.next()?;
                if *k != kind || empty != items.is_empty() {
                    return None;
                }
                current = Some((kind, items, 0));
                continue;
            }
            let item = line.strip_prefix("  - ")?.trim();
            let (kind, items, n) = current.as_mut()?;
            let (id, old) = items.get_index(*n)?;
            *n += 1;
            if *old.line == *item {
                continue;
            }
            if !item.starts_with('{') || !item.ends_with('}') {
                return None;
            }
            let value = parse_line(item)?;
            if id_of(*kind, &value).as_deref() != Some(id.as_str()) {
                return None;
            }
            patch.push((
                *kind,
                *n - 1,
                Item {
                    line: item.into(),
                    rev: 0,
                },
            ));
        }
        // Every list seen, each to its end.
        (done(&current) && lists.next().is_none()).then_some(patch)
    }
}

/// `routes:` (a list follows) or `routes: []` (empty) at column 0, for each resource kind.
fn list_header(line: &str) -> Option<(Kind, bool)> {
    let line = line.trim_end();
    let (key, rest) = line.split_once(':')?;
    let kind = Kind::from_name(key)?;
    match rest.trim() {
        "" => Some((kind, false)),
        "[]" => Some((kind, true)),
        _ => None,
    }
}

/// Parses YAML (or JSON, which is YAML) into a document.
pub fn parse_doc(text: &str) -> Result<Map<String, Value>, ConfigErrors> {
    if let Some(doc) = scan(text, None) {
        return Ok(doc.to_map());
    }
    parse_yaml(text)
}

impl Doc {
    /// Parses a file: the layout Sluice writes is read line by line (see [`scan`]), anything
    /// else by the YAML parser.
    pub(super) fn parse(text: &str, previous: Option<&Doc>) -> Result<Doc, ConfigErrors> {
        match scan(text, previous) {
            Some(doc) => Ok(doc),
            None => parse_yaml(text).map(Doc::from_map),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::doc::render;

    fn doc(text: &str) -> Doc {
        Doc::parse(text, None).unwrap()
    }

    #[test]
    fn the_written_layout_reads_back_as_yaml_reads_it() {
        let map: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "listen": "127.0.0.1:9080",
            "log": {"level": "info"},
            "upstreams": [{"id": "u1", "nodes": {"127.0.0.1:1980": 1}}],
            "routes": [
                {"id": "r1", "uri": "/a", "upstream_id": "u1"},
                {"id": "r\"2", "uri": "/b\\d+", "upstream_id": "u1",
                 "plugins": {"response-rewrite": {"body": "é \u{1F600} \t tab: # not a comment"}}}
            ],
            "consumers": []
        }))
        .unwrap();
        let text = render(&map).unwrap();
        let scanned = scan(&text, None).expect("the written layout is scanned");
        assert_eq!(scanned.to_map(), map);
        assert_eq!(
            parse_yaml(&text).unwrap(),
            map,
            "and YAML reads it the same"
        );
    }

    #[test]
    fn other_layouts_go_to_the_yaml_parser() {
        // Block-style resources, a setting after the lists, a duplicate id.
        for text in [
            "routes:\n  - id: r1\n    uri: /a\n",
            "routes:\n  - {id: r1, uri: /a}\nworkers: 2\n",
            "routes:\n  - {id: r1, uri: /a}\n  - {id: r1, uri: /b}\n",
            "routes:\n  - {id: r1, uri: /a} # trailing comment\n",
        ] {
            assert!(scan(text, None).is_none(), "{text}");
        }
        // YAML flow mappings (not JSON) on their own lines are read line by line.
        let d = doc(
            "workers: 1\nroutes:\n  - {id: r1, uri: /a}\n\n  # a comment\n  - {\"id\": \"r2\", \"uri\": \"/b\"}\n",
        );
        assert_eq!(d.list(Kind::Routes).unwrap().len(), 2);
        assert_eq!(d.settings.get("workers"), Some(&serde_json::json!(1)));
    }

    #[test]
    fn edits_in_place_are_read_as_line_patches() {
        let base = "workers: 1\nupstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: b, uri: /b, upstream_id: u}\n";
        let d = doc(base);
        let patch = |text: &str| {
            d.line_patch(text).map(|p| {
                p.into_iter()
                    .map(|(k, i, item)| (k, i, item.line.to_string()))
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(patch(base), Some(vec![]));
        assert_eq!(
            patch(&base.replace("uri: /b", "uri: /bb")),
            Some(vec![(
                Kind::Routes,
                1,
                "{id: b, uri: /bb, upstream_id: u}".into()
            )])
        );
        assert_eq!(
            patch(&base.replace("127.0.0.1:1", "127.0.0.1:2")).unwrap()[0].0,
            Kind::Upstreams
        );
        // Not a patch: an id changed in place, a line added or removed, settings changed, a
        // list added.
        assert_eq!(patch(&base.replace("{id: b,", "{id: c,")), None);
        assert_eq!(
            patch(&format!("{base}  - {{id: c, uri: /c, upstream_id: u}}\n")),
            None
        );
        assert_eq!(
            patch(&base.replace("  - {id: b, uri: /b, upstream_id: u}\n", "")),
            None
        );
        assert_eq!(patch(&base.replace("workers: 1", "workers: 2")), None);
        assert_eq!(patch(&format!("{base}consumers: []\n")), None);
    }
}
