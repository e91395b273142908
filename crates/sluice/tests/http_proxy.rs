//! End to end: the gateway in-process, real hyper origins on port 0, real clients. Each test
//! asserts what the origin received as well as what the client got.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use hyper::{Method, StatusCode};
use sluice_testkit::{Gateway, RawClient, Reply, TestOrigin};

fn one_route(origin: &TestOrigin, extra_upstream: &str) -> String {
    format!(
        r#"
routes:
  - id: all
    uri: /*
    upstream:
      nodes: {{"{}": 1}}
{extra_upstream}
"#,
        origin.node()
    )
}

#[tokio::test]
async fn a_get_reaches_the_origin_and_its_answer_comes_back() {
    let origin = TestOrigin::http1()
        .route("/hello", "hello world")
        .run()
        .await;
    let gw = Gateway::start(&one_route(&origin, ""));
    let resp = gw.client().get("/hello?x=1").await;
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(resp.text(), "hello world");
    assert_eq!(resp.header("x-origin"), Some("origin"));
    let got = origin.last();
    assert_eq!(got.method, "GET");
    assert_eq!(got.uri, "/hello?x=1");
    assert_eq!(got.version, hyper::Version::HTTP_11);
}

#[tokio::test]
async fn forwarded_headers_are_added_and_host_is_passed() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&one_route(&origin, ""));
    gw.client()
        .send(Method::GET, "/", &[("host", "api.example.com:8080")], "")
        .await;
    let got = origin.last();
    assert_eq!(got.header("host"), Some("api.example.com:8080"));
    assert_eq!(got.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(got.header("x-real-ip"), Some("127.0.0.1"));
    assert_eq!(got.header("x-forwarded-proto"), Some("http"));
    assert_eq!(got.header("x-forwarded-host"), Some("api.example.com:8080"));
}

#[tokio::test]
async fn x_forwarded_for_is_appended_to_and_spoofed_fields_are_replaced() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&one_route(&origin, ""));
    let headers = [
        ("x-forwarded-for", "203.0.113.7"),
        ("x-forwarded-for", "198.51.100.1, 10.0.0.1"),
        ("x-real-ip", "6.6.6.6"),
        ("x-forwarded-proto", "https"),
    ];
    gw.client().send(Method::GET, "/", &headers, "").await;
    let got = origin.last();
    assert_eq!(
        got.header_all("x-forwarded-for"),
        vec!["203.0.113.7, 198.51.100.1, 10.0.0.1, 127.0.0.1"]
    );
    assert_eq!(got.header_all("x-real-ip"), vec!["127.0.0.1"]);
    assert_eq!(got.header_all("x-forwarded-proto"), vec!["http"]);
}

#[tokio::test]
async fn pass_host_node_and_rewrite_set_the_upstream_host() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        r#"
routes:
  - uri: /node
    upstream: {{pass_host: node, nodes: {{"{n}": 1}}}}
  - uri: /rewrite
    upstream: {{pass_host: rewrite, upstream_host: backend.internal, nodes: {{"{n}": 1}}}}
"#,
        n = origin.node()
    ));
    gw.client()
        .send(Method::GET, "/node", &[("host", "public.example")], "")
        .await;
    assert_eq!(origin.last().header("host"), Some(origin.node().as_str()));
    assert_eq!(
        origin.last().header("x-forwarded-host"),
        Some("public.example")
    );
    gw.client()
        .send(Method::GET, "/rewrite", &[("host", "public.example")], "")
        .await;
    assert_eq!(origin.last().header("host"), Some("backend.internal"));
}

#[tokio::test]
async fn hop_by_hop_request_fields_are_not_forwarded() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&one_route(&origin, ""));
    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(
        b"GET /h HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Secret-Hop\r\nX-Secret-Hop: 1\r\n\
Keep-Alive: timeout=5\r\nTE: trailers\r\nTrailer: X-T\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\n\
Proxy-Connection: keep-alive\r\nUpgrade: h2c\r\nX-Kept: yes\r\n\r\n",
    )
    .await;
    assert_eq!(raw.response().await.status, 200);
    let got = origin.last();
    for name in [
        "connection",
        "x-secret-hop",
        "keep-alive",
        "te",
        "trailer",
        "proxy-authorization",
        "proxy-connection",
        "upgrade",
    ] {
        assert!(
            !got.has_header(name),
            "{name} was forwarded: {:?}",
            got.headers
        );
    }
    assert_eq!(got.header("x-kept"), Some("yes"));
}

#[tokio::test]
async fn hop_by_hop_response_fields_are_not_forwarded() {
    let origin = TestOrigin::http1()
        .handler("/", |_| {
            Reply::ok("x")
                .header("connection", "x-internal")
                .header("x-internal", "secret")
                .header("keep-alive", "timeout=5")
                .header("proxy-authenticate", "Basic")
                .header("x-public", "yes")
        })
        .run()
        .await;
    let gw = Gateway::start(&one_route(&origin, ""));
    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let resp = raw.response().await;
    for name in [
        "x-internal",
        "keep-alive",
        "proxy-authenticate",
        "connection",
    ] {
        assert!(
            resp.header(name).is_none(),
            "{name} was forwarded: {:?}",
            resp.headers
        );
    }
    assert_eq!(resp.header("x-public"), Some("yes"));
}

#[tokio::test]
async fn request_bodies_arrive_whole_with_length_or_chunked() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&one_route(&origin, ""));
    let resp = gw
        .client()
        .send(Method::POST, "/upload", &[], "name=sluice")
        .await;
    assert_eq!(resp.status, 200);
    assert_eq!(&origin.last().body[..], b"name=sluice");
    assert_eq!(origin.last().header("content-length"), Some("11"));

    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n").await;
    assert_eq!(raw.response().await.status, 200);
    let got = origin.last();
    assert_eq!(&got.body[..], b"hello world");
    assert_eq!(got.header("transfer-encoding"), Some("chunked"));
}

#[tokio::test]
async fn a_large_upload_streams_through_intact() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&one_route(&origin, "limits: {max_body_size: 64m}"));
    let body: Vec<u8> = (0..6_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let resp = gw
        .client()
        .send(Method::PUT, "/big", &[], body.clone())
        .await;
    assert_eq!(resp.status, 200);
    assert!(
        origin.last().body == body,
        "the origin received a different body"
    );
}

#[tokio::test]
async fn chunked_responses_are_rechunked_for_http11_and_close_delimited_for_http10() {
    let origin = TestOrigin::http1()
        .handler("/", |_| Reply::ok("").chunked(&["one ", "two ", "three"]))
        .run()
        .await;
    let gw = Gateway::start(&one_route(&origin, ""));
    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = raw.response().await;
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.text(), "one two three");

    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(b"GET / HTTP/1.0\r\n\r\n").await;
    let r = raw.response().await;
    assert!(r.header("transfer-encoding").is_none());
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.text(), "one two three");
}

#[tokio::test]
async fn head_and_bodiless_statuses_carry_no_body() {
    let origin = TestOrigin::http1()
        .handler("/nc", |_| Reply::status(204))
        .handler("/nm", |_| Reply::status(304).header("etag", "\"x\""))
        .route("/", "twelve bytes")
        .run()
        .await;
    let gw = Gateway::start(&one_route(&origin, ""));
    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = raw.response_to(true).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("12"));
    // The same connection goes on: nothing was left behind by the HEAD.
    raw.send(b"GET /nc HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(raw.response().await.status, 204);
    raw.send(b"GET /nm HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = raw.response().await;
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some("\"x\""));
    raw.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(raw.response().await.text(), "twelve bytes");
    assert!(raw.leftover().is_empty());
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&one_route(&origin, ""));
    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(b"PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        .await;
    let interim = raw.response().await;
    assert_eq!(interim.status, 100);
    raw.send(b"hello").await;
    let r = raw.response().await;
    assert_eq!(r.status, 200);
    let got = origin.last();
    assert_eq!(&got.body[..], b"hello");
    assert!(
        !got.has_header("expect"),
        "the gateway answers Expect itself"
    );
}

#[tokio::test]
async fn unknown_routes_get_a_json_404() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /only\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        origin.node()
    ));
    let r = gw.client().get("/other").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["error_msg"], "404 Route Not Found");
    assert!(origin.requests().is_empty());
}

#[tokio::test]
async fn routes_match_by_host_method_path_and_priority() {
    let a = TestOrigin::http1().name("a").run().await;
    let b = TestOrigin::http1().name("b").run().await;
    let c = TestOrigin::http1().name("c").run().await;
    let d = TestOrigin::http1().name("d").run().await;
    let gw = Gateway::start(&format!(
        r#"
routes:
  - id: api-host
    uri: /api/*
    hosts: ["api.example.com"]
    upstream: {{nodes: {{"{a}": 1}}}}
  - id: wildcard
    uri: /api/*
    host: "*.example.com"
    upstream: {{nodes: {{"{b}": 1}}}}
  - id: users-post
    uri: /users/:id
    methods: [POST]
    upstream: {{nodes: {{"{c}": 1}}}}
  - id: catch-all
    uri: /*
    upstream: {{nodes: {{"{d}": 1}}}}
  - id: boosted
    uri: /boost/*
    priority: 10
    upstream: {{nodes: {{"{a}": 1}}}}
  - id: exact-low
    uri: /boost/x
    upstream: {{nodes: {{"{b}": 1}}}}
"#,
        a = a.node(),
        b = b.node(),
        c = c.node(),
        d = d.node()
    ));
    let cl = gw.client();
    let who = |r: sluice_testkit::TestResponse| r.header("x-origin").unwrap_or("").to_owned();
    assert_eq!(
        who(cl
            .send(Method::GET, "/api/v1", &[("host", "api.example.com")], "")
            .await),
        "a"
    );
    assert_eq!(
        who(cl
            .send(Method::GET, "/api/v1", &[("host", "shop.example.com")], "")
            .await),
        "b"
    );
    assert_eq!(
        who(cl
            .send(Method::GET, "/api/v1", &[("host", "other.org")], "")
            .await),
        "d"
    );
    assert_eq!(who(cl.send(Method::POST, "/users/42", &[], "").await), "c");
    assert_eq!(who(cl.send(Method::GET, "/users/42", &[], "").await), "d");
    assert_eq!(who(cl.get("/boost/x").await), "a");
    // Paths are normalized before matching: an encoded or dotted path cannot dodge a route.
    assert_eq!(
        who(cl
            .send(Method::GET, "/%61pi/x", &[("host", "api.example.com")], "")
            .await),
        "a"
    );
    assert_eq!(
        who(cl
            .send(
                Method::GET,
                "/x/../api/y",
                &[("host", "api.example.com")],
                ""
            )
            .await),
        "a"
    );
}

#[tokio::test]
async fn keep_alive_connections_to_the_origin_are_reused() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&one_route(&origin, ""));
    let mut conn = gw.client().connection().await;
    for _ in 0..50 {
        assert_eq!(conn.get("/").await.unwrap().status, 200);
    }
    assert_eq!(origin.requests().len(), 50);
    assert_eq!(
        origin.connections(),
        1,
        "the pooled upstream connection was not reused"
    );
}

#[tokio::test]
async fn weighted_round_robin_splits_by_weight() {
    let a = TestOrigin::http1().name("a").run().await;
    let b = TestOrigin::http1().name("b").run().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 3, \"{}\": 1}}}}\n",
        a.node(),
        b.node()
    ));
    let mut conn = gw.client().connection().await;
    for _ in 0..40 {
        conn.get("/").await.unwrap();
    }
    assert_eq!((a.requests().len(), b.requests().len()), (30, 10));
}

#[tokio::test]
async fn a_dead_node_is_skipped_and_the_request_retried_on_the_next() {
    let live = TestOrigin::http1().name("live").run().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{dead_addr}\": 1, \"{}\": 1}}}}\n",
        live.node()
    ));
    for _ in 0..10 {
        let r = gw.client().get("/").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-origin"), Some("live"));
    }
}

#[tokio::test]
async fn connection_refused_is_a_502_with_a_json_body() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{addr}\": 1}}}}\n"
    ));
    let r = gw.client().get("/").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["error_msg"], "cannot connect to upstream");
}

#[tokio::test]
async fn an_upstream_with_no_node_in_rotation_is_a_503() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 0}}}}\n",
        origin.node()
    ));
    let r = gw.client().get("/").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error_msg"], "no healthy upstream node");
    assert!(origin.requests().is_empty());
}

#[tokio::test]
async fn a_slow_origin_is_a_504_after_the_read_timeout() {
    let origin = sluice_proxy::origin::Origin::start("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{timeout: {{read: 0.2}}, nodes: {{\"{}\": 1}}}}\n",
        origin.addr()
    ));
    let started = std::time::Instant::now();
    let r = gw.client().get("/delay/2000").await;
    assert_eq!(r.status, 504);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(gw.client().get("/delay/10").await.status, 200);
    origin.stop();
}

#[tokio::test]
async fn a_connect_timeout_is_a_504() {
    // A listener whose accept queue is full drops further SYNs: connects hang.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    socket.listen(0).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            fillers.push(s);
        }
    }
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{timeout: {{connect: 0.3}}, nodes: {{\"{addr}\": 1}}}}\n"
    ));
    let r = gw.client().get("/").await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error_msg"], "upstream timed out");
}

#[tokio::test]
async fn an_invalid_upstream_response_is_a_502() {
    let addr = sluice_testkit::canned_origin(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{addr}\": 1}}}}\n"
    ));
    let r = gw.client().get("/").await;
    assert_eq!(r.status, 502);
}

#[tokio::test]
async fn a_truncated_response_body_reaches_the_client_truncated() {
    let addr =
        sluice_testkit::canned_origin(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
            .await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{addr}\": 1}}}}\n"
    ));
    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let all = raw.read_to_close().await;
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.ends_with("only part"),
        "the client must see the body cut short: {text}"
    );
}

#[tokio::test]
async fn a_pooled_connection_closed_by_the_origin_is_not_used() {
    // An origin that answers one request per connection and then closes, without saying so.
    let addr =
        sluice_testkit::canned_origin(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{addr}\": 1}}}}\n"
    ));
    let mut conn = gw.client().connection().await;
    for i in 0..20 {
        let r = conn.get("/").await.unwrap();
        assert_eq!(r.status, 200, "request {i}");
        tokio::time::sleep(Duration::from_millis(if i % 2 == 0 { 50 } else { 0 })).await;
    }
}

#[tokio::test]
async fn interim_103_responses_are_forwarded() {
    let addr = sluice_testkit::canned_origin(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{addr}\": 1}}}}\n"
    ));
    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let early = raw.response().await;
    assert_eq!(early.status, 103);
    assert_eq!(early.header("link"), Some("</style.css>; rel=preload"));
    let fin = raw.response().await;
    assert_eq!((fin.status, fin.text().as_str()), (200, "ok"));
}

#[tokio::test]
async fn the_seed_scenario_configs_route_as_apisix_would() {
    let origin = TestOrigin::http1()
        .route("/hello", "hello world")
        .run()
        .await;
    let s1 = format!(
        "routes:\n  - uri: /hello\n    upstream:\n      nodes:\n        \"{}\": 1\n      type: roundrobin\n#END\n",
        origin.node()
    );
    let gw = Gateway::start(&s1);
    assert_eq!(gw.client().get("/hello").await.text(), "hello world");
    assert_eq!(gw.client().get("/hello/").await.status, 404);
    gw.shutdown();

    let mut s4 = String::from("routes:\n");
    for i in 1..=5000 {
        s4.push_str(&format!(
            "\n  - id: {i}\n    uri: /hello{i}\n    upstream:\n      nodes:\n        \"{}\": 1\n      type: roundrobin\n",
            origin.node()
        ));
    }
    s4.push_str("#END\n");
    let gw = Gateway::start(&s4);
    assert_eq!(gw.server().snapshot().route_count(), 5000);
    assert_eq!(gw.server().snapshot().upstream_count(), 1);
    assert_eq!(gw.client().get("/hello5000").await.status, 200);
    assert_eq!(origin.last().uri, "/hello5000");
    assert_eq!(gw.client().get("/hello1").await.status, 200);
    assert_eq!(gw.client().get("/hello5001").await.status, 404);
}

#[tokio::test]
async fn the_access_log_records_each_request_when_enabled() {
    let origin = TestOrigin::http1().run().await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sluice-test-access-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    let _ = std::fs::remove_file(&path);
    let gw = Gateway::start(&format!(
        "log: {{access: {{path: \"{}\"}}}}\nroutes:\n  - id: r1\n    uri: /in/*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        path.display(),
        origin.node()
    ));
    assert_eq!(gw.client().get("/in/x?q=1").await.status, 200);
    assert_eq!(gw.client().get("/out").await.status, 404);
    gw.shutdown();
    let log = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].contains("127.0.0.1 \"GET /in/x?q=1 HTTP/1.1\" 200 6 "),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].ends_with(&format!("r1 {}", origin.node())),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("\"GET /out HTTP/1.1\" 404 "),
        "{}",
        lines[1]
    );
    assert!(lines[1].ends_with(" - -"), "{}", lines[1]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn shutdown_lets_a_request_in_flight_finish_and_refuses_new_connections() {
    let origin = sluice_proxy::origin::Origin::start("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        origin.addr()
    ));
    let addr = gw.addr();
    let client = gw.client();
    let slow = tokio::spawn(async move { client.get("/delay/500").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopping = gw.shutdown_in_background();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "a new connection was accepted while draining"
    );
    let r = slow.await.unwrap();
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "hello world"));
    stopping.join().unwrap();
    origin.stop();
}

/// Bodies larger than any read (Content-Length, both ways) arrive byte for byte, and the
/// connection serves the next request: they leave the client's and the origin's read buffers
/// straight, not through a copy (issue 12), so what is counted as sent must be what was
/// written and what follows in the buffer must stay.
#[tokio::test]
async fn large_bodies_cross_both_ways_byte_for_byte_on_one_connection() {
    let pattern = |n: usize, seed: u32| -> Vec<u8> {
        (0..n as u32)
            .map(|i| b'a' + ((i.wrapping_mul(7) ^ seed) % 26) as u8)
            .collect()
    };
    let down = pattern(3 * 1024 * 1024 + 11, 5);
    let served = bytes::Bytes::from(down.clone());
    let origin = TestOrigin::http1()
        .handler("/down", move |_| Reply::ok(served.clone()))
        .handler("/up", |r| Reply::ok(format!("{}", r.body.len())))
        .run()
        .await;
    let gw = Gateway::start(&format!(
        "limits: {{max_body_size: 8m}}\n{}",
        one_route(&origin, "")
    ));
    let mut conn = gw.client().connection().await;
    for round in 0..2 {
        let up = pattern(2 * 1024 * 1024 + 3 + round, 9 + round as u32);
        let resp = conn
            .send(Method::POST, "/up", &[], up.clone())
            .await
            .unwrap();
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(resp.text(), up.len().to_string());
        assert!(origin.last().body == up, "the upload arrived changed");
        let resp = conn.get("/down").await.unwrap();
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(resp.body.len(), down.len());
        assert!(resp.body == down, "the download arrived changed");
    }
}
