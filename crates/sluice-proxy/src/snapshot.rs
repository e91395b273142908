//! The immutable runtime configuration every request reads, and its compilation from a
//! validated [`Config`]. Everything that can fail fails here, never on a request.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_config::{Config, ConfigErrors, RouteChange, RouteConfig, UpstreamConfig, Validator};
use sluice_core::plugin::{BuildCx, Plugins, Scope, split_meta};
use sluice_core::state::StateRegistry;
use sluice_core::{Chain, ChainEntry, Consumer, UpstreamRef};
use sluice_router::{RouteKey, Router};

use sluice_core::http::request::HeadLimits;

pub(crate) use crate::upstream::{Upstream, UpstreamTimeouts};
use crate::upstream::{build_upstream, upstream_uid};

/// Everything a request needs, compiled from one configuration version. Immutable and shared
/// by all workers; a new version replaces it whole.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases with every compiled configuration.
    pub version: u64,
    /// Routes by host, path and method. Shares unchanged parts with the previous version.
    pub(crate) router: Router<Route>,
    /// Every upstream, indexed by [`UpstreamRef`]: named ones, inline ones (identical inline
    /// upstreams once), and those plugins refer to.
    pub(crate) upstreams: Arc<[Arc<Upstream>]>,
    pub(crate) consumers: Arc<[Consumer]>,
    /// Each consumer's own plugins, by consumer index (merged into a request's from the
    /// access phase on; the consumer's configuration of a plugin wins over the route's).
    pub(crate) consumer_chains: Arc<[Chain]>,
    /// Global rules' plugins, for requests no route matches.
    pub(crate) globals: Arc<Chain>,
    pub(crate) settings: Settings,
    /// Certificates by server name.
    pub(crate) tls: Arc<crate::tls::TlsTable>,
    /// Stream (L4) routes by listen address.
    pub(crate) streams: Arc<crate::stream_table::StreamTable>,
    /// The files this configuration was compiled from (certificates, keys, CA bundles), as
    /// they were read: a reload compares them with the files now.
    pub(crate) files: Arc<[sluice_config::FileStamp]>,
}

impl Snapshot {
    /// Routes served (disabled routes are not counted).
    pub fn route_count(&self) -> usize {
        self.router.len()
    }

    /// The health of the nodes of upstream `id` as every worker sees it (the shared table),
    /// in the order of its configuration. None: no such upstream.
    pub fn upstream_health(&self, id: &str) -> Option<Vec<crate::NodeReport>> {
        let owner = format!("upstreams/{id}");
        let up = self.upstreams.iter().find(|u| *u.owner == *owner)?;
        Some(
            up.nodes
                .iter()
                .map(|n| n.health.report(&n.authority, Some(n.addr)))
                .collect(),
        )
    }

    /// Writes the upstreams' node health and load shedding families.
    pub(crate) fn render_upstreams(&self, w: &mut crate::metrics::Writer<'_>) {
        let mut seen = std::collections::HashSet::new();
        w.family(
            "sluice_upstream_node_healthy",
            "gauge",
            "Whether a node is taking requests (1) or was taken out by health checks (0).",
        );
        let mut loads = Vec::new();
        for u in self.upstreams.iter() {
            if !seen.insert(&*u.label) {
                continue;
            }
            for n in u.nodes.iter() {
                // A host name that resolves to several addresses is several nodes with one
                // authority: the address keeps their series apart.
                let address = n.addr.to_string();
                w.sample(
                    "sluice_upstream_node_healthy",
                    &[
                        ("upstream", &u.label),
                        ("node", &n.authority),
                        ("address", &address),
                    ],
                    u8::from(!n.health.is_down()),
                );
            }
            if let Some(l) = &u.limit {
                loads.push((&*u.label, l.report()));
            }
        }
        w.family(
            "sluice_upstream_inflight_requests",
            "gauge",
            "Requests in flight to an upstream that has max_inflight.",
        );
        for (label, (inflight, _, _)) in &loads {
            w.sample(
                "sluice_upstream_inflight_requests",
                &[("upstream", label)],
                inflight,
            );
        }
        w.family(
            "sluice_upstream_shed_total",
            "counter",
            "Requests refused with 503 by an upstream's max_inflight.",
        );
        for (label, (_, _, shed)) in &loads {
            w.sample("sluice_upstream_shed_total", &[("upstream", label)], shed);
        }
    }

