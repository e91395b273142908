//! Builds a plugin the way the engine does and runs its phases on a parsed request, with no
//! socket: the plugins' own tests use it, and so do the fuzz targets (`fuzz/`). Not an API.

use std::any::Any;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::meta::split_meta;
use sluice_core::plugin::{BuildCx, Credential, Plugins, Scope};
use sluice_core::state::StateRegistry;
use sluice_core::{Consumer, Ctx, Flow, Plugin, ResponseEdits, UpstreamRef};

use crate::builtin;

/// A plugin built as the engine builds it, with consumers for auth plugins.
pub struct Built {
    pub plugin: Arc<dyn Plugin>,
    pub consumers: Vec<Consumer>,
    pub upstreams: Vec<Value>,
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built")
            .field("consumers", &self.consumers.len())
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

/// Builds `name` from `config` as the engine does, with `consumers` as `(username,
/// {plugin: config})`; the errors as `path: message` lines when it does not build.
pub fn try_build(
    name: &str,
    config: &Value,
    consumers: &[(String, Value)],
    scope: Scope,
) -> Result<Built, Vec<String>> {
    try_build_with(name, config, consumers, scope, &[])
}

/// [`try_build`] with `metadata` (plugin_metadata items).
pub fn try_build_with(
    name: &str,
    config: &Value,
    consumers: &[(String, Value)],
    scope: Scope,
    metadata: &[sluice_config::PluginMetadataConfig],
) -> Result<Built, Vec<String>> {
    let r = builtin();
    let Some(f) = r.get(name) else {
        return Err(vec![format!("no plugin {name}")]);
    };
    let mut v = Validator::new();
    let mut indexes: HashMap<&'static str, Arc<dyn Any + Send + Sync>> = HashMap::new();
    let consumer_cfgs: Vec<(String, serde_json::Map<String, Value>)> = consumers
        .iter()
        .map(|(u, plugins)| (u.clone(), plugins.as_object().cloned().unwrap_or_default()))
        .collect();
    for af in r.all().into_iter().filter(|f| f.is_auth()) {
        let entries: Vec<(usize, Value)> = consumer_cfgs
            .iter()
            .enumerate()
            .filter_map(|(i, (_, p))| {
                let entry = split_meta(p.get(af.name())?, &mut Validator::new())?;
                Some((i, entry.config))
            })
            .collect();
        let creds: Vec<Credential<'_>> = entries
            .iter()
            .map(|(i, c)| Credential {
                consumer: *i as u32,
                position: *i,
                credential: None,
                username: &consumer_cfgs[*i].0,
                config: c,
            })
            .collect();
        if let Some(ix) = af.consumer_index(&creds, &mut v) {
            indexes.insert(af.name(), ix);
        }
    }
    let state = StateRegistry::default();
    let idx = |n: &str| indexes.get(n).cloned();
    let mut upstreams = Vec::new();
    let mut resolve = |value: &Value, _: &mut Validator| {
        upstreams.push(value.clone());
        Some(UpstreamRef(upstreams.len() as u32))
    };
    let attr = sluice_config::PluginAttrConfig::default();
    let mut cx = BuildCx {
        tls_ports: &[],
        plugin_attr: &attr,
        plugin_metadata: &metadata,
        route_paths: &[],
        scope,
        owner: "route:r1",
        indexes: &idx,
        upstreams: &mut resolve,
        state: &state,
    };
    let plugin = split_meta(config, &mut v).and_then(|entry| {
        f.build(&entry.config, &mut cx, &mut v)
            .map(|p| entry.wrap(p))
    });
    let errors: Vec<String> = v.into_errors().iter().map(ToString::to_string).collect();
    let plugin = match plugin {
        Some(p) if errors.is_empty() => p,
        _ => return Err(errors),
    };
    let consumers = consumer_cfgs
        .iter()
        .map(|(u, _)| Consumer {
            username: u.as_str().into(),
            custom_id: None,
            group: None,
            labels: Box::default(),
        })
        .collect();
    Ok(Built {
        plugin,
        consumers,
        upstreams,
    })
}

pub const CLIENT: &str = "192.0.2.10:50000";

/// A context for a request from `client` on route `r1`.
pub fn ctx<'a>(consumers: &'a [Consumer], client: &str) -> Ctx<'a> {
    let client: SocketAddr = client
        .parse()
        .unwrap_or(SocketAddr::from(([192, 0, 2, 10], 50000)));
    Ctx::new(
        client,
        SocketAddr::from(([127, 0, 0, 1], 9080)),
        "r1",
        consumers,
        ResponseEdits::default(),
    )
}

/// Runs rewrite, access and before_proxy as the engine does; returns the first answer.
pub fn run(
    p: &dyn Plugin,
    req: &mut RequestHead,
    cx: &mut Ctx<'_>,
) -> Option<sluice_core::Response> {
    for flow in [
        p.rewrite(req, cx),
        p.access(req, cx),
        p.before_proxy(req, cx),
    ] {
        if let Flow::Respond(r) = flow {
            return Some(r);
        }
    }
    None
}

/// After the request phases gave `flows`: the plugin's own answer if one of them answered,
/// else a node's 200 (`a body`), through the plugin's header and body filters, as the engine
/// sends either.
pub fn answer_and_filter(
    p: &dyn Plugin,
    req: &RequestHead,
    cx: &mut Ctx<'_>,
    flows: Vec<Flow>,
) -> sluice_core::Response {
    use sluice_core::plugin::{Phases, ResponseView};
    let phases = p.phases();
    let own = flows.into_iter().find_map(|f| match f {
        Flow::Respond(r) => Some(r),
        Flow::Delayed(_, r) => Some(*r),
        Flow::Continue | Flow::Sleep(_) => None,
    });
    let resp = own.unwrap_or_else(|| {
        sluice_core::Response::new(200)
            .header("Content-Type", b"text/plain")
            .body("a body")
    });
    if phases.contains(Phases::HEADER_FILTER) {
        p.header_filter(req, ResponseView::Own(&resp), cx);
    }
    if phases.contains(Phases::BODY_FILTER) {
        let mut chunk = bytes::Bytes::from_static(b"a body");
        p.body_filter(&mut chunk, false, cx);
        let mut last = bytes::Bytes::new();
        p.body_filter(&mut last, true, cx);
    }
    resp
}
