//! The stream routes of a configuration, compiled: by listen address, then by the server name
//! of the TLS ClientHello, each with its upstream, idle timeout and plugins (their stream side,
//! APISIX's `preread` phase).
//! The snapshot holds them; `stream.rs` serves connections with them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use sluice_config::{Config, PluginScope, StreamProtocol, StreamRouteConfig, Validator};
use sluice_core::meta::split_meta;
use sluice_core::plugin::{BuildCx, Plugins, StreamPlugin};
use sluice_core::state::StateRegistry;

/// Default idle timeout of a TCP stream connection (NGINX's `proxy_timeout`).
const TCP_IDLE: Duration = Duration::from_secs(600);
/// Default idle timeout of a UDP session.
const UDP_IDLE: Duration = Duration::from_secs(30);

/// The stream routes of one configuration version, by listen address.
#[derive(Debug, Default)]
pub(crate) struct StreamTable {
    pub(crate) tcp: HashMap<SocketAddr, Group>,
    pub(crate) udp: HashMap<SocketAddr, Candidates>,
}

/// The routes that share a listen address and server name: those with a `remote_addr` first
/// (in configuration order), then the one without.
#[derive(Debug, Default)]
pub(crate) struct Candidates(Vec<Arc<StreamRoute>>);

impl Candidates {
    /// The route for a client at `ip`.
    pub(crate) fn for_client(&self, ip: IpAddr) -> Option<&Arc<StreamRoute>> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0
            .iter()
            .find(|r| r.remote.is_none_or(|n| n.contains(&ip)))
    }

    fn add(&mut self, r: Arc<StreamRoute>) {
        // Those without `remote_addr` last: a client that a narrower route takes goes there.
        let at = self.0.iter().take_while(|x| x.remote.is_some()).count();
        let at = if r.remote.is_some() { at } else { self.0.len() };
        self.0.insert(at, r);
    }
}

/// The TCP routes of one listen address.
#[derive(Debug, Default)]
pub(crate) struct Group {
    exact: HashMap<Box<str>, Candidates>,
    /// `*.example.com` stored as `example.com`.
    wildcard: HashMap<Box<str>, Candidates>,
    /// The routes without `sni`: connections no other route takes.
    pub(crate) rest: Candidates,
    /// Whether the ClientHello must be read before choosing (a route has `sni` or `tls`).
    pub(crate) needs_hello: bool,
}

impl Group {
    /// The route for a connection from `ip` that asked for `name`.
    pub(crate) fn by_name(&self, name: Option<&str>, ip: IpAddr) -> Option<&Arc<StreamRoute>> {
        let found = name.and_then(|n| {
            let n = n.trim_end_matches('.').to_ascii_lowercase();
            let exact = self.exact.get(n.as_str()).and_then(|c| c.for_client(ip));
            exact.or_else(|| {
                let (_, parent) = n.split_once('.')?;
                self.wildcard.get(parent)?.for_client(ip)
            })
        });
        found.or_else(|| self.rest.for_client(ip))
    }
}

/// A compiled stream route.
pub(crate) struct StreamRoute {
    pub(crate) id: Box<str>,
    /// Index of the upstream in the snapshot (whose nodes may change with DNS).
    pub(crate) upstream: u32,
    /// Terminate TLS with the snapshot's certificates.
    pub(crate) tls: bool,
    /// Relay with splice(2) (never with `tls`).
    pub(crate) splice: bool,
    pub(crate) idle: Duration,
    /// Its plugins' stream side, highest priority first.
    pub(crate) plugins: Box<[Arc<dyn StreamPlugin>]>,
    /// `remote_addr`: only clients in this range take the route.
    pub(crate) remote: Option<IpNet>,
    /// Its slot in the metrics' stream route label.
    pub(crate) metric: crate::metrics::Slot,
}

impl std::fmt::Debug for StreamRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRoute")
            .field("id", &self.id)
            .field("upstream", &self.upstream)
            .field("plugins", &self.plugins.len())
            .finish_non_exhaustive()
    }
}

