//! The admin API's bodies: a resource of each kind written with PUT, POST and PATCH through
//! the control plane the admin API and etcd feed (validated against every built-in plugin,
//! then handed to a data plane that takes anything). Never panics, and what is refused
//! leaves the configuration as it was.

use std::sync::Arc;

use sluice_admin::{Control, Kind, MemoryStore, Prepared, Target};
use sluice_config::{Config, ConfigErrors, RouteChange};

/// A data plane that compiles nothing: the control plane's own checks are under test.
struct Accepting;
struct Nothing;
impl Prepared for Nothing {
    fn install(self: Box<Self>) -> u64 {
        0
    }
}
impl Target for Accepting {
    fn prepare(&self, _: &Config) -> Result<Box<dyn Prepared>, ConfigErrors> {
        Ok(Box::new(Nothing))
    }
    fn prepare_routes(&self, _: Vec<RouteChange>) -> Result<Box<dyn Prepared>, ConfigErrors> {
        Ok(Box::new(Nothing))
    }
}

const START: &str = "upstreams:\n  - id: u1\n    nodes: {\"127.0.0.1:1980\": 1}\nroutes:\n  - id: r1\n    uri: /a\n    upstream_id: u1\n";

/// One input: the first byte picks the kind and the method, the rest is the JSON body.
pub fn check(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let plugins = sluice_plugins::shared();
    let cfg = sluice_config::load_str_with(START, &*plugins).expect("the starting configuration");
    let store = Arc::new(MemoryStore::new(START));
    let Ok(control) = Control::new(store, plugins, Arc::new(Accepting), START, &cfg, 1, None)
    else {
        panic!("the starting configuration is refused");
    };
    let kind = Kind::ALL[usize::from(pick) % Kind::ALL.len()];
    let id = if kind == Kind::Secrets {
        "vault/1"
    } else {
        "r1"
    };
    let before = control.list(kind);
    let refused = match pick / 16 % 3 {
        0 => control.put(kind, id, value).is_err(),
        1 => control.create(kind, value).is_err(),
        _ => control.patch(kind, id, value).is_err(),
    };
    if refused {
        assert_eq!(control.list(kind), before, "a refused change was applied");
    }
}
