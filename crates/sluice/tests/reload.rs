//! Hot reload under load: clients keep sending requests while the configuration changes a
//! hundred times, through the admin API and through edits of the file, some changing only
//! routes and some recompiling everything. No request may fail, a WebSocket and a streaming
//! response on unchanged routes must survive every change, and the keep-alive pool and the
//! rate-limit counter of unchanged resources must carry over.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::TestNode;
use futures_util::{SinkExt, StreamExt};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_testkit::TestOrigin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// An origin that answers one request with a chunked body, one `tick\n` chunk every 10 ms,
/// until `stop` is set; then ends the body. Returns its address and the number of chunks sent.
async fn ticking_origin(stop: Arc<AtomicBool>) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let count = sent.clone();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await.unwrap();
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .await
            .unwrap();
        while !stop.load(Ordering::SeqCst) {
            s.write_all(b"5\r\ntick\n\r\n").await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        s.write_all(b"0\r\n\r\n").await.unwrap();
        let _ = s.read(&mut buf).await;
    });
    (addr, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_reloads_under_load_fail_no_request_and_cut_no_connection() {
    let a = TestOrigin::http1().name("a").run().await;
    let echo = common::ws_echo().await;
    let stop_stream = Arc::new(AtomicBool::new(false));
    let (ticking, ticks) = ticking_origin(stop_stream.clone()).await;
    let n = Arc::new(TestNode::start(&format!(
        "upstreams:\n  - {{id: a, nodes: {{\"{}\": 1}}, keepalive_pool: {{requests: 1000000}}}}\nroutes:\n  - {{id: hot, uri: /hot, upstream_id: a}}\n  - {{id: limited, uri: /limited, upstream_id: a, plugins: {{limit-count: {{count: 100000, time_window: 3600}}}}}}\n  - {{id: ws, uri: /ws, enable_websocket: true, upstream: {{nodes: {{\"{echo}\": 1}}}}}}\n  - {{id: stream, uri: /stream, upstream: {{nodes: {{\"{ticking}\": 1}}}}}}\n",
        a.node()
    )));

    // Load: three keep-alive clients and one that opens a connection per request.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let mut load = Vec::new();
    for keepalive in [true, true, true, false] {
        let (n, stop, ok, failures) = (n.clone(), stop.clone(), ok.clone(), failures.clone());
        load.push(tokio::spawn(async move {
            let client = n.proxy();
            let mut conn = client.connection().await;
            while !stop.load(Ordering::SeqCst) {
                if !keepalive {
                    conn = client.connection().await;
                }
                match conn.get("/hot").await {
                    Ok(r) if r.status == StatusCode::OK && r.body == "a" => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        // `limits.keepalive_requests` reached: the gateway says so and closes.
                        if r.header("connection") == Some("close") {
                            conn = client.connection().await;
                        }
                    }
                    Ok(r) => failures.lock().push(format!("{} {}", r.status, r.text())),
                    Err(e) => {
                        failures.lock().push(e.to_string());
                        conn = client.connection().await;
                    }
                }
            }
        }));
    }

    // The connections that must survive: a WebSocket and a streaming response.
    let io = tokio::net::TcpStream::connect(n.node().server().local_addrs()[0])
        .await
        .unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async("ws://gateway/ws", io)
        .await
        .unwrap();
    let streaming = {
        let c = n.proxy();
        tokio::spawn(async move { c.get("/stream").await })
    };
    // The counter and the pool before.
    let limited = |n: Arc<TestNode>| async move {
        let r = n.proxy().get("/limited").await;
        assert_eq!(r.status, 200);
        r.header("x-ratelimit-remaining")
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    for _ in 0..4 {
        limited(n.clone()).await;
    }
    assert_eq!(limited(n.clone()).await, 99_995);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pool_before = a.connections();

    let mut full = 0;
    for k in 0..100 {
        let version = n.version();
        let probe = match k % 10 {
            // Admin writes of one route: applied alone.
            0 | 2 | 4 | 6 | 8 => {
                let (s, v) = n
                    .admin(
                        Method::PUT,
                        &format!("/admin/routes/churn-{k}"),
                        Some(json!({"uri": format!("/churn/{k}"), "upstream_id": "a"})),
                    )
                    .await;
                assert_eq!(s, StatusCode::CREATED, "{v}");
                Some(format!("/churn/{k}"))
            }
            // An admin write of an upstream: the whole configuration recompiled.
            5 => {
                full += 1;
                let (s, v) = n
                    .admin(
                        Method::PUT,
                        &format!("/admin/upstreams/spare-{k}"),
                        Some(json!({"nodes": {a.node(): 1}})),
                    )
                    .await;
                assert_eq!(s, StatusCode::CREATED, "{v}");
                None
            }
            // File edits: a route added (applied alone), or an upstream (recompiled whole).
            other => {
                let text = std::fs::read_to_string(&n.file).unwrap();
                let mut doc = sluice_admin::parse_doc(&text).unwrap();
                let (list, item) = if other == 9 {
                    full += 1;
                    (
                        "upstreams",
                        json!({"id": format!("file-up-{k}"), "nodes": {a.node(): 1}}),
                    )
                } else {
                    (
                        "routes",
                        json!({"id": format!("file-{k}"), "uri": format!("/file/{k}"), "upstream_id": "a"}),
                    )
                };
                doc.get_mut(list)
                    .and_then(Value::as_array_mut)
                    .unwrap()
                    .push(item);
                let tmp = n.dir.join("edit.tmp");
                std::fs::write(&tmp, sluice_admin::render(&doc).unwrap()).unwrap();
                std::fs::rename(&tmp, &n.file).unwrap();
                n.wait_for_version_after(version).await;
                (other != 9).then(|| format!("/file/{k}"))
            }
        };
        assert_ne!(n.version(), version, "change {k} applied");
        if let Some(path) = probe {
            assert_eq!(n.proxy().get(&path).await.status, 200, "{path}");
        }
        ws.send(Message::text(format!("after change {k}")))
            .await
            .unwrap();
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::text(format!("after change {k}"))
        );
    }
    assert_eq!(full, 20);
    let stats = n.node().control().stats();
    assert_eq!((stats.applied, stats.rejected), (100, 0), "{stats:?}");

    stop.store(true, Ordering::SeqCst);
    for l in load {
        l.await.unwrap();
    }
    stop_stream.store(true, Ordering::SeqCst);
    let body = streaming.await.unwrap();
    assert_eq!(body.status, 200);
    assert_eq!(
        body.body.len(),
        5 * ticks.load(Ordering::SeqCst),
        "every chunk arrived"
    );
    assert!(ticks.load(Ordering::SeqCst) > 20);
    ws.close(None).await.unwrap();

    let failures = failures.lock().clone();
    assert!(
        failures.is_empty(),
        "{} failed requests: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let served = ok.load(Ordering::SeqCst);
    assert!(
        served > 300,
        "only {served} requests were served during the reloads"
    );
    // Unchanged resources kept their state: the counter went on, the pool was reused.
    assert_eq!(limited(n.clone()).await, 99_994);
    let new_conns = a.connections() - pool_before;
    assert!(
        new_conns <= 8,
        "{new_conns} new connections to the origin over 100 reloads and {served} requests"
    );
}
