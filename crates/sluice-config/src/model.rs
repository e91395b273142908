//! The configuration model: node settings and APISIX-shaped resources. Field doc comments are
//! the user reference (docs/config.md follows them). Every struct rejects unknown fields.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::de::{Dur, Id, Size, Workers};

/// A whole configuration: node settings plus resources.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Addresses the proxy listens on. Default `0.0.0.0:9080`.
    pub listen: Vec<ListenConfig>,
    /// Worker threads: `auto` (one per core, the default) or a number.
    pub workers: Workers,
    /// Client-side timeouts.
    pub timeouts: TimeoutsConfig,
    /// Request size and connection limits.
    pub limits: LimitsConfig,
    /// Error and access logs.
    pub log: LogConfig,
    /// The built-in demo origin, started in this process when set.
    pub origin: Option<OriginConfig>,
    /// The admin API.
    pub admin: AdminConfig,
    /// The status listener: `/metrics`, `/healthz`, `/readyz` and the dashboard. Off unless set.
    pub status: Option<StatusConfig>,
    /// Request metrics, counted per worker and summed when scraped.
    pub metrics: MetricsConfig,
    /// Node-level settings of plugins (APISIX's `plugin_attr`): the OpenTelemetry collector.
    pub plugin_attr: PluginAttrConfig,
    /// etcd as the source of truth for resources (cluster mode); None: the file is.
    pub etcd: Option<EtcdConfig>,
    /// How upstream host names are resolved.
    pub dns: DnsConfig,
    /// APISIX's `discovery`: service registries upstreams name with `discovery_type`.
    pub discovery: DiscoveryConfig,
    /// Routes, in configuration order.
    pub routes: Vec<RouteConfig>,
    /// Named upstreams that routes refer to with `upstream_id`.
    pub upstreams: Vec<UpstreamConfig>,
    /// Services: an upstream and plugins shared by several routes.
    pub services: Vec<ServiceConfig>,
    /// Plugins run on every request.
    pub global_rules: Vec<GlobalRuleConfig>,
    /// Identities with credentials, recognised by auth plugins.
    pub consumers: Vec<ConsumerConfig>,
    /// Plugins that consumers share through their `group_id` (APISIX's consumer groups).
    pub consumer_groups: Vec<ConsumerGroupConfig>,
    /// Plugins that routes share through their `plugin_config_id` (APISIX's plugin configs).
    pub plugin_configs: Vec<PluginConfigConfig>,
    /// TLS certificates, chosen by the name the client asks for (SNI).
    pub ssls: Vec<SslConfig>,
    /// L4 routes: TCP or UDP by listen address, or TLS by SNI.
    pub stream_routes: Vec<StreamRouteConfig>,
    /// APISIX's `stream_proxy`: addresses opened for stream routes that do not name their own.
    pub stream_proxy: StreamProxyConfig,
    /// APISIX's `plugin_metadata`: node-wide settings of a plugin, one item per plugin (its
    /// `id` is the plugin's name).
    pub plugin_metadata: Vec<PluginMetadataConfig>,
    /// APISIX's `secrets`: secret managers that `$secret://` references read from.
    pub secrets: Vec<SecretConfig>,
}

/// APISIX's `secrets`: a secret manager (HashiCorp Vault's KV engine, AWS Secrets Manager or
/// GCP Secret Manager) that `$secret://<manager>/<id>/<name>/<key>` references in plugin
/// settings read from, when the configuration loads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretConfig {
    /// `<manager>/<id>`: `vault/1`, `aws/prod`, `gcp/main`.
    #[serde(default)]
    pub id: Option<String>,
    /// Vault: its address, `http(s)://host:port`.
    #[serde(default)]
    pub uri: Option<String>,
    /// Vault: the KV engine's path the secret names are under (`kv/apisix`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Vault: the token (`$env://` references work).
    #[serde(default)]
    pub token: Option<String>,
    /// Vault Enterprise: the namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// AWS: the access key.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// AWS: the secret key.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// AWS: a temporary credential's session token.
    #[serde(default)]
    pub session_token: Option<String>,
    /// AWS: the region. Default `us-east-1`.
    #[serde(default)]
    pub region: Option<String>,
    /// AWS: the endpoint. Default `https://secretsmanager.<region>.amazonaws.com`.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// GCP: the service account.
    #[serde(default)]
    pub auth_config: Option<GcpAuthConfig>,
    /// GCP: a file holding the service account's JSON key, instead of `auth_config`.
    #[serde(default)]
    pub auth_file: Option<String>,
    /// GCP: check the servers' certificates. Default true.
    #[serde(default)]
    pub ssl_verify: Option<bool>,
    /// Free text.
    #[serde(default)]
    pub desc: Option<String>,
}

