//! The configuration model: node settings and APISIX-shaped resources. Field doc comments are
//! the user reference (docs/config.md follows them). Every struct rejects unknown fields.
//!
//! By section: `settings` (the node), `routes`, `resources` (services, global rules,
//! consumers, plugin sets and metadata), `tls` (certificates and L4), `upstreams` (a leaf:
//! the others refer to it); the whole configuration here.

use serde::Deserialize;

use crate::de::Workers;

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
    /// NGINX's realip module, node-wide: every request's client is the address a trusted
    /// proxy in front gave, before routing. Off unless set.
    pub real_ip: Option<RealIpConfig>,
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

mod resources;
mod routes;
mod settings;
mod tls;
mod upstreams;

pub use resources::*;
pub use routes::*;
pub use settings::*;
pub use tls::*;
pub use upstreams::*;

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

#[cfg(test)]
mod tests {
    use super::upstreams::{PORT_UNSET, parse_node_key};
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
