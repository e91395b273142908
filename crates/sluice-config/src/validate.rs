//! Checks that need more than the shape of a value: ranges, cross-field rules and references
//! between resources. Every error is recorded with its path; nothing stops at the first.

use std::collections::{HashMap, HashSet};

use sluice_router::{HostPattern, Method, MethodSet, PathPattern};

use crate::catalog::{CheckEnv, PluginCatalog, PluginScope};
use crate::de::{Dur, Id};
use crate::error::Validator;
use crate::load::{Positions, Section};
use crate::model::{
    Config, ConsumerConfig, LimitsConfig, MAX_HEADERS_CEILING, PassHost, RouteConfig,
    StreamProtocol, TimeoutsConfig, UpstreamConfig, UpstreamTimeoutConfig,
};

const LOG_LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace"];

pub(crate) fn validate(
    cfg: &mut Config,
    pos: &Positions,
    catalog: &dyn PluginCatalog,
    v: &mut Validator,
) {
    v.field("listen", |v| {
        if cfg.listen.is_empty() && !pos.listen_failed {
            v.error("must not be empty");
        }
        let mut seen = HashSet::new();
        for (i, l) in cfg.listen.iter().enumerate() {
            v.index(i, |v| {
                if l.tls && cfg.ssls.is_empty() && pos.ssls.failed_ids.is_empty() {
                    v.error_at(
                        "tls",
                        "a TLS listener needs at least one certificate in ssls",
                    );
                }
                // Port 0 asks for any free port: two of them are two listeners.
                if l.addr.port() != 0 && !seen.insert(l.addr) {
                    v.error(format!("duplicate listen address {}", l.addr));
                }
            });
        }
    });
    v.field("admin", |v| {
        let a = &cfg.admin;
        match &a.key {
            Some(k) if k.len() < 16 => v.error_at("key", "must be at least 16 characters"),
            Some(k) if k.bytes().any(|b| !b.is_ascii_graphic()) => {
                v.error_at("key", "must be printable ASCII without spaces")
            }
            None if a.enabled && !a.listen.ip().is_loopback() => v.error_at(
                "key",
                format!(
                    "is required when the admin API listens on {}, which is not a loopback address",
                    a.listen
                ),
            ),
            _ => {}
        }
    });
    if let Some(e) = &cfg.etcd {
        v.field("etcd", |v| {
            if e.endpoints.is_empty() {
                v.error_at("endpoints", "must not be empty");
            }
            v.field("endpoints", |v| {
                for (i, ep) in e.endpoints.iter().enumerate() {
                    let ok = ep
                        .strip_prefix("http://")
                        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
                    if !ok {
                        v.index(i, |v| {
                            v.error(format!(
                                "invalid endpoint \"{ep}\": expected http://host:port"
                            ))
                        });
                    }
                }
            });
            if !e.prefix.starts_with('/') || e.prefix.ends_with('/') || e.prefix.contains("//") {
                v.error_at(
                    "prefix",
                    format!(
                        "invalid prefix \"{}\": expected a path like /sluice, without a trailing /",
                        e.prefix
                    ),
                );
            }
            positive(v, "timeout", e.timeout);
        });
    }
    v.field("timeouts", |v| timeouts(&cfg.timeouts, v));
    v.field("limits", |v| limits(&cfg.limits, v));
    v.field("log", |v| {
        if !LOG_LEVELS.contains(&cfg.log.level.as_str()) {
            v.error_at(
                "level",
                format!(
                    "unknown level \"{}\", expected one of {}",
                    cfg.log.level,
                    LOG_LEVELS.join(", ")
                ),
            );
        }
        if let Some(a) = &cfg.log.access {
            v.field("access", |v| {
                if a.path.is_empty() {
                    v.error_at("path", "must not be empty");
                }
                if a.buffer.0 > 16 << 20 {
                    v.error_at("buffer", "must be at most 16MiB");
                }
                positive(v, "flush", a.flush);
            });
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
    let refs = Refs {
        upstreams: &known_upstreams,
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
                upstream_ref(s.upstream.as_ref(), s.upstream_id.as_ref(), true, &refs, v);
                plugins(&s.plugins, PluginScope::Service, catalog, &env, v);
            });
        }
    });
    for s in &cfg.services {
        if let Some(id) = &s.id {
            // The first service with an id is the one routes refer to (the duplicate is an error).
            refs.services
                .entry(id.0.clone())
                .or_insert(s.upstream.is_some() || s.upstream_id.is_some());
        }
    }
    for (id, _) in &pos.services.failed_ids {
        // A service that failed to parse: assume it has an upstream, to avoid a second error.
        refs.services.insert(id.clone(), true);
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
                    Some(Id(id)) if id.is_empty() => {
                        v.error_at("id", "must not be empty");
                        String::new()
                    }
                    Some(Id(id)) => id.clone(),
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
                route(r, &refs, v);
                plugins(&r.plugins, PluginScope::Route, catalog, &env, v);
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

    let mut usernames: HashMap<&str, usize> = HashMap::new();
    v.field("consumers", |v| {
        for (c, &i) in cfg.consumers.iter().zip(&pos.consumers.index) {
            v.index(i, |v| {
                if c.username.is_empty() {
                    v.error_at("username", "is required");
                } else if !c
                    .username
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    v.error_at(
                        "username",
                        format!(
                            "invalid username \"{}\": use letters, digits and _",
                            c.username
                        ),
                    );
                } else if let Some(first) = usernames.get(c.username.as_str()) {
                    v.error_at(
                        "username",
                        format!(
                            "duplicate username \"{}\" (first at consumers[{first}])",
                            c.username
                        ),
                    );
                } else {
                    usernames.insert(&c.username, i);
                }
                plugins(&c.plugins, PluginScope::Consumer, catalog, &env, v);
            });
        }
        let all: Vec<(usize, &ConsumerConfig)> = pos
            .consumers
            .index
            .iter()
            .copied()
            .zip(cfg.consumers.iter())
            .collect();
        catalog.check_consumers(&all, v);
    });

    ssls(cfg, pos, v);
    stream_routes(cfg, pos, &refs, catalog, &env, v);
}

