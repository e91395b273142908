//! Upstreams: balancer, scheme and TLS, nodes, host passing, timeouts, retries and pools.

use std::collections::HashSet;

use sluice_router::HostPattern;

use super::positive;
use crate::error::Validator;
use crate::model::{PassHost, UpstreamConfig, UpstreamTimeoutConfig};

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

pub(super) fn upstream_timeouts(t: &UpstreamTimeoutConfig, v: &mut Validator) {
    positive(v, "connect", t.connect);
    positive(v, "send", t.send);
    positive(v, "read", t.read);
}
