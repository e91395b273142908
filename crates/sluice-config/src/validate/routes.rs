//! Routes: paths, hosts, methods, their upstream or service.

use std::collections::{HashMap, HashSet};

use sluice_router::{HostPattern, Method, MethodSet, PathPattern};

use super::common::{Refs, ServiceRef, plugins, upstream_ref};
use super::upstreams::upstream_timeouts;
use crate::catalog::{CheckEnv, PluginCatalog, PluginScope};
use crate::de::Id;
use crate::error::Validator;
use crate::model::{Config, RouteConfig};

/// What a route refers to in the rest of a configuration: the upstreams and services that
/// exist. Lets one route be checked on its own (an admin write of one route) with the same
/// rules as a whole file.
#[derive(Debug, Clone, Default)]
pub struct RouteContext {
    /// Cluster mode: the data_encryption keyring route changes from etcd are read with.
    keyring: Vec<Vec<u8>>,
    upstreams: HashSet<String>,
    /// Named upstreams with a stream scheme (`tcp`, `udp`): not for HTTP routes.
    l4_schemes: HashMap<String, String>,
    plugin_configs: HashSet<String>,
    services: HashMap<String, ServiceRef>,
}

impl RouteContext {
    /// The context of a validated configuration.
    pub fn of(cfg: &Config) -> RouteContext {
        let upstreams = cfg
            .upstreams
            .iter()
            .filter_map(|u| u.id.as_ref().map(|i| i.0.clone()))
            .collect();
        let mut services = HashMap::new();
        for s in &cfg.services {
            if let Some(id) = &s.id {
                services
                    .entry(id.0.clone())
                    .or_insert_with(|| ServiceRef::of(s));
            }
        }
        let plugin_configs = cfg
            .plugin_configs
            .iter()
            .filter_map(|p| p.id.as_ref().map(|i| i.0.clone()))
            .collect();
        RouteContext {
            keyring: cfg.etcd.as_ref().map(|e| e.keyring()).unwrap_or_default(),
            upstreams,
            l4_schemes: super::common::l4_schemes(cfg),
            plugin_configs,
            services,
        }
    }

    /// The keyring of the configuration's etcd `data_encryption` (empty without etcd).
    pub fn keyring(&self) -> &[Vec<u8>] {
        &self.keyring
    }
}

/// Checks one route (`v` points at it) in context `cx`; fills in its id (when it has none,
/// `routes[index]`) and matcher. Id uniqueness is the caller's to check.
pub(crate) fn single_route(
    r: &mut RouteConfig,
    index: usize,
    cx: &RouteContext,
    catalog: &dyn PluginCatalog,
    v: &mut Validator,
) {
    match &r.id {
        Some(Id(id)) => {
            if let Err(e) = crate::de::check_id(id) {
                v.error_at("id", e);
            }
        }
        None => r.id = Some(Id(format!("routes[{index}]"))),
    }
    let refs = Refs {
        upstreams: &cx.upstreams,
        l4_schemes: cx.l4_schemes.clone(),
        plugin_configs: &cx.plugin_configs,
        services: cx.services.clone(),
    };
    route(r, &refs, v);
    let env = CheckEnv {
        upstream_ids: &cx.upstreams,
    };
    plugins(&r.plugins, PluginScope::Route, catalog, &env, v);
    vars(r, v);
}

/// Checks a route's `vars` with the catalog (the conditions are the core crate's).
pub(super) fn vars(r: &RouteConfig, v: &mut Validator) {
    if let Some(vars) = &r.vars {
        // Parsed where they are evaluated (the core), and checked here with the rest, so
        // that a bad regex is reported with every other error.
        v.field("vars", |v| {
            let _ = sluice_core::expr::Expr::parse(vars, v);
        });
    }
}