/// Compiles the stream routes (`v` points at the root). `upstream` resolves a route's
/// upstream into the snapshot's table.
pub(crate) fn compile(
    cfg: &Config,
    plugins: &dyn Plugins,
    state: &StateRegistry,
    upstream: &mut dyn FnMut(&StreamRouteConfig, &mut Validator) -> Option<u32>,
    v: &mut Validator,
) -> StreamTable {
    let mut table = StreamTable::default();
    v.field("stream_routes", |v| {
        for (i, r) in cfg.stream_routes.iter().enumerate() {
            v.index(i, |v| {
                if r.addrs.is_empty() {
                    return;
                }
                let up = upstream(r, v);
                let plugins = v.field("plugins", |v| build_plugins(cfg, r, plugins, state, v));
                let Some(up) = up else { return };
                let route = Arc::new(StreamRoute {
                    metric: Default::default(),
                    id: r.id().into(),
                    upstream: up,
                    tls: r.tls,
                    splice: r.splice && !r.tls,
                    idle: r.idle_timeout.map(|d| d.0).unwrap_or(match r.protocol {
                        StreamProtocol::Tcp => TCP_IDLE,
                        StreamProtocol::Udp => UDP_IDLE,
                    }),
                    plugins,
                    remote: r.remote,
                });
                for &addr in &r.addrs {
                    let route = route.clone();
                    match r.protocol {
                        StreamProtocol::Udp => {
                            table.udp.entry(addr).or_default().add(route);
                        }
                        StreamProtocol::Tcp => {
                            let g = table.tcp.entry(addr).or_default();
                            g.needs_hello |= r.sni.is_some() || r.tls;
                            match &r.sni {
                                None => g.rest.add(route),
                                Some(name) => {
                                    let name = name.trim_end_matches('.').to_ascii_lowercase();
                                    match name.strip_prefix("*.") {
                                        Some(parent) => {
                                            g.wildcard.entry(parent.into()).or_default().add(route)
                                        }
                                        None => g.exact.entry(name.into()).or_default().add(route),
                                    }
                                }
                            }
                        }
                    }
                }
            });
        }
    });
    table
}

/// Builds the stream side of a route's plugins (`v` points at its `plugins`), highest priority
/// first; validation let only plugins with one through.
fn build_plugins(
    cfg: &Config,
    r: &StreamRouteConfig,
    plugins: &dyn Plugins,
    state: &StateRegistry,
    v: &mut Validator,
) -> Box<[Arc<dyn StreamPlugin>]> {
    let owner = format!("stream_route:{}", r.id());
    let mut built = Vec::with_capacity(r.plugins.len());
    for (name, config) in &r.plugins {
        v.field(name, |v| {
            let Some(f) = plugins.get(name).filter(|f| f.on_stream()) else {
                v.error("does not work on stream routes");
                return;
            };
            let Some(entry) = split_meta(config, v) else {
                return;
            };
            if entry.disabled {
                return;
            }
            if entry.filter.is_some() || entry.error_response.is_some() {
                v.error_at("_meta", sluice_core::meta::NOT_ON_STREAMS);
                return;
            }
            let no_index = |_: &str| None;
            let mut no_upstreams = |_: &serde_json::Value, v: &mut Validator| {
                v.error("plugins on stream routes cannot name upstreams");
                None
            };
            let mut cx = BuildCx {
                tls_ports: &[],
                plugin_attr: &cfg.plugin_attr,
                plugin_metadata: &cfg.plugin_metadata.as_slice(),
                route_paths: &[],
                scope: PluginScope::StreamRoute,
                owner: &owner,
                indexes: &no_index,
                upstreams: &mut no_upstreams,
                state,
            };
            if let Some(p) = f.build_stream(&entry.config, &mut cx, v) {
                built.push((entry.priority.unwrap_or(f.priority()), f.name(), p));
            }
        });
    }
    built.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    built.into_iter().map(|(_, _, p)| p).collect()
}
