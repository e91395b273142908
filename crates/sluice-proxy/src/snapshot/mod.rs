//! The immutable runtime configuration every request reads, and its compilation from a
//! validated [`Config`]. Everything that can fail fails here, never on a request.

mod build;
mod compile;
mod delta;
mod route;
mod settings;
mod tables;
mod types;

pub use compile::compile;
pub(crate) use compile::{Base, compile_full};
pub(crate) use delta::{DeltaRest, compile_routes};
pub(crate) use route::{Admission, Route};
pub(crate) use settings::{Http2Limits, Settings};
pub use types::Snapshot;

#[cfg(test)]
mod tests {

    use super::compile::*;
    use super::delta::*;

    use super::types::*;
    use sluice_config::RouteChange;
    use sluice_core::plugin::PluginFactory;
    use sluice_core::plugin::Plugins;
    use sluice_core::state::StateRegistry;
    use sluice_router::Method;

    #[derive(Debug)]
    struct NoPlugins;

    impl Plugins for NoPlugins {
        fn get(&self, _: &str) -> Option<&dyn PluginFactory> {
            None
        }
        fn all(&self) -> Vec<&dyn PluginFactory> {
            Vec::new()
        }
    }

    fn routed(s: &Snapshot, host: &str, path: &str) -> Option<String> {
        s.router
            .find(host.as_bytes(), Method::Get, path.as_bytes())
            .map(|r| r.id.to_string())
    }

    /// The per-route table keeps a route's path patterns as text only (`Placed`): a change
    /// must still take each of its paths, on each of its hosts, out of the routing table.
    #[test]
    fn a_changed_route_leaves_every_path_and_host_it_had() {
        let cfg = sluice_config::load_str(
            r#"
upstreams: [{id: u, nodes: {"127.0.0.1:1980": 1}}]
routes:
  - {id: r1, uris: ["/a", "/b/*", "/c/:name/d"], hosts: ["x.test", "*.y.test"], upstream_id: u}
  - {id: r2, uri: "/b/*", upstream_id: u}
"#,
        )
        .unwrap();
        let state = StateRegistry::default();
        let (snap, base) = compile_full(&cfg, &NoPlugins, &state).unwrap();
        assert_eq!(routed(&snap, "x.test", "/a").as_deref(), Some("r1"));
        assert_eq!(routed(&snap, "z.y.test", "/c/n/d").as_deref(), Some("r1"));
        assert_eq!(routed(&snap, "x.test", "/b/q").as_deref(), Some("r1"));
        assert_eq!(routed(&snap, "other.test", "/b/q").as_deref(), Some("r2"));

        let changed = sluice_config::load_route_with(
            serde_json::json!({"id": "r1", "uri": "/e", "upstream_id": "u"}),
            0,
            &sluice_config::RouteContext::of(&cfg),
            &sluice_config::NoPlugins,
        )
        .unwrap();
        let change = RouteChange::Put {
            index: 0,
            route: Box::new(changed),
        };
        let (next, _) = compile_routes(&base, &snap, vec![change], &NoPlugins, &state)
            .unwrap()
            .split();
        for (host, path) in [
            ("x.test", "/a"),
            ("z.y.test", "/c/n/d"),
            ("x.test", "/c/n/d"),
        ] {
            assert_eq!(routed(&next, host, path), None, "{host}{path}");
        }
        assert_eq!(routed(&next, "x.test", "/b/q").as_deref(), Some("r2"));
        assert_eq!(routed(&next, "any.test", "/e").as_deref(), Some("r1"));
        assert_eq!(next.router.len(), 2);
        // The table in service is untouched.
        assert_eq!(routed(&snap, "x.test", "/a").as_deref(), Some("r1"));
    }
}
