//! `discovery_type: dns`: the nodes are what `service_name` resolves to, `host:port` (A and
//! AAAA records) or an SRV name (`_service._proto.domain`, each target with its port, weight
//! and priority).

use serde_json::Value;
use sluice_config::Validator;

use super::{Discovery, NodeOf};
use crate::upstream::discover::{Query, Target};

pub(super) static KIND: Dns = Dns;

/// DNS as a registry; it takes no node-wide settings (the resolver is `dns`).
pub(super) struct Dns;

impl Discovery for Dns {
    fn name(&self) -> &'static str {
        "dns"
    }

    fn nodes_are(&self) -> &'static str {
        "what service_name resolves to"
    }

    fn query(
        &self,
        service: &str,
        _settings: Option<&Value>,
        v: &mut Validator,
    ) -> Option<(Query, Option<u16>)> {
        if !service_name_ok(service) {
            v.error_at(
                "service_name",
                format!(
                    "invalid name \"{service}\": expected host:port, or an SRV name like _http._tcp.example.com"
                ),
            );
            return None;
        }
        Some(match service.rsplit_once(':') {
            Some((h, p)) => (Query::Host(h.to_owned()), p.parse().ok()),
            None => (Query::Srv(service.to_owned()), None),
        })
    }

    /// Named by the SRV target (or the host asked), on its port; health per address.
    fn node_of(&self, _service: &str, query: &Query, t: &Target, port: u16) -> NodeOf {
        let host = t.name.clone().unwrap_or_else(|| match query {
            Query::Host(h) | Query::Srv(h) => h.clone(),
            Query::Registry(l) => l.label(),
        });
        let authority = format!("{host}:{port}");
        NodeOf {
            health_key: format!("{authority}@{}", t.ip),
            host,
            authority,
        }
    }
}

/// `host:port` or an SRV name (`_service._proto.domain`).
fn service_name_ok(name: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    };
    let (host, port) = match name.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (name, None),
    };
    let host_ok = !host.is_empty() && host.len() <= 253 && host.split('.').all(label_ok);
    match port {
        Some(p) => host_ok && p.parse::<u16>().is_ok_and(|p| p > 0),
        None => host_ok && name.starts_with('_'),
    }
}

