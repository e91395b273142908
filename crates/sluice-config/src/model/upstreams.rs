//! Upstreams: balancing, nodes, health checks, timeouts, TLS, keep-alive, DNS.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::de::{Dur, Id};

/// A group of nodes that requests are balanced over.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
// `remote = "Self"`: the derived code is an inherent `deserialize`, wrapped by the impl below
// so that nodes without a port get the scheme's.
#[serde(deny_unknown_fields, remote = "Self")]
pub struct UpstreamConfig {
    /// Identifier; required in `upstreams`, not allowed inline.
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
    /// Balancer: `roundrobin` (smooth weighted round-robin, NGINX's), `chash` (consistent
    /// hashing of `key`), `least_conn` (fewest requests in flight, by weight) or `ewma`
    /// (lowest peak-EWMA latency of two random nodes). Default roundrobin.
    #[serde(rename = "type", default = "default_balancer")]
    pub balancer: String,
    /// `chash`: where the key comes from: `vars` (an NGINX-style variable such as
    /// `remote_addr`, `uri`, `arg_id`), `header`, `cookie`, `consumer` (the authenticated
    /// consumer's name) or `vars_combinations` (`key` is a template like `$host$uri`).
    /// Default vars.
    #[serde(default)]
    pub hash_on: Option<String>,
    /// `chash`: the variable, header or cookie name (or the template) hashed. Default
    /// `remote_addr` with `hash_on: vars`.
    #[serde(default)]
    pub key: Option<String>,
    /// Health checks: `active` probes and `passive` counting of real traffic.
    #[serde(default)]
    pub checks: Option<ChecksConfig>,
    /// Bounds retries to a share of requests, so that an outage does not multiply the load.
    #[serde(default)]
    pub retry_budget: Option<RetryBudgetConfig>,
    /// Most requests to this upstream in flight at once in the process (and connections, for
    /// stream routes); beyond it a request is answered 503 with `Retry-After` at once (load
    /// shedding). Default: no limit.
    #[serde(default)]
    pub max_inflight: Option<u32>,
    /// Nodes: a map `"host:port": weight`, or a list of `{host, port, weight}`. Required
    /// unless `discovery_type` is set.
    #[serde(default)]
    pub nodes: NodesConfig,
    /// `dns`: the nodes are the addresses `service_name` resolves to (A/AAAA records of
    /// `name:port`, or the SRV records of `_service._proto.name`).
    #[serde(default)]
    pub discovery_type: Option<String>,
    /// With `discovery_type: dns`: `host:port`, or an SRV name.
    #[serde(default)]
    pub service_name: Option<String>,
    /// Protocol to the nodes: `http` (HTTP/1.1), `https` (HTTP/1.1 over TLS), `grpc` (HTTP/2
    /// cleartext, for gRPC calls that arrive over HTTP/2) or `grpcs` (the same over TLS).
    /// Default http.
    #[serde(default = "default_scheme")]
    pub scheme: String,
    /// `Host` sent upstream: `pass` (the client's, default), `node` (the node's address),
    /// `rewrite` (`upstream_host`).
    #[serde(default)]
    pub pass_host: PassHost,
    /// Host sent with `pass_host: rewrite`.
    #[serde(default)]
    pub upstream_host: Option<String>,
    /// Connect, send and read timeouts.
    #[serde(default)]
    pub timeout: UpstreamTimeoutConfig,
    /// How many other nodes to try after a connect failure. Default: the number of nodes - 1.
    #[serde(default)]
    pub retries: Option<u32>,
    /// Total time allowed for retries; 0 means no limit. Default 0.
    #[serde(default)]
    pub retry_timeout: Option<Dur>,
    /// Keep-alive connection pool, per worker and node.
    #[serde(default)]
    pub keepalive_pool: KeepalivePoolConfig,
    /// TLS to the nodes, with `scheme: https` or `grpcs`.
    #[serde(default)]
    pub tls: UpstreamTlsConfig,
    /// Speak HTTP/2 to the nodes (prior knowledge over `http`, ALPN `h2` over `https`): each
    /// worker multiplexes its requests over one connection per node. Implied by `grpc` and
    /// `grpcs`. Default false.
    #[serde(default)]
    pub http2: bool,
}

/// TLS settings towards an upstream's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamTlsConfig {
    /// Verify the node's certificate and name. Default true.
    pub verify: bool,
    /// CA certificates (PEM, inline or a file path) to verify against; default: the system's.
    pub ca: Option<String>,
    /// Server name sent (SNI) and verified; default: the node's host (or `upstream_host` with
    /// `pass_host: rewrite`).
    pub sni: Option<String>,
    /// Client certificate chain (PEM, inline or a path), for nodes that require mutual TLS.
    /// APISIX's name, `client_cert`, is accepted too.
    #[serde(alias = "client_cert")]
    pub cert: Option<String>,
    /// The client certificate's private key (PEM, inline or a path); or `client_key`.
    #[serde(alias = "client_key")]
    pub key: Option<String>,
}

