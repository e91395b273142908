//! The immutable runtime configuration every request reads, and its compilation from a
//! validated [`Config`]. Everything that can fail fails here, never on a request.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_config::{
    Config, ConfigError, ConfigErrors, PassHost, UpstreamConfig, UpstreamTimeoutConfig,
};
use sluice_router::{Router, RouterBuilder};

use crate::h1::request::HeadLimits;

/// Everything a request needs, compiled from one configuration version. Immutable and shared
/// by all workers; a new version replaces it whole.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases with every compiled configuration.
    pub version: u64,
    pub(crate) router: Router<u32>,
    pub(crate) routes: Box<[Route]>,
    pub(crate) upstreams: Box<[Arc<Upstream>]>,
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
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) websocket: bool,
    pub(crate) timeouts: UpstreamTimeouts,
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

/// Compiles a validated configuration. Fails only on what validation cannot know: node host
/// names that do not resolve.
pub fn compile(cfg: &Config) -> Result<Snapshot, ConfigErrors> {
    let mut errors = Vec::new();
    let mut named: HashMap<&str, Arc<Upstream>> = HashMap::new();
    let mut all: Vec<Arc<Upstream>> = Vec::new();
    for (i, u) in cfg.upstreams.iter().enumerate() {
        if let Some(up) = build_upstream(u, &format!("upstreams[{i}]"), &mut errors) {
            let up = Arc::new(up);
            named.insert(u.id.as_ref().map_or("", |id| id.0.as_str()), up.clone());
            all.push(up);
        }
    }
    // Identical inline upstreams share one compiled upstream (and so one pool per worker):
    // the 5,000 routes of the seeds' scenario 4 all point at the same node.
    let mut inline: HashMap<String, Arc<Upstream>> = HashMap::new();
    let mut builder = RouterBuilder::new();
    let mut routes = Vec::new();
    for (i, r) in cfg.routes.iter().enumerate() {
        if r.status == 0 {
            continue;
        }
        let upstream = match (&r.upstream, &r.upstream_id) {
            (Some(u), _) => {
                let key = format!("{u:?}");
                match inline.get(&key) {
                    Some(up) => Some(up.clone()),
                    None => {
                        build_upstream(u, &format!("routes[{i}].upstream"), &mut errors).map(|up| {
                            let up = Arc::new(up);
                            inline.insert(key, up.clone());
                            all.push(up.clone());
                            up
                        })
                    }
                }
            }
            (None, Some(id)) => named.get(id.0.as_str()).cloned(),
            (None, None) => None,
        };
        let Some(upstream) = upstream else { continue };
        let timeouts = r
            .timeout
            .as_ref()
            .map_or(upstream.timeouts, UpstreamTimeouts::from);
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
            upstream,
            websocket: r.enable_websocket,
            timeouts,
        });
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    Ok(Snapshot {
        version: VERSION.fetch_add(1, Ordering::Relaxed),
        router: builder.build(),
        routes: routes.into(),
        upstreams: all.into(),
        settings: Settings::from_config(cfg),
    })
}

fn build_upstream(
    u: &UpstreamConfig,
    path: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<Upstream> {
    let mut nodes = Vec::with_capacity(u.nodes.0.len());
    for n in &u.nodes.0 {
        let authority = n.authority();
        let addr = match n.host.parse::<std::net::IpAddr>() {
            Ok(ip) => Some(SocketAddr::new(ip, n.port)),
            Err(_) => match (n.host.as_str(), n.port).to_socket_addrs() {
                Ok(mut addrs) => addrs.next(),
                Err(e) => {
                    errors.push(ConfigError::new(
                        format!("{path}.nodes[\"{authority}\"]"),
                        format!("cannot resolve host \"{}\": {e}", n.host),
                    ));
                    continue;
                }
            },
        };
        let Some(addr) = addr else {
            errors.push(ConfigError::new(
                format!("{path}.nodes[\"{authority}\"]"),
                format!("host \"{}\" has no address", n.host),
            ));
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
