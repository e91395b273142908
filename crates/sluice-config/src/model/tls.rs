//! Certificates and L4: `ssls`, `stream_proxy`, stream routes.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::Deserialize;

use super::settings::ListenConfig;
use super::upstreams::UpstreamConfig;
use crate::de::{Dur, Id};

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
