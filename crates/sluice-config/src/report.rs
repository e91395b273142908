//! Every error of a refused configuration at once. Loading stops early for speed (a document
//! with a key written twice is not checked further; compiling only runs on a valid
//! configuration), which would report errors in stages: fix three, then meet the fourth. When a
//! configuration is refused, [`all_errors`] runs every stage that can still run: the checks on
//! the document as read (the first value of a key written twice), on every item with what
//! could be read of it, then the compilation of everything without an error (certificates,
//! names that resolve), and puts the errors in document order.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::catalog::PluginCatalog;
use crate::error::{ConfigError, ConfigErrors};
use crate::load::load_inner;
use crate::model::Config;
use crate::positions::{Positions, Section};

/// Every error of configuration `text` (after `adjust`, which applies the command line's
/// settings), in document order. `compile` is the data plane's compilation (what only it
/// finds); it runs on the items without an error, and its errors are reported at their places
/// in the document. Empty when the text has no error.
pub fn all_errors(
    text: &str,
    adjust: &dyn Fn(&mut Map<String, Value>),
    catalog: &dyn PluginCatalog,
    compile: &mut dyn FnMut(&Config) -> Result<(), ConfigErrors>,
) -> ConfigErrors {
    let (mut doc, dups) = match crate::text::parse_text_all(text) {
        Ok(parsed) => parsed,
        Err(e) => return e,
    };
    if let Value::Object(m) = &mut doc {
        adjust(m);
    }
    let order = doc.clone();
    let mut errors = ConfigErrors(dups);
    match load_inner(doc, catalog) {
        Err(e) => errors.0.extend(e.0),
        Ok((cfg, pos, v)) => {
            let found = v.into_errors();
            let before = errors.0.iter().chain(&found);
            if let Some((cfg, places)) = compilable(cfg, &pos, before) {
                // Compiling what validation has not seen whole must not take the caller down:
                // a panic here only loses this stage's errors.
                let compiled =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile(&cfg)));
                if let Ok(Err(e)) = compiled {
                    errors.0.extend(e.0.into_iter().map(|e| places.original(e)));
                }
            }
            errors.0.extend(found);
        }
    }
    errors.sort_by_document(&order);
    errors
}

