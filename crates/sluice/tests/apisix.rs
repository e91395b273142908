//! APISIX's resource model through the real gateway: consumer credentials and groups, plugin
//! configs, routes that only plugins answer, and what the upstream is told about the consumer.
//! Each configuration is written as APISIX's documentation writes it.

#![allow(clippy::unwrap_used)]

mod common;

use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

#[tokio::test]
async fn a_consumer_may_hold_several_credentials_and_the_upstream_is_told_who_called() {
    // APISIX 3: consumers/john/credentials/cred-john-key-auth and a second one.
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:
  - {{id: r, uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}, plugins: {{key-auth: {{}}}}}}
consumers:
  - username: john
    labels: {{custom_id: cust-42}}
    credentials:
      - {{id: cred-john-key-auth, plugins: {{key-auth: {{key: john-key}}}}}}
      - {{id: cred-john-key-2, plugins: {{key-auth: {{key: john-key-2}}}}}}
  - username: jane
    plugins: {{key-auth: {{key: jane-key}}}}
",
        origin.node()
    ));
    let c = gw.client();
    for (key, who, custom) in [
        ("john-key", "john", Some("cust-42")),
        ("john-key-2", "john", Some("cust-42")),
        ("jane-key", "jane", None),
    ] {
        let r = c
            .send(
                Method::GET,
                "/get",
                &[("apikey", key), ("X-Consumer-Custom-ID", "forged")],
                "",
            )
            .await;
        assert_eq!(r.status, 200, "{key}");
        let got = origin.last();
        assert_eq!(got.header("x-consumer-username"), Some(who), "{key}");
        assert_eq!(got.header("x-consumer-custom-id"), custom, "{key}");
    }
    let r = c
        .send(Method::GET, "/get", &[("apikey", "nobody")], "")
        .await;
    assert_eq!(r.status, 401);
}