impl Default for UpstreamTlsConfig {
    fn default() -> Self {
        Self {
            verify: true,
            ca: None,
            sni: None,
            cert: None,
            key: None,
        }
    }
}

/// `retry_budget`: retries allowed besides the requests themselves.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryBudgetConfig {
    /// Retries allowed per request, from 0 to 1: 0.2 lets retries add at most 20% of load.
    pub ratio: f64,
    /// Retries allowed each second whatever the ratio, so that a quiet upstream can still
    /// retry. Default 10.
    #[serde(default = "default_min_retries")]
    pub min_per_second: u32,
}

fn default_min_retries() -> u32 {
    10
}

/// Health checks of an upstream's nodes (APISIX's `checks`, same fields and defaults).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChecksConfig {
    /// Probes sent to every node at intervals, by one checker per upstream in the process.
    #[serde(default)]
    pub active: Option<ActiveCheckConfig>,
    /// Outcomes of real requests, from every protocol path.
    #[serde(default)]
    pub passive: Option<PassiveCheckConfig>,
}

/// Active health checks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ActiveCheckConfig {
    /// `http`, `https` or `tcp` (a connection is enough). Default http.
    #[serde(rename = "type")]
    pub kind: String,
    /// Longest wait for a probe's answer. Default 1s.
    pub timeout: Dur,
    /// Probes in flight at once, over all nodes. Default 10.
    pub concurrency: u32,
    /// Path requested by http and https probes. Default `/`.
    pub http_path: String,
    /// `Host` of the probes. Default: the node's address.
    pub host: Option<String>,
    /// Port probed instead of the node's own.
    pub port: Option<u16>,
    /// Verify the node's certificate in https probes. Default true.
    pub https_verify_certificate: bool,
    /// Extra request header lines, `"Name: value"`.
    pub req_headers: Vec<String>,
    /// When a node is healthy again.
    pub healthy: ActiveHealthyConfig,
    /// When a node is unhealthy.
    pub unhealthy: ActiveUnhealthyConfig,
}

impl Default for ActiveCheckConfig {
    fn default() -> Self {
        ActiveCheckConfig {
            kind: "http".into(),
            timeout: Dur::secs(1),
            concurrency: 10,
            http_path: "/".into(),
            host: None,
            port: None,
            https_verify_certificate: true,
            req_headers: Vec::new(),
            healthy: ActiveHealthyConfig::default(),
            unhealthy: ActiveUnhealthyConfig::default(),
        }
    }
}

/// `checks.active.healthy`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ActiveHealthyConfig {
    /// Seconds between probes of a healthy node. Default 1.
    pub interval: Dur,
    /// Statuses that count as a success. Default 200, 302.
    pub http_statuses: Vec<u16>,
    /// Successes in a row that bring an unhealthy node back. Default 2.
    pub successes: u32,
}

impl Default for ActiveHealthyConfig {
    fn default() -> Self {
        ActiveHealthyConfig {
            interval: Dur::secs(1),
            http_statuses: vec![200, 302],
            successes: 2,
        }
    }
}

/// `checks.active.unhealthy`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ActiveUnhealthyConfig {
    /// Seconds between probes of an unhealthy node. Default 1.
    pub interval: Dur,
    /// Statuses that count as a failure. Default 429, 404, 500, 501, 502, 503, 504, 505.
    pub http_statuses: Vec<u16>,
    /// Failed answers in a row that take a node out. Default 5.
    pub http_failures: u32,
    /// Connection failures in a row that take a node out. Default 2.
    pub tcp_failures: u32,
    /// Timeouts in a row that take a node out. Default 3.
    pub timeouts: u32,
}

impl Default for ActiveUnhealthyConfig {
    fn default() -> Self {
        ActiveUnhealthyConfig {
            interval: Dur::secs(1),
            http_statuses: vec![429, 404, 500, 501, 502, 503, 504, 505],
            http_failures: 5,
            tcp_failures: 2,
            timeouts: 3,
        }
    }
}

/// Passive health checks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PassiveCheckConfig {
    /// `http`, `https` or `tcp` (statuses are not counted). Default http.
    #[serde(rename = "type")]
    pub kind: String,
    /// When a node counts as healthy again.
    pub healthy: PassiveHealthyConfig,
    /// When a node is unhealthy.
    pub unhealthy: PassiveUnhealthyConfig,
}

impl Default for PassiveCheckConfig {
    fn default() -> Self {
        PassiveCheckConfig {
            kind: "http".into(),
            healthy: PassiveHealthyConfig::default(),
            unhealthy: PassiveUnhealthyConfig::default(),
        }
    }
}

