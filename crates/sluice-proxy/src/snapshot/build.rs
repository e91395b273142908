//! Plugin chains and routes, built from their configuration.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use sluice_config::{RouteConfig, UpstreamConfig, Validator};
use sluice_core::meta::split_meta;
use sluice_core::plugin::{BuildCx, Plugins, Scope};
use sluice_core::state::StateRegistry;
use sluice_core::{Chain, ChainEntry, UpstreamRef};

use super::route::*;
use super::tables::*;
use crate::upstream::UpstreamTimeouts;

/// What compiling a resource's plugins needs.
pub(super) struct BuildEnv<'a, 't> {
    pub(super) plugins: &'a dyn Plugins,
    pub(super) state: &'a StateRegistry,
    pub(super) indexes: &'a HashMap<&'static str, Arc<dyn Any + Send + Sync>>,
    pub(super) tables: &'a mut Tables<'t>,
    /// `metrics.routes: plugin`: only routes with the `prometheus` plugin get their own label.
    pub(super) metrics_opt_in: bool,
    pub(super) plugin_attr: &'a sluice_config::PluginAttrConfig,
    pub(super) plugin_metadata: &'a [sluice_config::PluginMetadataConfig],
    /// Ports of the TLS listeners.
    pub(super) tls_ports: &'a [u16],
}

/// Builds the plugin entries of one resource (`v` points at the resource).
pub(super) fn build_plugins(
    map: &serde_json::Map<String, serde_json::Value>,
    scope: Scope,
    owner: &str,
    env: &mut BuildEnv<'_, '_>,
    v: &mut Validator,
) -> Vec<ChainEntry> {
    build_plugins_on(map, scope, owner, &[], env, v)
}

/// [`build_plugins`] for a route's own plugins, which may read its path parameters.
pub(super) fn build_plugins_on(
    map: &serde_json::Map<String, serde_json::Value>,
    scope: Scope,
    owner: &str,
    route_paths: &[sluice_router::PathPattern],
    env: &mut BuildEnv<'_, '_>,
    v: &mut Validator,
) -> Vec<ChainEntry> {
    let mut out = Vec::new();
    v.field("plugins", |v| {
        for (name, config) in map {
            v.field(name, |v| {
                let Some(f) = env.plugins.get(name) else {
                    v.error("unknown plugin");
                    return;
                };
                let Some(entry) = split_meta(config, v) else {
                    return;
                };
                if entry.disabled || (scope == Scope::Consumer && f.is_auth()) {
                    return;
                }
                let indexes = env.indexes;
                let idx = |n: &str| indexes.get(n).cloned();
                let tables = &mut *env.tables;
                let mut resolve =
                    |value: &serde_json::Value, v: &mut Validator| tables.resolve(value, v);
                let mut cx = BuildCx {
                    tls_ports: env.tls_ports,
                    plugin_attr: env.plugin_attr,
                    plugin_metadata: &env.plugin_metadata,
                    route_paths,
                    scope,
                    owner,
                    indexes: &idx,
                    upstreams: &mut resolve,
                    state: env.state,
                };
                if let Some(plugin) = f.build(&entry.config, &mut cx, v) {
                    let plugin = entry.wrap(plugin);
                    // A consumer's plugins join once it is identified, after the body would
                    // have been read: refused rather than seeing no body.
                    if scope == Scope::Consumer && plugin.needs_body() {
                        v.error(
                            "reads the request body (post_arg_*, graphql_*), which a consumer's or consumer group's plugins cannot: put the plugin on the route or service",
                        );
                        return;
                    }
                    out.push(ChainEntry {
                        name: f.name(),
                        priority: entry.priority.unwrap_or(f.priority()),
                        plugin,
                    });
                }
            });
        }
    });
    out
}

/// A compiled service, as its routes see it.
pub(super) struct Service {
    pub(super) upstream: Option<u32>,
    pub(super) plugins: Vec<ChainEntry>,
    /// The service's `enable_websocket`, for its routes that do not set theirs.
    pub(super) websocket: Option<bool>,
    /// Its configuration, for its routes whose plugins read it (`opa`'s `with_service`).
    pub(super) document: Arc<serde_json::Value>,
    /// Its `name` (`service_name`).
    pub(super) name: Option<Box<str>>,
}

/// What routes share by reference: services and plugin configs, by id.
pub(super) struct Shared<'a> {
    pub(super) services: &'a HashMap<String, Service>,
    pub(super) plugin_configs: &'a HashMap<String, Vec<ChainEntry>>,
}

