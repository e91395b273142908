//! Loading: YAML (or JSON) text → a generic value → typed sections, each parsed on its own so
//! that one bad route does not hide the errors of the others.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ConfigError, ConfigErrors, Validator};
use crate::model::{Config, DEFAULT_LISTEN, ListenConfig, RouteConfig, UpstreamConfig};
use crate::validate;

/// Top-level keys, in the order the documentation lists them.
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "listen",
    "workers",
    "timeouts",
    "limits",
    "log",
    "origin",
    "upstreams",
    "routes",
];

/// Parses, checks and returns a configuration, or every error found in it.
pub fn load_str(text: &str) -> Result<Config, ConfigErrors> {
    let doc: Value = yaml_serde::from_str(text)
        .map_err(|e| ConfigError::new("", format!("invalid YAML: {e}")))?;
    load_value(doc)
}

/// Reads a file and loads it (see [`load_str`]).
pub fn load_file(path: &std::path::Path) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            "",
            format!("cannot read config file {}: {e}", path.display()),
        )
    })?;
    load_str(&text)
}

/// Loads a configuration from a generic value (a parsed YAML or JSON document).
pub fn load_value(doc: Value) -> Result<Config, ConfigErrors> {
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
    let mut v = Validator::new();
    let mut cfg = Config::default();
    let mut pos = Positions::default();
    let mut listen_given = false;
    for (key, value) in map {
        match key.as_str() {
            "listen" => {
                listen_given = true;
                let (items, _) = parse_list::<ListenConfig>(&mut v, "listen", one_or_many(value));
                pos.listen_failed = items.iter().any(Option::is_none);
                cfg.listen = items.into_iter().flatten().collect();
            }
            "workers" => set(&mut v, "workers", value, &mut cfg.workers),
            "timeouts" => set(&mut v, "timeouts", value, &mut cfg.timeouts),
            "limits" => set(&mut v, "limits", value, &mut cfg.limits),
            "log" => set(&mut v, "log", value, &mut cfg.log),
            "origin" => set(&mut v, "origin", value, &mut cfg.origin),
            "routes" => {
                let (items, ids) = parse_list::<RouteConfig>(&mut v, "routes", value);
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Some(r) => {
                            pos.routes.push(i);
                            cfg.routes.push(r);
                        }
                        None => pos
                            .failed_route_ids
                            .extend(ids[i].clone().map(|id| (id, i))),
                    }
                }
            }
            "upstreams" => {
                let (items, ids) = parse_list::<UpstreamConfig>(&mut v, "upstreams", value);
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Some(u) => {
                            pos.upstreams.push(i);
                            cfg.upstreams.push(u);
                        }
                        None => pos.failed_upstream_ids.extend(ids[i].clone()),
                    }
                }
            }
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
    validate::validate(&mut cfg, &pos, &mut v);
    v.finish().map(|()| cfg)
}

fn set<T: DeserializeOwned>(v: &mut Validator, key: &str, value: Value, slot: &mut T) {
    if let Some(t) = v.field(key, |v| parse::<T>(v, value)) {
        *slot = t;
    }
}

/// Where each parsed item stood in the document, and the ids of items that failed to parse
/// (so that references to them do not report a second, misleading error).
#[derive(Debug, Default)]
pub(crate) struct Positions {
    pub(crate) routes: Vec<usize>,
    pub(crate) upstreams: Vec<usize>,
    pub(crate) failed_route_ids: Vec<(String, usize)>,
    pub(crate) failed_upstream_ids: Vec<String>,
    pub(crate) listen_failed: bool,
}

fn one_or_many(value: Value) -> Value {
    match value {
        Value::Array(_) => value,
        other => Value::Array(vec![other]),
    }
}

/// Parses each item of a list on its own. Returns one slot per item (None where it failed)
/// and each item's raw `id`, when it has one.
fn parse_list<T: DeserializeOwned>(
    v: &mut Validator,
    key: &str,
    value: Value,
) -> (Vec<Option<T>>, Vec<Option<String>>) {
    v.field(key, |v| match value {
        Value::Null => (Vec::new(), Vec::new()),
        Value::Array(items) => {
            let ids = items.iter().map(raw_id).collect();
            let parsed = items
                .into_iter()
                .enumerate()
                .map(|(i, item)| v.index(i, |v| parse::<T>(v, item)))
                .collect();
            (parsed, ids)
        }
        other => {
            v.error(format!("must be a list, got {}", kind(&other)));
            (Vec::new(), Vec::new())
        }
    })
}

fn raw_id(item: &Value) -> Option<String> {
    match item.get("id")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Deserializes `value` as `T`, recording an error with its path on failure.
pub(crate) fn parse<T: DeserializeOwned>(v: &mut Validator, value: Value) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(t) => Some(t),
        Err(e) => {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            v.nested(&path, e.into_inner().to_string());
            None
        }
    }
}

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
