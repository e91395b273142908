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

/// An HTTP log server: answers 200 to every batch under `/logs`, and records them.
async fn log_server() -> TestOrigin {
    TestOrigin::http1()
        .handler("/logs", |_| Reply::ok(""))
        .run()
        .await
}

/// A metric's value in the node's exposition (0 when absent).
fn metric(node: &common::TestNode, key: &str) -> f64 {
    let text = sluice_admin::status::exposition(node.node().control(), "")
        .expect("metrics")
        .0;
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
    let logs = log_server().await;
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
        log_format: {{host: "$host", "@timestamp": "$time_iso8601", client_ip: "$remote_addr", status: "$status", nested: {{method: "$request_method", absent: "$http_x_absent"}}, fixed: 5, resp_origin: "$sent_http_X_Origin"}}
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
    assert_eq!(
        e["resp_origin"], "origin",
        "$sent_http_* reads the response: {e}"
    );
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
  - uri: /other
    upstream_id: o
    plugins:
      http-logger: {{uri: "http://{stalled}/logs", name: stalled-other, batch_max_size: 1, timeout: 30}}
"#,
        o = origin.node(),
    ));
    let cl = node.proxy();
    let mut slowest = Duration::ZERO;
    for i in 0..200 {
        let t = Instant::now();
        let r = cl.get(if i % 2 == 0 { "/logged" } else { "/other" }).await;
        slowest = slowest.max(t.elapsed());
        assert_eq!(r.status, 200);
    }
    assert!(
        slowest < Duration::from_millis(500),
        "a request waited for the log server: {slowest:?}"
    );
    let key = |name: &str, result: &str| {
        format!(
            r#"sluice_logger_entries_total{{plugin="http-logger",name="{name}",result="{result}"}}"#
        )
    };
    let queued = |name: &str| {
        metric(
            &node,
            &format!(r#"sluice_logger_queue_entries{{plugin="http-logger",name="{name}"}}"#),
        )
    };
    // 20 entries wait on the worker for the plugin, whatever route they came from (4 being
    // sent per route, the rest queued); the other 180 were dropped and counted.
    // (The log phase runs after the response is sent: the last entry may still be coming.)
    let dropped = || {
        metric(&node, &key("stalled-test", "dropped"))
            + metric(&node, &key("stalled-other", "dropped"))
    };
    eventually("180 entries dropped", || dropped() >= 180.0).await;
    assert_eq!(dropped(), 180.0);
    assert_eq!(metric(&node, &key("stalled-test", "sent")), 0.0);
    assert_eq!(queued("stalled-test") + queued("stalled-other"), 20.0);
    held.abort();
}

