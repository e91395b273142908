//! Checks that need more than the shape of a value: ranges, cross-field rules and references
//! between resources. Every error is recorded with its path; nothing stops at the first.
//!
//! One file per part of the configuration: node settings (`settings.rs`), routes and services
//! (`routes.rs`), upstreams (`upstreams.rs`), consumers (`consumers.rs`), certificates
//! (`ssls.rs`) and L4 stream routes (`stream_routes.rs`); this file runs them in order and
//! holds what they share (ids, references, plugins).

use std::collections::{HashMap, HashSet};

use crate::catalog::{CheckEnv, PluginCatalog, PluginScope};
use crate::de::Id;
use crate::error::Validator;
use crate::positions::Positions;

use crate::model::Config;
use common::{Refs, ServiceRef, UpstreamUse, l4_schemes, plugins, unique_ids, upstream_ref};

mod checks;
mod common;
mod consumers;
mod routes;
mod settings;
mod ssls;
mod stream_routes;
mod upstreams;

pub use routes::RouteContext;
pub(crate) use routes::single_route;
pub use upstreams::check_upstream_value;
pub(crate) use upstreams::upstream;

pub(crate) fn validate(
    cfg: &mut Config,
    pos: &Positions,
    catalog: &dyn PluginCatalog,
    v: &mut Validator,
) {
    settings::check(cfg, pos, v);
    v.field("plugin_attr", |v| {
        for (name, value) in &cfg.plugin_attr {
            v.field(name, |v| catalog.check_attr(name, value, v));
        }
    });

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
                routes::vars(r, v);
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
