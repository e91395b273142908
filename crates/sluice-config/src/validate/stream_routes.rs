//! L4 stream routes: listen addresses, SNI, protocols and the plugins that work there.

use std::collections::{HashMap, HashSet};

use sluice_router::HostPattern;

use super::{Refs, positive, upstream_ref};
use crate::catalog::{CheckEnv, PluginCatalog, PluginScope};
use crate::de::Id;
use crate::error::Validator;
use crate::load::Positions;
use crate::model::{Config, StreamProtocol};

/// Plugins that work on stream routes (connection-level).
pub(crate) const STREAM_PLUGINS: &[&str] = &["ip-restriction", "limit-conn"];

pub(super) fn check(
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
                    Some(Id(id)) => match (crate::de::check_id(id), ids.get(id)) {
                        (Err(e), _) => v.error_at("id", e),
                        (Ok(()), Some(&first)) if first < i => v.error_at(
                            "id",
                            format!(
                                "duplicate stream route id \"{id}\" (first at stream_routes[{first}])"
                            ),
                        ),
                        (Ok(()), _) => {
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
                upstream_ref(r.upstream.as_deref(), r.upstream_id.as_ref(), false, refs, v);
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