fn ssls(cfg: &Config, pos: &Positions, v: &mut Validator) {
    unique_ids(
        v,
        "ssls",
        "ssl",
        &pos.ssls,
        cfg.ssls.iter().map(|s| s.id.as_ref().map(|i| i.0.as_str())),
    );
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut default: Option<usize> = None;
    v.field("ssls", |v| {
        for (s, &i) in cfg.ssls.iter().zip(&pos.ssls.index) {
            v.index(i, |v| {
                if s.snis.0.is_empty() && !s.default {
                    v.error_at("snis", "must not be empty (or set default: true)");
                }
                v.field("snis", |v| {
                    for (k, name) in s.snis.0.iter().enumerate() {
                        v.index(k, |v| match HostPattern::parse(name) {
                            Err(e) => v.error(e),
                            Ok(_) => {
                                let key = name.to_ascii_lowercase();
                                match names.get(&key) {
                                    Some(&first) if first != i => v.error(format!(
                                        "\"{name}\" is already served by ssls[{first}]"
                                    )),
                                    _ => {
                                        names.insert(key, i);
                                    }
                                }
                            }
                        });
                    }
                });
                if s.cert.trim().is_empty() {
                    v.error_at("cert", "is required");
                }
                if s.key.trim().is_empty() {
                    v.error_at("key", "is required");
                }
                if let Some(c) = &s.client
                    && c.ca.trim().is_empty()
                {
                    v.error_at("client.ca", "is required");
                }
                if s.default {
                    match default {
                        Some(first) => v.error_at(
                            "default",
                            format!("only one ssl may be the default (first at ssls[{first}])"),
                        ),
                        None => default = Some(i),
                    }
                }
            });
        }
    });
}

/// Plugins that work on stream routes (connection-level).
pub(crate) const STREAM_PLUGINS: &[&str] = &["ip-restriction", "limit-conn"];

