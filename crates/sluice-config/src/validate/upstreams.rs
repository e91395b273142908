//! Upstreams: balancer, scheme and TLS, nodes, host passing, timeouts, retries and pools.

use std::collections::HashSet;

use sluice_router::HostPattern;

use super::checks::positive;
use crate::error::Validator;
use crate::model::{PassHost, UpstreamConfig, UpstreamTimeoutConfig};

pub(crate) fn upstream(u: &UpstreamConfig, v: &mut Validator) {
    // `type` and the fields of its algorithm (`hash_on`, `key`) are the balancer's to check:
    // each balancer checks its own when the data plane compiles the upstream.
    if let Some(c) = &u.checks {
        v.field("checks", |v| checks(c, v));
    }
    if let Some(b) = &u.retry_budget {
        v.field("retry_budget", |v| {
            if !(0.0..=1.0).contains(&b.ratio) {
                v.error_at(
                    "ratio",
                    format!(
                        "must be from 0 to 1 (a share of requests), got {}",
                        crate::parse::short_number(&b.ratio.to_string())
                    ),
                );
            }
            if b.min_per_second > 1_000_000 {
                v.error_at("min_per_second", "must be at most 1000000");
            }
        });
    }
    if u.max_inflight == Some(0) {
        v.error_at("max_inflight", "must be >= 1 (leave it out for no limit)");
    }
    let tls = match u.scheme.as_str() {
        // tcp and udp: APISIX's schemes of stream upstreams (who may use them is checked
        // where the upstream is used).
        "http" | "grpc" | "tcp" | "udp" => false,
        // tls: a stream route's TCP to its nodes, over TLS.
        "https" | "grpcs" | "tls" => true,
        other => {
            v.error_at(
                "scheme",
                format!(
                    "unsupported scheme \"{other}\", expected http, https, grpc or grpcs (tcp, tls or udp for stream routes)"
                ),
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
    // `discovery_type`, `service_name` and the node-wide `discovery` settings are the
    // discovery type's to check: each checks its own when the data plane compiles the upstream.
    v.field("nodes", |v| {
        if u.nodes.0.is_empty() && u.discovery_type.is_none() {
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

fn statuses(v: &mut Validator, field: &str, list: &[u16]) {
    v.field(field, |v| {
        for (i, s) in list.iter().enumerate() {
            if !(200..=599).contains(s) {
                v.index(i, |v| {
                    v.error(format!("must be a status from 200 to 599, got {s}"))
                });
            }
        }
    });
}

fn count(v: &mut Validator, field: &str, n: u32) {
    if !(1..=254).contains(&n) {
        v.error_at(field, format!("must be from 1 to 254, got {n}"));
    }
}

fn check_kind(v: &mut Validator, kind: &str) {
    if !matches!(kind, "http" | "https" | "tcp") {
        v.error_at(
            "type",
            format!("unsupported check type \"{kind}\", expected http, https or tcp"),
        );
    }
}

fn checks(c: &crate::model::ChecksConfig, v: &mut Validator) {
    if let Some(a) = &c.active {
        v.field("active", |v| {
            check_kind(v, &a.kind);
            positive(v, "timeout", a.timeout);
            if a.concurrency == 0 {
                v.error_at("concurrency", "must be >= 1");
            }
            if !a.http_path.starts_with('/')
                || a.http_path
                    .bytes()
                    .any(|b| b.is_ascii_control() || b == b' ')
            {
                v.error_at(
                    "http_path",
                    format!("must be a path starting with /, got \"{}\"", a.http_path),
                );
            }
            if a.port == Some(0) {
                v.error_at("port", "must be from 1 to 65535");
            }
            if let Some(h) = &a.host
                && (h.is_empty() || h.bytes().any(|b| b.is_ascii_control() || b == b' '))
            {
                v.error_at("host", format!("invalid host \"{h}\""));
            }
            v.field("req_headers", |v| {
                for (i, h) in a.req_headers.iter().enumerate() {
                    let ok = h.split_once(':').is_some_and(|(n, val)| {
                        !n.is_empty()
                            && n.bytes().all(|b| {
                                b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
                            })
                            && !val.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
                    });
                    if !ok {
                        v.index(i, |v| {
                            v.error(format!("must be \"Name: value\", got \"{h}\""))
                        });
                    }
                }
            });
            v.field("healthy", |v| {
                positive(v, "interval", a.healthy.interval);
                statuses(v, "http_statuses", &a.healthy.http_statuses);
                count(v, "successes", a.healthy.successes);
            });
            v.field("unhealthy", |v| {
                positive(v, "interval", a.unhealthy.interval);
                statuses(v, "http_statuses", &a.unhealthy.http_statuses);
                count(v, "http_failures", a.unhealthy.http_failures);
                count(v, "tcp_failures", a.unhealthy.tcp_failures);
                count(v, "timeouts", a.unhealthy.timeouts);
            });
        });
    }
    if let Some(p) = &c.passive {
        v.field("passive", |v| {
            check_kind(v, &p.kind);
            v.field("healthy", |v| {
                statuses(v, "http_statuses", &p.healthy.http_statuses);
                count(v, "successes", p.healthy.successes);
            });
            v.field("unhealthy", |v| {
                statuses(v, "http_statuses", &p.unhealthy.http_statuses);
                count(v, "http_failures", p.unhealthy.http_failures);
                count(v, "tcp_failures", p.unhealthy.tcp_failures);
                count(v, "timeouts", p.unhealthy.timeouts);
            });
        });
    }
}

pub(super) fn upstream_timeouts(t: &UpstreamTimeoutConfig, v: &mut Validator) {
    positive(v, "connect", t.connect);
    positive(v, "send", t.send);
    positive(v, "read", t.read);
}

/// Checks an upstream given inside a plugin configuration (traffic-split): an id that must
/// exist, or an inline upstream with the same rules as anywhere else.
pub fn check_upstream_value(
    value: &serde_json::Value,
    env: &crate::catalog::CheckEnv<'_>,
    v: &mut Validator,
) -> bool {
    use serde_json::Value;
    match value {
        Value::String(id) => {
            let ok = env.upstream_ids.contains(id);
            if !ok {
                v.error(format!("upstream \"{id}\" not found"));
            }
            ok
        }
        Value::Number(n) => {
            let id = n.to_string();
            let ok = env.upstream_ids.contains(&id);
            if !ok {
                v.error(format!("upstream \"{id}\" not found"));
            }
            ok
        }
        _ => match crate::parse::parse::<crate::model::UpstreamConfig>(v, value.clone()) {
            Some(u) => {
                let before = v.has_errors();
                upstream(&u, v);
                !v.has_errors() || before
            }
            None => false,
        },
    }
}
