//! Loading: YAML (or JSON) text → a generic value → typed sections, each parsed on its own so
//! that one bad route does not hide the errors of the others.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::catalog::{NoPlugins, PluginCatalog};
use crate::error::{ConfigError, ConfigErrors, Validator};
use crate::export::strip_export_metadata;
use crate::model::{Config, DEFAULT_LISTEN, ListenConfig};
use crate::positions::{Positions, Section};
use crate::validate;

/// Top-level keys, in the order the documentation lists them.
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "listen",
    "workers",
    "timeouts",
    "limits",
    "log",
    "origin",
    "admin",
    "status",
    "metrics",
    "plugin_attr",
    "etcd",
    "dns",
    "real_ip",
    "discovery",
    "stream_proxy",
    "upstreams",
    "services",
    "routes",
    "global_rules",
    "consumers",
    "consumer_groups",
    "plugin_configs",
    "ssls",
    "stream_routes",
    "plugin_metadata",
    "secrets",
];

/// Parses, checks and returns a configuration, or every error found in it. Any plugin is an
/// error here: use [`load_str_with`] and a catalog of plugins.
pub fn load_str(text: &str) -> Result<Config, ConfigErrors> {
    load_str_with(text, &NoPlugins)
}

/// Like [`load_str`], checking plugin configurations with `catalog`.
pub fn load_str_with(text: &str, catalog: &dyn PluginCatalog) -> Result<Config, ConfigErrors> {
    let (doc, dups) = crate::text::parse_text_all(text)?;
    if dups.is_empty() {
        return load_value_with(doc, catalog).map_err(|mut errors| {
            // The document again, to put the errors in its order (only when there are some).
            if let Ok((doc, _)) = crate::text::parse_text_all(text) {
                errors.sort_by_document(&doc);
            }
            errors
        });
    }
    // A key written twice: every other stage still runs on the rest.
    let order = doc.clone();
    let mut errors = ConfigErrors(dups);
    if let Err(e) = load_value_with(doc, catalog) {
        errors.0.extend(e.0);
    }
    errors.sort_by_document(&order);
    Err(errors)
}

/// Reads a file and loads it (see [`load_str`]).
pub fn load_file(path: &std::path::Path) -> Result<Config, ConfigErrors> {
    load_file_with(path, &NoPlugins)
}

/// Reads a file and loads it, checking plugin configurations with `catalog`.
pub fn load_file_with(
    path: &std::path::Path,
    catalog: &dyn PluginCatalog,
) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            "",
            format!("cannot read config file {}: {e}", path.display()),
        )
    })?;
    load_str_with(&text, catalog)
}

/// Loads a configuration from a generic value (a parsed YAML or JSON document).
pub fn load_value(doc: Value) -> Result<Config, ConfigErrors> {
    load_value_with(doc, &NoPlugins)
}

/// Loads a configuration from a generic value, checking plugins with `catalog`.
pub fn load_value_with(doc: Value, catalog: &dyn PluginCatalog) -> Result<Config, ConfigErrors> {
    // The order of the top-level keys, to report errors in it (the document itself is
    // consumed by the parse; callers that keep it sort by it whole).
    let top = match &doc {
        Value::Object(m) => Value::Object(m.keys().map(|k| (k.clone(), Value::Null)).collect()),
        _ => Value::Null,
    };
    let (cfg, _, v) = load_inner(doc, catalog)?;
    v.finish().map_err(|mut errors| {
        errors.sort_by_document(&top);
        errors
    })?;
    // A resource loaded alone later (one route through the admin API) reads its `$secret://`
    // references from these managers.
    crate::secrets::remember(&cfg.secrets);
    Ok(cfg)
}

