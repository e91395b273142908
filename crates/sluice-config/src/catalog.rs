//! How the configuration crate checks plugin configurations without knowing any plugin: the
//! plugin crate implements [`PluginCatalog`]; loading calls it for every plugin entry, so a
//! bad plugin setting is reported with every other error, at its path.

use std::collections::HashSet;

use serde_json::Value;

use crate::error::Validator;
use crate::model::ConsumerConfig;

/// Where a plugin configuration is (the core's plugin contract names it `Scope`).
pub use sluice_core::plugin::Scope as PluginScope;

/// What plugin checks may need from the rest of the configuration.
#[derive(Debug)]
pub struct CheckEnv<'a> {
    /// Ids of the configured upstreams.
    pub upstream_ids: &'a HashSet<String>,
}

/// The plugins a configuration may use.
pub trait PluginCatalog {
    /// Checks one plugin entry; `v` points at `...plugins.<name>`.
    fn check_plugin(
        &self,
        name: &str,
        config: &Value,
        scope: PluginScope,
        env: &CheckEnv<'_>,
        v: &mut Validator,
    );

    /// Checks a plugin's `plugin_metadata` (`v` points at the item; `name` is its id).
    fn check_metadata(
        &self,
        name: &str,
        _fields: &serde_json::Map<String, Value>,
        v: &mut Validator,
    ) {
        let _ = name;
        v.error("plugin metadata needs a catalog of plugins");
    }

    /// The plugins' names, sorted.
    fn plugin_names(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// The JSON schema of plugin `name`'s configuration (`consumer`: of its credentials on a
    /// consumer, for auth plugins); None for a plugin it does not have.
    fn plugin_schema(&self, _name: &str, _consumer: bool) -> Option<Value> {
        None
    }

    /// Whether `name` is an auth plugin (its configuration on a consumer is credentials).
    fn is_auth(&self, _name: &str) -> bool {
        false
    }

    /// The fields of plugin `name`'s configuration that APISIX encrypts in etcd.
    fn encrypted_fields(&self, _name: &str) -> &'static [&'static str] {
        &[]
    }

    /// The plugins that work on stream routes, sorted.
    fn stream_plugins(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Checks plugin `name`'s node-wide settings in `plugin_attr` (`v` points at them).
    fn check_attr(&self, name: &str, _value: &Value, v: &mut Validator) {
        v.error(format!("{name} has no settings in plugin_attr"));
    }

    /// Checks every consumer's credentials together (the same key twice is an error).
    /// `consumers` pairs each consumer with its position in `consumers`.
    fn check_consumers(&self, _consumers: &[(usize, &ConsumerConfig)], _v: &mut Validator) {}
}

/// A catalog without plugins: every plugin entry is an error.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPlugins;

impl PluginCatalog for NoPlugins {
    fn check_plugin(
        &self,
        _name: &str,
        _config: &Value,
        _scope: PluginScope,
        _env: &CheckEnv<'_>,
        v: &mut Validator,
    ) {
        v.error("unknown plugin");
    }
}