/// A GCP service account, as APISIX's `auth_config`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GcpAuthConfig {
    /// The account's address.
    pub client_email: String,
    /// Its private key (PEM); read when a secret is fetched.
    pub private_key: String,
    /// The project the secrets are in.
    pub project_id: String,
    /// Where tokens come from. Default `https://oauth2.googleapis.com/token`.
    #[serde(default)]
    pub token_uri: Option<String>,
    /// The Secret Manager API. Default `https://secretmanager.googleapis.com/v1`.
    #[serde(default)]
    pub entries_uri: Option<String>,
    /// The token's scopes. Default `https://www.googleapis.com/auth/cloud-platform`.
    #[serde(default)]
    pub scope: Option<Vec<String>>,
}

/// Default proxy listen address, as APISIX's.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:9080";

// === Node settings ===

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
}

impl ListenConfig {
    /// A plain HTTP/1.1 listener.
    pub fn plain(addr: SocketAddr) -> Self {
        Self {
            addr,
            tls: false,
            http2: false,
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
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ListenConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address like 127.0.0.1:9080, a port, or {addr, tls, http2}")
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

// === Routes ===

/// A route: which requests (uri, host, method) go to which upstream.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Identifier, unique among routes. Generated from the position when absent.
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
    /// Path pattern: `/hello` (exact), `/api/*` (prefix), `/users/:id` (parameter).
    #[serde(default)]
    pub uri: Option<String>,
    /// Several path patterns; use either `uri` or `uris`.
    #[serde(default)]
    pub uris: Option<Vec<String>>,
    /// Host to match: `api.example.com` or `*.example.com`.
    #[serde(default)]
    pub host: Option<String>,
    /// Several hosts; use either `host` or `hosts`. No host means any host.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// Methods to match (`GET`, `POST`, ...). No list means any method.
    #[serde(default)]
    pub methods: Option<Vec<String>>,
    /// Higher wins among routes that match the same request. Default 0.
    #[serde(default)]
    pub priority: i32,
    /// An inline upstream.
    #[serde(default)]
    pub upstream: Option<Box<UpstreamConfig>>,
    /// The id of an upstream in `upstreams`.
    #[serde(default)]
    pub upstream_id: Option<Id>,
    /// The id of a service in `services`: its upstream (when the route has none) and its
    /// plugins (the route's configuration of a plugin wins).
    #[serde(default)]
    pub service_id: Option<Id>,
    /// The id of a plugin config in `plugin_configs`: its plugins, where the route has no
    /// configuration of the same plugin (as APISIX).
    #[serde(default)]
    pub plugin_config_id: Option<Id>,
    /// Plugins by name.
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
    /// 1 serves the route, 0 disables it. Default 1.
    #[serde(default = "default_status")]
    pub status: u8,
    /// Proxy `Upgrade: websocket` requests on this route. Unset: the service's setting, else
    /// false (as APISIX).
    #[serde(default)]
    pub enable_websocket: Option<bool>,
    /// Upstream timeouts for this route, overriding the upstream's.
    #[serde(default)]
    pub timeout: Option<UpstreamTimeoutConfig>,
    /// APISIX's `vars`: a lua-resty-expr expression over request variables
    /// (`[["http_x_canary", "==", "1"], ["arg_v", "~~", "^2"]]`, `["OR", [...], [...]]`);
    /// the route matches only requests for which it holds.
    #[serde(default)]
    #[schemars(with = "Option<Vec<serde_json::Value>>")]
    pub vars: Option<serde_json::Value>,
    /// Only requests from this client address or CIDR range match the route.
    #[serde(default)]
    pub remote_addr: Option<String>,
    /// Only requests from one of these client addresses or CIDR ranges match the route.
    #[serde(default)]
    pub remote_addrs: Option<Vec<String>>,
    /// Most requests of this route in flight at once in the process; beyond it a request is
    /// answered 503 with `Retry-After` at once (load shedding). Default: no limit.
    #[serde(default)]
    pub max_inflight: Option<u32>,
    /// APISIX's `filter_func` and `script` (Lua): refused with why (see validation).
    #[serde(default)]
    #[schemars(skip)]
    pub filter_func: Option<serde_json::Value>,
    /// See `filter_func`.
    #[serde(default)]
    #[schemars(skip)]
    pub script: Option<serde_json::Value>,
    /// The parsed `uri`/`uris`, `hosts` and `methods`, filled in by validation.
    #[serde(skip)]
    #[schemars(skip)]
    pub matcher: RouteMatch,
}

/// A route's match conditions, parsed once at load time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteMatch {
    /// Path patterns.
    pub paths: Vec<sluice_router::PathPattern>,
    /// Host patterns; empty means any host.
    pub hosts: Vec<sluice_router::HostPattern>,
    /// Methods.
    pub methods: sluice_router::MethodSet,
    /// Client ranges of `remote_addr`/`remote_addrs`; empty means any client.
    pub remotes: Vec<ipnet::IpNet>,
}

fn default_status() -> u8 {
    1
}

impl Config {
    /// Drops the resource lists, keeping the node settings: what a running node needs to keep
    /// of the configuration it started with once the data plane compiled the resources and the
    /// control plane holds them (100,000 routes took 130 MB here).
    pub fn drop_resources(&mut self) {
        self.routes = Vec::new();
        self.upstreams = Vec::new();
        self.services = Vec::new();
        self.global_rules = Vec::new();
        self.consumers = Vec::new();
        self.ssls = Vec::new();
        self.stream_routes = Vec::new();
    }
}

impl RouteConfig {
    /// The route's id (set for every route once loaded).
    pub fn id(&self) -> &str {
        self.id.as_ref().map_or("", |i| i.0.as_str())
    }