    /// Load shedding of upstream `id`, when it has `max_inflight`: requests in flight, the
    /// cap, and requests shed so far.
    pub fn upstream_load(&self, id: &str) -> Option<(u32, u32, u64)> {
        let owner = format!("upstreams/{id}");
        let up = self.upstreams.iter().find(|u| *u.owner == *owner)?;
        up.limit.as_ref().map(|l| l.report())
    }

    /// The same configuration with its upstreams replaced (same positions).
    pub(crate) fn with_upstreams(&self, upstreams: Arc<[Arc<Upstream>]>) -> Snapshot {
        Snapshot {
            version: self.version,
            router: self.router.clone(),
            upstreams,
            consumers: self.consumers.clone(),
            consumer_chains: self.consumer_chains.clone(),
            globals: self.globals.clone(),
            settings: self.settings.clone(),
            tls: self.tls.clone(),
            streams: self.streams.clone(),
            files: self.files.clone(),
        }
    }

    /// The files this configuration was compiled from that hold something else now, each with
    /// its signature now (see [`sluice_config::FileStamp::changed`]).
    pub fn changed_files(&self) -> Vec<(String, sluice_config::FileSig)> {
        self.files
            .iter()
            .filter_map(|f| f.changed().map(|sig| (f.path.clone(), sig)))
            .collect()
    }

    /// Distinct upstreams: named ones plus inline ones, identical inline upstreams counted once.
    pub fn upstream_count(&self) -> usize {
        self.upstreams.len()
    }
}

/// A compiled route.
#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) id: Box<str>,
    pub(crate) upstream: UpstreamRef,
    pub(crate) websocket: bool,
    /// The route's own upstream timeouts, overriding the upstream's.
    pub(crate) timeouts: Option<UpstreamTimeouts>,
    /// Service, route and global-rule plugins, merged and sorted; shared by every route that
    /// has global rules' alone (most of 100,000 routes: 112 bytes and up to seven allocations
    /// each otherwise).
    pub(crate) chain: Arc<Chain>,
    /// `max_inflight`: the process-wide cap.
    pub(crate) limit: Option<Arc<crate::upstream::shed::Limit>>,
    /// Its slot in the metrics' route label.
    pub(crate) metric: crate::metrics::Slot,
    /// What few routes have: a metrics label, a service.
    pub(crate) cold: Option<Box<RouteCold>>,
    /// Conditions beyond host, method and path (`vars`, `remote_addrs`); most routes have none.
    pub(crate) admit: Option<Box<Admit>>,
}

/// What a route asks of a request besides its host, method and path.
#[derive(Debug)]
pub(crate) struct Admit {
    vars: sluice_core::expr::Expr,
    remotes: Vec<ipnet::IpNet>,
    /// `vars` read the body (`post_arg_*`): it is read before they are checked.
    body: bool,
}

/// The parts of a route most routes do not have, out of line (a route is one of 100,000).
#[derive(Debug, Default)]
pub(crate) struct RouteCold {
    /// Its label in metrics when not its id (`prometheus: {prefer_name: true}` and a name).
    label: Option<Box<str>>,
    /// Its service's id (consumer-restriction's `service_id`).
    service: Option<Box<str>>,
}

impl Route {
    /// Its label in metrics when not its id.
    pub(crate) fn label(&self) -> Option<&str> {
        self.cold.as_ref()?.label.as_deref()
    }

    /// Its service's id; empty without one.
    pub(crate) fn service_id(&self) -> &str {
        self.cold
            .as_ref()
            .and_then(|c| c.service.as_deref())
            .unwrap_or("")
    }
}

impl Route {
    /// True when its `vars` read the request body, which must be read before they are checked.
    #[inline]
    pub(crate) fn vars_need_body(&self) -> bool {
        self.admit.as_ref().is_some_and(|a| a.body)
    }

    /// Whether the route takes this request: true unless it has conditions that fail.
    #[inline]
    pub(crate) fn admits(
        &self,
        req: &sluice_core::http::RequestHead,
        env: &sluice_core::expr::ConnEnv<'_>,
    ) -> bool {
        let Some(a) = &self.admit else {
            return true;
        };
        let remote_ok = a.remotes.is_empty() || {
            let ip = match env.client.ip() {
                std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(env.client.ip(), Into::into),
                v4 => v4,
            };
            a.remotes.iter().any(|n| n.contains(&ip))
        };
        remote_ok && a.vars.matches(req, env)
    }
}