#[tokio::test]
async fn tcp_udp_and_file_loggers_deliver_apisix_batches() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    // A TCP log server: each connection's bytes, once it closes.
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tcp_addr = tcp.local_addr().unwrap();
    let (tcp_tx, mut tcp_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = tcp.accept().await {
            let tx = tcp_tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let _ = tokio::io::AsyncReadExt::read_to_end(&mut c, &mut buf).await;
                let _ = tx.send(buf);
            });
        }
    });
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let udp_addr = udp.local_addr().unwrap();
    let dir = std::env::temp_dir().join(format!("sluice-file-logger-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("access.json");
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - {{id: tcp, uri: /tcp, upstream_id: o, plugins: {{tcp-logger: {{host: 127.0.0.1, port: {tp}, batch_max_size: 2, inactive_timeout: 1}}}}}}
  - {{id: udp, uri: /udp, upstream_id: o, plugins: {{udp-logger: {{host: 127.0.0.1, port: {up}, batch_max_size: 1, log_format: {{uri: "$uri"}}}}}}}}
  - {{id: file, uri: /file, upstream_id: o, plugins: {{file-logger: {{path: "{f}", log_format: {{uri: "$request_uri", s: "$status"}}}}}}}}
  - {{id: quiet, uri: /quiet, upstream_id: o, plugins: {{file-logger: {{path: "{f}", match: [[[arg_log, "==", "yes"]]], log_format: {{uri: "$request_uri"}}}}}}}}
"#,
        o = origin.node(),
        tp = tcp_addr.port(),
        up = udp_addr.port(),
        f = file.display(),
    ));
    let cl = node.proxy();

    // tcp-logger: two entries, one connection, a JSON array.
    for _ in 0..2 {
        assert_eq!(cl.get("/tcp").await.status, 200);
    }
    let got = tokio::time::timeout(Duration::from_secs(10), tcp_rx.recv())
        .await
        .unwrap()
        .unwrap();
    let batch: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(batch.as_array().unwrap().len(), 2, "{batch}");
    assert_eq!(batch[0]["route_id"], "tcp");
    assert_eq!(batch[1]["response"]["status"], 200);

    // udp-logger with batch_max_size 1: a datagram holding the entry itself.
    assert_eq!(cl.get("/udp").await.status, 200);
    let mut buf = vec![0u8; 65_536];
    let n = tokio::time::timeout(Duration::from_secs(10), udp.recv(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let e: Value = serde_json::from_slice(&buf[..n]).unwrap();
    assert_eq!(e, serde_json::json!({"uri": "/udp", "route_id": "udp"}));

    // file-logger: one line per entry; `match` picks the requests logged.
    assert_eq!(cl.get("/file?n=1").await.status, 200);
    assert_eq!(cl.get("/quiet?log=no").await.status, 200);
    assert_eq!(cl.get("/quiet?log=yes").await.status, 200);
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    eventually("two lines in the file", || read(&file).lines().count() == 2).await;
    let text = read(&file);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let uris: Vec<&str> = lines.iter().map(|l| l["uri"].as_str().unwrap()).collect();
    assert!(
        uris.contains(&"/file?n=1") && uris.contains(&"/quiet?log=yes"),
        "{text}"
    );
    let file_line = lines.iter().find(|l| l["uri"] == "/file?n=1").unwrap();
    assert_eq!(file_line["s"], "200");

    // Rotated: moved away, then SIGUSR1's reopen; the next entry starts a new file.
    let rotated = dir.join("access.json.1");
    std::fs::rename(&file, &rotated).unwrap();
    sluice_proxy::reopen_logs();
    assert_eq!(cl.get("/file?n=2").await.status, 200);
    eventually("the new file", || read(&file).contains("/file?n=2")).await;
    assert!(!read(&rotated).contains("/file?n=2"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// rsyslogd from Debian, in the foreground, taking RFC 5424 messages over TCP and UDP and
/// writing each as `hostname|app|facility|severity|msg`.
struct Rsyslog {
    child: std::process::Child,
    dir: std::path::PathBuf,
    tcp: u16,
    udp: u16,
}

impl Rsyslog {
    fn start() -> Rsyslog {
        let dir = std::env::temp_dir().join(format!("sluice-rsyslog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (tcp, udp) = (common::free_port(), common::free_port());
        let conf = format!(
            r#"global(workDirectory="{d}")
module(load="imtcp")
module(load="imudp")
input(type="imtcp" port="{tcp}" address="127.0.0.1")
input(type="imudp" port="{udp}" address="127.0.0.1")
template(name="t" type="string" string="%hostname%|%app-name%|%syslogfacility-text%|%syslogseverity-text%|%msg%\n")
action(type="omfile" file="{d}/out.log" template="t")
"#,
            d = dir.display()
        );
        std::fs::write(dir.join("rsyslog.conf"), conf).unwrap();
        let bin = if std::path::Path::new("/usr/sbin/rsyslogd").exists() {
            "/usr/sbin/rsyslogd"
        } else {
            "rsyslogd"
        };
        let child = std::process::Command::new(bin)
            .args(["-n", "-iNONE", "-f"])
            .arg(dir.join("rsyslog.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("rsyslogd (Debian's rsyslog package; ./test.sh installs it)");
        common::wait_for_port(tcp, "rsyslogd");
        Rsyslog {
            child,
            dir,
            tcp,
            udp,
        }
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("out.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn syslog_messages_reach_a_real_rsyslogd_over_tcp_and_udp() {
    let syslogd = Rsyslog::start();
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - {{id: t, uri: /t, upstream_id: o, plugins: {{syslog: {{host: 127.0.0.1, port: {tcp}, batch_max_size: 2, inactive_timeout: 1, log_format: {{uri: "$uri", via: tcp}}}}}}}}
  - {{id: u, uri: /u, upstream_id: o, plugins: {{syslog: {{host: 127.0.0.1, port: {udp}, sock_type: udp, batch_max_size: 1, log_format: {{uri: "$uri", via: udp}}}}}}}}
"#,
        o = origin.node(),
        tcp = syslogd.tcp,
        udp = syslogd.udp,
    ));
    let cl = node.proxy();
    for path in ["/t", "/t", "/u"] {
        let r = cl
            .send(hyper::Method::GET, path, &[("host", "shop.test")], "")
            .await;
        assert_eq!(r.status, 200);
    }
    eventually("three messages in rsyslogd's file", || {
        syslogd.lines().len() >= 3
    })
    .await;
    let lines = syslogd.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for via in ["tcp", "udp"] {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!("\"via\":\"{via}\"")))
            .unwrap_or_else(|| panic!("no {via} message in {lines:?}"));
        let parts: Vec<&str> = line.splitn(5, '|').collect();
        assert_eq!(
            parts[..4],
            ["shop.test", "apisix", "syslog", "info"],
            "{line}"
        );
        let msg: Value = serde_json::from_str(parts[4].trim()).unwrap();
        assert_eq!(msg["via"], via);
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("\"via\":\"tcp\""))
            .count(),
        2,
        "each message of a batch its own: {lines:?}"
    );
}

#[tokio::test]
async fn entries_still_queued_go_out_when_the_gateway_stops() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let logs = log_server().await;
    let mut node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /a
    upstream_id: o
    plugins:
      http-logger: {{uri: "http://{l}/logs", inactive_timeout: 600, buffer_duration: 600}}
"#,
        o = origin.node(),
        l = logs.node(),
    ));
    for _ in 0..3 {
        assert_eq!(node.proxy().get("/a").await.status, 200);
    }
    assert!(logs.requests().is_empty(), "nothing is due for ten minutes");
    let n = node.node.take().unwrap();
    tokio::task::spawn_blocking(move || n.shutdown())
        .await
        .unwrap();
    let sent = logs.requests();
    assert_eq!(sent.len(), 1, "the queue went out as the worker stopped");
    let batch: Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(batch.as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_route_logger_and_a_global_logger_keep_their_own_view_of_the_response() {
    let origin = TestOrigin::http1().route("/", "the body").run().await;
    let logs = log_server().await;
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
global_rules:
  - id: g
    plugins:
      http-logger: {{uri: "http://{l}/logs/global", batch_max_size: 1}}
routes:
  - uri: /a
    upstream_id: o
    plugins:
      http-logger: {{uri: "http://{l}/logs/route", batch_max_size: 1, include_resp_body: true}}
"#,
        o = origin.node(),
        l = logs.node(),
    ));
    assert_eq!(node.proxy().get("/a").await.status, 200);
    eventually("both entries", || logs.requests().len() >= 2).await;
    let entry = |path: &str| -> Value {
        let r = logs.requests().into_iter().find(|r| r.uri == path).unwrap();
        serde_json::from_slice(&r.body).unwrap()
    };
    let global = entry("/logs/global");
    assert!(
        global["response"].get("body").is_none(),
        "the global logger did not ask for the body: {global}"
    );
    assert!(
        global["response"]["headers"]
            .as_object()
            .is_some_and(|h| !h.is_empty()),
        "the global logger keeps the response's headers: {global}"
    );
    let route = entry("/logs/route");
    assert_eq!(route["response"]["body"], "the body", "{route}");
    assert!(
        route["response"]["headers"]
            .as_object()
            .is_some_and(|h| !h.is_empty()),
        "{route}"
    );
}

/// Stand-ins that check the documented wire formats of servers that cannot run here: Loki's
/// push API (Loki is AGPL-licensed, not to be used here), Elasticsearch's bulk API and
/// Splunk's HTTP Event Collector (neither is served by the package registries reachable
/// here). Each answers as the real server does and records what it got.
#[tokio::test]
async fn loki_elasticsearch_and_splunk_get_their_documented_wire_formats() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let standins = TestOrigin::http1()
        // Loki: POST /loki/api/v1/push, JSON, 204 No Content.
        .handler("/loki/api/v1/push", |_| Reply::status(204))
        // Elasticsearch: POST /_bulk, NDJSON, 200 with the per-item results.
        .handler("/_bulk", |r| {
            let lines = r
                .body
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count();
            Reply::ok(format!(
                r#"{{"took":1,"errors":false,"items":[{}]}}"#,
                vec![r#"{"index":{"status":201}}"#; lines / 2].join(",")
            ))
            .header("content-type", "application/json")
        })
        // Splunk HEC: POST /services/collector, 200 {"text":"Success","code":0}.
        .handler("/services/collector", |r| {
            if r.header("authorization") == Some("Splunk 12345678-abcd") {
                Reply::ok(r#"{"text":"Success","code":0}"#)
            } else {
                Reply::status(401).body(r#"{"text":"Invalid token","code":4}"#)
            }
        })
        .run()
        .await;
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - id: loki
    uri: /loki/*
    upstream_id: o
    plugins:
      loki-logger: {{endpoint_addrs: ["http://{s}"], tenant_id: team-a, batch_max_size: 3, inactive_timeout: 1, log_labels: {{job: gw, route: "$route_id", path: "$uri", host: "${{host}}"}}, headers: {{X-Extra: "1"}}}}
  - id: es
    uri: /es
    upstream_id: o
    plugins:
      elasticsearch-logger: {{endpoint_addrs: ["http://{s}"], field: {{index: "gw-$route_id"}}, auth: {{username: elastic, password: changeme}}, batch_max_size: 2, inactive_timeout: 1}}
  - id: splunk
    uri: /splunk
    upstream_id: o
    plugins:
      splunk-hec-logging: {{endpoint: {{uri: "http://{s}/services/collector", token: 12345678-abcd, channel: chan-1}}, batch_max_size: 2, inactive_timeout: 1}}
"#,
        o = origin.node(),
        s = standins.node(),
    ));
    let cl = node.proxy();
    for path in [
        "/loki/a", "/loki/b", "/loki/a", "/es", "/es", "/splunk", "/splunk",
    ] {
        assert_eq!(cl.get(path).await.status, 200, "{path}");
    }
    eventually("a push, a bulk and a collector call", || {
        let r = standins.requests();
        ["/loki/api/v1/push", "/_bulk", "/services/collector"]
            .iter()
            .all(|p| r.iter().any(|x| x.uri == *p))
    })
    .await;
    let got = |path: &str| {
        standins
            .requests()
            .into_iter()
            .find(|r| r.uri == path)
            .unwrap()
    };

    // Loki: two streams (one per route's labels), values [nanoseconds, line].
    let push = got("/loki/api/v1/push");
    assert_eq!(push.header("x-scope-orgid"), Some("team-a"));
    assert_eq!(push.header("x-extra"), Some("1"));
    assert_eq!(push.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_slice(&push.body).unwrap();
    let streams = body["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "{body}");
    let a = streams
        .iter()
        .find(|s| s["stream"]["path"] == "/loki/a")
        .unwrap();
    assert_eq!(
        a["stream"],
        serde_json::json!({"job": "gw", "route": "loki", "path": "/loki/a", "host": "127.0.0.1"})
    );
    assert_eq!(a["values"].as_array().unwrap().len(), 2);
    let ts = a["values"][0][0].as_str().unwrap();
    assert!(
        ts.len() >= 19 && ts.bytes().all(|b| b.is_ascii_digit()),
        "{ts}"
    );
    let line: Value = serde_json::from_str(a["values"][0][1].as_str().unwrap()).unwrap();
    assert_eq!(line["route_id"], "loki");
    assert_eq!(line["request"]["uri"], "/loki/a");

    // Elasticsearch: NDJSON action and document pairs, basic auth.
    let bulk = got("/_bulk");
    assert_eq!(bulk.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(
        bulk.header("authorization"),
        Some("Basic ZWxhc3RpYzpjaGFuZ2VtZQ==")
    );
    let text = String::from_utf8(bulk.body.to_vec()).unwrap();
    assert!(text.ends_with('\n'), "the bulk body ends with a newline");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0], serde_json::json!({"index": {"_index": "gw-es"}}));
    assert_eq!(lines[1]["route_id"], "es");
    assert_eq!(lines[2], lines[0]);

    // Splunk HEC: events back to back, the token, the channel.
    let hec = got("/services/collector");
    assert_eq!(hec.header("x-splunk-request-channel"), Some("chan-1"));
    let events: Vec<Value> = serde_json::Deserializer::from_slice(&hec.body)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect();
    assert_eq!(events.len(), 2);
    let e = &events[0];
    assert_eq!(e["source"], "apache-apisix-splunk-hec-logging");
    assert_eq!(e["sourcetype"], "_json");
    assert!(e["time"].as_f64().unwrap() > 1.7e9);
    assert!(e["host"].is_string());
    assert_eq!(e["event"]["request_method"], "GET");
    assert_eq!(e["event"]["response_status"], 200);
    assert!(
        e["event"]["request_url"]
            .as_str()
            .unwrap()
            .ends_with("/splunk")
    );
    assert!(
        e["event"].get("route_id").is_none(),
        "APISIX's selection only"
    );
}

/// A stand-in for the DogStatsD agent (a UDP socket that reads its documented line format:
/// the Datadog agent is not served by the registries reachable here).
#[tokio::test]
async fn datadog_sends_dogstatsd_lines_tagged_as_apisix_tags_them() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let agent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = agent.local_addr().unwrap().port();
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
plugin_metadata:
  - {{id: datadog, host: 127.0.0.1, port: {port}, namespace: gw, constant_tags: ["source:sluice-test"]}}
routes:
  - id: r1
    name: orders
    uri: /orders
    upstream_id: o
    plugins:
      datadog: {{batch_max_size: 1, include_method: true, constant_tags: ["team:a"]}}
"#,
        o = origin.node(),
    ));
    assert_eq!(node.proxy().get("/orders").await.status, 200);
    let mut buf = vec![0u8; 65_536];
    let n = tokio::time::timeout(Duration::from_secs(10), agent.recv(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(buf[..n].to_vec()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let names: Vec<&str> = lines.iter().map(|l| l.split(':').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "gw.request.counter",
            "gw.request.latency",
            "gw.upstream.latency",
            "gw.apisix.latency",
            "gw.ingress.size",
            "gw.egress.size"
        ],
        "{text}"
    );
    assert!(lines[0].starts_with("gw.request.counter:1|c|#"), "{text}");
    assert!(lines[1].contains("|h|#"), "{text}");
    assert!(lines[4].contains("|ms|#"), "{text}");
    let tags: Vec<&str> = lines[0].split("|#").nth(1).unwrap().split(',').collect();
    for want in [
        "source:sluice-test",
        "team:a",
        "route_name:orders",
        "method:GET",
        "response_status:200",
        "response_status_class:2xx",
        "scheme:http",
        "balancer_ip:127.0.0.1",
    ] {
        assert!(tags.contains(&want), "{want} in {tags:?}");
    }
}
