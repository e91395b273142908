//! WebSocket upgrades through the gateway: a real tungstenite client and server.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use sluice_testkit::{Gateway, RawClient, Reply, TestOrigin};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn websocket_messages_flow_both_ways_until_close() {
    let echo = common::ws_echo().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /ws\n    enable_websocket: true\n    upstream: {{nodes: {{\"{echo}\": 1}}}}\n"
    ));
    let io = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(format!("ws://{}/ws", gw.addr()), io)
        .await
        .unwrap();
    assert_eq!(resp.status(), 101);
    for i in 0..20 {
        ws.send(Message::text(format!("message {i}")))
            .await
            .unwrap();
        let back = ws.next().await.unwrap().unwrap();
        assert_eq!(back, Message::text(format!("message {i}")));
    }
    let big = vec![7u8; 200_000];
    ws.send(Message::binary(big.clone())).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::binary(big));
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn bytes_after_a_refused_upgrade_are_parsed_as_http_not_tunneled() {
    // CVE-2026-2833 (Pingora): bytes that follow an upgrade request the origin did not accept
    // were passed through raw, smuggling a request past the gateway's routing.
    let origin = TestOrigin::http1()
        .handler("/ws", |_| Reply::ok("no upgrade here"))
        .run()
        .await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /ws\n    enable_websocket: true\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        origin.node()
    ));
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(
        b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nGET /admin HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await;
    let first = c.response().await;
    assert_eq!(
        (first.status, first.text().as_str()),
        (200, "no upgrade here")
    );
    let second = c.response().await;
    assert_eq!(
        second.status, 404,
        "the second request must be routed by the gateway"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        origin.requests().iter().all(|r| r.uri != "/admin"),
        "a request was smuggled to the origin"
    );
    assert_eq!(origin.last().header("upgrade"), Some("websocket"));
}

