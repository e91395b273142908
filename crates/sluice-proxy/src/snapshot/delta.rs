//! Route changes compiled against a base and the snapshot in service.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use sluice_config::{ConfigErrors, RouteChange, Validator};
use sluice_core::plugin::Plugins;
use sluice_core::state::StateRegistry;

use super::build::*;
use super::compile::*;
use super::tables::*;
use super::types::*;
use crate::upstream::Upstream;

/// Route changes compiled against a [`Base`] and the snapshot in service: the next snapshot
/// (sharing all it can with the current one), and what to record in the base once installed.
pub(crate) struct Delta {
    pub(crate) snapshot: Snapshot,
    pub(super) added: UpstreamTable,
    pub(super) placed: Vec<(String, Option<Placed>)>,
    pub(super) next_order: u64,
}

/// Compiles `changes` alone: the routing table of `current` is copied by reference and only
/// the changed routes' paths in it are rebuilt; upstreams, services, consumers and global rules
/// are reused as they are. What one route change costs does not depend on how many routes
/// there are.
pub(crate) fn compile_routes(
    base: &Base,
    current: &Snapshot,
    changes: Vec<RouteChange>,
    plugins: &dyn Plugins,
    state: &StateRegistry,
) -> Result<Delta, ConfigErrors> {
    let mut v = Validator::new();
    let mut tables = Tables {
        base: &base.table,
        added: UpstreamTable::default(),
        dns: base.dns.clone(),
    };
    let mut env = BuildEnv {
        plugins,
        state,
        indexes: &base.indexes,
        tables: &mut tables,
        metrics_opt_in: base.metrics_opt_in,
        plugin_attr: &base.plugin_attr,
        plugin_metadata: &base.plugin_metadata,
        tls_ports: &base.tls_ports,
    };
    let mut router = current.router.clone();
    let mut next_order = base.next_order;
    // Placements changed by this delta, by id (a later change of the same id sees the earlier).
    let mut changed: HashMap<String, Option<Placed>> = HashMap::new();
    let mut order_of_change: Vec<String> = Vec::new();
    for change in changes {
        let id = match &change {
            RouteChange::Put { route, .. } => route.id().to_owned(),
            RouteChange::Delete(id) => id.clone(),
        };
        let previous = match changed.get(&id) {
            Some(p) => p.as_ref(),
            None => base.routes.get(&id),
        };
        if let Some(p) = previous.filter(|p| p.routed) {
            p.remove_from(&mut router);
        }
        let order = previous.map(|p| p.order);
        let next = match change {
            RouteChange::Delete(_) => None,
            RouteChange::Put { index, route } => {
                let order = order.unwrap_or_else(|| {
                    next_order += 1;
                    next_order - 1
                });
                let place = Placed::new(&route, order);
                if place.routed
                    && let Some(r) = v.field("routes", |v| {
                        v.index(index, |v| {
                            compile_route(
                                &route,
                                &Shared {
                                    services: &base.services,
                                    plugin_configs: &base.plugin_configs,
                                },
                                &base.globals,
                                &base.globals_chain,
                                &mut env,
                                v,
                            )
                        })
                    })
                {
                    router.insert(key_of(&route, order), Arc::new(r));
                }
                Some(place)
            }
        };
        if !changed.contains_key(&id) {
            order_of_change.push(id.clone());
        }
        changed.insert(id, next);
    }
    // A route's inline upstream may read files too (its `tls.ca`).
    let read = v.take_files();
    let files = if read.is_empty() {
        current.files.clone()
    } else {
        current
            .files
            .iter()
            .chain(
                read.iter()
                    .filter(|f| !current.files.iter().any(|c| c.path == f.path)),
            )
            .cloned()
            .collect()
    };
    v.finish()?;
    let added = tables.added;
    let upstreams: Arc<[Arc<Upstream>]> = if added.list.is_empty() {
        current.upstreams.clone()
    } else {
        current
            .upstreams
            .iter()
            .chain(&added.list)
            .cloned()
            .collect()
    };
    let snapshot = Snapshot {
        version: VERSION.fetch_add(1, Ordering::Relaxed),
        router,
        grpc: super::types::any_grpc(&upstreams),
        upstreams,
        consumers: current.consumers.clone(),
        consumer_chains: current.consumer_chains.clone(),
        globals: current.globals.clone(),
        settings: current.settings.clone(),
        tls: current.tls.clone(),
        streams: current.streams.clone(),
        files,
    };
    let placed = order_of_change
        .into_iter()
        .map(|id| {
            let p = changed.remove(&id).flatten();
            (id, p)
        })
        .collect();
    Ok(Delta {
        snapshot,
        added,
        placed,
        next_order,
    })
}

impl Base {
    /// Records an installed delta.
    pub(crate) fn apply(&mut self, delta_rest: DeltaRest) {
        self.table.extend(delta_rest.added);
        for (id, p) in delta_rest.placed {
            match p {
                Some(p) => {
                    self.routes.insert(id, p);
                }
                None => {
                    self.routes.remove(&id);
                }
            }
        }
        self.next_order = delta_rest.next_order;
    }
}

/// The part of a [`Delta`] the base keeps once its snapshot is in service.
pub(crate) struct DeltaRest {
    pub(super) added: UpstreamTable,
    pub(super) placed: Vec<(String, Option<Placed>)>,
    pub(super) next_order: u64,
}

impl Delta {
    /// Splits off the snapshot.
    pub(crate) fn split(self) -> (Snapshot, DeltaRest) {
        (
            self.snapshot,
            DeltaRest {
                added: self.added,
                placed: self.placed,
                next_order: self.next_order,
            },
        )
    }
}