fn stream_routes(
    cfg: &mut Config,
    pos: &Positions,
    refs: &Refs<'_>,
    catalog: &dyn PluginCatalog,
    env: &CheckEnv<'_>,
    v: &mut Validator,
) {
    let http: HashSet<std::net::SocketAddr> = cfg.listen.iter().map(|l| l.addr).collect();
    let admin = cfg.admin.enabled.then_some(cfg.admin.listen);
    let has_ssls = !cfg.ssls.is_empty() || !pos.ssls.failed_ids.is_empty();
    let mut ids: HashMap<String, usize> = pos
        .stream_routes
        .failed_ids
        .iter()
        .map(|(id, i)| (id.clone(), *i))
        .collect();
    // Per listen address and protocol: the routes on it (position, sni, tls).
    type Group = Vec<(usize, Option<String>)>;
    let mut groups: HashMap<(std::net::SocketAddr, StreamProtocol), Group> = HashMap::new();
    v.field("stream_routes", |v| {
        for (r, &i) in cfg.stream_routes.iter_mut().zip(&pos.stream_routes.index) {
            v.index(i, |v| {
                match &r.id {
                    Some(Id(id)) if id.is_empty() => v.error_at("id", "must not be empty"),
                    Some(Id(id)) => match ids.get(id) {
                        Some(&first) if first < i => v.error_at(
                            "id",
                            format!(
                                "duplicate stream route id \"{id}\" (first at stream_routes[{first}])"
                            ),
                        ),
                        _ => {
                            ids.insert(id.clone(), i);
                        }
                    },
                    None => r.id = Some(Id(format!("stream_routes[{i}]"))),
                }
                match crate::model::parse_listen_addr(&r.listen) {
                    Err(e) => v.error_at("listen", e),
                    Ok(addr) => {
                        r.addr = Some(addr);
                        if http.contains(&addr) {
                            v.error_at(
                                "listen",
                                format!("{addr} is an HTTP listen address (listen)"),
                            );
                        } else if admin == Some(addr) && r.protocol == StreamProtocol::Tcp {
                            v.error_at("listen", format!("{addr} is the admin API's address"));
                        } else {
                            groups.entry((addr, r.protocol)).or_default().push((
                                i,
                                r.sni.as_ref().map(|n| n.to_ascii_lowercase()),
                            ));
                        }
                    }
                }
                if r.protocol == StreamProtocol::Udp {
                    if r.sni.is_some() {
                        v.error_at("sni", "works with protocol tcp only");
                    }
                    if r.tls {
                        v.error_at("tls", "works with protocol tcp only");
                    }
                    if r.splice {
                        v.error_at("splice", "works with protocol tcp only");
                    }
                }
                if r.splice && r.tls {
                    v.error_at(
                        "splice",
                        "does not work with tls: true (Sluice must decrypt the bytes)",
                    );
                }
                if let Some(name) = &r.sni
                    && let Err(e) = HostPattern::parse(name)
                {
                    v.error_at("sni", e);
                }
                if r.tls && !has_ssls {
                    v.error_at("tls", "needs at least one certificate in ssls");
                }
                if let Some(d) = r.idle_timeout {
                    positive(v, "idle_timeout", d);
                }
                upstream_ref(r.upstream.as_ref(), r.upstream_id.as_ref(), false, refs, v);
                if r.upstream.as_ref().is_some_and(|u| u.http2) {
                    v.error_at(
                        "upstream.http2",
                        "is for HTTP routes: a stream route forwards bytes as they are",
                    );
                }
                v.field("plugins", |v| {
                    for (name, config) in &r.plugins {
                        v.field(name, |v| {
                            if STREAM_PLUGINS.contains(&name.as_str()) {
                                catalog.check_plugin(name, config, PluginScope::Route, env, v);
                            } else {
                                v.error(format!(
                                    "does not work on stream routes (these do: {})",
                                    STREAM_PLUGINS.join(", ")
                                ));
                            }
                        });
                    }
                });
            });
        }
        for ((addr, _), members) in &groups {
            let catch_all: Vec<usize> = members
                .iter()
                .filter(|(_, sni)| sni.is_none())
                .map(|(i, _)| *i)
                .collect();
            let mut names: HashMap<&str, usize> = HashMap::new();
            for (i, sni) in members {
                if let Some(n) = sni {
                    match names.get(n.as_str()) {
                        Some(first) => v.index(*i, |v| {
                            v.error_at(
                                "sni",
                                format!("stream_routes[{first}] already takes \"{n}\" on {addr}"),
                            )
                        }),
                        None => {
                            names.insert(n, *i);
                        }
                    }
                }
            }
            if let [first, rest @ ..] = catch_all.as_slice() {
                for i in rest {
                    v.index(*i, |v| {
                        v.error_at(
                            "listen",
                            format!(
                                "stream_routes[{first}] already takes every connection on {addr}; give one of them an sni"
                            ),
                        )
                    });
                }
            }
        }
    });
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
                Some("") => v.error_at("id", "must not be empty"),
                Some(id) => {
                    if let Some(&first) = seen.get(id) {
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

/// What a route refers to in the rest of a configuration: the upstreams and services that
/// exist. Lets one route be checked on its own (an admin write of one route) with the same
/// rules as a whole file.
#[derive(Debug, Clone, Default)]
pub struct RouteContext {
    upstreams: HashSet<String>,
    /// Service id → whether it provides an upstream.
    services: HashMap<String, bool>,
}

impl RouteContext {
    /// The context of a validated configuration.
    pub fn of(cfg: &Config) -> RouteContext {
        let upstreams = cfg
            .upstreams
            .iter()
            .filter_map(|u| u.id.as_ref().map(|i| i.0.clone()))
            .collect();
        let mut services = HashMap::new();
        for s in &cfg.services {
            if let Some(id) = &s.id {
                services
                    .entry(id.0.clone())
                    .or_insert(s.upstream.is_some() || s.upstream_id.is_some());
            }
        }
        RouteContext {
            upstreams,
            services,
        }
    }
}

/// Checks one route (`v` points at it) in context `cx`; fills in its id (when it has none,
/// `routes[index]`) and matcher. Id uniqueness is the caller's to check.
pub(crate) fn single_route(
    r: &mut RouteConfig,
    index: usize,
    cx: &RouteContext,
    catalog: &dyn PluginCatalog,
    v: &mut Validator,
) {
    match &r.id {
        Some(Id(id)) if id.is_empty() => v.error_at("id", "must not be empty"),
        Some(_) => {}
        None => r.id = Some(Id(format!("routes[{index}]"))),
    }
    let refs = Refs {
        upstreams: &cx.upstreams,
        services: cx.services.clone(),
    };
    route(r, &refs, v);
    let env = CheckEnv {
        upstream_ids: &cx.upstreams,
    };
    plugins(&r.plugins, PluginScope::Route, catalog, &env, v);
}

/// What routes and services may refer to.
struct Refs<'a> {
    upstreams: &'a HashSet<String>,
    /// Service id → whether it provides an upstream.
    services: HashMap<String, bool>,
}

/// Checks a resource's `upstream`/`upstream_id` pair. `optional`: another source (a service)
/// provides the upstream when both are absent.
fn upstream_ref(
    inline: Option<&UpstreamConfig>,
    id: Option<&Id>,
    optional: bool,
    refs: &Refs<'_>,
    v: &mut Validator,
) {
    match (inline, id) {
        (Some(_), Some(_)) => v.error("use either upstream or upstream_id, not both"),
        (None, None) if !optional => v.error("one of upstream or upstream_id is required"),
        (None, None) => {}
        (Some(u), None) => v.field("upstream", |v| {
            if u.id.is_some() {
                v.error_at("id", "is not allowed in an inline upstream; put the upstream in upstreams and use upstream_id");
            }
            upstream(u, v);
        }),
        (None, Some(Id(id))) => {
            if !refs.upstreams.contains(id) {
                v.error_at("upstream_id", format!("upstream \"{id}\" not found"));
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

fn route(r: &mut RouteConfig, refs: &Refs<'_>, v: &mut Validator) {
    match (&r.uri, &r.uris) {
        (Some(_), Some(_)) => v.error("use either uri or uris, not both"),
        (None, None) => v.error("one of uri or uris is required"),
        (None, Some(us)) if us.is_empty() => v.error_at("uris", "must not be empty"),
        _ => {}
    }
    let mut paths = Vec::new();
    if let Some(u) = &r.uri {
        v.field("uri", |v| match PathPattern::parse(u) {
            Ok(p) => paths.push(p),
            Err(e) => v.error(e),
        });
    }
    if let Some(us) = &r.uris {
        v.field("uris", |v| {
            for (i, u) in us.iter().enumerate() {
                v.index(i, |v| match PathPattern::parse(u) {
                    Ok(p) => paths.push(p),
                    Err(e) => v.error(e),
                });
            }
        });
    }

    let mut hosts = Vec::new();
    match (&r.host, &r.hosts) {
        (Some(_), Some(_)) => v.error("use either host or hosts, not both"),
        (Some(h), None) => v.field("host", |v| match HostPattern::parse(h) {
            Ok(p) => hosts.push(p),
            Err(e) => v.error(e),
        }),
        (None, Some(hs)) => v.field("hosts", |v| {
            if hs.is_empty() {
                v.error("must not be empty; leave hosts out to match any host");
            }
            for (i, h) in hs.iter().enumerate() {
                v.index(i, |v| match HostPattern::parse(h) {
                    Ok(p) => hosts.push(p),
                    Err(e) => v.error(e),
                });
            }
        }),
        (None, None) => {}
    }

    let mut methods = MethodSet::ANY;
    if let Some(ms) = &r.methods {
        v.field("methods", |v| {
            if ms.is_empty() {
                v.error("must not be empty; leave methods out to match any method");
            }
            methods = MethodSet::empty();
            for (i, m) in ms.iter().enumerate() {
                match Method::from_config(m) {
                    Some(m) => methods = methods.with(m),
                    None => v.index(i, |v| {
                        v.error(format!(
                            "unknown method \"{m}\", expected one of {}",
                            Method::known_names().join(", ")
                        ))
                    }),
                }
            }
        });
    }

    let service_upstream = match &r.service_id {
        Some(Id(id)) => match refs.services.get(id) {
            Some(has) => *has,
            None => {
                v.error_at("service_id", format!("service \"{id}\" not found"));
                true
            }
        },
        None => false,
    };
    if r.upstream.is_none()
        && r.upstream_id.is_none()
        && r.service_id.is_some()
        && !service_upstream
    {
        v.error("one of upstream or upstream_id is required: the service has no upstream");
    } else if r.upstream.is_none() && r.upstream_id.is_none() && r.service_id.is_none() {
        v.error("one of upstream, upstream_id or service_id is required");
    } else {
        upstream_ref(r.upstream.as_ref(), r.upstream_id.as_ref(), true, refs, v);
    }

    if r.status > 1 {
        v.error_at("status", "must be 1 (enabled) or 0 (disabled)");
    }
    if let Some(t) = &r.timeout {
        v.field("timeout", |v| upstream_timeouts(t, v));
    }
    r.matcher.paths = paths;
    r.matcher.hosts = hosts;
    r.matcher.methods = methods;
}

pub(crate) fn upstream(u: &UpstreamConfig, v: &mut Validator) {
    if u.balancer != "roundrobin" {
        v.error_at(
            "type",
            format!(
                "unsupported balancer \"{}\", expected roundrobin",
                u.balancer
            ),
        );
    }
    let tls = match u.scheme.as_str() {
        "http" | "grpc" => false,
        "https" | "grpcs" => true,
        other => {
            v.error_at(
                "scheme",
                format!("unsupported scheme \"{other}\", expected http, https, grpc or grpcs"),
            );
            true
        }
    };
    if !tls && u.tls != crate::model::UpstreamTlsConfig::default() {
        v.error_at("tls", "is used with scheme https or grpcs");
    }
    match (&u.tls.cert, &u.tls.key) {
        (Some(_), None) => v.error_at("tls.key", "is required with tls.cert"),
        (None, Some(_)) => v.error_at("tls.cert", "is required with tls.key"),
        _ => {}
    }
    if let Some(sni) = &u.tls.sni
        && HostPattern::parse(sni).is_err()
        && sni.parse::<std::net::IpAddr>().is_err()
    {
        v.error_at("tls.sni", format!("invalid server name \"{sni}\""));
    }
    v.field("nodes", |v| {
        if u.nodes.0.is_empty() {
            v.error("must not be empty");
        }
        let mut seen = HashSet::new();
        for n in &u.nodes.0 {
            let a = n.authority();
            if !seen.insert(a.clone()) {
                v.error(format!("duplicate node \"{a}\""));
            }
        }
    });
    match (u.pass_host, &u.upstream_host) {
        (PassHost::Rewrite, None) => {
            v.error_at("upstream_host", "is required with pass_host: rewrite")
        }
        (PassHost::Rewrite, Some(h)) => {
            if h.is_empty() || h.bytes().any(|b| b.is_ascii_control() || b == b' ') {
                v.error_at("upstream_host", format!("invalid host \"{h}\""));
            }
        }
        (_, Some(_)) => v.error_at("upstream_host", "is only used with pass_host: rewrite"),
        (_, None) => {}
    }
    v.field("timeout", |v| upstream_timeouts(&u.timeout, v));
    if let Some(r) = u.retries
        && r > 100
    {
        v.error_at("retries", "must be at most 100");
    }
    v.field("keepalive_pool", |v| {
        let k = &u.keepalive_pool;
        if k.requests == 0 {
            v.error_at("requests", "must be >= 1");
        }
        positive(v, "idle_timeout", k.idle_timeout);
        if k.size > 100_000 {
            v.error_at("size", "must be at most 100000");
        }
    });
}

fn upstream_timeouts(t: &UpstreamTimeoutConfig, v: &mut Validator) {
    positive(v, "connect", t.connect);
    positive(v, "send", t.send);
    positive(v, "read", t.read);
}

fn timeouts(t: &TimeoutsConfig, v: &mut Validator) {
    positive(v, "client_header", t.client_header);
    positive(v, "client_body", t.client_body);
    positive(v, "client_send", t.client_send);
    positive(v, "keepalive", t.keepalive);
}

fn limits(l: &LimitsConfig, v: &mut Validator) {
    range(
        v,
        "max_request_line",
        l.max_request_line.0,
        256,
        1 << 20,
        "256 bytes",
        "1MiB",
    );
    range(
        v,
        "max_header_size",
        l.max_header_size.0,
        1 << 10,
        1 << 20,
        "1KiB",
        "1MiB",
    );
    range(
        v,
        "max_response_header_size",
        l.max_response_header_size.0,
        1 << 10,
        1 << 20,
        "1KiB",
        "1MiB",
    );
    if l.max_request_line.0 > l.max_header_size.0 {
        v.error_at(
            "max_request_line",
            "must not be larger than max_header_size",
        );
    }
    if l.max_headers == 0 || l.max_headers > MAX_HEADERS_CEILING {
        v.error_at(
            "max_headers",
            format!("must be from 1 to {MAX_HEADERS_CEILING}"),
        );
    }
    if l.max_connections == 0 {
        v.error_at("max_connections", "must be >= 1");
    }
    for (field, n) in [
        ("http2_max_streams", l.http2_max_streams),
        ("http2_pings_per_second", l.http2_pings_per_second),
        ("http2_settings_per_second", l.http2_settings_per_second),
        ("http2_resets_per_second", l.http2_resets_per_second),
    ] {
        if n == 0 {
            v.error_at(field, "must be >= 1");
        } else if n > 100_000 {
            v.error_at(field, "must be at most 100000");
        }
    }
    if l.keepalive_requests == 0 {
        v.error_at("keepalive_requests", "must be >= 1");
    }
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
