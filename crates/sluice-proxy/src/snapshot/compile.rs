//! A whole configuration, compiled: the snapshot, and the base that route changes compile against.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_config::{Config, ConfigErrors, RouteConfig, Validator};
use sluice_core::plugin::{Plugins, Scope};
use sluice_core::state::StateRegistry;
use sluice_core::{Chain, ChainEntry, Consumer};
use sluice_router::{RouteKey, Router};

use super::build::*;
use super::route::*;
use super::settings::*;
use super::tables::*;
use super::types::*;
use crate::upstream::{build_upstream, upstream_uid};

pub(super) static VERSION: AtomicU64 = AtomicU64::new(1);

/// Where a route stands in the routing table, to take it out again. Compact: one is kept per
/// route for the node's life (100,000 routes, 100,000 of them).
pub(super) struct Placed {
    pub(super) order: u64,
    pub(super) priority: i32,
    pub(super) methods: sluice_router::MethodSet,
    /// False for a disabled route (`status: 0`), which keeps its place but is not routed.
    pub(super) routed: bool,
    /// The path patterns' texts, NUL-separated (a pattern holds no control character): 8
    /// bytes for `/r1/*` where the parsed pattern takes 112 in four allocations. They are
    /// parsed again only to take the route out of the table, on a route change.
    pub(super) paths: Box<str>,
    pub(super) hosts: Box<[sluice_router::HostPattern]>,
}

impl Placed {
    pub(super) fn new(r: &RouteConfig, order: u64) -> Placed {
        let mut paths = String::new();
        for (i, p) in r.matcher.paths.iter().enumerate() {
            if i > 0 {
                paths.push('\0');
            }
            paths.push_str(p.as_str());
        }
        Placed {
            order,
            priority: r.priority,
            methods: r.matcher.methods,
            routed: r.status != 0,
            paths: paths.into(),
            hosts: r.matcher.hosts.clone().into(),
        }
    }

    /// Takes the route out of `router`.
    pub(super) fn remove_from(&self, router: &mut Router<Route>) {
        // Validated when the route was placed: each text parses.
        let paths: Vec<_> = self
            .paths
            .split('\0')
            .filter_map(|t| sluice_router::PathPattern::parse(t).ok())
            .collect();
        debug_assert_eq!(paths.len(), self.paths.split('\0').count());
        // Not found is not an error: a route without an upstream is placed but never routed.
        router.remove(RouteKey {
            paths: &paths,
            hosts: &self.hosts,
            methods: self.methods,
            priority: self.priority,
            order: self.order,
        });
    }
}

/// The routing table key of `r`, placed at `order`.
pub(super) fn key_of(r: &RouteConfig, order: u64) -> RouteKey<'_> {
    RouteKey {
        paths: &r.matcher.paths,
        hosts: &r.matcher.hosts,
        methods: r.matcher.methods,
        priority: r.priority,
        order,
    }
}

/// What a full compilation built besides the snapshot, kept so that route changes compile
/// against it without touching anything else: upstreams, services, global rules, credential
/// indexes, and where each route is in the routing table.
pub(crate) struct Base {
    pub(super) indexes: HashMap<&'static str, Arc<dyn Any + Send + Sync>>,
    pub(super) table: UpstreamTable,
    pub(super) services: HashMap<String, Service>,
    pub(super) plugin_configs: HashMap<String, Vec<ChainEntry>>,
    pub(super) globals: Vec<ChainEntry>,
    /// The chain of global rules alone (also the snapshot's).
    pub(super) globals_chain: Arc<Chain>,
    pub(super) routes: HashMap<String, Placed>,
    pub(super) next_order: u64,
    pub(super) dns: Arc<sluice_config::DnsConfig>,
    pub(super) metrics_opt_in: bool,
    pub(super) plugin_attr: Arc<sluice_config::PluginAttrConfig>,
    pub(super) plugin_metadata: Arc<[sluice_config::PluginMetadataConfig]>,
    /// Ports of the TLS listeners, for plugins (`redirect`).
    pub(super) tls_ports: Arc<[u16]>,
}

impl std::fmt::Debug for Base {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Base")
            .field("routes", &self.routes.len())
            .field("upstreams", &self.table.list.len())
            .finish()
    }
}

/// The host names the upstreams of `cfg` resolve (named ones, and inline ones of routes,
/// services and stream routes), to resolve together before compiling.
pub(super) fn names_of(cfg: &Config) -> Vec<crate::upstream::discover::Query> {
    use crate::upstream::discover::Query;
    let inline = cfg
        .routes
        .iter()
        .filter_map(|r| r.upstream.as_deref())
        .chain(cfg.services.iter().filter_map(|s| s.upstream.as_deref()))
        .chain(
            cfg.stream_routes
                .iter()
                .filter_map(|r| r.upstream.as_deref()),
        );
    let mut out = Vec::new();
    for u in cfg.upstreams.iter().chain(inline) {
        for n in &u.nodes.0 {
            if n.host.parse::<std::net::IpAddr>().is_err() {
                out.push(Query::Host(n.host.clone()));
            }
        }
        out.extend(crate::upstream::discovery::query_quietly(u, &cfg.discovery));
    }
    out
}

