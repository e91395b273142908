//! Every plugin: a configuration built as the engine builds it (checked first, as a file or
//! the admin API would be), then requests through the phases that need no I/O: rewrite,
//! access, before_proxy, then header_filter and body_filter on the plugin's own answer or a
//! node's 200. Never panics, and a build that refuses what the check passed (what the check
//! cannot see: a proxy-cache zone) says where and why. (Phases that wait on a network, async
//! access and log, are the `extremes` test's.)

use serde_json::Value;
use sluice_config::{CheckEnv, PluginCatalog, PluginScope, Validator};
use sluice_core::plugin::{Phases, Scope};
use sluice_plugins::harness::{CLIENT, answer_and_filter, ctx, try_build};

/// One input: the plugin's name, 0xFF, its configuration (JSON), 0xFF, a request (HTTP/1.1),
/// and optionally 0xFF and consumers (JSON: `{username: {plugin: credentials}}`).
pub fn check(data: &[u8]) {
    let mut parts = data.splitn(4, |&b| b == 0xff);
    let (Some(name), Some(config), Some(request)) = (parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let Ok(name) = std::str::from_utf8(name) else {
        return;
    };
    let Ok(config) = serde_json::from_slice::<Value>(config) else {
        return;
    };
    let consumers: Vec<(String, Value)> = parts
        .next()
        .and_then(|c| serde_json::from_slice::<serde_json::Map<String, Value>>(c).ok())
        .map(|m| m.into_iter().collect())
        .unwrap_or_default();
    let registry = sluice_plugins::builtin();
    if sluice_core::plugin::Plugins::get(&registry, name).is_none() {
        return;
    }
    // Checked as a configuration is: the route's plugin, then each consumer's credentials.
    let ids = ["u1".to_owned()].into();
    let env = CheckEnv { upstream_ids: &ids };
    let mut v = Validator::new();
    registry.check_plugin(name, &config, PluginScope::Route, &env, &mut v);
    for (_, plugins) in &consumers {
        for (p, cred) in plugins.as_object().into_iter().flatten() {
            if sluice_core::plugin::Plugins::get(&registry, p).is_none() {
                return;
            }
            registry.check_plugin(p, cred, PluginScope::Consumer, &env, &mut v);
        }
    }
    if !v.into_errors().is_empty() {
        return;
    }
    let built = match try_build(name, &config, &consumers, Scope::Route) {
        Ok(b) => b,
        // What the check cannot see (a proxy-cache zone of `plugin_attr`) is refused when the
        // configuration is compiled, still before anything is in service, and in words.
        Err(errors) => {
            assert!(
                !errors.is_empty() && errors.iter().all(|e| e.contains(": ")),
                "{name}: refused at build without a reason with its place: {errors:?}"
            );
            return;
        }
    };
    let p = &*built.plugin;
    let phases = p.phases();
    let limits = sluice_core::http::request::HeadLimits {
        max_request_line: 8192,
        max_header_size: 65536,
        max_headers: 100,
    };
    let parse = || {
        let mut buf = bytes::BytesMut::from(request);
        let mut head = sluice_core::http::request::parse(request, &limits, &mut Vec::new())
            .ok()
            .flatten()?;
        head.take_bytes(&mut buf);
        Some(head)
    };
    let mut held = Vec::new();
    for client in [CLIENT, "192.0.2.11:1"] {
        let Some(mut req) = parse() else {
            return;
        };
        let mut cx = ctx(&built.consumers, client);
        let mut flows = Vec::new();
        if phases.contains(Phases::REWRITE) {
            flows.push(p.rewrite(&mut req, &mut cx));
        }
        if phases.contains(Phases::ACCESS) {
            flows.push(p.access(&mut req, &mut cx));
        }
        if phases.contains(Phases::BEFORE_PROXY) {
            flows.push(p.before_proxy(&mut req, &mut cx));
        }
        answer_and_filter(p, &req, &mut cx, flows);
        held.push(cx);
    }
}
