//! A compiled upstream: its nodes (each with its shared health entry and the key of its
//! per-worker pool), balancer, timeouts, retries and TLS; and its compilation from an
//! [`UpstreamConfig`]. Everything that can fail fails here, never on a request.

use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{PassHost, UpstreamConfig, UpstreamTimeoutConfig, Validator};

use super::balance::Algorithm;
use super::discover::{self, Answer, Query};
use super::health;
use super::health::Cause;
pub(crate) use super::node::Node;

/// A compiled upstream.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// Identity of this compiled upstream; worker-local balancer state is keyed by it.
    pub(crate) uid: u64,
    /// Who owns the health entries: `upstreams/<id>`, or an inline upstream's configuration
    /// without its nodes.
    pub(crate) owner: Arc<str>,
    /// Its name in metrics: the id of a named upstream, `inline:<nodes>` for an inline one.
    pub(crate) label: Box<str>,
    /// Its slot in the metrics' upstream label.
    pub(crate) metric: crate::metrics::Slot,
    pub(crate) nodes: Box<[Node]>,
    /// The balancing algorithm (`type`).
    pub(crate) balancer: Box<dyn Algorithm>,
    /// Nodes have different priorities (backup nodes).
    pub(crate) priorities: bool,
    /// `checks.passive`, compiled.
    pub(crate) passive: Option<Passive>,
    /// `checks.active`, for the checker of this upstream.
    pub(crate) active: Option<Arc<ActiveCheck>>,
    /// `max_inflight`: the process-wide cap.
    pub(crate) limit: Option<Arc<super::shed::Limit>>,
    /// Host names among the nodes (or `discovery_type: dns`): what to compile again when they
    /// resolve differently.
    pub(crate) dns: Option<Arc<DnsSpec>>,
    /// `retry_budget`.
    pub(crate) budget: Option<super::shed::BudgetConfig>,
    pub(crate) pass_host: PassHostRt,
    pub(crate) timeouts: UpstreamTimeouts,
    pub(crate) retries: u32,
    pub(crate) retry_timeout: Option<Duration>,
    pub(crate) keepalive: Keepalive,
    /// `scheme: grpc(s)`: gRPC calls arriving over HTTP/2 go to the nodes as they are
    /// ([`crate::grpc`]); HTTP/1.1 requests are refused.
    pub(crate) grpc: bool,
    /// HTTP/2 to the nodes (`grpc`, `grpcs` or `http2: true`).
    pub(crate) http2: bool,
    /// `scheme: https` or `grpcs`: TLS to the nodes.
    pub(crate) tls: Option<UpTls>,
}

/// How an upstream with host names was built, to build it again when they resolve
/// differently.
#[derive(Debug)]
pub(crate) struct DnsSpec {
    pub(crate) config: UpstreamConfig,
    pub(crate) id: Option<String>,
    pub(crate) key: u64,
    /// The resolver settings of the configuration it came from.
    pub(crate) dns: Arc<sluice_config::DnsConfig>,
    /// Each name, and what it resolved to then.
    pub(crate) built: Vec<(Query, Answer)>,
}

impl DnsSpec {
    /// The upstream again, from the answers cached now. None when they are unchanged.
    pub(crate) fn rebuild(&self) -> Option<Upstream> {
        let changed = self
            .built
            .iter()
            .any(|(q, a)| discover::cached(q, &self.dns).is_some_and(|now| now != *a));
        if !changed {
            return None;
        }
        build_upstream(
            &self.config,
            self.id.as_deref(),
            self.key,
            &self.dns,
            &mut Validator::new(),
        )
    }
}

/// `checks.active`, compiled.
#[derive(Debug)]
pub(crate) struct ActiveCheck {
    pub(crate) cfg: sluice_config::ActiveCheckConfig,
    /// For `type: https` probes.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
}

/// `checks.passive`: what counts, and when a node goes out.
#[derive(Debug)]
pub(crate) struct Passive {
    /// Statuses are counted (`type: http` or `https`).
    pub(crate) http: bool,
    pub(crate) healthy_statuses: StatusSet,
    pub(crate) successes: u32,
    pub(crate) unhealthy_statuses: StatusSet,
    pub(crate) http_failures: u32,
    pub(crate) tcp_failures: u32,
    pub(crate) timeouts: u32,
    /// Brought back only by the active checker (one is configured); otherwise traffic tries
    /// the node again after [`super::select::FAIL_TIMEOUT`].
    pub(crate) active_brings_back: bool,
}