/// `checks.passive.healthy`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PassiveHealthyConfig {
    /// Statuses that count as a success. Default 200-208, 226, 300-308.
    pub http_statuses: Vec<u16>,
    /// Successes in a row that bring a node back. Default 5.
    pub successes: u32,
}

impl Default for PassiveHealthyConfig {
    fn default() -> Self {
        PassiveHealthyConfig {
            http_statuses: vec![
                200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301, 302, 303, 304, 305,
                306, 307, 308,
            ],
            successes: 5,
        }
    }
}

/// `checks.passive.unhealthy`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PassiveUnhealthyConfig {
    /// Statuses that count as a failure. Default 429, 500, 503.
    pub http_statuses: Vec<u16>,
    /// Failed answers in a row that take a node out. Default 5.
    pub http_failures: u32,
    /// Connection failures in a row that take a node out. Default 2.
    pub tcp_failures: u32,
    /// Timeouts in a row that take a node out. Default 7.
    pub timeouts: u32,
}

impl Default for PassiveUnhealthyConfig {
    fn default() -> Self {
        PassiveUnhealthyConfig {
            http_statuses: vec![429, 500, 503],
            http_failures: 5,
            tcp_failures: 2,
            timeouts: 7,
        }
    }
}

fn default_balancer() -> String {
    "roundrobin".into()
}

fn default_scheme() -> String {
    "http".into()
}

/// Which `Host` header goes upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PassHost {
    /// The client's `Host`.
    #[default]
    Pass,
    /// The chosen node's `host:port`.
    Node,
    /// `upstream_host`.
    Rewrite,
}

/// Upstream timeouts, in seconds or with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamTimeoutConfig {
    /// Connecting to a node; then the next node is tried. Default 5s.
    pub connect: Dur,
    /// Longest stall writing the request. Default 60s.
    pub send: Dur,
    /// Longest wait for response bytes (head or body). Default 60s.
    pub read: Dur,
}

impl Default for UpstreamTimeoutConfig {
    fn default() -> Self {
        Self {
            connect: Dur::secs(5),
            send: Dur::secs(60),
            read: Dur::secs(60),
        }
    }
}

/// Keep-alive pool settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct KeepalivePoolConfig {
    /// Idle connections kept per node and worker; 0 disables reuse. Default 320.
    pub size: usize,
    /// An idle connection is closed after this. Default 60s.
    pub idle_timeout: Dur,
    /// A connection is closed after serving this many requests. Default 1000.
    pub requests: u32,
}

impl Default for KeepalivePoolConfig {
    fn default() -> Self {
        Self {
            size: 320,
            idle_timeout: Dur::secs(60),
            requests: 1000,
        }
    }
}

/// How host names of upstream nodes are resolved (top-level `dns`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DnsConfig {
    /// Name servers, `ip` or `ip:port` (default port 53). Default: those of
    /// /etc/resolv.conf, with /etc/hosts.
    pub resolvers: Vec<String>,
    /// Re-resolve after this long whatever the records' TTL says. Default: the TTL.
    pub valid: Option<Dur>,
    /// Longest wait for an answer. Default 2s.
    pub timeout: Dur,
    /// The service registries (top-level `discovery`), given to upstream compilation with
    /// the resolver settings; not a field of `dns`.
    #[serde(skip)]
    #[schemars(skip)]
    pub discovery: DiscoveryConfig,
}

/// APISIX's `discovery`: each service registry's node-wide settings, by the `discovery_type`
/// upstreams name it with; each discovery type checks its own.
pub type DiscoveryConfig = BTreeMap<String, serde_json::Value>;

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            resolvers: Vec::new(),
            valid: None,
            timeout: Dur::secs(2),
            discovery: DiscoveryConfig::default(),
        }
    }
}

/// The nodes of an upstream, in configuration order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodesConfig(pub Vec<NodeConfig>);

impl<'de> Deserialize<'de> for UpstreamConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut u = UpstreamConfig::deserialize(d)?;
        let port = u.default_port();
        for n in &mut u.nodes.0 {
            if n.port == PORT_UNSET {
                n.port = port;
            }
        }
        Ok(u)
    }
}

impl UpstreamConfig {
    /// An upstream without nodes: where a route that only its plugins answer sends what they
    /// let through (answered 503: no upstream).
    pub fn none() -> UpstreamConfig {
        serde_json::from_value(serde_json::json!({"nodes": {}})).expect("an empty upstream parses")
    }

    /// The port of a node that names none: 443 under `https` and `grpcs`, else 80 (as APISIX).
    pub fn default_port(&self) -> u16 {
        match self.scheme.as_str() {
            "https" | "grpcs" => 443,
            _ => 80,
        }
    }
}

