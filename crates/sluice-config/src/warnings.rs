//! What loads but is probably not what the author meant: reported as warnings by `sluice
//! validate`, when a node starts and on every reload, and never a reason to refuse.

use serde_json::{Map, Value};

use crate::catalog::PluginCatalog;
use crate::error::ConfigError;
use crate::model::Config;

/// The warnings of a configuration that loaded, each with its path.
pub fn warnings(cfg: &Config, catalog: &dyn PluginCatalog) -> Vec<ConfigError> {
    let mut out = Vec::new();
    if cfg.routes.is_empty() && cfg.stream_routes.is_empty() {
        out.push(ConfigError::new(
            "routes",
            "no routes: every request will be answered 404 (an empty file?)",
        ));
    }
    // An auth plugin nobody can pass: no consumer has credentials for it.
    let has_credentials = |name: &str| {
        cfg.consumers
            .iter()
            .any(|c| c.plugins.get(name).is_some_and(|v| !disabled(v)))
    };
    let mut check = |path: String, plugins: &Map<String, Value>, whose: &str| {
        for (name, config) in plugins {
            if catalog.is_auth(name) && !disabled(config) && !has_credentials(name) {
                out.push(ConfigError::new(
                    format!("{path}.plugins.{name}"),
                    format!(
                        "no consumer has {name} credentials: {whose} will be refused (401) until one has"
                    ),
                ));
            }
        }
    };
    for (i, r) in cfg.routes.iter().enumerate() {
        check(
            format!("routes[{i}]"),
            &r.plugins,
            "every request of this route",
        );
    }
    for (i, s) in cfg.services.iter().enumerate() {
        check(
            format!("services[{i}]"),
            &s.plugins,
            "every request of its routes",
        );
    }
    for (i, g) in cfg.global_rules.iter().enumerate() {
        check(format!("global_rules[{i}]"), &g.plugins, "every request");
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
