//! Certificates: server names, the default certificate, client verification.

use std::collections::HashMap;

use sluice_router::HostPattern;

use super::common::unique_ids;
use crate::error::Validator;
use crate::model::Config;
use crate::positions::Positions;

/// Deepest `client.depth`: OpenSSL's default verify depth.
const MAX_DEPTH: u64 = 100;

pub(super) fn check(cfg: &Config, pos: &Positions, v: &mut Validator) {
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
                if s.status.is_some_and(|st| st > 1) {
                    v.error_at("status", "must be 1 (served) or 0 (kept, not served)");
                }
                match s.kind.as_deref() {
                    None | Some("server") => {}
                    Some("client") => v.error_at(
                        "type",
                        "client certificates (presented to upstreams) are given in the upstream's tls.client_cert and tls.client_key",
                    ),
                    Some(other) => {
                        v.error_at("type", format!("unknown type \"{other}\", expected server"))
                    }
                }
                if !s.served() {
                    // Not served: its names do not compete with the others'.
                    return;
                }
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
                if let Some(c) = &s.client {
                    if c.ca.trim().is_empty() {
                        v.error_at("client.ca", "is required");
                    }
                    if let Some(d) = c.depth
                        && !(1..=MAX_DEPTH).contains(&d)
                    {
                        v.error_at(
                            "client.depth",
                            format!(
                                "must be from 1 (signed by a CA in client.ca) to {MAX_DEPTH}, got {d}"
                            ),
                        );
                    }
                    if c.skip_mtls_uri_regex.as_ref().is_some_and(Vec::is_empty) {
                        v.error_at(
                            "client.skip_mtls_uri_regex",
                            "must list at least one regex (or leave it out)",
                        );
                    }
                }
                if let Some(list) = &s.ssl_protocols {
                    if list.is_empty() {
                        v.error_at("ssl_protocols", "must name at least one of TLSv1.2, TLSv1.3");
                    }
                    v.field("ssl_protocols", |v| {
                        for (k, p) in list.iter().enumerate() {
                            v.index(k, |v| match p.as_str() {
                                "TLSv1.2" | "TLSv1.3" => {}
                                "TLSv1" | "TLSv1.1" => v.error(format!(
                                    "{p} is not supported: Sluice speaks TLS 1.2 and 1.3 (rustls has no older version)"
                                )),
                                other => v.error(format!(
                                    "unknown protocol \"{other}\", expected TLSv1.2 or TLSv1.3"
                                )),
                            });
                        }
                    });
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
