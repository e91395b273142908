//! Checks that need more than the shape of a value: ranges, cross-field rules and references
//! between resources. Every error is recorded with its path; nothing stops at the first.

use std::collections::{HashMap, HashSet};

use sluice_router::{HostPattern, Method, MethodSet, PathPattern};

use crate::de::{Dur, Id};
use crate::error::Validator;
use crate::load::Positions;
use crate::model::{
    Config, LimitsConfig, MAX_HEADERS_CEILING, PassHost, RouteConfig, TimeoutsConfig,
    UpstreamConfig, UpstreamTimeoutConfig,
};

const LOG_LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace"];

pub(crate) fn validate(cfg: &mut Config, pos: &Positions, v: &mut Validator) {
    v.field("listen", |v| {
        if cfg.listen.is_empty() && !pos.listen_failed {
            v.error("must not be empty");
        }
        let mut seen = HashSet::new();
        for (i, l) in cfg.listen.iter().enumerate() {
            v.index(i, |v| {
                if l.tls {
                    v.error_at("tls", "TLS listeners are not available yet");
                }
                if l.http2 {
                    v.error_at("http2", "HTTP/2 listeners are not available yet");
                }
                if !seen.insert(l.addr) {
                    v.error(format!("duplicate listen address {}", l.addr));
                }
            });
        }
    });
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

    let mut upstream_ids: HashMap<String, usize> = HashMap::new();
    v.field("upstreams", |v| {
        for (u, &i) in cfg.upstreams.iter().zip(&pos.upstreams) {
            v.index(i, |v| {
                match &u.id {
                    None => v.error_at("id", "is required"),
                    Some(Id(id)) if id.is_empty() => v.error_at("id", "must not be empty"),
                    Some(Id(id)) => {
                        if let Some(first) = upstream_ids.insert(id.clone(), i) {
                            upstream_ids.insert(id.clone(), first);
                            v.error_at(
                                "id",
                                format!(
                                    "duplicate upstream id \"{id}\" (first at upstreams[{first}])"
                                ),
                            );
                        }
                    }
                }
                upstream(u, v);
            });
        }
    });

    let failed_upstreams: HashSet<&str> =
        pos.failed_upstream_ids.iter().map(String::as_str).collect();
    let mut route_ids: HashMap<String, usize> = pos
        .failed_route_ids
        .iter()
        .map(|(id, i)| (id.clone(), *i))
        .collect();
    v.field("routes", |v| {
        for (r, &i) in cfg.routes.iter_mut().zip(&pos.routes) {
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
                route(r, &upstream_ids, &failed_upstreams, v);
            });
        }
    });
}

fn route(
    r: &mut RouteConfig,
    upstream_ids: &HashMap<String, usize>,
    failed_upstreams: &HashSet<&str>,
    v: &mut Validator,
) {
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

    match (&r.upstream, &r.upstream_id) {
        (Some(_), Some(_)) => v.error("use either upstream or upstream_id, not both"),
        (None, None) => v.error("one of upstream or upstream_id is required"),
        (Some(u), None) => v.field("upstream", |v| {
            if u.id.is_some() {
                v.error_at("id", "is not allowed in an inline upstream; put the upstream in upstreams and use upstream_id");
            }
            upstream(u, v);
        }),
        (None, Some(Id(id))) => {
            if !upstream_ids.contains_key(id) && !failed_upstreams.contains(id.as_str()) {
                v.error_at("upstream_id", format!("upstream \"{id}\" not found"));
            }
        }
    }

    if r.status > 1 {
        v.error_at("status", "must be 1 (enabled) or 0 (disabled)");
    }
    if let Some(t) = &r.timeout {
        v.field("timeout", |v| upstream_timeouts(t, v));
    }
    v.field("plugins", |v| {
        for name in r.plugins.keys() {
            v.error_at(name, "unknown plugin");
        }
    });
    r.matcher.paths = paths;
    r.matcher.hosts = hosts;
    r.matcher.methods = methods;
}

fn upstream(u: &UpstreamConfig, v: &mut Validator) {
    if u.balancer != "roundrobin" {
        v.error_at(
            "type",
            format!(
                "unsupported balancer \"{}\", expected roundrobin",
                u.balancer
            ),
        );
    }
    if u.scheme != "http" {
        v.error_at(
            "scheme",
            format!("unsupported scheme \"{}\", expected http", u.scheme),
        );
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
