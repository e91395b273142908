//! The stream routes of a configuration, compiled: by listen address, then by the server name
//! of the TLS ClientHello, each with its upstream, idle timeout, IP rule and connection limit.
//! The snapshot holds them; `stream.rs` serves connections with them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use sluice_config::{Config, StreamProtocol, StreamRouteConfig, Validator};
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
#[derive(Debug)]
pub(crate) struct StreamRoute {
    pub(crate) id: Box<str>,
    /// Index of the upstream in the snapshot (whose nodes may change with DNS).
    pub(crate) upstream: u32,
    /// Terminate TLS with the snapshot's certificates.
    pub(crate) tls: bool,
    /// Relay with splice(2) (never with `tls`).
    pub(crate) splice: bool,
    pub(crate) idle: Duration,
    pub(crate) ip: Option<IpRule>,
    pub(crate) conns: Option<ConnLimit>,
    /// `remote_addr`: only clients in this range take the route.
    pub(crate) remote: Option<IpNet>,
    /// Its slot in the metrics' stream route label.
    pub(crate) metric: crate::metrics::Slot,
}

/// `ip-restriction` on a stream route.
#[derive(Debug)]
pub(crate) struct IpRule {
    nets: Vec<IpNet>,
    /// Whitelist (true) or blacklist.
    allow: bool,
}

impl IpRule {
    pub(crate) fn admits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.nets.iter().any(|n| n.contains(&ip)) == self.allow
    }
}

/// `limit-conn` on a stream route, keyed by client address, counted across workers (one limit
/// per node). A lock per connection opened or closed, never per byte.
#[derive(Debug)]
pub(crate) struct ConnLimit {
    conn: u32,
    burst: u32,
    pub(crate) delay: Duration,
    counts: Arc<Mutex<FxHashMap<IpAddr, u32>>>,
}

/// A connection counted by a [`ConnLimit`]; uncounted when dropped.
pub(crate) struct ConnPermit {
    counts: Arc<Mutex<FxHashMap<IpAddr, u32>>>,
    ip: IpAddr,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut c = self.counts.lock();
        if let Some(n) = c.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.ip);
            }
        }
    }
}

impl ConnLimit {
    /// Counts a connection from `ip`: `Err` when over `conn + burst`, else the permit and how
    /// long to wait first (over `conn`: `default_conn_delay`).
    pub(crate) fn acquire(&self, ip: IpAddr) -> Result<(ConnPermit, Duration), ()> {
        let mut c = self.counts.lock();
        let n = c.entry(ip).or_insert(0);
        // Validation keeps each at most 1,000,000,000; saturating keeps a sum past 32 bits
        // from wrapping (or panicking) whatever the limit is given.
        if *n >= self.conn.saturating_add(self.burst) {
            if *n == 0 {
                c.remove(&ip);
            }
            return Err(());
        }
        *n += 1;
        let wait = if *n > self.conn {
            self.delay
        } else {
            Duration::ZERO
        };
        drop(c);
        Ok((
            ConnPermit {
                counts: self.counts.clone(),
                ip,
            },
            wait,
        ))
    }
}

/// Compiles the stream routes (`v` points at the root). `upstream` resolves a route's
/// upstream into the snapshot's table.
pub(crate) fn compile(
    cfg: &Config,
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
                let ip = v.field("plugins", |v| v.field("ip-restriction", |v| ip_rule(r, v)));
                let conns = v.field("plugins", |v| {
                    v.field("limit-conn", |v| conn_limit(r, state, v))
                });
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
                    ip,
                    conns,
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

fn ip_rule(r: &StreamRouteConfig, v: &mut Validator) -> Option<IpRule> {
    #[derive(serde::Deserialize)]
    struct C {
        #[serde(default)]
        whitelist: Option<Vec<String>>,
        #[serde(default)]
        blacklist: Option<Vec<String>>,
    }
    let c: C = serde_json::from_value(r.plugins.get("ip-restriction")?.clone())
        .map_err(|e| v.error(e.to_string()))
        .ok()?;
    let (list, allow) = match (c.whitelist, c.blacklist) {
        (Some(w), None) => (w, true),
        (None, Some(b)) => (b, false),
        _ => {
            v.error("use one of whitelist or blacklist");
            return None;
        }
    };
    let mut nets = Vec::with_capacity(list.len());
    for s in &list {
        match s
            .parse::<IpNet>()
            .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        {
            Ok(n) => nets.push(n),
            Err(_) => v.error(format!("invalid IP address or CIDR range \"{s}\"")),
        }
    }
    Some(IpRule { nets, allow })
}

fn conn_limit(
    r: &StreamRouteConfig,
    state: &StateRegistry,
    v: &mut Validator,
) -> Option<ConnLimit> {
    let c = r.plugins.get("limit-conn")?;
    let num = |k: &str| c.get(k).and_then(serde_json::Value::as_f64);
    let key = c
        .get("key")
        .and_then(|k| k.as_str())
        .unwrap_or("remote_addr");
    if key != "remote_addr" {
        v.error_at("key", "stream routes count connections by remote_addr only");
        return None;
    }
    let conn = num("conn").unwrap_or(0.0);
    if conn < 1.0 {
        v.error_at("conn", "must be > 0");
        return None;
    }
    let burst = num("burst").unwrap_or(0.0).max(0.0);
    let delay = num("default_conn_delay").unwrap_or(0.0).clamp(0.0, 60.0);
    // Counts survive reloads while the route and its limit are unchanged.
    let counts = state.get_or_insert(&format!("stream-limit-conn/{}/{c}", r.id()), || {
        Mutex::new(FxHashMap::default())
    });
    Some(ConnLimit {
        conn: conn as u32,
        burst: burst as u32,
        delay: Duration::from_secs_f64(delay),
        counts,
    })
}
