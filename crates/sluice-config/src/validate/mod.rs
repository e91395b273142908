//! Checks that need more than the shape of a value: ranges, cross-field rules and references
//! between resources. Every error is recorded with its path; nothing stops at the first.
//!
//! One file per part of the configuration: node settings (`settings.rs`), routes and services
//! (`routes.rs`), upstreams (`upstreams.rs`), consumers (`consumers.rs`), certificates
//! (`ssls.rs`) and L4 stream routes (`stream_routes.rs`); this file runs them in order and
//! holds what they share (ids, references, plugins).

use std::collections::{HashMap, HashSet};

use crate::catalog::{CheckEnv, PluginCatalog, PluginScope};
use crate::de::{Dur, Id};
use crate::error::Validator;
use crate::load::{Positions, Section};
use crate::model::{Config, UpstreamConfig};

mod consumers;
mod routes;
mod settings;
mod ssls;
mod stream_routes;
mod upstreams;

pub use routes::RouteContext;
pub(crate) use routes::single_route;
pub use settings::otel_attr as check_otel_attr;
pub(crate) use upstreams::upstream;

pub(crate) fn validate(
    cfg: &mut Config,
    pos: &Positions,
    catalog: &dyn PluginCatalog,
    v: &mut Validator,
) {
    settings::check(cfg, pos, v);

    let upstream_ids = unique_ids(
        v,
        "upstreams",
        "upstream",
        &pos.upstreams,
        cfg.upstreams
            .iter()
            .map(|u| u.id.as_ref().map(|i| i.0.as_str())),
    );
    v.field("upstreams", |v| {
        for (u, &i) in cfg.upstreams.iter().zip(&pos.upstreams.index) {
            v.index(i, |v| upstream(u, v));
        }
    });
    let mut known_upstreams: HashSet<String> = upstream_ids.keys().cloned().collect();
    known_upstreams.extend(pos.upstreams.failed_ids.iter().map(|(id, _)| id.clone()));
    let env = CheckEnv {
        upstream_ids: &known_upstreams,
    };

    unique_ids(
        v,
        "plugin_metadata",
        "plugin metadata",
        &pos.plugin_metadata,
        cfg.plugin_metadata
            .iter()
            .map(|m| m.id.as_ref().map(|i| i.0.as_str())),
    );
    // Ids are `<manager>/<id>`: checked by the manager's rules, not the resources' pattern.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    v.field("secrets", |v| {
        for (s, &i) in cfg.secrets.iter().zip(&pos.secrets.index) {
            v.index(i, |v| {
                crate::secrets::check(s, v);
                match s.id.as_deref() {
                    None => v.error_at("id", "is required"),
                    Some(id) => match seen.get(id) {
                        Some(first) => v.error_at(
                            "id",
                            format!(
                                "duplicate secret manager id \"{id}\" (first at secrets[{first}])"
                            ),
                        ),
                        None => {
                            seen.insert(id, i);
                        }
                    },
                }
            });
        }
    });
    v.field("plugin_metadata", |v| {
        for (m, &i) in cfg.plugin_metadata.iter().zip(&pos.plugin_metadata.index) {
            v.index(i, |v| {
                let name = m.id.as_ref().map_or("", |i| i.0.as_str());
                catalog.check_metadata(name, &m.fields, v);
            });
        }
    });

    let plugin_config_ids = unique_ids(
        v,
        "plugin_configs",
        "plugin config",
        &pos.plugin_configs,
        cfg.plugin_configs
            .iter()
            .map(|p| p.id.as_ref().map(|i| i.0.as_str())),
    );
    v.field("plugin_configs", |v| {
        for (p, &i) in cfg.plugin_configs.iter().zip(&pos.plugin_configs.index) {
            v.index(i, |v| {
                plugins(&p.plugins, PluginScope::Route, catalog, &env, v)
            });
        }
    });
    let mut known_plugin_configs: HashSet<String> = plugin_config_ids.into_keys().collect();
    known_plugin_configs.extend(
        pos.plugin_configs
            .failed_ids
            .iter()
            .map(|(id, _)| id.clone()),
    );
    let refs = Refs {
        upstreams: &known_upstreams,
        l4_schemes: l4_schemes(cfg),
        plugin_configs: &known_plugin_configs,
        services: HashMap::new(),
    };

    unique_ids(
        v,
        "services",
        "service",
        &pos.services,
        cfg.services
            .iter()
            .map(|s| s.id.as_ref().map(|i| i.0.as_str())),
    );
    let mut refs = refs;
    v.field("services", |v| {
        for (s, &i) in cfg.services.iter().zip(&pos.services.index) {
            v.index(i, |v| {
                // A service may hold only plugins: its routes then bring their upstream.
                upstream_ref(
                    s.upstream.as_deref(),
                    s.upstream_id.as_ref(),
                    true,
                    UpstreamUse::Any,
                    &refs,
                    v,
                );
                plugins(&s.plugins, PluginScope::Service, catalog, &env, v);
                if let Some(hs) = &s.hosts {
                    v.field("hosts", |v| {
                        if hs.is_empty() {
                            v.error("must not be empty; leave hosts out to match any host");
                        }
                        for (i, h) in hs.iter().enumerate() {
                            if let Err(e) = sluice_router::HostPattern::parse(h) {
                                v.index(i, |v| v.error(e));
                            }
                        }
                    });
                }
            });
        }
    });
    for s in &cfg.services {
        if let Some(id) = &s.id {
            // The first service with an id is the one routes refer to (the duplicate is an error).
            refs.services
                .entry(id.0.clone())
                .or_insert_with(|| ServiceRef::of(s));
        }
    }
    for (id, _) in &pos.services.failed_ids {
        // A service that failed to parse: assume it has an upstream, to avoid a second error.
        refs.services.insert(
            id.clone(),
            ServiceRef {
                upstream: true,
                plugins: true,
                hosts: Vec::new(),
                scheme: None,
                upstream_id: None,
            },
        );
    }

    let mut route_ids: HashMap<String, usize> = pos
        .routes
        .failed_ids
        .iter()
        .map(|(id, i)| (id.clone(), *i))
        .collect();
    v.field("routes", |v| {
        for (r, &i) in cfg.routes.iter_mut().zip(&pos.routes.index) {
            v.index(i, |v| {
                let id = match &r.id {
                    Some(Id(id)) => match crate::de::check_id(id) {
                        Ok(()) => id.clone(),
                        Err(e) => {
                            v.error_at("id", e);
                            String::new()
                        }
                    },
                    None => {
                        let generated = format!("routes[{i}]");
                        r.id = Some(Id(generated.clone()));
                        generated
                    }
                };
                if !id.is_empty() {
                    match route_ids.get(&id) {
                        Some(&first) if first < i => v.error_at(
                            "id",
                            format!("duplicate route id \"{id}\" (first at routes[{first}])"),
                        ),
                        _ => {
                            route_ids.insert(id.clone(), i);
                        }
                    }
                }
                routes::route(r, &refs, v);
                plugins(&r.plugins, PluginScope::Route, catalog, &env, v);
                routes::vars(r, catalog, v);
            });
        }
    });

    unique_ids(
        v,
        "global_rules",
        "global rule",
        &pos.global_rules,
        cfg.global_rules
            .iter()
            .map(|g| g.id.as_ref().map(|i| i.0.as_str())),
    );
    v.field("global_rules", |v| {
        for (g, &i) in cfg.global_rules.iter().zip(&pos.global_rules.index) {
            v.index(i, |v| {
                plugins(&g.plugins, PluginScope::GlobalRule, catalog, &env, v)
            });
        }
    });

    consumers::check(cfg, pos, catalog, &env, v);

    ssls::check(cfg, pos, v);
    stream_routes::check(cfg, pos, &refs, catalog, &env, v);
}

