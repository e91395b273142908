//! What loads but is probably not what the author meant: reported as warnings by `sluice
//! validate`, when a node starts and on every reload, and never a reason to refuse.

use serde_json::{Map, Value};

use crate::catalog::PluginCatalog;
use crate::error::ConfigError;
use crate::model::Config;

/// Where a plugin is used in vain, and whose requests it refuses.
type Place = (String, &'static str);

/// Places named per warning kind; the rest are counted in one line.
const MAX_PLACES: usize = 5;

/// The warnings of a configuration that loaded, each with its path.
pub fn warnings(cfg: &Config, catalog: &dyn PluginCatalog) -> Vec<ConfigError> {
    let mut out = Vec::new();
    // Metadata of plugins Sluice does not have (an APISIX control plane writes some for its
    // loggers): nothing here can use it; kept, said.
    let names = catalog.plugin_names();
    for (i, m) in cfg.plugin_metadata.iter().enumerate() {
        let id = m.id.as_ref().map_or("", |i| i.0.as_str());
        if !names.contains(&id) {
            out.push(ConfigError::new(
                format!("plugin_metadata[{i}].id"),
                format!("\"{id}\" is not a plugin Sluice has: its metadata is kept and not used"),
            ));
        }
    }
    if cfg.routes.is_empty() && cfg.stream_routes.is_empty() {
        out.push(ConfigError::new(
            "routes",
            "no routes: every request will be answered 404 (an empty file?)",
        ));
    }
    // An auth plugin nobody can pass: no consumer has credentials for it. Which plugins have
    // credentials is found once (not per route: 100,000 routes and 1,000 consumers).
    let mut with_credentials = std::collections::HashSet::new();
    for c in &cfg.consumers {
        for (name, config) in &c.plugins {
            if !disabled(config) {
                with_credentials.insert(name.as_str());
            }
        }
    }
    // Per plugin: the places that use it in vain, and how many of them there are.
    let mut places: Vec<(String, Vec<Place>, usize)> = Vec::new();
    let mut note = |path: String, plugins: &Map<String, Value>, whose: &'static str| {
        for (name, config) in plugins {
            if catalog.is_auth(name)
                && !disabled(config)
                && !with_credentials.contains(name.as_str())
            {
                let i = match places.iter().position(|(n, _, _)| n == name) {
                    Some(i) => i,
                    None => {
                        places.push((name.clone(), Vec::new(), 0));
                        places.len() - 1
                    }
                };
                let (_, shown, total) = &mut places[i];
                *total += 1;
                if shown.len() < MAX_PLACES {
                    shown.push((format!("{path}.plugins.{name}"), whose));
                }
            }
        }
    };
    for (i, r) in cfg.routes.iter().enumerate() {
        note(
            format!("routes[{i}]"),
            &r.plugins,
            "every request of this route",
        );
    }
    for (i, s) in cfg.services.iter().enumerate() {
        note(
            format!("services[{i}]"),
            &s.plugins,
            "every request of its routes",
        );
    }
    for (i, g) in cfg.global_rules.iter().enumerate() {
        note(format!("global_rules[{i}]"), &g.plugins, "every request");
    }
    for (name, shown, total) in places {
        for (path, whose) in &shown {
            out.push(ConfigError::new(
                path.clone(),
                format!(
                    "no consumer has {name} credentials: {whose} will be refused (401) until one has"
                ),
            ));
        }
        if total > shown.len() {
            out.push(ConfigError::new(
                "",
                format!(
                    "{} more places use {name}, which no consumer has credentials for",
                    total - shown.len()
                ),
            ));
        }
    }
    out
}

/// `_meta: {disable: true}`: the plugin is kept but does not run.
fn disabled(config: &Value) -> bool {
    config
        .get("_meta")
        .and_then(|m| m.get("disable"))
        .and_then(Value::as_bool)
        == Some(true)
}
