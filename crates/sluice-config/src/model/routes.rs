//! Routes: what they match and where they send.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::upstreams::{UpstreamConfig, UpstreamTimeoutConfig};
use crate::de::Id;

/// A route: which requests (uri, host, method) go to which upstream.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Identifier, unique among routes. Generated from the position when absent.
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
    /// Path pattern: `/hello` (exact), `/api/*` (prefix), `/users/:id` (parameter).
    #[serde(default)]
    pub uri: Option<String>,
    /// Several path patterns; use either `uri` or `uris`.
    #[serde(default)]
    pub uris: Option<Vec<String>>,
    /// Host to match: `api.example.com` or `*.example.com`.
    #[serde(default)]
    pub host: Option<String>,
    /// Several hosts; use either `host` or `hosts`. No host means any host.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// Methods to match (`GET`, `POST`, ...). No list means any method.
    #[serde(default)]
    pub methods: Option<Vec<String>>,
    /// Higher wins among routes that match the same request. Default 0.
    #[serde(default)]
    pub priority: i32,
    /// An inline upstream.
    #[serde(default)]
    pub upstream: Option<Box<UpstreamConfig>>,
    /// The id of an upstream in `upstreams`.
    #[serde(default)]
    pub upstream_id: Option<Id>,
    /// The id of a service in `services`: its upstream (when the route has none) and its
    /// plugins (the route's configuration of a plugin wins).
    #[serde(default)]
    pub service_id: Option<Id>,
    /// The id of a plugin config in `plugin_configs`: its plugins, where the route has no
    /// configuration of the same plugin (as APISIX).
    #[serde(default)]
    pub plugin_config_id: Option<Id>,
    /// Plugins by name.
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
    /// 1 serves the route, 0 disables it. Default 1.
    #[serde(default = "default_status")]
    pub status: u8,
    /// Proxy `Upgrade: websocket` requests on this route. Unset: the service's setting, else
    /// false (as APISIX).
    #[serde(default)]
    pub enable_websocket: Option<bool>,
    /// Upstream timeouts for this route, overriding the upstream's.
    #[serde(default)]
    pub timeout: Option<UpstreamTimeoutConfig>,
    /// APISIX's `vars`: a lua-resty-expr expression over request variables
    /// (`[["http_x_canary", "==", "1"], ["arg_v", "~~", "^2"]]`, `["OR", [...], [...]]`);
    /// the route matches only requests for which it holds.
    #[serde(default)]
    #[schemars(with = "Option<Vec<serde_json::Value>>")]
    pub vars: Option<serde_json::Value>,
    /// Only requests from this client address or CIDR range match the route.
    #[serde(default)]
    pub remote_addr: Option<String>,
    /// Only requests from one of these client addresses or CIDR ranges match the route.
    #[serde(default)]
    pub remote_addrs: Option<Vec<String>>,
    /// Most requests of this route in flight at once in the process; beyond it a request is
    /// answered 503 with `Retry-After` at once (load shedding). Default: no limit.
    #[serde(default)]
    pub max_inflight: Option<u32>,
    /// APISIX's `filter_func` and `script` (Lua): refused with why (see validation).
    #[serde(default)]
    #[schemars(skip)]
    pub filter_func: Option<serde_json::Value>,
    /// See `filter_func`.
    #[serde(default)]
    #[schemars(skip)]
    pub script: Option<serde_json::Value>,
    /// The parsed `uri`/`uris`, `hosts` and `methods`, filled in by validation.
    #[serde(skip)]
    #[schemars(skip)]
    pub matcher: RouteMatch,
}

/// A route's match conditions, parsed once at load time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteMatch {
    /// Path patterns.
    pub paths: Vec<sluice_router::PathPattern>,
    /// Host patterns; empty means any host.
    pub hosts: Vec<sluice_router::HostPattern>,
    /// Methods.
    pub methods: sluice_router::MethodSet,
    /// Client ranges of `remote_addr`/`remote_addrs`; empty means any client.
    pub remotes: Vec<ipnet::IpNet>,
}

