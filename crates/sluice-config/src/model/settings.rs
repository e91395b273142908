//! Node settings: listeners, timeouts, limits, logs, status, metrics, the admin API, etcd.

use std::fmt;
use std::net::SocketAddr;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::upstreams::UpstreamTlsConfig;
use crate::de::{Dur, Size};

/// One listen address: `127.0.0.1:9080`, a bare port (`9080`, all interfaces), or
/// `{addr: 127.0.0.1:9443, tls: true, http2: true}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenConfig {
    /// Address and port.
    pub addr: SocketAddr,
    /// Terminate TLS on this address, with the certificates of `ssls`.
    pub tls: bool,
    /// Accept HTTP/2 on this address: negotiated by ALPN with `tls`, else cleartext with prior
    /// knowledge (h2c), beside HTTP/1.1.
    pub http2: bool,
    /// Every connection starts with a PROXY protocol header (v1 or v2, HAProxy's), sent by a
    /// load balancer in front: its source address is the client's. A connection without
    /// one is closed.
    pub proxy_protocol: bool,
}

impl ListenConfig {
    /// A plain HTTP/1.1 listener.
    pub fn plain(addr: SocketAddr) -> Self {
        Self {
            addr,
            tls: false,
            http2: false,
            proxy_protocol: false,
        }
    }
}

pub(crate) fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    s.parse().map_err(|_| {
        format!("invalid listen address \"{s}\": expected IP:port like 127.0.0.1:9080, or a port")
    })
}