/// A set of HTTP statuses (200 to 599), one bit each.
#[derive(Debug, Default, Clone)]
pub(crate) struct StatusSet([u64; 7]);

impl StatusSet {
    pub(crate) fn of(list: &[u16]) -> StatusSet {
        let mut s = StatusSet::default();
        for &c in list {
            if let Some(i) = c.checked_sub(200).map(usize::from).filter(|i| *i < 400) {
                s.0[i / 64] |= 1 << (i % 64);
            }
        }
        s
    }

    #[inline]
    pub(crate) fn contains(&self, status: u16) -> bool {
        status
            .checked_sub(200)
            .map(usize::from)
            .filter(|i| *i < 400)
            .is_some_and(|i| self.0[i / 64] & (1 << (i % 64)) != 0)
    }
}

/// TLS towards an upstream's nodes.
#[derive(Debug)]
pub(crate) struct UpTls {
    pub(crate) config: Arc<rustls::ClientConfig>,
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

fn hash_of(parts: impl Hash) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// The identity of an upstream across configuration versions: a hash of its whole
/// configuration (`key`, its debug form), and of what its host names resolved to. An upstream
/// that did not change keeps its uid through a reload, and with it every worker's balancer
/// state; a changed one starts afresh (its nodes' pools and health, keyed by address, stay).
pub(crate) fn upstream_uid(key: &str) -> u64 {
    hash_of(key)
}

fn owner_name(owner: &str) -> &str {
    owner.strip_prefix("upstreams/").unwrap_or("inline")
}

/// Compiles an upstream (`v` points at it). `id`: its id when it is a named upstream.
pub(crate) fn build_upstream(
    u: &UpstreamConfig,
    id: Option<&str>,
    uid_key_hash: u64,
    dns_cfg: &Arc<sluice_config::DnsConfig>,
    v: &mut Validator,
) -> Option<Upstream> {
    let owner: Arc<str> = match id {
        Some(id) => format!("upstreams/{id}").into(),
        None => {
            let mut shape = u.clone();
            shape.nodes.0.clear();
            format!("inline {shape:?}").into()
        }
    };
    let conn_sig = hash_of((&u.scheme, format!("{:?}", u.tls), u.http2));
    let tls_scheme = matches!(u.scheme.as_str(), "https" | "grpcs" | "tls");
    let default_port = u.default_port().to_string();
    let node =
        |host: &str, addr: SocketAddr, authority: String, health_key: &str, weight, priority| {
            let server_name = if tls_scheme {
                let name = u
                    .tls
                    .sni
                    .clone()
                    .or_else(|| {
                        (u.pass_host == PassHost::Rewrite)
                            .then(|| u.upstream_host.clone())
                            .flatten()
                    })
                    .unwrap_or_else(|| host.to_owned());
                rustls::pki_types::ServerName::try_from(name).ok()
            } else {
                None
            };
            let pool_key = hash_of((
                conn_sig,
                addr,
                server_name.as_ref().map(|s| s.to_str().into_owned()),
            ));
            let host_len = match authority.strip_suffix(default_port.as_str()) {
                Some(h) if h.ends_with(':') => h.len() - 1,
                _ => authority.len(),
            };
            Node {
                addr,
                weight,
                health: health::entry(&owner, health_key),
                host_len: u16::try_from(host_len).unwrap_or(u16::MAX),
                uri_authority: http::uri::Authority::try_from(authority.as_str()).ok(),
                authority: authority.into(),
                server_name,
                pool_key,
                priority,
            }
        };
    // What names resolved to, for the uid and for the housekeeping thread to notice a change.
    let mut queries: Vec<(Query, Answer)> = Vec::new();
    let mut nodes = Vec::with_capacity(u.nodes.0.len());
    // A name that does not resolve: a node out of rotation (weight 0), shown unhealthy.
    let unresolved = |authority: String, port: u16, q: &Query, why: &str| {
        let placeholder = node(
            "",
            SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), port),
            authority.clone(),
            &authority,
            0,
            i32::MIN,
        );
        let why = format!("{q} does not resolve: {why}");
        if placeholder.health.mark_down(Cause::Unresolved, None, &why) {
            tracing::warn!(upstream = %owner_name(&owner), node = %authority, cause = %why, "node unhealthy until its name resolves");
        }
        placeholder
    };
    for n in &u.nodes.0 {
        let authority = n.authority();
        if let Ok(ip) = n.host.parse::<std::net::IpAddr>() {
            nodes.push(node(
                &n.host,
                SocketAddr::new(ip, n.port),
                authority.clone(),
                &authority,
                n.weight,
                n.priority,
            ));
            continue;
        }
        let q = Query::Host(n.host.clone());
        let answer = discover::lookup(&q, dns_cfg);
        match &answer {
            Ok(targets) if !targets.is_empty() => {
                for t in targets {
                    let addr = SocketAddr::new(t.ip, n.port);
                    let key = format!("{authority}@{}", t.ip);
                    nodes.push(node(
                        &n.host,
                        addr,
                        authority.clone(),
                        &key,
                        n.weight,
                        n.priority,
                    ));
                }
            }
            Ok(_) => nodes.push(unresolved(authority, n.port, &q, "no address")),
            Err(e) => nodes.push(unresolved(authority, n.port, &q, discover::plain(e))),
        }
        queries.push((q, answer));
    }
    if let Some(found) = super::discovery::query(u, &dns_cfg.discovery, v) {
        let service = u.service_name.as_deref().unwrap_or_default();
        let q = found.query;
        let answer = discover::lookup(&q, dns_cfg);
        match &answer {
            Ok(targets) if !targets.is_empty() => {
                for t in targets {
                    let port = t.port.or(found.port).unwrap_or(u.default_port());
                    let n = found.kind.node_of(service, &q, t, port);
                    nodes.push(node(
                        &n.host,
                        SocketAddr::new(t.ip, port),
                        n.authority,
                        &n.health_key,
                        t.weight.unwrap_or(1),
                        t.priority,
                    ));
                }
            }
            Ok(_) => nodes.push(unresolved(
                service.to_owned(),
                found.port.unwrap_or(u.default_port()),
                &q,
                "no address",
            )),
            Err(e) => nodes.push(unresolved(
                service.to_owned(),
                found.port.unwrap_or(u.default_port()),
                &q,
                discover::plain(e),
            )),
        }
        queries.push((q, answer));
    } else if u.discovery_type.is_some() || u.service_name.is_some() {
        // Its error is recorded.
        return None;
    }
    let uid = if queries.is_empty() {
        uid_key_hash
    } else {
        hash_of((uid_key_hash, format!("{queries:?}")))
    };
    let dns = (!queries.is_empty()).then(|| {
        Arc::new(DnsSpec {
            config: u.clone(),
            id: id.map(str::to_owned),
            key: uid_key_hash,
            dns: dns_cfg.clone(),
            built: queries,
        })
    });
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
    let http2 = u.http2 || matches!(u.scheme.as_str(), "grpc" | "grpcs");
    let retries = u
        .retries
        .unwrap_or_else(|| nodes.len().saturating_sub(1) as u32);
    let balancer = super::balance::build(u, &nodes, v)?;
    let checks = u.checks.clone().unwrap_or_default();
    let passive = checks.passive.as_ref().map(|p| Passive {
        http: p.kind != "tcp",
        healthy_statuses: StatusSet::of(&p.healthy.http_statuses),
        successes: p.healthy.successes,
        unhealthy_statuses: StatusSet::of(&p.unhealthy.http_statuses),
        http_failures: p.unhealthy.http_failures,
        tcp_failures: p.unhealthy.tcp_failures,
        timeouts: p.unhealthy.timeouts,
        active_brings_back: checks.active.is_some(),
    });
    let priorities = nodes.windows(2).any(|w| w[0].priority != w[1].priority);
    let active = match checks.active {
        Some(cfg) => {
            let tls = if cfg.kind == "https" {
                let t = sluice_config::UpstreamTlsConfig {
                    verify: cfg.https_verify_certificate,
                    ..u.tls.clone()
                };
                Some(v.field("checks", |v| {
                    v.field("active", |v| crate::tls::client_config(&t, false, v))
                })?)
            } else {
                None
            };
            Some(Arc::new(ActiveCheck { cfg, tls }))
        }
        None => None,
    };
    let limit = u
        .max_inflight
        .map(|max| super::shed::limit(&format!("upstream {owner}"), max));
    let budget = u.retry_budget.as_ref().map(|b| super::shed::BudgetConfig {
        ratio: b.ratio,
        min_per_second: b.min_per_second,
    });
    let label: Box<str> = match id {
        Some(id) => id.into(),
        None => {
            let nodes: Vec<String> = u
                .nodes
                .0
                .iter()
                .map(|n| format!("{}:{}", n.host, n.port))
                .collect();
            format!("inline:{}", nodes.join(",")).into()
        }
    };
    Some(Upstream {
        uid,
        owner,
        label,
        metric: Default::default(),
        dns,
        limit,
        budget,
        priorities,
        passive,
        active,
        balancer,
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
        grpc: matches!(u.scheme.as_str(), "grpc" | "grpcs"),
        http2,
        tls: match u.scheme.as_str() {
            "https" | "grpcs" => Some(UpTls {
                config: crate::tls::client_config(&u.tls, http2, v)?,
            }),
            // A stream route's bytes are not HTTP: no ALPN.
            "tls" => Some(UpTls {
                config: {
                    let mut c = (*crate::tls::client_config(&u.tls, false, v)?).clone();
                    c.alpn_protocols.clear();
                    Arc::new(c)
                },
            }),
            _ => None,
        },
    })
}

