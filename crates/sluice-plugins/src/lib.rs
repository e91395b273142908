//! Sluice's built-in plugins, one file each, and the registry that names them.
//!
//! Owns: each plugin's configuration (APISIX's field names where the plugin exists there),
//! validation with path-carrying errors, the compiled instance and its phases. Does not own:
//! when phases run (the engine), nor sockets. Adding a plugin: a file (or folder) here whose
//! `Factory` declares everything about it, one line in the `plugins!` list below, a page in
//! docs/plugins/, tests (docs/architecture.md walks through one). Nothing outside this crate
//! names a plugin: the configuration, the proxy and the admin API ask the registry.

#![warn(missing_docs, unreachable_pub)]

use std::sync::Arc;

use serde_json::Value;
use sluice_config::{
    CheckEnv, ConsumerConfig, PluginCatalog, PluginScope, Validator, check_upstream_value,
};
use sluice_core::UpstreamRef;
use sluice_core::meta::split_meta;
use sluice_core::plugin::{BuildCx, PluginFactory, Plugins};
use sluice_core::state::StateRegistry;

/// An empty `plugin_metadata`, for dry builds.
const NO_METADATA: &[sluice_config::PluginMetadataConfig] = &[];

mod ai;
mod callout;
mod compress;
mod limit;
pub mod logger;
mod quota;
mod resolve;
mod util;

/// The built-in plugins, one line each: declares the module and registers its `Factory`, in
/// this order (the order of [`Registry::all`]).
macro_rules! plugins {
    ($($vis:vis $module:ident),* $(,)?) => {
        $($vis mod $module;)*

        /// Every built-in plugin.
        pub fn builtin() -> Registry {
            sluice_core::tls_client::install_default_provider();
            Registry::new()$(.with($module::Factory))*
        }
    };
}

plugins! {
    cors,
    request_id,
    ip_restriction,
    mocking,
    fault_injection,
    key_auth,
    basic_auth,
    jwt_auth,
    consumer_restriction,
    proxy_rewrite,
    limit_conn,
    limit_count,
    limit_req,
    traffic_split,
    proxy_mirror,
    response_rewrite,
    api_breaker,
    prometheus,
    pub opentelemetry,
    redirect,
    real_ip,
    hmac_auth,
    request_validation,
    uri_blocker,
    ua_restriction,
    referer_restriction,
    client_control,
    csrf,
    forward_auth,
    opa,
    ldap_auth,
    multi_auth,
    workflow,
    traffic_label,
    acl,
    body_transformer,
    openid_connect,
    http_logger,
    tcp_logger,
    udp_logger,
    syslog,
    file_logger,
    gzip,
    brotli,
    loki_logger,
    elasticsearch_logger,
    splunk_hec_logging,
    datadog,
    proxy_cache,
    kafka_logger,
    ai_proxy,
    ai_proxy_multi,
    ai_rate_limiting,
    ai_prompt_decorator,
    ai_prompt_template,
    ai_prompt_guard,
    ai_request_rewrite,
}

/// The plugins a gateway knows.
pub struct Registry {
    factories: Vec<Box<dyn PluginFactory>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.factories.iter().map(|p| p.name()))
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry {
            factories: Vec::new(),
        }
    }

    /// Adds a plugin.
    pub fn with(mut self, f: impl PluginFactory) -> Registry {
        self.factories.push(Box::new(f));
        self
    }

    /// Plugin names, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.factories.iter().map(|f| f.name()).collect();
        v.sort_unstable();
        v
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Plugins for Registry {
    fn get(&self, name: &str) -> Option<&dyn PluginFactory> {
        self.factories
            .iter()
            .find(|f| f.name() == name)
            .map(|f| &**f)
    }

    fn all(&self) -> Vec<&dyn PluginFactory> {
        self.factories.iter().map(|f| &**f).collect()
    }
}