fn default_status() -> u8 {
    1
}

impl RouteConfig {
    /// The route's id (set for every route once loaded).
    pub fn id(&self) -> &str {
        self.id.as_ref().map_or("", |i| i.0.as_str())
    }

    /// The path patterns, whichever of `uri` and `uris` is used.
    pub fn uri_list(&self) -> Vec<&str> {
        match (&self.uri, &self.uris) {
            (Some(u), _) => vec![u.as_str()],
            (None, Some(us)) => us.iter().map(String::as_str).collect(),
            (None, None) => Vec::new(),
        }
    }

    /// The host patterns, whichever of `host` and `hosts` is used.
    pub fn host_list(&self) -> Vec<&str> {
        match (&self.host, &self.hosts) {
            (Some(h), _) => vec![h.as_str()],
            (None, Some(hs)) => hs.iter().map(String::as_str).collect(),
            (None, None) => Vec::new(),
        }
    }
}

/// One change to the routes of a configuration in service, applied without recompiling the
/// rest of it.
#[derive(Debug, Clone)]
pub enum RouteChange {
    /// Add or replace the route with this id.
    Put {
        /// Its position in the configuration, for error paths (`routes[index]...`).
        index: usize,
        /// The route, validated (see [`crate::load_route_with`]).
        route: Box<RouteConfig>,
    },
    /// Remove the route with this id.
    Delete(String),
}

/// Puts `value` under `name` when it is there.
fn put<T: Into<serde_json::Value>>(
    doc: &mut serde_json::Map<String, serde_json::Value>,
    name: &str,
    value: Option<T>,
) {
    if let Some(v) = value {
        doc.insert(name.to_owned(), v.into());
    }
}

/// A resource's `id`, `name`, `desc`, `labels` and `plugins`, as its document has them.
pub(crate) fn common_document(
    id: &Option<Id>,
    name: &Option<String>,
    desc: &Option<String>,
    labels: &BTreeMap<String, String>,
    plugins: &serde_json::Map<String, serde_json::Value>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut doc = serde_json::Map::new();
    put(&mut doc, "id", id.as_ref().map(|i| i.0.clone()));
    put(&mut doc, "name", name.clone());
    put(&mut doc, "desc", desc.clone());
    if !labels.is_empty() {
        let l: serde_json::Map<_, _> = labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        doc.insert("labels".into(), l.into());
    }
    if !plugins.is_empty() {
        doc.insert("plugins".into(), plugins.clone().into());
    }
    doc
}

impl RouteConfig {
    /// The route as APISIX's admin API shows it, without its upstream (what `opa`'s
    /// `with_route` sends): the fields given, none of the defaults added.
    pub fn document(&self) -> serde_json::Value {
        let mut doc = common_document(
            &self.id,
            &self.name,
            &self.desc,
            &self.labels,
            &self.plugins,
        );
        put(&mut doc, "uri", self.uri.clone());
        put(&mut doc, "uris", self.uris.clone());
        put(&mut doc, "host", self.host.clone());
        put(&mut doc, "hosts", self.hosts.clone());
        put(&mut doc, "methods", self.methods.clone());
        put(&mut doc, "remote_addr", self.remote_addr.clone());
        put(&mut doc, "remote_addrs", self.remote_addrs.clone());
        put(&mut doc, "vars", self.vars.clone());
        put(&mut doc, "priority", Some(self.priority));
        put(&mut doc, "status", Some(self.status));
        put(&mut doc, "enable_websocket", self.enable_websocket);
        for (name, id) in [
            ("upstream_id", &self.upstream_id),
            ("service_id", &self.service_id),
            ("plugin_config_id", &self.plugin_config_id),
        ] {
            put(&mut doc, name, id.as_ref().map(|i| i.0.clone()));
        }
        doc.into()
    }
}