/// Checks that every item has an id and that ids are unique; returns id → position.
fn unique_ids<'a>(
    v: &mut Validator,
    list: &str,
    what: &str,
    pos: &Section,
    ids: impl Iterator<Item = Option<&'a str>>,
) -> HashMap<String, usize> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    v.field(list, |v| {
        for (id, &i) in ids.zip(&pos.index) {
            v.index(i, |v| match id {
                None => v.error_at("id", "is required"),
                Some(id) => {
                    if let Err(e) = crate::de::check_id(id) {
                        v.error_at("id", e);
                    } else if let Some(&first) = seen.get(id) {
                        v.error_at(
                            "id",
                            format!("duplicate {what} id \"{id}\" (first at {list}[{first}])"),
                        );
                    } else {
                        seen.insert(id.to_owned(), i);
                    }
                }
            });
        }
    });
    seen
}

/// What routes and services may refer to.
struct Refs<'a> {
    upstreams: &'a HashSet<String>,
    /// Named upstreams with a stream scheme (`tcp`, `udp`), by id.
    l4_schemes: HashMap<String, String>,
    plugin_configs: &'a HashSet<String>,
    services: HashMap<String, ServiceRef>,
}

/// What a service gives the routes that refer to it.
#[derive(Debug, Clone)]
pub(crate) struct ServiceRef {
    /// It has an upstream.
    pub(crate) upstream: bool,
    /// It has plugins (a route without an upstream may then answer with them).
    pub(crate) plugins: bool,
    /// Its `hosts`, for its routes that name none (the valid ones; errors are the service's).
    pub(crate) hosts: Vec<sluice_router::HostPattern>,
    /// Its inline upstream's scheme, or the id of its named upstream (whose scheme is in
    /// `Refs::l4_schemes` when it is a stream one).
    pub(crate) scheme: Option<String>,
    pub(crate) upstream_id: Option<String>,
}

