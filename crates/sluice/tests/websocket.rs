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
        "routes:\n  - uri: /ws\n    upstream: {{nodes: {{\"{echo}\": 1}}}}\n"
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
        "routes:\n  - uri: /ws\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
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

#[tokio::test]
async fn routes_with_websocket_disabled_do_not_forward_the_upgrade() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /ws\n    enable_websocket: false\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        origin.node()
    ));
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        .await;
    assert_eq!(c.response().await.status, 200);
    let got = origin.last();
    assert!(
        !got.has_header("upgrade") && !got.has_header("connection"),
        "{:?}",
        got.headers
    );
}

#[tokio::test]
async fn an_idle_websocket_is_closed_after_the_read_timeout_and_a_busy_one_is_not() {
    let echo = common::ws_echo().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /ws\n    upstream: {{nodes: {{\"{echo}\": 1}}, timeout: {{read: 0.5}}}}\n"
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