impl Route {
    /// Admits a request under the route's and the upstream's `max_inflight`; Err: shed.
    #[inline]
    pub(crate) fn admit(&self, up: &Upstream) -> Result<Admission, crate::error::Error> {
        if self.limit.is_none() && up.limit.is_none() {
            return Ok(Admission(None, None));
        }
        let shed = || crate::error::Error::new(crate::error::Kind::Overloaded);
        let route = match &self.limit {
            Some(l) => Some(l.admit().ok_or_else(shed)?),
            None => None,
        };
        let upstream = match &up.limit {
            Some(l) => Some(l.admit().ok_or_else(shed)?),
            None => None,
        };
        Ok(Admission(route, upstream))
    }
}

/// A request counted against `max_inflight` caps until dropped.
#[derive(Debug)]
#[allow(dead_code)] // held for their `Drop`
pub(crate) struct Admission(
    Option<crate::upstream::shed::Admitted>,
    Option<crate::upstream::shed::Admitted>,
);

/// Node-level limits and timeouts, in runtime form.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) head: HeadLimits,
    pub(crate) max_body: u64,
    /// Largest body read for conditions on it.
    pub(crate) max_body_vars: u64,
    pub(crate) max_response_head: usize,
    pub(crate) client_header: Duration,
    pub(crate) client_body: Duration,
    pub(crate) client_send: Duration,
    pub(crate) keepalive: Duration,
    pub(crate) keepalive_requests: u32,
    pub(crate) http2: Http2Limits,
    /// `log.access`: workers compare it with what they opened, once a second.
    pub(crate) access_log: Option<Arc<sluice_config::AccessLogConfig>>,
    /// `log.failure_summary` (zero: every failure logged).
    pub(crate) failure_summary: Duration,
}

/// Per-connection HTTP/2 limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Http2Limits {
    pub(crate) max_streams: u32,
    pub(crate) pings: u32,
    pub(crate) settings: u32,
    pub(crate) resets: u32,
}

impl Settings {
    pub(crate) fn from_config(cfg: &Config) -> Self {
        let l = &cfg.limits;
        let t = &cfg.timeouts;
        Settings {
            head: HeadLimits {
                max_request_line: l.max_request_line.0 as usize,
                max_header_size: l.max_header_size.0 as usize,
                max_headers: l.max_headers,
            },
            max_body: l.max_body_size.0,
            // Validation refused 0; beyond max_body_size a body gets 413 before it is read.
            max_body_vars: l.max_body_vars_size.0.min(l.max_body_size.0),
            max_response_head: l.max_response_header_size.0 as usize,
            client_header: t.client_header.0,
            client_body: t.client_body.0,
            client_send: t.client_send.0,
            keepalive: t.keepalive.0,
            keepalive_requests: l.keepalive_requests,
            http2: Http2Limits {
                max_streams: l.http2_max_streams,
                pings: l.http2_pings_per_second,
                settings: l.http2_settings_per_second,
                resets: l.http2_resets_per_second,
            },
            access_log: cfg.log.access.clone().map(Arc::new),
            failure_summary: cfg.log.failure_summary.0,
        }
    }
}

static VERSION: AtomicU64 = AtomicU64::new(1);

/// Upstreams compiled so far.
#[derive(Default)]
struct UpstreamTable {
    list: Vec<Arc<Upstream>>,
    named: HashMap<String, u32>,
    /// Identical inline upstreams share one compiled upstream (and so one pool per worker):
    /// the 5,000 routes of the seeds' scenario 4 all point at the same node.
    inline: HashMap<String, u32>,
}

impl UpstreamTable {
    fn extend(&mut self, more: UpstreamTable) {
        self.list.extend(more.list);
        self.named.extend(more.named);
        self.inline.extend(more.inline);
    }
}

/// The table a compilation reads and adds to: `base` (what a previous full compilation built,
/// empty for a full compilation) plus the upstreams added now, numbered after `base`'s.
struct Tables<'a> {
    base: &'a UpstreamTable,
    added: UpstreamTable,
    /// How host names of nodes are resolved.
    dns: Arc<sluice_config::DnsConfig>,
}

