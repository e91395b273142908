//! The snapshot: everything a request needs, compiled from one configuration version.

use std::sync::Arc;

use sluice_core::{Chain, Consumer};
use sluice_router::Router;

use super::route::*;
use super::settings::*;
use crate::upstream::Upstream;

/// Everything a request needs, compiled from one configuration version. Immutable and shared
/// by all workers; a new version replaces it whole.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases with every compiled configuration.
    pub version: u64,
    /// Routes by host, path and method. Shares unchanged parts with the previous version.
    pub(crate) router: Router<Route>,
    /// Every upstream, indexed by [`UpstreamRef`]: named ones, inline ones (identical inline
    /// upstreams once), and those plugins refer to.
    pub(crate) upstreams: Arc<[Arc<Upstream>]>,
    /// Some upstream is gRPC (`scheme: grpc`): only then is an HTTP/2 stream routed before
    /// the engine takes it, to send gRPC calls their own way (`h2::dispatch`).
    pub(crate) grpc: bool,
    pub(crate) consumers: Arc<[Consumer]>,
    /// Each consumer's own plugins, by consumer index (merged into a request's from the
    /// access phase on; the consumer's configuration of a plugin wins over the route's).
    pub(crate) consumer_chains: Arc<[Chain]>,
    /// Global rules' plugins, for requests no route matches.
    pub(crate) globals: Arc<Chain>,
    pub(crate) settings: Settings,
    /// Certificates by server name.
    pub(crate) tls: Arc<crate::tls::TlsTable>,
    /// Stream (L4) routes by listen address.
    pub(crate) streams: Arc<crate::stream_table::StreamTable>,
    /// The files this configuration was compiled from (certificates, keys, CA bundles), as
    /// they were read: a reload compares them with the files now.
    pub(crate) files: Arc<[sluice_config::FileStamp]>,
}

impl Snapshot {
    /// Routes served (disabled routes are not counted).
    pub fn route_count(&self) -> usize {
        self.router.len()
    }

    /// The health of the nodes of upstream `id` as every worker sees it (the shared table),
    /// in the order of its configuration. None: no such upstream.
    pub fn upstream_health(&self, id: &str) -> Option<Vec<crate::NodeReport>> {
        let owner = format!("upstreams/{id}");
        let up = self.upstreams.iter().find(|u| *u.owner == *owner)?;
        Some(
            up.nodes
                .iter()
                .map(|n| n.health.report(&n.authority, Some(n.addr)))
                .collect(),
        )
    }

    /// Writes the upstreams' node health and load shedding families.
    pub(crate) fn render_upstreams(&self, w: &mut crate::metrics::Writer<'_>) {
        let mut seen = std::collections::HashSet::new();
        w.family(
            "sluice_upstream_node_healthy",
            "gauge",
            "Whether a node is taking requests (1) or was taken out by health checks (0).",
        );
        let mut loads = Vec::new();
        for u in self.upstreams.iter() {
            if !seen.insert(&*u.label) {
                continue;
            }
            for n in u.nodes.iter() {
                // A host name that resolves to several addresses is several nodes with one
                // authority: the address keeps their series apart.
                let address = n.addr.to_string();
                w.sample(
                    "sluice_upstream_node_healthy",
                    &[
                        ("upstream", &u.label),
                        ("node", &n.authority),
                        ("address", &address),
                    ],
                    u8::from(!n.health.is_down()),
                );
            }
            if let Some(l) = &u.limit {
                loads.push((&*u.label, l.report()));
            }
        }
        w.family(
            "sluice_upstream_inflight_requests",
            "gauge",
            "Requests in flight to an upstream that has max_inflight.",
        );
        for (label, (inflight, _, _)) in &loads {
            w.sample(
                "sluice_upstream_inflight_requests",
                &[("upstream", label)],
                inflight,
            );
        }
        w.family(
            "sluice_upstream_shed_total",
            "counter",
            "Requests refused with 503 by an upstream's max_inflight.",
        );
        for (label, (_, _, shed)) in &loads {
            w.sample("sluice_upstream_shed_total", &[("upstream", label)], shed);
        }
    }

    /// Load shedding of upstream `id`, when it has `max_inflight`: requests in flight, the
    /// cap, and requests shed so far.
    pub fn upstream_load(&self, id: &str) -> Option<(u32, u32, u64)> {
        let owner = format!("upstreams/{id}");
        let up = self.upstreams.iter().find(|u| *u.owner == *owner)?;
        up.limit.as_ref().map(|l| l.report())
    }

    /// The same configuration with its upstreams replaced (same positions).
    pub(crate) fn with_upstreams(&self, upstreams: Arc<[Arc<Upstream>]>) -> Snapshot {
        Snapshot {
            version: self.version,
            router: self.router.clone(),
            grpc: any_grpc(&upstreams),
            upstreams,
            consumers: self.consumers.clone(),
            consumer_chains: self.consumer_chains.clone(),
            globals: self.globals.clone(),
            settings: self.settings.clone(),
            tls: self.tls.clone(),
            streams: self.streams.clone(),
            files: self.files.clone(),
        }
    }

    /// The files this configuration was compiled from that hold something else now, each with
    /// its signature now (see [`sluice_config::FileStamp::changed`]).
    pub fn changed_files(&self) -> Vec<(String, sluice_config::FileSig)> {
        self.files
            .iter()
            .filter_map(|f| f.changed().map(|sig| (f.path.clone(), sig)))
            .collect()
    }

    /// Distinct upstreams: named ones plus inline ones, identical inline upstreams counted once.
    pub fn upstream_count(&self) -> usize {
        self.upstreams.len()
    }
}

/// Whether any of `upstreams` is gRPC ([`Snapshot::grpc`]).
pub(crate) fn any_grpc(upstreams: &[Arc<Upstream>]) -> bool {
    upstreams.iter().any(|u| u.grpc)
}
