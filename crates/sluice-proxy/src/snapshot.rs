//! The immutable runtime configuration every request reads, and its compilation from a
//! validated [`Config`]. Everything that can fail fails here, never on a request.

use std::any::Any;
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_config::{
    Config, ConfigErrors, PassHost, UpstreamConfig, UpstreamTimeoutConfig, Validator,
};
use sluice_core::plugin::{BuildCx, Credential, Plugins, Scope, split_meta};
use sluice_core::state::StateRegistry;
use sluice_core::{Chain, ChainEntry, Consumer, UpstreamRef};
use sluice_router::{Router, RouterBuilder};

use sluice_core::http::request::HeadLimits;

/// Everything a request needs, compiled from one configuration version. Immutable and shared
/// by all workers; a new version replaces it whole.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases with every compiled configuration.
    pub version: u64,
    pub(crate) router: Router<u32>,
    pub(crate) routes: Box<[Route]>,
    /// Every upstream, indexed by [`UpstreamRef`]: named ones, inline ones (identical inline
    /// upstreams once), and those plugins refer to.
    pub(crate) upstreams: Box<[Arc<Upstream>]>,
    pub(crate) consumers: Box<[Consumer]>,
    /// Global rules' plugins, for requests no route matches.
    pub(crate) globals: Chain,
    pub(crate) settings: Settings,
}

impl Snapshot {
    /// Routes served (disabled routes are not counted).
    pub fn route_count(&self) -> usize {
        self.routes.len()
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
    /// Service, route and global-rule plugins, merged and sorted.
    pub(crate) chain: Chain,
}

/// A compiled upstream.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// Identity of this compiled upstream; worker-local state (pools, balancer) is keyed by it.
    pub(crate) uid: u64,
    pub(crate) nodes: Box<[Node]>,
    pub(crate) pass_host: PassHostRt,
    pub(crate) timeouts: UpstreamTimeouts,
    pub(crate) retries: u32,
    pub(crate) retry_timeout: Option<Duration>,
    pub(crate) keepalive: Keepalive,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) addr: SocketAddr,
    pub(crate) weight: u32,
    /// `host:port` as configured: the `Host` for `pass_host: node`, and the name in logs.
    pub(crate) authority: Box<str>,
}

#[derive(Debug)]
pub(crate) enum PassHostRt {
    Pass,
    Node,
    Rewrite(Box<[u8]>),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct UpstreamTimeouts {
    pub(crate) connect: Duration,
    pub(crate) send: Duration,
    pub(crate) read: Duration,
}

impl From<&UpstreamTimeoutConfig> for UpstreamTimeouts {
    fn from(t: &UpstreamTimeoutConfig) -> Self {
        UpstreamTimeouts {
            connect: t.connect.0,
            send: t.send.0,
            read: t.read.0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Keepalive {
    pub(crate) size: usize,
    pub(crate) idle: Duration,
    pub(crate) requests: u32,
}

/// Node-level limits and timeouts, in runtime form.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) head: HeadLimits,
    pub(crate) max_body: u64,
    pub(crate) max_response_head: usize,
    pub(crate) client_header: Duration,
    pub(crate) client_body: Duration,
    pub(crate) client_send: Duration,
    pub(crate) keepalive: Duration,
    pub(crate) keepalive_requests: u32,
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
            max_response_head: l.max_response_header_size.0 as usize,
            client_header: t.client_header.0,
            client_body: t.client_body.0,
            client_send: t.client_send.0,
            keepalive: t.keepalive.0,
            keepalive_requests: l.keepalive_requests,
        }
    }
}

static VERSION: AtomicU64 = AtomicU64::new(1);
static UPSTREAM_UID: AtomicU64 = AtomicU64::new(1);

/// The upstreams of a snapshot being compiled.
#[derive(Default)]
struct UpstreamTable {
    list: Vec<Arc<Upstream>>,
    named: HashMap<String, u32>,
    /// Identical inline upstreams share one compiled upstream (and so one pool per worker):
    /// the 5,000 routes of the seeds' scenario 4 all point at the same node.
    inline: HashMap<String, u32>,
}

impl UpstreamTable {
    fn push(&mut self, up: Upstream) -> u32 {
        self.list.push(Arc::new(up));
        (self.list.len() - 1) as u32
    }

    fn inline(&mut self, u: &UpstreamConfig, v: &mut Validator) -> Option<u32> {
        let key = format!("{u:?}");
        if let Some(&i) = self.inline.get(&key) {
            return Some(i);
        }
        let up = build_upstream(u, v)?;
        let i = self.push(up);
        self.inline.insert(key, i);
        Some(i)
    }