/// Parses and checks `doc`: the configuration as far as it could be read (items with bad
/// fields without them; items that could not be read at all left out), where each item of it
/// was in the document, and every error found. Err: the document is not a mapping.
pub(crate) fn load_inner(
    doc: Value,
    catalog: &dyn PluginCatalog,
) -> Result<(Config, Positions, Validator), ConfigErrors> {
    let mut v = Validator::new();
    let mut doc = doc;
    crate::env::resolve(&mut doc, &mut v, true);
    fold_standalone_credentials(&mut doc, &mut v);
    crate::encryption::decrypt_doc(&mut doc, catalog, &mut v);
    let map = match doc {
        Value::Null => serde_json::Map::new(),
        Value::Object(m) => m,
        other => {
            return Err(ConfigError::new(
                "",
                format!(
                    "the document must be a mapping of settings and resources, got {}",
                    kind(&other)
                ),
            )
            .into());
        }
    };
    let mut cfg = Config::default();
    let mut pos = Positions::default();
    let mut listen_given = false;
    for (key, value) in map {
        match key.as_str() {
            "listen" => {
                listen_given = true;
                let (items, _) =
                    parse_list::<ListenConfig>(&mut v, "listen", one_or_many(value), "id", None);
                pos.listen_failed = items.iter().any(Option::is_none);
                cfg.listen = items.into_iter().flatten().collect();
            }
            "workers" => set(&mut v, "workers", value, &mut cfg.workers),
            "timeouts" => set(&mut v, "timeouts", value, &mut cfg.timeouts),
            "limits" => set(&mut v, "limits", value, &mut cfg.limits),
            "log" => set(&mut v, "log", value, &mut cfg.log),
            "origin" => set(&mut v, "origin", value, &mut cfg.origin),
            "admin" => set(&mut v, "admin", value, &mut cfg.admin),
            "status" => set(&mut v, "status", value, &mut cfg.status),
            "metrics" => set(&mut v, "metrics", value, &mut cfg.metrics),
            "plugin_attr" => set(&mut v, "plugin_attr", value, &mut cfg.plugin_attr),
            "etcd" => set(&mut v, "etcd", value, &mut cfg.etcd),
            "dns" => set(&mut v, "dns", value, &mut cfg.dns),
            "real_ip" => set(&mut v, "real_ip", value, &mut cfg.real_ip),
            "discovery" => set(&mut v, "discovery", value, &mut cfg.discovery),
            "stream_proxy" => set(&mut v, "stream_proxy", value, &mut cfg.stream_proxy),
            "routes" => cfg.routes = section(&mut v, "routes", value, "id", &mut pos.routes),
            "upstreams" => {
                cfg.upstreams = section(&mut v, "upstreams", value, "id", &mut pos.upstreams)
            }
            "services" => {
                cfg.services = section(&mut v, "services", value, "id", &mut pos.services)
            }
            "global_rules" => {
                cfg.global_rules =
                    section(&mut v, "global_rules", value, "id", &mut pos.global_rules)
            }
            "consumers" => {
                cfg.consumers = section(&mut v, "consumers", value, "username", &mut pos.consumers)
            }
            "consumer_groups" => {
                cfg.consumer_groups = section(
                    &mut v,
                    "consumer_groups",
                    value,
                    "id",
                    &mut pos.consumer_groups,
                )
            }
            "plugin_configs" => {
                cfg.plugin_configs = section(
                    &mut v,
                    "plugin_configs",
                    value,
                    "id",
                    &mut pos.plugin_configs,
                )
            }
            "ssls" => cfg.ssls = section(&mut v, "ssls", value, "id", &mut pos.ssls),
            "stream_routes" => {
                cfg.stream_routes =
                    section(&mut v, "stream_routes", value, "id", &mut pos.stream_routes)
            }
            "plugin_metadata" => {
                cfg.plugin_metadata = section(
                    &mut v,
                    "plugin_metadata",
                    value,
                    "id",
                    &mut pos.plugin_metadata,
                )
            }
            "secrets" => cfg.secrets = section(&mut v, "secrets", value, "id", &mut pos.secrets),
            _ => v.error_at(
                &key,
                format!(
                    "unknown field, expected one of {}",
                    TOP_LEVEL_KEYS.join(", ")
                ),
            ),
        }
    }
    if !listen_given {
        let addr = DEFAULT_LISTEN
            .parse()
            .expect("the default listen address parses");
        cfg.listen = vec![ListenConfig::plain(addr)];
    }
    let read = v.error_count();
    validate::validate(&mut cfg, &pos, catalog, &mut v);
    // A value of an item that could not be read was left out (a default took its place):
    // what the checks then say of its place, or of the object around it, would only mislead.
    let left_out: Vec<String> = pos
        .sections()
        .iter()
        .flat_map(|s| s.left_out.iter().cloned())
        .collect();
    v.drop_errors_near(read, &left_out);
    Ok((cfg, pos, v))
}

/// Parses a resource list, keeping each parsed item's position and the ids of failed ones.
fn section<T: DeserializeOwned>(
    v: &mut Validator,
    key: &str,
    value: Value,
    id_field: &str,
    pos: &mut Section,
) -> Vec<T> {
    // Items with bad fields are kept without them: the checks of the next stage still run on
    // the rest (the configuration is refused anyway).
    let (items, ids) = parse_list::<T>(v, key, value, id_field, Some(&mut pos.left_out));
    // Collected in place (an `Option<T>` is a `T` in size): one list of parsed items at a
    // time, not two, at the peak of a large file's load.
    items
        .into_iter()
        .enumerate()
        .filter_map(|(i, item)| match item {
            Some(t) => {
                pos.index.push(i);
                Some(t)
            }
            None => {
                pos.failed_ids.extend(ids[i].clone().map(|id| (id, i)));
                None
            }
        })
        .collect()
}

fn set<T: DeserializeOwned>(v: &mut Validator, key: &str, value: Value, slot: &mut T) {
    if let Some(t) = v.field(key, |v| parse::<T>(v, value)) {
        *slot = t;
    }
}

fn one_or_many(value: Value) -> Value {
    match value {
        Value::Array(_) => value,
        other => Value::Array(vec![other]),
    }
}

