//! A compiled route: its chain, upstream, conditions and caps.

use std::sync::Arc;

use sluice_core::{Chain, UpstreamRef};

use crate::upstream::{Upstream, UpstreamTimeouts};

/// A compiled route.
#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) id: Box<str>,
    pub(crate) upstream: UpstreamRef,
    pub(crate) websocket: bool,
    /// The route's own upstream timeouts, overriding the upstream's.
    pub(crate) timeouts: Option<UpstreamTimeouts>,
    /// Service, route and global-rule plugins, merged and sorted; shared by every route that
    /// has global rules' alone (most of 100,000 routes: 112 bytes and up to seven allocations
    /// each otherwise).
    pub(crate) chain: Arc<Chain>,
    /// `max_inflight`: the process-wide cap.
    pub(crate) limit: Option<Arc<crate::upstream::shed::Limit>>,
    /// Its slot in the metrics' route label.
    pub(crate) metric: crate::metrics::Slot,
    /// What few routes have: a metrics label, a service.
    pub(crate) cold: Option<Box<RouteCold>>,
    /// Conditions beyond host, method and path (`vars`, `remote_addrs`); most routes have none.
    pub(crate) admit: Option<Box<Admit>>,
}

/// What a route asks of a request besides its host, method and path.
#[derive(Debug)]
pub(crate) struct Admit {
    pub(super) vars: sluice_core::expr::Expr,
    pub(super) remotes: Vec<ipnet::IpNet>,
    /// `vars` read the body (`post_arg_*`): it is read before they are checked.
    pub(super) body: bool,
}

/// The parts of a route most routes do not have, out of line (a route is one of 100,000).
#[derive(Debug, Default)]
pub(crate) struct RouteCold {
    /// Its label in metrics when not its id (`prometheus: {prefer_name: true}` and a name).
    pub(super) label: Option<Box<str>>,
    /// Its service's id (consumer-restriction's `service_id`).
    pub(super) service: Option<Box<str>>,
    /// Its `name` and its service's (`route_name`, `service_name`).
    pub(super) name: Option<Box<str>>,
    pub(super) service_name: Option<Box<str>>,
    /// Its and its service's configuration, when its plugins read them.
    pub(super) documents: Option<Box<sluice_core::ctx::Documents>>,
}

impl Route {
    /// Its label in metrics when not its id.
    pub(crate) fn label(&self) -> Option<&str> {
        self.cold.as_ref()?.label.as_deref()
    }

    /// Its and its service's configuration, when its plugins read them.
    pub(crate) fn documents(&self) -> Option<&sluice_core::ctx::Documents> {
        self.cold.as_ref()?.documents.as_deref()
    }

    /// Its service's id, its name and its service's, as variables read them.
    pub(crate) fn names(&self) -> sluice_core::ctx::RouteNames<'_> {
        let Some(c) = self.cold.as_deref() else {
            return Default::default();
        };
        sluice_core::ctx::RouteNames {
            service_id: c.service.as_deref().unwrap_or(""),
            name: c.name.as_deref().unwrap_or(""),
            service_name: c.service_name.as_deref().unwrap_or(""),
        }
    }
}

impl Route {
    /// True when its `vars` read the request body, which must be read before they are checked.
    #[inline]
    pub(crate) fn vars_need_body(&self) -> bool {
        self.admit.as_ref().is_some_and(|a| a.body)
    }

    /// Whether the route takes this request: true unless it has conditions that fail.
    #[inline]
    pub(crate) fn admits(
        &self,
        req: &sluice_core::http::RequestHead,
        env: &sluice_core::expr::ConnEnv<'_>,
    ) -> bool {
        let Some(a) = &self.admit else {
            return true;
        };
        let remote_ok = a.remotes.is_empty() || {
            let ip = match env.client.ip() {
                std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(env.client.ip(), Into::into),
                v4 => v4,
            };
            a.remotes.iter().any(|n| n.contains(&ip))
        };
        remote_ok && a.vars.matches(req, env)
    }
}

impl Route {
    /// Admits a request under the route's and the upstream's `max_inflight`; Err: shed.
    #[inline]
    pub(crate) fn admit(&self, up: &Upstream) -> Result<Admission, crate::error::Error> {
        if self.limit.is_none() && up.limit.is_none() {
            return Ok(Admission(None, None));
        }
        let shed = || crate::error::Error::new(crate::error::Kind::Overloaded);
        let route = match &self.limit {
            Some(l) => Some(l.admit().ok_or_else(shed)?),
            None => None,
        };
        let upstream = match &up.limit {
            Some(l) => Some(l.admit().ok_or_else(shed)?),
            None => None,
        };
        Ok(Admission(route, upstream))
    }
}

/// A request counted against `max_inflight` caps until dropped.
#[derive(Debug)]
#[allow(dead_code)] // held for their `Drop`
pub(crate) struct Admission(
    Option<crate::upstream::shed::Admitted>,
    Option<crate::upstream::shed::Admitted>,
);