/// Compiles one enabled route (`v` points at it). None when it failed (errors are in `v`).
pub(super) fn compile_route(
    r: &RouteConfig,
    shared: &Shared<'_>,
    globals: &[ChainEntry],
    globals_chain: &Arc<Chain>,
    env: &mut BuildEnv<'_, '_>,
    v: &mut Validator,
) -> Option<Route> {
    let service = r
        .service_id
        .as_ref()
        .and_then(|id| shared.services.get(id.0.as_str()));
    let config = r
        .plugin_config_id
        .as_ref()
        .and_then(|id| shared.plugin_configs.get(id.0.as_str()));
    let upstream = match (&r.upstream, &r.upstream_id) {
        (Some(u), _) => v.field("upstream", |v| env.tables.inline(u, v)),
        (None, Some(id)) => env.tables.named(&id.0),
        // Plugins answer this route (validation saw to it); a request they let through
        // meets an upstream without nodes: 503, the route has no upstream.
        (None, None) => service
            .and_then(|s| s.upstream)
            .or_else(|| env.tables.inline(&UpstreamConfig::none(), v)),
    };
    let owner = format!("route:{}", r.id());
    let own = build_plugins_on(&r.plugins, Scope::Route, &owner, &r.matcher.paths, env, v);
    let vars = match &r.vars {
        Some(vars) => v.field("vars", |v| sluice_core::expr::Expr::parse(vars, v)),
        None => Some(sluice_core::expr::Expr::default()),
    };
    let upstream = upstream?;
    let vars = vars?;
    let admit = (!vars.is_empty() || !r.matcher.remotes.is_empty()).then(|| {
        Box::new(Admit {
            body: vars.needs_body(),
            vars,
            remotes: r.matcher.remotes.clone(),
        })
    });
    let globals_only = own.is_empty()
        && service.is_none_or(|s| s.plugins.is_empty())
        && config.is_none_or(|c| c.is_empty());
    // The route's configuration of a plugin wins over its plugin config's, which wins over
    // its service's (APISIX merges in that order); global rules run beside them all.
    let mut entries: Vec<ChainEntry> = service
        .map(|s| {
            s.plugins
                .iter()
                .filter(|e| {
                    !r.plugins.contains_key(e.name)
                        && config.is_none_or(|c| c.iter().all(|x| x.name != e.name))
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if let Some(c) = config {
        entries.extend(
            c.iter()
                .filter(|e| !r.plugins.contains_key(e.name))
                .cloned(),
        );
    }
    // A plugin that labels metrics (`prometheus`) runs in no phase (`Chain::new` leaves it
    // out): it says only how the route is labelled. The route's own configuration decides the
    // label; disabled on the route, it opts the route out.
    let own_label = own.iter().find_map(|e| e.plugin.metrics_label());
    entries.extend(own);
    entries.extend(globals.iter().cloned());
    let counted = entries.iter().any(|e| e.plugin.metrics_label().is_some());
    let opted_out = r.plugins.iter().any(|(name, c)| {
        env.plugins.get(name).is_some_and(|f| f.labels_metrics())
            && c.pointer("/_meta/disable").and_then(|d| d.as_bool()) == Some(true)
    });
    let metric = if opted_out || (env.metrics_opt_in && !counted) {
        crate::metrics::Slot::other()
    } else {
        crate::metrics::Slot::default()
    };
    let label = match (&r.name, own_label) {
        (Some(n), Some(sluice_core::plugin::MetricsLabel::Name)) if !n.is_empty() => {
            Some(n.as_str().into())
        }
        _ => None,
    };
    let service_id = r.service_id.as_ref().map(|s| s.0.as_str().into());
    // Kept only where a plugin reads them: most routes pay nothing.
    let documents = entries.iter().any(|e| e.plugin.reads_documents()).then(|| {
        Box::new(sluice_core::ctx::Documents {
            route: r.document(),
            service: service.map(|s| s.document.clone()),
        })
    });
    let name = r.name.as_deref().filter(|n| !n.is_empty()).map(Into::into);
    let service_name = service.and_then(|s| s.name.clone());
    let cold = (label.is_some()
        || service_id.is_some()
        || documents.is_some()
        || name.is_some()
        || service_name.is_some())
    .then(|| {
        Box::new(RouteCold {
            label,
            service: service_id,
            documents,
            name,
            service_name,
        })
    });
    Some(Route {
        metric,
        cold,
        admit,
        id: r.id().into(),
        upstream: UpstreamRef(upstream),
        websocket: r
            .enable_websocket
            .or(service.and_then(|s| s.websocket))
            .unwrap_or(false),
        timeouts: r.timeout.as_ref().map(UpstreamTimeouts::from),
        chain: if globals_only {
            globals_chain.clone()
        } else {
            Arc::new(Chain::new(entries))
        },
        limit: r
            .max_inflight
            .map(|max| crate::upstream::shed::limit(&format!("route {}", r.id()), max)),
    })
}