/// Parses and checks one route, as `routes[index]` of a configuration whose upstreams and
/// services are `cx`: the same rules as in a whole file, error paths included
/// (`routes[7].plugins.limit-count.count: ...`). Whether its id is unique is not checked here.
pub fn load_route_with(
    value: Value,
    index: usize,
    cx: &validate::RouteContext,
    catalog: &dyn PluginCatalog,
) -> Result<crate::model::RouteConfig, ConfigErrors> {
    let mut v = Validator::new();
    let mut value = value;
    let route = v.field("routes", |v| {
        v.index(index, |v| {
            crate::env::resolve(&mut value, v, false);
            crate::encryption::decrypt_route(&mut value, cx.keyring(), catalog);
            strip_export_metadata(&mut value);
            // A route with bad fields is checked without them too (refused anyway).
            let before = v.error_count();
            let (mut r, whole) =
                crate::parse::parse_trimmed::<crate::model::RouteConfig>(v, value)?;
            let left_out = if whole {
                Vec::new()
            } else {
                v.paths_since(before)
            };
            let read = v.error_count();
            validate::single_route(&mut r, index, cx, catalog, v);
            v.drop_errors_near(read, &left_out);
            Some(r)
        })
    });
    v.finish()?;
    route.ok_or_else(|| ConfigError::new(format!("routes[{index}]"), "invalid route").into())
}

/// Parses each item of a list on its own. Returns one slot per item (None where it failed)
/// and each item's raw `id`, when it has one.
fn parse_list<T: DeserializeOwned>(
    v: &mut Validator,
    key: &str,
    value: Value,
    id_field: &str,
    mut left_out: Option<&mut Vec<String>>,
) -> (Vec<Option<T>>, Vec<Option<String>>) {
    v.field(key, |v| match value {
        Value::Null => (Vec::new(), Vec::new()),
        Value::Array(items) => {
            let ids = items.iter().map(|i| raw_id(i, id_field)).collect();
            let parsed = items
                .into_iter()
                .enumerate()
                .map(|(i, mut item)| {
                    strip_export_metadata(&mut item);
                    v.index(i, |v| match left_out.as_deref_mut() {
                        Some(left_out) => {
                            let before = v.error_count();
                            let parsed = crate::parse::parse_trimmed::<T>(v, item);
                            if let Some((_, false)) = parsed {
                                left_out.extend(v.paths_since(before));
                            }
                            parsed.map(|(t, _)| t)
                        }
                        None => parse::<T>(v, item),
                    })
                })
                .collect();
            (parsed, ids)
        }
        other => {
            v.error(format!("must be a list, got {}", kind(&other)));
            (Vec::new(), Vec::new())
        }
    })
}

/// APISIX's standalone files list a consumer's credentials among `consumers`, as items whose
/// `id` is `<username>/credentials/<id>`: each goes into its consumer's `credentials`. One
/// whose consumer is not in the list is an error at its place.
pub fn fold_standalone_credentials(doc: &mut Value, v: &mut Validator) {
    let Some(Value::Array(items)) = doc.get_mut("consumers") else {
        return;
    };
    let is_credential = |item: &Value| {
        item.get("username").is_none()
            && item
                .get("id")
                .and_then(Value::as_str)
                .and_then(|id| id.split_once("/credentials/"))
                .is_some_and(|(u, c)| !u.is_empty() && !c.is_empty() && !c.contains('/'))
    };
    if !items.iter().any(is_credential) {
        return;
    }
    let mut consumers = Vec::with_capacity(items.len());
    let mut credentials = Vec::new();
    for (i, item) in std::mem::take(items).into_iter().enumerate() {
        if is_credential(&item) {
            credentials.push((i, item));
        } else {
            consumers.push(item);
        }
    }
    for (i, mut cred) in credentials {
        let id = cred["id"].as_str().unwrap_or_default().to_owned();
        let (username, cred_id) = id.split_once("/credentials/").unwrap_or_default();
        let owner = consumers
            .iter_mut()
            .find(|c| c.get("username").and_then(Value::as_str) == Some(username));
        match owner.and_then(Value::as_object_mut) {
            Some(c) => {
                cred["id"] = Value::String(cred_id.to_owned());
                match c
                    .entry("credentials")
                    .or_insert_with(|| Value::Array(Vec::new()))
                {
                    Value::Array(list) => list.push(cred),
                    _ => v.error_at_path(&["consumers", username, "credentials"], "must be a list"),
                }
            }
            None => v.field("consumers", |v| {
                v.index(i, |v| {
                    v.error_at(
                        "id",
                        format!(
                            "a credential of consumer \"{username}\", which is not in consumers"
                        ),
                    )
                })
            }),
        }
    }
    *items = consumers;
}

fn raw_id(item: &Value, id_field: &str) -> Option<String> {
    match item.get(id_field)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(crate) use crate::parse::parse;

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}
