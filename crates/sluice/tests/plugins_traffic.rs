//! Rewrite, redirect, response, CORS, request-id, mocking, fault-injection, traffic-split and
//! proxy-mirror plugins through the real gateway.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use hyper::Method;
use sluice_testkit::{Gateway, RawClient, Reply, TestOrigin};

fn route(origin: &TestOrigin, plugins: &str) -> String {
    format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n{plugins}\n",
        origin.node()
    )
}

#[tokio::test]
async fn proxy_rewrite_changes_what_the_origin_receives() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(
        &origin,
        "      proxy-rewrite: {strip_prefix: /api, host: internal.svc, method: POST, headers: {set: {X-Client: $remote_addr}, remove: [X-Debug]}}",
    ));
    gw.client()
        .send(
            Method::GET,
            "/api/users/7?full=1",
            &[("x-debug", "1"), ("host", "public.test")],
            "",
        )
        .await;
    let got = origin.last();
    assert_eq!(got.uri, "/users/7?full=1");
    assert_eq!(got.method, "POST");
    assert_eq!(got.header("host"), Some("internal.svc"));
    assert_eq!(got.header("x-forwarded-host"), Some("public.test"));
    assert_eq!(got.header("x-client"), Some("127.0.0.1"));
    assert!(!got.has_header("x-debug"));
}