    /// An upstream named in a plugin configuration: an id, or an inline object.
    fn resolve(&mut self, value: &serde_json::Value, v: &mut Validator) -> Option<UpstreamRef> {
        let found = match value {
            serde_json::Value::String(id) => self.named.get(id).copied(),
            serde_json::Value::Number(n) => self.named.get(&n.to_string()).copied(),
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

/// Builds the plugin entries of one resource (`v` points at the resource).
fn build_plugins(
    map: &serde_json::Map<String, serde_json::Value>,
    scope: Scope,
    owner: &str,
    env: &mut BuildEnv<'_>,
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
                let indexes = &env.indexes;
                let idx = |n: &str| indexes.get(n).cloned();
                let table = &mut env.table;
                let mut resolve =
                    |value: &serde_json::Value, v: &mut Validator| table.resolve(value, v);
                let mut cx = BuildCx {
                    scope,
                    owner,
                    indexes: &idx,
                    upstreams: &mut resolve,
                    state: env.state,
                };
                if let Some(plugin) = f.build(&entry.config, &mut cx, v) {
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

struct BuildEnv<'a> {
    plugins: &'a dyn Plugins,
    state: &'a StateRegistry,
    indexes: HashMap<&'static str, Arc<dyn Any + Send + Sync>>,
    table: UpstreamTable,
}

/// Compiles a validated configuration: upstreams, consumers, plugin chains and the router.
/// Fails only on what validation cannot know (node host names that do not resolve).
pub fn compile(
    cfg: &Config,
    plugins: &dyn Plugins,
    state: &StateRegistry,
) -> Result<Snapshot, ConfigErrors> {
    let mut v = Validator::new();
    let mut env = BuildEnv {
        plugins,
        state,
        indexes: HashMap::new(),
        table: UpstreamTable::default(),
    };

    v.field("upstreams", |v| {
        for (i, u) in cfg.upstreams.iter().enumerate() {
            v.index(i, |v| {
                if let Some(up) = build_upstream(u, v) {
                    let idx = env.table.push(up);
                    env.table
                        .named
                        .insert(u.id.as_ref().map_or(String::new(), |id| id.0.clone()), idx);
                }
            });
        }
    });

    // Credentials: one index per auth plugin, from every consumer.
    v.field("consumers", |v| {
        for f in plugins.all().into_iter().filter(|f| f.is_auth()) {
            let mut entries = Vec::new();
            for (i, c) in cfg.consumers.iter().enumerate() {
                if let Some(entry) = c
                    .plugins
                    .get(f.name())
                    .and_then(|cfg| split_meta(cfg, &mut Validator::new()))
                    .filter(|e| !e.disabled)
                {
                    entries.push((i, entry.config));
                }
            }
            let creds: Vec<Credential<'_>> = entries
                .iter()
                .map(|(i, config)| Credential {
                    consumer: *i as u32,
                    position: *i,
                    username: &cfg.consumers[*i].username,
                    config,
                })
                .collect();
            if let Some(index) = f.consumer_index(&creds, v) {
                env.indexes.insert(f.name(), index);
            }
        }
    });
    let mut consumers = Vec::with_capacity(cfg.consumers.len());
    v.field("consumers", |v| {
        for (i, c) in cfg.consumers.iter().enumerate() {
            v.index(i, |v| {
                let owner = format!("consumer:{}", c.username);
                let entries = build_plugins(&c.plugins, Scope::Consumer, &owner, &mut env, v);
                consumers.push(Consumer {
                    username: c.username.as_str().into(),
                    chain: Chain::new(entries),
                });
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

    struct Service {
        upstream: Option<u32>,
        plugins: Vec<ChainEntry>,
        websocket: bool,
    }
    let mut services: HashMap<&str, Service> = HashMap::new();
    v.field("services", |v| {
        for (i, s) in cfg.services.iter().enumerate() {
            v.index(i, |v| {
                let upstream = match (&s.upstream, &s.upstream_id) {
                    (Some(u), _) => v.field("upstream", |v| env.table.inline(u, v)),
                    (None, Some(id)) => env.table.named.get(&id.0).copied(),
                    (None, None) => None,
                };
                let owner = format!("service:{}", s.id.as_ref().map_or("", |id| id.0.as_str()));
                let plugins = build_plugins(&s.plugins, Scope::Service, &owner, &mut env, v);
                let id = s.id.as_ref().map_or("", |id| id.0.as_str());
                services.insert(
                    id,
                    Service {
                        upstream,
                        plugins,
                        websocket: s.enable_websocket,
                    },
                );
            });
        }
    });

    let mut builder = RouterBuilder::new();
    let mut routes = Vec::new();
    v.field("routes", |v| {
        for (i, r) in cfg.routes.iter().enumerate() {
            if r.status == 0 {
                continue;
            }
            v.index(i, |v| {
                let service = r
                    .service_id
                    .as_ref()
                    .and_then(|id| services.get(id.0.as_str()));
                let upstream = match (&r.upstream, &r.upstream_id) {
                    (Some(u), _) => v.field("upstream", |v| env.table.inline(u, v)),
                    (None, Some(id)) => env.table.named.get(&id.0).copied(),
                    (None, None) => service.and_then(|s| s.upstream),
                };
                let owner = format!("route:{}", r.id());
                let own = build_plugins(&r.plugins, Scope::Route, &owner, &mut env, v);
                let Some(upstream) = upstream else { return };
                // The route's configuration of a plugin wins over its service's; global rules
                // run beside both.
                let mut entries: Vec<ChainEntry> = service
                    .map(|s| {
                        s.plugins
                            .iter()
                            .filter(|e| !r.plugins.contains_key(e.name))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                entries.extend(own);
                entries.extend(globals.iter().cloned());
                let slot = routes.len() as u32;
                builder.insert(
                    &r.matcher.paths,
                    &r.matcher.hosts,
                    r.matcher.methods,
                    r.priority,
                    slot,
                );
                routes.push(Route {
                    id: r.id().into(),
                    upstream: UpstreamRef(upstream),
                    websocket: r.enable_websocket && service.is_none_or(|s| s.websocket),
                    timeouts: r.timeout.as_ref().map(UpstreamTimeouts::from),
                    chain: Chain::new(entries),
                });
            });
        }
    });
    v.finish()?;
    Ok(Snapshot {
        version: VERSION.fetch_add(1, Ordering::Relaxed),
        router: builder.build(),
        routes: routes.into(),
        upstreams: env.table.list.into(),
        consumers: consumers.into(),
        globals: Chain::new(globals),
        settings: Settings::from_config(cfg),
    })
}

fn build_upstream(u: &UpstreamConfig, v: &mut Validator) -> Option<Upstream> {
    let mut nodes = Vec::with_capacity(u.nodes.0.len());
    for n in &u.nodes.0 {
        let authority = n.authority();
        let addr = match n.host.parse::<std::net::IpAddr>() {
            Ok(ip) => Some(SocketAddr::new(ip, n.port)),
            Err(_) => match (n.host.as_str(), n.port).to_socket_addrs() {
                Ok(mut addrs) => addrs.next(),
                Err(e) => {
                    v.field("nodes", |v| {
                        v.key(&authority, |v| {
                            v.error(format!("cannot resolve host \"{}\": {e}", n.host))
                        })
                    });
                    continue;
                }
            },
        };
        let Some(addr) = addr else {
            v.field("nodes", |v| {
                v.key(&authority, |v| {
                    v.error(format!("host \"{}\" has no address", n.host))
                })
            });
            continue;
        };
        nodes.push(Node {
            addr,
            weight: n.weight,
            authority: authority.into(),
        });
    }
    if nodes.len() != u.nodes.0.len() {
        return None;
    }
    let pass_host = match u.pass_host {
        PassHost::Pass => PassHostRt::Pass,
        PassHost::Node => PassHostRt::Node,
        PassHost::Rewrite => PassHostRt::Rewrite(
            u.upstream_host
                .as_deref()
                .unwrap_or_default()
                .as_bytes()
                .into(),
        ),
    };
    let retries = u
        .retries
        .unwrap_or_else(|| nodes.len().saturating_sub(1) as u32);
    Some(Upstream {
        uid: UPSTREAM_UID.fetch_add(1, Ordering::Relaxed),
        nodes: nodes.into(),
        pass_host,
        timeouts: (&u.timeout).into(),
        retries,
        retry_timeout: u.retry_timeout.map(|d| d.0).filter(|d| !d.is_zero()),
        keepalive: Keepalive {
            size: u.keepalive_pool.size,
            idle: u.keepalive_pool.idle_timeout.0,
            requests: u.keepalive_pool.requests,
        },
    })
}
