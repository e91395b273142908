//! Registry checks, and helpers for each plugin's own tests: build a plugin from YAML the way
//! the engine does, run its phases on a parsed request, no socket.

use std::collections::{HashMap, HashSet};

use bytes::BytesMut;
use serde_json::Value;
use sluice_config::{CheckEnv, PluginCatalog, PluginScope, Validator};
use sluice_core::http::RequestHead;
use sluice_core::http::request::{HeadLimits, parse};
use sluice_core::plugin::{Plugins, Scope};

use super::*;
pub(crate) use crate::harness::{Built, CLIENT, ctx, run, try_build, try_build_with};

mod extremes;

/// Each plugin declares APISIX's `encrypt_fields` (from APISIX 3.x's plugin schemas), which
/// the configuration crate decrypts without naming a plugin; the rest declare none.
#[test]
fn encrypted_fields_are_apisixs() {
    let apisix: &[(&str, &[&str])] = &[
        ("key-auth", &["key"]),
        ("basic-auth", &["password"]),
        ("jwt-auth", &["secret"]),
        ("hmac-auth", &["secret_key"]),
        ("csrf", &["key"]),
        ("limit-count", &["redis_password", "sentinel_password"]),
        ("limit-req", &["redis_password"]),
        ("limit-conn", &["redis_password"]),
        ("ai-proxy", &["auth.header", "auth.query"]),
        (
            "ai-proxy-multi",
            &["instances.auth.header", "instances.auth.query"],
        ),
        ("ai-rate-limiting", &["redis_password", "sentinel_password"]),
        ("http-logger", &["auth_header"]),
        ("loki-logger", &["headers"]),
        ("elasticsearch-logger", &["auth.password", "headers"]),
        ("splunk-hec-logging", &["endpoint.token"]),
        ("kafka-logger", &["brokers.sasl_config.password"]),
        (
            "openid-connect",
            &[
                "client_secret",
                "client_rsa_private_key",
                "dpop.private_key",
                "session.secret",
                "session.redis.password",
            ],
        ),
    ];
    let r = builtin();
    for f in r.all() {
        let want = apisix
            .iter()
            .find(|(n, _)| *n == f.name())
            .map_or(&[][..], |(_, fields)| *fields);
        assert_eq!(f.encrypted_fields(), want, "{}", f.name());
        assert_eq!(r.encrypted_fields(f.name()), want, "{}", f.name());
    }
    assert_eq!(
        r.stream_plugins(),
        ["ip-restriction", "limit-conn", "prometheus"]
    );
}

#[test]
fn names_and_priorities_are_unique() {
    let r = builtin();
    let mut names = HashSet::new();
    let mut priorities = HashMap::new();
    for f in r.all() {
        assert!(names.insert(f.name()), "duplicate name {}", f.name());
        if let Some(other) = priorities.insert(f.priority(), f.name()) {
            panic!("{} and {} share priority {}", f.name(), other, f.priority());
        }
        assert!(
            f.name()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-'),
            "{} is not kebab-case",
            f.name()
        );
    }
}

#[test]
fn unknown_plugins_and_bad_meta_are_reported() {
    let errs = check("no-such-plugin", "{}", PluginScope::Route);
    assert!(
        errs[0].starts_with("plugins.no-such-plugin: unknown plugin, expected one of "),
        "{errs:?}"
    );
    let errs = check(
        "limit-count",
        "{count: 1, time_window: 1, _meta: {disable: maybe}}",
        PluginScope::Route,
    );
    assert_eq!(
        errs,
        vec!["plugins.limit-count._meta.disable: must be true or false"]
    );
}