impl PluginCatalog for Registry {
    fn check_plugin(
        &self,
        name: &str,
        config: &Value,
        scope: PluginScope,
        env: &CheckEnv<'_>,
        v: &mut Validator,
    ) {
        let Some(f) = self.get(name) else {
            v.error(format!(
                "unknown plugin, expected one of {}",
                self.names().join(", ")
            ));
            return;
        };
        let Some(entry) = split_meta(config, v) else {
            return;
        };
        if scope == PluginScope::StreamRoute
            && (entry.filter.is_some() || entry.error_response.is_some())
        {
            v.error_at("_meta", sluice_core::meta::NOT_ON_STREAMS);
            return;
        }
        if scope == PluginScope::Consumer && f.is_auth() {
            f.check_credential(&entry.config, v);
            return;
        }
        // A dry build: the same code as the real one, so what loads here compiles there.
        let state = StateRegistry::default();
        let no_index = |_: &str| None;
        let mut upstreams = |value: &Value, v: &mut Validator| {
            check_upstream_value(value, env, v).then_some(UpstreamRef(0))
        };
        let attr = sluice_config::PluginAttrConfig::default();
        let mut cx = BuildCx {
            tls_ports: &[],
            plugin_attr: &attr,
            plugin_metadata: &NO_METADATA,
            route_paths: &[],
            scope,
            owner: "check",
            indexes: &no_index,
            upstreams: &mut upstreams,
            state: &state,
        };
        if scope == PluginScope::StreamRoute {
            let _ = f.build_stream(&entry.config, &mut cx, v);
        } else {
            let _ = f.build(&entry.config, &mut cx, v);
        }
    }

    fn encrypted_fields(&self, name: &str) -> &'static [&'static str] {
        self.get(name).map_or(&[], |f| f.encrypted_fields())
    }

    fn stream_plugins(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self
            .factories
            .iter()
            .filter(|f| f.on_stream())
            .map(|f| f.name())
            .collect();
        v.sort_unstable();
        v
    }

    fn check_attr(&self, name: &str, value: &Value, v: &mut Validator) {
        match self.get(name) {
            Some(f) => f.check_attr(value, v),
            None => v.error(format!(
                "unknown plugin, expected one of {}",
                self.names().join(", ")
            )),
        }
    }

    fn is_auth(&self, name: &str) -> bool {
        self.get(name).is_some_and(|f| f.is_auth())
    }

    fn plugin_schema(&self, name: &str, consumer: bool) -> Option<Value> {
        let f = self.get(name)?;
        if consumer {
            f.consumer_schema()
        } else {
            f.schema()
        }
    }

    fn check_metadata(
        &self,
        name: &str,
        fields: &serde_json::Map<String, Value>,
        v: &mut Validator,
    ) {
        // A plugin Sluice does not have: a warning (see sluice_config::warnings), not an
        // error; its routes would be refused anyway, and APISIX's control planes write
        // metadata for their loggers into the etcd Sluice serves from.
        if let Some(f) = self.get(name) {
            f.check_metadata(fields, v);
        }
    }

    fn plugin_names(&self) -> Vec<&'static str> {
        self.names()
    }

    fn check_consumers(&self, consumers: &[(usize, &ConsumerConfig)], v: &mut Validator) {
        for f in self.factories.iter().filter(|f| f.is_auth()) {
            let found = sluice_config::credentials_of(
                f.name(),
                consumers
                    .iter()
                    .enumerate()
                    .map(|(i, (pos, c))| (i, *pos, *c)),
            );
            let creds = sluice_core::plugin::as_credentials(&found);
            let _ = f.consumer_index(&creds, v);
        }
    }
}

/// A fingerprint of how limit keys are hashed (the hasher and the `Hash` of the values keys
/// are made of), for a binary upgrade: an old process's carried counters are keyed by those
/// hashes, and a new binary that hashes differently (another hasher, another toolchain's
/// `Hash` for an address) would find none of them. The two processes compare fingerprints,
/// and the new one starts afresh, saying so, when they differ.
pub fn key_fingerprint() -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = util::KeyHasher::default();
    std::net::IpAddr::from([192, 0, 2, 7]).hash(&mut h);
    std::net::IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 7]).hash(&mut h);
    "sluice".hash(&mut h);
    b"key".as_slice().hash(&mut h);
    7u64.hash(&mut h);
    h.finish()
}

/// The built-in registry, shared.
pub fn shared() -> Arc<Registry> {
    Arc::new(builtin())
}

#[doc(hidden)]
pub mod harness;

#[cfg(test)]
mod tests;