#[cfg(test)]
pub(crate) mod testing {
    //! Compiled upstreams for unit tests.
    use super::*;

    /// An upstream of nodes 127.0.0.1:1000+i with these weights, owned by `owner`.
    pub(crate) fn upstream(owner: &str, weights: &[u32]) -> Upstream {
        let owner: Arc<str> = owner.into();
        Upstream {
            label: owner.to_string().into(),
            metric: Default::default(),
            uid: hash_of(&*owner),
            nodes: weights
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let authority = format!("127.0.0.1:{}", 1000 + i);
                    Node {
                        addr: authority.parse().unwrap(),
                        weight: *w,
                        health: health::entry(&owner, &authority),
                        host_len: authority.len() as u16,
                        uri_authority: http::uri::Authority::try_from(authority.as_str()).ok(),
                        authority: authority.into(),
                        server_name: None,
                        pool_key: 1000 + i as u64,
                        priority: 0,
                    }
                })
                .collect(),
            owner,
            balancer: super::super::balance::build(
                &UpstreamConfig::none(),
                &[],
                &mut Validator::new(),
            )
            .expect("roundrobin"),
            priorities: false,
            passive: None,
            active: None,
            limit: None,
            budget: None,
            dns: None,
            pass_host: PassHostRt::Pass,
            timeouts: UpstreamTimeouts {
                connect: Duration::from_secs(1),
                send: Duration::from_secs(1),
                read: Duration::from_secs(1),
            },
            retries: 0,
            retry_timeout: None,
            keepalive: Keepalive {
                size: 1,
                idle: Duration::from_secs(1),
                requests: 1,
            },
            grpc: false,
            http2: false,
            tls: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_host_node_leaves_out_the_schemes_own_port() {
        // APISIX sends `Host: api.example` to `api.example:443` under https, and the port
        // when it is not the scheme's.
        let hosts = |doc: &str| -> Vec<String> {
            let u: UpstreamConfig = serde_json::from_str(doc).unwrap();
            let up = build_upstream(&u, None, 1, &Default::default(), &mut Validator::new())
                .expect("builds");
            up.nodes
                .iter()
                .map(|n| String::from_utf8(n.host_header().to_vec()).unwrap())
                .collect()
        };
        assert_eq!(
            hosts(
                r#"{"scheme": "https", "pass_host": "node", "nodes": {"127.0.0.1": 1, "127.0.0.2:443": 1, "127.0.0.3:80": 1}}"#
            ),
            ["127.0.0.1", "127.0.0.2", "127.0.0.3:80"]
        );
        assert_eq!(
            hosts(
                r#"{"pass_host": "node", "nodes": {"127.0.0.1": 1, "127.0.0.2:8080": 1, "[::1]:443": 1}}"#
            ),
            ["127.0.0.1", "127.0.0.2:8080", "[::1]:443"]
        );
    }
}
