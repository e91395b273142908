//! The loggers through a live gateway, with real servers receiving what they send: an HTTP
//! server of the test's for `http-logger`; entries in APISIX's shapes, batching, bodies, and a
//! stalled log server that never slows a request and whose dropped entries are counted.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_testkit::{Reply, TestOrigin};

/// Waits (10 s at most) until `f` holds.
async fn eventually(what: &str, f: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A metric's value in the node's exposition (0 when absent).
fn metric(node: &common::TestNode, key: &str) -> f64 {
    let text = sluice_admin::status::exposition(node.node().control(), "").0;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn http_logger_sends_apisix_entries_in_batches() {
    let origin = TestOrigin::http1()
        .route("/", "hello from the origin")
        .run()
        .await;
    let logs = TestOrigin::http1()
        .handler("/logs", |_| Reply::ok(""))
        .run()
        .await;
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - id: full
    uri: /full
    upstream_id: o
    plugins:
      http-logger: {{uri: "http://{l}/logs/full", batch_max_size: 2, inactive_timeout: 1, auth_header: "Bearer s3cret"}}
  - id: fmt
    uri: /fmt
    upstream_id: o
    plugins:
      http-logger:
        uri: http://{l}/logs/fmt
        batch_max_size: 1
        log_format: {{host: "$host", "@timestamp": "$time_iso8601", client_ip: "$remote_addr", status: "$status", nested: {{method: "$request_method", absent: "$http_x_absent"}}, fixed: 5}}
  - id: lines
    uri: /lines
    upstream_id: o
    plugins:
      http-logger: {{uri: "http://{l}/logs/lines", batch_max_size: 3, inactive_timeout: 1, concat_method: new_line, include_req_body: true, include_resp_body: true, max_resp_body_bytes: 5}}
"#,
        o = origin.node(),
        l = logs.node(),
    ));
    let cl = node.proxy();
    for q in ["a=1", "b=2"] {
        let r = cl.get(&format!("/full?{q}")).await;
        assert_eq!(r.status, 200);
    }
    let at = |path: &'static str| {
        let logs = &logs;
        move || logs.requests().iter().any(|r| r.uri.starts_with(path))
    };
    eventually("the batch of two", at("/logs/full")).await;
    let sent = logs
        .requests()
        .into_iter()
        .find(|r| r.uri == "/logs/full")
        .unwrap();
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.header("authorization"), Some("Bearer s3cret"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    let batch: Value = serde_json::from_slice(&sent.body).unwrap();
    let entries = batch.as_array().expect("a JSON array of entries");
    assert_eq!(entries.len(), 2, "{batch}");
    let e = &entries[0];
    assert_eq!(e["request"]["method"], "GET");
    assert_eq!(e["request"]["uri"], "/full?a=1");
    assert_eq!(e["request"]["querystring"]["a"], "1");
    assert!(
        e["request"]["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:"),
        "{e}"
    );
    assert!(e["request"]["headers"]["host"].is_string(), "{e}");
    assert_eq!(e["response"]["status"], 200);
    assert_eq!(e["response"]["size"], 21, "the body's bytes");
    assert!(
        e["response"]["headers"]["content-length"].is_string(),
        "{e}"
    );
    assert_eq!(e["route_id"], "full");
    assert_eq!(e["upstream"], origin.node());
    assert_eq!(e["client_ip"], "127.0.0.1");
    assert!(e["latency"].as_f64().unwrap() > 0.0, "{e}");
    assert!(e["upstream_latency"].as_f64().is_some(), "{e}");
    assert!(e["apisix_latency"].as_f64().is_some(), "{e}");
    let start = e["start_time"].as_u64().unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(now_ms - start < 60_000, "start_time in ms: {start}");
    assert!(e["server"]["hostname"].is_string());
    assert!(e.get("consumer").is_none());
    assert!(e["request"].get("body").is_none(), "not asked for");

    // A custom format, one entry per batch: sent as an object, absent variables left out,
    // the route's id added.
    let r = cl.get("/fmt").await;
    assert_eq!(r.status, 200);
    eventually("the formatted entry", at("/logs/fmt")).await;
    let sent = logs
        .requests()
        .into_iter()
        .find(|r| r.uri == "/logs/fmt")
        .unwrap();
    let e: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(e["host"], "127.0.0.1");
    assert_eq!(e["client_ip"], "127.0.0.1");
    assert_eq!(e["status"], "200");
    assert_eq!(e["fixed"], 5);
    assert_eq!(e["nested"], serde_json::json!({"method": "GET"}));
    assert_eq!(e["route_id"], "fmt");
    assert!(
        e["@timestamp"].as_str().unwrap().ends_with('Z'),
        "{}",
        e["@timestamp"]
    );

    // new_line, with the bodies (the response's cut at its limit); sent after the inactive
    // timeout with two entries.
    for body in ["first", "second"] {
        let r = cl.send(hyper::Method::POST, "/lines", &[], body).await;
        assert_eq!(r.status, 200);
    }
    eventually("the lines", at("/logs/lines")).await;
    let sent = logs
        .requests()
        .into_iter()
        .find(|r| r.uri == "/logs/lines")
        .unwrap();
    assert_eq!(sent.header("content-type"), Some("text/plain"));
    let text = String::from_utf8(sent.body.to_vec()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["request"]["body"], "first");
    assert_eq!(lines[1]["request"]["body"], "second");
    assert_eq!(lines[0]["response"]["body"], "hello");
}

#[tokio::test]
async fn a_stalled_log_server_never_slows_a_request_and_drops_are_counted() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let (stalled, held) = common::stalled_service().await;
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
plugin_metadata:
  - {{id: http-logger, max_pending_entries: 20}}
routes:
  - uri: /logged
    upstream_id: o
    plugins:
      http-logger: {{uri: "http://{stalled}/logs", name: stalled-test, batch_max_size: 1, timeout: 30}}
"#,
        o = origin.node(),
    ));
    let cl = node.proxy();
    let mut slowest = Duration::ZERO;
    for _ in 0..200 {
        let t = Instant::now();
        let r = cl.get("/logged").await;
        slowest = slowest.max(t.elapsed());
        assert_eq!(r.status, 200);
    }
    assert!(
        slowest < Duration::from_millis(500),
        "a request waited for the log server: {slowest:?}"
    );
    let key = |result: &str| {
        format!(
            r#"sluice_logger_entries_total{{plugin="http-logger",name="stalled-test",result="{result}"}}"#
        )
    };
    // 20 entries wait (4 being sent, 16 queued); the other 180 were dropped and counted.
    assert_eq!(metric(&node, &key("dropped")), 180.0);
    assert_eq!(metric(&node, &key("sent")), 0.0);
    assert_eq!(
        metric(
            &node,
            r#"sluice_logger_queue_entries{plugin="http-logger",name="stalled-test"}"#
        ),
        20.0
    );
    held.abort();
}