impl ServiceRef {
    /// The scheme of the service's upstream when it is a stream one (`tcp`, `udp`).
    fn l4_scheme<'a>(&'a self, refs: &'a Refs<'_>) -> Option<&'a str> {
        match (&self.scheme, &self.upstream_id) {
            (Some(s), _) => Some(s.as_str()).filter(|s| matches!(*s, "tcp" | "tls" | "udp")),
            (None, Some(id)) => refs.l4_schemes.get(id).map(String::as_str),
            (None, None) => None,
        }
    }

    pub(crate) fn of(s: &crate::model::ServiceConfig) -> ServiceRef {
        ServiceRef {
            scheme: s.upstream.as_ref().map(|u| u.scheme.clone()),
            upstream_id: s.upstream_id.as_ref().map(|i| i.0.clone()),
            upstream: s.upstream.is_some() || s.upstream_id.is_some(),
            plugins: !s.plugins.is_empty(),
            hosts: s
                .hosts
                .iter()
                .flatten()
                .filter_map(|h| sluice_router::HostPattern::parse(h).ok())
                .collect(),
        }
    }
}

/// The named upstreams with a stream scheme (`tcp`, `udp`), by id.
fn l4_schemes(cfg: &Config) -> HashMap<String, String> {
    cfg.upstreams
        .iter()
        .filter(|u| matches!(u.scheme.as_str(), "tcp" | "tls" | "udp"))
        .filter_map(|u| Some((u.id.as_ref()?.0.clone(), u.scheme.clone())))
        .collect()
}

/// Who uses an upstream: its `scheme` must suit it (`tcp` and `udp` are APISIX's schemes of
/// stream upstreams).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum UpstreamUse {
    /// An HTTP route: not `tcp` or `udp`.
    Http,
    /// A stream route of this protocol: `tcp` or `udp` as the route's, or an HTTP scheme
    /// (ignored: the route's protocol decides).
    Stream(crate::model::StreamProtocol),
    /// A service (its routes may be of either kind).
    Any,
}

/// Whether an upstream of `scheme` suits `user` (why not, when it does not).
pub(crate) fn scheme_suits(scheme: &str, user: UpstreamUse) -> Result<(), String> {
    let l4 = match scheme {
        "tcp" | "tls" => Some(crate::model::StreamProtocol::Tcp),
        "udp" => Some(crate::model::StreamProtocol::Udp),
        _ => None,
    };
    match (user, l4) {
        (UpstreamUse::Http, Some(_)) => Err(format!(
            "scheme {scheme} is for stream routes; an HTTP route's upstream is http, https, grpc or grpcs"
        )),
        (UpstreamUse::Stream(p), Some(l4)) if p != l4 => Err(format!(
            "scheme {scheme} does not match the stream route's protocol {}",
            if p == crate::model::StreamProtocol::Tcp {
                "tcp"
            } else {
                "udp"
            }
        )),
        _ => Ok(()),
    }
}

/// Checks a resource's `upstream`/`upstream_id` pair. `optional`: another source (a service)
/// provides the upstream when both are absent.
fn upstream_ref(
    inline: Option<&UpstreamConfig>,
    id: Option<&Id>,
    optional: bool,
    user: UpstreamUse,
    refs: &Refs<'_>,
    v: &mut Validator,
) {
    let suits = |scheme: &str| scheme_suits(scheme, user);
    match (inline, id) {
        (Some(_), Some(_)) => v.error("use either upstream or upstream_id, not both"),
        (None, None) if !optional => v.error("one of upstream or upstream_id is required"),
        (None, None) => {}
        (Some(u), None) => v.field("upstream", |v| {
            if u.id.is_some() {
                v.error_at("id", "is not allowed in an inline upstream; put the upstream in upstreams and use upstream_id");
            }
            upstream(u, v);
            if let Err(e) = suits(&u.scheme) {
                v.error_at("scheme", e);
            }
        }),
        (None, Some(Id(id))) => {
            if !refs.upstreams.contains(id) {
                v.error_at("upstream_id", format!("upstream \"{id}\" not found"));
            } else if let Some(scheme) = refs.l4_schemes.get(id)
                && let Err(e) = suits(scheme)
            {
                v.error_at("upstream_id", format!("upstream \"{id}\": {e}"));
            }
        }
    }
}

fn plugins(
    map: &serde_json::Map<String, serde_json::Value>,
    scope: PluginScope,
    catalog: &dyn PluginCatalog,
    env: &CheckEnv<'_>,
    v: &mut Validator,
) {
    v.field("plugins", |v| {
        for (name, config) in map {
            v.field(name, |v| catalog.check_plugin(name, config, scope, env, v));
        }
    });
}

fn positive(v: &mut Validator, field: &str, d: Dur) {
    if d.0.is_zero() {
        v.error_at(field, "must be > 0");
    }
}

fn range(v: &mut Validator, field: &str, n: u64, lo: u64, hi: u64, lo_s: &str, hi_s: &str) {
    if n < lo || n > hi {
        v.error_at(field, format!("must be from {lo_s} to {hi_s}"));
    }
}