    /// The path patterns, whichever of `uri` and `uris` is used.
    pub fn uri_list(&self) -> Vec<&str> {
        match (&self.uri, &self.uris) {
            (Some(u), _) => vec![u.as_str()],
            (None, Some(us)) => us.iter().map(String::as_str).collect(),
            (None, None) => Vec::new(),
        }
    }

    /// The host patterns, whichever of `host` and `hosts` is used.
    pub fn host_list(&self) -> Vec<&str> {
        match (&self.host, &self.hosts) {
            (Some(h), _) => vec![h.as_str()],
            (None, Some(hs)) => hs.iter().map(String::as_str).collect(),
            (None, None) => Vec::new(),
        }
    }
}

/// One change to the routes of a configuration in service, applied without recompiling the
/// rest of it.
#[derive(Debug, Clone)]
pub enum RouteChange {
    /// Add or replace the route with this id.
    Put {
        /// Its position in the configuration, for error paths (`routes[index]...`).
        index: usize,
        /// The route, validated (see [`crate::load_route_with`]).
        route: Box<RouteConfig>,
    },
    /// Remove the route with this id.
    Delete(String),
}

// === Services, global rules, consumers ===

/// A service: an upstream and plugins that several routes share.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Identifier, unique among services.
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
    /// An inline upstream.
    #[serde(default)]
    pub upstream: Option<Box<UpstreamConfig>>,
    /// The id of an upstream in `upstreams`.
    #[serde(default)]
    pub upstream_id: Option<Id>,
    /// Plugins by name.
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
    /// Hosts the service's routes match when they name none themselves (APISIX's service
    /// `hosts`): `api.example.com` or `*.example.com`.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// Proxy `Upgrade: websocket` for this service's routes that do not say. Default false.
    #[serde(default)]
    pub enable_websocket: Option<bool>,
}