impl Tables<'_> {
    fn push(&mut self, up: Upstream) -> u32 {
        self.added.list.push(Arc::new(up));
        (self.base.list.len() + self.added.list.len() - 1) as u32
    }

    fn named(&self, id: &str) -> Option<u32> {
        self.base
            .named
            .get(id)
            .or_else(|| self.added.named.get(id))
            .copied()
    }

    fn inline(&mut self, u: &UpstreamConfig, v: &mut Validator) -> Option<u32> {
        let key = format!("{u:?}");
        if let Some(&i) = self
            .base
            .inline
            .get(&key)
            .or_else(|| self.added.inline.get(&key))
        {
            return Some(i);
        }
        let up = build_upstream(u, None, upstream_uid(&key), &self.dns, v)?;
        let i = self.push(up);
        self.added.inline.insert(key, i);
        Some(i)
    }

    /// An upstream named in a plugin configuration: an id, or an inline object.
    fn resolve(&mut self, value: &serde_json::Value, v: &mut Validator) -> Option<UpstreamRef> {
        let found = match value {
            serde_json::Value::String(id) => self.named(id),
            serde_json::Value::Number(n) => self.named(&n.to_string()),
            other => match serde_json::from_value::<UpstreamConfig>(other.clone()) {
                Ok(u) => self.inline(&u, v),
                Err(e) => {
                    v.error(e.to_string());
                    None
                }
            },
        };
        if found.is_none() && value.is_string() {
            v.error(format!("upstream {value} not found"));
        }
        found.map(UpstreamRef)
    }
}

/// What compiling a resource's plugins needs.
struct BuildEnv<'a, 't> {
    plugins: &'a dyn Plugins,
    state: &'a StateRegistry,
    indexes: &'a HashMap<&'static str, Arc<dyn Any + Send + Sync>>,
    tables: &'a mut Tables<'t>,
    /// `metrics.routes: plugin`: only routes with the `prometheus` plugin get their own label.
    metrics_opt_in: bool,
    plugin_attr: &'a sluice_config::PluginAttrConfig,
    plugin_metadata: &'a [sluice_config::PluginMetadataConfig],
    /// Ports of the TLS listeners.
    tls_ports: &'a [u16],
}

/// Builds the plugin entries of one resource (`v` points at the resource).
fn build_plugins(
    map: &serde_json::Map<String, serde_json::Value>,
    scope: Scope,
    owner: &str,
    env: &mut BuildEnv<'_, '_>,
    v: &mut Validator,
) -> Vec<ChainEntry> {
    build_plugins_on(map, scope, owner, &[], env, v)
}