impl<'de> Deserialize<'de> for ListenConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            /// `127.0.0.1:9443`, or a port (APISIX's `stream_proxy` writes `addr: 9100`).
            addr: serde_json::Value,
            #[serde(default)]
            tls: bool,
            #[serde(default)]
            http2: bool,
            #[serde(default)]
            proxy_protocol: bool,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ListenConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "an address like 127.0.0.1:9080, a port, or {addr, tls, http2, proxy_protocol}",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ListenConfig, E> {
                parse_listen_addr(v)
                    .map(ListenConfig::plain)
                    .map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ListenConfig, E> {
                u16::try_from(v)
                    .map(|p| ListenConfig::plain(SocketAddr::from(([0, 0, 0, 0], p))))
                    .map_err(|_| E::custom(format!("invalid port {v}")))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ListenConfig, A::Error> {
                let full = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let addr = match &full.addr {
                    serde_json::Value::String(s) => parse_listen_addr(s),
                    serde_json::Value::Number(n) => parse_listen_addr(&n.to_string()),
                    other => Err(format!("invalid listen address {other}")),
                }
                .map_err(de::Error::custom)?;
                Ok(ListenConfig {
                    addr,
                    tls: full.tls,
                    http2: full.http2,
                    proxy_protocol: full.proxy_protocol,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Client-side timeouts. Durations are seconds (`10`) or strings with a unit (`"500ms"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutsConfig {
    /// The whole request head must arrive within this time once its first byte has (slowloris
    /// defence); then 408 and close. Default 15s.
    pub client_header: Dur,
    /// Longest pause between two reads of a request body. Default 60s.
    pub client_body: Dur,
    /// Longest stall writing to the client. Default 60s.
    pub client_send: Dur,
    /// An idle keep-alive connection is closed after this. Default 60s.
    pub keepalive: Dur,
    /// On SIGTERM/SIGINT, in-flight requests get this long to finish. Default 10s.
    pub drain: Dur,
}

impl Default for TimeoutsConfig {
    fn default() -> Self {
        Self {
            client_header: Dur::secs(15),
            client_body: Dur::secs(60),
            client_send: Dur::secs(60),
            keepalive: Dur::secs(60),
            drain: Dur::secs(10),
        }
    }
}

/// Request size and connection limits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Longest request line (method, target, version); longer gets 414. Default 8KiB.
    pub max_request_line: Size,
    /// Largest request head (request line and headers); larger gets 431. Default 32KiB.
    pub max_header_size: Size,
    /// Most request header fields; more gets 431. Default 100, at most 256.
    pub max_headers: usize,
    /// Largest request body; larger gets 413. Default 8MiB.
    pub max_body_size: Size,
    /// Largest upstream response head; larger gets 502. Default 64KiB.
    pub max_response_header_size: Size,
    /// Largest request body read for conditions on it (`post_arg_*`, `post_arg.<path>`,
    /// `graphql_*`, APISIX's `max_post_args_readable_size` and `graphql.max_size`): a larger
    /// body is still proxied, but those variables have no value for it. The body is held in
    /// memory while it is read. Default 1MiB; more than `max_body_size` is taken as it.
    pub max_body_vars_size: Size,
    /// Open client connections per worker; beyond it, new connections wait in the kernel
    /// backlog. Default 10000.
    pub max_connections: usize,
    /// Requests served on one client connection before it is closed. Default 1000.
    pub keepalive_requests: u32,
    /// HTTP/2: streams a client may have open at once on one connection; more are refused.
    /// Default 128.
    pub http2_max_streams: u32,
    /// HTTP/2: PING frames a client may send per second on one connection before it is closed
    /// with GOAWAY. Default 50.
    pub http2_pings_per_second: u32,
    /// HTTP/2: SETTINGS frames per second, likewise. Default 20.
    pub http2_settings_per_second: u32,
    /// HTTP/2: RST_STREAM frames per second, likewise. Default 200.
    pub http2_resets_per_second: u32,
}

pub use sluice_core::http::request::MAX_HEADERS_CEILING;

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_request_line: Size(8 << 10),
            max_header_size: Size(32 << 10),
            max_headers: 100,
            max_body_size: Size(8 << 20),
            max_response_header_size: Size(64 << 10),
            max_body_vars_size: Size(1 << 20),
            max_connections: 10_000,
            keepalive_requests: 1000,
            http2_max_streams: 128,
            http2_pings_per_second: 50,
            http2_settings_per_second: 20,
            http2_resets_per_second: 200,
        }
    }
}

/// Logs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Error log level: error, warn, info, debug or trace (`RUST_LOG` overrides). Default info.
    pub level: String,
    /// Error log line format: `text` (the default) or `json` (one object per line).
    pub format: LogFormat,
    /// Access log; off unless set.
    pub access: Option<AccessLogConfig>,
    /// Repeated request failures of one kind on one route and node (a node that is down):
    /// the first is logged, then one line per this interval with how many followed. `0` logs
    /// every one. Default 10s.
    pub failure_summary: Dur,
}

/// [`LogConfig::failure_summary`]'s default.
pub const DEFAULT_FAILURE_SUMMARY: Dur = Dur::secs(10);

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Text,
            access: None,
            failure_summary: DEFAULT_FAILURE_SUMMARY,
        }
    }
}

/// How error log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable text.
    Text,
    /// One JSON object per line.
    Json,
}

/// Access log: one line per request, buffered per worker.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLogConfig {
    /// File to append to; `stdout` (or `/dev/stdout`) for containers.
    pub path: String,
    /// Line format: `default`, `combined` (NGINX's), `json` (one object per line with the
    /// fields of `fields`), or a template of NGINX-style variables
    /// (`'$remote_addr "$request" $status $body_bytes_sent'`). Default `default`.
    #[serde(default = "default_access_format")]
    pub format: String,
    /// With `format: json`: the variables written, by name without `$` (default: the common
    /// set, see docs/observability.md).
    #[serde(default)]
    pub fields: Vec<String>,
    /// Per-worker buffer; written out when full. Default 64KiB.
    #[serde(default = "default_access_buffer")]
    pub buffer: Size,
    /// A partly filled buffer is written out after this. Default 1s.
    #[serde(default = "default_access_flush")]
    pub flush: Dur,
}

fn default_access_format() -> String {
    "default".into()
}

/// The status listener: metrics, health and readiness, the dashboard. Loopback addresses are
/// open; any other needs a `key` or an `allow` list (as the admin API needs a key).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusConfig {
    /// Address it listens on (APISIX serves its metrics on 127.0.0.1:9091).
    #[serde(deserialize_with = "de_socket_addr")]
    pub listen: SocketAddr,
    /// Key asked of callers, as `Authorization: Bearer <key>` or `X-API-KEY`; at least 16
    /// characters. `/healthz` and `/readyz` do not ask for it.
    #[serde(default)]
    pub key: Option<String>,
    /// Client addresses or CIDR ranges let in without the key (others get 403 when no key is
    /// set).
    #[serde(default)]
    pub allow: Vec<String>,
}

/// Node-level plugin settings (APISIX's `plugin_attr`), by plugin name; each plugin checks
/// its own entry.
pub type PluginAttrConfig = sluice_core::plugin::PluginAttr;

/// Request metrics.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Count requests, connections and the rest. Default true.
    pub enabled: bool,
    /// Most distinct values of one label (route, upstream, stream route): the values seen
    /// after these are counted under `other`, and `sluice_metrics_label_overflow_total` says
    /// how many were folded. Default 1000.
    pub max_label_values: u32,
    /// Which routes get their own `route` label: `all` (the default), or `plugin`: only
    /// routes with APISIX's `prometheus` plugin (on the route, its service or a global rule),
    /// the others counted under `other`.
    pub routes: MetricsRoutes,
}

/// Which routes `metrics` labels by route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsRoutes {
    /// Every route.
    All,
    /// Routes with the `prometheus` plugin.
    Plugin,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            max_label_values: 1000,
            routes: MetricsRoutes::All,
        }
    }
}

fn default_access_buffer() -> Size {
    Size(64 << 10)
}

fn default_access_flush() -> Dur {
    Dur::secs(1)
}

/// NGINX's realip module for every request (`real_ip_header`, `set_real_ip_from`,
/// `real_ip_recursive`); APISIX's `real-ip` plugin does the same per route.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RealIpConfig {
    /// The header field holding the address (`X-Forwarded-For`: a list). Default `X-Real-IP`.
    #[serde(default = "default_real_ip_header")]
    pub header: String,
    /// The proxies believed: addresses and CIDR ranges. Required.
    pub from: Vec<String>,
    /// `X-Forwarded-For`: the last address that is not in `from`, rather than the last one.
    #[serde(default)]
    pub recursive: bool,
}

fn default_real_ip_header() -> String {
    "X-Real-IP".into()
}

/// The admin REST API: on its own listener, never on the proxy's.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Run the admin API. Default true.
    pub enabled: bool,
    /// Address it listens on. Default 127.0.0.1:9180. A non-loopback address needs a `key`.
    #[serde(deserialize_with = "de_socket_addr")]
    pub listen: SocketAddr,
    /// API key, sent by clients in `X-API-KEY`; at least 16 characters. When absent, one is
    /// generated at start and printed once.
    pub key: Option<String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 9180)),
            key: None,
        }
    }
}

/// Cluster mode: resources are stored in etcd, as JSON under `prefix`, and every node watches
/// them. The file then holds node settings only.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdConfig {
    /// etcd client URLs, tried in order (`http://127.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// Key prefix; resources are at `<prefix>/<kind>/<id>`. Default `/sluice`.
    #[serde(default = "default_etcd_prefix")]
    pub prefix: String,
    /// Timeout of each call to etcd. Default 5s.
    #[serde(default = "default_etcd_timeout")]
    pub timeout: Dur,
    /// Where the last configuration read from etcd is kept, to start from when etcd is
    /// unreachable. Default: the configuration file's path with `.etcd-cache` appended.
    #[serde(default)]
    pub cache: Option<String>,
    /// APISIX's `data_encryption`: the keys of the fields APISIX encrypts in etcd.
    #[serde(default)]
    pub data_encryption: Option<DataEncryptionConfig>,
    /// etcd's authentication: a user (with `password`); Sluice asks etcd for a token and
    /// renews it when etcd says it expired.
    #[serde(default)]
    pub user: Option<String>,
    /// The user's password (a `$env://` reference keeps it out of the file).
    #[serde(default)]
    pub password: Option<String>,
    /// TLS to `https://` endpoints.
    #[serde(default)]
    pub tls: Option<EtcdTlsConfig>,
    /// How long the node may serve a configuration it cannot check against etcd (etcd
    /// unreachable) before `/readyz` answers 503. Default: never; the node keeps serving and
    /// `/readyz` says "stale" with a 200, so that an etcd outage does not take every node out
    /// of its load balancer at once.
    #[serde(default)]
    pub stale_unready_after: Option<Dur>,
}

/// TLS towards etcd (`https://` endpoints): the same settings as an upstream's `tls` (CA,
/// client certificate and key for `--client-cert-auth`, `verify`, `sni`).
pub type EtcdTlsConfig = UpstreamTlsConfig;

/// APISIX's `apisix.data_encryption` (its config.yaml): the keyring its encrypted fields
/// (key-auth keys, basic-auth passwords, JWT secrets, Redis passwords, ssl private keys) are
/// read with. Default: APISIX's default keyring.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DataEncryptionConfig {
    /// Keys of 16 characters (AES-128) or 32 (AES-256), tried in order; `[]`: nothing is
    /// decrypted.
    pub keyring: Vec<String>,
    /// APISIX's switch for encrypting on write; accepted (Sluice decrypts whatever the
    /// keyring opens).
    #[serde(default)]
    pub enable_encrypt_fields: Option<bool>,
}

/// APISIX's default keyring (`conf/config.yaml.example`), used when none is configured.
pub const DEFAULT_KEYRING: [&str; 2] = ["qeddd145sfvddff3", "edd1c9f0985e76a2"];

impl EtcdConfig {
    /// The data_encryption keys as bytes (APISIX's default keyring when not given).
    pub fn keyring(&self) -> Vec<Vec<u8>> {
        match &self.data_encryption {
            Some(d) => d.keyring.iter().map(|k| k.as_bytes().to_vec()).collect(),
            None => DEFAULT_KEYRING
                .iter()
                .map(|k| k.as_bytes().to_vec())
                .collect(),
        }
    }
}

fn default_etcd_prefix() -> String {
    "/sluice".into()
}

fn default_etcd_timeout() -> Dur {
    Dur::secs(5)
}

/// The built-in demo origin (`GET /hello`, `/bytes/N`, `/status/CODE`, `/delay/MS`, `/echo`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginConfig {
    /// Address it listens on.
    #[serde(deserialize_with = "de_socket_addr")]
    pub listen: SocketAddr,
}

fn de_socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(|_| {
        de::Error::custom(format!(
            "invalid address \"{s}\": expected IP:port like 127.0.0.1:1980"
        ))
    })
}