/// h2c smuggling (Bishop Fox's h2csmuggler): a proxy that forwards `Upgrade: h2c` and then
/// tunnels once the node answers 101 lets the client speak HTTP/2 straight to the node, past
/// every route and plugin. Sluice never forwards an `h2c` upgrade, even on a route with
/// WebSockets on, and a 101 the node sends anyway is refused, never tunnelled.
#[tokio::test]
async fn h2c_upgrades_are_never_tunnelled_even_where_websockets_are_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A node that answers every request with 101 to h2c and records all it is sent.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<u8>::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let mut answered = false;
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    record.lock().extend_from_slice(&buf[..n]);
                    if !answered {
                        answered = true;
                        let _ = s
                            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
                            .await;
                    }
                }
            });
        }
    });
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    enable_websocket: true\n    upstream: {{nodes: {{\"{node}\": 1}}}}\n"
    ));
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(
        b"GET /public HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    )
    .await;
    let r = c.response().await;
    assert_ne!(r.status, 101, "an h2c upgrade was tunnelled");
    assert_eq!(r.status, 502, "a 101 nobody asked for is the node's error");
    // What the client sends next is HTTP/1.1 to the gateway, or nothing: the HTTP/2 preface
    // and a request for the hidden path never reach the node.
    c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0GET /internal HTTP/1.1\r\nHost: a\r\n\r\n")
        .await;
    let _ = c.closed_within(Duration::from_secs(5)).await;
    let seen = String::from_utf8_lossy(&seen.lock()).to_ascii_lowercase();
    assert!(seen.starts_with("get /public http/1.1\r\n"), "{seen}");
    for never in ["upgrade", "http2-settings", "pri *", "/internal"] {
        assert!(!seen.contains(never), "the node saw {never:?}: {seen}");
    }
}

#[tokio::test]
async fn websocket_is_the_routes_choice_else_its_services_else_off_as_in_apisix() {
    // APISIX: a route's `enable_websocket`, else its service's, else false. A route that does
    // not say must not forward the upgrade headers (it did, with a default of true).
    let origin = TestOrigin::http1().run().await;
    let node = origin.node();
    let gw = Gateway::start(&format!(
        "services:
  - id: ws-on
    enable_websocket: true
    upstream: {{nodes: {{\"{node}\": 1}}}}
routes:
  - uri: /unset
    upstream: {{nodes: {{\"{node}\": 1}}}}
  - uri: /off
    enable_websocket: false
    upstream: {{nodes: {{\"{node}\": 1}}}}
  - uri: /from-service
    service_id: ws-on
  - uri: /route-wins
    service_id: ws-on
    enable_websocket: false
"
    ));
    for (path, forwarded) in [
        ("/unset", false),
        ("/off", false),
        ("/from-service", true),
        ("/route-wins", false),
    ] {
        let mut c = RawClient::connect(gw.addr()).await;
        c.send(
            format!(
                "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
            )
            .as_bytes(),
        )
        .await;
        assert_eq!(c.response().await.status, 200, "{path}");
        let got = origin.last();
        assert_eq!(got.uri, path);
        assert_eq!(
            got.has_header("upgrade"),
            forwarded,
            "{path}: {:?}",
            got.headers
        );
        if !forwarded {
            assert!(!got.has_header("connection"), "{path}: {:?}", got.headers);
        }
    }
}

#[tokio::test]
async fn an_idle_websocket_is_closed_after_the_read_timeout_and_a_busy_one_is_not() {
    let echo = common::ws_echo().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /ws\n    enable_websocket: true\n    upstream: {{nodes: {{\"{echo}\": 1}}, timeout: {{read: 0.5}}}}\n"
    ));
    let io = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{}/ws", gw.addr()), io)
        .await
        .unwrap();
    // Busy for longer than the timeout: a message every 200 ms for 1.2 s keeps it open.
    for i in 0..6 {
        ws.send(Message::text(format!("m{i}"))).await.unwrap();
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::text(format!("m{i}"))
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Then idle: the gateway closes the tunnel.
    let started = std::time::Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("closed in time");
    assert!(
        matches!(end, None | Some(Err(_)) | Some(Ok(Message::Close(_)))),
        "{end:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn an_open_websocket_counts_against_limits_until_it_closes_and_is_logged_then() {
    // The tunnel runs after the request's future is given back (its memory with it): what
    // the request held must still be held while the tunnel is open (limit-conn's slot,
    // `max_inflight`, as APISIX counts an open WebSocket), and its log line is written when
    // it closes, with the bytes the node sent through it, as NGINX logs an upgrade.
    let echo = common::ws_echo().await;
    let dir = std::env::temp_dir().join(format!("sluice-ws-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let access = dir.join("access.log");
    let gw = Gateway::start(&format!(
        "workers: 1
log: {{access: {{path: \"{}\", format: '$request_uri $status $body_bytes_sent', flush: 10ms}}}}
routes:
  - uri: /ws
    enable_websocket: true
    upstream: {{nodes: {{\"{echo}\": 1}}}}
    plugins:
      limit-conn: {{conn: 1, burst: 0, default_conn_delay: 0.1, rejected_code: 429}}
  - uri: /shed
    enable_websocket: true
    max_inflight: 1
    upstream: {{nodes: {{\"{echo}\": 1}}}}
",
        access.display()
    ));
    let open = |path: &'static str| {
        let addr = gw.addr();
        async move {
            let io = tokio::net::TcpStream::connect(addr).await.unwrap();
            tokio_tungstenite::client_async(format!("ws://{addr}{path}"), io).await
        }
    };
    for (path, refused) in [("/ws", 429), ("/shed", 503)] {
        let (mut first, _) = open(path).await.unwrap();
        first.send(Message::text("hello")).await.unwrap();
        assert_eq!(first.next().await.unwrap().unwrap(), Message::text("hello"));
        match open(path).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
                assert_eq!(
                    r.status(),
                    refused,
                    "{path}: a second tunnel while one is open"
                )
            }
            other => panic!(
                "{path}: a second tunnel was let through: {:?}",
                other.map(|r| r.1)
            ),
        }
        first.close(None).await.unwrap();
        while first.next().await.is_some() {}
        drop(first);
        // Closed: its slot is free again.
        let mut again = None;
        for _ in 0..50 {
            if let Ok((ws, _)) = open(path).await {
                again = Some(ws);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut again = again.expect("a tunnel once the first closed");
        again.close(None).await.unwrap();
        while again.next().await.is_some() {}
        drop(again);
    }
    gw.shutdown();
    let log = std::fs::read_to_string(&access).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // Each tunnel has its line once it closed, with the bytes the node sent through it: the
    // echoed "hello" (7 bytes framed) and whatever closing it sent for the first, only that
    // for the second.
    for path in ["/ws", "/shed"] {
        let sent: Vec<u64> = log
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{path} 101 ")))
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(sent.len(), 2, "{path}: {log}");
        assert!(sent[0] >= 7 && sent[1] == sent[0] - 7, "{path}: {log}");
    }
    assert!(
        log.contains("/ws 429 ") && log.contains("/shed 503 "),
        "{log}"
    );
}

/// A masked client frame (RFC 6455 §5.2) with a payload shorter than 126 bytes.
fn client_frame(opcode: u8, payload: &[u8]) -> bytes::Bytes {
    let mask = [0x11u8, 0x22, 0x33, 0x44];
    let mut f = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f.into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_over_http2_use_extended_connect() {
    let echo = common::ws_echo().await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nroutes:\n  - uri: /ws\n    enable_websocket: true\n    upstream: {{nodes: {{\"{echo}\": 1}}}}\n"
    ));
    let tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    // The server announces SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441 §3).
    for _ in 0..100 {
        if client.is_extended_connect_protocol_enabled() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(client.is_extended_connect_protocol_enabled());
    let mut req = http::Request::builder()
        .method("CONNECT")
        .uri(format!("http://{}/ws", gw.addr()))
        .header("sec-websocket-version", "13")
        .body(())
        .unwrap();
    req.extensions_mut()
        .insert(h2::ext::Protocol::from_static("websocket"));
    let (resp, mut up) = client.send_request(req, false).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(!resp.headers().contains_key("sec-websocket-accept"));
    let mut down = resp.into_body();
    let mut got = Vec::new();
    for text in ["hello", "over h2"] {
        up.send_data(client_frame(0x1, text.as_bytes()), false)
            .unwrap();
        // The echo comes back as an unmasked text frame.
        let want = [&[0x81, text.len() as u8][..], text.as_bytes()].concat();
        while got.len() < want.len() {
            let chunk = tokio::time::timeout(Duration::from_secs(5), down.data())
                .await
                .expect("the echo within 5 s")
                .unwrap()
                .unwrap();
            let _ = down.flow_control().release_capacity(chunk.len());
            got.extend_from_slice(&chunk);
        }
        assert_eq!(got.drain(..want.len()).as_slice(), want.as_slice());
    }
    // A close frame: the node closes, and the stream ends.
    up.send_data(client_frame(0x8, &[]), false).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = down.data().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream ends after the close");

    // A route that does not take WebSockets: the upstream's plain 200 is not a tunnel.
    let origin = TestOrigin::http1()
        .route("/", "not a websocket")
        .run()
        .await;
    let gw2 = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nroutes:\n  - uri: /*\n    enable_websocket: false\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        origin.node()
    ));
    let tcp = tokio::net::TcpStream::connect(gw2.addr()).await.unwrap();
    let (c2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut c2 = c2.ready().await.unwrap();
    while !c2.is_extended_connect_protocol_enabled() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut req = http::Request::builder()
        .method("CONNECT")
        .uri(format!("http://{}/ws", gw2.addr()))
        .body(())
        .unwrap();
    req.extensions_mut()
        .insert(h2::ext::Protocol::from_static("websocket"));
    let (resp, mut up2) = c2.send_request(req, false).unwrap();
    // Bytes sent before the upgrade is known must not reach the engine as a second request.
    up2.send_data(
        bytes::Bytes::from_static(b"GET /smuggled HTTP/1.1\r\nhost: a\r\n\r\n"),
        false,
    )
    .unwrap();
    assert_eq!(resp.await.unwrap().status(), 502);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let paths: Vec<String> = origin.requests().iter().map(|r| r.uri.clone()).collect();
    assert_eq!(paths, vec!["/ws".to_owned()], "nothing smuggled");

    // A plain CONNECT (no :protocol) is still refused.
    let req = http::Request::builder()
        .method("CONNECT")
        .uri(format!("{}", gw.addr()))
        .body(())
        .unwrap();
    let (resp, _up) = client.send_request(req, false).unwrap();
    assert!(resp.await.is_err(), "reset");
}