/// A global rule: plugins that run on every request, matched or not.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobalRuleConfig {
    /// Identifier, unique among global rules.
    #[serde(default)]
    pub id: Option<Id>,
    /// Plugins by name.
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
}

/// A consumer: an identity that auth plugins recognise by its credentials (the auth plugins'
/// entries in `plugins`), and plugins that run for its requests (the other entries).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumerConfig {
    /// Unique name: letters, digits, `-` and `_`.
    #[serde(default)]
    pub username: String,
    /// APISIX's consumer `id`: informational, consumers are named by `username`.
    #[serde(default)]
    pub id: Option<Id>,
    /// Free-form description.
    #[serde(default)]
    pub desc: Option<String>,
    /// Free-form labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Credentials (auth plugins) and plugins (the others), by name.
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
    /// The id of a consumer group in `consumer_groups`: its plugins run for this consumer's
    /// requests, where the consumer has no configuration of the same plugin (as APISIX).
    #[serde(default)]
    pub group_id: Option<Id>,
    /// More credentials, each with its own id (APISIX 3's
    /// `consumers/<username>/credentials/<id>`): auth plugins only.
    #[serde(default)]
    pub credentials: Vec<CredentialConfig>,
}

/// One credential of a consumer (APISIX 3's `consumers/<username>/credentials/<id>`): auth
/// plugins by name, with the key, password or JWT secret each holds, beside those in the
/// consumer's `plugins`.
pub type CredentialConfig = PluginSetConfig;

/// Plugins shared by several resources: a consumer group (by consumers' `group_id`) or a
/// plugin config (by routes' `plugin_config_id`), as APISIX's.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginSetConfig {
    /// Identifier, unique in its list.
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
    /// Plugins by name (in a consumer group, not auth plugins: credentials belong on
    /// consumers).
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
}

/// APISIX's `plugin_metadata`: settings every instance of a plugin shares (`cors`'s named
/// origin lists, `limit-count`'s header names, `opentelemetry`'s collector, `prometheus`'s
/// disabled labels). The plugin checks its own fields.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
pub struct PluginMetadataConfig {
    /// The plugin's name.
    #[serde(default)]
    pub id: Option<Id>,
    /// The plugin's fields.
    #[serde(flatten)]
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl PluginMetadataConfig {
    /// The fields of `plugin`'s metadata in `list`, if it has some.
    pub fn of<'a>(
        list: &'a [PluginMetadataConfig],
        plugin: &str,
    ) -> Option<&'a serde_json::Map<String, serde_json::Value>> {
        list.iter()
            .find(|m| m.id.as_ref().is_some_and(|i| i.0 == plugin))
            .map(|m| &m.fields)
    }
}

/// A consumer group: plugins its consumers share.
pub type ConsumerGroupConfig = PluginSetConfig;

/// A plugin config: plugins routes share.
pub type PluginConfigConfig = PluginSetConfig;

// === TLS and L4 ===

/// Addresses opened at start for stream routes (APISIX's `stream_proxy` of its config.yaml):
/// a stream route without `listen` or `server_port` takes the connections of every address of
/// its protocol; one with `server_port` those of the addresses with that port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamProxyConfig {
    /// TCP addresses: `9100`, `127.0.0.1:9101`, or `{addr: 9100}`.
    #[serde(default)]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub tcp: Vec<ListenConfig>,
    /// UDP addresses, written as `tcp`.
    #[serde(default)]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub udp: Vec<ListenConfig>,
}

