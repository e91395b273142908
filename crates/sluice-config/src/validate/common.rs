//! What the checks of each part share: unique ids, references between resources (`Refs`),
//! a resource's upstream or upstream id, a map of plugins. Below every file of `validate/`.

use std::collections::{HashMap, HashSet};

use super::upstreams::upstream;
use crate::catalog::{CheckEnv, PluginCatalog, PluginScope};
use crate::de::Id;
use crate::error::Validator;
use crate::model::{Config, UpstreamConfig};
use crate::positions::Section;

/// Checks that every item has an id and that ids are unique; returns id → position.
pub(super) fn unique_ids<'a>(
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
                Some(id) => {
                    if let Err(e) = crate::de::check_id(id) {
                        v.error_at("id", e);
                    } else if let Some(&first) = seen.get(id) {
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

/// What routes and services may refer to.
pub(super) struct Refs<'a> {
    pub(super) upstreams: &'a HashSet<String>,
    /// Named upstreams with a stream scheme (`tcp`, `udp`), by id.
    pub(super) l4_schemes: HashMap<String, String>,
    pub(super) plugin_configs: &'a HashSet<String>,
    pub(super) services: HashMap<String, ServiceRef>,
}

/// What a service gives the routes that refer to it.
#[derive(Debug, Clone)]
pub(crate) struct ServiceRef {
    /// It has an upstream.
    pub(crate) upstream: bool,
    /// It has plugins (a route without an upstream may then answer with them).
    pub(crate) plugins: bool,
    /// Its `hosts`, for its routes that name none (the valid ones; errors are the service's).
    pub(crate) hosts: Vec<sluice_router::HostPattern>,
    /// Its inline upstream's scheme, or the id of its named upstream (whose scheme is in
    /// `Refs::l4_schemes` when it is a stream one).
    pub(crate) scheme: Option<String>,
    pub(crate) upstream_id: Option<String>,
}

impl ServiceRef {
    /// The scheme of the service's upstream when it is a stream one (`tcp`, `udp`).
    pub(super) fn l4_scheme<'a>(&'a self, refs: &'a Refs<'_>) -> Option<&'a str> {
        match (&self.scheme, &self.upstream_id) {
            (Some(s), _) => Some(s.as_str()).filter(|s| matches!(*s, "tcp" | "tls" | "udp")),
            (None, Some(id)) => refs.l4_schemes.get(id).map(String::as_str),
            (None, None) => None,
        }
    }

    pub(crate) fn of(s: &crate::model::ServiceConfig) -> ServiceRef {
        ServiceRef {
            scheme: s.upstream.as_ref().map(|u| u.scheme.clone()),
            upstream_id: s.upstream_id.as_ref().map(|i| i.0.clone()),
            upstream: s.upstream.is_some() || s.upstream_id.is_some(),
            plugins: !s.plugins.is_empty(),
            hosts: s
                .hosts
                .iter()
                .flatten()
                .filter_map(|h| sluice_router::HostPattern::parse(h).ok())
                .collect(),
        }
    }
}

/// The named upstreams with a stream scheme (`tcp`, `udp`), by id.
pub(super) fn l4_schemes(cfg: &Config) -> HashMap<String, String> {
    cfg.upstreams
        .iter()
        .filter(|u| matches!(u.scheme.as_str(), "tcp" | "tls" | "udp"))
        .filter_map(|u| Some((u.id.as_ref()?.0.clone(), u.scheme.clone())))
        .collect()
}

/// Who uses an upstream: its `scheme` must suit it (`tcp` and `udp` are APISIX's schemes of
/// stream upstreams).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum UpstreamUse {
    /// An HTTP route: not `tcp` or `udp`.
    Http,
    /// A stream route of this protocol: `tcp` or `udp` as the route's, or an HTTP scheme
    /// (ignored: the route's protocol decides).
    Stream(crate::model::StreamProtocol),
    /// A service (its routes may be of either kind).
    Any,
}

/// Whether an upstream of `scheme` suits `user` (why not, when it does not).
pub(crate) fn scheme_suits(scheme: &str, user: UpstreamUse) -> Result<(), String> {
    let l4 = match scheme {
        "tcp" | "tls" => Some(crate::model::StreamProtocol::Tcp),
        "udp" => Some(crate::model::StreamProtocol::Udp),
        _ => None,
    };
    match (user, l4) {
        (UpstreamUse::Http, Some(_)) => Err(format!(
            "scheme {scheme} is for stream routes; an HTTP route's upstream is http, https, grpc or grpcs"
        )),
        (UpstreamUse::Stream(p), Some(l4)) if p != l4 => Err(format!(
            "scheme {scheme} does not match the stream route's protocol {}",
            if p == crate::model::StreamProtocol::Tcp {
                "tcp"
            } else {
                "udp"
            }
        )),
        _ => Ok(()),
    }
}

/// Checks a resource's `upstream`/`upstream_id` pair. `optional`: another source (a service)
/// provides the upstream when both are absent.
pub(super) fn upstream_ref(
    inline: Option<&UpstreamConfig>,
    id: Option<&Id>,
    optional: bool,
    user: UpstreamUse,
    refs: &Refs<'_>,
    v: &mut Validator,
) {
    let suits = |scheme: &str| scheme_suits(scheme, user);
    match (inline, id) {
        (Some(_), Some(_)) => v.error("use either upstream or upstream_id, not both"),
        (None, None) if !optional => v.error("one of upstream or upstream_id is required"),
        (None, None) => {}
        (Some(u), None) => v.field("upstream", |v| {
            if u.id.is_some() {
                v.error_at("id", "is not allowed in an inline upstream; put the upstream in upstreams and use upstream_id");
            }
            upstream(u, v);
            if let Err(e) = suits(&u.scheme) {
                v.error_at("scheme", e);
            }
        }),
        (None, Some(Id(id))) => {
            if !refs.upstreams.contains(id) {
                v.error_at("upstream_id", format!("upstream \"{id}\" not found"));
            } else if let Some(scheme) = refs.l4_schemes.get(id)
                && let Err(e) = suits(scheme)
            {
                v.error_at("upstream_id", format!("upstream \"{id}\": {e}"));
            }
        }
    }
}

pub(super) fn plugins(
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
