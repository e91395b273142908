//! APISIX's `workflow` and `traffic-label` through a live gateway: conditions over request
//! variables choosing an answer, a rate limit of their own (which takes the route's own out of
//! that request), or headers by weight in a fixed rotation.

#![allow(clippy::unwrap_used)]

mod common;

use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

#[tokio::test]
async fn workflow_answers_or_limits_the_requests_its_rules_pick() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /a
    upstream_id: o
    plugins:
      limit-count: {{count: 5, time_window: 60, rejected_code: 503}}
      workflow:
        rules:
          - case: [["arg_name", "==", "json"]]
            actions: [["return", {{code: 403}}]]
          - case: [["http_x_tier", "==", "free"]]
            actions: [["limit-count", {{count: 2, time_window: 60, rejected_code: 429}}]]
          - case: ["OR", ["http_x_tier", "==", "trial"], ["arg_trial", "==", "1"]]
            actions: [["limit-conn", {{conn: 5, burst: 0, default_conn_delay: 0.1}}]]
  - uri: /all
    upstream_id: o
    plugins:
      workflow:
        rules:
          - actions: [["return", {{code: 418}}]]
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    let get = |path: &'static str, headers: Vec<(&'static str, &'static str)>| {
        let cl = cl.clone();
        async move { cl.send(Method::GET, path, &headers, "").await }
    };

    // `return`: the code, APISIX's body.
    let r = get("/a?name=json", vec![]).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.text().trim_end(),
        r#"{"error_msg":"rejected by workflow"}"#
    );
    assert_eq!(get("/a?name=xml", vec![]).await.status, 200);
    assert_eq!(
        get("/all", vec![]).await.status,
        418,
        "a rule without case holds"
    );

    // A limit of the rule's own: two free requests, then 429, with its headers.
    for i in 0..2 {
        let r = get("/a", vec![("x-tier", "free")]).await;
        assert_eq!(r.status, 200, "free request {i}");
        assert_eq!(r.header("x-ratelimit-limit"), Some("2"));
    }
    assert_eq!(get("/a", vec![("x-tier", "free")]).await.status, 429);
    // A trial request goes through limit-conn, which takes only limit-conn out: the route's own
    // limit-count counts it.
    let trial = get("/a?trial=1", vec![]).await;
    assert_eq!(trial.status, 200);
    assert_eq!(trial.header("x-ratelimit-remaining"), Some("3"));
    let trial = get("/a", vec![("x-tier", "trial")]).await;
    assert_eq!(trial.status, 200);
    assert_eq!(trial.header("x-ratelimit-remaining"), Some("2"));
    // The route's own limit-count (after workflow: priority 1002 to 1006) counted neither the
    // free requests nor the one `return` answered: with the `name=xml` request and the two
    // trial ones, two more pass, the next is its 503.
    for i in 0..2 {
        let r = get("/a", vec![]).await;
        assert_eq!(r.status, 200, "request {i} on the route's own limit");
        assert_eq!(r.header("x-ratelimit-limit"), Some("5"));
    }
    assert_eq!(get("/a", vec![]).await.status, 503);
    gw.shutdown();
}

#[tokio::test]
async fn traffic_label_sets_headers_by_weight_in_turn() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /a
    upstream_id: o
    plugins:
      traffic-label:
        rules:
          - match: [["arg_v", "==", "1"]]
            actions:
              - {{set_headers: {{X-Server-Id: "100"}}, weight: 3}}
              - {{set_headers: {{X-Server-Id: "200", X-Client: $remote_addr}}, weight: 2}}
              - {{weight: 5}}
          - actions: [{{set_headers: {{X-Default: "yes"}}}}]
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    let mut seen = std::collections::HashMap::new();
    for _ in 0..20 {
        let r = cl
            .send(Method::GET, "/a?v=1", &[("x-server-id", "forged")], "")
            .await;
        assert_eq!(r.status, 200);
        let last = origin.last();
        let id = last.header("x-server-id").unwrap_or("none").to_owned();
        if id == "200" {
            assert_eq!(last.header("x-client"), Some("127.0.0.1"));
        }
        assert!(!last.has_header("x-default"));
        *seen.entry(id).or_insert(0) += 1;
    }
    // 3, 2 and 5 of every 10; the third action sets nothing, so the client's value stays.
    assert_eq!(seen.get("100"), Some(&6), "{seen:?}");
    assert_eq!(seen.get("200"), Some(&4), "{seen:?}");
    assert_eq!(seen.get("forged"), Some(&10), "{seen:?}");
    cl.send(Method::GET, "/a", &[], "").await;
    assert_eq!(origin.last().header("x-default"), Some("yes"));
    gw.shutdown();
}

#[test]
fn bad_workflow_and_traffic_label_settings_are_refused_with_their_place() {
    let at = "routes[0].plugins.workflow.rules[0]";
    common::assert_refusals(
        "workflow",
        &[
            (
                "{rules: [{actions: [[\"exit\", {}]]}]}",
                format!(
                    "{at}.actions[0][0]: unsupported action \"exit\", expected return, limit-count or limit-conn"
                ),
            ),
            (
                "{rules: [{actions: [[\"return\", {code: 600}]]}]}",
                format!("{at}.actions[0][1].code: must be a whole number from 100 to 599"),
            ),
            (
                "{rules: [{actions: [[\"return\", {code: 403}], [\"return\", {code: 404}]]}]}",
                format!("{at}.actions: only one action per rule"),
            ),
            (
                "{rules: [{actions: []}]}",
                format!("{at}.actions: must hold one action"),
            ),
            (
                "{rules: [{actions: [[\"limit-count\", {count: 1, time_window: 60, group: g}]]}]}",
                format!("{at}.actions[0][1].group: cannot be used in a workflow action"),
            ),
            (
                "{rules: [{actions: [[\"limit-count\", {count: 0, time_window: 60}]]}]}",
                format!("{at}.actions[0][1].count: "),
            ),
            (
                "{rules: [{case: [], actions: [[\"return\", {code: 403}]]}]}",
                format!("{at}.case: must not be empty"),
            ),
            (
                "{rules: [{case: [[\"nope_var\", \"==\", 1]], actions: [[\"return\", {code: 403}]]}]}",
                format!("{at}.case"),
            ),
        ],
    );
    let at = "routes[0].plugins.traffic-label";
    common::assert_refusals(
        "traffic-label",
        &[
            (
                "{rules: []}",
                format!("{at}.rules: must hold at least one rule"),
            ),
            (
                "{rules: [{actions: []}]}",
                format!("{at}.rules[0].actions: must hold at least one action"),
            ),
            (
                "{rules: [{match: [], actions: [{weight: 1}]}]}",
                format!("{at}.rules[0].match: must not be empty"),
            ),
            (
                "{rules: [{actions: [{weight: 0}]}]}",
                format!("{at}.rules[0].actions[0].weight: must be a whole number from 1"),
            ),
            (
                "{rules: [{actions: [{set_headers: {}}]}]}",
                format!("{at}.rules[0].actions[0].set_headers: must set at least one header"),
            ),
            (
                "{rules: [{actions: [{set_headers: {Content-Length: \"1\"}}]}]}",
                format!(
                    "{at}.rules[0].actions[0].set_headers.Content-Length: header \"Content-Length\" is managed by the gateway"
                ),
            ),
            (
                "{rules: [{actions: [{set_header: {}}]}]}",
                format!("{at}.rules[0].actions[0].set_header: unknown field"),
            ),
        ],
    );
}