#[test]
fn credentials_are_checked_where_they_are_written() {
    let e = sluice_config::load_str_with(
        "routes:
  - {uri: /*, upstream: {nodes: {\"127.0.0.1:1\": 1}}}
consumers:
  - username: john
    credentials:
      - {id: a, plugins: {key-auth: {key: k}}}
      - {id: a, plugins: {limit-count: {count: 1, time_window: 1}}}
  - username: jane
    group_id: missing
    credentials:
      - {plugins: {key-auth: {key: k}}}
consumer_groups:
  - {id: g, plugins: {key-auth: {key: x}}}
",
        &sluice_plugins::builtin(),
    )
    .unwrap_err()
    .to_string();
    for want in [
        "consumer_groups[0].plugins.key-auth: is an authentication plugin: its credentials belong on consumers, not on their group",
        "consumers[0].credentials[1].id: duplicate credential id \"a\" (first at credentials[0])",
        "consumers[0].credentials[1].plugins.limit-count: is not an authentication plugin",
        "consumers[1].group_id: consumer group \"missing\" not found",
        "consumers[1].credentials[0].plugins.key-auth.key: key already used by consumers[0].credentials[0]",
    ] {
        assert!(e.contains(want), "{want}\n{e}");
    }
}

#[tokio::test]
async fn a_consumer_groups_plugins_run_for_its_consumers_and_share_their_counters() {
    // APISIX's consumer-groups example: a limit-count shared by the group; a consumer's own
    // configuration of a plugin wins over the group's.
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:
  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}, plugins: {{key-auth: {{}}}}}}
consumer_groups:
  - id: company_a
    plugins:
      limit-count: {{count: 2, time_window: 60, rejected_code: 503}}
      response-rewrite: {{headers: {{set: {{X-Group: company_a}}}}}}
consumers:
  - {{username: jack, group_id: company_a, plugins: {{key-auth: {{key: jack-key}}}}}}
  - {{username: rose, group_id: company_a, plugins: {{key-auth: {{key: rose-key}}}}}}
  - username: vip
    group_id: company_a
    plugins:
      key-auth: {{key: vip-key}}
      limit-count: {{count: 100, time_window: 60}}
",
        origin.node()
    ));
    let c = gw.client();
    let get = |key: &'static str| {
        let c = c.clone();
        async move { c.send(Method::GET, "/x", &[("apikey", key)], "").await }
    };
    let r = get("jack-key").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-group"), Some("company_a"));
    assert_eq!(get("rose-key").await.status, 200);
    // The group's count of 2 is used up by the two of them together.
    assert_eq!(get("jack-key").await.status, 503);
    assert_eq!(get("rose-key").await.status, 503);
    // vip's own limit-count replaces the group's; the group's other plugins still run.
    let r = get("vip-key").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-group"), Some("company_a"));
}

#[tokio::test]
async fn plugin_configs_give_routes_their_plugins_and_the_routes_own_win() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "plugin_configs:
  - id: \"1\"
    desc: shared rewrite
    plugins:
      response-rewrite: {{headers: {{set: {{X-From: plugin-config}}}}}}
      proxy-rewrite: {{headers: {{set: {{X-Shared: yes}}}}}}
services:
  - id: s
    upstream: {{nodes: {{\"{node}\": 1}}}}
    plugins:
      proxy-rewrite: {{headers: {{set: {{X-Shared: service}}}}}}
routes:
  - {{uri: /shared, plugin_config_id: 1, service_id: s}}
  - uri: /own
    plugin_config_id: 1
    upstream: {{nodes: {{\"{node}\": 1}}}}
    plugins:
      response-rewrite: {{headers: {{set: {{X-From: route}}}}}}
",
        node = origin.node()
    ));
    let c = gw.client();
    let r = c.get("/shared").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-from"), Some("plugin-config"));
    // The plugin config's proxy-rewrite wins over the service's.
    assert_eq!(origin.last().header("x-shared"), Some("yes"));
    let r = c.get("/own").await;
    assert_eq!(r.header("x-from"), Some("route"));
    assert_eq!(origin.last().header("x-shared"), Some("yes"));
}

#[tokio::test]
async fn a_route_with_plugins_and_no_upstream_is_answered_by_them() {
    // APISIX's `{uri, plugins}`: mocking answers; what the plugins let through gets 503.
    let gw = Gateway::start(
        "routes:
  - uri: /mock
    plugins:
      mocking: {response_example: '{\"ok\":1}', content_type: application/json}
  - uri: /guarded
    plugins:
      key-auth: {}
consumers:
  - {username: u, plugins: {key-auth: {key: k}}}
",
    );
    let c = gw.client();
    let r = c.get("/mock").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "{\"ok\":1}"));
    assert_eq!(c.get("/guarded").await.status, 401);
    let r = c
        .send(Method::GET, "/guarded", &[("apikey", "k")], "")
        .await;
    assert_eq!(r.status, 503);
    assert!(
        r.text()
            .contains("missing upstream configuration in Route or Service"),
        "{}",
        r.text()
    );
}

#[test]
fn what_apisix_adds_to_stored_resources_is_accepted_and_ignored() {
    // `curl /apisix/admin/routes` output: the values carry times and revisions.
    let cfg = sluice_config::load_str_with(
        r#"{
  "upstreams": [{"id": "1", "nodes": {"127.0.0.1:1980": 1}, "type": "roundrobin",
                 "create_time": 1700000000, "update_time": 1700000001}],
  "routes": [{"id": "1", "uri": "/get", "upstream_id": "1", "status": 1,
              "create_time": 1700000000, "update_time": 1700000001,
              "createdIndex": 12, "modifiedIndex": 15}],
  "consumers": [{"username": "jack", "id": "jack", "update_time": 1700000000,
                 "plugins": {"key-auth": {"key": "k"}}}]
}"#,
        &sluice_plugins::builtin(),
    )
    .unwrap();
    assert_eq!(cfg.routes[0].uri.as_deref(), Some("/get"));
    // A long username, as APISIX allows (up to 256 characters).
    let long = "u".repeat(256);
    sluice_config::load_str_with(
        &format!("consumers: [{{username: {long}}}]\n"),
        &sluice_plugins::builtin(),
    )
    .unwrap();
    assert!(
        sluice_config::load_str_with(
            &format!("consumers: [{{username: {long}x}}]\n"),
            &sluice_plugins::builtin(),
        )
        .is_err()
    );
}

#[tokio::test]
async fn route_vars_and_remote_addrs_choose_among_routes_as_apisix() {
    // APISIX's router-radixtree examples: a canary by header or argument on the same path,
    // the routes without conditions taking the rest; remote_addrs by client range.
    let canary = TestOrigin::http1().run().await;
    let stable = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        r#"routes:
  - id: canary
    uri: /index.html
    priority: 10
    vars: [["OR", ["http_x_canary", "==", "1"], ["AND", ["arg_beta", "in", ["yes", "on"]], ["cookie_plan", "~~", "^pro"]]]]
    upstream: {{nodes: {{"{canary}": 1}}}}
  - id: internal
    uri: /index.html
    priority: 5
    remote_addrs: ["10.0.0.0/8", "127.0.0.2"]
    upstream: {{nodes: {{"{canary}": 1}}}}
  - id: stable
    uri: /index.html
    upstream: {{nodes: {{"{stable}": 1}}}}
"#,
        canary = canary.node(),
        stable = stable.node()
    ));
    let c = gw.client();
    for (path, headers, want_canary) in [
        ("/index.html", vec![("X-Canary", "1")], true),
        ("/index.html", vec![("X-Canary", "0")], false),
        ("/index.html?beta=on", vec![("Cookie", "plan=pro-2")], true),
        ("/index.html?beta=on", vec![("Cookie", "plan=free")], false),
        ("/index.html?beta=no", vec![("Cookie", "plan=pro")], false),
    ] {
        let before = canary.requests().len();
        let r = c.send(Method::GET, path, &headers, "").await;
        assert_eq!(r.status, 200, "{path} {headers:?}");
        assert_eq!(
            canary.requests().len() > before,
            want_canary,
            "{path} {headers:?}"
        );
    }
    // 127.0.0.1 is not in remote_addrs: stable. (127.0.0.2 is: see the raw client below.)
    let before = stable.requests().len();
    c.get("/index.html").await;
    assert_eq!(stable.requests().len(), before + 1);
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut io = s.connect(gw.addr()).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    io.write_all(b"GET /index.html HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    io.read_to_end(&mut got).await.unwrap();
    assert!(got.starts_with(b"HTTP/1.1 200"));
    assert_eq!(canary.last().uri, "/index.html");
    assert_eq!(stable.requests().len(), before + 1, "went to internal");
}

#[test]
fn bad_route_vars_and_remote_addrs_are_refused_with_their_paths() {
    let e = sluice_config::load_str_with(
        r#"routes:
  - {uri: /a, upstream: {nodes: {"127.0.0.1:1": 1}}, vars: [["arg_x", "=~", "1"]]}
  - {uri: /b, upstream: {nodes: {"127.0.0.1:1": 1}}, vars: ["arg_x", "==", "1"]}
  - {uri: /c, upstream: {nodes: {"127.0.0.1:1": 1}}, remote_addrs: ["10.0.0.0/40"]}
  - {uri: /d, upstream: {nodes: {"127.0.0.1:1": 1}}, vars: [["http_age", ">", "old"]]}
"#,
        &sluice_plugins::builtin(),
    );
    // Validation (remote_addrs) fails before compiling; vars are checked by compiling, as
    // `sluice validate` does.
    let e = e.unwrap_err().to_string();
    assert!(
        e.contains("routes[2].remote_addrs[0]: invalid IP address or CIDR range \"10.0.0.0/40\""),
        "{e}"
    );
    let text = common::validate(
        r#"routes:
  - {uri: /a, upstream: {nodes: {"127.0.0.1:1": 1}}, vars: [["arg_x", "=~", "1"]]}
  - {uri: /b, upstream: {nodes: {"127.0.0.1:1": 1}}, vars: ["arg_x", "==", "1"]}
  - {uri: /d, upstream: {nodes: {"127.0.0.1:1": 1}}, vars: [["http_age", ">", "old"]]}
"#,
    );
    for want in [
        "routes[0].vars[0]: unknown operator \"=~\"",
        "routes[1].vars: must be a list of conditions, each in brackets",
        "routes[2].vars[0]: operator \">\" compares numbers: the value must be a number, got \"old\"",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
}

#[test]
fn ssl_status_and_type_and_upstream_client_certificates_as_apisix_writes_them() {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["test.com".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert, key) = (
        serde_json::to_string(&cert.pem()).unwrap(),
        serde_json::to_string(&key.serialize_pem()).unwrap(),
    );
    // A disabled certificate keeps its place without taking its names from the one served.
    let ok = format!(
        r#"{{"ssls": [{{"id": "1", "snis": ["test.com"], "cert": {cert}, "key": {key}, "status": 0, "type": "server"}},
                     {{"id": "2", "snis": ["test.com"], "cert": {cert}, "key": {key}}}],
            "routes": [{{"uri": "/", "upstream": {{"scheme": "https", "nodes": {{"127.0.0.1:8443": 1}},
                        "tls": {{"client_cert": {cert}, "client_key": {key}}}}}}}]}}"#
    );
    let cfg = sluice_config::load_str_with(&ok, &sluice_plugins::builtin()).unwrap();
    assert!(cfg.routes[0].upstream.as_ref().unwrap().tls.cert.is_some());
    let bad = format!(
        r#"{{"ssls": [{{"id": "1", "snis": ["a.com"], "cert": {cert}, "key": {key}, "type": "client"}},
                     {{"id": "2", "snis": ["b.com"], "cert": {cert}, "key": {key}, "status": 2}}]}}"#
    );
    let e = sluice_config::load_str_with(&bad, &sluice_plugins::builtin())
        .unwrap_err()
        .to_string();
    assert!(e.contains("ssls[0].type: client certificates (presented to upstreams) are given in the upstream's tls.client_cert"), "{e}");
    assert!(
        e.contains("ssls[1].status: must be 1 (served) or 0 (kept, not served)"),
        "{e}"
    );
}

#[tokio::test]
async fn anonymous_consumer_lets_unauthenticated_requests_in_as_that_consumer() {
    // APISIX 3's key-auth/basic-auth/jwt-auth `anonymous_consumer`: a request without valid
    // credentials goes on as that consumer, with its (stricter) limits.
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:
  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}, plugins: {{key-auth: {{anonymous_consumer: anonymous}}}}}}
consumers:
  - {{username: jack, plugins: {{key-auth: {{key: jack-key}}}}}}
  - username: anonymous
    plugins:
      limit-count: {{count: 1, time_window: 60, rejected_code: 429}}
",
        origin.node()
    ));
    let c = gw.client();
    let r = c.send(Method::GET, "/a", &[("apikey", "wrong")], "").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        origin.last().header("x-consumer-username"),
        Some("anonymous")
    );
    // The anonymous consumer's limit applies to it, not to jack.
    assert_eq!(c.get("/a").await.status, 429);
    let r = c
        .send(Method::GET, "/a", &[("apikey", "jack-key")], "")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(origin.last().header("x-consumer-username"), Some("jack"));

    // A name nobody has yet loads (a route may be written before its consumer, as ADC
    // does); such requests get 401 until the consumer exists.
    let gw = Gateway::start(&format!(
        "routes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}, plugins: {{basic-auth: {{anonymous_consumer: ghost}}}}}}\n",
        origin.node()
    ));
    assert_eq!(gw.client().get("/a").await.status, 401);
}

#[test]
fn a_standalone_file_lists_credentials_among_consumers() {
    // APISIX's apisix.yaml: `consumers` holds `{id: <username>/credentials/<id>, plugins}` items.
    let cfg = sluice_config::load_str_with(
        "consumers:
  - username: jack
  - id: jack/credentials/key-1
    plugins: {key-auth: {key: jack-key}}
routes:
  - {uri: /a, plugins: {key-auth: {}}, upstream: {nodes: {\"127.0.0.1:1980\": 1}}}
#END
",
        &sluice_plugins::builtin(),
    )
    .unwrap();
    assert_eq!(cfg.consumers.len(), 1);
    assert_eq!(
        cfg.consumers[0].credentials[0].id.as_ref().unwrap().0,
        "key-1"
    );
    let e = sluice_config::load_str_with(
        "consumers:\n  - id: ghost/credentials/k\n    plugins: {key-auth: {key: k}}\n",
        &sluice_plugins::builtin(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(
            "consumers[0].id: a credential of consumer \"ghost\", which is not in consumers"
        ),
        "{e}"
    );
}

/// Metadata of a plugin Sluice does not have (APISIX control planes write some for their
/// loggers) loads with a warning; metadata a plugin Sluice has cannot take is refused.
#[test]
fn plugin_metadata_of_plugins_sluice_lacks_is_a_warning() {
    let run = |text: &str| common::sluice_validate(text, &["--config-only"]);
    let (ok, text) = run(
        "plugin_metadata:\n  - {id: clickhouse-logger, log_format: {host: $host}}\n  - {id: limit-count, reset_header: X-Until}\nroutes:\n  - {uri: /a, upstream: {nodes: {\"127.0.0.1:1\": 1}}}\n",
    );
    assert!(ok, "{text}");
    assert!(
        text.contains("warning: plugin_metadata[0].id: \"clickhouse-logger\" is not a plugin Sluice has: its metadata is kept and not used"),
        "{text}"
    );
    let (ok, text) = run(
        "plugin_metadata:\n  - {id: key-auth, header: k}\n  - {id: cors, allow_origins: [a]}\n  - {id: cors}\n",
    );
    assert!(!ok, "{text}");
    for want in [
        "plugin_metadata[0].id: key-auth has no plugin metadata",
        "plugin_metadata[1].allow_origins: ",
        "plugin_metadata[2].id: duplicate plugin metadata id \"cors\" (first at plugin_metadata[1])",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
}

/// `$uri_param_<name>` needs a route whose paths have `:name`, at one place.
#[test]
fn uri_params_are_checked_against_the_route_s_paths() {
    let text = common::validate(
        r#"services:
  - {id: s, plugins: {proxy-rewrite: {headers: {set: {X-Id: "$uri_param_id"}}}}, upstream: {nodes: {"127.0.0.1:1": 1}}}
routes:
  - {uri: "/a/:id", service_id: s}
  - {uri: /b, plugins: {proxy-rewrite: {headers: {set: {X-Id: "$uri_param_id"}}}}, upstream: {nodes: {"127.0.0.1:1": 1}}}
  - {uris: ["/c/:id", "/c/x/:id"], plugins: {proxy-rewrite: {uri: "/$uri_param_id"}}, upstream: {nodes: {"127.0.0.1:1": 1}}}
"#,
    );
    for want in [
        "services[0].plugins.proxy-rewrite.headers.set.X-Id: uri_param_id works in a route's own plugins, whose path has :id",
        "routes[1].plugins.proxy-rewrite.headers.set.X-Id: uri_param_id: the route's paths have no :id parameter",
        "routes[2].plugins.proxy-rewrite.uri: uri_param_id: the route's paths have :id at different places",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
}