/// A certificate with its private key, served to clients that ask for one of `snis`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SslConfig {
    /// Identifier, unique among ssls.
    #[serde(default)]
    pub id: Option<Id>,
    /// Free-form description.
    #[serde(default)]
    pub desc: Option<String>,
    /// Free-form labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Server names: `api.example.com` or `*.example.com` (one label). Also written `sni`.
    #[serde(default, alias = "sni")]
    #[schemars(with = "Vec<String>")]
    pub snis: crate::de::OneOrMany<String>,
    /// Certificate chain, PEM: inline (`-----BEGIN CERTIFICATE-----...`) or a file path
    /// (relative paths from the working directory).
    pub cert: String,
    /// Private key (PKCS#8, PKCS#1 or SEC1), PEM: inline or a file path.
    pub key: String,
    /// Serve this certificate to clients whose SNI matches no other (or who send none).
    /// At most one ssl may say so.
    #[serde(default)]
    pub default: bool,
    /// Verify client certificates (mutual TLS) on connections that use this certificate.
    #[serde(default)]
    pub client: Option<SslClientConfig>,
    /// APISIX's `status`: 1 serves the certificate (default), 0 keeps it without serving it.
    #[serde(default)]
    pub status: Option<u8>,
    /// APISIX's `type`: `server` (the default: served to clients). `client` certificates
    /// (presented to upstreams) are given in the upstream's `tls.client_cert` here.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// APISIX's `ssl_protocols`: the TLS versions offered with this certificate, `TLSv1.2`
    /// and/or `TLSv1.3` (both when absent). Older versions are refused: rustls does not
    /// speak them.
    #[serde(default)]
    pub ssl_protocols: Option<Vec<String>>,
}

impl SslConfig {
    /// Whether the certificate is served (`status` is not 0).
    pub fn served(&self) -> bool {
        self.status != Some(0)
    }

    /// The ssl's id (set for every ssl once loaded).
    pub fn id(&self) -> &str {
        self.id.as_ref().map_or("", |i| i.0.as_str())
    }
}

/// Client certificate verification.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SslClientConfig {
    /// CA certificates (PEM, inline or a file path) that client certificates must chain to.
    pub ca: String,
    /// Let clients without a certificate in (plugins and logs see no subject). Default false:
    /// a certificate is required.
    #[serde(default)]
    pub optional: bool,
    /// APISIX's `depth` (OpenSSL's verify depth): how far from the client's certificate its
    /// CA may be; 1 is signed by a CA in `ca` directly, 2 allows one intermediate, and so on
    /// (1 to 100). Absent: any length. APISIX defaults to 1.
    #[serde(default)]
    pub depth: Option<u64>,
    /// APISIX's `skip_mtls_uri_regex`: paths (regexes over the decoded, normalized path) that
    /// need no client certificate; every other path of a connection without one gets 400.
    /// The handshake then lets clients without a certificate in.
    #[serde(default)]
    pub skip_mtls_uri_regex: Option<Vec<String>>,
}

/// Transport of a stream route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StreamProtocol {
    /// TCP connections, copied both ways.
    #[default]
    Tcp,
    /// UDP datagrams, relayed per client address.
    Udp,
}