/// APISIX's `redirect` on a route without an upstream (HTTP to HTTPS on the port
/// `plugin_attr` gives, 308 for a POST), and beside an upstream (`regex_uri`: only what
/// matches is redirected; the rest is proxied).
#[tokio::test]
async fn redirect_answers_without_an_upstream_and_passes_what_it_does_not_match() {
    let origin = TestOrigin::http1().route("/keep", "kept").run().await;
    let gw = Gateway::start(&format!(
        "plugin_attr:
  redirect: {{https_port: 9443}}
routes:
  - uri: /secure/*
    plugins:
      redirect: {{http_to_https: true}}
  - uri: /*
    upstream: {{nodes: {{\"{}\": 1}}}}
    plugins:
      redirect: {{regex_uri: [\"^/old/(.*)\", \"/new/$1\"], ret_code: 301, append_query_string: true}}
",
        origin.node()
    ));
    let cl = gw.client();
    let r = cl
        .send(Method::GET, "/secure/a?x=1", &[("host", "shop.test")], "")
        .await;
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://shop.test:9443/secure/a?x=1")
    );
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert!(
        r.text().contains("<title>301 Moved Permanently</title>"),
        "{}",
        r.text()
    );
    let r = cl
        .send(Method::POST, "/secure/a", &[("host", "shop.test")], "x")
        .await;
    assert_eq!(r.status, 308);
    let r = cl
        .send(
            Method::GET,
            "/secure/a",
            &[("x-forwarded-proto", "https")],
            "",
        )
        .await;
    assert_eq!(
        r.status, 503,
        "no redirect for HTTPS; the route has no upstream"
    );

    let r = cl.get("/old/items/7?page=2").await;
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/new/items/7?page=2"));
    let r = cl.get("/keep").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "kept"));
    assert_eq!(
        origin.requests().len(),
        1,
        "only what was not redirected was proxied"
    );
}

#[tokio::test]
async fn response_rewrite_replaces_status_headers_and_body() {
    let origin = TestOrigin::http1()
        .handler("/", |_| {
            Reply::ok("original body").header("x-powered-by", "php")
        })
        .run()
        .await;
    let gw = Gateway::start(&route(
        &origin,
        "      response-rewrite: {status_code: 202, body: \"{\\\"replaced\\\":true}\", headers: {set: {X-Version: v2}, remove: [X-Powered-By]}}",
    ));
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response().await;
    assert_eq!(r.status, 202);
    assert_eq!(r.text(), "{\"replaced\":true}");
    assert_eq!(r.header("content-length"), Some("17"));
    assert_eq!(r.header("x-version"), Some("v2"));
    assert!(r.header("x-powered-by").is_none());
    // The connection stays usable.
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response().await.status, 202);
}

/// A plugin that sets a status without a body (204, 304) on an answer the node sent with one:
/// the client gets no body and no length that promises one, and the next request on the same
/// connection is answered, not fed the node's leftover bytes (a response desync otherwise).
#[tokio::test]
async fn response_rewrite_to_a_status_without_body_sends_none() {
    let origin = TestOrigin::http1()
        .handler("/len", |_| Reply::ok("original body"))
        .handler("/chunked", |_| Reply::ok("").chunked(&["one ", "two"]))
        .run()
        .await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /len\n    upstream: {{nodes: {{\"{0}\": 1}}}}\n    plugins: {{response-rewrite: {{status_code: 204}}}}\n  - uri: /chunked\n    upstream: {{nodes: {{\"{0}\": 1}}}}\n    plugins: {{response-rewrite: {{status_code: 304, body: replaced}}}}\n",
        origin.node()
    ));
    let mut c = RawClient::connect(gw.addr()).await;
    for path in ["/len", "/chunked", "/len", "/chunked"] {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
            .await;
        let r = c.response().await;
        let want = if path == "/len" { 204 } else { 304 };
        assert_eq!(r.status, want, "{path}");
        assert!(r.header("transfer-encoding").is_none(), "{path}");
        if want == 204 {
            // RFC 9110 §8.6: no Content-Length in a 204.
            assert!(r.header("content-length").is_none(), "{path}");
        }
    }
    // Nothing is left over on the connection after the last answer.
    c.send(b"GET /len HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await;
    let r = c.response().await;
    assert_eq!(r.status, 204);
    assert!(
        c.leftover().is_empty(),
        "{:?}",
        String::from_utf8_lossy(c.leftover())
    );
    assert!(
        c.read_to_close().await.is_empty(),
        "nothing after the last head"
    );
}

#[tokio::test]
async fn response_rewrite_filters_edit_a_streamed_body() {
    let origin = TestOrigin::http1()
        .handler("/", |_| {
            Reply::ok("").chunked(&["price: 10 EUR, ", "tax: 2 EUR"])
        })
        .run()
        .await;
    let gw = Gateway::start(&route(
        &origin,
        "      response-rewrite: {filters: [{regex: EUR, replace: \"€\", scope: global}]}",
    ));
    let r = gw.client().get("/").await;
    assert_eq!(r.text(), "price: 10 €, tax: 2 €");
    // HTTP/1.0 clients get the filtered body delimited by the close.
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET / HTTP/1.0\r\n\r\n").await;
    assert_eq!(c.response().await.text(), "price: 10 €, tax: 2 €");
}

#[tokio::test]
async fn cors_answers_preflights_and_decorates_denials_too() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(
        &origin,
        "      cors: {allow_origins: \"https://app.test\", allow_methods: \"GET,POST\", allow_headers: \"apikey\", allow_credential: true}\n      key-auth: {}",
    ));
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"OPTIONS /x HTTP/1.1\r\nHost: a\r\nOrigin: https://app.test\r\nAccess-Control-Request-Method: POST\r\n\r\n").await;
    let pre = c.response().await;
    assert_eq!(pre.status, 200);
    assert_eq!(
        pre.header("access-control-allow-origin"),
        Some("https://app.test")
    );
    assert_eq!(pre.header("access-control-allow-methods"), Some("GET,POST"));
    assert_eq!(pre.header("access-control-allow-credentials"), Some("true"));
    assert!(
        origin.requests().is_empty(),
        "preflights never reach the origin"
    );
    // key-auth refuses, and the browser still sees the CORS headers on the 401.
    c.send(b"GET /x HTTP/1.1\r\nHost: a\r\nOrigin: https://app.test\r\n\r\n")
        .await;
    let denied = c.response().await;
    assert_eq!(denied.status, 401);
    assert_eq!(
        denied.header("access-control-allow-origin"),
        Some("https://app.test")
    );
}

#[tokio::test]
async fn request_id_reaches_the_origin_and_comes_back() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(&origin, "      request-id: {}"));
    let r = gw.client().get("/").await;
    let id = r.header("x-request-id").unwrap().to_owned();
    assert_eq!(id.len(), 36);
    assert_eq!(origin.last().header("x-request-id"), Some(id.as_str()));
    let r = gw
        .client()
        .send(Method::GET, "/", &[("x-request-id", "client-chosen")], "")
        .await;
    assert_eq!(r.header("x-request-id"), Some("client-chosen"));
}

#[tokio::test]
async fn mocking_answers_without_the_origin() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(
        &origin,
        "      mocking: {response_status: 201, response_example: \"{\\\"id\\\":42}\", delay: 0.2}",
    ));
    let started = Instant::now();
    let r = gw.client().send(Method::POST, "/orders", &[], "{}").await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!((r.status.as_u16(), r.text().as_str()), (201, "{\"id\":42}"));
    assert_eq!(r.header("x-mock-by"), Some("Sluice"));
    assert!(origin.requests().is_empty());
}

#[tokio::test]
async fn fault_injection_aborts_and_delays() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(
        &origin,
        "      fault-injection: {abort: {http_status: 503, body: injected, vars: [[\"arg_fail\", \"==\", \"1\"]]}, delay: {duration: 0.2}}",
    ));
    let started = Instant::now();
    let r = gw.client().get("/?fail=1").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (503, "injected"));
    assert!(started.elapsed() >= Duration::from_millis(200));
    let r = gw.client().get("/?fail=0").await;
    assert_eq!(r.status, 200);
    assert_eq!(origin.requests().len(), 1);
}

#[tokio::test]
async fn traffic_split_sends_the_configured_share_to_the_canary() {
    let stable = TestOrigin::http1().name("stable").run().await;
    let canary = TestOrigin::http1().name("canary").run().await;
    let gw = Gateway::start(&format!(
        r#"
upstreams:
  - id: canary
    nodes: {{"{}": 1}}
routes:
  - uri: /*
    upstream: {{nodes: {{"{}": 1}}}}
    plugins:
      traffic-split:
        rules:
          - match: [{{vars: [["http_x_beta", "==", "yes"]]}}]
            weighted_upstreams: [{{upstream_id: canary}}]
          - weighted_upstreams: [{{upstream_id: canary, weight: 1}}, {{weight: 4}}]
"#,
        canary.node(),
        stable.node()
    ));
    let mut conn = gw.client().connection().await;
    for _ in 0..50 {
        conn.get("/").await.unwrap();
    }
    assert_eq!((stable.requests().len(), canary.requests().len()), (40, 10));
    let r = gw
        .client()
        .send(Method::GET, "/", &[("x-beta", "yes")], "")
        .await;
    assert_eq!(r.header("x-origin"), Some("canary"));
}

#[tokio::test]
async fn proxy_mirror_copies_requests_without_affecting_them() {
    let main = TestOrigin::http1().name("main").run().await;
    let shadow = TestOrigin::http1()
        .name("shadow")
        .handler("/", |_| Reply::status(500))
        .run()
        .await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      proxy-mirror: {{host: \"http://{}\", path: /copy, path_concat_mode: prefix}}\n",
        main.node(),
        shadow.node()
    ));
    let r = gw
        .client()
        .send(Method::POST, "/orders?x=1", &[], "{\"n\":1}")
        .await;
    assert_eq!(r.header("x-origin"), Some("main"));
    assert_eq!(r.status, 200, "the shadow's 500 never reaches the client");
    let deadline = Instant::now() + Duration::from_secs(5);
    while shadow.requests().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let copy = shadow.last();
    assert_eq!(copy.method, "POST");
    assert_eq!(copy.uri, "/copy/orders?x=1");
    assert_eq!(&copy.body[..], b"{\"n\":1}");
    // A mirror that is down changes nothing either.
    shadow.stop();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      proxy-mirror: {{host: \"http://{dead}\"}}\n",
        main.node()
    ));
    assert_eq!(gw.client().get("/").await.status, 200);
}