pub(super) fn route(r: &mut RouteConfig, refs: &Refs<'_>, v: &mut Validator) {
    for (field, given) in [("filter_func", &r.filter_func), ("script", &r.script)] {
        if given.is_some() {
            v.error_at(
                field,
                "is Lua, which Sluice does not run: match with vars (lua-resty-expr conditions) and remote_addrs, and use plugins",
            );
        }
    }
    if r.max_inflight == Some(0) {
        v.error_at("max_inflight", "must be >= 1 (leave it out for no limit)");
    }
    match (&r.uri, &r.uris) {
        (Some(_), Some(_)) => v.error("use either uri or uris, not both"),
        (None, None) => v.error("one of uri or uris is required"),
        (None, Some(us)) if us.is_empty() => v.error_at("uris", "must not be empty"),
        _ => {}
    }
    let mut paths = Vec::new();
    if let Some(u) = &r.uri {
        v.field("uri", |v| match PathPattern::parse(u) {
            Ok(p) => paths.push(p),
            Err(e) => v.error(e),
        });
    }
    if let Some(us) = &r.uris {
        v.field("uris", |v| {
            for (i, u) in us.iter().enumerate() {
                v.index(i, |v| match PathPattern::parse(u) {
                    Ok(p) => paths.push(p),
                    Err(e) => v.error(e),
                });
            }
        });
    }

    let mut hosts = Vec::new();
    match (&r.host, &r.hosts) {
        (Some(_), Some(_)) => v.error("use either host or hosts, not both"),
        (Some(h), None) => v.field("host", |v| match HostPattern::parse(h) {
            Ok(p) => hosts.push(p),
            Err(e) => v.error(e),
        }),
        (None, Some(hs)) => v.field("hosts", |v| {
            if hs.is_empty() {
                v.error("must not be empty; leave hosts out to match any host");
            }
            for (i, h) in hs.iter().enumerate() {
                v.index(i, |v| match HostPattern::parse(h) {
                    Ok(p) => hosts.push(p),
                    Err(e) => v.error(e),
                });
            }
        }),
        (None, None) => {}
    }

    // TRACE echoes the request back, cookies and credentials included (a cross-site tracing
    // aid): like NGINX, only a route that lists it serves it; others answer 405.
    let mut methods = MethodSet::ANY.without(Method::Trace);
    if let Some(ms) = &r.methods {
        v.field("methods", |v| {
            if ms.is_empty() {
                v.error("must not be empty; leave methods out to match any method");
            }
            methods = MethodSet::empty();
            for (i, m) in ms.iter().enumerate() {
                match Method::from_config(m) {
                    Some(m) => methods = methods.with(m),
                    None => v.index(i, |v| {
                        v.error(format!(
                            "unknown method \"{m}\", expected one of {}",
                            Method::known_names().join(", ")
                        ))
                    }),
                }
            }
        });
    }

    if let Some(Id(id)) = &r.plugin_config_id
        && !refs.plugin_configs.contains(id)
    {
        v.error_at(
            "plugin_config_id",
            format!("plugin config \"{id}\" not found"),
        );
    }
    let service = match &r.service_id {
        Some(Id(id)) => match refs.services.get(id) {
            Some(s) => Some(s.clone()),
            None => {
                v.error_at("service_id", format!("service \"{id}\" not found"));
                Some(ServiceRef {
                    upstream: true,
                    plugins: true,
                    hosts: Vec::new(),
                    scheme: None,
                    upstream_id: None,
                })
            }
        },
        None => None,
    };
    // A route without hosts takes its service's (APISIX).
    if hosts.is_empty()
        && r.host.is_none()
        && r.hosts.is_none()
        && let Some(s) = &service
    {
        hosts = s.hosts.clone();
    }
    // A route may have no upstream when plugins answer it (mocking, redirects), as APISIX's
    // `{uri, plugins}`; a request none of them answers gets 503.
    let has_plugins = !r.plugins.is_empty()
        || r.plugin_config_id.is_some()
        || service.as_ref().is_some_and(|s| s.plugins);
    let upstream_given = r.upstream.is_some() || r.upstream_id.is_some();
    // The service's upstream serves the route when it has none of its own.
    if !upstream_given
        && let Some(scheme) = service.as_ref().and_then(|s| s.l4_scheme(refs))
        && let Err(e) = super::common::scheme_suits(scheme, super::common::UpstreamUse::Http)
    {
        v.error_at("service_id", format!("the service's upstream: {e}"));
    }
    match &service {
        _ if upstream_given || has_plugins => {
            upstream_ref(
                r.upstream.as_deref(),
                r.upstream_id.as_ref(),
                true,
                super::common::UpstreamUse::Http,
                refs,
                v,
            )
        }
        Some(s) if !s.upstream => v.error(
            "one of upstream or upstream_id is required: the service has no upstream (or give the route plugins that answer)",
        ),
        Some(_) => {}
        None => v.error("one of upstream, upstream_id, service_id or plugins is required"),
    }

    if r.status > 1 {
        v.error_at("status", "must be 1 (enabled) or 0 (disabled)");
    }
    if let Some(t) = &r.timeout {
        v.field("timeout", |v| upstream_timeouts(t, v));
    }
    let mut remotes = Vec::new();
    let mut remote = |v: &mut Validator, s: &str| match s
        .parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
    {
        Ok(n) => remotes.push(n),
        Err(_) => v.error(format!("invalid IP address or CIDR range \"{s}\"")),
    };
    match (&r.remote_addr, &r.remote_addrs) {
        (Some(_), Some(_)) => v.error("use either remote_addr or remote_addrs, not both"),
        (Some(a), None) => v.field("remote_addr", |v| remote(v, a)),
        (None, Some(list)) => v.field("remote_addrs", |v| {
            if list.is_empty() {
                v.error("must not be empty; leave remote_addrs out to match any client");
            }
            for (i, a) in list.iter().enumerate() {
                v.index(i, |v| remote(v, a));
            }
        }),
        (None, None) => {}
    }
    r.matcher.remotes = remotes;
    r.matcher.paths = paths;
    r.matcher.hosts = hosts;
    r.matcher.methods = methods;
}