/// Compiles a validated configuration: upstreams, consumers, plugin chains and the router.
/// Fails only on what validation cannot know (node host names that do not resolve).
pub fn compile(
    cfg: &Config,
    plugins: &dyn Plugins,
    state: &StateRegistry,
) -> Result<Snapshot, ConfigErrors> {
    compile_full(cfg, plugins, state).map(|(snapshot, _)| snapshot)
}

/// [`compile`], also returning what route changes compile against.
pub(crate) fn compile_full(
    cfg: &Config,
    plugins: &dyn Plugins,
    state: &StateRegistry,
) -> Result<(Snapshot, Base), ConfigErrors> {
    let mut v = Validator::new();
    v.field("discovery", |v| {
        crate::upstream::discovery::check_settings(&cfg.discovery, v)
    });
    let empty = UpstreamTable::default();
    let dns = Arc::new(sluice_config::DnsConfig {
        discovery: cfg.discovery.clone(),
        ..cfg.dns.clone()
    });
    crate::upstream::discover::prefetch(names_of(cfg), &dns);
    let mut tables = Tables {
        base: &empty,
        added: UpstreamTable::default(),
        dns: dns.clone(),
    };

    v.field("upstreams", |v| {
        for (i, u) in cfg.upstreams.iter().enumerate() {
            v.index(i, |v| {
                if let Some(up) = build_upstream(
                    u,
                    u.id.as_ref().map(|id| id.0.as_str()),
                    upstream_uid(&format!("{u:?}")),
                    &dns,
                    v,
                ) {
                    let idx = tables.push(up);
                    tables
                        .added
                        .named
                        .insert(u.id.as_ref().map_or(String::new(), |id| id.0.clone()), idx);
                }
            });
        }
    });

    // Credentials: one index per auth plugin, from every consumer.
    let mut indexes = HashMap::new();
    v.field("consumers", |v| {
        for f in plugins.all().into_iter().filter(|f| f.is_auth()) {
            let found = sluice_config::credentials_of(
                f.name(),
                cfg.consumers.iter().enumerate().map(|(i, c)| (i, i, c)),
            );
            let creds = sluice_core::plugin::as_credentials(&found);
            if let Some(index) = f.consumer_index(&creds, v) {
                indexes.insert(f.name(), index);
            }
        }
    });
    indexes.insert(
        sluice_core::plugin::CONSUMER_NAMES,
        Arc::new(sluice_core::plugin::ConsumerNames(
            cfg.consumers
                .iter()
                .enumerate()
                .map(|(i, c)| (c.username.as_str().into(), i as u32))
                .collect(),
        )),
    );
    let tls_ports: Vec<u16> = cfg
        .listen
        .iter()
        .filter(|l| l.tls)
        .map(|l| l.addr.port())
        .collect();
    let mut env = BuildEnv {
        plugins,
        state,
        indexes: &indexes,
        tables: &mut tables,
        metrics_opt_in: cfg.metrics.routes == sluice_config::MetricsRoutes::Plugin,
        plugin_attr: &cfg.plugin_attr,
        plugin_metadata: &cfg.plugin_metadata,
        tls_ports: &tls_ports,
    };
    // A group's plugins are built once: its consumers share their state (one limit-count
    // for the whole group, as APISIX).
    let mut groups: HashMap<&str, Vec<ChainEntry>> = HashMap::new();
    v.field("consumer_groups", |v| {
        for (i, g) in cfg.consumer_groups.iter().enumerate() {
            v.index(i, |v| {
                let id = g.id.as_ref().map_or("", |id| id.0.as_str());
                let owner = format!("consumer_group:{id}");
                let entries = build_plugins(&g.plugins, Scope::Consumer, &owner, &mut env, v);
                groups.insert(id, entries);
            });
        }
    });
    let mut consumers = Vec::with_capacity(cfg.consumers.len());
    let mut consumer_chains = Vec::with_capacity(cfg.consumers.len());
    v.field("consumers", |v| {
        for (i, c) in cfg.consumers.iter().enumerate() {
            v.index(i, |v| {
                let owner = format!("consumer:{}", c.username);
                let mut entries = build_plugins(&c.plugins, Scope::Consumer, &owner, &mut env, v);
                // The group's plugins where the consumer has none of the same name (APISIX).
                if let Some(shared) = c.group_id.as_ref().and_then(|g| groups.get(g.0.as_str())) {
                    entries.extend(
                        shared
                            .iter()
                            .filter(|e| !c.plugins.contains_key(e.name))
                            .cloned(),
                    );
                }
                consumers.push(Consumer {
                    username: c.username.as_str().into(),
                    custom_id: c.labels.get("custom_id").map(|s| s.as_str().into()),
                    group: c.group_id.as_ref().map(|g| g.0.as_str().into()),
                    labels: c
                        .labels
                        .iter()
                        .map(|(k, v)| sluice_core::consumer::Label {
                            key: k.as_str().into(),
                            raw: v.as_str().into(),
                            values: sluice_core::consumer::label_values(v),
                        })
                        .collect(),
                });
                consumer_chains.push(Chain::new(entries));
            });
        }
    });

    let mut globals = Vec::new();
    v.field("global_rules", |v| {
        for (i, g) in cfg.global_rules.iter().enumerate() {
            v.index(i, |v| {
                let owner = format!(
                    "global_rule:{}",
                    g.id.as_ref().map_or("", |id| id.0.as_str())
                );
                globals.extend(build_plugins(
                    &g.plugins,
                    Scope::GlobalRule,
                    &owner,
                    &mut env,
                    v,
                ))
            });
        }
    });

    let mut services: HashMap<String, Service> = HashMap::new();
    v.field("services", |v| {
        for (i, s) in cfg.services.iter().enumerate() {
            v.index(i, |v| {
                let upstream = match (&s.upstream, &s.upstream_id) {
                    (Some(u), _) => v.field("upstream", |v| env.tables.inline(u, v)),
                    (None, Some(id)) => env.tables.named(&id.0),
                    (None, None) => None,
                };
                let owner = format!("service:{}", s.id.as_ref().map_or("", |id| id.0.as_str()));
                let plugins = build_plugins(&s.plugins, Scope::Service, &owner, &mut env, v);
                let id = s.id.as_ref().map_or("", |id| id.0.as_str());
                services.insert(
                    id.to_owned(),
                    Service {
                        upstream,
                        plugins,
                        websocket: s.enable_websocket,
                        document: Arc::new(s.document()),
                        name: s.name.as_deref().filter(|n| !n.is_empty()).map(Into::into),
                    },
                );
            });
        }
    });

    let mut plugin_configs: HashMap<String, Vec<ChainEntry>> = HashMap::new();
    v.field("plugin_configs", |v| {
        for (i, p) in cfg.plugin_configs.iter().enumerate() {
            v.index(i, |v| {
                let id = p.id.as_ref().map_or("", |id| id.0.as_str());
                let owner = format!("plugin_config:{id}");
                let entries = build_plugins(&p.plugins, Scope::Route, &owner, &mut env, v);
                plugin_configs.insert(id.to_owned(), entries);
            });
        }
    });

    let globals_chain = Arc::new(Chain::new(globals.clone()));
    let mut router = Router::new();
    let mut placements = HashMap::with_capacity(cfg.routes.len());
    v.field("routes", |v| {
        for (i, r) in cfg.routes.iter().enumerate() {
            let place = Placed::new(r, i as u64);
            if place.routed
                && let Some(route) = v.index(i, |v| {
                    let shared = Shared {
                        services: &services,
                        plugin_configs: &plugin_configs,
                    };
                    compile_route(r, &shared, &globals, &globals_chain, &mut env, v)
                })
            {
                router.insert(key_of(r, place.order), Arc::new(route));
            }
            placements.insert(r.id().to_owned(), place);
        }
    });
    let tls = crate::tls::compile(&cfg.ssls, &mut v);
    let streams = {
        let tables = &mut *env.tables;
        let mut resolve = |r: &sluice_config::StreamRouteConfig, v: &mut Validator| {
            let idx = match (&r.upstream, &r.upstream_id) {
                (Some(u), _) => v.field("upstream", |v| tables.inline(u, v)),
                (None, Some(id)) => tables.named(&id.0),
                (None, None) => r
                    .service_id
                    .as_ref()
                    .and_then(|id| services.get(id.0.as_str()))
                    .and_then(|s| s.upstream),
            }?;
            Some(idx)
        };
        crate::stream_table::compile(cfg, plugins, state, &mut resolve, &mut v)
    };
    let files = v.take_files();
    v.finish()?;
    let table = tables.added;
    let snapshot = Snapshot {
        version: VERSION.fetch_add(1, Ordering::Relaxed),
        router,
        upstreams: table.list.clone().into(),
        grpc: super::types::any_grpc(&table.list),
        consumers: consumers.into(),
        consumer_chains: consumer_chains.into(),
        globals: globals_chain.clone(),
        settings: Settings::from_config(cfg),
        tls: Arc::new(tls),
        streams: Arc::new(streams),
        files: files.into(),
    };
    let base = Base {
        indexes,
        table,
        services,
        plugin_configs,
        globals,
        globals_chain,
        routes: placements,
        next_order: cfg.routes.len() as u64,
        dns,
        metrics_opt_in: cfg.metrics.routes == sluice_config::MetricsRoutes::Plugin,
        plugin_attr: Arc::new(cfg.plugin_attr.clone()),
        plugin_metadata: cfg.plugin_metadata.clone().into(),
        tls_ports: tls_ports.clone().into(),
    };
    Ok((snapshot, base))
}
