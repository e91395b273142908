//! APISIX's `_meta.filter` and `_meta.error_response` on plugins through a live gateway: a
//! plugin that runs only on the requests its filter picks (in its request phases and in its
//! response phases alike), and refusals whose body is the configured one.

#![allow(clippy::unwrap_used)]

mod common;

use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

#[tokio::test]
async fn filters_pick_requests_and_error_responses_replace_refusals() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /get
    upstream_id: o
    plugins:
      proxy-rewrite:
        _meta: {{filter: [["arg_version", "==", "v2"]]}}
        uri: /anything
      response-rewrite:
        _meta: {{filter: [["http_x_rewrite", "==", "1"]]}}
        headers: {{set: {{X-Rewritten: "yes"}}}}
        body: "rewritten\n"
      limit-count:
        _meta:
          filter: [["arg_tier", "==", "free"]]
          error_response: "slow down"
        count: 1
        time_window: 60
  - uri: /jwt
    upstream_id: o
    plugins:
      jwt-auth:
        _meta: {{error_response: {{message: "Missing credential in request"}}}}
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    let get = |path: &'static str, headers: Vec<(&'static str, &'static str)>| {
        let cl = cl.clone();
        async move { cl.send(Method::GET, path, &headers, "").await }
    };

    // proxy-rewrite only with version=v2.
    assert_eq!(get("/get", vec![]).await.status, 200);
    assert_eq!(origin.last().uri, "/get");
    assert_eq!(get("/get?version=v2", vec![]).await.status, 200);
    assert_eq!(origin.last().uri, "/anything?version=v2");

    // response-rewrite, whose phases are the response's, only with the header: head and body.
    let r = get("/get", vec![("x-rewrite", "1")]).await;
    assert_eq!(r.header("x-rewritten"), Some("yes"));
    assert_eq!(r.text(), "rewritten\n");
    let r = get("/get", vec![]).await;
    assert_eq!(r.header("x-rewritten"), None);
    assert_eq!(r.text(), "ok");

    // limit-count counts only the free tier; its refusal carries the configured body.
    assert_eq!(get("/get?tier=free", vec![]).await.status, 200);
    let r = get("/get?tier=free", vec![]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), "slow down");
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    for _ in 0..3 {
        assert_eq!(get("/get?tier=paid", vec![]).await.status, 200);
    }

    // jwt-auth's 401, with the configured JSON and its challenge kept.
    let r = get("/jwt", vec![]).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.text().trim_end(),
        r#"{"message":"Missing credential in request"}"#
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("www-authenticate"), Some(r#"Bearer realm="jwt""#));
    gw.shutdown();
}

#[test]
fn bad_meta_settings_are_refused_with_their_place() {
    let at = "routes[0].plugins.proxy-rewrite._meta";
    common::assert_refusals(
        "proxy-rewrite",
        &[
            (
                "{uri: /x, _meta: {filter: [[\"no_such_var\", \"==\", \"1\"]]}}",
                format!("{at}.filter"),
            ),
            (
                "{uri: /x, _meta: {filter: [[\"arg_a\", \"~~\", \"(\"]]}}",
                format!("{at}.filter"),
            ),
            (
                "{uri: /x, _meta: {error_response: 12}}",
                format!("{at}.error_response: must be a string or an object"),
            ),
            (
                "{uri: /x, _meta: {filters: []}}",
                format!(
                    "{at}.filters: unknown field, expected one of disable, priority, filter, error_response"
                ),
            ),
        ],
    );
    // Neither on a stream route, where there is no request to read or answer.
    let stream = "stream_routes:\n  - {id: s, listen: \"127.0.0.1:1\", upstream: {nodes: {\"127.0.0.1:2\": 1}}, plugins: {ip-restriction: {whitelist: [127.0.0.1], _meta: {filter: [[\"remote_addr\", \"==\", \"127.0.0.1\"]]}}}}\n";
    let e = sluice_config::load_str_with(stream, &*sluice_plugins::shared())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains(
            "stream_routes[0].plugins.ip-restriction._meta: filter and error_response are for HTTP routes"
        ),
        "{e}"
    );
}