/// Where the items of a compilable configuration were in the document, by list.
struct Places(HashMap<&'static str, Vec<usize>>);

impl Places {
    /// An error of the compilation, at its place in the document.
    fn original(&self, mut e: ConfigError) -> ConfigError {
        let Some((list, rest)) = e.path.split_once('[') else {
            return e;
        };
        let Some((index, tail)) = rest.split_once(']') else {
            return e;
        };
        if let (Some(places), Ok(i)) = (self.0.get(list), index.parse::<usize>())
            && let Some(&at) = places.get(i)
        {
            e.path = format!("{list}[{at}]{tail}");
        }
        e
    }
}

/// Whether `path` is at or inside `place` (`routes[3]` holds `routes[3].uri`, not `routes[30]`).
fn within(path: &str, place: &str) -> bool {
    path.strip_prefix(place)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// The configuration without the parts that have errors, to compile: items with an error are
/// left out (upstreams, services, plugin configs and consumer groups are replaced by empty
/// ones of the same id, so that what refers to them does not fail a second time), settings
/// with an error are back to their defaults. None when nothing sensible can be compiled (an
/// error about the whole document).
fn compilable<'a>(
    mut cfg: Config,
    pos: &Positions,
    errors: impl Iterator<Item = &'a ConfigError>,
) -> Option<(Config, Places)> {
    let paths: Vec<&str> = errors.map(|e| e.path.as_str()).collect();
    if paths.contains(&"") {
        return None;
    }
    let bad = |place: String| paths.iter().any(|p| within(p, &place));
    let defaults = Config::default();
    macro_rules! reset {
        ($($key:ident),*) => {
            $(if bad(stringify!($key).to_owned()) {
                cfg.$key = defaults.$key.clone();
            })*
        };
    }
    reset!(
        listen,
        workers,
        timeouts,
        limits,
        log,
        origin,
        admin,
        status,
        metrics,
        plugin_attr,
        etcd,
        dns,
        real_ip,
        discovery,
        stream_proxy
    );
    let mut places = HashMap::new();
    // Lists others refer to: an item with an error stands in empty, with `$fields`.
    macro_rules! stand_in {
        ($($list:ident: $fields:tt),*) => {
            $(keep(
                &mut cfg.$list,
                stringify!($list),
                &pos.$list,
                &bad,
                Some(&|id| stand_in(id, serde_json::json!($fields))),
                |item| item.id.as_ref(),
                &mut places,
            );)*
        };
    }
    // Lists nothing refers to: an item with an error is left out.
    macro_rules! left_out {
        ($($list:ident),*) => {
            $(keep(&mut cfg.$list, stringify!($list), &pos.$list, &bad, None, |_| None, &mut places);)*
        };
    }
    stand_in!(
        upstreams: {"nodes": {}},
        services: {},
        plugin_configs: {"plugins": {}},
        consumer_groups: {"plugins": {}}
    );
    left_out!(
        routes,
        global_rules,
        consumers,
        ssls,
        stream_routes,
        plugin_metadata,
        secrets
    );
    Some((cfg, Places(places)))
}

/// Makes an empty resource of an id, to stand in for one left out.
type StandIn<T> = dyn Fn(&str) -> Option<T>;

/// Keeps the items of `list` (at document positions `section.index`) without an error; those
/// with one, and those that could not be read at all, are replaced by `stand_in(id)` when
/// something may refer to them, or left out.
fn keep<T>(
    items: &mut Vec<T>,
    list: &'static str,
    section: &Section,
    bad: &dyn Fn(String) -> bool,
    stand_in: Option<&StandIn<T>>,
    id: impl Fn(&T) -> Option<&crate::de::Id>,
    places: &mut HashMap<&'static str, Vec<usize>>,
) {
    let mut kept = Vec::with_capacity(items.len());
    let mut at = Vec::with_capacity(items.len());
    for (item, &i) in std::mem::take(items).into_iter().zip(&section.index) {
        if !bad(format!("{list}[{i}]")) {
            kept.push(item);
            at.push(i);
        } else if let Some(s) = stand_in.and_then(|f| f(&id(&item)?.0)) {
            kept.push(s);
            at.push(i);
        }
    }
    if let Some(f) = stand_in {
        for (failed, i) in &section.failed_ids {
            if let Some(s) = f(failed) {
                kept.push(s);
                at.push(*i);
            }
        }
    }
    *items = kept;
    places.insert(list, at);
}

/// An empty resource of id `id`, with `fields` (what its type requires).
fn stand_in<T: serde::de::DeserializeOwned>(id: &str, fields: Value) -> Option<T> {
    let mut v = fields;
    v.as_object_mut()?
        .insert("id".into(), Value::String(id.to_owned()));
    serde_json::from_value(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::NoPlugins;

    #[test]
    fn the_items_without_errors_are_compiled_and_its_errors_put_back_in_place() {
        let text = r#"
upstreams:
  - {id: u1, nodes: {}, retries: -1}
services:
  - {id: s1, upstream_id: nope}
routes:
  - {id: a, uri: /a, upstream_id: missing}
  - {id: b, uri: /b, upstream_id: u1, service_id: s1}
workers: 0
"#;
        let mut seen = None;
        let errors = all_errors(text, &|_| {}, &NoPlugins, &mut |cfg| {
            seen = Some((
                cfg.upstreams
                    .iter()
                    .map(|u| u.id.clone())
                    .collect::<Vec<_>>(),
                cfg.services.len(),
                cfg.routes
                    .iter()
                    .map(|r| r.id().to_owned())
                    .collect::<Vec<_>>(),
                cfg.workers,
            ));
            Err(ConfigError::new("routes[0].uri", "found by compiling").into())
        });
        let (upstreams, services, routes, workers) = seen.expect("compiled");
        // The upstream and service with errors stand in, empty, for what refers to them; the
        // route with an error is left out; the bad setting is back to its default.
        assert_eq!(upstreams, [Some(crate::de::Id("u1".into()))]);
        assert_eq!(services, 1);
        assert_eq!(routes, ["b"]);
        assert_eq!(workers, Config::default().workers);
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "upstreams[0].nodes: must not be empty",
                "upstreams[0].retries: must be a whole number from 0 to 4294967295, got -1",
                "services[0].upstream_id: upstream \"nope\" not found",
                "routes[0].upstream_id: upstream \"missing\" not found",
                "routes[1].uri: found by compiling",
                "workers: must be \"auto\" or a number from 1 to 1024",
            ],
            "{errors}"
        );
    }
}
