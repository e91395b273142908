//! Services, global rules, consumers, credentials, plugin configs and metadata.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::upstreams::UpstreamConfig;
use crate::de::Id;

/// A service: an upstream and plugins that several routes share.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Identifier, unique among services.
    #[serde(default)]
    pub id: Option<Id>,
    /// Free-form name.
    #[serde(default)]
    pub name: Option<String>,
    /// Free-form description.
    #[serde(default)]
    pub desc: Option<String>,
    /// Free-form labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// An inline upstream.
    #[serde(default)]
    pub upstream: Option<Box<UpstreamConfig>>,
    /// The id of an upstream in `upstreams`.
    #[serde(default)]
    pub upstream_id: Option<Id>,
    /// Plugins by name.
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
    /// Hosts the service's routes match when they name none themselves (APISIX's service
    /// `hosts`): `api.example.com` or `*.example.com`.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// Proxy `Upgrade: websocket` for this service's routes that do not say. Default false.
    #[serde(default)]
    pub enable_websocket: Option<bool>,
}

impl ServiceConfig {
    /// The service as APISIX's admin API shows it, without its upstream (what `opa`'s
    /// `with_service` sends).
    pub fn document(&self) -> serde_json::Value {
        let mut doc = super::routes::common_document(
            &self.id,
            &self.name,
            &self.desc,
            &self.labels,
            &self.plugins,
        );
        if let Some(id) = &self.upstream_id {
            doc.insert("upstream_id".into(), id.0.clone().into());
        }
        if let Some(h) = &self.hosts {
            doc.insert("hosts".into(), h.clone().into());
        }
        if let Some(w) = self.enable_websocket {
            doc.insert("enable_websocket".into(), w.into());
        }
        doc.into()
    }
}

/// A global rule: plugins that run on every request, matched or not.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobalRuleConfig {
    /// Identifier, unique among global rules.
    #[serde(default)]
    pub id: Option<Id>,
    /// Plugins by name.
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
}

/// A consumer: an identity that auth plugins recognise by its credentials (the auth plugins'
/// entries in `plugins`), and plugins that run for its requests (the other entries).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumerConfig {
    /// Unique name: letters, digits, `-` and `_`.
    #[serde(default)]
    pub username: String,
    /// APISIX's consumer `id`: informational, consumers are named by `username`.
    #[serde(default)]
    pub id: Option<Id>,
    /// Free-form description.
    #[serde(default)]
    pub desc: Option<String>,
    /// Free-form labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Credentials (auth plugins) and plugins (the others), by name.
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
    /// The id of a consumer group in `consumer_groups`: its plugins run for this consumer's
    /// requests, where the consumer has no configuration of the same plugin (as APISIX).
    #[serde(default)]
    pub group_id: Option<Id>,
    /// More credentials, each with its own id (APISIX 3's
    /// `consumers/<username>/credentials/<id>`): auth plugins only.
    #[serde(default)]
    pub credentials: Vec<CredentialConfig>,
}

/// One credential of a consumer (APISIX 3's `consumers/<username>/credentials/<id>`): auth
/// plugins by name, with the key, password or JWT secret each holds, beside those in the
/// consumer's `plugins`.
pub type CredentialConfig = PluginSetConfig;

/// Plugins shared by several resources: a consumer group (by consumers' `group_id`) or a
/// plugin config (by routes' `plugin_config_id`), as APISIX's.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginSetConfig {
    /// Identifier, unique in its list.
    #[serde(default)]
    pub id: Option<Id>,
    /// Free-form name.
    #[serde(default)]
    pub name: Option<String>,
    /// Free-form description.
    #[serde(default)]
    pub desc: Option<String>,
    /// Free-form labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Plugins by name (in a consumer group, not auth plugins: credentials belong on
    /// consumers).
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
}

/// APISIX's `plugin_metadata`: settings every instance of a plugin shares (`cors`'s named
/// origin lists, `limit-count`'s header names, `opentelemetry`'s collector, `prometheus`'s
/// disabled labels). The plugin checks its own fields.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
pub struct PluginMetadataConfig {
    /// The plugin's name.
    #[serde(default)]
    pub id: Option<Id>,
    /// The plugin's fields.
    #[serde(flatten)]
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl PluginMetadataConfig {
    /// The fields of `plugin`'s metadata in `list`, if it has some.
    pub fn of<'a>(
        list: &'a [PluginMetadataConfig],
        plugin: &str,
    ) -> Option<&'a serde_json::Map<String, serde_json::Value>> {
        list.iter()
            .find(|m| m.id.as_ref().is_some_and(|i| i.0 == plugin))
            .map(|m| &m.fields)
    }
}

impl sluice_core::plugin::MetadataItem for PluginMetadataConfig {
    fn plugin(&self) -> Option<&str> {
        self.id.as_ref().map(|i| i.0.as_str())
    }

    fn fields(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.fields
    }
}

/// A consumer group: plugins its consumers share.
pub type ConsumerGroupConfig = PluginSetConfig;

/// A plugin config: plugins routes share.
pub type PluginConfigConfig = PluginSetConfig;