/// An L4 route: connections (or datagrams) arriving on `listen` go to the upstream, copied as
/// they are. With `sni`, the route takes only TLS connections asking for that name, read from
/// the ClientHello without terminating TLS (passthrough); with `tls: true`, Sluice terminates
/// TLS with the certificates of `ssls` and forwards the plaintext.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamRouteConfig {
    /// Identifier, unique among stream routes. Generated from the position when absent.
    #[serde(default)]
    pub id: Option<Id>,
    /// Free-form description.
    #[serde(default)]
    pub desc: Option<String>,
    /// Free-form labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Address and port to listen on (`127.0.0.1:9100`, or a port for all interfaces).
    /// Or, as APISIX writes it, `server_port` (with `server_addr`).
    #[serde(default)]
    pub listen: Option<String>,
    /// APISIX's way to say where: the port connections arrive on. Sluice listens on
    /// `server_addr:server_port` for the route (APISIX's `stream_proxy` ports are the
    /// node's). Use either `listen` or `server_port`.
    #[serde(default)]
    pub server_port: Option<u16>,
    /// With `server_port`: the local address connections arrive on. Default `0.0.0.0`.
    #[serde(default)]
    pub server_addr: Option<String>,
    /// Only connections from this client address or CIDR range take the route (APISIX's
    /// `remote_addr`); routes on one address may differ by it.
    #[serde(default)]
    pub remote_addr: Option<String>,
    /// `tcp` (default) or `udp`.
    #[serde(default)]
    pub protocol: StreamProtocol,
    /// Server name to route TLS connections by (`db.example.com` or `*.example.com`),
    /// without terminating TLS. Several routes may share a listen address with different
    /// names; one of them may have no `sni` and take the rest.
    #[serde(default)]
    pub sni: Option<String>,
    /// Terminate TLS with the certificates of `ssls`; the upstream receives plaintext.
    #[serde(default)]
    pub tls: bool,
    /// An inline upstream.
    #[serde(default)]
    pub upstream: Option<Box<UpstreamConfig>>,
    /// The id of an upstream in `upstreams`.
    #[serde(default)]
    pub upstream_id: Option<Id>,
    /// The id of a service in `services` whose upstream the route uses when it has none.
    #[serde(default)]
    pub service_id: Option<Id>,
    /// Plugins by name: `ip-restriction` and `limit-conn` work on stream routes.
    #[serde(default)]
    pub plugins: serde_json::Map<String, serde_json::Value>,
    /// A connection (or UDP session) with no bytes either way for this long is closed.
    /// Default 10m (NGINX's `proxy_timeout`); UDP sessions default to 30s.
    #[serde(default)]
    pub idle_timeout: Option<Dur>,
    /// Move bytes with splice(2), inside the kernel, instead of copying them through Sluice
    /// (TCP without `tls`). Costs less CPU for mid-sized transfers, more for small messages
    /// (see docs/benchmarks.md). Default false.
    #[serde(default)]
    pub splice: bool,
    /// Where the route takes connections: the parsed `listen`, `server_addr:server_port`, or
    /// the `stream_proxy` addresses it applies to. Filled in by validation.
    #[serde(skip)]
    #[schemars(skip)]
    pub addrs: Vec<SocketAddr>,
    /// The parsed `remote_addr`, filled in by validation.
    #[serde(skip)]
    #[schemars(skip)]
    pub remote: Option<ipnet::IpNet>,
}

impl StreamRouteConfig {
    /// The stream route's id (set for every stream route once loaded).
    pub fn id(&self) -> &str {
        self.id.as_ref().map_or("", |i| i.0.as_str())
    }
}

// === Upstreams ===

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
const PORT_UNSET: u16 = 0;

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

fn parse_node_key(key: &str) -> Result<(String, u16), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_without_a_port_takes_its_schemes_default() {
        // APISIX: 443 under https (and grpcs), 80 otherwise; a written port always wins.
        let ports = |doc: &str| -> Vec<u16> {
            let u: UpstreamConfig = serde_json::from_str(doc).unwrap();
            u.nodes.0.iter().map(|n| n.port).collect()
        };
        for (scheme, port) in [("http", 80), ("https", 443), ("grpc", 80), ("grpcs", 443)] {
            assert_eq!(
                ports(&format!(
                    r#"{{"scheme": "{scheme}", "nodes": {{"a.example": 1, "b.example:8443": 1}}}}"#
                )),
                [port, 8443],
                "{scheme}"
            );
            assert_eq!(
                ports(&format!(
                    r#"{{"scheme": "{scheme}", "nodes": [{{"host": "a.example", "weight": 1}}, {{"host": "b.example", "port": 8443, "weight": 1}}]}}"#
                )),
                [port, 8443],
                "{scheme}"
            );
        }
        assert_eq!(ports(r#"{"nodes": {"a.example": 1}}"#), [80]);
        assert!(
            serde_json::from_str::<UpstreamConfig>(r#"{"nodes": [{"host": "a", "port": 0}]}"#)
                .is_err()
        );
    }

    #[test]
    fn node_keys_parse_host_and_port() {
        assert_eq!(
            parse_node_key("127.0.0.1:1980"),
            Ok(("127.0.0.1".into(), 1980))
        );
        assert_eq!(
            parse_node_key("example.com"),
            Ok(("example.com".into(), PORT_UNSET))
        );
        assert_eq!(parse_node_key("[::1]:8080"), Ok(("::1".into(), 8080)));
        assert!(parse_node_key("127.0.0.1:0").is_err());
        assert!(parse_node_key("127.0.0.1:99999").is_err());
        assert!(parse_node_key("a b:80").is_err());
        assert!(parse_node_key("::1:80").is_err());
    }
}
