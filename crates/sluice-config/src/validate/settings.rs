//! Node settings: listeners, the admin API, etcd, timeouts, limits and logs.

use std::collections::HashSet;

use super::checks::{positive, range};
use crate::error::Validator;
use crate::model::{Config, LimitsConfig, MAX_HEADERS_CEILING, TimeoutsConfig};
use crate::positions::Positions;

const LOG_LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace"];

pub(super) fn check(cfg: &Config, pos: &Positions, v: &mut Validator) {
    v.field("dns", |v| {
        let d = &cfg.dns;
        v.field("resolvers", |v| {
            for (i, r) in d.resolvers.iter().enumerate() {
                let ok = r.parse::<std::net::IpAddr>().is_ok()
                    || r.parse::<std::net::SocketAddr>()
                        .is_ok_and(|a| a.port() != 0);
                if !ok {
                    v.index(i, |v| {
                        v.error(format!(
                            "invalid name server \"{r}\": expected an IP address, or ip:port"
                        ))
                    });
                }
            }
        });
        super::checks::positive(v, "timeout", d.timeout);
        if let Some(valid) = d.valid {
            super::checks::positive(v, "valid", valid);
        }
    });
    if let Some(r) = &cfg.real_ip {
        v.field("real_ip", |v| {
            if let Err(e) = sluice_core::realip::From::header(&r.header) {
                v.error_at("header", e);
            }
            v.field("from", |v| {
                if r.from.is_empty() {
                    v.error("must list at least one address or range of the proxies in front");
                }
                for (i, s) in r.from.iter().enumerate() {
                    if parse_net(s).is_none() {
                        v.index(i, |v| {
                            v.error(format!("invalid IP address or CIDR range \"{s}\""))
                        });
                    }
                }
            });
        });
    }
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
                        .or_else(|| ep.strip_prefix("https://"))
                        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
                    if !ok {
                        v.index(i, |v| {
                            v.error(format!(
                                "invalid endpoint \"{ep}\": expected http://host:port or https://host:port"
                            ))
                        });
                    } else if e.tls.is_some() && ep.starts_with("http://") {
                        v.index(i, |v| {
                            v.error(format!(
                                "\"{ep}\" is plain HTTP but etcd.tls is set: write https://"
                            ))
                        });
                    }
                }
            });
            match (&e.user, &e.password) {
                (Some(_), None) => v.error_at("password", "is required with user"),
                (None, Some(_)) => v.error_at("user", "is required with password"),
                (Some(u), _) if u.is_empty() => v.error_at("user", "must not be empty"),
                _ => {}
            }
            if let Some(t) = &e.tls
                && t.cert.is_some() != t.key.is_some()
            {
                v.error_at("tls", "cert and key go together");
            }
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
            if let Some(d) = e.stale_unready_after {
                positive(v, "stale_unready_after", d);
            }
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
        let every = cfg.log.failure_summary.0;
        if !every.is_zero() && every < std::time::Duration::from_secs(1) {
            v.error_at(
                "failure_summary",
                "must be 0 (every failure logged) or at least 1s",
            );
        } else if every > std::time::Duration::from_secs(3600) {
            v.error_at("failure_summary", "must be at most 1h");
        }
        if let Some(a) = &cfg.log.access {
            v.field("access", |v| {
                if a.path.is_empty() {
                    v.error_at("path", "must not be empty");
                }
                if a.buffer.0 > 16 << 20 {
                    v.error_at("buffer", "must be at most 16MiB");
                }
                if a.flush.0 < std::time::Duration::from_millis(10) {
                    v.error_at("flush", "must be at least 10ms");
                }
                if let Err(e) = crate::log_format::AccessFormat::parse(&a.format, &a.fields) {
                    let at = if a.fields.is_empty() {
                        "format"
                    } else {
                        "fields"
                    };
                    v.error_at(at, e);
                }
            });
        }
    });
    if let Some(st) = &cfg.status {
        v.field("status", |v| {
            let mut nets = Vec::new();
            v.field("allow", |v| {
                for (i, a) in st.allow.iter().enumerate() {
                    match parse_net(a) {
                        Some(n) => nets.push(n),
                        None => v.index(i, |v| {
                            v.error(format!(
                                "invalid address \"{a}\": expected an IP address or a CIDR range like 10.0.0.0/8"
                            ))
                        }),
                    }
                }
            });
            match &st.key {
                Some(k) if k.len() < 16 => v.error_at("key", "must be at least 16 characters"),
                Some(k) if k.bytes().any(|b| !b.is_ascii_graphic()) => {
                    v.error_at("key", "must be printable ASCII without spaces")
                }
                None if !st.listen.ip().is_loopback() && st.allow.is_empty() => v.error_at(
                    "listen",
                    format!(
                        "{} is not a loopback address: set status.key or status.allow, or metrics and the dashboard are open to anyone who can reach it",
                        st.listen
                    ),
                ),
                _ => {}
            }
            if cfg.admin.enabled && st.listen == cfg.admin.listen && st.listen.port() != 0 {
                v.error_at("listen", "is admin.listen too: give each its own port");
            }
        });
    }
    v.field("metrics", |v| {
        range(
            v,
            "max_label_values",
            u64::from(cfg.metrics.max_label_values),
            1,
            1_000_000,
            "1",
            "1000000",
        );
    });
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
    // Larger than max_body_size is taken as max_body_size (a larger body gets 413 anyway).
    if l.max_body_vars_size.0 == 0 {
        v.error_at(
            "max_body_vars_size",
            "must be > 0 (APISIX's 0, no limit, is not offered: the body is held in memory)",
        );
    }
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

/// An allow-list entry: an address or a CIDR range.
pub(crate) fn parse_net(s: &str) -> Option<ipnet::IpNet> {
    sluice_core::realip::parse_net(s)
}