#[test]
fn the_issues_numbers_are_refused_where_configurations_are_loaded() {
    // From a file (YAML) and as the admin API gets them (JSON).
    let from_file = |plugins: &str| -> Vec<String> {
        let yaml = format!(
            "routes:\n  - uri: /echo\n    upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}\n    plugins: {plugins}\n"
        );
        match sluice_config::load_str_with(&yaml, &builtin()) {
            Ok(_) => Vec::new(),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    };
    let from_api = |plugins: &str| -> Vec<String> {
        let json = format!(
            "{{\"routes\": [{{\"uri\": \"/echo\", \"upstream\": {{\"nodes\": {{\"127.0.0.1:1\": 1}}}}, \"plugins\": {plugins}}}]}}"
        );
        let doc = sluice_config::parse_json(json.as_bytes()).expect("JSON");
        match sluice_config::load_value_with(doc, &builtin()) {
            Ok(_) => Vec::new(),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    };
    let rate = "routes[0].plugins.limit-req.rate: must be from 0.001 to 1000000000 requests per second, got";
    assert_eq!(
        from_api("{\"limit-req\": {\"rate\": 0.0005, \"burst\": 1}}"),
        vec![format!("{rate} 0.0005")]
    );
    assert_eq!(
        from_file("{limit-req: {rate: 1e-300}}"),
        vec![format!("{rate} 1e-300")]
    );
    let window = "routes[0].plugins.limit-count.time_window: must be a whole number from 1 to 31536000 seconds (one year), got 18446744073709551615";
    assert_eq!(
        from_file("{limit-count: {count: 1, time_window: 18446744073709551615}}"),
        vec![window]
    );
    assert_eq!(
        from_api("{\"limit-count\": {\"count\": 1, \"time_window\": 18446744073709551615}}"),
        vec![window]
    );
    // YAML's NaN and infinities are not numbers to any field.
    assert_eq!(
        from_file("{limit-req: {rate: .nan, burst: .inf}}"),
        vec![
            "routes[0].plugins.limit-req.rate: must be a number, got \"NaN\"",
            "routes[0].plugins.limit-req.burst: must be a number, got \"inf\""
        ]
    );
    assert_eq!(
        from_file(
            "{limit-req: {rate: 0.001, burst: 1}, limit-count: {count: 1, time_window: 31536000}}"
        ),
        Vec::<String>::new()
    );
}

/// Errors of checking `name` with `yaml`, as `path: message` lines.
pub(crate) fn check(name: &str, yaml: &str, scope: PluginScope) -> Vec<String> {
    let config: Value = yaml_value(yaml);
    let ids: HashSet<String> = ["u1".to_owned()].into();
    let env = CheckEnv { upstream_ids: &ids };
    let mut v = Validator::new();
    v.field("plugins", |v| {
        v.field(name, |v| {
            builtin().check_plugin(name, &config, scope, &env, v)
        })
    });
    v.into_errors().iter().map(ToString::to_string).collect()
}

pub(crate) fn yaml_value(yaml: &str) -> Value {
    yaml_serde::from_str(yaml).unwrap_or_else(|e| panic!("bad test YAML {yaml:?}: {e}"))
}

/// Builds `name` from `yaml` on a route, with `consumers` as `(username, {plugin: config})`.
pub(crate) fn build(name: &str, yaml: &str, consumers: &[(&str, &str)]) -> Built {
    build_in(name, yaml, consumers, Scope::Route)
}

pub(crate) fn build_in(name: &str, yaml: &str, consumers: &[(&str, &str)], scope: Scope) -> Built {
    let consumers: Vec<(String, Value)> = consumers
        .iter()
        .map(|(u, plugins)| (u.to_string(), yaml_value(plugins)))
        .collect();
    try_build(name, &yaml_value(yaml), &consumers, scope)
        .unwrap_or_else(|errors| panic!("{name} did not build: {errors:?}"))
}

/// Builds `name` on a route from `yaml` with `metadata` (YAML: a list of plugin_metadata items).
pub(crate) fn build_with_metadata(name: &str, yaml: &str, metadata: &str) -> Built {
    let metadata: Vec<sluice_config::PluginMetadataConfig> =
        serde_json::from_value(yaml_value(metadata)).expect("plugin_metadata items");
    try_build_with(name, &yaml_value(yaml), &[], Scope::Route, &metadata)
        .unwrap_or_else(|errors| panic!("{name} did not build: {errors:?}"))
}

/// Errors of checking `metadata` (a YAML item with its `id`) as the configuration does.
pub(crate) fn metadata_errors(metadata: &str) -> Vec<String> {
    let m: sluice_config::PluginMetadataConfig =
        serde_json::from_value(yaml_value(metadata)).expect("a plugin_metadata item");
    let mut v = Validator::new();
    let name = m.id.as_ref().map_or("", |i| i.0.as_str()).to_owned();
    v.field("plugin_metadata", |v| {
        v.index(0, |v| builtin().check_metadata(&name, &m.fields, v))
    });
    v.into_errors().iter().map(ToString::to_string).collect()
}

/// A request head parsed from `raw` (CRLF optional: `\n` is accepted).
pub(crate) fn head(raw: &str) -> RequestHead {
    let limits = HeadLimits {
        max_request_line: 8192,
        max_header_size: 65536,
        max_headers: 100,
    };
    let mut buf = BytesMut::from(raw.as_bytes());
    let mut h = parse(&buf.clone(), &limits, &mut Vec::new())
        .unwrap()
        .expect("a complete head");
    h.take_bytes(&mut buf);
    h
}

/// The response's body as text.
pub(crate) fn body(r: &sluice_core::Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// Every plugin answers `/apisix/admin/schema/plugins/<name>`; auth plugins also with their
/// credentials' schema; fields are the ones the configuration is parsed with.
#[test]
fn every_plugin_has_a_schema_of_its_fields() {
    let r = builtin();
    for f in r.all() {
        let schema = f
            .schema()
            .unwrap_or_else(|| panic!("{} has no schema", f.name()));
        assert_eq!(schema["type"], "object", "{}: {schema}", f.name());
        assert_eq!(
            schema["additionalProperties"],
            false,
            "{}: unknown fields are refused, the schema must say so: {schema}",
            f.name()
        );
        assert_eq!(f.is_auth(), f.consumer_schema().is_some(), "{}", f.name());
    }
    let cors = r.get("cors").unwrap().schema().unwrap();
    assert_eq!(
        cors["properties"]["allow_origins"]["default"], "*",
        "{cors}"
    );
    let basic = r.get("basic-auth").unwrap().consumer_schema().unwrap();
    assert_eq!(
        basic["required"],
        serde_json::json!(["username", "password"])
    );
}
