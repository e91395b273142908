//! L4 stream routes: listen addresses, SNI, protocols and the plugins that work there.

use std::collections::{HashMap, HashSet};

use sluice_router::HostPattern;

use super::checks::positive;
use super::common::{Refs, upstream_ref};
use crate::catalog::{CheckEnv, PluginCatalog, PluginScope};
use crate::de::Id;
use crate::error::Validator;
use crate::model::{Config, StreamProtocol};
use crate::positions::Positions;

pub(super) fn check(
    cfg: &mut Config,
    pos: &Positions,
    refs: &Refs<'_>,
    catalog: &dyn PluginCatalog,
    env: &CheckEnv<'_>,
    v: &mut Validator,
) {
    let http: HashSet<std::net::SocketAddr> = cfg.listen.iter().map(|l| l.addr).collect();
    let stream_proxy = cfg.stream_proxy.clone();
    v.field("stream_proxy", |v| {
        for (proto, list) in [("tcp", &stream_proxy.tcp), ("udp", &stream_proxy.udp)] {
            v.field(proto, |v| {
                for (j, l) in list.iter().enumerate() {
                    v.index(j, |v| {
                        if l.tls {
                            v.error_at(
                                "tls",
                                "is not supported here: set tls: true on the stream routes that terminate TLS (with listen or server_port)",
                            );
                        }
                        if l.http2 {
                            v.error_at("http2", "is for HTTP listen addresses");
                        }
                        if http.contains(&l.addr) {
                            v.error(format!("{} is an HTTP listen address (listen)", l.addr));
                        }
                    });
                }
            });
        }
    });
    let admin = cfg.admin.enabled.then_some(cfg.admin.listen);
    let has_ssls = !cfg.ssls.is_empty() || !pos.ssls.failed_ids.is_empty();
    let mut ids: HashMap<String, usize> = pos
        .stream_routes
        .failed_ids
        .iter()
        .map(|(id, i)| (id.clone(), *i))
        .collect();
    // Per listen address and protocol: the routes on it (position, the field that gave the
    // address, sni, remote_addr).
    type Group = Vec<(usize, &'static str, Option<String>, Option<String>)>;
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
                // The node's stream_proxy addresses of this route's protocol.
                let proxy: Vec<std::net::SocketAddr> = match r.protocol {
                    StreamProtocol::Tcp => &stream_proxy.tcp,
                    StreamProtocol::Udp => &stream_proxy.udp,
                }
                .iter()
                .map(|l| l.addr)
                .collect();
                let (field, addrs) = match (&r.listen, r.server_port, &r.server_addr) {
                    (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                        v.error("use either listen or server_addr/server_port, not both");
                        ("listen", Vec::new())
                    }
                    (Some(l), None, None) => (
                        "listen",
                        crate::model::parse_listen_addr(l)
                            .map_err(|e| v.error_at("listen", e))
                            .into_iter()
                            .collect(),
                    ),
                    (None, Some(0), _) => {
                        v.error_at("server_port", "must be from 1 to 65535");
                        ("server_port", Vec::new())
                    }
                    (None, Some(port), host) => {
                        let ip = match host.as_deref().map(str::parse::<std::net::IpAddr>) {
                            None => Ok(None),
                            Some(Ok(ip)) => Ok(Some(ip)),
                            Some(Err(_)) => Err(()),
                        };
                        match ip {
                            Err(()) => {
                                v.error_at(
                                    "server_addr",
                                    format!(
                                        "invalid IP address \"{}\"",
                                        host.as_deref().unwrap_or_default()
                                    ),
                                );
                                ("server_addr", Vec::new())
                            }
                            Ok(ip) => {
                                // The stream_proxy addresses it names, as APISIX matches them;
                                // else an address of its own.
                                let named: Vec<_> = proxy
                                    .iter()
                                    .copied()
                                    .filter(|a| {
                                        a.port() == port
                                            && ip.is_none_or(|ip| {
                                                a.ip() == ip || a.ip().is_unspecified()
                                            })
                                    })
                                    .collect();
                                let own = std::net::SocketAddr::new(
                                    ip.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into()),
                                    port,
                                );
                                let addrs = if named.is_empty() { vec![own] } else { named };
                                ("server_port", addrs)
                            }
                        }
                    }
                    (None, None, Some(_)) => {
                        v.error_at("server_port", "is required with server_addr");
                        ("server_port", Vec::new())
                    }
                    (None, None, None) if !proxy.is_empty() => ("listen", proxy.clone()),
                    (None, None, None) => {
                        v.error(
                            "one of listen or server_port is required (or the node's stream_proxy addresses): Sluice listens where the route or stream_proxy says",
                        );
                        ("listen", Vec::new())
                    }
                };
                if let Some(ra) = &r.remote_addr {
                    match ra
                        .parse::<ipnet::IpNet>()
                        .or_else(|_| ra.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    {
                        Ok(n) => r.remote = Some(n),
                        Err(_) => v.error_at(
                            "remote_addr",
                            format!("invalid IP address or CIDR range \"{ra}\""),
                        ),
                    }
                }
                for &addr in &addrs {
                    if http.contains(&addr) {
                        v.error_at(field, format!("{addr} is an HTTP listen address (listen)"));
                    } else if admin == Some(addr) && r.protocol == StreamProtocol::Tcp {
                        v.error_at(field, format!("{addr} is the admin API's address"));
                    } else {
                        groups.entry((addr, r.protocol)).or_default().push((
                            i,
                            field,
                            r.sni.as_ref().map(|n| n.to_ascii_lowercase()),
                            r.remote.map(|n| n.to_string()),
                        ));
                    }
                }
                r.addrs = addrs;
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
                let own = r.upstream.is_some() || r.upstream_id.is_some();
                if let Some(s) = r.service_id.as_ref().and_then(|Id(id)| refs.services.get(id))
                    && !own
                    && let Some(scheme) = s.l4_scheme(refs)
                    && let Err(e) =
                        super::common::scheme_suits(scheme, super::common::UpstreamUse::Stream(r.protocol))
                {
                    v.error_at("service_id", format!("the service's upstream: {e}"));
                }
                let service = r.service_id.as_ref().map(|Id(id)| match refs.services.get(id) {
                    Some(s) => s.upstream,
                    None => {
                        v.error_at("service_id", format!("service \"{id}\" not found"));
                        true
                    }
                });
                match service {
                    Some(false) if r.upstream.is_none() && r.upstream_id.is_none() => v.error(
                        "one of upstream or upstream_id is required: the service has no upstream",
                    ),
                    _ => upstream_ref(
                        r.upstream.as_deref(),
                        r.upstream_id.as_ref(),
                        service.is_some(),
                        super::common::UpstreamUse::Stream(r.protocol),
                        refs,
                        v,
                    ),
                }
                if r.upstream.as_ref().is_some_and(|u| u.http2) {
                    v.error_at(
                        "upstream.http2",
                        "is for HTTP routes: a stream route forwards bytes as they are",
                    );
                }
                // The plugins that declare a stream side (APISIX's `preread` phase).
                v.field("plugins", |v| {
                    for (name, config) in &r.plugins {
                        v.field(name, |v| {
                            let on_stream = catalog.stream_plugins();
                            if on_stream.contains(&name.as_str()) {
                                catalog.check_plugin(
                                    name,
                                    config,
                                    PluginScope::StreamRoute,
                                    env,
                                    v,
                                );
                            } else {
                                v.error(format!(
                                    "does not work on stream routes (these do: {})",
                                    on_stream.join(", ")
                                ));
                            }
                        });
                    }
                });
            });
        }
        // On one address, routes differ by sni and remote_addr; one may have neither and
        // take the rest.
        for ((addr, _), members) in &groups {
            let mut seen: HashMap<(Option<&str>, Option<&str>), usize> = HashMap::new();
            for (i, field, sni, remote) in members {
                let key = (sni.as_deref(), remote.as_deref());
                let Some(&first) = seen.get(&key) else {
                    seen.insert(key, *i);
                    continue;
                };
                v.index(*i, |v| match key {
                    (Some(n), _) => v.error_at(
                        "sni",
                        format!("stream_routes[{first}] already takes \"{n}\" on {addr}"),
                    ),
                    (None, Some(r)) => v.error_at(
                        "remote_addr",
                        format!("stream_routes[{first}] already takes {r} on {addr}"),
                    ),
                    (None, None) => v.error_at(
                        field,
                        format!(
                            "stream_routes[{first}] already takes every connection on {addr}; give one of them an sni or a remote_addr"
                        ),
                    ),
                });
            }
        }
    });
}