/// A node's port while its upstream's scheme is not yet known (0 is refused when written).
pub(super) const PORT_UNSET: u16 = 0;

/// One upstream node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// Host name or IP address.
    pub host: String,
    /// Port. Default 80, or 443 when the upstream's scheme is `https` or `grpcs`.
    pub port: u16,
    /// Weight; 0 keeps the node out of rotation.
    pub weight: u32,
    /// Nodes of a lower priority get traffic only while every node of a higher one is
    /// unhealthy (backup nodes). Default 0.
    pub priority: i32,
}

impl NodeConfig {
    /// `host:port`, with IPv6 addresses in brackets.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Most weight a node may have.
pub const MAX_WEIGHT: u64 = 1_000_000;

pub(super) fn parse_node_key(key: &str) -> Result<(String, u16), String> {
    let err = || format!("invalid node address \"{key}\": expected host:port");
    let (host, port) = if let Some(rest) = key.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(err)?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err(err()),
        }
    } else {
        match key.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return Err(err()),
            None => (key, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(err)?,
        None => PORT_UNSET,
    };
    check_node_host(host).map_err(|_| err())?;
    Ok((host.to_owned(), port))
}

fn check_node_host(host: &str) -> Result<(), ()> {
    let ok = !host.is_empty()
        && (host.parse::<std::net::IpAddr>().is_ok()
            || host.len() <= 253
                && host.split('.').all(|l| {
                    !l.is_empty()
                        && l.bytes()
                            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
                }));
    if ok { Ok(()) } else { Err(()) }
}

fn weight_of<E: de::Error>(v: &serde_json::Value) -> Result<u32, E> {
    match v.as_u64() {
        Some(w) if w <= MAX_WEIGHT => Ok(w as u32),
        _ => Err(E::custom(format!(
            "weight must be a whole number from 0 to {MAX_WEIGHT}, got {}",
            crate::parse::short_number(&v.to_string())
        ))),
    }
}

impl<'de> Deserialize<'de> for NodesConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Item {
            host: String,
            #[serde(default)]
            port: Option<u16>,
            #[serde(default = "default_weight")]
            weight: serde_json::Value,
            #[serde(default)]
            priority: i32,
            #[serde(default)]
            #[allow(dead_code)]
            metadata: serde_json::Value,
        }
        fn default_weight() -> serde_json::Value {
            serde_json::Value::from(1)
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NodesConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of \"host:port\": weight, or a list of {host, port, weight}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NodesConfig, A::Error> {
                // Each node is checked while its value is read, so that an error carries the
                // node's path (`nodes["a b:80"]`) and the other nodes are still checked.
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    out.push(map.next_value_seed(KeyedNode(key))?);
                }
                Ok(NodesConfig(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NodesConfig, A::Error> {
                let mut out = Vec::new();
                while let Some(node) = seq.next_element_seed(ListedNode)? {
                    out.push(node);
                }
                Ok(NodesConfig(out))
            }
        }
        /// `"host:port": weight`: the key is checked with its weight.
        struct KeyedNode(String);
        impl<'de> de::DeserializeSeed<'de> for KeyedNode {
            type Value = NodeConfig;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<NodeConfig, D::Error> {
                let value = serde_json::Value::deserialize(d)?;
                let (host, port) = parse_node_key(&self.0).map_err(de::Error::custom)?;
                let weight = weight_of(&value)?;
                Ok(NodeConfig {
                    host,
                    port,
                    weight,
                    priority: 0,
                })
            }
        }
        /// `{host, port, weight}`.
        struct ListedNode;
        impl<'de> de::DeserializeSeed<'de> for ListedNode {
            type Value = NodeConfig;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<NodeConfig, D::Error> {
                let item = Item::deserialize(d)?;
                check_node_host(&item.host).map_err(|_| {
                    de::Error::custom(format!("invalid node host \"{}\"", item.host))
                })?;
                let port = item.port.unwrap_or(PORT_UNSET);
                if item.port == Some(0) {
                    return Err(de::Error::custom(format!(
                        "invalid port 0 for node \"{}\"",
                        item.host
                    )));
                }
                let weight = weight_of(&item.weight)?;
                Ok(NodeConfig {
                    host: item.host,
                    port,
                    weight,
                    priority: item.priority,
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl schemars::JsonSchema for NodesConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Nodes".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Nodes: a map of \"host:port\" to weight, or a list of {host, port, weight}.",
            "oneOf": [
                {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
                {"type": "array", "items": {
                    "type": "object",
                    "required": ["host"],
                    "properties": {
                        "host": {"type": "string"},
                        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                        "weight": {"type": "integer", "minimum": 0},
                        "priority": {"type": "integer"}
                    }
                }}
            ]
        })
    }
}