/// [`build_plugins`] for a route's own plugins, which may read its path parameters.
fn build_plugins_on(
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
                    plugin_metadata: &|name| {
                        sluice_config::PluginMetadataConfig::of(env.plugin_metadata, name)
                    },
                    route_paths,
                    scope,
                    owner,
                    indexes: &idx,
                    upstreams: &mut resolve,
                    state: env.state,
                };
                if let Some(plugin) = f.build(&entry.config, &mut cx, v) {
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
struct Service {
    upstream: Option<u32>,
    plugins: Vec<ChainEntry>,
    /// The service's `enable_websocket`, for its routes that do not set theirs.
    websocket: Option<bool>,
}

/// Where a route stands in the routing table, to take it out again. Compact: one is kept per
/// route for the node's life (100,000 routes, 100,000 of them).
struct Placed {
    order: u64,
    priority: i32,
    methods: sluice_router::MethodSet,
    /// False for a disabled route (`status: 0`), which keeps its place but is not routed.
    routed: bool,
    /// The path patterns' texts, NUL-separated (a pattern holds no control character): 8
    /// bytes for `/r1/*` where the parsed pattern takes 112 in four allocations. They are
    /// parsed again only to take the route out of the table, on a route change.
    paths: Box<str>,
    hosts: Box<[sluice_router::HostPattern]>,
}

impl Placed {
    fn new(r: &RouteConfig, order: u64) -> Placed {
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
    fn remove_from(&self, router: &mut Router<Route>) {
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
fn key_of(r: &RouteConfig, order: u64) -> RouteKey<'_> {
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
    indexes: HashMap<&'static str, Arc<dyn Any + Send + Sync>>,
    table: UpstreamTable,
    services: HashMap<String, Service>,
    plugin_configs: HashMap<String, Vec<ChainEntry>>,
    globals: Vec<ChainEntry>,
    /// The chain of global rules alone (also the snapshot's).
    globals_chain: Arc<Chain>,
    routes: HashMap<String, Placed>,
    next_order: u64,
    dns: Arc<sluice_config::DnsConfig>,
    metrics_opt_in: bool,
    plugin_attr: Arc<sluice_config::PluginAttrConfig>,
    plugin_metadata: Arc<[sluice_config::PluginMetadataConfig]>,
    /// Ports of the TLS listeners, for plugins (`redirect`).
    tls_ports: Arc<[u16]>,
}

impl std::fmt::Debug for Base {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Base")
            .field("routes", &self.routes.len())
            .field("upstreams", &self.table.list.len())
            .finish()
    }
}

/// What routes share by reference: services and plugin configs, by id.
struct Shared<'a> {
    services: &'a HashMap<String, Service>,
    plugin_configs: &'a HashMap<String, Vec<ChainEntry>>,
}

/// Compiles one enabled route (`v` points at it). None when it failed (errors are in `v`).
fn compile_route(
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
    let cold = (label.is_some() || service_id.is_some()).then(|| {
        Box::new(RouteCold {
            label,
            service: service_id,
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

/// The host names the upstreams of `cfg` resolve (named ones, and inline ones of routes,
/// services and stream routes), to resolve together before compiling.
fn names_of(cfg: &Config) -> Vec<crate::upstream::discover::Query> {
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

/// Route changes compiled against a [`Base`] and the snapshot in service: the next snapshot
/// (sharing all it can with the current one), and what to record in the base once installed.
pub(crate) struct Delta {
    pub(crate) snapshot: Snapshot,
    added: UpstreamTable,
    placed: Vec<(String, Option<Placed>)>,
    next_order: u64,
}

/// Compiles `changes` alone: the routing table of `current` is copied by reference and only
/// the changed routes' paths in it are rebuilt; upstreams, services, consumers and global rules
/// are reused as they are. What one route change costs does not depend on how many routes
/// there are.
pub(crate) fn compile_routes(
    base: &Base,
    current: &Snapshot,
    changes: Vec<RouteChange>,
    plugins: &dyn Plugins,
    state: &StateRegistry,
) -> Result<Delta, ConfigErrors> {
    let mut v = Validator::new();
    let mut tables = Tables {
        base: &base.table,
        added: UpstreamTable::default(),
        dns: base.dns.clone(),
    };
    let mut env = BuildEnv {
        plugins,
        state,
        indexes: &base.indexes,
        tables: &mut tables,
        metrics_opt_in: base.metrics_opt_in,
        plugin_attr: &base.plugin_attr,
        plugin_metadata: &base.plugin_metadata,
        tls_ports: &base.tls_ports,
    };
    let mut router = current.router.clone();
    let mut next_order = base.next_order;
    // Placements changed by this delta, by id (a later change of the same id sees the earlier).
    let mut changed: HashMap<String, Option<Placed>> = HashMap::new();
    let mut order_of_change: Vec<String> = Vec::new();
    for change in changes {
        let id = match &change {
            RouteChange::Put { route, .. } => route.id().to_owned(),
            RouteChange::Delete(id) => id.clone(),
        };
        let previous = match changed.get(&id) {
            Some(p) => p.as_ref(),
            None => base.routes.get(&id),
        };
        if let Some(p) = previous.filter(|p| p.routed) {
            p.remove_from(&mut router);
        }
        let order = previous.map(|p| p.order);
        let next = match change {
            RouteChange::Delete(_) => None,
            RouteChange::Put { index, route } => {
                let order = order.unwrap_or_else(|| {
                    next_order += 1;
                    next_order - 1
                });
                let place = Placed::new(&route, order);
                if place.routed
                    && let Some(r) = v.field("routes", |v| {
                        v.index(index, |v| {
                            compile_route(
                                &route,
                                &Shared {
                                    services: &base.services,
                                    plugin_configs: &base.plugin_configs,
                                },
                                &base.globals,
                                &base.globals_chain,
                                &mut env,
                                v,
                            )
                        })
                    })
                {
                    router.insert(key_of(&route, order), Arc::new(r));
                }
                Some(place)
            }
        };
        if !changed.contains_key(&id) {
            order_of_change.push(id.clone());
        }
        changed.insert(id, next);
    }
    // A route's inline upstream may read files too (its `tls.ca`).
    let read = v.take_files();
    let files = if read.is_empty() {
        current.files.clone()
    } else {
        current
            .files
            .iter()
            .chain(
                read.iter()
                    .filter(|f| !current.files.iter().any(|c| c.path == f.path)),
            )
            .cloned()
            .collect()
    };
    v.finish()?;
    let added = tables.added;
    let upstreams: Arc<[Arc<Upstream>]> = if added.list.is_empty() {
        current.upstreams.clone()
    } else {
        current
            .upstreams
            .iter()
            .chain(&added.list)
            .cloned()
            .collect()
    };
    let snapshot = Snapshot {
        version: VERSION.fetch_add(1, Ordering::Relaxed),
        router,
        upstreams,
        consumers: current.consumers.clone(),
        consumer_chains: current.consumer_chains.clone(),
        globals: current.globals.clone(),
        settings: current.settings.clone(),
        tls: current.tls.clone(),
        streams: current.streams.clone(),
        files,
    };
    let placed = order_of_change
        .into_iter()
        .map(|id| {
            let p = changed.remove(&id).flatten();
            (id, p)
        })
        .collect();
    Ok(Delta {
        snapshot,
        added,
        placed,
        next_order,
    })
}

impl Base {
    /// Records an installed delta.
    pub(crate) fn apply(&mut self, delta_rest: DeltaRest) {
        self.table.extend(delta_rest.added);
        for (id, p) in delta_rest.placed {
            match p {
                Some(p) => {
                    self.routes.insert(id, p);
                }
                None => {
                    self.routes.remove(&id);
                }
            }
        }
        self.next_order = delta_rest.next_order;
    }
}

/// The part of a [`Delta`] the base keeps once its snapshot is in service.
pub(crate) struct DeltaRest {
    added: UpstreamTable,
    placed: Vec<(String, Option<Placed>)>,
    next_order: u64,
}

impl Delta {
    /// Splits off the snapshot.
    pub(crate) fn split(self) -> (Snapshot, DeltaRest) {
        (
            self.snapshot,
            DeltaRest {
                added: self.added,
                placed: self.placed,
                next_order: self.next_order,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::plugin::PluginFactory;
    use sluice_router::Method;

    #[derive(Debug)]
    struct NoPlugins;

    impl Plugins for NoPlugins {
        fn get(&self, _: &str) -> Option<&dyn PluginFactory> {
            None
        }
        fn all(&self) -> Vec<&dyn PluginFactory> {
            Vec::new()
        }
    }

    fn routed(s: &Snapshot, host: &str, path: &str) -> Option<String> {
        s.router
            .find(host.as_bytes(), Method::Get, path.as_bytes())
            .map(|r| r.id.to_string())
    }

    /// The per-route table keeps a route's path patterns as text only (`Placed`): a change
    /// must still take each of its paths, on each of its hosts, out of the routing table.
    #[test]
    fn a_changed_route_leaves_every_path_and_host_it_had() {
        let cfg = sluice_config::load_str(
            r#"
upstreams: [{id: u, nodes: {"127.0.0.1:1980": 1}}]
routes:
  - {id: r1, uris: ["/a", "/b/*", "/c/:name/d"], hosts: ["x.test", "*.y.test"], upstream_id: u}
  - {id: r2, uri: "/b/*", upstream_id: u}
"#,
        )
        .unwrap();
        let state = StateRegistry::default();
        let (snap, base) = compile_full(&cfg, &NoPlugins, &state).unwrap();
        assert_eq!(routed(&snap, "x.test", "/a").as_deref(), Some("r1"));
        assert_eq!(routed(&snap, "z.y.test", "/c/n/d").as_deref(), Some("r1"));
        assert_eq!(routed(&snap, "x.test", "/b/q").as_deref(), Some("r1"));
        assert_eq!(routed(&snap, "other.test", "/b/q").as_deref(), Some("r2"));

        let changed = sluice_config::load_route_with(
            serde_json::json!({"id": "r1", "uri": "/e", "upstream_id": "u"}),
            0,
            &sluice_config::RouteContext::of(&cfg),
            &sluice_config::NoPlugins,
        )
        .unwrap();
        let change = RouteChange::Put {
            index: 0,
            route: Box::new(changed),
        };
        let (next, _) = compile_routes(&base, &snap, vec![change], &NoPlugins, &state)
            .unwrap()
            .split();
        for (host, path) in [
            ("x.test", "/a"),
            ("z.y.test", "/c/n/d"),
            ("x.test", "/c/n/d"),
        ] {
            assert_eq!(routed(&next, host, path), None, "{host}{path}");
        }
        assert_eq!(routed(&next, "x.test", "/b/q").as_deref(), Some("r2"));
        assert_eq!(routed(&next, "any.test", "/e").as_deref(), Some("r1"));
        assert_eq!(next.router.len(), 2);
        // The table in service is untouched.
        assert_eq!(routed(&snap, "x.test", "/a").as_deref(), Some("r1"));
    }
}
