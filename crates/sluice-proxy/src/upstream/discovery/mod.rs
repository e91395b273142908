//! Discovery types: one file per service registry an upstream's `discovery_type` names, each
//! a [`Discovery`] registered with one line in `discoveries!` below. A discovery type checks
//! its node-wide settings (`discovery.<name>`) and an upstream's `service_name`, and makes the
//! [`Query`] whose answers become the upstream's nodes; the cache, the background refresh and
//! the recompilation of upstreams whose answer changed are [`super::discover`]'s, for all.

use serde_json::Value;
use sluice_config::{DiscoveryConfig, UpstreamConfig, Validator};

use super::discover::{Query, Target};

/// The discovery types, one line each: declares the module and registers its `KIND`, in the
/// order errors list them.
macro_rules! discoveries {
    ($($module:ident),* $(,)?) => {
        $(mod $module;)*

        /// Every discovery type.
        static KINDS: &[&dyn Discovery] = &[$(&$module::KIND),*];
    };
}

discoveries! {
    dns,
    eureka,
}

/// A service registry, as an upstream's `discovery_type` names it.
pub(crate) trait Discovery: Sync {
    /// The `discovery_type` that names it.
    fn name(&self) -> &'static str;

    /// What `service_name` is, for errors: ` (the application's name)`; empty by default.
    fn service_is(&self) -> &'static str {
        ""
    }

    /// What the upstream's nodes are, for the error when `nodes` are given too.
    fn nodes_are(&self) -> &'static str;

    /// Checks its node-wide settings, `discovery.<name>` (`v` points at them). Without any:
    /// refused.
    fn check_settings(&self, _value: &Value, v: &mut Validator) {
        v.error(format!("discovery_type {} takes no settings", self.name()));
    }

    /// Checks an upstream's `service_name` (`v` points at the upstream; `settings` are its
    /// node-wide settings when given) and makes the query for it, with the port the service
    /// name gave.
    fn query(
        &self,
        service: &str,
        settings: Option<&Value>,
        v: &mut Validator,
    ) -> Option<(Query, Option<u16>)>;

    /// How an answer's target becomes a node on `port`: its host (for `Host` and SNI), its
    /// authority (its name in logs and the health view) and the key its health is kept under.
    fn node_of(&self, service: &str, query: &Query, t: &Target, port: u16) -> NodeOf;
}

/// An upstream's query, and the port its service name gave.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) query: Query,
    /// The port of `host:port`; a target's own port wins, the scheme's comes last.
    pub(crate) port: Option<u16>,
    pub(crate) kind: &'static dyn Discovery,
}

impl std::fmt::Debug for dyn Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A target as a node.
#[derive(Debug)]
pub(crate) struct NodeOf {
    pub(crate) host: String,
    pub(crate) authority: String,
    pub(crate) health_key: String,
}

/// Checks `discovery` (`v` points at it): each entry by the type it names.
pub(crate) fn check_settings(all: &DiscoveryConfig, v: &mut Validator) {
    for (name, value) in all {
        v.field(name, |v| match find(name) {
            Some(kind) => kind.check_settings(value, v),
            None => v.error(unknown(name)),
        });
    }
}

fn find(name: &str) -> Option<&'static dyn Discovery> {
    KINDS.iter().copied().find(|k| k.name() == name)
}

fn unknown(name: &str) -> String {
    let names: Vec<&str> = KINDS.iter().map(|k| k.name()).collect();
    let (last, rest) = names.split_last().expect("a discovery type");
    format!(
        "unsupported discovery_type \"{name}\", expected {} or {last}",
        rest.join(", ")
    )
}

/// The upstream's query (`v` points at the upstream): None without `discovery_type`, or when
/// an error was recorded.
pub(crate) fn query(
    u: &UpstreamConfig,
    settings: &DiscoveryConfig,
    v: &mut Validator,
) -> Option<Found> {
    let Some(name) = u.discovery_type.as_deref() else {
        if u.service_name.is_some() {
            let names: Vec<&str> = KINDS.iter().map(|k| k.name()).collect();
            v.error_at(
                "service_name",
                format!("is only used with discovery_type ({})", names.join(" or ")),
            );
        }
        return None;
    };
    let Some(kind) = find(name) else {
        v.error_at("discovery_type", unknown(name));
        return None;
    };
    let Some(service) = &u.service_name else {
        v.error_at(
            "service_name",
            format!(
                "is required with discovery_type: {name}{}",
                kind.service_is()
            ),
        );
        return None;
    };
    if !u.nodes.0.is_empty() {
        v.error_at(
            "nodes",
            format!(
                "is not used with discovery_type: {name} (the nodes are {})",
                kind.nodes_are()
            ),
        );
    }
    let (query, port) = kind.query(service, settings.get(name), v)?;
    Some(Found { query, port, kind })
}

/// The query of an upstream, if it has one that is valid, without recording errors (to
/// resolve every name of a configuration at once before compiling it).
pub(crate) fn query_quietly(u: &UpstreamConfig, settings: &DiscoveryConfig) -> Option<Query> {
    query(u, settings, &mut Validator::new()).map(|f| f.query)
}
